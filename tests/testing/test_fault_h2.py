"""FaultServer over HTTP/2 (h2c prior knowledge and TLS with ALPN), driven by a raw h2 client."""

from __future__ import annotations

import h2.events
import h2.settings
import pytest
import trio
import trio.testing

from trio_retry.testing import (
    CloseAfterBody,
    CloseAfterHead,
    CloseBeforeRead,
    GoAway,
    PartialBody,
    RefuseStream,
    Respond,
    Stall,
)

from .conftest import StartServer
from .raw import H2Client, connect, read_to_end, wait_until

REFUSED_STREAM = 7
INTERNAL_ERROR = 2
MAX_CONCURRENT_STREAMS = int(h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS)


async def test_respond_and_record(start_server: StartServer, tls: bool) -> None:
    server = await start_server(tls=tls)
    server.script(Respond(201, headers={"X-Test": "yes", "Connection": "close"}, body=b"made"))
    with trio.fail_after(5):
        client = await H2Client.open(server)
        sid = await client.request("POST", "/items?x=1", [("x-req", "v")], b"payload")
        resp = await client.response(sid)
    assert (resp.status, bytes(resp.body), resp.ended) == (201, b"made", True)
    assert resp.header("x-test") == "yes"
    assert resp.header("content-length") == "4"
    assert resp.header("connection") is None  # connection-specific: dropped for HTTP/2
    [rec] = server.requests
    assert (rec.method, rec.path, rec.body) == ("POST", "/items?x=1", b"payload")
    assert (rec.http_version, rec.stream_id, rec.connection_id) == ("HTTP/2", 1, 1)
    assert rec.headers[0] == (":method", "POST")
    assert rec.header(":authority") == "127.0.0.1"
    assert rec.header("x-req") == "v"
    assert rec.executed


async def test_informational_and_delay(start_server: StartServer, tls: bool) -> None:
    server = await start_server(tls=tls)
    server.script(Respond(200, body=b"x", informational=(103,), delay=0.2))
    with trio.fail_after(5):
        client = await H2Client.open(server)
        start = trio.current_time()
        resp = await client.response(await client.request("GET", "/"))
    assert resp.informational == [103]
    assert (resp.status, bytes(resp.body)) == (200, b"x")
    assert resp.done_at is not None
    assert resp.done_at - start >= 0.2


async def test_expect_100_continue(start_server: StartServer) -> None:
    server = await start_server()
    with trio.fail_after(5):
        client = await H2Client.open(server)
        sid = await client.request("PUT", "/", [("expect", "100-continue")], end_stream=False)
        state = client.streams[sid]
        await client.pump_until(lambda: bool(state.informational))
        assert state.informational == [100]
        assert not server.requests[0].executed
        await client.send_body(sid, b"body")
        resp = await client.response(sid)
    assert resp.status == 200
    assert server.requests[0].body == b"body"


async def test_refused_stream(start_server: StartServer, tls: bool) -> None:
    server = await start_server(tls=tls)
    server.script(RefuseStream(), Respond(200, body=b"second"))
    with trio.fail_after(5):
        client = await H2Client.open(server)
        first = await client.response(await client.request("POST", "/pay", body=b"123"))
        second = await client.response(await client.request("POST", "/pay", body=b"456"))
    assert (first.reset_code, first.status) == (REFUSED_STREAM, None)
    assert (second.status, bytes(second.body)) == (200, b"second")  # connection still usable
    assert [(r.stream_id, r.executed) for r in server.requests] == [(1, False), (3, True)]
    assert server.requests[0].action == RefuseStream()
    assert server.connections_accepted == 1


