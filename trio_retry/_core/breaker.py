"""Circuit breaking: stop sending to an upstream that is down, decided from values.

Models: Envoy's outlier detection (eject a host after ``consecutive_5xx`` or
``consecutive_gateway_failure`` — 502/503/504 and connection errors — or on a failure
percentage; the ejection lasts ``base_ejection_time`` multiplied by the number of times it was
ejected) and Finagle's failure accrual (mark a host dead after consecutive failures, then let
probe requests through). The classic state machine: ``CLOSED`` → ``OPEN`` → ``HALF_OPEN`` →
``CLOSED`` (or back to ``OPEN``).

Only evidence that the *upstream* is unhealthy counts (:func:`health_of`):

- unhealthy: the connection could not be made (DNS, TCP connect, TLS handshake), a timeout,
  or a 502/503/504 response;
- healthy: any other response, 4xx included (a 404 or a 429 is a working server answering),
  and 500 (the application failed; the server is up);
- neutral, not counted at all: failures that are ours or say nothing about the server — an
  invalid request, a certificate that does not verify (configuration), a local protocol
  violation, a pool timeout or an admission rejection (the request never left), a broken
  connection or a refused stream (the request may have been fine; the peer may have reset one
  connection).

Opening: ``consecutive_failures`` unhealthy results in a row, or (``failure_ratio`` set) at
least that share of unhealthy among the last ``window`` seconds' results once there are at
least ``min_calls`` of them. While open, calls are rejected at once (``ADMISSION``,
``NOT_SENT``). The cool-down is ``cool_down x multiplier^(level - 1)``, capped at
``max_cool_down``; the level rises by one at each opening and falls by one for each whole
``window`` the breaker then stays closed (Envoy's multiplied ejection time, decaying).

Half-open: after the cool-down, at most ``probes`` calls are let through; the others are
rejected as while open. ``probes`` healthy results close it; one unhealthy result re-opens it
(at the next level). A neutral result gives its probe slot back, so at most ``probes`` probes
are ever in flight, and a probe that says nothing cannot close the breaker.
"""

from __future__ import annotations

import enum
import math
from collections import deque
from dataclasses import dataclass, field

from .evidence import FailureCategory
from .hedging import _check_int, _check_number

__all__ = [
    "BreakerState",
    "BreakerVerdict",
    "CircuitBreaker",
    "CircuitState",
    "Health",
    "health_of",
]


@dataclass(frozen=True, slots=True)
class CircuitBreaker:
    """Settings of a per-upstream circuit breaker (see the module docstring).

    ``consecutive_failures``: unhealthy results in a row that open it. ``failure_ratio``: also
    open when this share of the last ``window`` seconds' results is unhealthy (``None``: only
    the consecutive rule), judged once there are ``min_calls`` results. ``cool_down``: seconds
    open before probing, growing by ``multiplier`` at each re-opening up to ``max_cool_down``.
    ``probes``: calls let through while half-open. ``name``: how errors name the breaker
    (default: the upstream's origin).
    """

    consecutive_failures: int = 5
    failure_ratio: float | None = None
    window: float = 10.0
    min_calls: int = 20
    cool_down: float = 5.0
    multiplier: float = 2.0
    max_cool_down: float = 60.0
    probes: int = 1
    name: str | None = None

    def __post_init__(self) -> None:
        owner = "CircuitBreaker"
        _check_int(owner, "consecutive_failures", self.consecutive_failures, low=1)
        if self.failure_ratio is not None:
            ratio = _check_number(owner, "failure_ratio", self.failure_ratio, low=0, low_open=True)
            if ratio > 1:
                raise ValueError(
                    f"CircuitBreaker.failure_ratio must be in (0, 1], got {self.failure_ratio!r}"
                )
        _check_number(owner, "window", self.window, low=0.0, low_open=True)
        _check_int(owner, "min_calls", self.min_calls, low=1)
        cool = _check_number(owner, "cool_down", self.cool_down, low=0.0, low_open=True)
        _check_number(owner, "multiplier", self.multiplier, low=1.0, low_open=False)
        top = _check_number(owner, "max_cool_down", self.max_cool_down, low=0, low_open=True)
        if top < cool or math.isinf(top):
            raise ValueError(
                f"CircuitBreaker.max_cool_down must be finite and >= cool_down ({self.cool_down!r})"
                f", got {self.max_cool_down!r}"
            )
        _check_int(owner, "probes", self.probes, low=1)
        if self.name is not None and not isinstance(self.name, str):
            raise TypeError(f"CircuitBreaker.name must be a str or None, got {self.name!r}")


