"""Regressions found by reading the attempt/time redesign: a hedged reconnect's place in the
trail, a breaker probe that meets a connection's refusal, and a call with a tiny deadline
that must not leave the timekeeper's task waking hundreds of times a second."""

from __future__ import annotations

import pytest
import trio
import trio.testing

import trio_retry
from trio_retry import Backoff, CircuitBreaker, Hedging, RetryPolicy, Upstream
from trio_retry._wire import timekeeper
from trio_retry.testing import FaultServer, GoAway, Respond

QUICK = RetryPolicy(max_attempts=3, backoff=Backoff(initial=0.01, max=0.01, jitter="none"))


async def test_a_hedged_calls_reconnect_keeps_its_place_in_the_trail(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """A 503, then a stream refused by a GOAWAY on the reused connection (sent again
    uncounted), then 200: the trail numbers its tries 1, 2, 3 (the refused try is the second
    attempt's, not a second "attempt 1")."""
    server = FaultServer(http2=True)
    await nursery.start(server.serve)
    server.script(Respond(200), Respond(503), GoAway(last_stream_id=3), Respond(200))
    async with trio_retry.Client(
        http2_prior_knowledge=True,
        retry=QUICK,
        default_upstream=Upstream(hedging=Hedging(delay=10.0)),
    ) as client:
        await client.get(server.url + "/warm")
        response = await client.get(server.url + "/item")
    assert response.status == 200
    assert [a.number for a in response.attempts] == [1, 2, 3]
    assert [a.status for a in response.attempts] == [503, None, 200]


async def test_a_breaker_probe_refused_by_its_connection_gives_its_slot_back(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """The breaker opens on a 503; after its cool-down the probe meets a GOAWAY on the reused
    connection and goes again on a fresh one (uncounted): its probe slot is given back, so the
    probe's retry is admitted and the breaker closes on its 200 (before: "probes are in
    flight" for good)."""
    server = FaultServer(http2=True)
    await nursery.start(server.serve)
    server.script(Respond(200), Respond(503), GoAway(last_stream_id=3), Respond(200))
    breaker = CircuitBreaker(consecutive_failures=1, cool_down=1.0)
    async with trio_retry.Client(
        http2_prior_knowledge=True,
        retry=RetryPolicy(max_attempts=1),
        default_upstream=Upstream(breaker=breaker),
    ) as client:
        await client.get(server.url + "/warm")
        assert (await client.get(server.url + "/fail")).status == 503
        await trio.sleep(1.5)
        probe = await client.get(server.url + "/probe")
        assert probe.status == 200
        assert len(probe.attempts) == 2  # the refused try, then the answer
        assert (await client.get(server.url + "/after")).status == 200


@pytest.mark.parametrize("deadline", [0.002, 1e-9])
async def test_a_tiny_deadline_does_not_make_the_clock_busy(
    nursery: trio.Nursery, deadline: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After one call with a tiny (or already past) deadline on the deadline lane, an idle
    client's timekeeper task looks at its lanes no more often than every MIN_SPAN."""
    looks = 0
    expire = timekeeper.Lane.expire

    def counting(self: timekeeper.Lane, now: float) -> float:
        nonlocal looks
        looks += 1
        return expire(self, now)

    monkeypatch.setattr(timekeeper.Lane, "expire", counting)
    server = FaultServer()
    await nursery.start(server.serve)
    server.default = Respond(200, delay=0.5)
    async with trio_retry.Client(retry=RetryPolicy(max_attempts=1)) as client:
        await client.get(server.url + "/warm")
        with pytest.raises(trio_retry.DeadlineExceeded):
            await client.get(server.url + "/x", deadline=deadline)
        assert client._rt.timekeeper.deadline.limit >= timekeeper.MIN_SPAN
        looks = 0
        await trio.sleep(0.5)
    # (each look walks every lane: at most a few lanes per look, one look per MIN_SPAN)
    lanes = len(client._rt.timekeeper.lanes)
    assert looks <= lanes * (0.5 / timekeeper.MIN_SPAN + 2)
