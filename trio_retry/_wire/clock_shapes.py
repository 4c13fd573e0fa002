"""The shapes the clock's bounds are written against (``clock.py``): what a bound can tell
to end a wait, the limits a timekeeper keeps, and what a bound reads of the timekeeper and its
lanes (``timekeeper.py`` imports ``clock.py``: the bounds know it by these shapes). Shapes
only: nothing here waits or picks a time."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .progress import AttemptProgress

__all__ = [
    "NO_LIMITS",
    "AttemptHolder",
    "DeadlineLaneLike",
    "Keeper",
    "LaneLike",
    "StageTarget",
    "Timeouts",
]


class StageTarget(Protocol):
    """What a lane can interrupt: told that the wait ``which`` of ``progress``'s attempt ran
    out, it ends that wait at once (unless what it waited for has arrived). It must not raise
    or block: the timekeeper's task calls it."""

    def stage_expired(self, which: str, progress: AttemptProgress) -> None: ...


class Timeouts(Protocol):
    """The limits a timekeeper keeps (``trio_retry.StageTimeouts`` is one)."""

    @property
    def connect(self) -> float | None: ...
    @property
    def tls(self) -> float | None: ...
    @property
    def write(self) -> float | None: ...
    @property
    def first_byte(self) -> float | None: ...
    @property
    def read(self) -> float | None: ...


class _NoLimits:
    """Limits of nothing: a connection made without a client's timekeeper waits unbounded."""

    __slots__ = ()
    connect = tls = write = first_byte = read = None


NO_LIMITS: Timeouts = _NoLimits()


class LaneLike(Protocol):
    """What a bound arms: one of a ``timekeeper.Timekeeper``'s lanes."""

    @property
    def limit(self) -> float: ...
    @property
    def pending(self) -> dict[Any, float]: ...
    @property
    def now(self) -> Callable[[], float]: ...


class DeadlineLaneLike(LaneLike, Protocol):
    """The timekeeper's lane of call deadlines (``timekeeper.DeadlineLane``)."""

    def arm_at(self, bound: Any, due: float) -> bool: ...


class Keeper(Protocol):
    """What the bounds read of the client's ``timekeeper.Timekeeper`` (which imports this
    module: the bounds know it by this shape). Its lanes are its attributes named as the
    waits (``write``, ``first_byte``, ``read``: ``None`` without a limit)."""

    @property
    def limits(self) -> Timeouts: ...
    @property
    def running(self) -> bool: ...
    @property
    def deadline(self) -> DeadlineLaneLike: ...


class AttemptHolder(Protocol):
    """What a call deadline on a lane ends: the connection an attempt holds."""

    def attempt_expired(self, progress: AttemptProgress) -> None: ...
