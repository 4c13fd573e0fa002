"""Per-upstream runtime of hedging, adaptive throttling and circuit breaking (SPEC §15).

The decisions live in ``_core`` (``hedging``, ``throttle``, ``breaker``) and take time as an
argument; this module owns the state each origin keeps, reads Trio's clock, sleeps, and runs
hedged copies of an attempt in the call's own nursery. The client calls it at three points:

1. admission (:meth:`Guard.admit`), before the bulkhead, for every attempt: the breaker
   rejects at once while open; the throttle makes the attempt wait for a token, or rejects it
   when the wait would cross the deadline. A rejection is a ``WireError`` at ``ADMISSION``
   with ``NOT_SENT`` evidence, ending the call (trying again at once would be rejected again),
   and its message names the breaker or the throttle;
2. after every attempt (:meth:`Guard.observe`): the breaker and the throttle learn from the
   attempt's evidence (status, failure category, Retry-After), the hedging ledger from its
   time to the response head;
3. the attempt itself, when the call is hedged (:func:`run_hedged`).

Hedged copies run in a nursery opened by the calling task, so no copy outlives the call; a
copy that loses is cancelled (its HTTP/1.1 connection is closed, its HTTP/2 stream reset with
``CANCEL``), and every copy ends up in the attempt trail with the stage it reached.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

import trio

from .._core.errors import RejectReason
from .._core.evidence import Evidence, FailureCategory, Stage
from .._core.policy import Upstream
from .._wire.clock import effective_deadline, pause, wait_until
from .._wire.progress import AttemptProgress, WireError

if TYPE_CHECKING:
    # Imported where each is configured (Guard): ~5 ms of start-up that a program without
    # breakers, throttles or hedging never needs. Once loaded, such an import in observe() is
    # a sys.modules look-up (~0.5 us), beside the breaker's or throttle's own work.
    from .._core.breaker import BreakerState, BreakerVerdict, CircuitState
    from .._core.hedging import HedgeLedger, Hedging
    from .._core.throttle import ThrottleState

__all__ = [
    "NON_FINAL_STATUSES",
    "Copy",
    "Guard",
    "HedgeCancelled",
    "UpstreamStatus",
    "run_hedged",
]

#: Responses that do not end a hedged round while another copy is still running: the server
#: asked for a retry or its gateway failed, and the other copy may still answer (gRFC A6's
#: "non-fatal status codes").
NON_FINAL_STATUSES = frozenset({429, 502, 503, 504})


class HedgeCancelled(Exception):
    """The ``error`` of an attempt cancelled because another copy of the request answered
    first. Never raised: it only appears in the attempt trail."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UpstreamStatus:
    """A snapshot of one origin's resilience state (``Client.upstream_status(origin)``).

    ``circuit``: the breaker's state (``None``: no breaker); ``circuit_openings``: how often
    it opened; ``circuit_retry_in``: seconds until it probes (when open). ``send_rate``: the
    adaptive throttle's current rate in requests per second (``None``: no throttle, or not
    throttled yet). ``calls_in_window`` / ``hedges_in_window``: the hedging ledger's counts.
    """

    origin: str
    circuit: CircuitState | None = None
    circuit_openings: int = 0
    circuit_retry_in: float | None = None
    send_rate: float | None = None
    calls_in_window: int = 0
    hedges_in_window: int = 0


def _rejected(message: str, reason: RejectReason) -> WireError:
    return WireError(
        message,
        stage=Stage.ADMISSION,
        evidence=Evidence.NOT_SENT,
        category=FailureCategory.ADMISSION,
        ends_call=True,
        reason=reason,
    )


