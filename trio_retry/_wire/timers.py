"""Stage timeouts without a cancel scope per stage: one clock task per client.

A :class:`~trio_retry.StageTimeouts` limit (``write``, ``first_byte``, ``read``) is the same
for every request of a client, so the stages armed on one :class:`Lane` fall due in the order
they were armed. A lane is an insertion-ordered dict from what is waiting (an HTTP/1.1
connection) to its due time: arming and disarming are one dict operation each, with no clock
of its own beyond the one read that dates the stage, and no wake-up of anyone.

One task per client (:meth:`StageTimers.run`, in the client's background nursery) sleeps
until the earliest due time of any lane's oldest entry; a lane with nothing armed cannot have
anything fall due before ``now + limit`` (whatever is armed later is due later still), so the
task never has to be woken early, whatever arms or disarms. When an entry falls due the task
calls its :meth:`Expirable.stage_expired`: an HTTP/1.1 connection then marks the stage as timed
out and closes its socket, which ends the wait of the request on it at once
(``trio.lowlevel.notify_closing``); the wire reports that as the stage's ``TIMEOUT`` with the
evidence of the stage reached, exactly as a cancel scope's expiry would be reported.

The cost of a scope (``trio.move_on_after`` on every request, for the default 30 s
first-byte limit) was the largest single item of a small request's bookkeeping; arming a lane
costs a clock read and a dict store.

Before the client is entered (no background nursery) the lanes are not running, and the wire
falls back to a cancel scope per stage (:func:`~.progress.stage_timeout`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

import trio

__all__ = ["DeadlineLane", "Expirable", "Lane", "StageTimers"]


class Expirable(Protocol):
    """What a lane can time out: told which stage ran out; must not raise or block."""

    def stage_expired(self, which: str, limit: float) -> None: ...


class Lane:
    """The armed stages of one kind (one limit): ``target -> due`` in due order."""

    __slots__ = ("limit", "now", "pending", "which")

    def __init__(self, which: str, limit: float) -> None:
        self.which = which
        self.limit = limit
        self.pending: dict[Expirable, float] = {}
        #: The run's clock, read directly once the lanes run (:meth:`StageTimers.start`).
        self.now: Callable[[], float] = trio.current_time

    def arm(self, target: Expirable) -> None:
        """``target``'s stage starts now and is due ``limit`` seconds from now."""
        self.pending[target] = self.now() + self.limit

    def disarm(self, target: Expirable) -> None:
        """The stage ended in time (or was abandoned); safe when not armed."""
        self.pending.pop(target, None)

    def expire(self, now: float) -> float:
        """Fire what is due by ``now``; return when this lane next needs looking at."""
        pending = self.pending
        while pending:
            target = next(iter(pending))
            due = pending[target]
            if due > now:
                return due
            del pending[target]
            target.stage_expired(self.which, self.limit)
        return now + self.limit


class DeadlineLane(Lane):
    """Call deadlines (absolute times, each call its own) of attempts that need no cancel
    scope: an attempt on a pooled connection ready at once, which only ever waits on that
    connection. When the deadline passes the connection ends that attempt's waits as
    promptly as a scope would (``attempt_expired``): an HTTP/1.1 connection, which the attempt
    holds alone, closes; an HTTP/2 connection fails the attempt's stream (reset) and wakes it
    from a wait for a stream slot, the idle health check or its frames' write, and goes on
    with its other streams. The attempt then reports the deadline: ``_call/attempt.py``.

    Due times must not go backwards: :meth:`arm_at` refuses one earlier than the last armed
    (the caller uses a cancel scope instead), so the lane stays in due order. ``limit`` is the
    shortest span from arming to due seen so far: an empty lane needs looking at no earlier
    than ``now + limit``. A span shorter than any before wakes the clock task early (once per
    new shortest span, not per call).
    """

    __slots__ = ("last_due", "timers")

    def __init__(self, timers: StageTimers) -> None:
        super().__init__("deadline", math.inf)
        self.timers = timers
        self.last_due = -math.inf

    def arm_at(self, target: Expirable, due: float) -> bool:
        """Arm ``target`` to expire at ``due``; False (nothing armed) if that would put the
        lane out of order."""
        if due < self.last_due:
            return False
        self.pending[target] = self.last_due = due
        span = due - self.now()
        if span < self.limit:
            self.limit = span
            self.timers.wake_by(due)
        return True


class StageTimers:
    """The client's stage lanes (``None`` where that stage has no limit) and their task."""

    __slots__ = ("_sleep", "deadline", "first_byte", "read", "running", "write")

    def __init__(self, write: float | None, first_byte: float | None, read: float | None) -> None:
        self.write = Lane("write", write) if write is not None else None
        self.first_byte = Lane("first_byte", first_byte) if first_byte is not None else None
        self.read = Lane("read", read) if read is not None else None
        self.deadline = DeadlineLane(self)
        #: True while :meth:`run` runs: only then may the wire rely on the lanes.
        self.running = False
        self._sleep: trio.CancelScope | None = None  # the task's current sleep

    @property
    def lanes(self) -> tuple[Lane, ...]:
        stages = (self.write, self.first_byte, self.read)
        return (*(lane for lane in stages if lane), self.deadline)

    def wake_by(self, due: float) -> None:
        """Make sure the task looks at the lanes no later than ``due``."""
        sleep = self._sleep
        if sleep is not None and sleep.deadline > due:
            sleep.deadline = due

    def start(self, nursery: trio.Nursery) -> None:
        """Run the lanes in ``nursery`` from now on (the wire uses them at once: the task's
        first look at the lanes comes before anything armed now can fall due)."""
        now = trio.lowlevel.current_clock().current_time
        for lane in self.lanes:
            lane.now = now
        self.running = True
        nursery.start_soon(self.run)

    async def run(self) -> None:
        """Expire stages as they fall due, until cancelled (the client closing).

        When it ends (cancelled), :attr:`running` is False again and every stage still armed
        stays unexpired: the client is closing, and closing ends those requests anyway.
        """
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
