"""A call's time left is the earlier of its own deadline and trio's around the caller
(``clock.effective_deadline``, the one reading of it: the retry loop, hedging, the throttle).

On ``MockClock``: a 503 asks for a retry 2 s later; a caller's own cancel scope of 1.5 s
leaves no room for it, so the retry is denied at once (the 503 is the answer), rather than a
backoff sleeping into the caller's scope and being cancelled there with nothing to show.
"""

from __future__ import annotations

import trio
import trio.testing

import trio_retry
from trio_retry.testing import FaultServer, Respond

LATER = [("retry-after", "2")]


async def test_a_callers_scope_is_the_calls_deadline(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.default = Respond(503, headers=LATER)
    outcome: list[object] = []
    async with trio_retry.Client(deadline=None) as client:
        with trio.move_on_after(1.5) as scope:
            try:
                outcome.append(await client.get(server.url + "/"))
            except trio_retry.TrioRetryError as exc:
                outcome.append(exc)
        ended = trio.current_time()
    assert not scope.cancelled_caught  # not left sleeping into the caller's scope
    assert ended < 1.0
    assert len(server.requests) == 1
    [result] = outcome
    status = result.status if isinstance(result, trio_retry.Response) else None
    assert status == 503 or isinstance(result, trio_retry.TrioRetryError)


async def test_without_a_scope_the_retry_waits_as_asked(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.default = Respond(503, headers=LATER)
    async with trio_retry.Client(deadline=None) as client:
        with trio.move_on_after(100):
            try:
                await client.get(server.url + "/")
            except trio_retry.TrioRetryError:
                pass
    assert len(server.requests) >= 2  # the retry went, 2 s later