class Guard:
    """One origin's breaker, throttle and hedging ledgers (each only when configured)."""

    __slots__ = ("breaker", "ledgers", "name", "origin", "throttle")

    def __init__(self, upstream: Upstream, origin: str) -> None:
        self.origin = origin
        config = upstream.breaker
        self.breaker: BreakerState | None = None
        if config is not None:
            from .._core.breaker import BreakerState

            self.breaker = BreakerState(config)
        self.name = (config.name if config is not None else None) or origin
        self.throttle: ThrottleState | None = None
        if upstream.throttle:
            from .._core.throttle import ThrottleState

            self.throttle = ThrottleState(upstream.throttle)
        self.ledgers: dict[Hedging, HedgeLedger] = {}

    def ledger(self, hedging: Hedging) -> HedgeLedger:
        """The ledger of calls hedged with ``hedging`` (one per distinct setting)."""
        ledger = self.ledgers.get(hedging)
        if ledger is None:
            from .._core.hedging import HedgeLedger

            ledger = self.ledgers[hedging] = HedgeLedger(hedging)
        return ledger

    async def admit(self, what: str, deadline: float) -> BreakerVerdict | None:
        """Admit one attempt (``what``: "METHOD URL", for messages) before ``deadline``.

        Returns the breaker's verdict (to hand back to :meth:`observe` or :meth:`release`).
        Raises a ``WireError`` that ends the call (``ADMISSION``, ``NOT_SENT``) when the breaker is
        open, or when the throttle's wait would cross the deadline. A cancelled throttle wait
        releases a probe slot and leaves the reserved token spent (erring on the side of
        sending less).
        """
        now = trio.current_time()
        verdict: BreakerVerdict | None = None
        if self.breaker is not None:
            verdict = self.breaker.admit(now)
            if not verdict.admitted:
                raise _rejected(
                    f"{what} not admitted: the circuit breaker of {self.name} is "
                    f"{verdict.state} ({verdict}; opened {self.breaker.openings} times)",
                    RejectReason.BREAKER_OPEN,
                )
        if self.throttle is not None:
            limit = effective_deadline(deadline)
            remaining = limit - now if math.isfinite(limit) else None
            wait = self.throttle.acquire(now, remaining)
            if wait.rejected:
                self.release(verdict)
                raise _rejected(
                    f"{what} not admitted: the adaptive throttle of {self.origin} sends "
                    f"{wait.rate:.3g} requests/s and the next slot is {wait.wait:.3f}s away, "
                    "past the call's deadline"
                    + (" or max_wait" if self.throttle.config.max_wait is not None else ""),
                    RejectReason.THROTTLED,
                )
            if wait.wait > 0:
                try:
                    await pause(wait.wait)
                except BaseException:
                    self.release(verdict)
                    raise
        return verdict

    def release(self, verdict: BreakerVerdict | None) -> None:
        """An admitted attempt ended with no result to report (cancelled, or rejected later)."""
        if verdict is not None and self.breaker is not None:
            self.breaker.release(verdict)

    def observe(
        self,
        *,
        status: int | None,
        category: FailureCategory | None,
        retry_after: float | None,
        verdict: BreakerVerdict | None,
    ) -> None:
        """Learn from one finished attempt: a response ``status`` (``category`` None) or a
        transport failure ``category``. Admission rejections teach nothing."""
        if category is FailureCategory.ADMISSION:
            self.release(verdict)
            return
        now = trio.current_time()
        if self.breaker is not None:
            from .._core.breaker import health_of

            self.breaker.record(now, health_of(status, category), verdict)
        if self.throttle is not None and category is None and status is not None:
            from .._core.throttle import is_throttling

            self.throttle.observe(now, is_throttling(status, retry_after))

    def status(self) -> UpstreamStatus:
        now = trio.current_time()
        calls = hedges = 0
        for ledger in self.ledgers.values():
            c, h = ledger.counts(now)
            calls, hedges = calls + c, hedges + h
        breaker = self.breaker
        state = breaker.current(now) if breaker is not None else None
        retry_in: float | None = None
        if breaker is not None:
            from .._core.breaker import CircuitState

            if state is CircuitState.OPEN:
                retry_in = max(0.0, breaker.open_until - now)
        return UpstreamStatus(
            origin=self.origin,
            circuit=state,
            circuit_openings=breaker.openings if breaker is not None else 0,
            circuit_retry_in=retry_in,
            send_rate=self.throttle.rate if self.throttle is not None else None,
            calls_in_window=calls,
            hedges_in_window=hedges,
        )


OutcomeT = TypeVar("OutcomeT")


