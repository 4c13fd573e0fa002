"""Bounded by default: with Client()'s defaults no call waits forever on a server that accepts
and never answers; deadline=None with stage_timeouts=StageTimeouts() is the way out."""

from __future__ import annotations

import pytest
import trio
import trio.testing

import trio_retry
from trio_retry import Evidence, FailureCategory, Stage, StageTimeouts
from trio_retry._call.client_options import DEFAULT_STAGE_TIMEOUTS
from trio_retry.testing import FaultServer, Stall

SILENT = 1e9  # seconds: the server never answers


def test_the_defaults_bound_every_stage() -> None:
    timeouts = trio_retry.Client().config.stage_timeouts
    assert timeouts == DEFAULT_STAGE_TIMEOUTS
    # Connecting, the handshake, the wait for the response head, and each write and read (idle
    # bounds): a server that accepts and then goes silent at any point is bounded.
    assert None not in (
        timeouts.connect,
        timeouts.tls,
        timeouts.first_byte,
        timeouts.write,
        timeouts.read,
    )
    assert trio_retry.Client().config.deadline is None


async def test_a_silent_server_ends_a_default_call(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.default = Stall(SILENT)
    async with trio_retry.Client() as client:
        with pytest.raises(trio_retry.DeadlineExceeded) as info:
            await client.get(server.url + "/")
    error = info.value
    assert error.category is FailureCategory.TIMEOUT
    assert [a.stage for a in error.attempts] == [Stage.AWAITING_RESPONSE] * 3  # GET: retried
    assert error.evidence is Evidence.SENT_NO_RESPONSE
    first_byte = DEFAULT_STAGE_TIMEOUTS.first_byte
    assert first_byte is not None
    # Three first-byte timeouts and two backoffs (at most 0.1 s and 0.2 s with full jitter).
    assert 3 * first_byte <= trio.current_time() <= 3 * first_byte + 0.3 + 0.01


async def test_a_server_that_never_starts_tls_ends_a_default_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        accepted: list[trio.SocketStream] = []

        async def accept_and_say_nothing() -> None:
            while True:
                accepted.append(await listeners[0].accept())

        nursery.start_soon(accept_and_say_nothing)
        async with trio_retry.Client(retry=trio_retry.RetryPolicy(max_attempts=1)) as client:
            with pytest.raises(trio_retry.DeadlineExceeded) as info:
                await client.get(f"https://127.0.0.1:{port}/")
        assert info.value.attempts[0].stage is Stage.TLS
        assert info.value.evidence is Evidence.NOT_SENT
        assert trio.current_time() == pytest.approx(DEFAULT_STAGE_TIMEOUTS.tls, abs=0.01)
        nursery.cancel_scope.cancel()
    for stream in accepted:
        await stream.aclose()
    await listeners[0].aclose()


async def test_deadline_none_and_no_stage_timeouts_is_the_way_out(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.default = Stall(SILENT)
    async with trio_retry.Client(deadline=None, stage_timeouts=StageTimeouts()) as client:
        with trio.move_on_after(3600) as scope:
            await client.get(server.url + "/")
    assert scope.cancelled_caught  # still waiting after an hour: unbounded, as asked
    assert len(server.requests) == 1
