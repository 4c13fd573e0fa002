"""Deadlines and stage timeouts end the same way on both protocols (#13): DeadlineExceeded /
category TIMEOUT, at the deadline, when the server stops reading the upload."""

from __future__ import annotations

from typing import Any

import pytest
import trio

import trio_retry
from trio_retry import Evidence, FailureCategory
from trio_retry.testing import FaultServer
from trio_retry.testing._script import StopReading

MiB = 1024 * 1024


async def _deaf_listener(
    nursery: trio.Nursery, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
) -> None:
    """HTTP/1.1's "server stops reading": accepts, then never reads a byte (bounded: 30 s)."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])

    async def hold(stream: trio.SocketStream) -> None:
        with trio.move_on_after(30):
            await trio.sleep_forever()
        await stream.aclose()

    await trio.serve_listeners(hold, listeners, handler_nursery=nursery)


@pytest.fixture(params=["HTTP/1.1", "HTTP/2"])
async def deaf(nursery: trio.Nursery, request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """A URL whose server stops reading, and the client options to reach it."""
    if request.param == "HTTP/1.1":
        port = await nursery.start(_deaf_listener, nursery)
        return f"http://127.0.0.1:{port}", {}
    server = FaultServer()
    server.default = StopReading(seconds=30)
    await nursery.start(server.serve)
    return server.url, {"http2_prior_knowledge": True}


async def test_a_call_deadline_is_deadline_exceeded_on_both_protocols(
    deaf: tuple[str, dict[str, Any]], autojump_clock: trio.testing.MockClock
) -> None:
    url, options = deaf
    async with trio_retry.Client(**options) as client:
        start = trio.current_time()
        with pytest.raises(trio_retry.DeadlineExceeded) as info:
            await client.put(url + "/up", content=b"u" * (32 * MiB), deadline=1.0)
        assert trio.current_time() - start == pytest.approx(1.0, abs=0.01)
    attempt = info.value.attempts[-1]
    assert (attempt.category, attempt.evidence) == (
        FailureCategory.TIMEOUT,
        Evidence.SENT_NO_RESPONSE,
    )
    assert info.value.category is FailureCategory.TIMEOUT


async def test_a_write_timeout_is_timeout_on_both_protocols(
    deaf: tuple[str, dict[str, Any]], autojump_clock: trio.testing.MockClock
) -> None:
    url, options = deaf
    timeouts = trio_retry.StageTimeouts(write=0.5)
    retry = trio_retry.RetryPolicy(max_attempts=1)
    async with trio_retry.Client(stage_timeouts=timeouts, retry=retry, **options) as client:
        start = trio.current_time()
        with pytest.raises(trio_retry.TrioRetryError) as info:
            await client.put(url + "/up", content=b"u" * (32 * MiB))
        assert trio.current_time() - start == pytest.approx(0.5, abs=0.01)
    (attempt,) = info.value.attempts  # type: ignore[attr-defined]
    assert attempt.category is FailureCategory.TIMEOUT
    assert "the server read none of the request within write=0.5 s" in str(info.value)
