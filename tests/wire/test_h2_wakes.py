"""The HTTP/2 request path's wakes and bookkeeping: a request queued whole costs its task
one wake (its response), the writer reports the bytes it wrote to the stream, and the
connection's own stream count never falls below h2's."""

from __future__ import annotations

import contextlib
import random

import h2.events
import h2.exceptions
import pytest
import trio
import trio.testing
from h2.errors import ErrorCodes

from tests.support.loopback import QueuedOutput
from trio_retry import StageTimeouts
from trio_retry._core.evidence import Evidence, Stage
from trio_retry._wire.http2.connection import HTTP2Connection
from trio_retry._wire.http2.stream import Stream, StreamState
from trio_retry._wire.http2.writer import Writer
from trio_retry._wire.progress import AttemptProgress, WireError
from trio_retry._wire.timekeeper import Timekeeper

from .test_http2 import LIMIT, Connect, Server, connect, get, progress_at_pool

__all__ = ["connect"]  # the fixture, shared with test_http2.py


class _Steps(trio.abc.Instrument):
    """Counts the task steps of one task."""

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.steps += 1


async def _answer_one(server: Server, body: bytes = b"ok") -> None:
    received = await server.next(h2.events.RequestReceived)
    await server.respond(received.stream_id or 0, body)


async def _steps_of_one_request(
    conn: HTTP2Connection, server: Server, progress: AttemptProgress
) -> int:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_answer_one, server)
        await trio.sleep(0)  # let the server start waiting
        steps = _Steps(trio.lowlevel.current_task())
        trio.lowlevel.add_instrument(steps)
        try:
            response = await conn.send_request(get("/one"), progress)
        finally:
            trio.lowlevel.remove_instrument(steps)
        assert await response.source.receive_body(progress) == b"ok"
        assert await response.source.receive_body(progress) == b""
    return steps.steps


async def test_a_request_queued_whole_wakes_its_task_once(connect: Connect) -> None:
    """No wait for the write: the task parks once, for its response, and the writer records
    the bytes it wrote (the HEADERS frame) in the attempt's progress."""
    conn, server = await connect()
    with trio.fail_after(LIMIT):
        progress = progress_at_pool()
        assert await _steps_of_one_request(conn, server, progress) == 1
    assert progress.stage is Stage.COMPLETE
    assert progress.bytes_sent > 9  # one HEADERS frame: a 9-byte frame header and a block


async def test_a_write_limit_does_not_make_a_request_queued_whole_wait(
    connect: Connect,
) -> None:
    """With a write limit on the connection's clock, a request whose frames are queued whole
    still wakes its task once: its frames are the writer's, whose stall bound ends a
    connection that stops reading (``writer.py``), so there is no write of its own to bound."""
    conn, server = await connect()
    conn.timekeeper = Timekeeper(StageTimeouts(write=5.0))
    with trio.fail_after(LIMIT):
        progress = progress_at_pool()
        assert await _steps_of_one_request(conn, server, progress) == 1
    assert progress.stage is Stage.COMPLETE
    assert progress.bytes_sent > 9


async def test_a_request_cancelled_before_its_write_keeps_its_frames_whole(
    connect: Connect,
) -> None:
    """Cancelled with its frames still in the writer's queue: the frames leave whole, its
    reset after them, and the connection serves the next request; the abandoned attempt's
    progress is not touched when the writer gets to it."""
    conn, server = await connect()
    with trio.fail_after(LIMIT):
        progress = progress_at_pool()
        with trio.CancelScope() as scope:
            scope.cancel()  # the deadline fired already: the first park raises
            await conn.send_request(get("/victim"), progress)
        assert progress.stage is Stage.REQUEST_HEAD
        assert progress.evidence is Evidence.SENT_NO_RESPONSE
        assert progress.bytes_sent == 0
        received = await server.next(h2.events.RequestReceived)
        assert received.stream_id == 1
        reset = await server.next(h2.events.StreamReset)
        assert (reset.stream_id, reset.error_code) == (1, ErrorCodes.CANCEL)
        assert progress.bytes_sent == 0  # written after the attempt was over: not its bytes
        nxt = progress_at_pool()
        assert await _steps_of_one_request(conn, server, nxt) == 1
    assert not conn.closed