async def test_goaway_answers_streams_below_and_abandons_streams_above(
    start_server: StartServer, tls: bool
) -> None:
    server = await start_server(tls=tls)
    goaway = GoAway(last_stream_id=1, error_code=0)
    server.script(Stall(0.2, then=Respond(200, body=b"one")), goaway, Respond(500))
    with trio.fail_after(5):
        client = await H2Client.open(server)
        s1 = await client.request("GET", "/1")
        s3 = await client.request("GET", "/3")
        s5 = await client.request("GET", "/5")
        await client.pump_until(lambda: False)  # until the server closes
    assert client.goaway is not None
    assert (client.goaway.last_stream_id, client.goaway.error_code) == (1, 0)
    assert client.end == "eof"
    assert (client.streams[s1].status, bytes(client.streams[s1].body)) == (200, b"one")
    for sid in (s3, s5):  # no response and no RST_STREAM: the GOAWAY says it all
        assert client.streams[sid].status is None
        assert client.streams[sid].reset_code is None
    assert [(r.stream_id, r.executed) for r in server.requests] == [
        (1, True),
        (3, False),
        (5, False),
    ]
    assert server.requests[1].action == goaway
    assert server.requests[2].action == goaway
    assert server.queued == (Respond(500),)  # stream 5 never took a script entry


async def test_goaway_defaults_to_its_own_stream_and_runs_then(start_server: StartServer) -> None:
    server = await start_server()
    server.script(GoAway(error_code=11, then=Respond(202, body=b"last")))
    with trio.fail_after(5):
        client = await H2Client.open(server)
        sid = await client.request("POST", "/", body=b"x")
        await client.pump_until(lambda: False)
    assert client.goaway is not None
    assert (client.goaway.last_stream_id, client.goaway.error_code) == (1, 11)
    assert (client.streams[sid].status, bytes(client.streams[sid].body)) == (202, b"last")
    assert server.requests[0].executed


async def test_goaway_abandons_unfinished_streams_above(start_server: StartServer) -> None:
    server = await start_server()
    server.script(Respond(200), Respond(200), GoAway(last_stream_id=1))
    with trio.fail_after(5):
        client = await H2Client.open(server)
        s1 = await client.request("POST", "/1", body=b"a")
        s3 = await client.request("POST", "/3", body=b"part", end_stream=False)  # body unfinished
        await client.request("GET", "/5")
        await client.pump_until(lambda: False)
    assert client.streams[s1].status == 200
    assert client.streams[s3].status is None
    assert [(r.stream_id, r.executed) for r in server.requests] == [
        (1, True),
        (3, False),
        (5, False),
    ]
    assert server.requests[1].body == b"part"


@pytest.mark.parametrize("reset", [False, True], ids=["rst-stream", "tcp-reset"])
async def test_partial_body(start_server: StartServer, tls: bool, reset: bool) -> None:
    server = await start_server(tls=tls)
    server.script(PartialBody(declared_length=1000, body=b"y" * 100, reset=reset))
    with trio.fail_after(5):
        client = await H2Client.open(server)
        sid = await client.request("GET", "/file")
        resp = await client.response(sid)
        if not reset:
            # Only the stream died: the connection serves the next request.
            after = await client.response(await client.request("GET", "/next"))
            assert after.status == 200
    assert resp.status == 200
    assert resp.header("content-length") == "1000"
    assert bytes(resp.body) == b"y" * 100
    assert not resp.ended
    if reset:
        assert (resp.reset_code, client.end) == (None, "reset")
    else:
        assert (resp.reset_code, client.end) == (INTERNAL_ERROR, None)
    assert server.requests[0].executed


@pytest.mark.parametrize("action", [CloseBeforeRead, CloseAfterHead, CloseAfterBody])
@pytest.mark.parametrize("reset", [False, True], ids=["close", "reset"])
async def test_connection_drops(
    start_server: StartServer,
    tls: bool,
    action: type[CloseBeforeRead | CloseAfterHead | CloseAfterBody],
    reset: bool,
) -> None:
    server = await start_server(tls=tls)
    server.script(action(reset=reset))
    with trio.fail_after(5):
        client = await H2Client.open(server)
        sid = await client.request("POST", "/pay", body=b"body")
        await client.pump_until(lambda: False)
    assert client.end == ("reset" if reset else "eof")
    assert client.goaway is None  # a crash, not a goodbye
    assert client.streams[sid].status is None
    [rec] = server.requests
    executed = action is CloseAfterBody
    assert rec.executed is executed
    assert rec.body == (b"body" if executed else b"")


