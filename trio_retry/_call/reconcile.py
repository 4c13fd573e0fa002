"""Asking a call's reconciler (SPEC §19), and the answer of a call its reconciler found executed.

The loop asks where the engine's file says (``_core/engine.py``, "Reconciliation"): the call
would otherwise end ambiguous. :func:`ask` calls the reconciler once, in a scope of
``_wire/clock.py`` (``until``: the call's deadline, at most ``FIXED.reconcile``), and always
returns a :class:`Reconciled`: a reconciler that raises, gives no answer in time, returns after
the deadline (it shielded itself) or returns something else is taken as *unknown*, with what
happened in ``Reconciled.detail``. Outer cancellation is not caught.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import trio

from .._core.attempt import Attempt
from .._core.evidence import Evidence
from .._core.reconcile import ReconcileOutcome
from .._core.reconcile import Reconciler as AnyReconciler
from .._errors import ExecutedWithoutResponse
from .._models import Response
from .._reconcile import AmbiguityReport, Reconciled, Reconciler, reconciled_of
from .._wire.clock import FIXED, seconds, until
from .prepare import PreparedRequest

__all__ = ["ask", "executed"]

_UNKNOWN = ReconcileOutcome.UNKNOWN


async def ask(
    reconciler: Reconciler | AnyReconciler,
    request: PreparedRequest,
    attempts: Sequence[Attempt],
    status: int | None,
    deadline: float,
) -> Reconciled:
    """The reconciler's answer about the last of ``attempts`` (the one in doubt), within the
    call's ``deadline``. Never raises but for outer cancellation; on cancellation from outside
    the reconciler is cancelled with it."""
    last = attempts[-1]
    # The call's deadline, or FIXED.reconcile from now if earlier: a hanging reconciler
    # must not hold a call without a deadline forever.
    with until(min(deadline, trio.current_time() + FIXED.reconcile)) as scope:
        bound = scope.deadline
        left = max(0.0, bound - trio.current_time())
        report = AmbiguityReport(
            method=request.method,
            url=request.url,
            idempotency_key=request.idempotency_key,
            request_id=request.headers.get("x-request-id"),
            attempts=tuple(attempts),
            time_left=left,
            evidence=last.evidence,
            status=status,
        )
        try:
            answer: object = await reconciler(report)
        except Exception as exc:  # (Cancelled is not an Exception: outer cancellation goes on)
            return Reconciled(
                outcome=_UNKNOWN,
                detail=f"the reconciler raised {type(exc).__name__}: {exc}",
                error=exc,
            )
    if scope.cancelled_caught:
        return Reconciled(
            outcome=_UNKNOWN,
            detail=f"the reconciler gave no answer within {seconds(left)}",
        )
    if trio.current_time() > bound:
        return Reconciled(outcome=_UNKNOWN, detail="the reconciler answered after the deadline")
    if not isinstance(answer, Reconciled):
        return Reconciled(
            outcome=_UNKNOWN,
            detail=f"the reconciler returned {type(answer).__name__}, not a Reconciled",
        )
    if answer.response is not None and not isinstance(answer.response, Response):
        return Reconciled(
            outcome=_UNKNOWN,
            detail="the reconciler's Reconciled.executed(response=...) is not a Response",
        )
    return answer


def executed(request: PreparedRequest, attempts: Sequence[Attempt]) -> Response:
    """The answer of a call whose reconciler said its last attempt was executed: the response
    the reconciler gave, else ``ExecutedWithoutResponse``.

    The response returned is a shallow copy of the reconciler's whose ``.attempts`` are the
    call's trail (the attempt in doubt last, reconciled ``EXECUTED``), as any call's response
    holds its own; the reconciler's response itself, with its look-up's attempts, stays in
    that last attempt's ``.reconciled.response``. (Returned as it was, the caller lost the
    call's trail: its ``.attempts`` were the look-up's.)"""
    last = attempts[-1]
    reconciled = reconciled_of(last)
    assert reconciled is not None
    assert reconciled.outcome is ReconcileOutcome.EXECUTED
    if reconciled.response is not None:
        answer = copy.copy(reconciled.response)
        answer.attempts = list(attempts)
        return answer
    raise ExecutedWithoutResponse(
        f"{request.method} {request.url}: the server executed this request (its reconciler "
        f"said so after {last.evidence} at {last.stage}); it was not sent again, and there is "
        "no response to return: .reconciled is the reconciler's answer",
        evidence=Evidence.RESPONSE_RECEIVED if last.status is not None else last.evidence,
        reconciled=reconciled,
        attempts=attempts,
        idempotency_key=request.idempotency_key,
    )
