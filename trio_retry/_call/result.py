"""How one attempt ended, as a value: what :meth:`AttemptRun.run <.attempt.AttemptRun.run>`
returns, what the retry loop and a hedged round read, and what nothing writes into.

An :class:`AttemptResult` is read-only (STYLE habit 20): the runner builds it once, when the
attempt is over, and the loop reads it to decide (its evidence, its status), to record it
(:meth:`AttemptResult.record`) and to answer (its response, its body); a result with a field
changed is a new value (``_replace``). What the
attempt still holds after it ended (a streamed response's connection and bulkhead permit) is
the runner's, reached through :attr:`AttemptResult.held`; the value only says whether there
is anything.

The rejected alternative was the runner itself as the loop's record, which the loop and a
hedged round also wrote into (the winner's number, a consumed breaker verdict, a body read to
its end, a cancelled copy's error): the meaning of an attempt then depended on who had
touched it last, and a hedged copy cancelled before it ended needed a runner that never ran
only to carry its error.

It is a ``NamedTuple``, not a frozen dataclass as the call's other records are: read-only to
mypy and at run time alike (no ``__dict__``, no attribute to set), and built in one C call
(:func:`new_result`), where a frozen dataclass fills each field through
``object.__setattr__`` (or, with ``_core/slots.py``'s constructor, a Python frame storing each
field): one is built for every attempt of every call, and this is about 1,800 instructions
fewer a request under callgrind (HTTP/1.1, ``python -m benchmarks.instructions``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, NamedTuple, Protocol, cast

from .._core.attempt import Attempt, build_attempt
from .._core.backoff import parse_retry_after
from .._core.evidence import Evidence, FailureCategory
from .._wire.exchange import WireResponse
from .._wire.progress import AttemptProgress, WireError

if TYPE_CHECKING:
    from .._core.breaker import BreakerVerdict
    from .._core.decision import Decision
    from .._reconcile import Reconciled

__all__ = ["AttemptResult", "Held", "ResultFields", "cancelled_result", "new_result"]

_RECEIVED = Evidence.RESPONSE_RECEIVED  # (a global: an enum attribute is slow on Python 3.11)


class Held(Protocol):
    """What a streamed response's attempt still holds (its connection, its bulkhead permit)
    until its body ends: the runner, seen only as the way to give them back."""

    def end(self, read_to_end: bool = False) -> None:
        """Give back what is held (idempotent): the connection goes back to the pool reusable
        when ``read_to_end``, else a body not read to its end is abandoned (its HTTP/1.1
        connection closed, its HTTP/2 or HTTP/3 stream reset)."""


class AttemptResult(NamedTuple):
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


#: The fields of an :class:`AttemptResult`, in its order: what :func:`new_result` takes (so that
#: mypy checks each value given, and that none is missing).
ResultFields = tuple[
    int,  # number
    AttemptProgress,  # progress
    "WireResponse | None",  # response
    "bytes | None",  # body
    "int | None",  # raw_length
    "BaseException | None",  # error
    "Sequence[tuple[bytes, bytes]] | None",  # sent_headers
    "BreakerVerdict | None",  # admission
    "Held | None",  # held
    "int | None",  # range_start
]

#: ``AttemptResult(*fields)``, the tuple made the result in one C call: no frame of the
#: generated ``__new__`` (whose one job is to pack its arguments into this tuple). One per
#: attempt of every call. ``tests/call/test_attempt_result.py`` holds it equal to the class's
#: own constructor.
new_result = cast("Callable[[ResultFields], AttemptResult]", partial(tuple.__new__, AttemptResult))


def cancelled_result(number: int, progress: AttemptProgress, error: BaseException) -> AttemptResult:
    """The result of an attempt ended from outside before it had one of its own (a hedged
    copy cancelled because another answered first): ``error`` and the stage it reached; it
    holds nothing."""
    return new_result((number, progress, None, None, None, error, None, None, None, None))
