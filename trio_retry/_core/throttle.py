"""Adaptive client-side throttling: a CUBIC rate controller over a token bucket, time passed in.

The controller is the one the AWS SDKs use in their ``adaptive`` retry mode (the "client side
rate limiter" of the SDKs' shared retry design, itself modelled on TCP CUBIC, RFC 9438): the
client measures the rate at which it gets responses; on a throttling response it remembers that
rate as the last known maximum ``W_max``, cuts its sending rate to ``beta x W_max`` and starts a
token bucket at that rate; on every other response the rate grows again along the cubic

    rate(t) = scale x (t - K)³ + W_max,   K = ∛(W_max x (1 - beta) / scale)

(``t`` the seconds since the last throttle): fast at first, flat near ``W_max`` (where the
server throttled last time), then probing beyond it. The rate is never set above twice the
measured rate (no credit for traffic that is not being sent) nor above ``max_rate``, and never
below ``min_rate``. Until the first throttling response the bucket is off: an unthrottled
upstream costs nothing.

Which responses throttle: 429, and 503 carrying ``Retry-After`` (the server said "later", not
"broken"); that is execution evidence — a response was received and it says the request was
not processed. Transport failures say nothing about the server's rate and are not counted.

Admission: the token bucket is kept as a schedule (the generic cell rate algorithm of ITU-T
I.371, a token bucket written as a "theoretical arrival time" ``tat``): a call admitted at
``now`` is sent at ``max(now, tat - burst)`` and moves ``tat`` on by ``1 / rate`` (``burst`` =
``(capacity - 1) / rate``). A call whose send time would cross its deadline is rejected at
``ADMISSION`` before a byte is sent (``NOT_SENT``) and takes no slot. Because a slot, once
given, keeps its time when the rate later changes, the schedule is a strict bound: for any two
admissions i < j, ``j - i <= r_max x (send_j - send_i) + r_max x burst_max``, where ``r_max``
and ``burst_max`` are the largest rate and burst in force meanwhile (a bucket that re-times
reservations on a rate change, as a plain token count does, breaks that).

One departure from the SDKs' controller: throttling responses within half a second (one
measurement bucket) of the last cut do not cut again. Under concurrency, every request sent
before the cut comes back 429, and cutting for each would multiply ``beta`` per response
(0.7^10 after ten) instead of once per congestion event, as TCP does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .hedging import _check_number

__all__ = ["AdaptiveThrottle", "ThrottleState", "ThrottleVerdict", "is_throttling"]


@dataclass(frozen=True, slots=True)
class AdaptiveThrottle:
    """Settings of the adaptive rate controller (see the module docstring).

    ``beta``: the share of the last maximum rate kept after a throttle (0 < beta < 1).
    ``scale``: how fast the cubic grows back (requests/s per s³). ``smoothing``: the weight
    of the newest half-second's rate in the measured rate. ``min_rate`` / ``max_rate``:
    bounds of the sending rate (requests/s; ``max_rate=None``: no upper bound but twice the
    measured rate). ``max_wait``: the longest a call waits for a token (``None``: as long as
    its deadline allows); a longer wait is rejected at once.
    """

    beta: float = 0.7
    scale: float = 0.4
    smoothing: float = 0.8
    min_rate: float = 0.5
    max_rate: float | None = None
    max_wait: float | None = None

    def __post_init__(self) -> None:
        owner = "AdaptiveThrottle"
        beta = _check_number(owner, "beta", self.beta, low=0.0, low_open=True)
        if beta >= 1:
            raise ValueError(f"AdaptiveThrottle.beta must be < 1, got {self.beta!r}")
        _check_number(owner, "scale", self.scale, low=0.0, low_open=True)
        smoothing = _check_number(owner, "smoothing", self.smoothing, low=0.0, low_open=True)
        if smoothing > 1:
            raise ValueError(f"AdaptiveThrottle.smoothing must be <= 1, got {self.smoothing!r}")
        min_rate = _check_number(owner, "min_rate", self.min_rate, low=0.0, low_open=True)
        if self.max_rate is not None:
            max_rate = _check_number(owner, "max_rate", self.max_rate, low=0.0, low_open=True)
            if max_rate < min_rate:
                raise ValueError(
                    f"AdaptiveThrottle.max_rate ({self.max_rate!r}) must be >= min_rate "
                    f"({self.min_rate!r})"
                )
        if self.max_wait is not None:
            _check_number(owner, "max_wait", self.max_wait, low=0.0, low_open=False)


def is_throttling(status: int | None, retry_after: float | None) -> bool:
    """True for a response that asks the client to slow down: 429, or 503 with Retry-After."""
    return status == 429 or (status == 503 and retry_after is not None)


@dataclass(frozen=True, slots=True)
class ThrottleVerdict:
    """``wait`` seconds before sending (0: now), or ``rejected`` (nothing reserved)."""

    wait: float
    rejected: bool = False
    rate: float | None = None  # the fill rate that decided, for messages

    def __str__(self) -> str:
        if self.rejected:
            return f"throttled: the next token is {self.wait:.3f}s away at {self.rate:g}/s"
        return f"go in {self.wait:.3f}s"


_BUCKET = 0.5  # seconds per measurement bucket (the SDKs' choice)
_MIN_CAPACITY = 1.0


@dataclass(eq=False)
class ThrottleState:
    """One upstream's controller and bucket. Every method takes ``now`` (monotonic seconds).

    ``acquire`` decides admission; ``observe`` feeds each response back. A ``now`` smaller
    than the latest one seen is treated as the latest. Not thread-safe: one Trio run.
    """

    config: AdaptiveThrottle
    enabled: bool = field(default=False, init=False)
    fill_rate: float = field(default=0.0, init=False)
    capacity: float = field(default=_MIN_CAPACITY, init=False)
    tat: float = field(default=0.0, init=False)  # theoretical arrival time of the next slot
    measured_rate: float = field(default=0.0, init=False)
    last_max_rate: float = field(default=0.0, init=False)
    last_throttle: float = field(default=0.0, init=False)
    _bucket_start: float | None = field(default=None, init=False, repr=False)
    _bucket_count: int = field(default=0, init=False, repr=False)
    _measured: bool = field(default=False, init=False, repr=False)
    _latest: float = field(default=-math.inf, init=False, repr=False)

    def _clock(self, now: float) -> float:
        now = max(now, self._latest)
        self._latest = now
        return now

    @property
    def burst(self) -> float:
        """Seconds of sending the bucket may run ahead of its rate (``capacity - 1`` slots)."""
        return (self.capacity - 1) / self.fill_rate

    def acquire(self, now: float, remaining: float | None = None) -> ThrottleVerdict:
        """Take a token for a call at ``now``; ``remaining``: seconds to its deadline.

        Returns the wait before the call may send (its slot is taken: a cancelled wait does
        not give it back, which errs on the side of sending less), or a rejection when the
        wait would exceed ``remaining`` or ``max_wait`` (then no slot is taken).
        """
        now = self._clock(now)
        if not self.enabled:
            return ThrottleVerdict(0.0)
        wait = max(0.0, self.tat - self.burst - now)
        limit = self.config.max_wait
        if (remaining is not None and wait > remaining) or (limit is not None and wait > limit):
            return ThrottleVerdict(wait, rejected=True, rate=self.fill_rate)
        self.tat = max(self.tat, now) + 1 / self.fill_rate
        return ThrottleVerdict(wait, rate=self.fill_rate)

    def _measure(self, now: float) -> None:
        bucket = math.floor(now / _BUCKET) * _BUCKET
        if self._bucket_start is None:
            self._bucket_start = bucket
        self._bucket_count += 1
        if bucket > self._bucket_start:
            current = self._bucket_count / (bucket - self._bucket_start)
            weight = self.config.smoothing if self._measured else 1.0
            self.measured_rate = current * weight + self.measured_rate * (1 - weight)
            self._measured = True
            self._bucket_count = 0
            self._bucket_start = bucket
        elif not self._measured:
            # No whole bucket yet (a throttle in the first half-second): the rate so far,
            # rather than zero, which would pin the controller at min_rate.
            self.measured_rate = self._bucket_count / _BUCKET

    def _window(self) -> float:
        """CUBIC's K: the seconds after a throttle at which the rate is back at ``W_max``."""
        config = self.config
        return float((self.last_max_rate * (1 - config.beta) / config.scale) ** (1 / 3))

    def observe(self, now: float, throttled: bool) -> None:
        """Feed back one response received at ``now``: ``throttled`` (see ``is_throttling``)
        or any other response. Transport failures are not fed back."""
        now = self._clock(now)
        self._measure(now)
        config = self.config
        if throttled and self.enabled and now - self.last_throttle < _BUCKET:
            # The same congestion event: requests sent before the last cut are still being
            # answered 429. Cutting again for each would compound beta per response; like
            # TCP (RFC 5681 §3.1, RFC 9438 §4.6), the rate is cut once per round trip, here
            # once per measurement bucket.
            return
        if throttled:
            rate = (
                self.measured_rate if not self.enabled else min(self.measured_rate, self.fill_rate)
            )
            rate = max(rate, config.min_rate)
            self.last_max_rate = rate
            self.last_throttle = now
            calculated = rate * config.beta
            starting = not self.enabled
            self.enabled = True
        elif not self.enabled:
            return  # nothing to recover from: the bucket stays off
        else:
            starting = False
            elapsed = now - self.last_throttle - self._window()
            calculated = config.scale * elapsed**3 + self.last_max_rate
        new_rate = min(calculated, 2 * self.measured_rate)
        if config.max_rate is not None:
            new_rate = min(new_rate, config.max_rate)
        self.fill_rate = max(new_rate, config.min_rate)
        self.capacity = max(new_rate, _MIN_CAPACITY)
        if starting:
            # The bucket starts empty (as the SDKs' does): the next slot is one interval away.
            self.tat = now + self.burst + 1 / self.fill_rate

    @property
    def rate(self) -> float | None:
        """The current sending rate (requests/s), or ``None`` while the bucket is off."""
        return self.fill_rate if self.enabled else None

    def __repr__(self) -> str:
        if not self.enabled:
            return "ThrottleState(off)"
        return (
            f"ThrottleState({self.fill_rate:.3g}/s, burst {self.capacity:.3g}, next slot "
            f"{self.tat - self.burst:.3f}, measured {self.measured_rate:.3g}/s)"
        )
