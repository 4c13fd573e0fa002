"""A call waiting in the pool keeps its ``pool_timeout`` on the client's timekeeper (issue #41).

At 10,000 calls at once over HTTP/2, 9,000 wait for a stream: a cancel scope each for their
``pool_timeout`` (``clock.until``) was about 20 µs and ten objects per queued call. The wait
is an entry of the timekeeper's pool lane instead (the parked waiter itself, woken when it
falls due): no scope of its own, and the same ``PoolTimeout`` at the same instant.

On ``trio.testing.MockClock(autojump_threshold=0)`` against a FaultServer (exact virtual
times, the server's count of requests)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

import trio_retry
from trio_retry import Evidence, FailureCategory, Stage
from trio_retry._wire import pool as pool_module
from trio_retry.testing import FaultServer, Respond

POOL = 5.0  # Client()'s pool_timeout
WAITERS = 3
LIMIT = 1000.0  # virtual seconds: a call still waiting then was not bounded


@pytest.fixture
def scopes(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The instants of every cancel scope the pool enters for a waiter (``clock.until``)."""
    entered: list[float] = []
    real = pool_module.until

    def spy(at: float) -> trio.CancelScope:
        entered.append(at)
        return real(at)

    monkeypatch.setattr(pool_module, "until", spy)
    return entered


async def test_waiting_calls_hold_no_scope_and_time_out_on_the_pool_lane(
    server: FaultServer, autojump_clock: trio.testing.MockClock, scopes: list[float]
) -> None:
    server.default = Respond(200, body=b"b" * 100_000)
    once = trio_retry.RetryPolicy(max_attempts=1)
    errors: list[trio_retry.PoolTimeout] = []
    async with trio_retry.Client(max_connections=1, retry=once) as client:
        lane = client._rt.timekeeper.pool
        assert lane is not None
        assert lane.limit == POOL

        async def wait_in_the_pool() -> None:
            with pytest.raises(trio_retry.PoolTimeout) as info:
                await client.get(server.url + "/status")
            errors.append(info.value)

        async with client.stream("GET", server.url + "/export"):  # holds the one connection
            start = trio.current_time()
            with trio.fail_after(LIMIT):
                async with trio.open_nursery() as nursery:
                    for _ in range(WAITERS):
                        nursery.start_soon(wait_in_the_pool)
                    await trio.testing.wait_all_tasks_blocked()
                    assert trio.current_time() == start
                    assert client._rt.pool.waiting == WAITERS
                    # One lane entry each, due pool_timeout from now, and no scope entered.
                    assert list(lane.pending.values()) == [start + POOL] * WAITERS
                    assert scopes == []
            elapsed = trio.current_time() - start
        assert lane.pending == {}
        assert client._rt.pool.waiting == 0
    assert elapsed == POOL  # each ended at its pool_timeout, exactly
    assert len(errors) == WAITERS
    for error in errors:
        assert (error.evidence, error.category) == (
            Evidence.NOT_SENT,
            FailureCategory.POOL_TIMEOUT,
        )
        assert [a.stage for a in error.attempts] == [Stage.POOL]
        assert "no connection became free within pool_timeout=5 s" in str(error)
    assert scopes == []
    assert server.executed_count("GET", "/status") == 0


async def test_cancelling_a_waiting_call_leaves_the_lane_at_once(
    server: FaultServer, autojump_clock: trio.testing.MockClock, scopes: list[float]
) -> None:
    async with trio_retry.Client(max_connections=1) as client:
        lane = client._rt.timekeeper.pool
        assert lane is not None
        async with client.stream("GET", server.url + "/export"):
            with trio.move_on_after(1.0) as caller:  # the caller's own scope, shorter
                await client.get(server.url + "/status")
            assert caller.cancelled_caught
            assert lane.pending == {}
            assert client._rt.pool.waiting == 0
    assert scopes == []
    assert server.executed_count("GET", "/status") == 0
