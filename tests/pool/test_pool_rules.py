"""The pool's rules, one scenario each, on fake connections (see fakes.py)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from trio_retry import StageTimeouts
from trio_retry._core.evidence import Evidence, FailureCategory, Stage
from trio_retry._wire.contract import PooledConnection
from trio_retry._wire.pool import ConnectionPool
from trio_retry._wire.progress import AttemptProgress, WireError
from trio_retry._wire.timekeeper import Timekeeper

from .fakes import Driver, FakeConnection, queued_call

#: Each scenario twice: calls waiting in acquire(), and parked after queue() (conftest.py).
pytestmark = pytest.mark.usefixtures("driver_mode")


def pool_of(max_connections: int, per_origin: int | None = None) -> ConnectionPool:
    return ConnectionPool(
        max_connections=max_connections,
        max_connections_per_origin=per_origin,
        keepalive_expiry=None,
    )


async def test_waiters_are_served_in_arrival_order_across_origins(nursery: trio.Nursery) -> None:
    pool = pool_of(1)
    pool.bind(nursery)
    driver = Driver(pool, nursery)
    first = driver.start("a", multiplexed=False)
    await driver.settle()
    driver.finish_opening(driver.openings[0], "ok")
    await driver.settle()
    b = driver.start("b", multiplexed=False)  # arrives first, for another origin
    await driver.settle()
    a = driver.start("a", multiplexed=False)  # arrives later, for the busy connection's origin
    await driver.settle()
    assert "1 active, 0 idle, 2 waiting" in repr(pool)
    driver.end(first, "release")
    await driver.settle()
    # The released connection of "a" is closed so that "b", which came first, can open one.
    assert driver.connections[0].closed
    assert b.state == "acquiring"
    assert len(driver.openings) == 1
    assert driver.openings[0].origin == "b"
    assert a.state == "acquiring"
    driver.check_invariants()
    driver.finish_opening(driver.openings[0], "ok")
    await driver.settle()
    driver.end(b, "release")
    await driver.settle()
    driver.finish_opening(driver.openings[0], "ok")
    await driver.settle()
    assert a.state == "holding"
    assert [c.origin for c in sorted(driver.calls, key=lambda c: c.order)] == ["a", "b", "a"]


async def test_a_released_connection_goes_to_its_own_origin_when_that_waiter_came_first(
    nursery: trio.Nursery,
) -> None:
    pool = pool_of(1)
    pool.bind(nursery)
    driver = Driver(pool, nursery)
    first = driver.start("a", multiplexed=False)
    await driver.settle()
    driver.finish_opening(driver.openings[0], "ok")
    await driver.settle()
    a, b = await driver.start_in_order(["a", "b"], multiplexed=False)
    driver.end(first, "release")
    await driver.settle()
    assert a.state == "holding"
    assert a.conn is driver.connections[0]
    assert b.state == "acquiring"
    assert not driver.openings
    driver.check_invariants()


async def test_an_idle_http2_connection_is_closed_to_make_room_for_another_origin(
    nursery: trio.Nursery,
) -> None:
    pool = pool_of(1)
    pool.bind(nursery)
    driver = Driver(pool, nursery, answers_h2=frozenset({"a"}))
    first = driver.start("a", multiplexed=True)
    await driver.settle()
    driver.finish_opening(driver.openings[0], "ok")
    await driver.settle()
    driver.end(first, "release")
    await driver.settle()
    assert "0 active, 1 idle, 0 waiting" in repr(pool)
    b = driver.start("b", multiplexed=False)
    await driver.settle()
    assert driver.connections[0].closed
    assert [o.origin for o in driver.openings] == ["b"]
    driver.finish_opening(driver.openings[0], "ok")
    await driver.settle()
    assert b.state == "holding"
    driver.check_invariants()


async def test_http2_waiters_share_one_opening_even_when_its_starter_is_cancelled(
    nursery: trio.Nursery,
) -> None:
    pool = pool_of(10)
    pool.bind(nursery)
    driver = Driver(pool, nursery, answers_h2=frozenset({"a"}), stream_limit=3)
    calls = await driver.start_in_order(["a"] * 5, multiplexed=True)
    assert len(driver.openings) == 1, "one opening for all five"
    assert "1 active, 0 idle, 5 waiting" in repr(pool)
    calls[0].scope.cancel()  # the call that started the opening
    await driver.settle()
    assert len(driver.openings) == 1  # still going, for the others
    driver.finish_opening(driver.openings[0], "ok")
    await driver.settle()
    # Three streams allowed: three calls share the connection, the fourth opens a second one.
    assert [c.state for c in calls] == ["done", "holding", "holding", "holding", "acquiring"]
    assert len({id(c.conn) for c in calls[1:4]}) == 1
    assert len(driver.openings) == 1
    driver.check_invariants()
    driver.finish_opening(driver.openings[0], "ok")
    await driver.settle()
    assert calls[4].state == "holding"
    assert len(driver.connections) == 2


async def test_an_opening_nobody_waits_for_any_more_is_kept_idle(nursery: trio.Nursery) -> None:
    pool = pool_of(10)
    pool.bind(nursery)
    driver = Driver(pool, nursery, answers_h2=frozenset({"a"}))
    call = driver.start("a", multiplexed=True)
    await driver.settle()
    call.scope.cancel()
    await driver.settle()
    assert "1 active, 0 idle, 0 waiting" in repr(pool)  # the opening holds its slot
    driver.finish_opening(driver.openings[0], "ok")
    await driver.settle()
    assert "0 active, 1 idle, 0 waiting" in repr(pool)
    again = driver.start("a", multiplexed=True)
    await driver.settle()
    assert again.state == "holding"
    assert again.conn is driver.connections[0]


async def test_after_goaway_the_next_calls_share_one_new_connection(nursery: trio.Nursery) -> None:
    pool = pool_of(10)
    pool.bind(nursery)
    driver = Driver(pool, nursery, answers_h2=frozenset({"a"}), stream_limit=100)
    first = driver.start("a", multiplexed=True)
    await driver.settle()
    driver.finish_opening(driver.openings[0], "ok")
    await driver.settle()
    old = driver.connections[0]
    driver.goaway(old)  # a stream is still open on it: it finishes, no new stream goes there
    later = [driver.start("a", multiplexed=True) for _ in range(20)]
    await driver.settle()
    assert len(driver.openings) == 1
    driver.finish_opening(driver.openings[0], "ok")
    await driver.settle()
    assert all(c.state == "holding" and c.conn is driver.connections[1] for c in later)
    driver.end(first, "release")
    await driver.settle()
    assert old.closed
    assert pool.total == 1
    driver.check_invariants()


async def test_a_failed_opening_fails_every_call_that_shared_it(nursery: trio.Nursery) -> None:
    pool = pool_of(10)
    pool.bind(nursery)
    driver = Driver(pool, nursery, answers_h2=frozenset({"a"}))
    calls = [driver.start("a", multiplexed=True) for _ in range(3)]
    await driver.settle()
    driver.finish_opening(driver.openings[0], "fail")
    await driver.settle()
    for call in calls:
        assert isinstance(call.error, WireError)
        assert call.error.category is FailureCategory.CONNECT
        assert call.error.evidence is Evidence.NOT_SENT
        assert call.error.stage is Stage.CONNECT
    assert len({id(c.error) for c in calls}) == 3  # one exception object per call
    assert pool.total == 0
    assert pool.waiting == 0


async def test_an_origin_answering_http11_is_not_coalesced_any_more(nursery: trio.Nursery) -> None:
    pool = pool_of(10)
    pool.bind(nursery)
    driver = Driver(pool, nursery)  # expects HTTP/2 but gets HTTP/1.1
    calls = await driver.start_in_order(["a"] * 3, multiplexed=True)
    driver.finish_opening(driver.openings[0], "ok")
    await driver.settle()
    assert calls[0].state == "holding"
    # The other two open their own HTTP/1.1 connections, side by side.
    assert len(driver.openings) == 2
    driver.check_invariants()


async def test_fail_waiters_ends_every_waiting_call_and_keeps_the_rest(
    nursery: trio.Nursery,
) -> None:
    pool = pool_of(1)
    pool.bind(nursery)
    driver = Driver(pool, nursery)
    holder = driver.start("a", multiplexed=False)
    await driver.settle()
    driver.finish_opening(driver.openings[0], "ok")
    await driver.settle()
    waiting = await driver.start_in_order(["a", "b", "c"], multiplexed=False)

    def draining() -> WireError:
        return WireError(
            "draining",
            stage=Stage.ADMISSION,
            evidence=Evidence.NOT_SENT,
            category=FailureCategory.ADMISSION,
        )

    assert pool.fail_waiters(draining) == 3
    await driver.settle()
    assert all(isinstance(c.error, WireError) for c in waiting)
    assert holder.state == "holding"
    assert "1 active, 0 idle, 0 waiting" in repr(pool)
    driver.end(holder, "release")
    await driver.settle()
    assert "0 active, 1 idle, 0 waiting" in repr(pool)


async def test_per_origin_limit_and_global_limit_together(nursery: trio.Nursery) -> None:
    pool = pool_of(3, per_origin=2)
    pool.bind(nursery)
    driver = Driver(pool, nursery)
    a = await driver.start_in_order(["a"] * 3, multiplexed=False)
    b = await driver.start_in_order(["b"] * 2, multiplexed=False)
    # a: 2 (its limit), b: 1 (the global limit); a's third and b's second wait.
    assert sorted(o.origin for o in driver.openings) == ["a", "a", "b"]
    for opening in list(driver.openings):
        driver.finish_opening(opening, "ok")
    await driver.settle()
    assert [c.state for c in a + b] == ["holding", "holding", "acquiring", "holding", "acquiring"]
    driver.check_invariants()
    # An "a" connection ends: a's third call arrived before b's second, and may use a's slot.
    driver.end(a[0], "die")
    await driver.settle()
    assert [o.origin for o in driver.openings] == ["a"]
    driver.check_invariants()


async def test_pool_timeout_counts_nothing_while_an_opening_is_shared(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock, driver_mode: bool
) -> None:
    """An HTTP/2 waiter sharing its origin's opening counts no ``pool_timeout`` meanwhile (the
    opening has its own connect and TLS limits): one the new connection could not carry times
    out ``pool_timeout`` after the opening ended, not after it arrived. Waiting in ``acquire``
    with no timekeeper, its limit is a scope; parked after ``queue()`` (``driver_mode``), as the
    attempt runner's with the client's timekeeper, it is the lane's: woken when its first
    limit falls due, it waits again in ``acquire``."""
    pool = ConnectionPool(max_connections=1, keepalive_expiry=None, pool_timeout=5.0)
    keeper = Timekeeper(StageTimeouts(), pool=5.0) if driver_mode else None
    if keeper is not None:
        keeper.start(nursery)
    pool.bind(nursery, keeper)
    driver = Driver(pool, nursery, answers_h2=frozenset({"a"}), stream_limit=1)
    started = trio.current_time()
    first, second = await driver.start_in_order(["a", "a"], multiplexed=True)
    if keeper is not None:
        assert keeper.pool is not None
        assert list(keeper.pool.pending.values()) == [started + 5.0] * 2  # no scope
    await trio.sleep(8.0)  # the connection takes 8 s to open
    assert second.state == "acquiring", "timed out while it shared the opening"
    driver.finish_opening(driver.openings[0], "ok")
    await driver.settle()
    assert (first.state, second.state) == ("holding", "acquiring")
    with trio.fail_after(60):
        while second.state == "acquiring":
            await trio.sleep(0.25)
    assert isinstance(second.error, WireError)
    assert second.error.category is FailureCategory.POOL_TIMEOUT
    assert second.error.evidence is Evidence.NOT_SENT
    assert trio.current_time() - started == pytest.approx(13.0, abs=0.3)
    assert keeper is None or keeper.pool is None or keeper.pool.pending == {}
    assert pool.waiting == 0
    driver.check_invariants()


async def test_a_connection_that_takes_streams_again_serves_its_waiters_at_once(
    nursery: trio.Nursery,
) -> None:
    """A connection made suspect by a silence (``contract.DarkWatch``) takes no stream; calls
    that find it so queue (the pool is full); when it hears from its peer again the pool is
    told (``on_available``) and serves them on it at once, without waiting for a stream of it
    to end."""
    pool = pool_of(1)
    pool.bind(nursery)
    driver = Driver(pool, nursery, answers_h2=frozenset({"a"}), stream_limit=4)
    first = driver.start("a", multiplexed=True)
    await driver.settle()
    driver.finish_opening(driver.openings[0], "ok")
    await driver.settle()
    (conn,) = driver.connections
    conn.suspect = True
    waiting = await driver.start_in_order(["a", "a"], multiplexed=True)
    assert [c.state for c in waiting] == ["acquiring", "acquiring"]
    assert "1 active, 0 idle, 2 waiting" in repr(pool)
    driver.check_invariants()
    conn.lift()
    await driver.settle()
    assert [(c.state, c.conn) for c in waiting] == [("holding", conn), ("holding", conn)]
    assert first.state == "holding"
    driver.check_invariants()


def _draining() -> WireError:
    return WireError(
        "draining", stage=Stage.POOL, evidence=Evidence.NOT_SENT, category=FailureCategory.ADMISSION
    )


async def test_unscoped_acquire_ends_a_waiter_granted_just_before_fail_waiters(
    nursery: trio.Nursery, driver_mode: bool
) -> None:
    """``acquire(scopes=...)`` (a caller with no cancel scope of its own): ``fail_waiters()``
    also ends a waiter granted a connection that has not run since; it goes back. The same
    for a waiter parked by its caller after ``queue()`` (``driver_mode``: the attempt
    runner's way), whose ``acquire(joined=True)`` finds the grant undone."""
    pool = pool_of(1)
    pool.bind(nursery)
    conn = FakeConnection("a", multiplexed=False)
    scopes: dict[trio.CancelScope, AttemptProgress] = {}

    async def opener(progress: AttemptProgress) -> PooledConnection:
        return conn

    held = await pool.acquire("a", AttemptProgress(trio.current_time()), opener, scopes=scopes)
    assert held is conn
    assert scopes == {}  # (its opening's scope, gone with it)
    outcome: list[object] = []

    async def second() -> None:
        progress = AttemptProgress(trio.current_time())
        try:
            if driver_mode:
                assert pool.take_idle("a", progress) is None
                waiter = queued_call(opener)
                assert pool.queue("a", progress, waiter) is True
                await waiter
                outcome.append(
                    await pool.acquire("a", progress, waiter, scopes=scopes, joined=True)
                )
            else:
                outcome.append(await pool.acquire("a", progress, opener, scopes=scopes))
        except WireError as exc:
            outcome.append(exc)

    nursery.start_soon(second)
    await trio.testing.wait_all_tasks_blocked()
    assert pool.waiting == 1
    pool.release(conn)  # handed to the waiter, which has not run since
    assert pool.fail_waiters(_draining) == 0  # no one is waiting any more
    await trio.testing.wait_all_tasks_blocked()
    (error,) = outcome
    assert isinstance(error, WireError), error
    assert "draining" in str(error)
    assert (error.evidence, error.category) == (Evidence.NOT_SENT, FailureCategory.ADMISSION)
    assert "0 active, 1 idle, 0 waiting" in repr(pool)


async def test_unscoped_acquire_opens_its_slot_in_a_scope_of_the_callers_registry(
    nursery: trio.Nursery,
) -> None:
    """A slot granted through ``acquire(scopes=...)`` is opened in a cancel scope registered
    in ``scopes`` while it opens; cancelled (``aclose()`` cancels them), it ends as a
    ``WireError`` (``NOT_SENT``) and the slot is free again."""
    pool = pool_of(1)
    pool.bind(nursery)
    scopes: dict[trio.CancelScope, AttemptProgress] = {}
    opening = trio.Event()
    progress = AttemptProgress(trio.current_time())
    outcome: list[WireError] = []

    async def opener(progress: AttemptProgress) -> PooledConnection:
        opening.set()
        await trio.sleep_forever()
        raise AssertionError("not reached")

    async def call() -> None:
        try:
            await pool.acquire("a", progress, opener, scopes=scopes)
        except WireError as exc:
            outcome.append(exc)

    nursery.start_soon(call)
    await opening.wait()
    assert list(scopes.values()) == [progress]
    assert "1 active, 0 idle, 0 waiting" in repr(pool)
    next(iter(scopes)).cancel()
    await trio.testing.wait_all_tasks_blocked()
    (error,) = outcome
    assert (error.evidence, error.category) == (
        Evidence.NOT_SENT,
        FailureCategory.CONNECTION_BROKEN,
    )
    assert scopes == {}
    assert "0 active, 0 idle, 0 waiting" in repr(pool)
