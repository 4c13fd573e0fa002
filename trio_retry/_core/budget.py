"""The per-upstream retry budget (Finagle's model), with time passed in.

Every first attempt deposits ``ratio`` of a token; every retry withdraws one. A retry is allowed
while the retries withdrawn in the last ``window`` seconds number fewer than
``ratio * (first attempts in the last window) + min_per_second * window``. Deposits and
withdrawals both expire after ``window``.

Why a budget and not only ``max_attempts``: under an outage every call fails, so a per-call
limit of 3 attempts multiplies the load on the sick upstream by 3. A budget caps *extra* load at
``ratio`` of real traffic (plus a small floor so that low-traffic clients can still retry), so
retries stop amplifying an outage.

Bound: over a history of span ``T`` seconds, retries <= ``ratio * first attempts +
min_per_second * (T + window)``, plus at most one per window for rounding (``fewer than`` a
fractional allowance admits its ceiling).

Both timelines are kept exactly (one timestamp per event, expired lazily from the left), so the
bound holds to the letter; memory is proportional to the events in one window, and each call is
amortised O(1).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .checks import check_number

__all__ = ["RetryBudget"]


@dataclass(eq=False)
class RetryBudget:
    """A sliding-window retry budget; every method takes ``now`` (monotonic seconds).

    Not thread-safe; meant for one Trio run. ``now`` must not go backwards between calls
    (a smaller value is treated as the latest one seen).
    """

    ratio: float = 0.2
    min_per_second: float = 10.0
    window: float = 10.0
    _deposits: deque[float] = field(default_factory=deque, init=False, repr=False)
    _withdrawals: deque[float] = field(default_factory=deque, init=False, repr=False)
    _latest: float = field(default=float("-inf"), init=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("ratio", "min_per_second", "window"):
            check_number(getattr(self, name), f"RetryBudget.{name}", "a number")
        if not (self.ratio >= 0 and self.min_per_second >= 0 and self.window > 0):  # NaN too
            raise ValueError(
                "RetryBudget needs ratio >= 0, min_per_second >= 0 and window > 0; got "
                f"ratio={self.ratio!r}, min_per_second={self.min_per_second!r}, "
                f"window={self.window!r}"
            )

    def fresh(self) -> RetryBudget:
        """A new, empty budget with the same settings (one per origin)."""
        return RetryBudget(self.ratio, self.min_per_second, self.window)

    def _expire(self, now: float) -> float:
        now = max(now, self._latest)
        self._latest = now
        horizon = now - self.window
        deposits, withdrawals = self._deposits, self._withdrawals
        while deposits and deposits[0] <= horizon:
            deposits.popleft()
        while withdrawals and withdrawals[0] <= horizon:
            withdrawals.popleft()
        return now

    def deposit(self, now: float) -> None:
        """Record a first attempt at ``now``."""
        # (once per call: :meth:`_expire`'s work, inlined, and only when the oldest entry is
        # past the window)
        latest = self._latest
        if now > latest:
            self._latest = latest = now
        deposits = self._deposits
        deposits.append(latest)
        if deposits[0] <= latest - self.window:
            self._expire(latest)

    def allowance(self, now: float) -> float:
        """How many retries the last window may hold: ``ratio * deposits + floor``."""
        self._expire(now)
        return self.ratio * len(self._deposits) + self.min_per_second * self.window

    def available(self, now: float) -> bool:
        """True when a retry at ``now`` would be within the budget."""
        allowance = self.allowance(now)  # expires old entries first
        return len(self._withdrawals) < allowance

    def try_withdraw(self, now: float) -> bool:
        """Withdraw one token for a retry at ``now`` if available; say whether it was."""
        if not self.available(now):
            return False
        self._withdrawals.append(self._latest)
        return True

    def __repr__(self) -> str:
        return (
            f"RetryBudget(ratio={self.ratio}, min_per_second={self.min_per_second}, "
            f"window={self.window}; {len(self._withdrawals)} retries / "
            f"{len(self._deposits)} first attempts in window)"
        )