class _Stuck(trio.abc.Stream):
    """A transport whose writes never complete (a peer that stopped reading)."""

    def __init__(self) -> None:
        self.handed: list[int] = []

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self.handed.append(len(data))
        await trio.sleep_forever()

    async def wait_send_all_might_not_block(self) -> None:  # pragma: no cover
        await trio.sleep_forever()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:  # pragma: no cover
        await trio.sleep_forever()
        raise AssertionError

    async def aclose(self) -> None:  # pragma: no cover
        pass


async def test_a_request_queued_behind_a_stuck_write_is_not_sent_when_the_connection_dies(
    connect: Connect,
) -> None:
    """A GET queued whole behind an upload the writer is stuck writing: when the connection
    is given up its frames were never handed to the transport, so it is proven NOT_SENT (and
    may go again on a fresh connection), while the upload, handed over, is SENT_NO_RESPONSE."""
    conn, server = await connect()
    stuck = _Stuck()
    conn.session.writer._stream = stuck
    failures: dict[str, WireError] = {}
    upload, small = progress_at_pool(), progress_at_pool()

    async def request(name: str, progress: AttemptProgress, body: bytes, method: str) -> None:
        try:
            await conn.send_request(get(f"/{name}", body, method), progress)
        except WireError as exc:
            failures[name] = exc

    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(request, "upload", upload, b"x" * 60_000, "POST")
            while not stuck.handed:
                await trio.sleep(0)
            nursery.start_soon(request, "small", small, b"", "GET")
            while conn.active_streams < 2:
                await trio.sleep(0)
            conn.close()
    assert failures["upload"].evidence is Evidence.SENT_NO_RESPONSE
    assert failures["small"].evidence is Evidence.NOT_SENT
    assert failures["small"].reconnect
    assert (small.bytes_sent, small.stage) == (0, Stage.REQUEST_HEAD)
    assert len(stuck.handed) == 1
    server.stream.socket.close()


async def test_our_stream_count_never_falls_below_h2s(connect: Connect) -> None:
    """Requests answered, reset by the server, refused and cancelled, interleaved: the count
    the connection gates new streams on (its own streams) is never below h2's open streams,
    and both come back to zero."""
    conn, server = await connect()
    rng = random.Random(16)
    checks = 0

    def check() -> None:
        nonlocal checks
        checks += 1
        assert conn.session.in_use() >= conn.session.h2.open_outbound_streams

    async def serve() -> None:
        async for event in server.events:
            check()
            if isinstance(event, h2.events.RequestReceived):
                sid = event.stream_id or 0
                choice = sid % 4
                # The client may have reset the stream already (cancelled): then h2 refuses.
                with contextlib.suppress(h2.exceptions.StreamClosedError):
                    if choice == 0:
                        server.h2.send_headers(sid, [(b":status", b"200")])
                        server.h2.send_data(sid, b"ok", end_stream=True)
                    elif choice == 1:
                        server.h2.reset_stream(sid, ErrorCodes.REFUSED_STREAM)
                    elif choice == 2:
                        server.h2.send_headers(sid, [(b":status", b"200")])  # no end
                    # choice 3: no answer; the client gives up
                await server.flush()

    async def one(i: int) -> None:
        progress = progress_at_pool()
        with trio.move_on_after(rng.choice([0.0, 0.01, 0.05])):
            try:
                response = await conn.send_request(get(f"/{i}"), progress)
                check()
                while await response.source.receive_body(progress):
                    check()
            except WireError:
                pass
        check()

    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve)
            async with trio.open_nursery() as clients:
                for i in range(40):
                    clients.start_soon(one, i)
                    if i % 5 == 0:
                        await trio.sleep(0.005)
            nursery.cancel_scope.cancel()
    assert checks > 40
    assert conn.session.in_use() == conn.session.h2.open_outbound_streams == 0
    assert conn.is_available()


def test_a_stream_done_ignores_the_writers_report() -> None:
    class _Owner:
        def consumed(self, stream_id: int, flow_controlled: int) -> None: ...
        def stream_done(self, stream: Stream, unread: int) -> None: ...
        def stream_error(self, stream: Stream, problem: str) -> None: ...

    async def main() -> None:
        progress = AttemptProgress(0.0)
        progress.advance(Stage.REQUEST_HEAD)
        stream = Stream(1, progress, first_offset=0, head_request=False, owner=_Owner())
        stream.on_written(40)
        assert (progress.bytes_sent, progress.stage) == (40, Stage.AWAITING_RESPONSE)
        stream.abandon()
        assert stream.state is StreamState.DONE
        stream.on_written(7)
        assert progress.bytes_sent == 40

    trio.run(main)


