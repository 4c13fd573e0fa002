"""HTTP/3 under ``trio.testing.MockClock(autojump_threshold=0)``, as a user tests with it: a
call completes, and a stalled one ends at its deadline in virtual time. The driver once went
round a wait that ended at once forever (QUIC's timer at the current instant, an
acknowledgement held back by pacing): virtual time never moved, so the test hung. A thread
watching real time ends the test's scope if it does not finish, so a hang fails it."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

import trio_retry
from trio_retry import Evidence, RetryPolicy, Upstream
from trio_retry.testing import FaultServer, Stall

REAL_SECONDS = 20


@asynccontextmanager
async def real_time_bound(seconds: float) -> AsyncIterator[trio.CancelScope]:
    """A scope a thread cancels after ``seconds`` of real time (virtual time may not move)."""
    token = trio.lowlevel.current_trio_token()
    with trio.CancelScope() as scope:
        timer = threading.Timer(
            seconds, lambda: trio.from_thread.run_sync(scope.cancel, trio_token=token)
        )
        timer.start()
        try:
            yield scope
        finally:
            timer.cancel()
    assert not scope.cancelled_caught, f"not done within {seconds} s of real time"


async def test_a_call_over_http3_on_virtual_time(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    server = FaultServer(tls=True, http3=True)
    await nursery.start(server.serve)
    server.route("GET", "/slow", Stall(10))
    async with real_time_bound(REAL_SECONDS):
        async with trio_retry.Client(
            upstreams={server.url: Upstream(http3=True)},
            ssl_context=server.client_ssl_context(),
            retry=RetryPolicy(max_attempts=1),
        ) as client:
            response = await client.get(f"{server.url}/")
            started = trio.current_time()
            with pytest.raises(trio_retry.DeadlineExceeded) as caught:
                await client.get(f"{server.url}/slow", deadline=0.3)
            took = trio.current_time() - started
    assert (response.status, response.http_version) == (200, "HTTP/3")
    assert caught.value.evidence is Evidence.SENT_NO_RESPONSE
    assert took == pytest.approx(0.3, abs=0.01)
