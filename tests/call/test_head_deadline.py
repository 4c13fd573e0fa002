"""The call deadline bounds the wait for the response head (issue #38 row 3, SPEC §20).

Under ``Client()``'s defaults a call with ``deadline=`` (its own or the client's) waits for its
response head as long as that deadline allows: ``first_byte``'s default (30 s) is lifted. An
explicit ``first_byte`` stays. A healthy endpoint answering after 35 s with ``deadline=60``
gets 200 at 35 s, sent once; before, the default cut it at 30 s, the GET went again, and the
call failed at 60 s. Every timeout names the bound that fired and its value.

On ``trio.testing.MockClock(autojump_threshold=0)`` at full scale (35 s, 60 s), against real
loopback sockets (a FaultServer over HTTP/1.1, h2c and HTTP/2 over TLS), asserting exact
virtual times and the server's count of requests; over HTTP/3 in real time, with the default
scaled down (a :class:`~trio_retry._wire.clock.Default` of 0.4 s: the QUIC driver's timers
would fire on an autojumping clock while a datagram is in flight). nginx in front of a slow
backend: ``tests/interop/test_nginx_deadlines.py``."""

from __future__ import annotations

import dataclasses

import pytest
import trio
import trio.testing

import trio_retry
from trio_retry import Evidence, FailureCategory, Stage, StageTimeouts
from trio_retry._call.client_options import DEFAULT_STAGE_TIMEOUTS
from trio_retry._wire.clock import Default
from trio_retry._wire.timekeeper import Timekeeper
from trio_retry.testing import FaultServer, Respond, Stall

from .conftest import default_client

#: Virtual seconds: beyond any bound under test; a call still waiting then was not bounded.
LIMIT = 1000.0
#: The healthy slow endpoint: it answers after this long.
SLOW = 35.0
ONCE = trio_retry.RetryPolicy(max_attempts=1)


@pytest.fixture
def server(patient: FaultServer) -> FaultServer:
    """A patient server answering after :data:`SLOW`."""
    patient.default = Stall(SLOW, Respond(200, body=b"slow but fine"))
    return patient


def test_only_the_default_first_byte_yields_to_a_deadline() -> None:
    assert isinstance(DEFAULT_STAGE_TIMEOUTS.first_byte, Default)
    assert DEFAULT_STAGE_TIMEOUTS.first_byte == 30.0
    assert Timekeeper(DEFAULT_STAGE_TIMEOUTS).head_yields
    # The CLI's --connect-timeout replaces one field: the default first_byte stays a default.
    assert Timekeeper(dataclasses.replace(DEFAULT_STAGE_TIMEOUTS, connect=5.0)).head_yields
    # The same number given explicitly is the caller's: it stays.
    assert not Timekeeper(dataclasses.replace(DEFAULT_STAGE_TIMEOUTS, first_byte=30.0)).head_yields
    assert not Timekeeper(StageTimeouts(first_byte=30.0)).head_yields
    assert not Timekeeper(StageTimeouts()).head_yields


@pytest.mark.parametrize("where", ["call", "client"])
async def test_a_35_s_endpoint_with_a_60_s_deadline_is_answered_once(
    server: FaultServer, mode: str, where: str, autojump_clock: trio.testing.MockClock
) -> None:
    per_call = {"deadline": 60} if where == "call" else {}
    per_client = {"deadline": 60} if where == "client" else {}
    async with default_client(server, mode, **per_client) as client:
        with trio.fail_after(LIMIT):
            start = trio.current_time()
            response = await client.get(server.url + "/report", **per_call)
            elapsed = trio.current_time() - start
    assert (response.status, response.content) == (200, b"slow but fine")
    assert elapsed == pytest.approx(SLOW, abs=1e-6)
    assert len(response.attempts) == 1
    assert server.executed_count("GET", "/report") == 1  # sent once


