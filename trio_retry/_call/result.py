"""How one attempt ended, as a value: what :meth:`AttemptRun.run <.attempt.AttemptRun.run>`
returns, what the retry loop and a hedged round read, and what nothing writes into.

An :class:`AttemptResult` is frozen and slotted (STYLE habits 3 and 20): the runner builds it
once, when the attempt is over, and the loop reads it to decide (its evidence, its status),
to record it (:meth:`AttemptResult.record`) and to answer (its response, its body). What the
attempt still holds after it ended (a streamed response's connection and bulkhead permit) is
the runner's, reached through :attr:`AttemptResult.held`; the value only says whether there
is anything.

The rejected alternative was the runner itself as the loop's record, which the loop and a
hedged round also wrote into (the winner's number, a consumed breaker verdict, a body read to
its end, a cancelled copy's error): the meaning of an attempt then depended on who had
touched it last, and a hedged copy cancelled before it ended needed a runner that never ran
only to carry its error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from .._core.attempt import Attempt, build_attempt
from .._core.backoff import parse_retry_after
from .._core.evidence import Evidence, FailureCategory
from .._core.slots import slot_constructor
from .._wire.exchange import WireResponse
from .._wire.progress import AttemptProgress, WireError

if TYPE_CHECKING:
    from .._core.breaker import BreakerVerdict
    from .._core.decision import Decision
    from .._reconcile import Reconciled

__all__ = ["AttemptResult", "Held", "build_result", "cancelled_result"]

_RECEIVED = Evidence.RESPONSE_RECEIVED  # (a global: an enum attribute is slow on Python 3.11)


class Held(Protocol):
    """What a streamed response's attempt still holds (its connection, its bulkhead permit)
    until its body ends: the runner, seen only as the way to give them back."""

    def end(self, read_to_end: bool = False) -> None:
        """Give back what is held (idempotent): the connection goes back to the pool reusable
        when ``read_to_end``, else a body not read to its end is abandoned (its HTTP/1.1
        connection closed, its HTTP/2 or HTTP/3 stream reset)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptResult:
    """One finished attempt of a call: read, never written (writing raises).

    ``number`` is the attempt's place among the tries its call started (1-based, given when it
    started: the event hooks and the span saw the same one). ``progress`` is the wire's record
    of how far it got (its stage, timings, bytes, protocol), done changing. Either
    ``response`` is set and ``error`` is ``None`` (answered: ``body`` is the whole body, or
    ``None`` for a streamed response below 400 whose body the caller reads), or ``error`` says
    how it failed (a classified :class:`WireError`; for a hedged copy cancelled because another
    answered, its ``HedgeCancelled``), with ``response`` kept if its head had arrived.
    """

    number: int
    progress: AttemptProgress
    response: WireResponse | None
    #: The whole body (buffered calls, and any status >= 400), else ``None``.
    body: bytes | None
    #: The length of ``body`` as received, when it was decoded (else ``None``).
    raw_length: int | None
    error: BaseException | None
    #: The header block this attempt sent (``Response.request.headers``).
    sent_headers: Sequence[tuple[bytes, bytes]] | None
    #: The breaker's admission verdict, for the one who learns from the attempt (or gives a
    #: probe slot back): ``hedge.learn``, or the loop on a reconnect.
    admission: BreakerVerdict | None
    #: What the attempt still holds (a streamed response below 400: its connection and
    #: permit), ``None`` when it gave everything back before it returned.
    held: Held | None
    #: A continuation of a broken body: the byte it asked the rest from (``_call/resume.py``).
    range_start: int | None

    @property
    def answered(self) -> bool:
        """A response head arrived and nothing failed after it."""
        return self.response is not None and self.error is None

    def observe(
        self, wall_clock: Callable[[], float]
    ) -> tuple[Evidence, FailureCategory | None, float | None]:
        """The evidence, failure category and Retry-After (seconds) of the attempt; a
        Retry-After given as an HTTP-date is dated by ``wall_clock``. An error the wire did not
        classify (a cancelled hedged copy) has the evidence of the stage reached."""
        error = self.error
        wire = self.response
        if error is None:
            assert wire is not None
            retry_after = None
            if wire.status >= 400:  # below 400 the engine is not consulted
                for name, value in wire.headers:
                    if name.lower() == b"retry-after":
                        retry_after = parse_retry_after(value, wall_clock())
            return _RECEIVED, None, retry_after
        if isinstance(error, WireError):
            return error.evidence, error.category, None
        return self.progress.evidence, None, None

    def record(
        self,
        evidence: Evidence,
        category: FailureCategory | None,
        ended: float,
        decision: Decision | None = None,
        reconciled: Reconciled | None = None,
    ) -> Attempt:
        """The :class:`Attempt` record of the attempt (built once, with its decision and what
        its reconciler said, if asked)."""
        progress = self.progress
        timings = progress.timings  # the progress ends with its attempt: no copy needed
        timings["total"] = ended - progress.started
        wire = self.response
        return build_attempt(  # Attempt(...), built faster
            number=self.number,
            stage=progress.stage,
            evidence=evidence,
            error=self.error,
            # Kept when the head arrived, even if the body then broke (the engine's status
            # rules still see None: a broken exchange is judged by the transport rules).
            status=wire.status if wire is not None else None,
            http_version=progress.http_version,
            early_data=progress.early_data,
            connection_reused=progress.connection_reused,
            bytes_sent=progress.bytes_sent,
            bytes_received=progress.bytes_received,
            category=category,
            timings=timings,
            decision=decision,
            range_start=self.range_start,
            reconciled=reconciled,
        )


#: ``AttemptResult(...)`` with every field given, faster: one per attempt of every call (see
#: :func:`~trio_retry._core.slots.slot_constructor`).
build_result: Callable[..., AttemptResult] = slot_constructor(AttemptResult)


def cancelled_result(number: int, progress: AttemptProgress, error: BaseException) -> AttemptResult:
    """The result of an attempt ended from outside before it had one of its own (a hedged
    copy cancelled because another answered first): ``error`` and the stage it reached; it
    holds nothing."""
    return build_result(
        number=number,
        progress=progress,
        response=None,
        body=None,
        raw_length=None,
        error=error,
        sent_headers=None,
        admission=None,
        held=None,
        range_start=None,
    )
