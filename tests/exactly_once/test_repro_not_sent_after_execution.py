"""What the exactly-once lab found (issue #31): a ``RequestFailed`` says ``NOT_SENT`` although
an earlier attempt of the same call was executed by the server.

The lab (``python -m benchmarks.exactly_once --seed 31``, see docs/benchmarks.md) flagged calls
whose trail reads ``SENT_NO_RESPONSE, ..., NOT_SENT`` (a safely idempotent call, a GET or a POST
with an ``Idempotency-Key``: the first attempt reached the server and its response was lost,
the retry could not connect). The call ends with ``ConnectFailed`` / ``TLSFailed`` whose
``.evidence`` is the last attempt's, ``NOT_SENT``, while the ledger shows the request executed.

``RequestFailed``'s docstring says ``.evidence`` ``NOT_SENT`` means "the server never received
it"; docs/reference.md says ``.evidence`` "describe[s] the last attempt". The two disagree, and a
caller who reads the docstring concludes that a payment with a key did not happen. The test
below is the docstring's reading, deterministic (an in-memory transport and a virtual clock);
it is expected to fail until the maintainers decide which document is right.

Main has since changed ``.evidence`` to the call's (77d6ebf: ``NOT_SENT`` only when no attempt
reached the server); against main at 5535b52 this test passes, so ``xfail`` goes when this
branch meets that change (main carries a regression test of its own).
"""

from __future__ import annotations

import pytest
import trio

import trio_retry
from trio_retry.testing import CloseAfterBody, ConnectFailure, MockTransport, Respond


@pytest.mark.xfail(
    strict=True,
    reason="issue #31 lab: RequestFailed.evidence is the last attempt's (NOT_SENT) although an "
    "earlier attempt was executed; RequestFailed's docstring says NOT_SENT means never received",
)
async def test_failure_after_an_executed_attempt_does_not_say_not_sent(
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
        with pytest.raises(trio_retry.RequestFailed) as caught:
            await client.post("/pay", content=b"x", idempotency_key="pay-1")
    trail = [a.evidence for a in caught.value.attempts]
    assert trail == [trio_retry.Evidence.SENT_NO_RESPONSE, trio_retry.Evidence.NOT_SENT]
    assert server.executed_count("POST", "/pay") == 1
    assert caught.value.evidence is not trio_retry.Evidence.NOT_SENT
