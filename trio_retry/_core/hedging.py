"""Hedged requests: when a second copy of a slow request may go out, decided from values.

Why hedge: when a small share of responses is slow for reasons unrelated to the request (a GC
pause, a cold cache, a slow replica), a second copy of the request sent after the usual
response time usually answers first, and the tail of the latency distribution collapses to
roughly the delay plus a normal response time (Dean and Barroso, "The Tail at Scale", 2013).
gRPC's hedging policy (gRFC A6: ``hedgingDelay``, ``maxAttempts``, throttled by the channel's
retry throttling) and Finagle's backup requests (``BackupRequestFilter``: the delay is a latency
percentile, the extra load bounded by ``maxExtraLoad``) are the two models this follows.

What trio_retry adds is the evidence: a hedge is only ever sent for an operation whose repeat
is harmless (``SAFE``, ``IDEMPOTENT``, or carrying an ``Idempotency-Key``) with a body that can
be sent again, so running it twice on the server is never a bug; and every copy, the losers
included, is recorded in the attempt trail with the stage it reached.

The rule order (first denial wins; a later rule can never re-enable what an earlier one
refused), as data in :data:`RULES`:

1. the operation is not safely idempotent → ``NOT_IDEMPOTENT``
2. the body cannot be sent again → ``BODY_NOT_REPLAYABLE``
3. this call already sent ``max_hedges`` hedges → ``MAX_HEDGES``
4. the call's attempts are used up (a hedge is an attempt) → ``MAX_ATTEMPTS``
5. the remaining deadline is below the least an attempt needs → ``DEADLINE``
6. hedges in the window would exceed ``max_share`` of the calls → ``SHARE``
7. the upstream's retry budget is empty (a hedge is a retry for accounting) → ``BUDGET``
8. the bulkhead has no free permit (a hedge never queues behind real calls) → ``BULKHEAD``

The share (rule 6): a hedge is allowed while the hedges of the last ``window`` seconds number
fewer than ``max_share x calls in that window``. So at every hedge, hedges in the window ending
there (itself included) ≤ ``ceil(max_share x calls in that window)``; the ceiling lets a quiet
client hedge once per window.

The delay: fixed, or (``percentile`` set) the observed latency percentile of the upstream's
responses (Finagle's choice), never below ``delay``, which is also what is used until
``min_samples`` latencies have been observed.
"""

from __future__ import annotations

import enum
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from .idempotency import Idempotency
from .replay import Replayability

__all__ = [
    "RULES",
    "HedgeContext",
    "HedgeDenial",
    "HedgeLedger",
    "Hedging",
    "decide_hedge",
    "percentile",
]