async def test_a_post_with_a_deadline_is_answered_not_ambiguous(
    server: FaultServer, mode: str, autojump_clock: trio.testing.MockClock
) -> None:
    """Before, a POST to the same endpoint was cut at 30 s: ambiguous, though healthy."""
    async with default_client(server, mode) as client:
        with trio.fail_after(LIMIT):
            response = await client.post(server.url + "/pay", content=b"1", deadline=60)
    assert response.status == 200
    assert server.executed_count("POST", "/pay") == 1


async def test_the_deadline_that_ends_the_wait_is_named_with_its_value(
    server: FaultServer, mode: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with default_client(server, mode) as client:
        with trio.fail_after(LIMIT), pytest.raises(trio_retry.DeadlineExceeded) as info:
            await client.get(server.url + "/report", deadline=20)
        elapsed = trio.current_time()
    (attempt,) = info.value.attempts  # no time left for another
    assert (attempt.stage, attempt.evidence, attempt.category) == (
        Stage.AWAITING_RESPONSE,
        Evidence.SENT_NO_RESPONSE,
        FailureCategory.TIMEOUT,
    )
    assert "the call's deadline=20 s expired during AWAITING_RESPONSE" in str(info.value)
    assert elapsed == pytest.approx(20.0, abs=1e-6)
    assert server.executed_count("GET", "/report") == 1


async def test_without_a_deadline_the_default_first_byte_still_bounds_the_head(
    server: FaultServer, mode: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with default_client(server, mode, retry=ONCE) as client:
        with trio.fail_after(LIMIT), pytest.raises(trio_retry.DeadlineExceeded) as info:
            await client.get(server.url + "/report")
        elapsed = trio.current_time()
    assert elapsed == pytest.approx(30.0, abs=1e-6)
    message = str(info.value)
    assert "no response head within first_byte=30 s (Client()'s default: " in message
    assert "a call with a deadline= waits for the head as long as its deadline allows" in message


async def test_an_explicit_first_byte_stays_under_a_deadline(
    server: FaultServer, mode: str, autojump_clock: trio.testing.MockClock
) -> None:
    """``first_byte=30`` given explicitly: the head is cut at 30 s and the GET retried, as the
    caller asked; the deadline then ends the second attempt at 60 s."""
    timeouts = StageTimeouts(first_byte=30.0)
    async with default_client(server, mode, stage_timeouts=timeouts) as client:
        with trio.fail_after(LIMIT), pytest.raises(trio_retry.DeadlineExceeded) as info:
            await client.get(server.url + "/report", deadline=60)
        elapsed = trio.current_time()
    first, _ = info.value.attempts
    assert "no response head within first_byte=30 s" in str(first.error)
    assert "default" not in str(first.error)  # the caller's own limit: no hint
    assert "the call's deadline=60 s expired during AWAITING_RESPONSE" in str(info.value)
    assert first.timings["total"] == pytest.approx(30.0, abs=1e-6)
    assert elapsed == pytest.approx(60.0, abs=1e-6)
    assert server.executed_count("GET", "/report") == 2


async def test_http3_waits_for_the_head_within_the_deadline(nursery: trio.Nursery) -> None:
    """Real time, the default scaled to 0.4 s and the endpoint to 0.7 s."""
    pytest.importorskip("aioquic")
    server = FaultServer(tls=True, http3=True)
    server.default = Stall(0.7, Respond(200, body=b"slow but fine"))
    await nursery.start(server.serve)
    scaled = StageTimeouts(connect=Default(5.0), tls=Default(5.0), first_byte=Default(0.4))
    async with trio_retry.Client(
        stage_timeouts=scaled,
        ssl_context=server.client_ssl_context(),
        upstreams={server.url: trio_retry.Upstream(http3=True)},
    ) as client:
        with trio.fail_after(10):
            response = await client.get(server.url + "/report", deadline=5)
            with pytest.raises(trio_retry.DeadlineExceeded) as info:
                await client.get(server.url + "/cut", retry=ONCE)
    assert (response.http_version, response.status, len(response.attempts)) == ("HTTP/3", 200, 1)
    assert server.executed_count("GET", "/report") == 1
    assert "no response head within first_byte=0.4 s (Client()'s default" in str(info.value)