async def test_stall_does_not_block_other_streams(
    start_server: StartServer, autojump_clock: trio.testing.MockClock
) -> None:
    server = await start_server()
    server.script(Stall(0.25, then=Respond(200, body=b"slow")), Respond(200, body=b"fast"))
    with trio.fail_after(5):
        client = await H2Client.open(server)
        start = trio.current_time()
        slow = await client.request("GET", "/slow")
        fast = await client.request("GET", "/fast")
        await wait_until(lambda: len(server.requests) == 2)
        assert server.requests[0].executed  # executed while stalling
        await client.response(slow)
    slow_done, fast_done = client.streams[slow].done_at, client.streams[fast].done_at
    assert slow_done is not None
    assert fast_done is not None
    # Virtual seconds: the fast answer came while the slow one stalled (wait_until polls
    # every 0.01 s), the slow one when its stall ended.
    assert fast_done - start < 0.25
    assert slow_done - start == pytest.approx(0.25)
    assert bytes(client.streams[slow].body) == b"slow"


async def test_fifty_concurrent_streams(start_server: StartServer, tls: bool) -> None:
    server = await start_server(tls=tls)
    server.default = Respond(200, body=b"hi", delay=0.05)
    with trio.fail_after(5):
        client = await H2Client.open(server)
        sids = [await client.request("GET", f"/{i}") for i in range(50)]
        await client.pump_until(lambda: all(client.streams[s].ended for s in sids))
    assert all(client.streams[s].status == 200 for s in sids)
    assert len(server.requests) == 50
    assert {r.connection_id for r in server.requests} == {1}
    assert server.executed_count("GET") == 50
    assert server.connections_accepted == 1


async def test_one_mebibyte_up_and_down(start_server: StartServer, tls: bool) -> None:
    server = await start_server(tls=tls)
    down = bytes(range(256)) * 4096
    up = bytes(reversed(range(256))) * 4096
    server.script(Respond(200, body=down))
    with trio.fail_after(10):
        client = await H2Client.open(server)
        resp = await client.response(await client.request("POST", "/big", body=up))
    assert resp.ended
    assert bytes(resp.body) == down
    assert server.requests[0].body == up
    assert server.requests[0].executed


@pytest.mark.parametrize(("limit", "advertised"), [(None, 100), (7, 7)])
async def test_max_concurrent_streams_advertised(
    start_server: StartServer, limit: int | None, advertised: int
) -> None:
    server = await start_server(max_concurrent_streams=limit)
    with trio.fail_after(5):
        client = await H2Client.open(server)
        await client.pump_until(lambda: client.settings_received)
    assert client.server_settings[MAX_CONCURRENT_STREAMS] == advertised


async def test_close_after_sends_goaway_then_closes(start_server: StartServer, tls: bool) -> None:
    server = await start_server(tls=tls)
    server.script(Respond(200, body=b"bye", close_after=True))
    with trio.fail_after(5):
        client = await H2Client.open(server)
        sid = await client.request("GET", "/")
        await client.pump_until(lambda: False)
    assert (client.streams[sid].status, bytes(client.streams[sid].body)) == (200, b"bye")
    assert client.goaway is not None
    assert (client.goaway.last_stream_id, client.goaway.error_code) == (1, 0)
    assert client.end == "eof"


async def test_slow_body(start_server: StartServer) -> None:
    server = await start_server()
    server.script(Respond(200, body=b"z" * 200, body_rate=1000.0))
    with trio.fail_after(5):
        client = await H2Client.open(server)
        start = trio.current_time()
        resp = await client.response(await client.request("GET", "/"))
    assert bytes(resp.body) == b"z" * 200
    assert resp.done_at is not None
    assert resp.done_at - start >= 0.15


