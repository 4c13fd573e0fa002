"""A task parked on one of our objects, with nothing of trio's held while it sleeps; trio's
private names for it in this one module, behind a probe.

``trio.lowlevel.wait_task_rescheduled(abort)`` parks the calling task through a coroutine of
trio's, which awaits a generator that yields the message ``WaitTaskRescheduled(abort)`` to
trio's run loop and keeps it in its frame until the task is woken: four GC-tracked objects
per parked task (the coroutine, the generator, the message and the message's ``__dict__``),
each visited by every full pass of the garbage collector. At 10,000 HTTP/2 calls at once,
9,000 are parked in the pool (a server allows 1,000 streams per connection) and the other
1,000 on their streams, and those four were a quarter of what a queued call held (issue #41).

A :class:`Parking` object is its own awaitable and its own abort function: ``await obj``
yields the message to trio itself (trio's loop reads the abort function from it and drops
it at once), and, woken, unwraps the ``outcome`` trio sends back exactly as trio's own trap
does (a ``Value`` is returned, an ``Error``, ``trio.Cancelled`` included, is raised). While
the task sleeps, nothing is held but the awaiting frame's reference to the object. It is
stateless: each ``await`` is one park, and it may be awaited again.

trio's private part is the message's class, ``trio._core._traps.WaitTaskRescheduled``
(trio's loop recognises it by its type), and the protocol around it (the object yielded,
an ``Outcome`` sent back), which trio has kept since its first releases. Should a release
move the class, :func:`probe` (run once, at import) finds it missing: :data:`USABLE` is then
False and ``await obj`` is trio's public ``wait_task_rescheduled(obj)``, the same behaviour
with four objects more per parked task.

Rejected: a small iterator object per park (one more object for as long as the task sleeps);
a message made once per object and kept (a cycle through the object, two objects for its
whole life instead of none).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, NoReturn, cast

import outcome
import trio

__all__ = ["USABLE", "Parking", "probe"]


def probe() -> Callable[[Any], object] | None:
    """trio's message class for a task that parks (``WaitTaskRescheduled``), if this trio
    has it where we expect it, else ``None`` (then parks go through trio's public call)."""
    try:
        from trio._core._traps import WaitTaskRescheduled
    except ImportError:
        return None
    try:
        message = WaitTaskRescheduled(probe)  # type: ignore[arg-type]
    except TypeError:
        return None
    if getattr(message, "abort_func", None) is not probe:
        return None
    return cast(Callable[[Any], object], WaitTaskRescheduled)


_MESSAGE = probe()
#: Parks yield trio's message themselves (else they go through ``wait_task_rescheduled``).
USABLE = _MESSAGE is not None


class Parking:
    """A mixin: ``await obj`` parks the current task until ``trio.lowlevel.reschedule`` wakes
    it, with ``obj`` (its ``__call__``, which subclasses define) as the park's abort
    function, as ``await trio.lowlevel.wait_task_rescheduled(obj)`` would; see the module
    docstring. Cancellation: as that park's (the abort function decides)."""

    __slots__ = ()

    def __call__(self, raise_cancel: object) -> trio.lowlevel.Abort:
        raise NotImplementedError  # (the subclass's abort function)

    def __await__(self) -> Generator[Any, Any, Any]:
        if _MESSAGE is None:
            return trio.lowlevel.wait_task_rescheduled(self).__await__()  # noqa: ASYNC105
        # Itself the iterator the awaiting frame delegates to: __next__, then send(). (Not
        # typing.cast: a call of its own, on every park.)
        return self  # type: ignore[return-value]

    def __next__(self) -> object:
        """The park: the message trio's loop reads the abort function from."""
        assert _MESSAGE is not None
        return _MESSAGE(self)

    def send(self, resumed: outcome.Outcome[Any]) -> NoReturn:
        """Woken: what the task was rescheduled with, returned or raised (as trio's trap)."""
        raise StopIteration(resumed.unwrap())
