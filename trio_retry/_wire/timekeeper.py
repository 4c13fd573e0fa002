"""The client's timekeeper: its lanes of armed waits, and the one task that expires them.

:class:`Timekeeper` is a client's limits (``clock.Timeouts``) and, for each kind of wait with
a limit, a :class:`Lane`: an insertion-ordered dict from a bound to its due time, in due order
since every wait of one kind has the same limit (call deadlines, which differ, have a
:class:`DeadlineLane` that refuses one out of order). Its task (:meth:`Timekeeper.run`, in
the client's nursery) sleeps until the earliest due entry of any lane and tells each bound
that fell due (``clock.Bound.expire``; a waiter of the pool, ``pool_ledger.Waiter.expire``).
Why lanes rather than a cancel scope per wait, and how each wait is bounded, is ``clock.py``'s
docstring: that module is the owner of time, this one the task it runs on (the only other
place a deadline is set: the task's own sleep).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

import trio

from . import clock
from .clock import Timeouts
from .timeout_words import Default

__all__ = ["MIN_SPAN", "DeadlineLane", "Lane", "Timekeeper"]


class _Expiring(Protocol):
    def expire(self) -> None: ...


class Lane:
    """The armed waits of one kind (one limit): ``bound -> due`` in due order."""

    __slots__ = ("limit", "now", "pending", "which")

    def __init__(self, which: str, limit: float) -> None:
        self.which = which
        self.limit = limit
        self.pending: dict[_Expiring, float] = {}
        #: The run's clock, read directly once the lanes run (:meth:`Timekeeper.start`).
        self.now: Callable[[], float] = trio.current_time

    def arm(self, bound: _Expiring) -> None:
        """``bound``'s wait starts now and is due ``limit`` seconds from now."""
        self.pending[bound] = self.now() + self.limit

    def disarm(self, bound: _Expiring) -> None:
        """The wait ended in time (or was abandoned); safe when not armed."""
        self.pending.pop(bound, None)

    def expire(self, now: float) -> float:
        """Fire what is due by ``now``; return when this lane next needs looking at."""
        pending = self.pending
        while pending:
            bound = next(iter(pending))
            due = pending[bound]
            if due > now:
                return due
            del pending[bound]
            bound.expire()
        return now + self.limit


#: The shortest interval at which the timekeeper's task looks at an empty deadline lane.
MIN_SPAN = 0.05


class DeadlineLane(Lane):
    """Call deadlines (absolute times, each call its own). Due times must not go backwards:
    :meth:`arm_at` refuses one earlier than the last armed (the bound then uses a scope), so
    the lane stays in due order. ``limit`` is the shortest span from arming to due seen so
    far (but not below :data:`MIN_SPAN`): an empty lane needs looking at no earlier than
    ``now + limit``; a span shorter than that wakes the timekeeper's task early (once per new
    shortest span, and for every span below :data:`MIN_SPAN`)."""

    __slots__ = ("last_due", "timekeeper")

    def __init__(self, timekeeper: Timekeeper) -> None:
        super().__init__("deadline", math.inf)
        self.timekeeper = timekeeper
        self.last_due = -math.inf

    def arm_at(self, bound: _Expiring, due: float) -> bool:
        """Arm ``bound`` to expire at ``due``; False (nothing armed) if that would put the
        lane out of order."""
        if due < self.last_due:
            return False
        self.pending[bound] = self.last_due = due
        span = due - self.now()
        if span < self.limit:
            self.timekeeper.wake_by(due)
            # A shorter span than any before shortens how often an empty lane is looked at,
            # but never below MIN_SPAN: one call with a tiny (or past) deadline must not make
            # the task wake hundreds of times a second for the client's life. A span below it
            # wakes the task itself, as here.
            if span > MIN_SPAN:
                self.limit = span
        return True


class Timekeeper:
    """One client's limits (:class:`Timeouts`), its lanes (``None`` where a wait kind has no
    limit) and the task that expires them (:meth:`run`, in the client's nursery)."""

    __slots__ = (
        "_sleep",
        "connect",
        "dark",
        "deadline",
        "first_byte",
        "head_yields",
        "limits",
        "now",
        "pool",
        "read",
        "running",
        "tls",
        "write",
    )

    def __init__(self, limits: Timeouts, pool: float | None = None) -> None:
        self.limits = limits
        #: ``first_byte`` is ``Client()``'s default: a call with a deadline waits for its
        #: response head within that deadline instead (the module docstring).
        self.head_yields = isinstance(limits.first_byte, Default)
        #: An opening's waits (``transport.py``), on a lane when the opening has a scope of
        #: its own to cancel (``clock.opening``).
        self.connect = Lane("connect", limits.connect) if limits.connect is not None else None
        self.tls = Lane("tls", limits.tls) if limits.tls is not None else None
        self.write = Lane("write", limits.write) if limits.write is not None else None
        self.first_byte = (
            Lane("first_byte", limits.first_byte) if limits.first_byte is not None else None
        )
        self.read = Lane("read", limits.read) if limits.read is not None else None
        self.deadline = DeadlineLane(self)
        #: The pool's waits for a connection, ``pool_timeout`` (``Client(pool_timeout=)``):
        #: each parked waiter of the pool is an entry (``pool.py``), woken when it falls due.
        self.pool = Lane("pool", pool) if pool is not None else None
        #: The dark-connection watch's lanes (``contract.DarkWatch``), from ``clock.FIXED``.
        self.dark = (
            Lane("read_idle", clock.FIXED.read_idle),
            Lane("read_idle_ping", clock.FIXED.read_idle_ping),
        )
        #: The run's clock (``trio.current_time`` until :meth:`start` reads it directly): one
        #: function for the client's connections to read it with, none of their own.
        self.now: Callable[[], float] = trio.current_time
        #: True while :meth:`run` runs: only then are the lanes used.
        self.running = False
        self._sleep: trio.CancelScope | None = None  # the task's current sleep

    @property
    def lanes(self) -> tuple[Lane, ...]:
        stages = (self.connect, self.tls, self.write, self.first_byte, self.read, self.pool)
        return (*(lane for lane in stages if lane), self.deadline, *self.dark)

    def wake_by(self, due: float) -> None:
        """Make sure the task looks at the lanes no later than ``due``."""
        sleep = self._sleep
        if sleep is not None and sleep.deadline > due:
            sleep.deadline = due

    def start(self, nursery: trio.Nursery) -> None:
        """Run the lanes in ``nursery`` from now on (they are used at once: the task's first
        look at the lanes comes before anything armed now can fall due)."""
        now = self.now = trio.lowlevel.current_clock().current_time
        for lane in self.lanes:
            lane.now = now
        self.running = True
        nursery.start_soon(self.run)

    async def run(self) -> None:
        """Expire waits as they fall due, until cancelled (the client closing).

        When it ends, :attr:`running` is False again and every wait still armed stays
        unexpired: the client is closing, and closing ends those waits anyway."""
        lanes = self.lanes
        self.running = True
        try:
            while True:
                now = trio.current_time()
                wake = math.inf
                for lane in lanes:
                    due = lane.expire(now)
                    if due < wake:
                        wake = due
                with trio.CancelScope(deadline=wake) as self._sleep:
                    await trio.sleep_forever()
        finally:
            self._sleep = None
            self.running = False
