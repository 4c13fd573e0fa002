"""The hostile-server actions, `Raw` and `EndlessBody`, over HTTP/1.1 and HTTP/2."""

from __future__ import annotations

import h2.exceptions
import pytest
import trio
import trio.testing

from tests.support.h2_frames import frame
from trio_retry.testing import EndlessBody, GoAway, Raw, Respond, Stall

from .conftest import StartServer
from .raw import H1Client, H2Client, read_to_end

GARBAGE = b"SSH-2.0-OpenSSH_9.6\r\n\x00\xff not http at all"


def test_validation() -> None:
    with pytest.raises(TypeError):
        Raw("text")  # type: ignore[arg-type]
    assert Raw(bytearray(b"ab")).data == b"ab"
    with pytest.raises(ValueError, match="framing"):
        EndlessBody(headers={"Content-Length": "5"})
    with pytest.raises(ValueError, match="framing"):
        EndlessBody(headers={"transfer-encoding": "chunked"})
    with pytest.raises(ValueError, match="chunk"):
        EndlessBody(chunk=b"")
    with pytest.raises(ValueError, match="rate"):
        EndlessBody(rate=0)
    with pytest.raises(ValueError, match="seconds"):
        EndlessBody(seconds=float("inf"))
    assert EndlessBody(chunk=b"abcd", rate=8).pause() == 0.5
    # Both act after the body, so they may follow a Stall or a GoAway.
    assert Stall(0.1, then=Raw(b"x")).then == Raw(b"x")
    assert GoAway(then=EndlessBody()).then == EndlessBody()


async def test_raw_replaces_the_response_h1(start_server: StartServer, tls: bool) -> None:
    server = await start_server(tls=tls)
    server.script(Raw(GARBAGE))
    with trio.fail_after(5):
        client = await H1Client.open(server)
        await client.send_request("POST", "/pay", body=b"amount=5")
        data, end = await read_to_end(client.stream)
    assert (data, end) == (GARBAGE, "eof")
    [record] = server.requests
    assert record.executed
    assert record.body == b"amount=5"
    assert record.action == Raw(GARBAGE)


async def test_raw_without_close_keeps_the_connection_open(start_server: StartServer) -> None:
    server = await start_server()
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf"
    server.script(Raw(head, close=False))
    with trio.fail_after(5):
        client = await H1Client.open(server)
        await client.send_request("GET", "/")
        received = b""
        while len(received) < len(head):
            received += await client.stream.receive_some(65536)
        with trio.move_on_after(0.2) as quiet:
            await client.stream.receive_some(65536)  # nothing more, and no EOF
    assert received == head
    assert quiet.cancelled_caught
    assert server.requests[0].executed


async def test_raw_after_a_stall(start_server: StartServer) -> None:
    server = await start_server()
    server.script(Stall(0.1, then=Raw(b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n")))
    with trio.fail_after(5):
        client = await H1Client.open(server)
        start = trio.current_time()
        await client.send_request("GET", "/")
        data, end = await read_to_end(client.stream)
    assert trio.current_time() - start >= 0.1
    assert data.startswith(b"HTTP/1.1 200 OK\r\nContent-Length: abc")
    assert end == "eof"


async def test_raw_frames_reach_an_http2_client(start_server: StartServer, tls: bool) -> None:
    server = await start_server(tls=tls)
    # DATA on stream 0 is a connection error (RFC 9113 §6.1).
    server.script(Raw(frame(0x0, 0x1, 0, b"boom")))
    with trio.fail_after(5):
        client = await H2Client.open(server)
        sid = await client.request("POST", "/pay", body=b"amount=5")
        with pytest.raises(h2.exceptions.ProtocolError):
            await client.pump_until(lambda: False)
    assert sid == 1
    assert server.requests[0].executed


async def test_raw_on_http2_can_leave_the_connection_open(start_server: StartServer) -> None:
    server = await start_server()
    ping = frame(0x6, 0x0, 0, b"12345678")  # a PING: legal, and h2 answers it
    server.script(Raw(ping, close=False), Respond(200, body=b"second"))
    with trio.fail_after(5):
        client = await H2Client.open(server)
        first = await client.request("GET", "/first")
        second = await client.response(await client.request("GET", "/second"))
    assert client.streams[first].status is None  # no response, only the raw frame
    assert (second.status, bytes(second.body)) == (200, b"second")
    assert client.end is None


async def test_endless_body_h1_is_chunked_and_never_ends(
    start_server: StartServer, tls: bool
) -> None:
    server = await start_server(tls=tls)
    server.script(EndlessBody(headers={"X-Kind": "endless"}, chunk=b"z" * 1000))
    with trio.fail_after(5):
        client = await H1Client.open(server)
        await client.send_request("GET", "/big")
        resp = await client.read_response(stop_after_head=True)
        body = b""
        while len(body) < 200_000:
            body += await client.stream.receive_some(65536)
    assert resp.status == 200
    assert resp.header("transfer-encoding") == "chunked"
    assert resp.header("content-length") is None
    assert resp.header("x-kind") == "endless"
    assert body.count(b"z" * 1000) >= 150
    assert server.requests[0].executed


async def test_endless_body_rate_and_safety_bound(
    start_server: StartServer, autojump_clock: trio.testing.MockClock
) -> None:
    server = await start_server()
    server.script(EndlessBody(chunk=b"y" * 100, rate=1000, seconds=0.5))
    with trio.fail_after(5):
        client = await H1Client.open(server)
        start = trio.current_time()
        await client.send_request("GET", "/slow")
        data, end = await read_to_end(client.stream)
    elapsed = trio.current_time() - start
    assert elapsed == pytest.approx(0.5)
    assert end == "reset"  # the safety bound resets the connection
    # About rate * seconds bytes: paced, not flooded.
    assert 300 <= data.count(b"y") <= 700


async def test_endless_body_to_head_ends_at_once(start_server: StartServer) -> None:
    server = await start_server()
    server.script(EndlessBody())
    with trio.fail_after(5):
        client = await H1Client.open(server)
        resp = await client.request("HEAD", "/")
    assert resp.complete
    assert resp.body == b""


async def test_endless_body_h2_flows_with_the_window(start_server: StartServer, tls: bool) -> None:
    server = await start_server(tls=tls)
    server.script(EndlessBody(chunk=b"w" * 16384))
    with trio.fail_after(5):
        client = await H2Client.open(server)
        sid = await client.request("GET", "/big")
        state = client.streams[sid]
        # More than the default 64 KiB windows: the raw client hands credit back as it reads.
        await client.pump_until(lambda: len(state.body) > 300_000)
        client.conn.reset_stream(sid)
        await client.flush()
        after = await client.response(await client.request("GET", "/after"))
    assert state.status == 200
    assert state.header("content-length") is None
    assert not state.ended
    assert after.status == 200  # resetting the endless stream freed the connection
    assert server.requests[0].executed
