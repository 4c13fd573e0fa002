"""FaultServer lifecycle, TLS plumbing, refused_port, and robustness against bad clients."""

from __future__ import annotations

import socket
import ssl

import pytest
import trio

from trio_retry import Client
from trio_retry.testing import FaultServer, Respond, Stall, refused_port

from .conftest import StartServer
from .raw import H1Client, H2Client, close_opened, connect, wait_until


def test_url_and_port_need_a_started_server() -> None:
    server = FaultServer(http2=False)
    assert repr(server) == (
        "<FaultServer not serving http/1.1: 0 requests (0 executed), 0 connections,"
        " 0 actions queued>"
    )
    with pytest.raises(RuntimeError, match="not serving"):
        _ = server.port
    with pytest.raises(RuntimeError, match="not serving"):
        _ = server.url


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_concurrent_streams": -1},
        {"idle_timeout": 0},
        {"read_timeout": float("inf")},
        {"write_timeout": -1.0},
    ],
)
def test_constructor_validates(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - messages vary by argument
        FaultServer(**kwargs)  # type: ignore[arg-type]


def test_client_ssl_context_needs_tls() -> None:
    with pytest.raises(RuntimeError, match="tls=False"):
        FaultServer().client_ssl_context()


async def test_url_port_and_serving_once(start_server: StartServer) -> None:
    server = await start_server()
    assert server.url == f"http://127.0.0.1:{server.port}"
    tls = await start_server(tls=True)
    assert tls.url == f"https://127.0.0.1:{tls.port}"
    with pytest.raises(RuntimeError, match="only once"):
        await server.serve()


async def test_cancelling_serve_ends_promptly_with_busy_connections() -> None:
    server = FaultServer()
    server.default = Stall(30.0)
    with trio.fail_after(3):
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve)
            try:
                h1 = await H1Client.open(server)
                await h1.send_request("GET", "/stalled")
                h2c = await H2Client.open(server)
                await h2c.request("GET", "/stalled")
                # Both in their stall: an HTTP/2 request is recorded at its HEADERS and
                # executed by its stream's task a moment later.
                await wait_until(
                    lambda: len(server.requests) == 2 and all(r.executed for r in server.requests)
                )
                nursery.cancel_scope.cancel()
            finally:
                await close_opened()
    assert [r.executed for r in server.requests] == [True, True]
    with pytest.raises(OSError, match="all attempts to connect"):  # the listener is closed
        await trio.open_tcp_stream("127.0.0.1", server.port)


async def test_tls_without_alpn_sniffs_the_protocol(start_server: StartServer) -> None:
    server = await start_server(tls=True)
    with trio.fail_after(5):
        # The server's client context sets no ALPN: the server then sniffs for the preface.
        stream = await connect(server)
        assert isinstance(stream, trio.SSLStream)
        assert stream.selected_alpn_protocol() is None
        resp = await H1Client(stream).request("GET", "/")
        assert resp.status == 200
        h2c = H2Client(await connect(server))
        h2c.conn.initiate_connection()
        await h2c.flush()
        state = await h2c.response(await h2c.request("GET", "/"))
    assert state.status == 200
    assert [r.http_version for r in server.requests] == ["HTTP/1.1", "HTTP/2"]


async def test_certificate_names_and_untrusted_clients(start_server: StartServer) -> None:
    server = await start_server(tls=True)
    with trio.fail_after(5):
        tcp = await trio.open_tcp_stream("127.0.0.1", server.port)
        tls = trio.SSLStream(tcp, server.client_ssl_context(), server_hostname="localhost")
        await tls.do_handshake()  # the certificate also names localhost
        await tls.aclose()
        # A client that does not trust the CA fails its handshake; the server shrugs it off.
        tcp = await trio.open_tcp_stream("127.0.0.1", server.port)
        untrusting = trio.SSLStream(tcp, ssl.create_default_context(), server_hostname="127.0.0.1")
        with pytest.raises(trio.BrokenResourceError) as info:
            await untrusting.do_handshake()
        assert isinstance(info.value.__cause__, ssl.SSLCertVerificationError)
        await trio.aclose_forcefully(untrusting)
        resp = await (await H1Client.open(server)).request("GET", "/")
    assert resp.status == 200
    assert server.connections_accepted == 3


async def test_refused_port() -> None:
    port = refused_port()
    assert 0 < port < 65536
    with pytest.raises(OSError, match="all attempts to connect") as info:
        await trio.open_tcp_stream("127.0.0.1", port)
    # trio groups the refusal of each address it tried under __cause__.
    refusals = getattr(info.value.__cause__, "exceptions", [info.value.__cause__])
    assert refusals
    assert all(isinstance(e, ConnectionRefusedError) for e in refusals)
    sock = socket.socket()
    with sock, pytest.raises(ConnectionRefusedError):
        sock.connect(("127.0.0.1", port))


async def test_requests_is_a_live_record(start_server: StartServer) -> None:
    server = await start_server()
    record = server.requests
    server.script(Respond(200), Respond(201))
    with trio.fail_after(5):
        for _ in range(2):
            await (await H1Client.open(server)).request("GET", "/")
    assert record is server.requests
    assert len(record) == 2
    assert repr(server) == (
        f"<FaultServer {server.url} h2+http/1.1: 2 requests (2 executed), 2 connections,"
        " 0 actions queued>"
    )
    assert record[0].time <= record[1].time
    assert [r.connection_id for r in record] == [1, 2]
    assert server.connections_accepted == 2


async def test_silent_and_vanishing_clients_cost_nothing(start_server: StartServer) -> None:
    server = await start_server()
    with trio.fail_after(5):
        # Connect and leave at once, with and without bytes.
        await (await connect(server)).aclose()
        half = await connect(server)
        await half.send_all(b"GET /half HTTP/1.1\r\nHost: x\r\n")
        await half.aclose()
        resp = await (await H1Client.open(server)).request("GET", "/whole")
    assert resp.status == 200
    assert [r.path for r in server.requests] == ["/whole"]
    assert server.connections_accepted == 3


async def test_h2_preface_on_an_http1_only_server_is_not_executed(nursery: trio.Nursery) -> None:
    from trio_retry.testing import FaultServer

    server = FaultServer(http2=False)
    await nursery.start(server.serve)
    with trio.fail_after(5):
        async with await trio.open_tcp_stream("127.0.0.1", server.port) as stream:
            await stream.send_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            while await stream.receive_some(1024):
                pass
    assert [(r.method, r.executed) for r in server.requests] == [("PRI", False)]
    assert server.executed_count() == 0


@pytest.mark.parametrize("http2", [False, True], ids=["http1", "h2c"])
async def test_latin1_header_values_are_sent(start_server: StartServer, http2: bool) -> None:
    # h11 encodes str as ASCII: "café" failed in serve on HTTP/1.1; every protocol now sends
    # one byte per character, as Respond's check promises.
    server = await start_server()
    # Whitespace inside a value, and an empty value, are sent as given by both protocols
    # (at either end, Respond refuses it: test_fault_script).
    headers = {"X-Name": "caf\xe9 \xa3", "X-Inner": "a \t b", "X-Empty": ""}
    server.route("GET", "/", Respond(200, headers=headers, body=b"x"))
    async with Client(http2_prior_knowledge=http2) as client:
        with trio.fail_after(5):
            response = await client.get(server.url + "/")
    assert response.status_code == 200
    assert {name: response.headers[name] for name in headers} == headers
    assert response.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