class Health(enum.Enum):
    """What one attempt's outcome says about the upstream."""

    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"
    NEUTRAL = "neutral"


_UNHEALTHY_CATEGORIES = frozenset(
    {
        FailureCategory.DNS,
        FailureCategory.CONNECT,
        FailureCategory.TLS_HANDSHAKE,
        FailureCategory.TIMEOUT,
    }
)
_UNHEALTHY_STATUSES = frozenset({502, 503, 504})


def health_of(status: int | None, category: FailureCategory | None) -> Health:
    """Classify one attempt: a response ``status`` (``category`` None), or a transport failure
    ``category``. See the module docstring for why each is what it is."""
    if category is not None:
        return Health.UNHEALTHY if category in _UNHEALTHY_CATEGORIES else Health.NEUTRAL
    if status is None:
        return Health.NEUTRAL
    return Health.UNHEALTHY if status in _UNHEALTHY_STATUSES else Health.HEALTHY


class CircuitState(enum.Enum):
    """The breaker's state."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class BreakerVerdict:
    """Admit (``probe`` when half-open) or reject (``retry_in`` seconds until probing)."""

    admitted: bool
    probe: bool = False
    state: CircuitState = CircuitState.CLOSED
    retry_in: float = 0.0
    phase: int = 0  # which half-open period a probe belongs to

    def __str__(self) -> str:
        if self.admitted:
            return "admitted as a probe" if self.probe else "admitted"
        if self.state is CircuitState.HALF_OPEN:
            return "rejected: the breaker is half-open and its probes are in flight"
        return f"rejected: the breaker is open for {self.retry_in:.3g}s more"


@dataclass(eq=False)
class BreakerState:
    """One upstream's breaker. Every method takes ``now`` (monotonic seconds); a smaller
    ``now`` than the latest seen is treated as the latest. Not thread-safe: one Trio run."""

    config: CircuitBreaker
    state: CircuitState = field(default=CircuitState.CLOSED, init=False)
    consecutive: int = field(default=0, init=False)
    openings: int = field(default=0, init=False)  # total, for display
    level: int = field(default=0, init=False)
    open_until: float = field(default=0.0, init=False)
    probes_in_flight: int = field(default=0, init=False)
    probes_passed: int = field(default=0, init=False)
    phase: int = field(default=0, init=False)  # half-open periods so far
    _results: deque[tuple[float, bool]] = field(default_factory=deque, init=False, repr=False)
    _unhealthy_in_window: int = field(default=0, init=False, repr=False)
    _closed_at: float = field(default=0.0, init=False, repr=False)
    _latest: float = field(default=-math.inf, init=False, repr=False)

    def _clock(self, now: float) -> float:
        now = max(now, self._latest)
        self._latest = now
        return now

    def _expire(self, now: float) -> None:
        horizon = now - self.config.window
        results = self._results
        while results and results[0][0] <= horizon:
            _, unhealthy = results.popleft()
            self._unhealthy_in_window -= unhealthy

    def current(self, now: float) -> CircuitState:
        """The state at ``now`` (an open breaker whose cool-down ended is half-open)."""
        now = self._clock(now)
        if self.state is CircuitState.OPEN and now >= self.open_until:
            self.state = CircuitState.HALF_OPEN
            self.phase += 1
            self.probes_in_flight = self.probes_passed = 0
        return self.state

    def admit(self, now: float) -> BreakerVerdict:
        """May a call go to the upstream at ``now``? The verdict of a probe must be handed
        back to ``record`` (or ``release``), or its slot stays taken."""
        state = self.current(now)
        if state is CircuitState.CLOSED:
            return BreakerVerdict(True)
        if state is CircuitState.OPEN:
            return BreakerVerdict(False, state=state, retry_in=self.open_until - self._latest)
        if self.probes_in_flight + self.probes_passed < self.config.probes:
            self.probes_in_flight += 1
            return BreakerVerdict(True, probe=True, state=state, phase=self.phase)
        return BreakerVerdict(False, state=state)

    def _current_probe(self, verdict: BreakerVerdict | None) -> bool:
        return (
            verdict is not None
            and verdict.probe
            and verdict.phase == self.phase
            and self.state is CircuitState.HALF_OPEN
        )

    def release(self, verdict: BreakerVerdict) -> None:
        """A call admitted with ``verdict`` ended without a result (e.g. cancelled)."""
        if self._current_probe(verdict) and self.probes_in_flight > 0:
            self.probes_in_flight -= 1

    def cool_down(self) -> float:
        """The cool-down the current level gives."""
        config = self.config
        seconds = config.cool_down * config.multiplier ** max(0, self.level - 1)
        return min(seconds, config.max_cool_down)

    def _open(self, now: float) -> None:
        if self.state is CircuitState.CLOSED:
            decay = math.floor((now - self._closed_at) / self.config.window)
            self.level = max(0, self.level - decay)
        self.level += 1
        self.openings += 1
        self.state = CircuitState.OPEN
        self.open_until = now + self.cool_down()
        self.probes_in_flight = self.probes_passed = 0
        self.consecutive = 0
        self._results.clear()
        self._unhealthy_in_window = 0

    def _close(self, now: float) -> None:
        self.state = CircuitState.CLOSED
        self._closed_at = now
        self.consecutive = 0
        self.probes_in_flight = self.probes_passed = 0

    def record(self, now: float, health: Health, verdict: BreakerVerdict | None = None) -> None:
        """Feed back one attempt's result (see :func:`health_of`); ``verdict``: what
        ``admit`` said for it (a probe's result counts only in its own half-open period)."""
        now = self._clock(now)
        state = self.current(now)
        if state is CircuitState.HALF_OPEN:
            if not self._current_probe(verdict):
                return  # admitted before the breaker opened, or an earlier period's probe
            self.probes_in_flight = max(0, self.probes_in_flight - 1)
            if health is Health.UNHEALTHY:
                self._open(now)
            elif health is Health.HEALTHY:
                self.probes_passed += 1
                if self.probes_passed >= self.config.probes:
                    self._close(now)
            return
        if state is CircuitState.OPEN or health is Health.NEUTRAL:
            return
        unhealthy = health is Health.UNHEALTHY
        self._expire(now)
        self._results.append((now, unhealthy))
        self._unhealthy_in_window += unhealthy
        self.consecutive = self.consecutive + 1 if unhealthy else 0
        config = self.config
        if self.consecutive >= config.consecutive_failures:
            self._open(now)
            return
        ratio = config.failure_ratio
        calls = len(self._results)
        if (
            unhealthy
            and ratio is not None
            and calls >= config.min_calls
            and self._unhealthy_in_window >= ratio * calls
        ):
            self._open(now)

    def __repr__(self) -> str:
        text = f"BreakerState({self.state}"
        if self.state is CircuitState.CLOSED:
            text += f", {self.consecutive} consecutive failures"
        elif self.state is CircuitState.OPEN:
            text += f" until {self.open_until:g}"
        else:
            text += f", {self.probes_in_flight} probes in flight, {self.probes_passed} passed"
        return text + f", opened {self.openings} times)"