class _QuietOwner:
    def consumed(self, stream_id: int, flow_controlled: int) -> None: ...
    def stream_done(self, stream: Stream, unread: int) -> None: ...
    def stream_error(self, stream: Stream, problem: str) -> None: ...


async def test_a_stream_wakes_its_waiter_and_a_second_one_at_once() -> None:
    """A stream parks its one waiter without a parking lot; a second task waiting at the same
    time is woken by the same wake; a wake with nobody waiting is a no-op."""
    stream = Stream(
        1, AttemptProgress(0.0), first_offset=0, head_request=False, owner=_QuietOwner()
    )
    stream.wake()  # nobody waits: nothing happens, nothing is remembered
    woken: list[str] = []

    async def waiter(name: str) -> None:
        await stream.wait()
        woken.append(name)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter, "first")
            nursery.start_soon(waiter, "second")
            await trio.testing.wait_all_tasks_blocked()
            assert woken == []
            stream.wake()
        assert sorted(woken) == ["first", "second"]
        # Each wait needs a wake of its own.
        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter, "third")
            await trio.testing.wait_all_tasks_blocked()
            assert sorted(woken) == ["first", "second"]
            stream.wake()
    assert woken[-1] == "third"


async def test_a_cancelled_waiter_is_forgotten() -> None:
    stream = Stream(
        1, AttemptProgress(0.0), first_offset=0, head_request=False, owner=_QuietOwner()
    )
    with trio.fail_after(5):
        with trio.move_on_after(0.01) as scope:
            await stream.wait()
        assert scope.cancelled_caught
        assert stream._waiter is None  # forgotten: a wake must not reschedule a task not parked
        stream.wake()
        woken = False

        async def waiter() -> None:
            nonlocal woken
            await stream.wait()
            woken = True

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            stream.wake()
    assert woken


class _SlowPeer(trio.abc.SendStream):
    """Each write takes ``delays.pop(0)`` seconds (MockClock time)."""

    def __init__(self, delays: list[float]) -> None:
        self.delays = delays
        self.written: list[bytes] = []

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await trio.sleep(self.delays.pop(0))
        self.written.append(bytes(data))

    async def wait_send_all_might_not_block(self) -> None:  # pragma: no cover
        pass

    async def aclose(self) -> None:  # pragma: no cover
        pass


async def _run_writer(
    delays: list[float], writes: list[tuple[float, bytes]]
) -> tuple[list[bytes], list[str], float]:
    """Queue each of ``writes`` after its pause; returns what was written, the breaks, and
    how long the writer lived."""
    peer, queue, broken = _SlowPeer(delays), QueuedOutput(), []
    writer = Writer(
        peer,  # type: ignore[arg-type]
        queue,  # type: ignore[arg-type]
        lambda _category, message: broken.append(message),
        stall_timeout=10.0,
    )
    start = trio.current_time()
    async with trio.open_nursery() as nursery:

        async def run() -> None:
            await writer.run()
            nursery.cancel_scope.cancel()

        nursery.start_soon(run)
        for pause, data in writes:
            await trio.sleep(pause)
            queue.data += data
            writer.collect()
        await trio.sleep(30)  # idle: the bound must be disarmed
        writer.stop()
    return peer.written, broken, trio.current_time() - start


async def test_the_writer_bounds_each_write_not_their_sum(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Three writes of 6 s back to back (18 s busy, each under the 10 s bound), then an idle
    30 s: nothing is given up; one write of 11 s is."""
    written, broken, _ = await _run_writer([6, 6, 6], [(0, b"a"), (0.1, b"b"), (6.5, b"c")])
    assert written == [b"a", b"b", b"c"]
    assert broken == []
    written, broken, lived = await _run_writer([1, 11], [(0, b"a"), (2, b"b")])
    assert written == [b"a"]
    assert len(broken) == 1
    assert "read nothing for 10.0s" in broken[0]
    assert lived == pytest.approx(2 + 10, abs=0.01)  # given up 10 s into the second write