@dataclass(eq=False)
class Copy(Generic[OutcomeT]):
    """One copy of the request in a hedged round."""

    number: int
    progress: AttemptProgress
    outcome: OutcomeT | None = None
    ended: float = 0.0
    cancelled: bool = False  # lost the race (or the round was interrupted)
    error: BaseException | None = None  # raised by the attempt itself (not a WireError)
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)

    @property
    def running(self) -> bool:
        return self.outcome is None and not self.cancelled and self.error is None


async def run_hedged(
    *,
    first: Copy[OutcomeT],
    attempt: Callable[[int, AttemptProgress], Awaitable[OutcomeT]],
    delay: Callable[[], float],
    may_hedge: Callable[[int], bool],
    final: Callable[[OutcomeT], bool],
) -> tuple[Copy[OutcomeT], list[Copy[OutcomeT]]]:
    """Run ``first``, and after ``delay()`` seconds without a response head another copy
    (while ``may_hedge(copies started so far)`` says yes, each ``delay()`` after the last);
    return ``(winner, others)``. Each copy is ``attempt(number, progress)``, numbered on from
    ``first.number`` as it starts.

    The winner is the first copy whose outcome is ``final``; when none is, the last one to
    finish with an outcome. The others were cancelled (``cancelled``) or finished without
    winning. All copies run in a nursery of the calling task and have ended when this
    returns. Outer cancellation cancels every copy and then propagates as a plain
    ``trio.Cancelled`` (never wrapped in an exception group); an exception raised by an
    attempt itself (the caller's auth object or body iterator) cancels the others and is
    re-raised.
    """
    copies = [first]
    changed = trio.Event()
    winner: Copy[OutcomeT] | None = None
    interrupted = False

    async def run(copy: Copy[OutcomeT]) -> None:
        nonlocal changed
        try:
            with copy.scope:
                copy.outcome = await attempt(copy.number, copy.progress)
            if copy.scope.cancelled_caught:
                copy.cancelled = True
        except trio.Cancelled:
            # Outer cancellation: swallowed here so that the nursery does not wrap it; the
            # round re-raises it, unwrapped, at its next checkpoint.
            copy.cancelled = True
        except Exception as exc:
            copy.error = exc
        copy.ended = trio.current_time()
        changed.set()

    def launch(nursery: trio.Nursery, copy: Copy[OutcomeT]) -> None:
        nursery.start_soon(run, copy)

    async with trio.open_nursery() as nursery:
        launch(nursery, first)
        next_at = trio.current_time() + delay()
        try:
            while True:
                finished = [c for c in copies if not c.running]
                if any(c.error is not None for c in finished):
                    break
                done = [c for c in finished if c.outcome is not None and final(c.outcome)]
                if done:
                    # The earliest to end: under load the round may wake after several ended.
                    winner = min(done, key=lambda c: c.ended)
                    break
                if not any(c.running for c in copies):
                    break
                await wait_until(changed, next_at)
                changed = trio.Event()
                now = trio.current_time()
                if now < next_at:
                    continue
                heads = any(c.running and c.progress.stage >= Stage.RESPONSE_HEAD for c in copies)
                if not heads and may_hedge(len(copies)):
                    copy: Copy[OutcomeT] = Copy(len(copies) + first.number, AttemptProgress(now))
                    copies.append(copy)
                    launch(nursery, copy)
                    next_at = now + delay()
                else:
                    next_at = math.inf  # the round sends no more copies
        except trio.Cancelled:
            interrupted = True
        finally:
            for c in copies:
                if c is not winner:
                    c.scope.cancel()
    if interrupted:
        await trio.lowlevel.checkpoint()  # raises the outer Cancelled, unwrapped
    for c in copies:
        if c.error is not None:
            raise c.error
    if winner is None:
        ended = [c for c in copies if c.outcome is not None]
        if not ended:  # every copy was cancelled from outside: re-raise that
            await trio.lowlevel.checkpoint()
            raise RuntimeError("hedged round ended without an outcome")  # pragma: no cover
        winner = max(ended, key=lambda c: c.ended)
    others = [c for c in copies if c is not winner]
    return winner, others
