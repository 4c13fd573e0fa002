"""The HTTP/3 servers we did not write, as the lead's client will meet them: caddy (quic-go)
and hypercorn (aioquic), driven by the aioquic test client (tests/support/h3client.py). These
tests hold the fixtures to what they promise: HTTP/3 on the TCP port's number, bodies both
ways, concurrency, 0-RTT, and a ledger or log that counts what ran."""

from __future__ import annotations

import trio

from tests.support.caddy import BIG, RunningCaddy
from tests.support.h3client import open_h3_client
from tests.support.hypercorn_server import RunningHypercorn

MIB = 1 << 20


async def test_caddy_get_and_post_over_http3(caddy: RunningCaddy) -> None:
    with trio.fail_after(20):
        async with open_h3_client(caddy.port, ca_pem=caddy.ca_pem) as client:
            got = await client.request("GET", "/get", [("x-request-id", "g1")])
            posted = await client.request("POST", "/echo", [("x-request-id", "p1")], b"hello")
            counted = await client.request("GET", "/echo/count")
    assert client.handshake is not None
    assert client.handshake.alpn_protocol == "h3"
    assert (got.status, bytes(got.body)) == (200, b"ok")
    assert (posted.status, bytes(posted.body)) == (200, b"hello")
    assert (counted.status, bytes(counted.body)) == (200, b"executed 2")
    assert caddy.backend.count(request_id="p1") == 1
    assert [e.client_proto for e in caddy.backend.executions] == ["HTTP/3.0", "HTTP/3.0"]
    log = caddy.log(expect=3)
    assert log.protocols() == ["HTTP/3.0"] * 3
    assert (log.count(request_id="g1"), log.count(request_id="p1")) == (1, 1)


async def test_caddy_one_mib_each_way(caddy: RunningCaddy) -> None:
    upload = bytes(reversed(BIG))
    with trio.fail_after(30):
        async with open_h3_client(caddy.port, ca_pem=caddy.ca_pem) as client:
            static = await client.request("GET", "/big.bin")
            echoed = await client.request("PUT", "/echo", body=upload)
    assert (static.status, bytes(static.body)) == (200, BIG)
    assert (echoed.status, len(echoed.body)) == (200, MIB)
    assert bytes(echoed.body) == upload
    assert [e.body_length for e in caddy.backend.executions] == [MIB]


async def test_caddy_fifty_concurrent_streams(caddy: RunningCaddy) -> None:
    with trio.fail_after(30):
        async with open_h3_client(caddy.port, ca_pem=caddy.ca_pem) as client:
            sids = [
                client.send_request("POST", f"/echo/{i}", [("x-request-id", f"r{i}")], b"%d" % i)
                for i in range(50)
            ]
            responses = [await client.response(sid) for sid in sids]
    assert [bytes(r.body) for r in responses] == [b"%d" % i for i in range(50)]
    assert sorted(e.rid for e in caddy.backend.executions) == sorted(f"r{i}" for i in range(50))
    assert len(caddy.log(expect=50)) == 50


async def test_caddy_accepts_zero_rtt(caddy: RunningCaddy) -> None:
    with trio.fail_after(20):
        async with open_h3_client(caddy.port, ca_pem=caddy.ca_pem) as first:
            await first.request("GET", "/get")
            await first.wait_until(lambda: bool(first.tickets))
        async with open_h3_client(
            caddy.port, ca_pem=caddy.ca_pem, session_ticket=first.tickets[-1]
        ) as client:
            sid = client.send_request("GET", "/echo/early", [("x-request-id", "early")])
            response = await client.response(sid)
            handshake = await client.wait_handshake()
    # caddy does not log early data; the client's handshake says it was accepted.
    assert (handshake.session_resumed, handshake.early_data_accepted) == (True, True)
    assert (response.status, bytes(response.body)) == (200, b"executed 1")
    assert caddy.backend.count(request_id="early") == 1


async def test_caddy_drops_a_body_sent_without_content_length(caddy: RunningCaddy) -> None:
    """caddy 2.6.2's quirk (see tests/support/caddy.py): the request is executed, with an
    empty body. A client sends content-length whenever it knows the length."""
    with trio.fail_after(20):
        async with open_h3_client(caddy.port, ca_pem=caddy.ca_pem) as client:
            headers = [("x-request-id", "nolen")]
            sid = client.send_request("POST", "/echo", headers, end_stream=False)
            client.send_body(sid, b"lost", end_stream=True)
            response = await client.response(sid)
    assert response.status == 200
    [execution] = caddy.backend.executions
    if caddy.version == "2.6.2":
        assert (execution.rid, execution.body_length) == ("nolen", 0)


async def test_caddy_advertises_http3_over_tcp(caddy: RunningCaddy) -> None:
    with trio.fail_after(20):
        tcp = await trio.open_tcp_stream("127.0.0.1", caddy.port)
        stream = trio.SSLStream(tcp, caddy.ssl_context(http2=False), server_hostname="localhost")
        await stream.send_all(b"GET /get HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head and (chunk := await stream.receive_some(65536)):
            head += chunk
        await trio.aclose_forcefully(stream)
    assert f'alt-svc: h3=":{caddy.port}"'.encode() in head.lower()


async def test_hypercorn_get_and_post_over_http3(hypercorn: RunningHypercorn) -> None:
    with trio.fail_after(20):
        async with open_h3_client(hypercorn.port, ca_pem=hypercorn.ca_pem) as client:
            got = await client.request("GET", "/", [("x-request-id", "g1")])
            posted = await client.request("POST", "/p", [("x-request-id", "p1")], b"payload")
            big = await client.request("PUT", "/big", body=BIG)
    assert client.handshake is not None
    assert client.handshake.alpn_protocol == "h3"
    assert (got.status, bytes(got.body)) == (200, b"ok")
    assert (posted.status, bytes(posted.body)) == (200, b"payload")
    assert (big.status, bytes(big.body) == BIG) == (200, True)
    ledger = hypercorn.ledger(expect=3)
    assert [(e.method, e.http_version, e.body_length) for e in ledger.entries] == [
        ("GET", "3", 0),
        ("POST", "3", 7),
        ("PUT", "3", MIB),
    ]
    assert ledger.count(request_id="p1") == 1


async def test_hypercorn_issues_no_session_tickets(hypercorn: RunningHypercorn) -> None:
    """hypercorn 0.18 gives aioquic no session-ticket handler: no resumption, so no 0-RTT. A
    client must expect a server that never sends a ticket."""
    with trio.fail_after(20):
        async with open_h3_client(hypercorn.port, ca_pem=hypercorn.ca_pem) as client:
            await client.request("GET", "/")
            await trio.sleep(0.3)  # a ticket follows the handshake within a round trip
            assert client.tickets == []
