"""FaultServer over HTTP/1.1, cleartext and TLS, driven by a raw h11 client."""

from __future__ import annotations

import pytest
import trio

from trio_retry.testing import (
    CloseAfterBody,
    CloseAfterHead,
    CloseBeforeRead,
    FaultServer,
    GoAway,
    PartialBody,
    RefuseStream,
    Respond,
    ScriptError,
    Stall,
)

from .conftest import StartServer
from .raw import H1Client, close_opened, connect, read_to_end, wait_until


async def test_respond_body_headers_and_record(start_server: StartServer, tls: bool) -> None:
    server = await start_server(tls=tls)
    server.script(Respond(201, headers={"X-Test": "yes"}, body=b"created"))
    with trio.fail_after(5):
        client = await H1Client.open(server)
        before = trio.current_time()
        resp = await client.request("POST", "/items?x=1", [("X-Req", "v")], b"payload")
    assert resp.complete
    assert (resp.status, resp.body) == (201, b"created")
    assert resp.header("x-test") == "yes"
    assert resp.header("content-length") == "7"
    [rec] = server.requests
    assert (rec.method, rec.path, rec.body) == ("POST", "/items?x=1", b"payload")
    assert ("x-req", "v") in rec.headers
    assert rec.header("content-length") == "7"
    assert (rec.connection_id, rec.http_version, rec.stream_id) == (1, "HTTP/1.1", None)
    assert rec.executed
    assert rec.action == Respond(201, headers={"X-Test": "yes"}, body=b"created")
    assert before <= rec.time <= trio.current_time()
    assert server.executed_count() == 1
    assert server.connections_accepted == 1


async def test_tls_negotiates_http11(start_server: StartServer) -> None:
    server = await start_server(tls=True)
    with trio.fail_after(5):
        stream = await connect(server, ["h2", "http/1.1"])
        assert isinstance(stream, trio.SSLStream)
        assert stream.selected_alpn_protocol() == "h2"
        await stream.aclose()
    no_h2 = await start_server(tls=True, http2=False)
    with trio.fail_after(5):
        stream = await connect(no_h2, ["h2", "http/1.1"])
        assert isinstance(stream, trio.SSLStream)
        assert stream.selected_alpn_protocol() == "http/1.1"
        resp = await H1Client(stream).request("GET", "/")
    assert (resp.status, resp.body) == (200, b"ok")


async def test_informational_then_final(start_server: StartServer, tls: bool) -> None:
    server = await start_server(tls=tls)
    server.script(Respond(200, body=b"x", informational=(100, 103)))
    with trio.fail_after(5):
        resp = await (await H1Client.open(server)).request("GET", "/")
    assert resp.informational == [100, 103]
    assert (resp.status, resp.body, resp.complete) == (200, b"x", True)


async def test_expect_100_continue_is_answered_before_the_body(start_server: StartServer) -> None:
    server = await start_server()
    server.script(Respond(200, body=b"done", informational=(100,)))
    with trio.fail_after(5):
        client = await H1Client.open(server)
        headers = [("Expect", "100-continue"), ("Content-Length", "4")]
        await client.send_request("PUT", "/up", headers, send_body=False)
        interim = await client.read_response(stop_after_informational=True)
        assert interim.informational == [100]
        assert interim.status is None
        assert not server.requests[0].executed
        await client.send_body(b"data")
        resp = await client.read_response()
    # The scripted 100 was the one sent before the body: it is not repeated.
    assert resp.informational == []
    assert (resp.status, resp.body) == (200, b"done")
    assert server.requests[0].body == b"data"
    assert server.requests[0].executed


async def test_delay_before_head(start_server: StartServer) -> None:
    server = await start_server()
    server.script(Respond(200, delay=0.2))
    with trio.fail_after(5):
        client = await H1Client.open(server)
        resp = await client.request("GET", "/")
    assert resp.status == 200
    assert 0.2 <= resp.times["head"] < 2.0
    assert server.requests[0].executed


async def test_slow_body_is_paced(start_server: StartServer, tls: bool) -> None:
    server = await start_server(tls=tls)
    body = bytes(range(200))
    server.script(Respond(200, body=body, body_rate=1000.0))  # 50-byte chunks, 4 chunks
    with trio.fail_after(5):
        resp = await (await H1Client.open(server)).request("GET", "/slow")
    assert resp.body == body
    # Three 50 ms pauses between four chunks.
    assert resp.times["end"] >= 0.15


async def test_keep_alive_several_requests_one_connection(
    start_server: StartServer, tls: bool
) -> None:
    server = await start_server(tls=tls)
    server.script(Respond(200, body=b"a"), Respond(201, body=b"b"), Respond(202, body=b"c"))
    with trio.fail_after(5):
        client = await H1Client.open(server)
        statuses = []
        for i in range(3):
            resp = await client.request("GET", f"/{i}")
            statuses.append((resp.status, resp.body))
            client.next_cycle()
    assert statuses == [(200, b"a"), (201, b"b"), (202, b"c")]
    assert [r.connection_id for r in server.requests] == [1, 1, 1]
    assert [r.path for r in server.requests] == ["/0", "/1", "/2"]
    assert server.connections_accepted == 1


