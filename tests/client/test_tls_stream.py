"""The client over TLS on its socket (``_wire/tlssock.py``) and over ``trio.SSLStream``
(``TRIO_RETRY_TLS_FAST_PATH`` unset or ``1``, and ``0``): the same stages, evidence and bounds,
end to end.

Each test runs with the switch on and off; the stream the connection used is checked, so a
test cannot pass on the other one by accident. FaultServer's faults prove the evidence; nginx
(started here) proves a server we did not write; an upload to a slow TLS reader proves the write
bound still counts from the socket's last progress (``RawSocketStream.on_progress``).
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

import trio_retry
from tests.support.fixtures import StartNginx
from tests.support.fixtures import nginx as nginx
from tests.support.tls_peer import Certs
from trio_retry import Evidence, FailureCategory, Stage, StageTimeouts
from trio_retry._wire.tlschoice import ENV
from trio_retry._wire.tlssock import TLSSocketStream
from trio_retry.testing import (
    CloseAfterBody,
    CloseBeforeRead,
    FaultServer,
    PartialBody,
    Respond,
)

from .proxy import LoopbackProxy
from .socks_server import SocksServer

ONCE = trio_retry.RetryPolicy(max_attempts=1)
STREAMS = {"socket": TLSSocketStream, "sslstream": trio.SSLStream}


@pytest.fixture(params=list(STREAMS))
def stream(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each TLS stream in turn: the switch's two positions."""
    monkeypatch.setenv(ENV, "1" if request.param == "socket" else "0")
    return str(request.param)


def watch(client: trio_retry.Client) -> list[type]:
    """The type of each TLS stream the client's connections get, in order."""
    seen: list[type] = []
    connector = client._rt.connector
    opener = connector.open_transport

    async def open_transport(*args: Any, **kwargs: Any) -> Any:
        transport = await opener(*args, **kwargs)
        seen.append(type(transport.stream))
        return transport

    connector.open_transport = open_transport
    return seen


@pytest.fixture
async def tls_server(nursery: trio.Nursery) -> FaultServer:
    server = FaultServer(tls=True, http2=False)
    await nursery.start(server.serve)
    return server


@pytest.fixture
async def client(tls_server: FaultServer) -> AsyncIterator[trio_retry.Client]:
    async with trio_retry.Client(ssl_context=tls_server.client_ssl_context(), retry=ONCE) as c:
        yield c


async def test_requests_go_over_the_stream_the_switch_says(
    stream: str, tls_server: FaultServer, client: trio_retry.Client
) -> None:
    seen = watch(client)
    tls_server.default = Respond(200, body=b"x" * 100_000)
    first = await client.get(tls_server.url + "/a")
    second = await client.post(tls_server.url + "/b", content=b"y" * 300_000)
    assert (first.content, second.status) == (b"x" * 100_000, 200)
    assert seen == [STREAMS[stream]]  # one connection, reused
    assert [r.body for r in tls_server.requests] == [b"", b"y" * 300_000]


async def test_a_client_that_owns_its_context_uses_it_too(
    stream: str, tls_server: FaultServer, tmp_path: Any
) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(tls_server.ca_pem)
    async with trio_retry.Client(verify=str(ca), retry=ONCE) as client:
        seen = watch(client)
        response = await client.get(tls_server.url + "/")
    assert response.status == 200
    assert seen == [STREAMS[stream]]


