"""A call deadline on a shared HTTP/2 connection rides the client's deadline lane, not a cancel
scope per call (``HTTP2Connection.attempt_expired``, ``_call/attempt.py``): when it passes, the
attempt's own waits end (its stream, its wait for a slot, the idle health check, its frames'
write) with the evidence of the stage it reached, and the connection and its other streams
carry on. The connection-level tests call ``attempt_expired`` as the lane does; the client-level
ones check that the lane is what ends the call (a spy on it), at the deadline, on both
transports."""

from __future__ import annotations

from typing import Any, cast
from unittest import mock

import h2.events
import h2.settings
import pytest
import trio
import trio.testing

import trio_retry
from tests.conftest import client_for
from trio_retry import Evidence, FailureCategory
from trio_retry._wire.http2.connection import HTTP2Connection
from trio_retry._wire.progress import AttemptProgress, WireError
from trio_retry.testing import FaultServer, Respond, Stall
from trio_retry.testing._script import StopReading

from .test_http2 import LIMIT, Connect, connect, get, progress_at_pool

__all__ = ["connect"]  # the fixture, from test_http2.py

MiB = 1024 * 1024
ONCE = trio_retry.RetryPolicy(max_attempts=1)


# --- the connection: each wait an attempt can be in ---------------------------------------------


async def send(
    conn: HTTP2Connection,
    results: dict[str, Any],
    name: str,
    progress: AttemptProgress,
    method: str = "GET",
) -> None:
    """``send_request`` of ``/name``; its response or its WireError in ``results[name]``."""
    try:
        results[name] = await conn.send_request(get("/" + name, b"x", method), progress)
    except WireError as exc:
        results[name] = exc


async def test_an_attempt_waiting_for_a_stream_slot_stops_there_not_sent(
    connect: Connect,
) -> None:
    conn, server = await connect({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 1})
    with trio.fail_after(LIMIT):
        while conn.session.max_streams != 1:  # the server's SETTINGS, read by the reader task
            await trio.sleep(0.001)
        results: dict[str, Any] = {}
        late = progress_at_pool()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send, conn, results, "first", progress_at_pool())
            received = cast(h2.events.RequestReceived, await server.next(h2.events.RequestReceived))
            nursery.start_soon(send, conn, results, "late", late)
            await trio.testing.wait_all_tasks_blocked()  # "late" waits for the one slot
            conn.attempt_expired(late)
            await trio.testing.wait_all_tasks_blocked()
            assert "late" in results  # it stopped at once, the first stream still open
            await server.respond(received.stream_id or 0)
    error = results["late"]
    assert isinstance(error, WireError)
    assert (error.category, error.evidence) == (FailureCategory.TIMEOUT, Evidence.NOT_SENT)
    assert results["first"].status == 200
    assert not conn.closed


async def test_an_attempt_in_the_idle_health_check_stops_there_not_sent(
    connect: Connect,
) -> None:
    conn, server = await connect(ping_after_idle=0.05, ping_timeout=LIMIT * 2)
    blocker = trio.Event()
    original = server.stream.receive_some

    async def deaf(max_bytes: int | None = None) -> bytes:  # the PING is never answered
        await blocker.wait()
        return await original(max_bytes)

    server.stream.receive_some = deaf  # type: ignore[method-assign]
    progress = progress_at_pool()
    with trio.fail_after(LIMIT):
        await trio.sleep(0.1)  # idle past the threshold: the next request PINGs first
        async with trio.open_nursery() as nursery:

            async def call() -> None:
                with pytest.raises(WireError) as info:
                    await conn.send_request(get(), progress)
                assert (info.value.category, info.value.evidence) == (
                    FailureCategory.TIMEOUT,
                    Evidence.NOT_SENT,
                )

            nursery.start_soon(call)
            await trio.testing.wait_all_tasks_blocked()
            assert conn.session.idle.sent == 1
            conn.attempt_expired(progress)
    assert not conn.closed  # a PING unanswered for 0 s is no proof of a dead peer
    blocker.set()


