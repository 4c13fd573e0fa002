"""The one owner of time: every wait of an attempt is bounded here, and only here.

A wait of the wire layer (connect, TLS, the HTTP/2 handshake, a write, the response head, a
read of the body) and the call deadline around a whole attempt are each kept by one
:class:`Bound`, used as ``with bound: await <one thing>``. The bound decides, in one place
(:meth:`Bound.__enter__`), how the limit is kept:

- on a **lane** of the client's :class:`Clock` while its task runs: arming and disarming are
  a dict store and a dict pop, with no cancel scope per wait. When an entry falls due the
  clock's task tells the bound, which asks its target to end the wait at once
  (:meth:`StageTarget.stage_expired`: an HTTP/1.1 connection closes its socket, an HTTP/2
  stream fails, an HTTP/2 connection ends one attempt's waits);
- in a **cancel scope** otherwise (no client around the connection, the clock not running, a
  one-off wait such as connect or TLS, or a call deadline that would put the deadline lane
  out of order).

Either way the bound is what reports the expiry: :meth:`Bound.__exit__` turns whatever the
interrupted wait raised (the closed socket's error, the stream's failure, the scope's
``Cancelled``) into the stage's ``TIMEOUT`` with the evidence of the stage reached
(:func:`timed_out`). What arrived before the expiry wins: a wait that completed is not turned
into an error. Outer cancellation is never converted.

**Idle bounds.** ``write`` and ``read`` bound each single write or read, never a whole
transfer: a long healthy download or upload is never cut (an HTTP/1.1 write is at most 256 KiB;
an HTTP/2 write is a wait for queued frames or for flow-control window). A write's limit counts
from its last progress, not from its start (:meth:`Bound.renew`, called by the socket stream
each time the kernel took more of a write that had to wait): ``write`` is how long the server
may read nothing, whatever the size of one write or the speed of the link. ``first_byte`` bounds
the wait for the response head (a request small enough to be written or queued whole counts
from its write), ``connect`` and ``tls`` the connection's set-up. ``Client()``'s defaults
(:data:`DEFAULT_LIMITS`, this module's table; ``_call/config.py`` builds
``DEFAULT_STAGE_TIMEOUTS`` from it) are chosen so that nothing waits forever;
``StageTimeouts()`` (all ``None``) is the explicit way out. The few limits no client configures
(the idle check's PING, the QUIC handshake's fallback, the dark-connection watch's silence and
PING) are this module's table too (:data:`FIXED`), read from here and written nowhere else; the
watch (``contract.DarkWatch``) rides two lanes of every clock (:attr:`Clock.dark`), armed by a
connection's reader while it waits for bytes.

**The call deadline and the head.** A call with a ``deadline=`` (its own or the client's)
waits for its response head as long as that deadline allows, not ``first_byte``, when
``first_byte`` is ``Client()``'s default (a :class:`Default`, told apart from the same number
given explicitly): the caller who said "60 s" for the call meant it, and a healthy endpoint
that answers in 35 s must not be cut at 30 s and sent again (issue #38). An explicit
``first_byte`` stays. The attempt says so on its progress (``deadline_bounds_head``, set from
:attr:`Clock.head_yields`), and every protocol's wait for the head asks :func:`limit_of` with
that progress. Rejected: the first-byte limit raised to the remaining deadline per attempt
(the same wait, and a lane entry per call with a limit of its own, which the lanes' one limit
per kind does not allow).

**Messages.** A timeout names the bound that fired as the caller sets it, with its value:
``no response head within first_byte=30 s``, ``the call's deadline=60 s expired during
AWAITING_RESPONSE`` (:func:`timeout_message`, :func:`deadline_message`); a default's says it
is one, and how to change it.

Two waits are kept outside a bound of this module. The pool's wait for a connection
(``pool_timeout``, ``pool.py``; its default is in this module's table) is a cancel scope of
the pool's own, which its bookkeeping also cancels to hand a waiter its connection. And, at
this clock's limit, the HTTP/2 connection's writer task (``http2/writer.py``) gives its
connection up when one ``send_all`` makes no progress for the ``write`` limit. It is the
connection's own task, not an attempt's wait, and keeps the limit with one cancel scope
re-armed per write and per progress (a lane entry would need an attempt to interrupt and a
progress to report on). Likewise the HTTP/3 connection's
driver task (``http3/driver.py``) waits for datagrams until QUIC's own timer, in a scope whose
deadline is that timer: QUIC's loss detection, its handshake retransmissions and its idle
timeout are the state machine's, and an attempt's waits on an HTTP/3 stream are bounded here as
any other. While the handshake goes on, that deadline is also the handshake's limit
(``min(tls, 3 s)`` from the driver's start, after which the requests waiting on it go over TCP
while it goes on in the background): it is the connection's, not one attempt's, so every
request waiting on the handshake, early data or not, and whenever it joined, is bounded by the
same instant. A connection's last words as it closes (QUIC's CONNECTION_CLOSE, HTTP/2's
GOAWAY after the acknowledgements it owes) are bounded by :func:`closing`: shielded, since the
client's exit may be cancelling the task that says them, and short (``FIXED.closing``), since
they must not hold that exit up (an HTTP/2 write under way when its connection closes is cut
at the same bound: ``http2/writer.py``).

Why lanes and not a scope per wait (the obvious way): entering and leaving a
``trio.CancelScope`` per wait was the largest single item of a small request's bookkeeping.
The limits of one kind are the same for every wait of a client, so the waits armed on one
lane fall due in the order they were armed: a lane is an insertion-ordered dict from bound to
due time, and the clock's task sleeps until the earliest oldest entry of any lane. A lane with
nothing armed cannot have anything fall due before ``now + limit``, so the task never has to
be woken early, whatever arms or disarms. Call deadlines differ per call: the deadline lane
accepts one only when it does not fall due before the last one armed (:meth:`DeadlineLane.
arm_at`), and the bound falls back to a scope otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

import trio

from .._core.evidence import FailureCategory
from .progress import AttemptProgress, WireError

__all__ = [
    "DEFAULT_LIMITS",
    "FIXED",
    "NO_LIMITS",
    "Bound",
    "Clock",
    "DeadlineBound",
    "DeadlineLane",
    "Default",
    "FixedLimits",
    "Lane",
    "StageTarget",
    "Timeouts",
    "closing",
    "deadline_message",
    "limit_of",
    "seconds",
    "timed_out",
    "timeout_message",
]


class Default(float):
    """A limit ``Client()`` chose, told apart (``isinstance``) from the same number given
    explicitly; a plain ``float`` in every other respect (``dataclasses.replace`` keeps it)."""

    __slots__ = ()


#: ``Client()``'s limits, by the name the caller sets each with (``StageTimeouts`` fields, and
#: ``pool`` for ``Client(pool_timeout=...)``). Why these values: httpx's 5 s per phase fails an
#: API that thinks for 10 s; aiohttp's 300 s total and Go's and curl's no read limit at all
#: let a stalled body hang for minutes; nginx gives its upstreams 60 s
#: (``proxy_read_timeout``). 30 s of silence is long for a healthy server and short for a
#: caller; 10 s to connect is long for any reachable host.
#:
#: ``pool``, the wait for a connection of the client's own pool (``pool.py``), is 5 s, httpx's:
#: a wait that long means every connection is held, by calls the client's other bounds end
#: within 30 s of silence, or by the caller itself (a body left unread in a ``stream()``
#: block, which nothing else would ever end). A ``PoolTimeout`` is ``NOT_SENT`` and retried
#: like one (SPEC §6), so a call queues about 15 s in all before it fails, a burst's fair
#: share; a call that waits for its own open stream learns it in 15 s, not never. Longer (30 s,
#: as the other waits) would make that mistake cost 90 s for no gain: a healthy queue that
#: long is an overload the caller should see. Within the call deadline, like every wait.
DEFAULT_LIMITS: dict[str, Default] = {
    "connect": Default(10.0),
    "tls": Default(10.0),
    "write": Default(30.0),
    "first_byte": Default(30.0),
    "read": Default(30.0),
    "pool": Default(5.0),
}


@dataclass(frozen=True, slots=True)
class FixedLimits:
    """The limits no client configures (a client's own are its :class:`Timeouts`): each the
    same for every connection, written here once and read from :data:`FIXED`."""

    #: A multiplexed connection (HTTP/2, HTTP/3) that received nothing for this long is PINGed
    #: before it takes a new stream (``contract.IdlePing``) ...
    ping_after_idle: float = 2.0
    #: ... and closed if the answer takes longer than this: the request then goes on a fresh
    #: connection, uncounted, instead of timing out ambiguously on a peer that is gone.
    ping_timeout: float = 1.0
    #: The most a QUIC handshake may take before the attempt goes over TCP instead, when the
    #: ``tls`` limit is longer (or unset): UDP that is blocked drops silently, and a caller
    #: should not wait the whole TLS limit to find out. (The handshake itself goes on in the
    #: background, and its connection is used once it completes: ``_call/connect.py``.)
    quic_handshake: float = 3.0
    #: How long a connection's last words as it closes (QUIC's CONNECTION_CLOSE, HTTP/2's
    #: GOAWAY) may hold up its task's end, at most, when the socket cannot take them at once
    #: (:func:`closing`): a client's exit is never held up for long by a full socket.
    closing: float = 0.25
    #: A multiplexed connection with a request waiting (none of our bytes waiting to be written:
    #: the write bound's case) that received nothing for this long takes no new stream and is
    #: PINGed (``contract.DarkWatch``, Go's ``ReadIdleTimeout``) ...
    read_idle: float = 5.0
    #: ... and is closed if still nothing arrives within this long after (``PingTimeout``):
    #: long for a peer that is there, short beside the ``first_byte`` each request would wait.
    read_idle_ping: float = 5.0


#: The table of fixed limits.
FIXED = FixedLimits()

#: What each bounded wait is called in a timeout's message, ``{}`` where the bound (named as
#: the caller sets it) and its value go.
_WORDS = {
    "connect": "connecting took longer than connect={}",  # (DNS, TCP, the proxy)
    "tls": "the TLS handshake took longer than tls={}",
    # (its limit is tls=, or connect= for h2c: the bound that fired is named)
    "handshake": "the server sent no HTTP/2 SETTINGS within tls={}",
    "handshake_h2c": "the server sent no HTTP/2 SETTINGS within connect={}",
    # (a write: at most 256 KiB over HTTP/1.1, the frames queued since the last over HTTP/2;
    # its limit counts from its last progress: the server read nothing for that long)
    "write": "the server read none of the request within write={}",
    "first_byte": "no response head within first_byte={}",
    "read": "no body data within read={}",
    "ping": "the idle connection did not answer a PING within {}",
    # (the QUIC handshake's limit: min(tls, FIXED.quic_handshake); the attempt goes over TCP)
    "quic": "no answer within {} (the handshake's limit: the least of tls= and 3 s)",
    "pool": "no connection became free within pool_timeout={}",
}

#: The field whose default each wait's limit is, where that is not its own name.
_FIELD = {"handshake": "tls", "handshake_h2c": "connect"}
#: How a default's message says what changes it, where ``StageTimeouts`` does not. The
#: ``first_byte`` default fires only on a call without a deadline (a deadline lifts it).
_HINTS = {
    "first_byte": " (Client()'s default: a call with a deadline= waits for the head as long as "
    "its deadline allows; stage_timeouts=StageTimeouts(first_byte=...) sets it)",
    "pool": " (Client()'s default; Client(pool_timeout=...) sets it)",
}


def closing() -> trio.CancelScope:
    """The scope of a connection's last words as it closes: shielded from the cancellation
    that may be ending its task (the client's exit), and ended after ``FIXED.closing`` s.
    What it does not send by then is not sent."""
    return trio.CancelScope(shield=True, deadline=trio.current_time() + FIXED.closing)


def seconds(value: float) -> str:
    """``value`` seconds as a message shows them: ``30 s``, ``0.25 s``."""
    return f"{value:g} s"


def limit_of(
    clock: Clock | None, which: str, progress: AttemptProgress | None = None
) -> float | None:
    """The limit of wait ``which`` on ``clock`` (none without a clock); for ``first_byte``,
    none when ``progress``'s call deadline bounds the head instead (the module docstring)."""
    if progress is not None and progress.deadline_bounds_head and which == "first_byte":
        return None
    limits: Timeouts = clock.limits if clock is not None else NO_LIMITS
    return getattr(limits, which)  # type: ignore[no-any-return]


def timeout_message(which: str, limit: float | None, about: str = "") -> str:
    """The words of a timeout of wait ``which``, the same for every protocol: the bound that
    fired, named as the caller sets it, and its value (for ``Client()``'s default, how to
    change it); ``about`` names what was waited for (a peer), when the words do not."""
    text = _WORDS[which].format(seconds(limit) if limit is not None else "no limit")
    if isinstance(limit, Default):
        field = _FIELD.get(which, which)
        text += _HINTS.get(
            field, f" (Client()'s default; stage_timeouts=StageTimeouts({field}=...) sets it)"
        )
    return text + (f": {about}" if about else "")


def deadline_message(limit: float, stage: object) -> str:
    """The words of a call deadline of ``limit`` seconds that ran out at ``stage``."""
    return f"the call's deadline={seconds(limit)} expired during {stage}"


def timed_out(
    progress: AttemptProgress, which: str, limit: float | None, about: str = ""
) -> WireError:
    """The failure of a bounded wait that ran out: ``TIMEOUT``, with the evidence of the
    stage ``progress`` reached (a connect or TLS timeout is ``NOT_SENT`` by its stage)."""
    return WireError.at(progress, FailureCategory.TIMEOUT, timeout_message(which, limit, about))


class StageTarget(Protocol):
    """What a lane can interrupt: told that the wait ``which`` of ``progress``'s attempt ran
    out, it ends that wait at once (unless what it waited for has arrived). It must not raise
    or block: the clock's task calls it."""

    def stage_expired(self, which: str, progress: AttemptProgress) -> None: ...


class Timeouts(Protocol):
    """The limits a :class:`Clock` keeps (``trio_retry.StageTimeouts`` is one)."""

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
    """Limits of nothing: a connection made without a client's clock waits unbounded."""

    __slots__ = ()
    connect = tls = write = first_byte = read = None


NO_LIMITS: Timeouts = _NoLimits()


class _Expiring(Protocol):
    def expire(self) -> None: ...


class Lane:
    """The armed waits of one kind (one limit): ``bound -> due`` in due order."""

    __slots__ = ("limit", "now", "pending", "which")

    def __init__(self, which: str, limit: float) -> None:
        self.which = which
        self.limit = limit
        self.pending: dict[_Expiring, float] = {}
        #: The run's clock, read directly once the lanes run (:meth:`Clock.start`).
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


#: The shortest interval at which the clock's task looks at an empty deadline lane.
MIN_SPAN = 0.05


class DeadlineLane(Lane):
    """Call deadlines (absolute times, each call its own). Due times must not go backwards:
    :meth:`arm_at` refuses one earlier than the last armed (the bound then uses a scope), so
    the lane stays in due order. ``limit`` is the shortest span from arming to due seen so
    far (but not below :data:`MIN_SPAN`): an empty lane needs looking at no earlier than
    ``now + limit``; a span shorter than that wakes the clock's task early (once per new
    shortest span, and for every span below :data:`MIN_SPAN`)."""

    __slots__ = ("clock", "last_due")

    def __init__(self, clock: Clock) -> None:
        super().__init__("deadline", math.inf)
        self.clock = clock
        self.last_due = -math.inf

    def arm_at(self, bound: _Expiring, due: float) -> bool:
        """Arm ``bound`` to expire at ``due``; False (nothing armed) if that would put the
        lane out of order."""
        if due < self.last_due:
            return False
        self.pending[bound] = self.last_due = due
        span = due - self.now()
        if span < self.limit:
            self.clock.wake_by(due)
            # A shorter span than any before shortens how often an empty lane is looked at,
            # but never below MIN_SPAN: one call with a tiny (or past) deadline must not make
            # the task wake hundreds of times a second for the client's life. A span below it
            # wakes the task itself, as here.
            if span > MIN_SPAN:
                self.limit = span
        return True


class Clock:
    """One client's limits (:class:`Timeouts`), its lanes (``None`` where a wait kind has no
    limit) and the task that expires them (:meth:`run`, in the client's nursery)."""

    __slots__ = (
        "_sleep",
        "dark",
        "deadline",
        "first_byte",
        "head_yields",
        "limits",
        "read",
        "running",
        "write",
    )

    def __init__(self, limits: Timeouts) -> None:
        self.limits = limits
        #: ``first_byte`` is ``Client()``'s default: a call with a deadline waits for its
        #: response head within that deadline instead (the module docstring).
        self.head_yields = isinstance(limits.first_byte, Default)
        self.write = Lane("write", limits.write) if limits.write is not None else None
        self.first_byte = (
            Lane("first_byte", limits.first_byte) if limits.first_byte is not None else None
        )
        self.read = Lane("read", limits.read) if limits.read is not None else None
        self.deadline = DeadlineLane(self)
        #: The dark-connection watch's lanes (``contract.DarkWatch``), from :data:`FIXED`.
        self.dark = (
            Lane("read_idle", FIXED.read_idle),
            Lane("read_idle_ping", FIXED.read_idle_ping),
        )
        #: True while :meth:`run` runs: only then are the lanes used.
        self.running = False
        self._sleep: trio.CancelScope | None = None  # the task's current sleep

    @property
    def lanes(self) -> tuple[Lane, ...]:
        stages = (self.write, self.first_byte, self.read)
        return (*(lane for lane in stages if lane), self.deadline, *self.dark)

    def bound(self, which: str, target: StageTarget | None = None) -> Bound:
        """A :class:`Bound` for the waits ``which`` (``"write"``, ``"first_byte"``,
        ``"read"``, ``"connect"``, ``"tls"``) of ``target`` at this clock's limit."""
        return Bound(self, which, getattr(self.limits, which), target)

    def wake_by(self, due: float) -> None:
        """Make sure the task looks at the lanes no later than ``due``."""
        sleep = self._sleep
        if sleep is not None and sleep.deadline > due:
            sleep.deadline = due

    def start(self, nursery: trio.Nursery) -> None:
        """Run the lanes in ``nursery`` from now on (they are used at once: the task's first
        look at the lanes comes before anything armed now can fall due)."""
        now = trio.lowlevel.current_clock().current_time
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


class Bound:
    """The limit on one kind of wait of one target: ``with bound: await <one thing>``.

    Reusable, one wait at a time (an HTTP/1.1 connection keeps one per kind; ``progress`` is
    set to the attempt's before use). With no limit it costs two calls and does nothing.
    After cancellation (outer, or the client closing) nothing is armed any more and nothing
    is converted: the ``Cancelled`` goes on.
    """

    __slots__ = (
        "_armed",
        "_clock",
        "_lane",
        "_scope",
        "about",
        "expired",
        "limit",
        "progress",
        "target",
        "which",
    )

    def __init__(
        self,
        clock: Clock | None,
        which: str,
        limit: float | None,
        target: StageTarget | None = None,
        progress: AttemptProgress | None = None,
        about: str = "",
    ) -> None:
        self._clock = clock
        self.about = about
        self.which = which
        self.limit = limit
        self.target = target
        self.progress = progress
        self.expired = False
        #: The clock's lane for this wait (a lane needs a target to interrupt), else ``None``.
        lane: Lane | None = getattr(clock, which, None) if target is not None else None
        self._lane = lane if isinstance(lane, Lane) and lane.limit == limit else None
        self._armed: Lane | None = None
        self._scope: trio.CancelScope | None = None

    def __enter__(self) -> Bound:
        limit = self.limit
        if limit is None:
            return self
        self.expired = False
        lane = self._lane
        clock = self._clock
        if lane is not None and clock is not None and clock.running:
            lane.pending[self] = lane.now() + limit  # (Lane.arm, without its call)
            self._armed = lane
            return self
        scope = self._scope = trio.move_on_after(limit)
        scope.__enter__()
        return self

    def renew(self) -> None:
        """The wait made progress (a write handed more bytes to a reader that is reading:
        ``RawSocketStream.on_progress``): its limit counts again from now. Does nothing when
        no wait is bounded. A renewed lane entry goes to the lane's end, where its new due
        time (now + the lane's one limit) keeps the lane in due order."""
        lane = self._armed
        if lane is not None:
            pending = lane.pending
            if pending.pop(self, None) is not None:
                pending[self] = lane.now() + lane.limit
            return
        scope = self._scope
        if scope is not None and self.limit is not None:
            scope.deadline = trio.current_time() + self.limit

    def expire(self) -> None:
        """The lane ran out (the clock's task): the target ends the wait."""
        self.expired = True
        target, progress = self.target, self.progress
        assert target is not None
        assert progress is not None
        target.stage_expired(self.which, progress)

    def __exit__(
        self,
        etype: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Never swallows: a scope's own Cancelled becomes the timeout, anything else goes on.
        lane = self._armed
        if lane is not None:
            self._armed = None
            lane.pending.pop(self, None)  # (Lane.disarm, without its call)
            if self.expired and exc is not None and not isinstance(exc, trio.Cancelled):
                assert self.progress is not None
                raise timed_out(self.progress, self.which, self.limit, self.about) from exc
            return
        scope = self._scope
        if scope is None:
            return
        self._scope = None
        scope.__exit__(etype, exc, tb)  # (True also when nothing was raised)
        if scope.cancelled_caught:  # it caught its own Cancelled: the limit ran out
            self.expired = True
            assert self.progress is not None
            raise timed_out(self.progress, self.which, self.limit, self.about)


class DeadlineBound:
    """The call deadline around one attempt: ``with DeadlineBound(...) as bound: ...``, then
    :attr:`expired` says whether it ran out. It does not convert what the attempt raised: the
    attempt reports its own outcome (``_call/attempt.py``), reading :attr:`expired`.

    On the deadline lane when the attempt holds a connection (``conn``) that can end its
    waits (``attempt_expired``: HTTP/1.1 closes itself, HTTP/2 fails the attempt's stream
    only), the clock runs and the deadline keeps the lane in order; in a cancel scope
    otherwise (:attr:`scope`, which ``aclose()`` and ``drain()`` may also cancel)."""

    __slots__ = ("_conn", "_lane", "due", "expired", "progress", "scope")

    def __init__(
        self,
        clock: Clock | None,
        due: float,
        progress: AttemptProgress,
        conn: _AttemptHolder | None,
    ) -> None:
        self.due = due
        self.progress = progress
        self.expired = False
        self._conn = conn
        self._lane: DeadlineLane | None = None
        self.scope: trio.CancelScope | None = None
        if (
            conn is not None
            and clock is not None
            and clock.running
            and clock.deadline.arm_at(self, due)
        ):
            self._lane = clock.deadline
        else:
            self.scope = trio.CancelScope(deadline=due)

    def __enter__(self) -> DeadlineBound:
        if self.scope is not None:
            self.scope.__enter__()
        return self

    def expire(self) -> None:
        self.expired = True
        assert self._conn is not None
        self._conn.attempt_expired(self.progress)

    def __exit__(
        self,
        etype: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        lane = self._lane
        if lane is not None:
            lane.pending.pop(self, None)  # (Lane.disarm, without its call)
            return False
        scope = self.scope
        assert scope is not None
        handled = bool(scope.__exit__(etype, exc, tb))
        self.expired = scope.cancelled_caught
        return handled


class _AttemptHolder(Protocol):
    def attempt_expired(self, progress: AttemptProgress) -> None: ...
