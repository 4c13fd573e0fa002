"""The wait for a pooled connection is bounded by default (issue #38 row 5, SPEC §20).

``Client()``'s ``pool_timeout`` is 5 s (``_wire/clock.py``'s table): with
``max_connections=1``, a ``get()`` inside an open ``stream()`` to the same origin used to wait
forever for the connection the block holds; it ends with ``PoolTimeout`` (``NOT_SENT``, stage
``POOL``; retried like any ``NOT_SENT`` failure, so after three waits) whose message names
``pool_timeout``, ``max_connections`` and the open stream holding the slot. A shorter call
deadline ends the wait first, and says the same. ``pool_timeout=None`` is the explicit way
out.

On ``trio.testing.MockClock(autojump_threshold=0)`` against a FaultServer (exact virtual
times, the server's count of requests), and in real time against nginx (its access log)."""

from __future__ import annotations

import random

import pytest
import trio
import trio.testing

import trio_retry
from tests.support.fixtures import StartNginx
from tests.support.fixtures import nginx as nginx
from trio_retry import Evidence, FailureCategory, Stage
from trio_retry._call.client_options import DEFAULT_POOL_TIMEOUT
from trio_retry._wire.clock import Default
from trio_retry.testing import FaultServer, Respond

POOL = 5.0
LIMIT = 1000.0  # virtual seconds: a call still waiting then was not bounded
HELD = (
    "1 held by a response still open in `async with client.stream(...)`: read the body to "
    "its end or leave the block before another call needs a connection, or raise "
)


@pytest.fixture
async def server(server: FaultServer) -> FaultServer:
    """``tests/conftest.py``'s HTTP/1.1 server, answering 100 kB by default."""
    server.default = Respond(200, body=b"b" * 100_000)
    return server


def pool(client: trio_retry.Client) -> dict[object, int]:
    """What the client's pool counts as held by open ``stream()`` blocks."""
    return client._rt.pool.book.ledger.held


def test_the_default_is_bounded_and_told_apart() -> None:
    assert trio_retry.Client().config.pool_timeout == DEFAULT_POOL_TIMEOUT == POOL
    assert isinstance(trio_retry.Client().config.pool_timeout, Default)
    assert trio_retry.Client(pool_timeout=None).config.pool_timeout is None
    assert trio_retry.Client(pool_timeout=5).config.pool_timeout == 5.0
    # 0 meant "no limit": a hang for whoever meant "do not wait". None says "no limit".
    with pytest.raises(ValueError, match="pool_timeout must be a positive number of seconds"):
        trio_retry.Client(pool_timeout=0)


async def test_a_get_inside_a_stream_block_ends_with_pool_timeout(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    seed = 38
    twin = random.Random(seed)  # draws what the client's rng will draw
    policy = trio_retry.RetryPolicy()
    backoffs = [policy.backoff.delay(1, twin), policy.backoff.delay(2, twin)]
    async with trio_retry.Client(max_connections=1, rng=random.Random(seed)) as client:
        async with client.stream("GET", server.url + "/export") as streamed:
            assert pool(client) != {}
            start = trio.current_time()
            with trio.fail_after(LIMIT), pytest.raises(trio_retry.PoolTimeout) as info:
                await client.get(server.url + "/status")
            elapsed = trio.current_time() - start
            assert streamed.status == 200
        assert pool(client) == {}  # the block gave its connection back
        after = await client.get(server.url + "/status")  # and it serves the next call
    error = info.value
    assert (error.evidence, error.category) == (Evidence.NOT_SENT, FailureCategory.POOL_TIMEOUT)
    assert [a.stage for a in error.attempts] == [Stage.POOL] * 3
    assert elapsed == pytest.approx(3 * POOL + sum(backoffs), abs=1e-6)
    message = str(error)
    assert "no connection became free within pool_timeout=5 s (Client()'s default" in message
    assert "all max_connections=1 connections are in use" in message
    assert HELD + "max_connections" in message
    assert after.status == 200
    assert server.executed_count("GET", "/status") == 1  # the waiting call sent nothing
    assert server.executed_count("GET", "/export") == 1


async def test_a_shorter_deadline_ends_the_wait_and_says_what_holds_the_connection(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    async with trio_retry.Client(max_connections=1, max_connections_per_origin=1) as client:
        async with client.stream("GET", server.url + "/export"):
            with trio.fail_after(LIMIT), pytest.raises(trio_retry.DeadlineExceeded) as info:
                await client.get(server.url + "/status", deadline=3)
            elapsed = trio.current_time()
    assert elapsed == pytest.approx(3.0, abs=1e-6)  # within the deadline
    error = info.value
    (attempt,) = error.attempts
    assert (attempt.stage, error.evidence) == (Stage.POOL, Evidence.NOT_SENT)
    assert "the call's deadline=3 s expired during POOL" in str(error)
    assert HELD + "max_connections" in str(error)
    assert server.executed_count("GET", "/status") == 0


async def test_the_per_origin_limit_is_named_when_it_binds(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    once = trio_retry.RetryPolicy(max_attempts=1)
    async with trio_retry.Client(max_connections_per_origin=1, retry=once) as client:
        async with client.stream("GET", server.url + "/export"):
            with trio.fail_after(LIMIT), pytest.raises(trio_retry.PoolTimeout) as info:
                await client.get(server.url + "/status")
    message = str(info.value)
    assert f"all 1 connections to {server.url} are in use (max_connections_per_origin=1)" in (
        message
    )
    assert HELD + "max_connections_per_origin" in message


async def test_pool_timeout_none_waits_as_long_as_the_caller_lets_it(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    async with trio_retry.Client(max_connections=1, pool_timeout=None) as client:
        async with client.stream("GET", server.url + "/export"):
            with trio.move_on_after(LIMIT) as waited:
                await client.get(server.url + "/status")
    assert waited.cancelled_caught  # still waiting after LIMIT: the explicit way out
    assert server.executed_count("GET", "/status") == 0


async def test_a_get_inside_a_stream_block_behind_nginx(nginx: StartNginx) -> None:
    """Real time, the default scaled down to 0.3 s; nginx logs only the streamed request."""
    server = nginx()
    once = trio_retry.RetryPolicy(max_attempts=1)
    scaled = Default(0.3)
    async with trio_retry.Client(max_connections=1, pool_timeout=scaled, retry=once) as client:
        async with client.stream(
            "GET", server.h1_url("/get"), headers={"x-request-id": "streamed"}
        ) as streamed:
            with trio.fail_after(10), pytest.raises(trio_retry.PoolTimeout) as info:
                await client.get(server.h1_url("/get"), headers={"x-request-id": "waiting"})
            assert streamed.status == 200
        after = await client.get(server.h1_url("/get"), headers={"x-request-id": "after"})
    assert info.value.evidence is Evidence.NOT_SENT
    assert "pool_timeout=0.3 s (Client()'s default" in str(info.value)
    assert HELD + "max_connections" in str(info.value)
    assert after.content == b"ok"
    assert server.log(expect=2).by_request_id() == {"streamed": 1, "after": 1}
