"""After ambiguity (SPEC §19): what a reconciler is told, and what it answers (values: they
hold a URL and a response; the outcome itself is the core's, ``_core/reconcile.py``).

A reconciler (``Upstream(reconcile=fn)``, or ``reconcile=fn`` per call) is an ``async``
function the client calls where it would otherwise raise ``HttpAmbiguousExecutionError``: it is
given an :class:`AmbiguityReport` (the request in doubt) and answers a :class:`Reconciled`:
the request was executed (perhaps with the ``Response`` it looked up), was not executed, or
cannot be known. The loop (``_call/reconcile.py``) calls the function, and the engine's rules
(``_core/engine.py``) read the outcome.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeAlias, cast

from ._core.attempt import Attempt
from ._core.evidence import Evidence
from ._core.reconcile import ReconcileOutcome as ReconcileOutcome
from ._models import URL, Response

__all__ = ["AmbiguityReport", "ReconcileOutcome", "Reconciled", "Reconciler", "reconciled_of"]


@dataclass(frozen=True, slots=True, kw_only=True)
class AmbiguityReport:
    """The request in doubt, as a reconciler is told of it.

    ``idempotency_key``: the ``Idempotency-Key`` it carried (``None``: none); ``request_id``:
    the ``X-Request-Id`` it carried (``None``: none); ``attempts``: the call's trail so far,
    the attempt in doubt last; ``time_left``: the seconds the reconciler has (the call's
    deadline, or the client's fixed bound when the call has none); ``evidence`` and
    ``status``: what the attempt in doubt proved (``SENT_NO_RESPONSE``, or the 502/503/504
    status of an answer that may come from a gateway that passed the request on)."""

    method: str
    url: URL
    idempotency_key: str | None
    request_id: str | None
    attempts: tuple[Attempt, ...]
    time_left: float
    evidence: Evidence
    status: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Reconciled:
    """A reconciler's answer; build it with :meth:`executed`, :meth:`not_executed` or
    :meth:`unknown`.

    ``response``: the ``Response`` an executed request's reconciler fetched, which the call
    returns. ``detail``: why the client took the outcome to be unknown itself (the reconciler
    raised, ran out of time, returned after the deadline or returned something else); ``""``
    for the reconciler's own answer. ``error``: the exception the reconciler raised, if any.
    """

    outcome: ReconcileOutcome
    response: Response | None = None
    detail: str = ""
    error: BaseException | None = None

    @classmethod
    def executed(cls, response: Response | None = None) -> Reconciled:
        """The server executed the request: the call returns ``response`` (a ``Response`` the
        reconciler fetched, typically the resource it created), or, without one, raises
        ``ExecutedWithoutResponse``. Never sent again."""
        return cls(outcome=ReconcileOutcome.EXECUTED, response=response)

    @classmethod
    def not_executed(cls) -> Reconciled:
        """The server did not execute the request: it may be sent again, as a counted attempt
        within the call's deadline and its upstream's retry budget."""
        return cls(outcome=ReconcileOutcome.NOT_EXECUTED)

    @classmethod
    def unknown(cls) -> Reconciled:
        """The reconciler cannot tell: the call raises ``HttpAmbiguousExecutionError`` as
        it would without a reconciler."""
        return cls(outcome=ReconcileOutcome.UNKNOWN)

    def __str__(self) -> str:
        text = f"reconciled as {self.outcome}"
        if self.detail:
            text += f" ({self.detail})"
        return text


def reconciled_of(attempt: Attempt) -> Reconciled | None:
    """The reconciler's answer on ``attempt`` (the trail types it by the core's protocol)."""
    return cast("Reconciled | None", attempt.reconciled)


#: ``Upstream(reconcile=...)`` and ``reconcile=`` per call.
Reconciler: TypeAlias = Callable[[AmbiguityReport], Awaitable[Reconciled]]
