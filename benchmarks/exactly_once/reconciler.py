"""The lab's reconciler (``trio_retry_reconcile``): the ledger's status look-up, asked as a user
asks a payments API whether a request in doubt ran.

``GET /requests/{id}?attempt=N`` (:mod:`.backend`), through the same client: ``200`` is
executed (the call returns the record), ``404`` not executed (the attempts asked about are then
fenced, so that answer stays true if one of them arrives late). Written as a demanding user
writes one: the look-up is a GET, which the client retries (:data:`LOOK_UP`), and one that
failed all the same, or got another status, is asked again while the call has time left
(:data:`AGAIN_AFTER`), each look-up bounded to half of that time (:data:`ONE_TRY` at least);
only when that time is spent is the answer unknown. It keeps
what it was told (:attr:`LedgerReconciler.told`: the call's trail, when the call returns the
look-up's response, whose own ``.attempts`` are the look-up's) and what each look-up got
(:meth:`LedgerReconciler.why`), which the lab records beside the answer.
"""

from __future__ import annotations

from typing import Any

import trio

import trio_retry

#: The look-up's own retries (a GET: the client retries it while its deadline allows).
LOOK_UP = trio_retry.RetryPolicy(max_attempts=6, backoff=trio_retry.Backoff(initial=0.05, max=0.2))
#: A look-up that failed (its retries included) or answered neither 200 nor 404 is asked
#: again after this long while the call has time left, at most ASKED_AT_MOST times in all.
AGAIN_AFTER = 0.05
ASKED_AT_MOST = 20
#: Below this much time left, no look-up is started (it could not finish).
LEAST = 0.02
#: Each look-up (its retries included) has half the time left, at least this: one stuck
#: in a fault that ends (a partition) leaves time to ask again, on a fresh connection.
ONE_TRY = 0.25


class LedgerReconciler:
    """One call's reconciler (``reconcile=``): an async callable of the report."""

    def __init__(self, client: trio_retry.Client, base: str) -> None:
        self._client = client
        self._base = base
        #: the reports it was given, in order
        self.told: list[trio_retry.AmbiguityReport] = []
        #: attempt number -> what its look-ups got
        self._notes: dict[int, list[str]] = {}

    def why(self, attempt: trio_retry.Attempt) -> dict[str, Any]:
        """What the lab records of the answer about ``attempt``: ``detail`` (the client's
        ``Reconciled.detail``, then what each look-up got) and ``time_left`` (the seconds the
        reconciler was given)."""
        reconciled = attempt.reconciled
        notes = list(self._notes.get(attempt.number, ()))
        if reconciled is not None and reconciled.detail:
            notes.insert(0, reconciled.detail)
        report = next((r for r in self.told if r.attempts[-1].number == attempt.number), None)
        return {
            "detail": "; ".join(notes),
            "time_left": None if report is None else round(report.time_left, 3),
        }

    async def __call__(self, report: trio_retry.AmbiguityReport) -> trio_retry.Reconciled:
        self.told.append(report)
        attempt = report.attempts[-1].number if report.attempts else 1
        notes = self._notes.setdefault(attempt, [])
        url = f"{self._base}/requests/{report.request_id}?attempt={attempt}"
        ends = trio.current_time() + report.time_left
        for _ in range(ASKED_AT_MOST):
            left = ends - trio.current_time()
            if left < LEAST:
                notes.append(f"{left:.2f} s left: not asked again")
                break
            started = trio.current_time()
            try:
                found = await self._client.get(
                    url, deadline=min(left, max(ONE_TRY, left / 2)), retry=LOOK_UP
                )
            except trio_retry.RequestFailed as exc:  # asked again while time is left
                notes.append(_failed(exc, trio.current_time() - started))
                await trio.sleep(min(AGAIN_AFTER, max(0.0, ends - trio.current_time())))
                continue
            except trio.Cancelled:
                notes.append(f"look-up cut after {trio.current_time() - started:.2f} s")
                raise
            notes.append(f"look-up {found.status} after {trio.current_time() - started:.2f} s")
            if found.status == 200:
                return trio_retry.Reconciled.executed(found)
            if found.status == 404:
                return trio_retry.Reconciled.not_executed()
            await trio.sleep(min(AGAIN_AFTER, max(0.0, ends - trio.current_time())))
        return trio_retry.Reconciled.unknown()


def _failed(exc: trio_retry.TrioRetryError, took: float) -> str:
    """A look-up that failed, in a few words: its error, evidence and trail."""
    attempts = getattr(exc, "attempts", ()) or ()
    trail = ", ".join(f"{a.evidence.name}@{a.stage.name}" for a in attempts)
    return f"look-up {type(exc).__name__} after {took:.2f} s [{trail}]: {str(exc)[:160]}"
