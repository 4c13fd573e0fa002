"""The pool with thousands of waiters: served in arrival order, the counts exact after every
step, and each waiter looked at a bounded number of times whatever their number (counted, not
timed: issue #41 measured 39.5 million sort keys for 8,000 calls, the waiting queue sorted
again for each waiter an HTTP/2 opening could not carry)."""

from __future__ import annotations

import pytest
import trio

from trio_retry._wire import pool_ledger
from trio_retry._wire.pool import ConnectionPool

from .fakes import Driver, FakeConnection

#: Each scenario twice: calls waiting in acquire(), and parked after queue() (conftest.py).
pytestmark = pytest.mark.usefixtures("driver_mode")


class CountingWaiter(pool_ledger.Waiter):
    """A waiter that counts how often the pool reads its arrival number or its kind: what an
    ordering of the queue (a sort, a scan, a move) has to read."""

    __slots__ = ("_multiplexed", "_seq")
    reads = 0

    @property  # type: ignore[override]
    def seq(self) -> int:
        CountingWaiter.reads += 1
        return self._seq

    @seq.setter
    def seq(self, value: int) -> None:
        self._seq = value

    @property  # type: ignore[override]
    def multiplexed(self) -> bool:
        CountingWaiter.reads += 1
        return self._multiplexed

    @multiplexed.setter
    def multiplexed(self, value: bool) -> None:
        self._multiplexed = value


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> type[CountingWaiter]:
    monkeypatch.setattr(pool_ledger, "Waiter", CountingWaiter)
    CountingWaiter.reads = 0
    return CountingWaiter


#: Reads of a waiter's arrival number and kind per waiter, at most (about 5 are made: on
#: arrival, when it is first in its queue, when it is served).
READS_PER_WAITER = 12


async def test_thousands_of_http2_waiters_share_openings_in_arrival_order(
    nursery: trio.Nursery, counted: type[CountingWaiter]
) -> None:
    waiters, streams = 3000, 100
    pool = ConnectionPool(max_connections=1000, keepalive_expiry=None)
    pool.bind(nursery)
    driver = Driver(pool, nursery, answers_h2=frozenset({"a"}), stream_limit=streams)
    calls = await driver.start_in_order(["a"] * waiters, multiplexed=True)
    assert len(driver.openings) == 1, "one opening for all of them"
    assert f"1 active, 0 idle, {waiters} waiting" in repr(pool)
    for served in range(streams, waiters + 1, streams):
        # Each new connection carries the next hundred, in the order they came; the others
        # keep their places and share the next opening, which starts at once.
        driver.finish_opening(driver.openings[0], "ok")
        await driver.settle()
        # (Which calls hold: the ones woken together run in no set order.)
        assert [c.state == "holding" for c in calls] == [i < served for i in range(waiters)]
        connections = served // streams
        opening = 1 if served < waiters else 0
        assert len(driver.openings) == opening
        assert f"{connections + opening} active, 0 idle, {waiters - served} waiting" in repr(pool)
    driver.check_invariants()
    assert len(driver.connections) == waiters // streams
    assert counted.reads <= READS_PER_WAITER * waiters, counted.reads


async def test_a_stream_freed_goes_to_the_first_http2_waiter_not_the_opening_s_last(
    nursery: trio.Nursery, counted: type[CountingWaiter]
) -> None:
    """With the origin at its limit, thousands wait for a stream: each stream freed goes to
    the earliest waiter, whichever connection frees it."""
    waiters, streams, connections = 2000, 50, 4
    pool = ConnectionPool(
        max_connections=100, max_connections_per_origin=connections, keepalive_expiry=None
    )
    pool.bind(nursery)
    driver = Driver(pool, nursery, answers_h2=frozenset({"a"}), stream_limit=streams)
    calls = await driver.start_in_order(["a"] * waiters, multiplexed=True)
    while driver.openings:
        driver.finish_opening(driver.openings[0], "ok")
        await driver.settle()
    held = streams * connections
    assert f"{connections} active, 0 idle, {waiters - held} waiting" in repr(pool)
    for done in range(waiters - held):
        driver.end(calls[done], "release")
        await driver.settle()
        assert calls[held + done].state == "holding"
        assert calls[held + done].order == held + done
        if done % 250 == 0:
            assert f"{connections} active, 0 idle, {waiters - held - done - 1} waiting" in repr(
                pool
            )
            driver.check_invariants()
    assert counted.reads <= READS_PER_WAITER * waiters, counted.reads


async def test_thousands_of_calls_through_fifty_http1_connections_in_arrival_order(
    nursery: trio.Nursery, counted: type[CountingWaiter]
) -> None:
    waiters, slots = 3000, 50
    pool = ConnectionPool(max_connections=slots, keepalive_expiry=None)
    pool.bind(nursery)
    driver = Driver(pool, nursery)
    calls = await driver.start_in_order(["a"] * waiters, multiplexed=False)
    assert len(driver.openings) == slots
    assert f"{slots} active, 0 idle, {waiters - slots} waiting" in repr(pool)
    for opening in list(driver.openings):
        driver.finish_opening(opening, "ok")
    await driver.settle()
    for done in range(waiters - slots):
        driver.end(calls[done], "release")
        await driver.settle()
        # The connection given back goes to the next waiter in arrival order.
        assert calls[slots + done].state == "holding"
        assert calls[slots + done].order == slots + done
        if done % 500 == 0:
            assert f"{slots} active, 0 idle, {waiters - slots - done - 1} waiting" in repr(pool)
            driver.check_invariants()
    assert len(driver.connections) == slots
    assert counted.reads <= READS_PER_WAITER * waiters, counted.reads


async def test_a_call_finds_a_free_stream_without_looking_at_every_connection(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With 200 HTTP/2 connections of one origin all busy, each call that arrives looks at a
    bounded number of them (the pool keeps the ones that may have a free stream), not at all
    200; and each stream given back goes to the first waiter."""
    connections, waiters = 200, 1000
    looked = 0
    available = FakeConnection.is_available

    def counted(self: FakeConnection) -> bool:
        nonlocal looked
        looked += 1
        return available(self)

    monkeypatch.setattr(FakeConnection, "is_available", counted)
    pool = ConnectionPool(max_connections=connections, keepalive_expiry=None)
    pool.bind(nursery)
    driver = Driver(pool, nursery, answers_h2=frozenset({"a"}), stream_limit=1)
    busy = await driver.start_in_order(["a"] * connections, multiplexed=True)
    with trio.fail_after(60):
        while driver.openings:  # one stream each: an opening per call
            driver.finish_opening(driver.openings[0], "ok")
            await driver.settle()
    assert all(c.state == "holding" for c in busy)
    looked = 0
    calls = await driver.start_in_order(["a"] * waiters, multiplexed=True)
    assert f"{connections} active, 0 idle, {waiters} waiting" in repr(pool)
    assert looked <= 3 * waiters, looked
    for done in range(connections):
        driver.end(busy[done], "release")
        await driver.settle()
        assert calls[done].state == "holding"
    driver.check_invariants()
