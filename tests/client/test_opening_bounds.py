"""An opening's connect and TLS limits (``transport.py``, ``clock.opening``): a call that opens
its connection in a cancel scope of its own (the pool's, which ``aclose()`` cancels) keeps
those limits on its client's timekeeper, whose expiry cancels that scope, instead of a scope
each (issue #41: at 10,000 calls at once the second scope was a sixth of what each held). The
timeouts are the same either way: the stage's ``TIMEOUT``, ``NOT_SENT``, at the limit.
Virtual time (``MockClock``) on real loopback sockets: a connect that never completes (a full
backlog), a handshake nobody answers (a listener that accepts and stays silent).
"""

from __future__ import annotations

import math

import pytest
import trio
import trio.testing

import trio_retry
from tests.support.loopback import connects_waiting
from trio_retry import Evidence, FailureCategory, RetryPolicy, Stage, StageTimeouts

ONE = RetryPolicy(max_attempts=1)
LIMITS = StageTimeouts(connect=2.0, tls=3.0, write=30, first_byte=30, read=30)


async def _fails_after(
    client: trio_retry.Client, url: str, lane: str, deadline: float | None = None
) -> tuple[trio_retry.RequestFailed, float, int]:
    """The call's failure, when it came (virtual seconds), and the most entries ``lane`` of
    the client's timekeeper held meanwhile."""
    keeper = client._rt.timekeeper
    seen = 0
    started = trio.current_time()
    failure: list[trio_retry.RequestFailed] = []

    async def call() -> None:
        with pytest.raises(trio_retry.RequestFailed) as failed:
            await client.get(url, deadline=deadline)
        failure.append(failed.value)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        for _ in range(100):  # (virtual time: the call ends at its limit)
            if failure:
                break
            seen = max(seen, len(getattr(keeper, lane).pending))
            await trio.sleep(0.1)
    return failure[0], trio.current_time() - started, seen


async def test_a_connect_past_its_limit_ends_on_the_lane_at_the_limit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with connects_waiting() as port:
        async with trio_retry.Client(retry=ONE, stage_timeouts=LIMITS) as client:
            failed, took, armed = await _fails_after(client, f"http://127.0.0.1:{port}/", "connect")
    attempt = failed.attempts[0]
    assert (attempt.category, attempt.stage, attempt.evidence) == (
        FailureCategory.TIMEOUT, Stage.CONNECT, Evidence.NOT_SENT,
    )  # fmt: skip
    assert f"127.0.0.1:{port}" in str(attempt.error)
    assert took == pytest.approx(2.0)
    assert armed == 1  # on the timekeeper's connect lane, not in a scope of its own


@pytest.mark.parametrize("http2", [False, True])  # opened by the call; by the pool's task
async def test_a_handshake_past_its_limit_ends_on_the_lane_at_the_limit(
    http2: bool, autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]

    async def silent(stream: trio.SocketStream) -> None:
        await trio.sleep_forever()

    nursery.start_soon(trio.serve_listeners, silent, listeners)
    async with trio_retry.Client(retry=ONE, stage_timeouts=LIMITS, http2=http2) as client:
        failed, took, armed = await _fails_after(client, f"https://127.0.0.1:{port}/", "tls")
    attempt = failed.attempts[0]
    assert (attempt.category, attempt.stage, attempt.evidence) == (
        FailureCategory.TIMEOUT, Stage.TLS, Evidence.NOT_SENT,
    )  # fmt: skip
    assert took == pytest.approx(3.0)
    assert armed == 1


async def test_a_call_with_a_deadline_keeps_its_connect_limit_in_a_scope(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An attempt bounded by its call deadline opens in that deadline's scope, none of the
    pool's: its connect keeps a scope of its own, with the same outcome."""
    with connects_waiting() as port:
        async with trio_retry.Client(retry=ONE, stage_timeouts=LIMITS) as client:
            failed, took, armed = await _fails_after(
                client, f"http://127.0.0.1:{port}/", "connect", deadline=60.0
            )
    attempt = failed.attempts[0]
    assert (attempt.category, attempt.stage) == (FailureCategory.TIMEOUT, Stage.CONNECT)
    assert took == pytest.approx(2.0)
    assert armed == 0
    assert not math.isinf(took)
