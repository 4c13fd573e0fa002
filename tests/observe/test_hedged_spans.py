"""Hedged copies and telemetry: a hedged call's copies have no spans of their own (a call has
one span slot and its copies run at once); a copy's span must never carry another copy's
record (found in review: every copy wrote to the one slot, and the winner's 200 was in no
span)."""

from __future__ import annotations

import trio
import trio.testing

import trio_retry
from trio_retry import Hedging, RetryPolicy, Upstream
from trio_retry.testing import FaultServer, Respond

from .conftest import Otel


async def test_a_hedged_call_exports_no_span_that_lies(
    server: FaultServer, otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    server.script(Respond(200, body=b"slow", delay=5.0), Respond(200, body=b"fast"))
    async with trio_retry.Client(
        retry=RetryPolicy(max_attempts=3),
        default_upstream=Upstream(hedging=Hedging(delay=0.1)),
        telemetry=otel.telemetry,
    ) as client:
        response = await client.get(server.url + "/item")
    assert response.content == b"fast"
    assert [a.number for a in response.attempts] == [1, 2]
    assert otel.spans() == []  # not traced one span per copy yet, as before
