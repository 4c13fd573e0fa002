"""The reconciler (SPEC §19): asked where the call would otherwise raise
``HttpAmbiguousExecutionError``, within the call's deadline; each of its answers, and a
reconciler that raises, hangs or answers late; where it is never asked.

A payment endpoint on a FaultServer over loopback (``IdempotencyStore``, with its status route),
on the MockClock: each test counts what the server executed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

import trio_retry
from trio_retry import (
    AmbiguityReport,
    Backoff,
    ConnectionBroken,
    Evidence,
    ExecutedWithoutResponse,
    HttpAmbiguousExecutionError,
    Reconciled,
    ReconcileOutcome,
    RetryAllowed,
    RetryDenied,
    RetryPolicy,
    Upstream,
)
from trio_retry.testing import (
    CloseAfterBody,
    CloseAfterHead,
    FaultServer,
    IdempotencyStore,
    PartialBody,
    Respond,
)

QUICK = RetryPolicy(max_attempts=3, backoff=Backoff(initial=0.5, max=0.5, jitter="none"))
Fn = Callable[[AmbiguityReport], Awaitable[Reconciled]]


class Asked:
    """A reconciler that records each report and answers with ``answer(report)``."""

    def __init__(self, answer: Callable[[AmbiguityReport], Awaitable[Reconciled]]) -> None:
        self.answer = answer
        self.reports: list[AmbiguityReport] = []

        self.answers: list[Reconciled] = []

    async def __call__(self, report: AmbiguityReport) -> Reconciled:
        self.reports.append(report)
        answer = await self.answer(report)
        self.answers.append(answer)
        return answer


def fixed(reconciled: Reconciled) -> Asked:
    async def answer(report: AmbiguityReport) -> Reconciled:
        return reconciled

    return Asked(answer)


def client(server: FaultServer, fn: Fn | None, **options: Any) -> trio_retry.Client:
    return trio_retry.Client(
        retry=options.pop("retry", QUICK), upstreams={server.url: Upstream(reconcile=fn)}, **options
    )


async def test_executed_returns_the_response_the_reconciler_fetched(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    store = IdempotencyStore(Respond(201, body=b'{"payment": 7}'))
    store.lose_answers()
    server.route("POST", "/payments", store)
    server.route("GET", "/requests/{id}", store.status)
    async with trio_retry.Client(retry=QUICK) as c:

        async def look_up(report: AmbiguityReport) -> Reconciled:
            found = await c.get(f"{server.url}/requests/{report.request_id}")
            if found.status == 200:
                return Reconciled.executed(found)
            return Reconciled.not_executed() if found.status == 404 else Reconciled.unknown()

        asked = Asked(look_up)
        response = await c.post(
            server.url + "/payments",
            json={"amount": 10},
            headers={"X-Request-Id": "pay-1"},
            reconcile=asked,
        )
    assert response.status == 200
    assert response.json()["state"] == "executed"
    # the call's trail, the attempt in doubt last; the look-up's own stays on its response
    assert [(a.evidence, a.reconciled) for a in response.attempts] == [
        (Evidence.SENT_NO_RESPONSE, asked.answers[0])
    ]
    (doubt,) = response.attempts
    assert doubt.reconciled is not None
    assert doubt.reconciled.outcome is ReconcileOutcome.EXECUTED
    assert doubt.reconciled.response is not None
    assert doubt.reconciled.response.request.method == "GET"
    assert [a.status for a in doubt.reconciled.response.attempts] == [200]
    assert store.executions == ["pay-1"]
    assert len(server.requests) == 2  # the POST, once; the look-up
    (report,) = asked.reports
    assert (report.method, str(report.url), report.request_id) == (
        "POST",
        server.url + "/payments",
        "pay-1",
    )
    assert report.idempotency_key is None
    assert report.evidence is Evidence.SENT_NO_RESPONSE
    assert [a.evidence for a in report.attempts] == [Evidence.SENT_NO_RESPONSE]
    assert report.time_left == 30.0  # no deadline: the fixed bound (FIXED.reconcile)


async def test_executed_without_a_response_raises_executed_without_response(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.script(CloseAfterBody())
    async with client(server, fixed(Reconciled.executed())) as c:
        with pytest.raises(ExecutedWithoutResponse) as caught:
            await c.post(server.url + "/pay", content=b"{}")
    assert caught.value.evidence is Evidence.SENT_NO_RESPONSE
    assert caught.value.reconciled.outcome is ReconcileOutcome.EXECUTED
    assert caught.value.attempts[-1].reconciled == caught.value.reconciled
    assert server.executed_count() == 1
    assert len(server.requests) == 1  # never sent again


async def test_not_executed_is_a_counted_attempt_after_the_backoff(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.script(CloseAfterHead(), Respond(201))
    asked = fixed(Reconciled.not_executed())
    async with client(server, asked) as c:
        response = await c.post(server.url + "/pay", content=b"{}")
    assert response.status == 201
    first, second = response.attempts
    assert first.evidence is Evidence.SENT_NO_RESPONSE
    assert first.reconciled is not None
    assert first.reconciled.outcome is ReconcileOutcome.NOT_EXECUTED
    assert "reconciled as not executed" in str(first)
    assert first.decision == RetryAllowed(0.5)
    assert second.number == 2
    assert server.requests[1].time - server.requests[0].time >= 0.5
    assert server.executed_count() == 1
    assert len(asked.reports) == 1


async def test_not_executed_with_no_attempt_left_is_a_plain_failure(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    """The reconciler's word makes the outcome known: the call fails, and is not ambiguous."""
    server.script(CloseAfterHead())
    once = RetryPolicy(max_attempts=1)
    async with client(server, fixed(Reconciled.not_executed()), retry=once) as c:
        with pytest.raises(ConnectionBroken, match="reconciled as not executed") as caught:
            await c.post(server.url + "/pay", content=b"{}")
    assert caught.value.evidence is Evidence.NOT_SENT
    assert server.executed_count() == 0


