"""Bounded waits on the clock's lanes (``_wire/clock.py``): exact expiry on MockClock, in arm
order, with the evidence of the stage reached, and no cancel scope per stage on HTTP/1.1."""

from __future__ import annotations

import pytest
import trio
import trio.testing

import trio_retry
from trio_retry import Attempt, Evidence, FailureCategory, RetryPolicy, Stage, StageTimeouts
from trio_retry._wire.clock import Bound
from trio_retry._wire.clock import bound as clock_bound
from trio_retry._wire.progress import AttemptProgress, WireError
from trio_retry._wire.timekeeper import Lane, Timekeeper
from trio_retry.testing import EndlessBody, FaultServer, Respond, Stall


class Target:
    """Stands in for a :class:`~trio_retry._wire.clock.Bound` armed on a lane (``which``)."""

    def __init__(self, name: str, log: list[tuple[str, str, float]], which: str = "") -> None:
        self.name = name
        self.log = log
        self.which = which

    def expire(self) -> None:
        self.log.append((self.name, self.which, trio.current_time()))


def timekeeper_of(
    write: float | None = None, first_byte: float | None = None, read: float | None = None
) -> Timekeeper:
    return Timekeeper(StageTimeouts(write=write, first_byte=first_byte, read=read))


async def test_lanes_expire_each_target_at_its_due_time_in_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[tuple[str, str, float]] = []
    timekeeper = timekeeper_of(first_byte=2.0, read=0.5)
    a, b, c = (
        Target("a", log, "first_byte"),
        Target("b", log, "first_byte"),
        Target("c", log, "read"),
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(timekeeper.run)
        await trio.sleep(0.1)  # the task runs (and slept on empty lanes)
        assert timekeeper.running
        assert timekeeper.first_byte is not None
        assert timekeeper.read is not None
        timekeeper.first_byte.arm(a)  # due 2.1
        await trio.sleep(0.4)
        timekeeper.first_byte.arm(b)  # due 2.5, then disarmed in time
        timekeeper.read.arm(c)  # due 1.0
        await trio.sleep(1.0)
        timekeeper.first_byte.disarm(b)
        timekeeper.first_byte.disarm(b)  # twice is harmless
        await trio.sleep(5.0)
        nursery.cancel_scope.cancel()
    assert not timekeeper.running
    assert [(n, w) for n, w, _ in log] == [("c", "read"), ("a", "first_byte")]
    assert log[0][2] == pytest.approx(1.0, abs=1e-6)
    assert log[1][2] == pytest.approx(2.1, abs=1e-6)


async def test_a_lane_armed_after_a_long_idle_still_fires_on_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Nothing wakes the task when a stage is armed: an empty lane's task sleeps only until
    ``now + limit``, the earliest anything armed later can fall due."""
    log: list[tuple[str, str, float]] = []
    timekeeper = timekeeper_of(write=3.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(timekeeper.run)
        await trio.sleep(7.7)  # idle across two of the task's empty wake-ups
        assert timekeeper.write is not None
        timekeeper.write.arm(Target("x", log, "write"))
        await trio.sleep(10)
        nursery.cancel_scope.cancel()
    assert log == [("x", "write", pytest.approx(10.7, abs=1e-6))]


def test_lanes_exist_only_for_the_limits_given() -> None:
    # (the call deadline's, and the dark-connection watch's two, from clock.py's table: always)
    always = ["deadline", "read_idle", "read_idle_ping"]
    assert [lane.which for lane in timekeeper_of().lanes] == always
    assert [lane.which for lane in timekeeper_of(first_byte=1.0).lanes] == ["first_byte", *always]
    lane = Lane("read", 1.0)
    assert lane.expire(5.0) == 6.0  # empty: looked at again no earlier than now + limit


async def _serve_once(
    reply: bytes, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
) -> None:
    """Accept one connection, read the request head, write ``reply``, then stay silent."""
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    async with listener:
        task_status.started(listener.socket.getsockname()[1])
        async with await listener.accept() as stream:
            data = b""
            while b"\r\n\r\n" not in data:
                data += await stream.receive_some(65536)
            if reply:
                await stream.send_all(reply)
            with trio.move_on_after(60):
                await trio.sleep_forever()


async def test_first_byte_timeout_on_a_lane_is_exact_and_sent_no_response(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(_serve_once, b"")
        async with trio_retry.Client(
            stage_timeouts=StageTimeouts(first_byte=1.5),
            retry=trio_retry.RetryPolicy(max_attempts=1),
        ) as client:
            assert client._rt.timekeeper.running  # the lanes, not a scope, time this call
            start = trio.current_time()
            with pytest.raises(trio_retry.DeadlineExceeded) as info:
                await client.get(f"http://127.0.0.1:{port}/")
            assert trio.current_time() - start == pytest.approx(1.5, abs=0.01)
        nursery.cancel_scope.cancel()
    attempt = info.value.attempts[-1]
    assert (attempt.category, attempt.stage, attempt.evidence) == (
        FailureCategory.TIMEOUT,
        Stage.AWAITING_RESPONSE,
        Evidence.SENT_NO_RESPONSE,
    )
    assert "no response head within first_byte=1.5 s" in str(attempt.error)


async def test_read_timeout_on_a_lane_mid_body_is_partial_response(
    autojump_clock: trio.testing.MockClock,
) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 10
    async with trio.open_nursery() as nursery:
        port = await nursery.start(_serve_once, head)
        async with trio_retry.Client(
            stage_timeouts=StageTimeouts(read=0.75),
            retry=trio_retry.RetryPolicy(max_attempts=1),
        ) as client:
            start = trio.current_time()
            with pytest.raises(trio_retry.RequestFailed) as info:
                await client.get(f"http://127.0.0.1:{port}/")
            assert trio.current_time() - start == pytest.approx(0.75, abs=0.01)
            assert client.pool.idle_count == 0  # the timed-out connection was not kept
        nursery.cancel_scope.cancel()
    attempt = info.value.attempts[-1]
    assert attempt.category is FailureCategory.TIMEOUT
    assert attempt.evidence is Evidence.PARTIAL_RESPONSE
    assert "no body data within read=0.75 s" in str(attempt.error)


# --- call deadlines on the deadline lane (no scope on a ready HTTP/1.1 connection) ------------


async def _deadline_attempt(client: trio_retry.Client, url: str, deadline: float) -> Attempt:
    await client.get(url + "/warm")  # the next call finds this connection ready
    start = trio.current_time()
    with pytest.raises(trio_retry.DeadlineExceeded) as info:
        await client.get(url + "/slow", deadline=deadline)
    assert trio.current_time() - start == pytest.approx(deadline, abs=0.01)
    assert client.pool.idle_count == 0  # the interrupted connection was closed, not kept
    (attempt,) = info.value.attempts
    return attempt


async def test_a_deadline_on_the_lane_ends_as_a_scope_would(
    fault_server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    """Same timing, same record, whether the deadline rides the lane (a ready connection)
    or a cancel scope (forced here by a request hook: a hook may wait, so it is scoped)."""
    fault_server.route("GET", "/slow", Stall(60), Stall(60))
    one = RetryPolicy(max_attempts=1)
    async with trio_retry.Client(retry=one) as client:
        lane = await _deadline_attempt(client, fault_server.url, 1.25)
    hooks: trio_retry.EventHooks = {"request": [lambda request: None]}
    async with trio_retry.Client(retry=one, event_hooks=hooks) as client:
        scoped = await _deadline_attempt(client, fault_server.url, 1.25)
    fields = ("stage", "evidence", "category", "status", "connection_reused")
    assert [getattr(lane, f) for f in fields] == [getattr(scoped, f) for f in fields]
    assert (lane.stage, lane.evidence, lane.category) == (
        Stage.AWAITING_RESPONSE,
        Evidence.SENT_NO_RESPONSE,
        FailureCategory.TIMEOUT,
    )
    assert str(lane.error) == str(scoped.error)


async def test_a_deadline_mid_body_on_the_lane_is_partial_response(
    fault_server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    fault_server.route("GET", "/slow", EndlessBody(chunk=b"x" * 100, rate=100))
    async with trio_retry.Client(retry=RetryPolicy(max_attempts=1)) as client:
        attempt = await _deadline_attempt(client, fault_server.url, 2.5)
    assert (attempt.stage, attempt.evidence, attempt.category, attempt.status) == (
        Stage.RESPONSE_BODY,
        Evidence.PARTIAL_RESPONSE,
        FailureCategory.TIMEOUT,
        None,  # as a scope reports it: the response never was
    )


async def test_deadlines_out_of_order_fall_back_to_a_scope_and_still_hold(
    fault_server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    """A deadline earlier than one already on the lane takes a cancel scope: both calls
    end at their own deadlines, the short one first."""
    fault_server.default = Stall(60)
    ended: dict[str, float] = {}
    async with trio_retry.Client(retry=RetryPolicy(max_attempts=1), max_connections=2) as client:

        async def call(name: str, deadline: float) -> None:
            with pytest.raises(trio_retry.DeadlineExceeded):
                await client.get(fault_server.url + "/" + name, deadline=deadline)
            ended[name] = trio.current_time()

        fault_server.default = Respond(200)
        async with trio.open_nursery() as warm:  # two ready connections
            warm.start_soon(client.get, fault_server.url + "/a")
            warm.start_soon(client.get, fault_server.url + "/b")
        fault_server.default = Stall(60)
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, "long", 3.0)
            await trio.sleep(0)
            nursery.start_soon(call, "short", 1.0)
    assert ended["short"] - start == pytest.approx(1.0, abs=0.01)
    assert ended["long"] - start == pytest.approx(3.0, abs=0.01)


# --- HTTP/2: the lanes fail the one stream, the connection carries on -------------------------


async def test_h2_first_byte_and_read_lanes_fail_only_their_stream(
    fault_server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    fault_server.route("GET", "/stall", Stall(60))
    fault_server.route("GET", "/drip", EndlessBody(chunk=b"d" * 10, rate=1))  # 10 s per chunk
    async with trio_retry.Client(
        http2_prior_knowledge=True,
        retry=RetryPolicy(max_attempts=1),
        stage_timeouts=StageTimeouts(first_byte=1.5, read=0.5),
    ) as client:
        assert (await client.get(fault_server.url + "/warm")).http_version == "HTTP/2"
        start = trio.current_time()
        with pytest.raises(trio_retry.DeadlineExceeded) as stalled:
            await client.get(fault_server.url + "/stall")
        assert trio.current_time() - start == pytest.approx(1.5, abs=0.01)
        start = trio.current_time()
        with pytest.raises(trio_retry.RequestFailed) as dripped:
            await client.get(fault_server.url + "/drip")
        assert trio.current_time() - start == pytest.approx(0.5, abs=0.01)
        after = await client.get(fault_server.url + "/after")
        assert after.attempts[0].connection_reused  # one connection throughout
    first_byte, read = stalled.value.attempts[0], dripped.value.attempts[0]
    assert (first_byte.stage, first_byte.evidence, first_byte.category) == (
        Stage.AWAITING_RESPONSE,
        Evidence.SENT_NO_RESPONSE,
        FailureCategory.TIMEOUT,
    )
    assert "no response head within first_byte=1.5 s" in str(first_byte.error)
    assert (read.evidence, read.category) == (Evidence.PARTIAL_RESPONSE, FailureCategory.TIMEOUT)
    assert "no body data within read=0.5 s" in str(read.error)


# --- the Bound itself: lane or scope, decided once; the expiry reported once ------------------


class Interruptible:
    """A wait's target: records the interruption and ends the wait (as a connection does)."""

    def __init__(self) -> None:
        self.interrupted: list[str] = []
        self.event = trio.Event()

    def stage_expired(self, which: str, progress: AttemptProgress) -> None:
        self.interrupted.append(which)
        self.event.set()


async def _wait_for(target: Interruptible, bound: Bound) -> None:
    """A wait that the target's interruption ends with an error (a closed socket's)."""
    with bound:
        await target.event.wait()
        raise trio.ClosedResourceError("closed under the wait")


async def test_a_bound_on_a_running_lane_reports_the_expiry_as_its_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    timekeeper = timekeeper_of(read=2.0)
    target = Interruptible()
    progress = AttemptProgress(0.0)
    progress.stage = Stage.RESPONSE_BODY
    async with trio.open_nursery() as nursery:
        timekeeper.start(nursery)
        bound = clock_bound("read", timekeeper, target=target)
        bound.progress = progress
        start = trio.current_time()
        with pytest.raises(WireError) as info:
            await _wait_for(target, bound)
        nursery.cancel_scope.cancel()
    assert trio.current_time() - start == pytest.approx(2.0, abs=1e-6)
    assert target.interrupted == ["read"]  # the lane, not a scope, ended it
    assert (info.value.category, info.value.evidence) == (
        FailureCategory.TIMEOUT,
        Evidence.PARTIAL_RESPONSE,
    )
    assert str(info.value) == "no body data within read=2 s"
    assert timekeeper.read is not None
    assert not timekeeper.read.pending  # disarmed


async def test_a_bound_without_a_running_clock_keeps_its_limit_in_a_scope(
    autojump_clock: trio.testing.MockClock,
) -> None:
    target = Interruptible()
    bound = clock_bound("first_byte", timekeeper_of(first_byte=1.5), target=target)  # not running
    bound.progress = AttemptProgress(0.0)
    bound.progress.stage = Stage.AWAITING_RESPONSE
    start = trio.current_time()
    with pytest.raises(WireError) as info:
        await _wait_for(target, bound)
    assert trio.current_time() - start == pytest.approx(1.5, abs=1e-6)
    assert target.interrupted == []  # the scope cancelled the wait itself
    assert (info.value.category, info.value.evidence) == (
        FailureCategory.TIMEOUT,
        Evidence.SENT_NO_RESPONSE,
    )
    assert bound.expired


async def test_what_arrives_before_the_expiry_wins(autojump_clock: trio.testing.MockClock) -> None:
    """A wait that completes although its lane fired is not turned into an error."""
    timekeeper = timekeeper_of(write=1.0)
    target = Interruptible()
    async with trio.open_nursery() as nursery:
        timekeeper.start(nursery)
        bound = clock_bound("write", timekeeper, target=target)
        bound.progress = AttemptProgress(0.0)
        with bound:
            await target.event.wait()  # ended by the interruption, but without an error
        nursery.cancel_scope.cancel()
    assert bound.expired
    assert target.interrupted == ["write"]


async def test_outer_cancellation_goes_through_a_bound_unconverted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    for running in (True, False):
        timekeeper = timekeeper_of(read=10.0)
        target = Interruptible()
        async with trio.open_nursery() as nursery:
            if running:
                timekeeper.start(nursery)
            bound = clock_bound("read", timekeeper, target=target)
            bound.progress = AttemptProgress(0.0)
            with trio.move_on_after(1.0) as outer:
                with bound:
                    await trio.sleep_forever()
            nursery.cancel_scope.cancel()
        assert outer.cancelled_caught
        assert not bound.expired
        assert target.interrupted == []


def test_a_bound_without_a_limit_does_nothing() -> None:
    bound = clock_bound("read", timekeeper_of(), target=Interruptible())
    assert bound.limit is None
    with bound:
        pass
    assert not bound.expired
