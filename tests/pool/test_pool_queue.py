"""A call that finds no connection ready waits parked by itself (``ConnectionPool.queue``), with
neither its exchange's coroutine nor the pool's in its stack (issue #41: at 10,000 calls at once
over HTTP/2, 9,000 wait for a stream, and those two were a sixth of what each held). The
outcome of the wait is the one ``acquire`` gives when it waits itself (``tests/pool/conftest.py``
runs the pool's scenarios both ways); these are the cases only this way has: what is given
back when it is cancelled and what its task holds (``test_pool_rules.py`` has, both ways, the
restarted ``pool_timeout`` after a shared opening, on the timekeeper's lane when queued, and
``fail_waiters()`` between a grant and its run).

On ``trio.testing.MockClock(autojump_threshold=0)`` against fakes and a FaultServer (exact
virtual times, the server's count of requests)."""

from __future__ import annotations

import types

import trio
import trio.testing

import trio_retry
from trio_retry.testing import FaultServer, Respond

LIMIT = 1000.0  # virtual seconds: a call still waiting then was not bounded


def _stack(task: trio.lowlevel.Task) -> list[str]:
    """The names of the coroutines a parked task's stack holds, outermost first."""
    names = []
    awaited: object = task.coro
    while isinstance(awaited, types.CoroutineType):
        names.append(awaited.cr_code.co_qualname)
        awaited = awaited.cr_await
    return names


async def test_a_queued_call_holds_neither_its_exchange_nor_the_pools_coroutine(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.default = Respond(200, body=b"b" * 100_000)
    async with trio_retry.Client(max_connections=1) as client:
        async with client.stream("GET", server.url + "/export"):  # holds the one connection
            tasks: list[trio.lowlevel.Task] = []

            async def queued() -> None:
                tasks.append(trio.lowlevel.current_task())
                await client.get(server.url + "/status")

            with trio.fail_after(LIMIT):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(queued)
                    await trio.testing.wait_all_tasks_blocked()
                    assert client._rt.pool.waiting == 1
                    # Parked in the retry loop's own frame: nothing below it.
                    assert _stack(tasks[0])[1:] == ["Client.get", "send"]
                    nursery.cancel_scope.cancel()
        assert client._rt.pool.waiting == 0
        assert "0 waiting" in repr(client._rt.pool)
    assert server.executed_count("GET", "/status") == 0


async def test_a_queued_call_cancelled_gives_its_bulkhead_permit_back(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    """With a bulkhead of two and one connection, a call takes a permit at once and queues for
    the connection; cancelled there, it gives the permit back: two more calls get in after."""
    server.default = Respond(200, body=b"b" * 100_000)
    bulkhead = trio_retry.Upstream(max_concurrency=2)
    async with trio_retry.Client(max_connections=1, default_upstream=bulkhead) as client:
        async with client.stream("GET", server.url + "/export"):  # one permit, the connection
            with trio.move_on_after(1.0) as caller:
                await client.get(server.url + "/status")  # the second permit, then queued
            assert caller.cancelled_caught
            assert client._rt.pool.waiting == 0
            state = client._rt.upstreams.get(trio_retry.URL(server.url).origin)
            assert state.limiter is not None
            assert state.limiter.borrowed_tokens == 1  # the stream's only
        with trio.fail_after(LIMIT):
            async with trio.open_nursery() as nursery:
                for _ in range(2):
                    nursery.start_soon(client.get, server.url + "/status")
    assert server.executed_count("GET", "/status") == 2
