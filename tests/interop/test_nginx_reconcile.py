"""The reconciler (SPEC §19) against nginx in front of a small ledger backend.

The backend is a FaultServer's ``IdempotencyStore``: ``POST /payments`` executes (each
execution recorded), ``GET /requests/{id}`` says what became of a request id; nginx proxies
both, as a gateway in front of a payment API does. When the backend drops a payment's
connection, nginx answers the POST ``502`` itself: a gateway's answer to a request that may
have run, which the client reconciles. When the backend is slow, the client's own bound cuts
the POST (``SENT_NO_RESPONSE``). Each test counts the POST in nginx's own log and the
executions in the ledger. Real time, small bounds."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio

from tests.support.fixtures import StartNginx
from trio_retry import (
    AmbiguityReport,
    Backoff,
    Client,
    Evidence,
    HttpAmbiguousExecutionError,
    Reconciled,
    ReconcileOutcome,
    RetryPolicy,
    StageTimeouts,
    Upstream,
)
from trio_retry.testing import FaultServer, IdempotencyStore, Respond, Stall

QUICK = RetryPolicy(max_attempts=3, backoff=Backoff(initial=0.1, max=0.1, jitter="none"))
SERVERS = """
  server { listen {{host}}:{{ledger}};
           location / { proxy_pass http://{{host}}:{{backend}}; proxy_read_timeout 60s; } }
  server { listen {{host}}:{{ledger_h2_tls}} ssl http2; {{tls}}
           location / { proxy_pass http://{{host}}:{{backend}}; proxy_read_timeout 60s; } }
"""
#: Real seconds: the most any one test call may take.
LIMIT = 10


def ledger_reconciler(client_of: Callable[[], Client], base: str) -> Callable[..., object]:
    """A reconciler as a user writes one: look the request id up; executed (200) returns the
    record, not found (404) is not executed, in progress (202) is asked again while time is
    left, anything else unknown."""

    async def reconcile(report: AmbiguityReport) -> Reconciled:
        while True:
            found = await client_of().get(f"{base}/requests/{report.request_id}")
            if found.status == 200:
                return Reconciled.executed(found)
            if found.status == 404:
                return Reconciled.not_executed()
            if found.status != 202:
                return Reconciled.unknown()
            await trio.sleep(0.2)

    return reconcile


@pytest.mark.parametrize("listener", ["ledger", "ledger_h2_tls"])
@pytest.mark.parametrize("fault", ["answer lost", "refused", "slow"])
async def test_a_payment_in_doubt_is_reconciled_behind_nginx(
    nginx: StartNginx, listener: str, fault: str
) -> None:
    """answer lost: executed, nginx 502 -> the ledger's record; refused: not executed, nginx
    502 -> sent again, executed once; slow: the client's first_byte bound cuts the POST while
    the backend works, the ledger says "in progress" then "executed"."""
    store = IdempotencyStore(
        Respond(201, body=b'{"payment": "p-1"}'), processing=1.0 if fault == "slow" else 0.0
    )
    if fault == "answer lost":
        store.lose_answers()
    elif fault == "refused":
        store.refuse()
    async with trio.open_nursery() as nursery:
        backend = FaultServer(http2=False)
        backend.route("POST", "/payments", store)
        backend.route("GET", "/requests/{id}", store.status)
        await nursery.start(backend.serve)
        server = nginx(
            servers=SERVERS, listeners=("ledger", "ledger_h2_tls"), values={"backend": backend.port}
        )
        base = server.url(listener, "")
        holder: list[Client] = []
        options: dict[str, object] = {}
        if listener.endswith("tls"):
            options["ssl_context"] = server.ssl_context()
        async with Client(
            retry=QUICK,
            stage_timeouts=StageTimeouts(first_byte=0.5),
            upstreams={base: Upstream(reconcile=ledger_reconciler(lambda: holder[0], base))},
            **options,  # type: ignore[arg-type]
        ) as client:
            holder.append(client)
            with trio.fail_after(LIMIT):
                response = await client.post(
                    base + "/payments", json={"amount": 5}, headers={"X-Request-Id": "pay-1"},
                    deadline=5.0,
                )  # fmt: skip
        posts = [e for e in server.log(expect=2).entries if e.method == "POST"]
        nursery.cancel_scope.cancel()
    first = response.attempts[0] if fault == "refused" else None
    if fault == "refused":
        assert response.status == 201  # sent again after "not executed"
        assert first is not None
        assert first.reconciled == Reconciled.not_executed()
        assert [e.status for e in posts] == [502, 201]
    else:
        assert response.status == 200  # the ledger's record of it
        assert response.json()["state"] == "executed"
        assert len(posts) == 1
        assert posts[0].status == (502 if fault == "answer lost" else 499)
    assert store.executed("pay-1") == 1  # executed once, whatever happened


@pytest.mark.parametrize("how", ["unknown", "raises", "hangs", "late"])
async def test_a_reconciler_that_fails_leaves_the_call_ambiguous_within_its_deadline(
    nginx: StartNginx, how: str
) -> None:
    store = IdempotencyStore()
    store.lose_answers()
    async with trio.open_nursery() as nursery:
        backend = FaultServer(http2=False)
        backend.route("POST", "/payments", store)
        backend.route("GET", "/requests/{id}", Stall(30.0, Respond(200)))  # a ledger that hangs
        await nursery.start(backend.serve)
        server = nginx(
            servers=SERVERS, listeners=("ledger", "ledger_h2_tls"), values={"backend": backend.port}
        )
        base = server.url("ledger", "")
        holder: list[Client] = []

        async def reconcile(report: AmbiguityReport) -> Reconciled:
            if how == "unknown":
                return Reconciled.unknown()
            if how == "raises":
                raise ConnectionError("ledger unreachable")
            if how == "late":
                with trio.CancelScope(shield=True):
                    await trio.sleep(report.time_left + 0.2)
                return Reconciled.executed()
            await holder[0].get(f"{base}/requests/{report.request_id}")  # hangs behind nginx
            return Reconciled.executed()

        async with Client(retry=QUICK, upstreams={base: Upstream(reconcile=reconcile)}) as client:
            holder.append(client)
            start = trio.current_time()
            with trio.fail_after(LIMIT), pytest.raises(HttpAmbiguousExecutionError) as caught:
                await client.post(
                    base + "/payments", content=b"{}", headers={"X-Request-Id": "pay-2"},
                    deadline=2.0,
                )  # fmt: skip
            took = trio.current_time() - start
        posts = [e for e in server.log(expect=1).entries if e.method == "POST"]
        nursery.cancel_scope.cancel()
    reconciled = caught.value.reconciled
    assert reconciled is not None
    assert reconciled.outcome is ReconcileOutcome.UNKNOWN
    assert caught.value.evidence is Evidence.RESPONSE_RECEIVED  # nginx's 502
    assert [e.status for e in posts] == [502]
    assert store.executed("pay-2") == 1
    if how == "late":  # it shielded itself: the call could not end before it returned
        assert took < 2.0 + 0.5
    else:
        assert took < 2.0 + 0.1  # the deadline holds
    if how == "hangs":
        assert "gave no answer within" in reconciled.detail


@pytest.mark.parametrize("fault", ["answer lost", "slow"])
async def test_a_keyed_payment_is_sent_again_with_its_key_behind_nginx(
    nginx: StartNginx, fault: str
) -> None:
    """No reconciler: the key makes the POST safe to send again. answer lost: nginx's 502, the
    same key again, the ledger's kept answer marked a replay; slow: the client's first_byte
    bound cuts the POST while the ledger works, the same key again is answered 409 (in
    progress, Retry-After: 1) through nginx, then the replay."""
    store = IdempotencyStore(processing=1.5 if fault == "slow" else 0.0)
    if fault == "answer lost":
        store.lose_answers()
    async with trio.open_nursery() as nursery:
        backend = FaultServer(http2=False)
        backend.route("POST", "/payments", store)
        await nursery.start(backend.serve)
        server = nginx(
            servers=SERVERS, listeners=("ledger", "ledger_h2_tls"), values={"backend": backend.port}
        )
        base = server.url("ledger", "")
        policy = RetryPolicy(max_attempts=4, backoff=Backoff(initial=0.1, max=2.0, jitter="none"))
        async with Client(retry=policy, stage_timeouts=StageTimeouts(first_byte=0.5)) as client:
            with trio.fail_after(LIMIT):
                response = await client.post(
                    base + "/payments", content=b"{}", headers={"X-Request-Id": "pay-3"},
                    idempotency_key=True, deadline=8.0,
                )  # fmt: skip
        posts = [e for e in server.log(expect=2).entries if e.method == "POST"]
        nursery.cancel_scope.cancel()
    assert (response.status, response.replayed) == (201, True)
    assert len(store.executions) == 1  # once, whatever nginx and the client saw
    statuses = [a.status for a in response.attempts]
    if fault == "answer lost":
        assert statuses == [502, 201]
        assert [e.status for e in posts] == [502, 201]
    else:
        assert statuses[0] is None  # cut by first_byte: SENT_NO_RESPONSE
        assert 409 in statuses
        assert statuses[-1] == 201