async def test_not_executed_is_decided_on_the_time_left_after_reconciling(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    """The reconciler took 2 s of the call's 3 s: the engine decides again on the 1 s left
    (below the 0.5 s backoff plus the 1 s an attempt needs: ``RetryDenied.deadline()``), not
    on the 3 s there were when the attempt ended. Sent again, the POST would be in doubt at
    the deadline, with no time left to reconcile it."""
    server.script(CloseAfterHead(), Respond(201))

    async def slowly(report: AmbiguityReport) -> Reconciled:
        await trio.sleep(2.0)
        return Reconciled.not_executed()

    needs = RetryPolicy(backoff=QUICK.backoff, min_attempt_budget=1.0)
    async with client(server, Asked(slowly), retry=needs) as c:
        with pytest.raises(ConnectionBroken, match="reconciled as not executed") as caught:
            await c.post(server.url + "/pay", content=b"{}", deadline=3.0)
    assert trio.current_time() == pytest.approx(2.0, abs=0.01)
    assert caught.value.decision == RetryDenied.deadline()
    assert caught.value.evidence is Evidence.NOT_SENT
    assert len(server.requests) == 1


@pytest.mark.parametrize("how", ["unknown", "raises", "not a Reconciled"])
async def test_unknown_or_a_failing_reconciler_leaves_the_call_ambiguous(
    server: FaultServer, autojump_clock: trio.testing.MockClock, how: str
) -> None:
    server.script(CloseAfterBody())

    async def answer(report: AmbiguityReport) -> Reconciled:
        if how == "raises":
            raise ValueError("ledger down")
        if how == "not a Reconciled":
            return "executed"  # type: ignore[return-value]
        return Reconciled.unknown()

    async with client(server, Asked(answer)) as c:
        with pytest.raises(HttpAmbiguousExecutionError) as caught:
            await c.post(server.url + "/pay", content=b"{}")
    reconciled = caught.value.reconciled
    assert reconciled is not None
    assert reconciled.outcome is ReconcileOutcome.UNKNOWN
    assert caught.value.attempts[-1].reconciled == reconciled
    assert "Its reconciler was asked: reconciled as unknown" in str(caught.value)
    if how == "raises":
        assert isinstance(reconciled.error, ValueError)
        assert "raised ValueError: ledger down" in reconciled.detail
    elif how == "not a Reconciled":
        assert "returned str, not a Reconciled" in reconciled.detail
    assert server.executed_count() == 1
    assert len(server.requests) == 1


@pytest.mark.parametrize("deadline", [5.0, None])
async def test_a_reconciler_that_hangs_is_cut_at_the_deadline(
    server: FaultServer, autojump_clock: trio.testing.MockClock, deadline: float | None
) -> None:
    """Bounded by the call's deadline, or without one by the fixed 30 s bound."""
    server.script(CloseAfterBody())

    async def hang(report: AmbiguityReport) -> Reconciled:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async with client(server, Asked(hang)) as c:
        start = trio.current_time()
        with pytest.raises(HttpAmbiguousExecutionError) as caught:
            await c.post(server.url + "/pay", content=b"{}", deadline=deadline)
        took = trio.current_time() - start
    assert took == pytest.approx(deadline or 30.0)
    reconciled = caught.value.reconciled
    assert reconciled is not None
    assert "gave no answer within" in reconciled.detail
    assert len(server.requests) == 1


async def test_a_reconciler_that_answers_after_the_deadline_is_not_believed(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    """It shielded itself from the deadline: its answer came too late to act on."""
    server.script(CloseAfterBody())

    async def late(report: AmbiguityReport) -> Reconciled:
        with trio.CancelScope(shield=True):
            await trio.sleep(report.time_left + 1.0)
        return Reconciled.not_executed()

    async with client(server, Asked(late)) as c:
        with pytest.raises(HttpAmbiguousExecutionError) as caught:
            await c.post(server.url + "/pay", content=b"{}", deadline=2.0)
    reconciled = caught.value.reconciled
    assert reconciled is not None
    assert reconciled.detail == "the reconciler answered after the deadline"
    assert len(server.requests) == 1


async def test_a_502_to_a_post_is_reconciled(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.script(Respond(502))
    server.route("GET", "/pay/1", Respond(200, body=b"paid"))
    async with trio_retry.Client(retry=QUICK) as c:

        async def look_up(report: AmbiguityReport) -> Reconciled:
            assert report.status == 502
            assert report.evidence is Evidence.RESPONSE_RECEIVED
            return Reconciled.executed(await c.get(server.url + "/pay/1"))

        response = await c.post(server.url + "/pay", content=b"{}", reconcile=look_up)
    assert response.content == b"paid"
    assert [r.method for r in server.requests] == ["POST", "GET"]


async def test_a_calls_own_reconciler_wins_over_its_upstreams(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.script(CloseAfterBody())
    upstream, own = fixed(Reconciled.unknown()), fixed(Reconciled.executed())
    async with client(server, upstream) as c:
        with pytest.raises(ExecutedWithoutResponse):
            await c.post(server.url + "/pay", content=b"{}", reconcile=own)
    assert (len(upstream.reports), len(own.reports)) == (0, 1)


async def test_never_asked_where_the_outcome_is_known(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    """A response returned (a 200, a 404), PARTIAL_RESPONSE, a GET or a keyed POST after
    SENT_NO_RESPONSE (sent again: safe to send again)."""
    server.script(
        Respond(200),
        Respond(404),
        PartialBody(declared_length=10, body=b"x"),
        CloseAfterBody(),
        Respond(200),
        CloseAfterBody(),
        Respond(201),
    )
    asked = fixed(Reconciled.executed())
    async with client(server, asked) as c:
        assert (await c.post(server.url + "/a", content=b"{}")).status == 200
        assert (await c.post(server.url + "/b", content=b"{}")).status == 404
        with pytest.raises(ConnectionBroken) as partial:
            await c.post(server.url + "/c", content=b"{}")
        assert partial.value.evidence is Evidence.PARTIAL_RESPONSE
        assert (await c.get(server.url + "/d")).status == 200
        keyed = await c.post(server.url + "/e", content=b"{}", idempotency_key=True)
        assert keyed.status == 201
    assert asked.reports == []


async def test_a_connect_failure_is_not_reconciled(autojump_clock: trio.testing.MockClock) -> None:
    from trio_retry import ConnectFailed
    from trio_retry.testing import refused_port

    url = f"http://127.0.0.1:{refused_port()}"
    asked = fixed(Reconciled.executed())
    async with trio_retry.Client(retry=QUICK, upstreams={url: Upstream(reconcile=asked)}) as c:
        with pytest.raises(ConnectFailed):
            await c.post(url + "/pay", content=b"{}")
    assert asked.reports == []


async def test_a_502_reconciled_as_not_executed_goes_again(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.script(Respond(502), Respond(201))
    async with client(server, fixed(Reconciled.not_executed())) as c:
        response = await c.post(server.url + "/pay", content=b"{}")
    assert [a.status for a in response.attempts] == [502, 201]
    assert response.attempts[0].reconciled == Reconciled.not_executed()