async def test_close_after_leaves_a_stale_keep_alive_connection(
    start_server: StartServer, tls: bool
) -> None:
    server = await start_server(tls=tls)
    server.script(Respond(200, body=b"bye", close_after=True))
    with trio.fail_after(5):
        client = await H1Client.open(server)
        resp = await client.request("GET", "/")
        assert (resp.status, resp.body, resp.complete) == (200, b"bye", True)
        assert resp.header("connection") is None  # looks reusable...
        rest, end = await read_to_end(client.stream)  # ...but it is closed
    assert (rest, end) == (b"", "eof")


@pytest.mark.parametrize("reset", [False, True], ids=["close", "reset"])
async def test_close_before_read(start_server: StartServer, tls: bool, reset: bool) -> None:
    server = await start_server(tls=tls)
    server.script(CloseBeforeRead(reset=reset))
    with trio.fail_after(5):
        client = await H1Client.open(server)
        resp = await client.request("POST", "/pay", body=b"123")
    assert resp.status is None
    assert resp.end == ("reset" if reset else "eof")
    [rec] = server.requests
    assert (rec.method, rec.path, rec.body, rec.executed) == ("POST", "/pay", b"", False)
    assert rec.action == CloseBeforeRead(reset=reset)


@pytest.mark.parametrize("reset", [False, True], ids=["close", "reset"])
async def test_close_after_head(start_server: StartServer, tls: bool, reset: bool) -> None:
    server = await start_server(tls=tls)
    server.script(CloseAfterHead(reset=reset))
    with trio.fail_after(5):
        client = await H1Client.open(server)
        # The body is announced but held back: the server must act on the head alone.
        await client.send_request("POST", "/pay", [("Content-Length", "10")], send_body=False)
        resp = await client.read_response()
    assert resp.status is None
    assert resp.end == ("reset" if reset else "eof")
    [rec] = server.requests
    assert (rec.body, rec.executed) == (b"", False)


async def test_close_with_unread_body_is_still_a_clean_close(start_server: StartServer) -> None:
    # The server closes with 256 KiB of unread request body in flight; a naive close would
    # turn into a RST. The lingering close keeps it a FIN.
    server = await start_server()
    server.script(CloseAfterHead())
    body = b"b" * 256 * 1024
    with trio.fail_after(5):
        client = await H1Client.open(server)
        resp = await client.request("POST", "/big", body=body)
    assert (resp.status, resp.end) == (None, "eof")
    assert not server.requests[0].executed
    assert len(server.requests[0].body) < len(body)


@pytest.mark.parametrize("reset", [False, True], ids=["close", "reset"])
async def test_close_after_body(start_server: StartServer, tls: bool, reset: bool) -> None:
    server = await start_server(tls=tls)
    server.script(CloseAfterBody(reset=reset))
    with trio.fail_after(5):
        resp = await (await H1Client.open(server)).request("POST", "/pay", body=b"x" * 5000)
    assert resp.status is None
    assert resp.end == ("reset" if reset else "eof")
    [rec] = server.requests
    assert (rec.body, rec.executed) == (b"x" * 5000, True)


async def test_stall_executes_then_answers_late(start_server: StartServer) -> None:
    server = await start_server()
    server.script(Stall(0.25, then=Respond(202, body=b"late")))
    with trio.fail_after(5):
        client = await H1Client.open(server)
        start = trio.current_time()
        await client.send_request("POST", "/job", body=b"work")
        await trio.sleep(0.1)
        # Mid-stall: the server already did the work, and has not answered.
        assert server.requests[0].executed
        resp = await client.read_response()
    assert (resp.status, resp.body) == (202, b"late")
    assert trio.current_time() - start >= 0.25


async def test_stall_with_mock_clock(start_server: StartServer, autojump_clock: object) -> None:
    server = await start_server()
    server.script(Stall(7.0), Respond(200, delay=3.0))
    with trio.fail_after(60):
        client = await H1Client.open(server)
        start = trio.current_time()
        resp = await client.request("GET", "/")
        first = trio.current_time() - start
        client.next_cycle()
        resp2 = await client.request("GET", "/")
        second = trio.current_time() - start - first
    assert (resp.status, resp2.status) == (200, 200)
    assert first == pytest.approx(7.0, abs=0.01)
    assert second == pytest.approx(3.0, abs=0.01)


@pytest.mark.parametrize("reset", [False, True], ids=["close", "reset"])
async def test_partial_body(start_server: StartServer, tls: bool, reset: bool) -> None:
    server = await start_server(tls=tls)
    server.script(PartialBody(206, headers={"X-P": "1"}, declared_length=1000, reset=reset))
    with trio.fail_after(5):
        resp = await (await H1Client.open(server)).request("GET", "/file")
    assert resp.status == 206
    assert resp.header("content-length") == "1000"
    assert resp.header("x-p") == "1"
    assert resp.body == b"x" * 100
    assert not resp.complete
    assert resp.end == ("reset" if reset else "eof")
    assert server.requests[0].executed


