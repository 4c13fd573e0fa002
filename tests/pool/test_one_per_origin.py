"""One connection per origin where the protocol says so (HTTP/3, RFC 9114 §3.3): a burst past
the server's stream limit queues for that connection's streams instead of opening another;
a connection that drains (GOAWAY) lets its successor open at once. On fake connections
(fakes.py): ``per_origin = 1`` is what ``HTTP3Connection`` declares."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from trio_retry._core.evidence import Evidence, FailureCategory
from trio_retry._wire.pool import ConnectionPool
from trio_retry._wire.progress import WireError

from .fakes import Driver

#: Each scenario twice: calls waiting in acquire(), and parked after queue() (conftest.py).
pytestmark = pytest.mark.usefixtures("driver_mode")


def pool_of(max_connections: int = 10, pool_timeout: float | None = None) -> ConnectionPool:
    return ConnectionPool(
        max_connections=max_connections, keepalive_expiry=None, pool_timeout=pool_timeout
    )


async def _burst(driver: Driver, count: int) -> None:
    """``count`` calls to origin "a" at once; the first connection opened."""
    await driver.start_in_order(["a"] * count, multiplexed=True)
    assert len(driver.openings) == 1
    driver.finish_opening(driver.openings[0], "ok")
    await driver.settle()


async def test_a_burst_past_the_stream_limit_queues_on_the_one_connection(
    nursery: trio.Nursery,
) -> None:
    pool = pool_of()
    pool.bind(nursery)
    driver = Driver(pool, nursery, stream_limit=2, one_per_origin=frozenset({"a"}))
    await _burst(driver, 5)
    [conn] = driver.connections
    holding = driver.holders()
    assert len(holding) == 2
    assert (len(driver.acquiring()), len(driver.openings)) == (3, 0)
    assert "1 active, 0 idle, 3 waiting" in repr(pool)
    driver.check_invariants()
    # Each stream that ends goes to the next call in arrival order, on the same connection.
    order = []
    for _ in range(3):
        driver.end(driver.holders()[0], "release")
        await driver.settle()
        driver.check_invariants()
        order.extend(c.number for c in driver.holders() if c.number not in order)
    for call in list(driver.holders()):
        driver.end(call, "release")
    await driver.settle()
    assert [c.number for c in driver.calls if c.order >= 2] == [2, 3, 4]
    assert all(c.conn is conn for c in driver.calls)
    assert len(driver.connections) == 1
    assert pool.opened == 1


async def test_without_the_rule_a_second_connection_opens(nursery: trio.Nursery) -> None:
    """HTTP/2's connections declare no rule: the same burst opens another (as before)."""
    pool = pool_of()
    pool.bind(nursery)
    driver = Driver(pool, nursery, stream_limit=2, answers_h2=frozenset({"a"}))
    await _burst(driver, 5)
    assert len(driver.openings) == 1  # a second connection for the three left


async def test_a_draining_connection_lets_its_successor_open_at_once(
    nursery: trio.Nursery,
) -> None:
    pool = pool_of()
    pool.bind(nursery)
    driver = Driver(pool, nursery, stream_limit=2, one_per_origin=frozenset({"a"}))
    await _burst(driver, 3)
    old = driver.connections[0]
    [queued] = driver.acquiring()
    driver.goaway(old)  # two streams still open on it: it drains them
    await driver.settle()
    assert len(driver.openings) == 1, "the queued call waits for a stream of a draining one"
    assert old in pool.book.draining
    assert not old.closed
    driver.finish_opening(driver.openings[0], "ok")
    await driver.settle()
    new = driver.connections[1]
    assert (queued.state, queued.conn) == ("holding", new)
    driver.check_invariants()
    for call in [c for c in driver.holders() if c.conn is old]:
        driver.end(call, "release")
    await driver.settle()
    assert old.closed
    assert not pool.book.draining
    assert pool.total == 1
    driver.check_invariants()
    pool.close()
    assert new.closed


async def test_a_queued_call_times_out_saying_why(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    pool = pool_of(pool_timeout=5.0)
    pool.bind(nursery)
    driver = Driver(pool, nursery, stream_limit=1, one_per_origin=frozenset({"a"}))
    await _burst(driver, 2)
    [waiting] = driver.acquiring()
    started = trio.current_time()
    while waiting.state == "acquiring":
        await trio.sleep(0.5)
        assert trio.current_time() - started < 60
    error = waiting.error
    assert isinstance(error, WireError)
    assert (error.evidence, error.category) == (Evidence.NOT_SENT, FailureCategory.POOL_TIMEOUT)
    assert "pool_timeout=5" in str(error)
    assert "every stream the server allows on the one connection to a is in use" in str(error)
    assert "RFC 9114" in str(error)
    assert len(driver.connections) == 1


@pytest.mark.parametrize("limit", [1, 3])
async def test_the_rule_holds_under_the_global_limit_too(nursery: trio.Nursery, limit: int) -> None:
    pool = pool_of(max_connections=limit)
    pool.bind(nursery)
    driver = Driver(pool, nursery, stream_limit=1, one_per_origin=frozenset({"a"}))
    await _burst(driver, 4)
    assert pool.total == 1
    for _ in range(4):
        held = driver.holders()
        assert len(held) == 1
        driver.end(held[0], "release")
        await driver.settle()
        driver.check_invariants()
    assert pool.opened == 1
