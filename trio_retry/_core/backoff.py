"""Backoff delays and ``Retry-After`` parsing — randomness and "now" are arguments.

``Backoff.delay(n, rng, previous)`` computes the wait before retry ``n`` (1 for the first retry):

- ``"none"``: ``min(max, initial * multiplier ** (n - 1))``
- ``"full"``: ``uniform(0, that)`` (AWS "full jitter": spreads a thundering herd evenly)
- ``"decorrelated"``: ``min(max, uniform(initial, previous * 3))``, the first ``previous`` being
  ``initial`` (each delay depends on the last one, not on ``n``)

``parse_retry_after(value, now)`` reads RFC 9110 §10.2.3: delta-seconds or an HTTP-date
(IMF-fixdate, the obsolete RFC 850 form and asctime). Garbage is ignored (``None``, as if the
header were absent); a date in the past is ``0.0``. It never raises, whatever the text.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal, Protocol

from .checks import check_number

__all__ = ["Backoff", "Jitter", "RandomSource", "parse_retry_after"]

Jitter = Literal["full", "decorrelated", "none"]
_JITTERS = ("full", "decorrelated", "none")


class RandomSource(Protocol):
    """What backoff needs of a random number generator (``random.Random`` fits)."""

    def uniform(self, a: float, b: float) -> float: ...


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with a choice of jitter; see the module docstring for the formulas."""

    initial: float = 0.1
    max: float = 10.0
    multiplier: float = 2.0
    jitter: Jitter = "full"

    def __post_init__(self) -> None:
        for name in ("initial", "max", "multiplier"):
            check_number(getattr(self, name), f"Backoff.{name}", "a number")
        if self.jitter not in _JITTERS:
            raise ValueError(f"Backoff jitter must be one of {_JITTERS}, got {self.jitter!r}")
        if not (self.initial >= 0 and self.max >= 0 and self.multiplier >= 1):
            raise ValueError(
                "Backoff needs initial >= 0, max >= 0 and multiplier >= 1; got "
                f"initial={self.initial!r}, max={self.max!r}, multiplier={self.multiplier!r}"
            )

    def ceiling(self, n: int) -> float:
        """The un-jittered delay before retry ``n``: ``min(max, initial * multiplier**(n-1))``."""
        if n < 1:
            raise ValueError(f"retry number must be >= 1, got {n}")
        try:
            grown = self.initial * self.multiplier ** (n - 1)
        except OverflowError:
            grown = math.inf
        return min(self.max, grown)

    def delay(self, n: int, rng: RandomSource, previous: float | None = None) -> float:
        """The delay before retry ``n`` (1-based), in ``[0, max]``.

        ``previous`` is the last delay returned (decorrelated jitter only; ``None`` on the first
        retry). ``rng`` is the only source of randomness.
        """
        if self.jitter == "none":
            return self.ceiling(n)
        if self.jitter == "full":
            return min(self.max, rng.uniform(0.0, self.ceiling(n)))
        base = self.initial if previous is None else previous
        upper = max(self.initial, base * 3)
        return min(self.max, rng.uniform(self.initial, upper))


# --- Retry-After -----------------------------------------------------------------------------

#: Larger delta-seconds values are clamped here: still far beyond any sane backoff maximum, but
#: finite, so arithmetic on it stays ordinary.
MAX_RETRY_AFTER = 1e9

_MONTHS = {
    name: index
    for index, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1
    )
}
# Patterns, not compiled ones: re compiles each on its first use (and keeps it in its cache),
# so a program that never sees a Retry-After date does not pay ~1 ms at start-up for them.
_TIME = r"(\d{2}):(\d{2}):(\d{2})"
# IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
_IMF = r"[A-Za-z]{3}, (\d{2}) ([A-Za-z]{3}) (\d{4}) " + _TIME + r" GMT"
# RFC 850: Sunday, 06-Nov-94 08:49:37 GMT
_RFC850 = r"[A-Za-z]{6,9}, (\d{2})-([A-Za-z]{3})-(\d{2}) " + _TIME + r" GMT"
# asctime: Sun Nov  6 08:49:37 1994
_ASCTIME = r"[A-Za-z]{3} ([A-Za-z]{3}) ([ \d]\d) " + _TIME + r" (\d{4})"


def _timestamp(year: int, month_name: str, day: int, hh: str, mm: str, ss: str) -> float | None:
    month = _MONTHS.get(month_name.lower())
    if month is None:
        return None
    hour, minute, second = int(hh), int(mm), int(ss)
    if not (1 <= year <= 9999 and hour <= 23 and minute <= 59 and second <= 60):
        return None
    import calendar  # here: only a Retry-After date needs it (it imports datetime too)

    if not 1 <= day <= calendar.monthrange(year, month)[1]:
        return None
    try:
        return float(calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0)))
    except (ValueError, OverflowError):
        return None


def _parse_http_date(text: str, now: float) -> float | None:
    if m := re.fullmatch(_IMF, text):
        day, mon, year, hh, mm, ss = m.groups()
        return _timestamp(int(year), mon, int(day), hh, mm, ss)
    if m := re.fullmatch(_RFC850, text):
        day, mon, yy, hh, mm, ss = m.groups()
        # RFC 9110: a two-digit year more than 50 years in the future is in the past century.
        current_year = int(1970 + now // 31_556_952)
        year = 2000 + int(yy)
        while year > current_year + 50:
            year -= 100
        return _timestamp(year, mon, int(day), hh, mm, ss)
    if m := re.fullmatch(_ASCTIME, text):
        mon, day, hh, mm, ss, year = m.groups()
        return _timestamp(int(year), mon, int(day), hh, mm, ss)
    return None


def parse_retry_after(value: str | bytes | None, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` value, or ``None`` when absent or unparseable.

    ``now`` is the current wall-clock time as a Unix timestamp (needed only for HTTP-dates).
    Guarantees: never raises; the result is ``None`` or a finite float ``>= 0``.
    """
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    text = value.strip()
    if not text:
        return None
    if text.isascii() and text.isdigit():
        if len(text) > 10:
            return MAX_RETRY_AFTER
        return min(float(int(text)), MAX_RETRY_AFTER)
    when = _parse_http_date(text, now)
    if when is None or not math.isfinite(now):
        return None
    return min(max(0.0, when - now), MAX_RETRY_AFTER)