@pytest.mark.parametrize("action", [RefuseStream(), GoAway()], ids=["refuse", "goaway"])
async def test_http2_only_actions_fail_loudly_on_http11(action: RefuseStream | GoAway) -> None:
    server = FaultServer()
    server.script(action)
    with trio.fail_after(5), pytest.RaisesGroup(ScriptError, flatten_subgroups=True):
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve)
            client = await H1Client.open(server)
            try:
                await client.request("GET", "/")
                await trio.sleep_forever()
            finally:
                await close_opened()
    assert not server.requests[0].executed


def test_http2_only_actions_rejected_when_http2_disabled() -> None:
    server = FaultServer(http2=False)
    with pytest.raises(ValueError, match="HTTP/2"):
        server.script(RefuseStream())
    with pytest.raises(ValueError, match="HTTP/2"):
        server.route("GET", "/", GoAway())
    with pytest.raises(ValueError, match="HTTP/2"):
        server.default = GoAway()


async def test_client_vanishing_mid_body_is_recorded_not_executed(
    start_server: StartServer,
) -> None:
    server = await start_server()
    with trio.fail_after(5):
        client = await H1Client.open(server)
        await client.send_request("POST", "/pay", [("Content-Length", "100")], send_body=False)
        await client.stream.send_all(b"0123456789")
        await wait_until(lambda: bool(server.requests) and server.requests[0].body == b"0123456789")
        assert not server.requests[0].executed
        await client.stream.aclose()
        await wait_until(lambda: server.connections_accepted == 1)
        # The server keeps serving.
        resp = await (await H1Client.open(server)).request("GET", "/next")
    assert resp.status == 200
    assert [(r.path, r.executed) for r in server.requests] == [("/pay", False), ("/next", True)]


async def test_routes_default_and_counts(start_server: StartServer) -> None:
    server = await start_server()
    server.route("POST", "/pay", CloseAfterBody(), Respond(200, body=b"paid"))
    server.script(Respond(500))
    server.default = Respond(204)
    with trio.fail_after(5):
        results = []
        for method, path in [("POST", "/pay"), ("POST", "/pay"), ("GET", "/a"), ("POST", "/pay")]:
            resp = await (await H1Client.open(server)).request(method, path)
            results.append(resp.status)
    # Route queue, route queue, global queue, then (route and global empty) the default.
    assert results == [None, 200, 500, 204]
    assert server.executed_count() == 4
    assert server.executed_count("POST", "/pay") == 3
    assert server.executed_count(method="GET") == 1
    assert server.executed_count(path="/nope") == 0
    assert server.connections_accepted == 4
    assert server.queued == ()


async def test_head_and_204_have_no_body(start_server: StartServer) -> None:
    server = await start_server()
    server.script(Respond(200, body=b"hello"), Respond(204))
    with trio.fail_after(5):
        client = await H1Client.open(server)
        head = await client.request("HEAD", "/")
        client.next_cycle()
        empty = await client.request("GET", "/")
    assert (head.status, head.body, head.header("content-length")) == (200, b"", "5")
    assert (empty.status, empty.body, empty.header("content-length")) == (204, b"", None)


async def test_garbage_gets_400_and_server_survives(start_server: StartServer) -> None:
    server = await start_server()
    with trio.fail_after(5):
        stream = await connect(server)
        await stream.send_all(b"NOT HTTP AT ALL\r\n\r\n")
        data, end = await read_to_end(stream)
        assert data.startswith(b"HTTP/1.1 400 ")
        assert end == "eof"
        resp = await (await H1Client.open(server)).request("GET", "/")
    assert resp.status == 200
    assert len(server.requests) == 1


async def test_idle_and_head_timeouts_close_the_connection(start_server: StartServer) -> None:
    server = await start_server(idle_timeout=0.2, read_timeout=0.2)
    with trio.fail_after(5):
        start = trio.current_time()
        idle = await connect(server)
        assert await read_to_end(idle) == (b"", "eof")
        assert trio.current_time() - start >= 0.2
        partial = await connect(server)
        start = trio.current_time()
        await partial.send_all(b"GET / HTTP/1.1\r\nHo")
        assert await read_to_end(partial) == (b"", "eof")
        assert trio.current_time() - start >= 0.2
    assert server.requests == []


async def test_stalled_upload_drops_the_connection(start_server: StartServer) -> None:
    server = await start_server(read_timeout=0.2)
    with trio.fail_after(5):
        client = await H1Client.open(server)
        await client.send_request("POST", "/upload", [("Content-Length", "100")], send_body=False)
        await client.stream.send_all(b"some")
        start = trio.current_time()
        resp = await client.read_response()
    assert trio.current_time() - start >= 0.2
    assert resp.status is None
    assert resp.end is not None
    [rec] = server.requests
    assert (rec.body, rec.executed) == (b"some", False)