async def test_tls_on_the_socket_unless_the_switch_says_otherwise(
    tls_server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On by default: a client made without the variable puts TLS on its socket."""
    monkeypatch.delenv(ENV, raising=False)
    async with trio_retry.Client(ssl_context=tls_server.client_ssl_context(), retry=ONCE) as c:
        seen = watch(c)
        assert (await c.get(tls_server.url + "/")).status == 200
    assert seen == [TLSSocketStream]


async def test_a_wrong_switch_value_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "perhaps")
    with pytest.raises(ValueError, match=ENV):
        trio_retry.Client()


async def test_a_handshake_failure_is_not_sent_at_tls(stream: str, nursery: trio.Nursery) -> None:
    cleartext = FaultServer(http2=False)  # TLS spoken to it: the handshake fails
    await nursery.start(cleartext.serve)
    url = cleartext.url.replace("http://", "https://")
    async with trio_retry.Client(ssl_context=ssl.create_default_context(), retry=ONCE) as client:
        seen = watch(client)
        with pytest.raises(trio_retry.TLSFailed) as info:
            await client.post(url + "/pay", content=b"x")
    (attempt,) = info.value.attempts
    assert (attempt.stage, attempt.evidence) == (Stage.TLS, Evidence.NOT_SENT)
    assert attempt.category is FailureCategory.TLS_HANDSHAKE
    assert seen == []  # (it failed inside the opener: no transport came back)


async def test_an_untrusted_certificate_is_permanent_and_not_sent(
    stream: str, tls_server: FaultServer
) -> None:
    async with trio_retry.Client(ssl_context=ssl.create_default_context()) as client:
        with pytest.raises(trio_retry.TLSFailed) as info:
            await client.post(tls_server.url + "/pay", content=b"x")
    attempt = info.value.attempts[-1]
    assert (attempt.stage, attempt.evidence) == (Stage.TLS, Evidence.NOT_SENT)
    assert attempt.category is FailureCategory.TLS_CERTIFICATE
    assert len(info.value.attempts) == 1  # permanent: not retried
    assert tls_server.requests == []


@pytest.mark.parametrize("reset", [False, True], ids=["fin", "rst"])
async def test_the_evidence_of_a_connection_that_breaks(
    stream: str, tls_server: FaultServer, client: trio_retry.Client, reset: bool
) -> None:
    seen = watch(client)
    tls_server.route("*", "/never", CloseBeforeRead(reset=reset))
    tls_server.route("*", "/ran", CloseAfterBody(reset=reset))
    tls_server.route("*", "/cut", PartialBody(body=b"p" * 100, declared_length=1000, reset=reset))
    with pytest.raises(trio_retry.TrioRetryError) as never:
        await client.get(tls_server.url + "/never")
    with pytest.raises(trio_retry.HttpAmbiguousExecutionError) as ran:
        await client.post(tls_server.url + "/ran", content=b"x")
    with pytest.raises(trio_retry.ConnectionBroken) as cut:
        await client.get(tls_server.url + "/cut")
    assert never.value.attempts[-1].evidence is Evidence.SENT_NO_RESPONSE
    assert ran.value.attempts[-1].evidence is Evidence.SENT_NO_RESPONSE
    assert cut.value.evidence is Evidence.PARTIAL_RESPONSE
    assert seen == [STREAMS[stream]] * 3  # each break ended its connection


@pytest.mark.parametrize("proxy", ["http", "socks5h"])
async def test_through_a_proxy_tls_stays_on_sslstream(
    proxy: str, tls_server: FaultServer, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A proxy's tunnel takes TLS over trio.SSLStream, the switch on or not."""
    monkeypatch.setenv(ENV, "1")
    server: LoopbackProxy | SocksServer = LoopbackProxy() if proxy == "http" else SocksServer()
    await nursery.start(server.serve)
    async with trio_retry.Client(
        ssl_context=tls_server.client_ssl_context(),
        retry=ONCE,
        proxy=f"{proxy}://127.0.0.1:{server.port}",
    ) as client:
        seen = watch(client)
        with trio.fail_after(10):
            response = await client.get(tls_server.url + "/via")
    assert response.status == 200
    assert seen == [trio.SSLStream]
    assert [r.path for r in tls_server.requests] == ["/via"]


# --- a slow reader over TLS: the write bound counts from the last progress -------------------

BODY = b"u" * (768 * 1024)


async def _upload_to_slow_tls_reader(stop_after: int | None) -> tuple[object, list[type]]:
    """PUT :data:`BODY` over TLS to a listener (16 KiB receive buffer) that reads 8 KiB every
    20 ms (stopping for good after ``stop_after`` bytes), under a 0.3 s write limit."""
    certs = Certs()
    server_ctx = certs.server_context()
    sock = trio.socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    await sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    port = sock.getsockname()[1]

    async def serve() -> None:
        tcp = trio.SocketStream((await sock.accept())[0])
        tls = trio.SSLStream(tcp, server_ctx, server_side=True)
        async with tls:
            got = b""
            for _ in range(100_000):  # bounded
                if stop_after is not None and len(got) >= stop_after:
                    await trio.sleep(60)  # stops reading: the client's write bound ends this
                if b"\r\n\r\n" in got and len(got) >= got.index(b"\r\n\r\n") + 4 + len(BODY):
                    break
                got += await tls.receive_some(8192)
                await trio.sleep(0.02)
            await tls.send_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")

    outcome: object
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve)
        async with trio_retry.Client(
            ssl_context=certs.client_context(),
            stage_timeouts=StageTimeouts(write=0.3),
            retry=ONCE,
        ) as client:
            seen = watch(client)
            with trio.fail_after(30):
                try:
                    outcome = await client.put(f"https://localhost:{port}/up", content=BODY)
                except trio_retry.TrioRetryError as exc:
                    outcome = exc
        nursery.cancel_scope.cancel()
    sock.close()
    return outcome, seen


async def test_an_upload_to_a_slow_tls_reader_is_not_cut(stream: str) -> None:
    """Each 256 KiB write takes about 0.6 s, twice the write limit, but the server reads
    every 20 ms: the stream reports each record's progress, so nothing is cut."""
    response, seen = await _upload_to_slow_tls_reader(None)
    assert isinstance(response, trio_retry.Response), response
    assert response.content == b"ok"
    assert seen == [STREAMS[stream]]


async def test_an_upload_the_tls_server_stops_reading_is_cut(stream: str) -> None:
    error, _ = await _upload_to_slow_tls_reader(100 * 1024)
    assert isinstance(error, trio_retry.DeadlineExceeded), error
    (attempt,) = error.attempts
    assert (attempt.stage, attempt.category) == (Stage.REQUEST_BODY, FailureCategory.TIMEOUT)


# --- nginx ---------------------------------------------------------------------------------------


async def test_nginx_over_tls(stream: str, nginx: StartNginx) -> None:
    server = nginx()
    async with trio_retry.Client(ssl_context=server.ssl_context(http2=False)) as client:
        seen = watch(client)
        gets = [
            await client.get(server.h2_url("/get"), headers={"x-request-id": "g"})
            for _ in range(20)
        ]
        post = await client.post(
            server.h2_url("/post"), content=b"p" * 1_000_000, headers={"x-request-id": "p"}
        )
    assert {(r.http_version, r.content) for r in gets} == {("HTTP/1.1", b"ok")}
    assert post.content == b"posted"
    assert seen == [STREAMS[stream]]
    log = server.log(expect=21)
    assert log.by_request_id() == {"g": 20, "p": 1}  # each executed once, on one connection
    assert len(log.connections()) == 1
    (posted,) = [entry for entry in log.entries if entry.request_id == "p"]
    assert posted.request_length >= 1_000_000
