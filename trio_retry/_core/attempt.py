"""The record of one wire attempt: what the wire observed and what the engine decided.

The client builds one :class:`Attempt` per attempt of every call (with
:data:`build_attempt`, the fast constructor), and hands the trail to the caller on the response
or the exception.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .decision import Decision
from .evidence import Evidence, FailureCategory, Stage
from .slots import slot_constructor

if TYPE_CHECKING:
    from .reconcile import Reconciliation

__all__ = ["Attempt", "build_attempt"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Attempt:
    """One wire attempt, as observed by the connection layer and judged by the engine.

    ``stage`` is the furthest stage reached; ``evidence`` what that proves; ``decision`` what the
    engine decided after it (``None`` when it was not consulted: statuses below 400 and
    successful attempts never are). ``reconciled``: what the call's reconciler said of this
    attempt, when it was asked (SPEC §19); ``None`` otherwise.
    """

    number: int
    stage: Stage
    evidence: Evidence
    error: BaseException | None = None
    status: int | None = None
    http_version: str | None = None
    #: HTTP/3 early data (0-RTT): ``None`` (not used), ``"accepted"`` or ``"rejected"`` by the
    #: server (SPEC §16; rejected early data was sent again after the handshake, uncounted),
    #: or ``"unconfirmed"``: sent early, and the handshake never completed.
    early_data: str | None = None
    #: ``False`` for the attempt that opened its connection; ``True`` on a connection another
    #: attempt opened: pooled, or an HTTP/2 or HTTP/3 one shared by calls that waited for the
    #: same opening.
    connection_reused: bool = False
    bytes_sent: int = 0
    bytes_received: int = 0
    category: FailureCategory | None = None
    timings: dict[str, float] = field(default_factory=dict)
    decision: Decision | None = None
    #: A continuation of a broken body (RFC 9110 §14): the byte it asked the rest from (its
    #: ``Range: bytes=N-``); ``None`` for an attempt that asked for the whole response.
    range_start: int | None = None
    reconciled: Reconciliation | None = None

    def __str__(self) -> str:
        outcome = str(self.status) if self.status is not None else str(self.category or "-")
        text = f"attempt {self.number}: {self.stage} / {self.evidence} / {outcome}"
        return text if self.reconciled is None else f"{text} / {self.reconciled}"


#: ``Attempt(...)`` with every field given, faster, for the client (see
#: :func:`~trio_retry._core.slots.slot_constructor`): one per attempt of every call.
build_attempt: Callable[..., Attempt] = slot_constructor(Attempt)
