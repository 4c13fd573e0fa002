"""A failed call's ``.evidence`` is the call's: ``NOT_SENT`` only when no attempt reached the
server (``_call/failures.call_evidence``).

The exactly-once lab (issue #31, ``python -m benchmarks.exactly_once``) found calls whose trail
read ``SENT_NO_RESPONSE, NOT_SENT``: a safely idempotent call (a POST with an
``Idempotency-Key``) whose first attempt reached the server and lost its response, and whose
retry could not connect. The call ended with ``ConnectFailed`` saying ``NOT_SENT`` (the last
attempt's evidence) while the server had executed it once.
"""

from __future__ import annotations

import pytest
import trio

import trio_retry
from trio_retry import Evidence, Stage
from trio_retry._call.failures import call_evidence
from trio_retry._core.attempt import Attempt
from trio_retry.testing import CloseAfterBody, ConnectFailure, MockTransport, Respond

N, S, R, P = (
    Evidence.NOT_SENT,
    Evidence.SENT_NO_RESPONSE,
    Evidence.RESPONSE_RECEIVED,
    Evidence.PARTIAL_RESPONSE,
)


@pytest.mark.parametrize(
    ("trail", "expected"),
    [
        ([N], N),
        ([N, N, N], N),
        ([S], S),
        ([S, N], S),
        ([N, S, N, N], S),
        ([R, N], R),  # a 503 then a retry that could not connect: the server did receive it
        ([S, P, N], P),
        ([P, S], S),  # the last attempt's, when it reached the server
    ],
)
def test_the_calls_evidence(trail: list[Evidence], expected: Evidence) -> None:
    attempts = [
        Attempt(number=i + 1, stage=Stage.CONNECT if e is N else Stage.COMPLETE, evidence=e)
        for i, e in enumerate(trail)
    ]
    assert call_evidence(attempts) is expected


async def test_a_retry_that_could_not_connect_does_not_hide_an_executed_attempt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    transport = MockTransport()
    server = transport.server
    server.route("GET", "/warm", Respond(200))
    server.route("POST", "/pay", CloseAfterBody())  # executed, then the connection drops
    policy = trio_retry.RetryPolicy(max_attempts=2, backoff=trio_retry.Backoff(jitter="none"))
    async with trio_retry.Client(
        base_url="http://shop.example", transport=transport, retry=policy
    ) as client:
        await client.get("/warm")  # a pooled connection for the first attempt
        transport.fail_connect(ConnectFailure(trio_retry.Stage.CONNECT))  # the retry's
        with pytest.raises(trio_retry.ConnectFailed) as caught:
            await client.post("/pay", content=b"x", idempotency_key="pay-1")
    trail = [a.evidence for a in caught.value.attempts]
    assert trail == [Evidence.SENT_NO_RESPONSE, Evidence.NOT_SENT]
    assert server.executed_count("POST", "/pay") == 1
    assert caught.value.evidence is Evidence.SENT_NO_RESPONSE
    assert caught.value.category is trio_retry.FailureCategory.CONNECT  # the last attempt's
