"""A one-attempt buffered call that nobody watches builds its ``Attempt`` record when
``Response.attempts`` is first read: the record is the same as the one built at once when
``on_attempt`` is set."""

from __future__ import annotations

import dataclasses

import pytest

import trio_retry
from trio_retry import Attempt, Evidence, Stage
from trio_retry.testing import FaultServer, Respond


def _without_timings(attempt: Attempt) -> dict[str, object]:
    fields = dataclasses.asdict(attempt)
    timings = fields.pop("timings")
    assert set(timings) >= {"total"}
    return fields


@pytest.mark.parametrize("fast_path", [True, False])
async def test_the_deferred_record_is_the_record_on_attempt_sees(
    server: FaultServer, fast_path: bool
) -> None:
    server.default = Respond(200, body=b"hello")
    seen: list[Attempt] = []
    url = server.url + "/r"
    async with trio_retry.Client(http1_fast_path=fast_path) as quiet:
        await quiet.get(url)  # the second call reuses the connection
        deferred = await quiet.get(url)
    async with trio_retry.Client(http1_fast_path=fast_path, on_attempt=seen.append) as watched:
        await watched.get(url)
        eager = await watched.get(url)
    assert len(deferred.attempts) == 1
    assert deferred.attempts is deferred.attempts  # built once
    assert _without_timings(deferred.attempts[0]) == _without_timings(eager.attempts[0])
    assert eager.attempts == seen[-1:]
    first = deferred.attempts[0]
    assert (first.number, first.stage, first.evidence, first.status) == (
        1,
        Stage.COMPLETE,
        Evidence.RESPONSE_RECEIVED,
        200,
    )
    assert first.connection_reused
    assert first.bytes_received > len(b"hello")
    assert first.timings["total"] == pytest.approx(deferred.elapsed.total_seconds(), abs=1e-6)


async def test_attempts_can_be_replaced(server: FaultServer) -> None:
    server.default = Respond(200)
    async with trio_retry.Client() as client:
        response = await client.get(server.url + "/")
    response.attempts = []
    assert response.attempts == []
