"""After ambiguity (SPEC §19), the core's part: what a reconciliation found
(:class:`ReconcileOutcome`, read by the engine's rules) and what an :class:`Attempt` record
holds of it (:class:`Reconciliation`, which ``trio_retry.Reconciled`` is). The reconciler's
report and answer, which hold a URL and a response, are values (``_reconcile.py``).
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeAlias

__all__ = ["ReconcileOutcome", "Reconciliation", "Reconciler"]


class ReconcileOutcome(enum.Enum):
    """What a reconciliation found (``Reconciled.outcome``)."""

    EXECUTED = "executed"
    NOT_EXECUTED = "not executed"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value


class Reconciliation(Protocol):
    """A reconciler's answer as the trail holds it (``Attempt.reconciled``): a
    ``trio_retry.Reconciled``."""

    @property
    def outcome(self) -> ReconcileOutcome: ...

    @property
    def response(self) -> object: ...

    @property
    def detail(self) -> str: ...

    @property
    def error(self) -> BaseException | None: ...


#: ``Upstream(reconcile=...)``: an async function ``(report: AmbiguityReport) -> Reconciled``
#: (the report is a value the core does not name: ``_reconcile.Reconciler`` is the exact type).
Reconciler: TypeAlias = Callable[[Any], Awaitable[Reconciliation]]