async def test_an_attempt_on_its_stream_fails_that_stream_only(connect: Connect) -> None:
    conn, server = await connect()
    with trio.fail_after(LIMIT):
        results: dict[str, Any] = {}
        late = progress_at_pool()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send, conn, results, "kept", progress_at_pool(), "POST")
            kept = cast(h2.events.RequestReceived, await server.next(h2.events.RequestReceived))
            nursery.start_soon(send, conn, results, "late", late, "POST")
            await server.next(h2.events.RequestReceived)
            await trio.testing.wait_all_tasks_blocked()  # both wait for their heads
            conn.attempt_expired(late)
            # Only the late one is reset.
            reset = cast(h2.events.StreamReset, await server.next(h2.events.StreamReset))
            await server.respond(kept.stream_id or 0)
    error = results["late"]
    assert isinstance(error, WireError)
    assert (error.category, error.evidence) == (FailureCategory.TIMEOUT, Evidence.SENT_NO_RESPONSE)
    assert reset.stream_id != kept.stream_id
    assert results["kept"].status == 200
    assert not conn.closed


# --- the client: the lane ends the call, at the deadline ----------------------------------------


@pytest.fixture
async def server(h2_server: FaultServer) -> FaultServer:
    """Each HTTP/2 server of ``tests/conftest.py`` (h2c, and over TLS)."""
    return h2_server


def lane_spy() -> Any:
    """A spy on the lane's way into the connection (``attempt_expired``), which still acts."""
    return mock.patch.object(
        HTTP2Connection,
        "attempt_expired",
        autospec=True,
        side_effect=HTTP2Connection.attempt_expired,
    )


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_a_deadline_on_a_shared_connection_ends_its_call_only(
    server: FaultServer, method: str, autojump_clock: trio.testing.MockClock
) -> None:
    """A warm connection, two calls on it: the one with deadline=1.0 ends at 1.0 s (timeout,
    SENT_NO_RESPONSE; ambiguous for a POST) through the lane; the other, without a deadline,
    gets its answer at 2.0 s on the same connection."""
    server.route(method, "/slow", Stall(5.0))
    server.route("GET", "/sibling", Stall(2.0))
    spy = lane_spy()
    async with client_for(server, retry=ONCE) as client:
        assert (await client.get(server.url + "/warm")).status == 200
        outcome: dict[str, Any] = {}

        async def sibling() -> None:
            outcome["sibling"] = await client.get(server.url + "/sibling")
            outcome["sibling_at"] = trio.current_time() - start

        expected = (
            trio_retry.DeadlineExceeded
            if method == "GET"
            else trio_retry.HttpAmbiguousExecutionError
        )
        with spy as expired:
            start = trio.current_time()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sibling)
                with pytest.raises(expected) as info:
                    await client.request(method, server.url + "/slow", content=b"x", deadline=1.0)
                outcome["elapsed"] = trio.current_time() - start
    assert expired.call_count == 1
    assert outcome["elapsed"] == pytest.approx(1.0, abs=0.01)
    (attempt,) = info.value.attempts  # type: ignore[attr-defined]
    assert (attempt.category, attempt.evidence) == (
        FailureCategory.TIMEOUT,
        Evidence.SENT_NO_RESPONSE,
    )
    assert attempt.connection_reused
    assert outcome["sibling"].status == 200
    assert outcome["sibling_at"] == pytest.approx(2.0, abs=0.01)
    assert server.connections_accepted == 1


async def test_a_deadline_ends_an_upload_waiting_for_its_frames_to_be_written(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    """A warm connection whose server then stops reading: a 32 MiB PUT backs up behind the
    kernel's buffers, the writer stalls, and the call's wait for its frames ends at its
    deadline (1.0 s), not at the writer's stall bound (10 s)."""
    server.route("GET", "/warm", Respond(200))
    server.route("PUT", "/up", StopReading(seconds=30))
    spy = lane_spy()
    async with client_for(server, retry=ONCE) as client:
        assert (await client.get(server.url + "/warm")).status == 200
        with spy as expired:
            start = trio.current_time()
            with pytest.raises(trio_retry.DeadlineExceeded) as info:
                await client.put(server.url + "/up", content=b"u" * (32 * MiB), deadline=1.0)
            elapsed = trio.current_time() - start
    assert expired.call_count == 1
    assert elapsed == pytest.approx(1.0, abs=0.01)
    (attempt,) = info.value.attempts
    assert (attempt.category, attempt.evidence) == (
        FailureCategory.TIMEOUT,
        Evidence.SENT_NO_RESPONSE,
    )
