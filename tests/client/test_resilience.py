"""Hedging, adaptive throttling and circuit breaking end to end (SPEC §15).

Real loopback sockets against ``trio_retry.testing.FaultServer``; time on
``trio.testing.MockClock(autojump_threshold=0)`` (the ``autojump_clock`` fixture), so the
virtual times asserted are the client's own waits, not the machine's speed. What the server
received is counted from its own record (``server.requests``).
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

import trio_retry
from trio_retry import (
    AdaptiveThrottle,
    AdmissionRejected,
    CircuitBreaker,
    CircuitState,
    Evidence,
    Hedging,
    RejectReason,
    RetryBudget,
    RetryPolicy,
    Stage,
    Upstream,
)
from trio_retry.testing import FaultServer, Respond, refused_port

ONE = RetryPolicy(max_attempts=1)
THREE = RetryPolicy(
    max_attempts=3, backoff=trio_retry.Backoff(initial=0.01, max=0.05, jitter="none")
)


# --- hedging -------------------------------------------------------------------------------


async def test_hedge_cuts_latency_of_a_stalled_first_attempt(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.script(Respond(200, body=b"slow", delay=5.0), Respond(200, body=b"fast"))
    upstream = Upstream(hedging=Hedging(delay=0.1))
    async with trio_retry.Client(retry=THREE, default_upstream=upstream) as client:
        start = trio.current_time()
        response = await client.get(server.url + "/item")
        took = trio.current_time() - start
        status = client.upstream_status(server.url)
    assert response.status == 200
    assert response.content == b"fast"
    assert took == pytest.approx(0.1, abs=0.01)  # the hedge's delay, not the stall's 5 s
    first, second = response.attempts
    # The stalled copy: cancelled, recorded with the stage it reached and what that proves.
    assert first.number == 1
    assert first.stage == Stage.AWAITING_RESPONSE
    assert first.evidence is Evidence.SENT_NO_RESPONSE
    assert str(first.error) == "cancelled: attempt 2 answered first"
    assert (second.number, second.status, second.evidence) == (2, 200, Evidence.RESPONSE_RECEIVED)
    assert [r.method for r in server.requests] == ["GET", "GET"]
    # Two connections: the loser's HTTP/1.1 connection was closed, not reused.
    assert server.requests[0].connection_id != server.requests[1].connection_id
    assert (status.calls_in_window, status.hedges_in_window) == (1, 1)


async def test_http2_hedge_resets_the_losing_stream_and_keeps_the_connection(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    server = FaultServer(http2=True)
    await nursery.start(server.serve)
    server.script(Respond(200, body=b"slow", delay=5.0), Respond(200, body=b"fast"))
    upstream = Upstream(hedging=Hedging(delay=0.1))
    async with trio_retry.Client(
        http2_prior_knowledge=True, retry=THREE, default_upstream=upstream
    ) as client:
        response = await client.get(server.url + "/item")
        again = await client.get(server.url + "/item")
    assert response.content == b"fast"
    assert response.attempts[0].http_version == "HTTP/2"
    assert str(response.attempts[0].error) == "cancelled: attempt 2 answered first"
    assert again.status == 200
    # One connection for all three streams: the loser's stream was reset (RST_STREAM), its
    # connection carried on.
    assert len({r.connection_id for r in server.requests}) == 1
    assert [r.stream_id for r in server.requests] == [1, 3, 5]


async def test_no_hedge_when_the_first_attempt_answers_in_time(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.script(Respond(200, delay=0.05))
    upstream = Upstream(hedging=Hedging(delay=0.1))
    async with trio_retry.Client(default_upstream=upstream) as client:
        response = await client.get(server.url + "/item")
    assert len(response.attempts) == 1
    assert len(server.requests) == 1


async def test_a_post_is_never_hedged(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.script(Respond(200, delay=1.0))
    upstream = Upstream(hedging=Hedging(delay=0.1, max_share=1.0))
    async with trio_retry.Client(default_upstream=upstream) as client:
        start = trio.current_time()
        response = await client.post(server.url + "/orders", content=b"{}")
        took = trio.current_time() - start
        # The same POST with an Idempotency-Key is idempotent: hedged.
        server.script(Respond(200, delay=1.0), Respond(200))
        keyed = await client.post(server.url + "/orders", content=b"{}", idempotency_key="k-1")
    assert took == pytest.approx(1.0, abs=0.01)
    assert len(response.attempts) == 1
    assert [r.method for r in server.requests[:1]] == ["POST"]
    assert len(keyed.attempts) == 2
    assert len(server.requests) == 3
    assert server.requests[1].header("idempotency-key") == "k-1"
    assert server.requests[2].header("idempotency-key") == "k-1"


async def test_per_call_hedging_and_opt_out(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    async with trio_retry.Client(retry=THREE) as client:
        server.script(Respond(200, delay=1.0), Respond(200))
        hedged = await client.get(server.url + "/a", hedging=Hedging(0.2))
        assert len(hedged.attempts) == 2
        with pytest.raises(TypeError, match="hedging="):
            await client.get(server.url + "/a", hedging=True)  # type: ignore[arg-type]
    upstream = Upstream(hedging=Hedging(0.2))
    async with trio_retry.Client(retry=THREE, default_upstream=upstream) as client:
        server.script(Respond(200, delay=1.0), Respond(200))
        plain = await client.get(server.url + "/b", hedging=False)
    assert len(plain.attempts) == 1


async def test_hedges_respect_their_share(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    """With max_share=0.5 over a long window, 6 stalled calls get ceil(0.5 x calls) hedges."""
    server.default = Respond(200, delay=0.3)
    upstream = Upstream(hedging=Hedging(0.1, max_share=0.5, window=100.0))
    async with trio_retry.Client(retry=THREE, default_upstream=upstream) as client:
        copies = [len((await client.get(server.url + "/s")).attempts) for _ in range(6)]
    # Call k (1-based) may hedge while hedges so far < 0.5 x k.
    assert copies == [2, 1, 2, 1, 2, 1]
    assert len(server.requests) == 9


@pytest.mark.parametrize(
    "upstream",
    [
        # The only bulkhead permit is the stalled copy's: a hedge never queues for one.
        Upstream(hedging=Hedging(0.1, max_share=1.0), max_concurrency=1),
        # An empty retry budget: a hedge is a retry for accounting.
        Upstream(hedging=Hedging(0.1, max_share=1.0), budget=RetryBudget(0.0, 0.0)),
    ],
    ids=["bulkhead", "budget"],
)
async def test_no_hedge_without_a_permit_or_budget(
    server: FaultServer, autojump_clock: trio.testing.MockClock, upstream: Upstream
) -> None:
    server.script(Respond(200, delay=1.0))
    async with trio_retry.Client(retry=THREE, default_upstream=upstream) as client:
        start = trio.current_time()
        response = await client.get(server.url + "/item")
        took = trio.current_time() - start
    assert len(response.attempts) == 1
    assert len(server.requests) == 1
    assert took == pytest.approx(1.0, abs=0.01)


async def test_outer_cancellation_ends_every_copy(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.default = Respond(200, delay=10.0)
    upstream = Upstream(hedging=Hedging(0.1, max_hedges=2, max_share=1.0))
    async with trio_retry.Client(default_upstream=upstream) as client:
        with trio.move_on_after(1.0) as scope:
            await client.get(server.url + "/slow")
        assert scope.cancelled_caught  # a plain Cancelled reached the caller's scope
        assert client.pool.active_count == 0
    # The first copy and one hedge (max_share=1.0 allows one hedge per call), both ended.
    assert len(server.requests) == 2


# --- adaptive throttling -------------------------------------------------------------------


async def test_throttle_slows_on_429_and_recovers(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    throttle = AdaptiveThrottle(min_rate=1.0)
    upstream = Upstream(throttle=throttle)
    url = server.url + "/limited"
    async with trio_retry.Client(retry=ONE, default_upstream=upstream) as client:
        # Unthrottled: 20 calls, no waiting at all (the bucket is off).
        start = trio.current_time()
        for _ in range(20):
            assert (await client.get(url)).status == 200
        assert trio.current_time() - start == pytest.approx(0.0, abs=0.01)
        assert client.upstream_status(server.url).send_rate is None
        await trio.sleep(1.0)  # a whole measurement bucket: the measured rate is known
        # The server throttles three times in a row.
        server.script(*(Respond(429) for _ in range(3)))
        for _ in range(3):
            assert (await client.get(url)).status == 429
        cut = client.upstream_status(server.url).send_rate
        assert cut is not None
        assert cut < 20
        # Now calls are spaced by the bucket: 5 calls take at least 4 / rate seconds.
        sent_before = len(server.requests)
        start = trio.current_time()
        for _ in range(5):
            assert (await client.get(url)).status == 200
        paced = trio.current_time() - start
        rate = client.upstream_status(server.url).send_rate
        assert rate is not None
        assert paced >= 4 / max(rate, cut) - 0.01
        # Recovery: successes raise the rate again along the cubic.
        for _ in range(40):
            await client.get(url)
        recovered = client.upstream_status(server.url).send_rate
        assert recovered is not None
        assert recovered > cut
    assert len(server.requests) == sent_before + 45


async def test_throttle_rejects_not_sent_when_the_wait_would_cross_the_deadline(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    upstream = Upstream(throttle=AdaptiveThrottle(min_rate=0.5, max_rate=0.5))
    async with trio_retry.Client(retry=ONE, default_upstream=upstream) as client:
        server.script(Respond(429))
        await client.get(server.url + "/x")
        received = len(server.requests)
        # The bucket now refills at 0.5/s: the next token is 2 s away.
        with pytest.raises(AdmissionRejected) as info:
            await client.get(server.url + "/x", deadline=0.5)
        # A longer deadline waits for its token instead.
        start = trio.current_time()
        assert (await client.get(server.url + "/x", deadline=5.0)).status == 200
        waited = trio.current_time() - start
    error = info.value
    assert error.evidence is Evidence.NOT_SENT
    assert error.attempts[-1].stage == Stage.ADMISSION
    assert "adaptive throttle" in str(error)
    assert error.reason is RejectReason.THROTTLED
    assert len(server.requests) == received + 1  # the rejected call never reached it
    assert waited == pytest.approx(2.0, abs=0.01)


# --- circuit breaking ----------------------------------------------------------------------


async def test_breaker_fails_fast_not_sent_while_down_and_recovers(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    breaker = CircuitBreaker(consecutive_failures=3, cool_down=1.0, name="orders-api")
    upstream = Upstream(breaker=breaker)
    url = server.url + "/orders/1"
    async with trio_retry.Client(retry=ONE, default_upstream=upstream) as client:
        # 4xx is a working server answering: it never opens the breaker.
        server.script(*(Respond(404) for _ in range(5)))
        for _ in range(5):
            assert (await client.get(url)).status == 404
        assert client.upstream_status(server.url).circuit is CircuitState.CLOSED
        # The upstream goes down: 503 three times, then the breaker is open.
        server.default = Respond(503)
        for _ in range(3):
            assert (await client.get(url)).status == 503
        status = client.upstream_status(server.url)
        assert (status.circuit, status.circuit_openings) == (CircuitState.OPEN, 1)
        received = len(server.requests)
        start = trio.current_time()
        for _ in range(10):
            with pytest.raises(AdmissionRejected) as info:
                await client.get(url)
        assert trio.current_time() - start == 0.0  # fail fast: no waiting at all
        assert len(server.requests) == received  # nothing reached the upstream
        error = info.value
        assert error.evidence is Evidence.NOT_SENT
        assert error.attempts[-1].stage == Stage.ADMISSION
        assert "circuit breaker of orders-api is open" in str(error)
        assert error.reason is RejectReason.BREAKER_OPEN
        # After the cool-down one probe goes; it fails: open again, for twice as long.
        await trio.sleep(1.0)
        assert client.upstream_status(server.url).circuit is CircuitState.HALF_OPEN
        assert (await client.get(url)).status == 503
        status = client.upstream_status(server.url)
        assert status.circuit is CircuitState.OPEN
        assert status.circuit_retry_in == pytest.approx(2.0)
        # The upstream returns; after the cool-down the probe passes and it closes.
        server.default = Respond(200)
        await trio.sleep(2.0)
        assert (await client.get(url)).status == 200
        assert client.upstream_status(server.url).circuit is CircuitState.CLOSED
        assert (await client.get(url)).status == 200
    assert len(server.requests) == received + 3


async def test_breaker_opens_on_connect_failures(autojump_clock: trio.testing.MockClock) -> None:
    url = f"http://127.0.0.1:{refused_port()}/"
    upstream = Upstream(breaker=CircuitBreaker(consecutive_failures=2, cool_down=5.0))
    async with trio_retry.Client(retry=THREE, default_upstream=upstream) as client:
        with pytest.raises(AdmissionRejected) as info:
            await client.get(url)  # attempt 1 and 2 fail to connect; 3 is rejected
    attempts = info.value.attempts
    assert [a.stage for a in attempts] == [Stage.CONNECT, Stage.CONNECT, Stage.ADMISSION]
    assert info.value.reason is RejectReason.BREAKER_OPEN
    assert all(a.evidence is Evidence.NOT_SENT for a in attempts)


def test_upstream_rejects_wrong_types() -> None:
    with pytest.raises(TypeError, match=r"Upstream\.breaker"):
        Upstream(breaker=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"Upstream\.hedging"):
        Upstream(hedging=0.1)  # type: ignore[arg-type]
    fresh = Upstream(throttle=AdaptiveThrottle()).fresh()
    assert fresh.throttle == AdaptiveThrottle()