async def test_client_reset_and_vanishing_are_survived(start_server: StartServer) -> None:
    server = await start_server()
    server.script(Stall(5.0), Respond(200, body=b"after reset"))
    with trio.fail_after(5):
        client = await H2Client.open(server)
        sid = await client.request("GET", "/stalled")
        await wait_until(lambda: bool(server.requests))
        client.conn.reset_stream(sid, 8)  # CANCEL
        await client.flush()
        resp = await client.response(await client.request("GET", "/next"))
        assert bytes(resp.body) == b"after reset"
        # Now vanish in the middle of an upload.
        sid = await client.request("POST", "/upload", body=b"half", end_stream=False)
        await wait_until(lambda: server.requests[-1].body == b"half")
        await client.stream.aclose()
        second = await H2Client.open(server)
        resp = await second.response(await second.request("GET", "/again"))
    assert resp.status == 200
    assert [(r.path, r.executed) for r in server.requests] == [
        ("/stalled", True),
        ("/next", True),
        ("/upload", False),
        ("/again", True),
    ]


async def test_idle_connection_gets_goaway(start_server: StartServer) -> None:
    server = await start_server(idle_timeout=0.2)
    with trio.fail_after(5):
        client = await H2Client.open(server)
        await client.pump_until(lambda: False)
    assert client.goaway is not None
    assert client.goaway.error_code == 0
    assert client.end == "eof"


async def test_protocol_garbage_gets_goaway(start_server: StartServer) -> None:
    server = await start_server()
    with trio.fail_after(5):
        stream = await connect(server)
        await stream.send_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00" * 64)
        data, end = await read_to_end(stream)
        client = await H2Client.open(server)
        resp = await client.response(await client.request("GET", "/"))
    # SETTINGS then GOAWAY (type 7) from the server, then a clean close.
    assert b"\x07\x00\x00\x00\x00\x00" in data
    assert end == "eof"
    assert resp.status == 200


async def test_cleartext_http2_disabled_speaks_http11_only(start_server: StartServer) -> None:
    server = await start_server(http2=False)
    with trio.fail_after(5):
        stream = await connect(server)
        await stream.send_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        data, _ = await read_to_end(stream)
    assert data.startswith(b"HTTP/1.1 ")


async def test_stalled_upload_gets_its_stream_cancelled(start_server: StartServer) -> None:
    server = await start_server(read_timeout=0.2)
    with trio.fail_after(5):
        client = await H2Client.open(server)
        sid = await client.request("POST", "/upload", body=b"some", end_stream=False)
        resp = await client.response(sid)
        after = await client.response(await client.request("GET", "/next"))
    assert resp.reset_code == 8  # CANCEL: only the stalled stream is given up
    assert after.status == 200
    assert [(r.body, r.executed) for r in server.requests] == [(b"some", False), (b"", True)]


async def test_client_goaway_lets_running_streams_finish(start_server: StartServer) -> None:
    server = await start_server()
    server.script(Stall(0.2, then=Respond(200, body=b"finished")))
    with trio.fail_after(5):
        client = await H2Client.open(server)
        await client.request("GET", "/")
        await wait_until(lambda: bool(server.requests))
        client.conn.close_connection()
        await client.flush()
        # (h2 refuses frames after its own GOAWAY, so read the raw bytes.)
        data, end = await read_to_end(client.stream)
    assert b"finished" in data
    assert end == "eof"
    assert server.requests[0].executed


def test_goaway_filter_handles_split_input() -> None:
    from trio_retry.testing._h2 import PREFACE, _GoAwayFilter, goaway_frame

    ping = bytes.fromhex("000008060000000000") + b"12345678"
    wire = PREFACE + ping + goaway_frame(0, 0) + ping
    for cut in (0, 5, 24, 30, 33, 45, 50, len(wire)):
        feed = _GoAwayFilter()
        first, seen1 = feed.feed(wire[:cut])
        second, seen2 = feed.feed(wire[cut:])
        assert first + second == PREFACE + ping + ping
        assert seen1 or seen2
