"""HTTP/2 tells the truth (#13), end to end against the FaultServer: a stream's own proof
wins, routine GOAWAY rotation is invisible, deadlines are honest, evidence does not depend on
read segmentation, idle connections are checked. (A malformed stream leaves its siblings
alone: tests/client/test_stream_errors.py, one table with HTTP/3.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import trio

import trio_retry
from tests.conftest import client_for
from trio_retry import Evidence, FailureCategory, Stage
from trio_retry.testing import FaultServer, GoAway, Respond, Stall
from trio_retry.testing._h2 import data_frame, frame, headers_frame
from trio_retry.testing._script import ShutWindow, StopReading, StreamFrames

LIMIT = 10  # seconds: the bound of every test's network activity
MiB = 1024 * 1024
ONCE = trio_retry.RetryPolicy(max_attempts=1)


@pytest.fixture
async def server(h2_server: FaultServer) -> FaultServer:
    """Each HTTP/2 server of ``tests/conftest.py`` (h2c, and over TLS)."""
    return h2_server


def executed(server: FaultServer, request_id: str) -> int:
    return sum(1 for r in server.requests if r.executed and r.header("x-request-id") == request_id)


# --- 1 + 2: a stream's own proof wins; rotation is invisible -------------------------------------


async def test_streams_refused_by_a_rotation_goaway_go_again_uncounted(server: FaultServer) -> None:
    """Five POSTs share a new connection; the first stream gets GOAWAY(last=1) and its response,
    then the server closes the connection: the other four, above the last-stream-id, were
    never processed. With max_attempts=1 they still succeed: the refused try does not count,
    its NOT_SENT / GOAWAY proof survives the EOF that follows, and it stays in the trail."""
    server.script(GoAway(last_stream_id=1, then=Stall(0.2, then=Respond(200))))
    results: dict[str, trio_retry.Response] = {}
    async with client_for(server, retry=ONCE) as client:

        async def post(name: str) -> None:
            results[name] = await client.post(
                server.url + name, content=b"x" * 100, headers={"x-request-id": name}
            )

        with trio.fail_after(LIMIT):
            async with trio.open_nursery() as nursery:
                for i in range(5):
                    nursery.start_soon(post, f"/p{i}")
    assert {name: r.status for name, r in results.items()} == {f"/p{i}": 200 for i in range(5)}
    for name in results:
        assert executed(server, name) == 1, name
    trails = sorted(results.values(), key=lambda r: len(r.attempts))
    assert len(trails[0].attempts) == 1  # stream 1, answered on the first connection
    for response in trails[1:]:
        refused, sent = response.attempts
        assert (refused.evidence, refused.category, refused.decision) == (
            Evidence.NOT_SENT,
            FailureCategory.GOAWAY,
            None,
        )
        assert (sent.number, sent.status) == (2, 200)
    # The four refused streams shared one new connection instead of opening one each.
    assert server.connections_accepted == 2


async def test_a_goaway_refusing_the_first_stream_of_a_fresh_connection_counts(
    server: FaultServer,
) -> None:
    """GOAWAY(last=0) on a connection that served nothing is a refusal, not a rotation: the
    try counts (max_attempts=1 ends the call), NOT_SENT, so a POST is not ambiguous."""
    server.script(GoAway(last_stream_id=0))
    async with client_for(server, retry=ONCE) as client:
        with trio.fail_after(LIMIT), pytest.raises(trio_retry.ConnectionBroken) as info:
            await client.post(server.url + "/p", content=b"x")
    (attempt,) = info.value.attempts
    assert (attempt.evidence, attempt.category) == (Evidence.NOT_SENT, FailureCategory.GOAWAY)
    assert server.executed_count() == 0


# --- 3: honest deadlines -------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["PUT", "POST"])
async def test_a_deadline_ends_the_call_when_the_server_stops_reading(
    server: FaultServer, method: str, autojump_clock: trio.testing.MockClock
) -> None:
    """The server opens its windows wide, then stops reading TCP: the 32 MiB upload backs up
    in the kernel. deadline=1.0 ends the call at 1.0 s exactly (virtual time), not at a write
    grace after it: DeadlineExceeded (TIMEOUT) for a PUT, ambiguous for a POST."""
    server.script(StopReading(seconds=30))
    async with client_for(server) as client:
        start = trio.current_time()
        expected = (
            trio_retry.DeadlineExceeded
            if method == "PUT"
            else (trio_retry.HttpAmbiguousExecutionError)
        )
        with pytest.raises(expected) as info:
            await client.request(
                method, server.url + "/up", content=b"u" * (32 * MiB), deadline=1.0
            )
        assert trio.current_time() - start == pytest.approx(1.0, abs=0.01)
    (attempt,) = info.value.attempts
    assert attempt.category is FailureCategory.TIMEOUT
    assert attempt.evidence is Evidence.SENT_NO_RESPONSE
    assert Stage.REQUEST_HEAD <= attempt.stage <= Stage.REQUEST_BODY


async def test_a_stalled_writer_closes_its_connection_and_a_queued_stream_is_not_sent(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    """While the upload is stuck, a GET on the same connection queues its HEADERS behind it.
    After the writer's stall bound (the client's write limit, 30 s by default) the connection
    is given up: the GET's bytes never reached the transport, so its try is NOT_SENT and it
    succeeds on a fresh connection; the upload, with bytes handed over, is SENT_NO_RESPONSE."""
    server.script(StopReading(seconds=60))
    async with client_for(server, retry=ONCE) as client:
        outcome: dict[str, Any] = {}

        async def upload() -> None:
            with pytest.raises(trio_retry.HttpAmbiguousExecutionError) as info:
                await client.post(server.url + "/up", content=b"u" * (32 * MiB))
            outcome["upload"] = info.value

        async with trio.open_nursery() as nursery:
            nursery.start_soon(upload)
            await trio.sleep(0.5)
            start = trio.current_time()
            outcome["get"] = await client.get(server.url + "/g")
            outcome["elapsed"] = trio.current_time() - start
    get: trio_retry.Response = outcome["get"]
    assert get.status == 200
    assert [a.evidence for a in get.attempts] == [Evidence.NOT_SENT, Evidence.RESPONSE_RECEIVED]
    assert get.attempts[0].category is FailureCategory.CONNECTION_BROKEN
    assert outcome["elapsed"] == pytest.approx(29.5, abs=0.1)  # the stall bound, from 0.0
    (attempt,) = outcome["upload"].attempts
    assert attempt.evidence is Evidence.SENT_NO_RESPONSE


async def test_a_shut_stream_window_is_bounded_by_the_deadline_and_siblings_go_on(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.route("POST", "/shut", ShutWindow())
    async with client_for(server) as client:
        outcome: dict[str, Any] = {}

        async def upload() -> None:
            start = trio.current_time()
            with pytest.raises(trio_retry.HttpAmbiguousExecutionError):
                await client.post(server.url + "/shut", content=b"u" * MiB, deadline=1.0)
            outcome["elapsed"] = trio.current_time() - start

        async with trio.open_nursery() as nursery:
            nursery.start_soon(upload)
            await trio.sleep(0.1)
            outcome["get"] = await client.get(server.url + "/g")
    assert outcome["elapsed"] == pytest.approx(1.0, abs=0.01)
    assert outcome["get"].status == 200
    assert server.connections_accepted == 1


# --- 4 + 5: stream errors stay stream errors; evidence independent of segmentation ---------------


def _head(sid: int, *extra: tuple[str, str]) -> bytes:
    return headers_frame(sid, [(":status", "200"), *extra])


@pytest.mark.parametrize(
    "broken",
    [
        pytest.param(
            lambda sid: data_frame(sid, b"abcdef", end_stream=True), id="body over length"
        ),
        pytest.param(lambda sid: frame(0x0, 0, 0, b"x"), id="DATA on stream 0"),
    ],
)
async def test_a_valid_head_is_partial_response_however_the_bytes_arrive(
    server: FaultServer, broken: Callable[[int], bytes]
) -> None:
    """A valid head, then a broken frame, written in one send: the client reads them in one
    read, yet the head counts (PARTIAL_RESPONSE), both for a stream error and for a
    connection error."""
    server.route(
        "GET", "/b", StreamFrames(lambda sid: _head(sid, ("content-length", "2")) + broken(sid))
    )
    async with client_for(server, retry=ONCE) as client:
        with trio.fail_after(LIMIT), pytest.raises(trio_retry.ProtocolFailed) as info:
            await client.get(server.url + "/b")
    (attempt,) = info.value.attempts
    assert (attempt.evidence, attempt.status) == (Evidence.PARTIAL_RESPONSE, 200)


# --- 6: idle health ------------------------------------------------------------------------------


async def test_an_idle_connection_that_answers_its_ping_is_reused(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    async with client_for(server, keepalive_expiry=60.0) as client:
        first = await client.get(server.url + "/a")
        await trio.sleep(5.0)  # past the idle threshold: the next stream is preceded by a PING
        second = await client.get(server.url + "/b")
    assert (first.status, second.status) == (200, 200)
    assert second.attempts[0].connection_reused
    assert server.connections_accepted == 1


async def test_a_deadline_holds_in_real_time_when_the_server_stops_reading(
    server: FaultServer,
) -> None:
    """The same on the real clock (bounded): deadline=1.0 ends the POST by about 1.1 s."""
    server.script(StopReading(seconds=5))
    async with client_for(server) as client:
        start = trio.current_time()
        with trio.fail_after(LIMIT), pytest.raises(trio_retry.HttpAmbiguousExecutionError):
            await client.post(server.url + "/up", content=b"u" * (32 * MiB), deadline=1.0)
        elapsed = trio.current_time() - start
    assert 1.0 <= elapsed < 1.5