def _check_number(owner: str, name: str, value: object, *, low: float, low_open: bool) -> float:
    """``value`` as a float, or TypeError/ValueError naming ``owner.name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{owner}.{name} must be a number, got {value!r}")
    number = float(value)
    bad = number <= low if low_open else number < low
    if bad or math.isnan(number):
        relation = ">" if low_open else ">="
        raise ValueError(f"{owner}.{name} must be {relation} {low:g}, got {value!r}")
    return number


def _check_int(owner: str, name: str, value: object, *, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{owner}.{name} must be an int, got {value!r}")
    if value < low:
        raise ValueError(f"{owner}.{name} must be >= {low}, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Hedging:
    """Send up to ``max_hedges`` extra copies of a slow, safely idempotent request.

    ``delay`` (seconds): how long an attempt may go without a response head before a hedge is
    sent. ``max_hedges``: extra copies per call (at most 4, as gRPC caps hedged attempts at 5).
    ``max_share``: hedges may be at most this share of the upstream's calls over ``window``
    seconds. ``percentile`` (e.g. ``0.95``): hedge after that percentile of the upstream's
    observed response times instead (never sooner than ``delay``), once ``min_samples`` have
    been seen among the last ``samples``.
    """

    delay: float
    max_hedges: int = 1
    max_share: float = 0.05
    percentile: float | None = None
    window: float = 10.0
    min_samples: int = 20
    samples: int = 1000

    def __post_init__(self) -> None:
        owner = "Hedging"
        delay = _check_number(owner, "delay", self.delay, low=0.0, low_open=False)
        if math.isinf(delay):
            raise ValueError(f"Hedging.delay must be finite, got {self.delay!r}")
        max_hedges = _check_int(owner, "max_hedges", self.max_hedges, low=1)
        if max_hedges > 4:
            raise ValueError(f"Hedging.max_hedges must be <= 4, got {self.max_hedges!r}")
        share = _check_number(owner, "max_share", self.max_share, low=0.0, low_open=True)
        if share > 1:
            raise ValueError(
                f"Hedging.max_share is a share of calls in (0, 1], got {self.max_share!r}"
            )
        if self.percentile is not None:
            p = _check_number(owner, "percentile", self.percentile, low=0.0, low_open=True)
            if p >= 1:
                raise ValueError(
                    f"Hedging.percentile must be in (0, 1), e.g. 0.95, got {self.percentile!r}"
                )
        _check_number(owner, "window", self.window, low=0.0, low_open=True)
        _check_int(owner, "min_samples", self.min_samples, low=1)
        samples = _check_int(owner, "samples", self.samples, low=1)
        if samples < self.min_samples:
            raise ValueError(
                f"Hedging.samples ({samples}) must be >= min_samples ({self.min_samples})"
            )


class HedgeDenial(enum.Enum):
    """Why no hedge was sent (see the module docstring for the order)."""

    NOT_IDEMPOTENT = "the operation is not safely idempotent"
    BODY_NOT_REPLAYABLE = "the body cannot be sent again"
    MAX_HEDGES = "the call sent max_hedges hedges already"
    MAX_ATTEMPTS = "the call's attempts are used up"
    DEADLINE = "too little time is left before the deadline"
    SHARE = "hedges would exceed max_share of the upstream's calls"
    BUDGET = "the upstream's retry budget is empty"
    BULKHEAD = "the upstream's bulkhead has no free permit"

    def __str__(self) -> str:
        return f"no hedge: {self.value}"


@dataclass(frozen=True, slots=True, kw_only=True)
class HedgeContext:
    """Everything the hedge decision looks at, as values."""

    idempotency: Idempotency
    replayability: Replayability
    hedges_sent: int  # by this call so far
    max_hedges: int
    attempts_started: int  # by this call so far, hedges included
    max_attempts: int
    remaining_deadline: float | None
    min_attempt_budget: float
    hedges_in_window: int
    calls_in_window: int
    max_share: float
    budget_available: bool
    bulkhead_free: bool


HedgeRule = Callable[[HedgeContext], HedgeDenial | None]


def _idempotent(ctx: HedgeContext) -> HedgeDenial | None:
    return None if ctx.idempotency.safely_idempotent else HedgeDenial.NOT_IDEMPOTENT


def _replayable(ctx: HedgeContext) -> HedgeDenial | None:
    return None if ctx.replayability.replayable else HedgeDenial.BODY_NOT_REPLAYABLE


def _per_call(ctx: HedgeContext) -> HedgeDenial | None:
    return HedgeDenial.MAX_HEDGES if ctx.hedges_sent >= ctx.max_hedges else None


def _attempts(ctx: HedgeContext) -> HedgeDenial | None:
    return HedgeDenial.MAX_ATTEMPTS if ctx.attempts_started >= ctx.max_attempts else None


def _deadline(ctx: HedgeContext) -> HedgeDenial | None:
    remaining = ctx.remaining_deadline
    if remaining is not None and remaining < ctx.min_attempt_budget:
        return HedgeDenial.DEADLINE
    return None


def _share(ctx: HedgeContext) -> HedgeDenial | None:
    if ctx.hedges_in_window < ctx.max_share * ctx.calls_in_window:
        return None
    return HedgeDenial.SHARE


def _budget(ctx: HedgeContext) -> HedgeDenial | None:
    return None if ctx.budget_available else HedgeDenial.BUDGET


def _bulkhead(ctx: HedgeContext) -> HedgeDenial | None:
    return None if ctx.bulkhead_free else HedgeDenial.BULKHEAD


#: The rules in order; the first that returns a denial decides.
RULES: tuple[HedgeRule, ...] = (
    _idempotent,
    _replayable,
    _per_call,
    _attempts,
    _deadline,
    _share,
    _budget,
    _bulkhead,
)


def decide_hedge(ctx: HedgeContext) -> HedgeDenial | None:
    """``None`` when a hedge may be sent now, else the first rule's denial. Pure."""
    for rule in RULES:
        denial = rule(ctx)
        if denial is not None:
            return denial
    return None


def percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank ``fraction`` percentile of ``values`` (non-empty, any order)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


@dataclass(eq=False)
class HedgeLedger:
    """One upstream's hedging history: calls and hedges in the window, observed latencies.

    Every method takes ``now`` (monotonic seconds); a ``now`` smaller than the latest one seen
    is treated as the latest (time does not go backwards). Not thread-safe: one Trio run.
    """

    hedging: Hedging
    _calls: deque[float] = field(default_factory=deque, init=False, repr=False)
    _hedges: deque[float] = field(default_factory=deque, init=False, repr=False)
    _latencies: deque[float] = field(init=False, repr=False)
    _latest: float = field(default=-math.inf, init=False, repr=False)
    _cached_delay: float | None = field(default=None, init=False, repr=False)
    _observed: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        self._latencies = deque(maxlen=self.hedging.samples)

    def _expire(self, now: float) -> float:
        now = max(now, self._latest)
        self._latest = now
        horizon = now - self.hedging.window
        for events in (self._calls, self._hedges):
            while events and events[0] <= horizon:
                events.popleft()
        return now

    def record_call(self, now: float) -> None:
        """A call to the upstream was admitted at ``now``."""
        self._calls.append(self._expire(now))

    def record_hedge(self, now: float) -> None:
        """A hedge was sent at ``now``."""
        self._hedges.append(self._expire(now))

    def counts(self, now: float) -> tuple[int, int]:
        """``(calls, hedges)`` in the window ending at ``now``."""
        self._expire(now)
        return len(self._calls), len(self._hedges)

    def observe_latency(self, seconds: float) -> None:
        """One response's time from the start of its attempt to its response head."""
        if seconds >= 0 and math.isfinite(seconds):
            self._latencies.append(seconds)
            self._observed += 1
            # Recomputed at most every 16 samples: sorting on every call would cost more than
            # the call; a percentile moves slowly.
            if self._observed % 16 == 0:
                self._cached_delay = None

    def delay(self) -> float:
        """The current hedge delay: ``delay``, or the percentile (never below ``delay``)."""
        hedging = self.hedging
        if hedging.percentile is None or len(self._latencies) < hedging.min_samples:
            return hedging.delay
        if self._cached_delay is None:
            observed = percentile(list(self._latencies), hedging.percentile)
            self._cached_delay = max(hedging.delay, observed)
        return self._cached_delay

    def __repr__(self) -> str:
        return (
            f"HedgeLedger({self.hedging}; {len(self._hedges)} hedges / {len(self._calls)} "
            f"calls in window, {len(self._latencies)} latencies)"
        )
