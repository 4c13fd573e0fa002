"""The one owner of time: every wait of the client is bounded here, and only here.

"Clock" means trio's clock (``trio.current_time()``, ``MockClock`` in tests); what keeps a
client's limits is its ``timekeeper.Timekeeper``. No other module of the client picks a cancel
scope's deadline or a wait of its own (``tests/test_time_owner.py`` keeps that true): each
asks this module, in one of these ways.

- **An attempt's wait** (connect, TLS, the HTTP/2 handshake, a write, the response head, a read
  of the body, an idle connection's PING) is kept by one :class:`Bound`, made by
  :func:`bound` (the one way: the limit the client's, or one given) and used as ``with
  bound: await <one thing>``. The bound decides, in one place (:meth:`Bound.__enter__`), how
  the limit is kept: on a **lane** of the client's timekeeper (``timekeeper.py``) while its
  task runs (arming and disarming are a dict store and a dict pop, no cancel scope per wait; when an
  entry falls due the task tells the bound, which asks its target to end the wait at once:
  :meth:`StageTarget.stage_expired`, an HTTP/1.1 connection closes its socket, an HTTP/2
  stream fails), or in a **cancel scope** otherwise (no client around the connection, its
  timekeeper not running, a one-off wait such as connect or TLS). Either way the bound
  reports the expiry: :meth:`Bound.__exit__` turns what the interrupted wait raised into the
  stage's ``TIMEOUT`` with the evidence of the stage reached (:func:`timed_out`). What arrived
  before the expiry wins; outer cancellation is never converted.
- **The call deadline** around one attempt is a :class:`DeadlineBound` (the deadline lane, or
  a scope when the lane would go out of order), and every decision about the time a call has
  left reads :func:`effective_deadline` (the call's own, or trio's around the task if
  earlier). A backoff, the hedging timer and the next address of a connect race wait with
  :func:`wait_for` / :func:`wait_until` (an event, or an instant), a throttle with :func:`pause`;
  a wait for a pooled connection is an entry of the timekeeper's pool lane (``pool.py``).
- **A connection's own task** is bounded here too: the HTTP/2 writer's writes by a
  :class:`StallBound` (one scope re-armed per write and per progress), the QUIC driver's wait
  for datagrams by :func:`until` QUIC's own timer (its loss detection, handshake
  retransmissions and idle timeout are the state machine's; :func:`quic_handshake_limit` is
  the handshake's), a connection's last words (QUIC's CONNECTION_CLOSE, HTTP/2's GOAWAY) by
  :func:`closing`: shielded, since the client's exit may be cancelling the task that says
  them, and short (``FIXED.closing``), since they must not hold that exit up.

**Limits.** ``Client()``'s (:data:`DEFAULT_LIMITS`; ``_call/config.py`` builds
``DEFAULT_STAGE_TIMEOUTS`` from it) are chosen so that nothing waits forever;
``StageTimeouts()`` (all ``None``) is the explicit way out. Every limit no client configures
is :data:`FIXED`, read from here and written nowhere else: the idle check's PING, the QUIC
handshake's fallback and idle timeout, the dark-connection watch (two lanes of every
timekeeper, ``Timekeeper.dark``), happy eyeballs, the HTTP/2 writer's stall, last words.
``write`` and ``read`` bound each single write or read, never a whole transfer, and a write's
limit counts from its last progress (:meth:`Bound.renew`, called by the socket stream each
time the kernel took more): ``write`` is how long the server may read nothing.

**The call deadline and the head.** A call with a ``deadline=`` waits for its response head as
long as that deadline allows, not ``first_byte``, when ``first_byte`` is ``Client()``'s default
(a :class:`Default`, told apart from the same number given explicitly): the caller who said
"60 s" meant it, and a healthy endpoint that answers in 35 s must not be cut at 30 s and sent
again (issue #38). The attempt says so on its progress (``deadline_bounds_head``, from
``Timekeeper.head_yields``), and every protocol's wait for the head asks :func:`limit_of`.
Rejected: the first-byte limit raised to the remaining deadline per attempt (a lane entry per
call with a limit of its own, which the lanes' one limit per kind does not allow). What a
timeout says is ``timeout_words.py``'s.

Why lanes and not a scope per wait (the obvious way): entering and leaving a
``trio.CancelScope`` per wait was the largest single item of a small request's bookkeeping.
The limits of one kind are the same for every wait of a client, so the waits armed on one lane
fall due in the order they were armed: a lane is an insertion-ordered dict from bound to due
time, and the timekeeper's task sleeps until the earliest oldest entry of any lane. A lane with
nothing armed cannot have anything fall due before ``now + limit``, so the task never has to be
woken early. Call deadlines differ per call: the deadline lane accepts one only when it does not
fall due before the last one armed (``DeadlineLane.arm_at``), and the bound falls back to a
scope otherwise.
"""

from __future__ import annotations

import math
import socket
from dataclasses import dataclass
from types import TracebackType

import trio

from .._core.evidence import FailureCategory
from .clock_shapes import (
    NO_LIMITS,
    AttemptHolder,
    DeadlineLaneLike,
    Keeper,
    LaneLike,
    StageTarget,
    Timeouts,
)
from .progress import AttemptProgress, WireError
from .timeout_words import Default, deadline_message, seconds, timeout_message

__all__ = [
    "DEFAULT_LIMITS",
    "FIXED",
    "NO_LIMITS",
    "Bound",
    "DeadlineBound",
    "DeadlineLaneLike",
    "Default",
    "FixedLimits",
    "Keeper",
    "LaneLike",
    "StageTarget",
    "StallBound",
    "Timeouts",
    "bound",
    "closing",
    "deadline_message",
    "effective_deadline",
    "limit_of",
    "opening",
    "pause",
    "quic_handshake_limit",
    "retime",
    "seconds",
    "timed_out",
    "timeout_message",
    "until",
    "wait_for",
    "wait_until",
    "writable_within",
]


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
    #: How long a connection attempt to one address goes on alone before the next address is
    #: tried beside it (``transport.py``; RFC 8305's Connection Attempt Delay, its 250 ms), or,
    #: with one address, a backup connect to it (its SYN may be lost: ``connect_backup.py``).
    happy_eyeballs: float = 0.25
    #: How long one write of an HTTP/2 connection's writer task may make no progress before
    #: the connection is given up, when the client has no ``write`` limit (with one, that
    #: limit: ``http2/connection.py``); a connection-level safety bound (``http2/writer.py``).
    http2_stall: float = 10.0
    #: aioquic closes a QUIC connection idle this long (its ``idle_timeout``: ``http3/quic.py``).
    quic_idle: float = 30.0
    #: How long an acknowledgement QUIC owes after a response waits for the caller's next
    #: request to carry it, at most (``http3/acks.py``): far inside the 25 ms ``max_ack_delay``
    #: both QUIC libraries announce (RFC 9000 §13.2.1); ``0``: never held.
    ack_hold: float = 0.001
    #: How long the QUIC task leaves the socket unread after a round of a download that took
    #: few datagrams, so that the next round takes more of them at once and acknowledges them
    #: in one ACK (``http3/acks.py``, :class:`~trio_retry._wire.http3.acks.BulkReads`): far
    #: inside the 25 ms ``max_ack_delay`` announced (RFC 9000 §13.2.1); ``0``: read at once.
    #: 1 ms: trio's wait on Linux (``epoll``) is in whole milliseconds, rounded up, so a
    #: shorter one waited 1 ms all the same.
    ack_coalesce: float = 0.001
    reconcile: float = 30.0  # a call's reconciler, at most (SPEC §19: ``_call/reconcile.py``)


#: The table of fixed limits.
FIXED = FixedLimits()


def closing(by: float = math.inf) -> trio.CancelScope:
    """The scope of a connection's last words as it closes: shielded from the cancellation
    that may be ending its task (the client's exit), and ended after ``FIXED.closing`` s, or
    at the instant ``by`` if earlier (the bound :class:`StallBound.close_by` set already).
    What it does not send by then is not sent."""
    due = trio.current_time() + FIXED.closing
    return trio.CancelScope(shield=True, deadline=due if due < by else by)


def until(at: float) -> trio.CancelScope:
    """The scope of a wait that ends at the instant ``at`` unless woken first: the QUIC
    driver's for its socket, ``at`` QUIC's own timer (``http3/driver.py`` cancels it to be
    woken; :func:`retime` when the timer moved); the pool's parked waiter when the pool lane
    cannot keep its ``pool_timeout`` (``pool.py``: no timekeeper running, or out of order)."""
    return trio.CancelScope(deadline=at)


def retime(scope: trio.CancelScope, at: float) -> None:
    """The wait :func:`until` began ends at the instant ``at`` instead."""
    scope.deadline = at


class StallBound:
    """The HTTP/2 writer task's bound on its writes (``http2/writer.py``): the connection is
    given up when one write makes no progress for :attr:`limit` seconds.

    One cancel scope for many writes (a scope per ``send_all`` was a good part of a small
    request's cost): :meth:`arm` before each write (its limit from now, and the write shielded
    from the task's nursery: only this bound cuts a write), :meth:`renew` on each progress,
    :meth:`disarm` before the task sleeps; :meth:`close_by` caps it at the last words' bound.
    A limit that passes just after a write spends the scope without raising (:attr:`spent`):
    the task takes a fresh one. Not a lane entry: the connection's own task has no attempt
    to interrupt nor stage to report."""

    __slots__ = ("_by", "armed", "limit", "scope")

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.scope = trio.CancelScope()  # (a fresh one per __enter__)
        #: A write is under way (armed, not yet disarmed).
        self.armed = False
        self._by = math.inf

    def __enter__(self) -> StallBound:
        self.scope = trio.CancelScope()
        self.scope.__enter__()
        return self

    def __exit__(
        self,
        etype: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        self.armed = False
        return bool(self.scope.__exit__(etype, exc, tb))

    @property
    def spent(self) -> bool:
        """The limit ran out: nothing more may be awaited in this scope."""
        return self.scope.cancel_called

    @property
    def cut(self) -> bool:
        """The limit ran out during a write, which it cut (the scope caught its Cancelled)."""
        return self.scope.cancelled_caught

    def arm(self, now: float) -> None:
        """A write starts at ``now`` (the run's clock): shielded, bounded from now."""
        scope = self.scope
        due = now + self.limit
        scope.deadline = due if due < self._by else self._by
        scope.shield = True
        self.armed = True

    def renew(self) -> None:
        """The write under way made progress: its limit counts again from now."""
        if self.armed:
            due = trio.current_time() + self.limit
            self.scope.deadline = due if due < self._by else self._by

    def written(self) -> None:
        """The write under way ended: no longer shielded."""
        self.scope.shield = False
        self.armed = False

    def disarm(self) -> bool:
        """Nothing to write: no limit while the task sleeps. Whether there was one (then the
        task looks again before it sleeps: the limit may have passed meanwhile)."""
        scope = self.scope
        if scope.deadline == math.inf:
            return False
        scope.deadline = math.inf
        return True

    def close_by(self, at: float) -> None:
        """The connection closes: no write goes on past the instant ``at``."""
        self._by = at
        if self.armed and self.scope.deadline > at:
            self.scope.deadline = at


def effective_deadline(deadline: float) -> float:
    """The instant a call must be over by: the earlier of its own ``deadline`` and the
    deadline trio's cancel scopes around the calling task set
    (``trio.current_effective_deadline()``). Every decision about a call's remaining time
    (the retry loop's, hedging's, the throttle's) reads this one."""
    effective = trio.current_effective_deadline()
    return deadline if deadline < effective else effective


async def wait_until(event: trio.Event, at: float) -> bool:
    """Wait for ``event`` until the instant ``at`` (``math.inf``: no limit); whether it was
    set. A cancellation from outside goes on (nothing to undo)."""
    with trio.move_on_at(at):
        await event.wait()
    return event.is_set()


async def wait_for(event: trio.Event, within: float, deadline: float = math.inf) -> bool:
    """Wait for ``event`` at most ``within`` seconds from now, and never past the instant
    ``deadline``; whether it was set."""
    at = trio.current_time() + within
    return await wait_until(event, at if at < deadline else deadline)


async def writable_within(sock: socket.socket, within: float) -> bool:
    """Wait at most ``within`` seconds for ``sock`` to be writable (a connect's answer, when
    it is in progress); whether it is. Cancelling the wait leaves the socket as it was: the
    connect goes on (``connect_backup.py``)."""
    with trio.move_on_after(within):
        await trio.lowlevel.wait_writable(sock)
        return True
    return False


def quic_handshake_limit(tls: float | None) -> float:
    """The QUIC handshake's limit: the ``tls`` limit, but at most ``FIXED.quic_handshake``
    (after which the attempt goes over TCP: the module docstring)."""
    fixed = FIXED.quic_handshake
    return fixed if tls is None or tls > fixed else tls


async def pause(delay: float) -> None:
    """Wait ``delay`` seconds (a throttle's wait for its next slot)."""
    await trio.sleep(delay)


def limit_of(
    timekeeper: Keeper | None, which: str, progress: AttemptProgress | None = None
) -> float | None:
    """The limit of wait ``which`` on ``timekeeper`` (none without one); for ``first_byte``,
    none when ``progress``'s call deadline bounds the head instead (the module docstring)."""
    if progress is not None and progress.deadline_bounds_head and which == "first_byte":
        return None
    limits: Timeouts = timekeeper.limits if timekeeper is not None else NO_LIMITS
    return getattr(limits, which)  # type: ignore[no-any-return]


def timed_out(
    progress: AttemptProgress, which: str, limit: float | None, about: str = ""
) -> WireError:
    """The failure of a bounded wait that ran out: ``TIMEOUT``, with the evidence of the
    stage ``progress`` reached (a connect or TLS timeout is ``NOT_SENT`` by its stage)."""
    return WireError.at(progress, FailureCategory.TIMEOUT, timeout_message(which, limit, about))


class _OwnLimit:
    """:func:`bound`'s default ``limit``: the client's own for the wait."""

    __slots__ = ()


_OWN_LIMIT = _OwnLimit()


def bound(
    which: str,
    timekeeper: Keeper | None,
    *,
    progress: AttemptProgress | None = None,
    target: StageTarget | None = None,
    limit: float | _OwnLimit | None = _OWN_LIMIT,
    about: str = "",
) -> Bound:
    """The one way to bound a wait (``with bound(...): await <one thing>``): the wait
    ``which`` (as its timeout's message names it) of ``progress``'s attempt, at ``limit``:
    by default the client's for ``which`` (:func:`limit_of`, which lets a call's deadline
    bound its head), ``None`` for no limit. Kept on ``timekeeper``'s lane for ``which`` when
    ``target`` can be told to end the wait and the lane's limit is ``limit``; in a cancel scope
    otherwise (:meth:`Bound.__enter__`). ``about`` names what was waited for, when the
    message's words do not (a peer's address)."""
    if isinstance(limit, _OwnLimit):
        limit = limit_of(timekeeper, which, progress)
    return Bound(timekeeper, which, limit, target, progress, about)


class Bound:
    """The limit on one kind of wait of one target: ``with bound: await <one thing>``.

    Made by :func:`bound`. Reusable, one wait at a time (an HTTP/1.1 connection keeps one per
    kind; ``progress`` is set to the attempt's before use). With no limit it costs two calls
    and does nothing. After cancellation (outer, or the client closing) nothing is armed any
    more and nothing is converted: the ``Cancelled`` goes on.
    """

    __slots__ = (
        "_armed",
        "_lane",
        "_scope",
        "_timekeeper",
        "about",
        "expired",
        "limit",
        "progress",
        "target",
        "which",
    )

    def __init__(
        self,
        timekeeper: Keeper | None,
        which: str,
        limit: float | None,
        target: StageTarget | None = None,
        progress: AttemptProgress | None = None,
        about: str = "",
    ) -> None:
        self._timekeeper = timekeeper
        self.about = about
        self.which = which
        self.limit = limit
        self.target = target
        self.progress = progress
        self.expired = False
        #: The timekeeper's lane for this wait (a lane needs a target to interrupt), else ``None``.
        lane: LaneLike | None = getattr(timekeeper, which, None) if target is not None else None
        self._lane = lane if lane is not None and lane.limit == limit else None
        self._armed: LaneLike | None = None
        self._scope: trio.CancelScope | None = None

    def __enter__(self) -> Bound:
        limit = self.limit
        if limit is None:
            return self
        self.expired = False
        lane = self._lane
        timekeeper = self._timekeeper
        if lane is not None and timekeeper is not None and timekeeper.running:
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
        """The lane ran out (the timekeeper's task): the target ends the wait."""
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
            if self.expired:
                assert self.progress is not None
                if exc is not None and not isinstance(exc, trio.Cancelled):
                    raise timed_out(self.progress, self.which, self.limit, self.about) from exc
                if self.target is _OPENING:  # it cancelled the opening: that cannot go on
                    raise timed_out(self.progress, self.which, self.limit, self.about)
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


class _Opening:
    """The target of an opening's bounds (:func:`opening`): the expiry cancels the opening's
    scope, which ends whatever it waits for (a name, a connect race, a proxy, a handshake)."""

    __slots__ = ()

    def stage_expired(self, which: str, progress: AttemptProgress) -> None:
        if progress.opening is not None:
            progress.opening.cancel()


_OPENING = _Opening()


def opening(progress: AttemptProgress) -> StageTarget | None:
    """The target of a bound of ``progress``'s opening (connect, TLS: ``transport.py``):
    when the opening has a cancel scope of its own (``AttemptProgress.opening``, the pool's),
    the bound keeps its limit on the timekeeper's lane and, run out, cancels that scope; it
    then reports its ``TIMEOUT`` (:meth:`Bound.__exit__`), also for a wait that ended just as
    the limit did (the opening cannot go on). ``None`` (a scope of the bound's own) otherwise.
    Two scopes, the opening's and its connect's, were a sixth of what an HTTP/1.1 call held
    while connecting, visited by every full pass of the garbage collector (issue #41)."""
    return _OPENING if progress.opening is not None else None


class DeadlineBound:
    """The call deadline around one attempt: ``with DeadlineBound(...) as bound: ...``, then
    :attr:`expired` says whether it ran out. It does not convert what the attempt raised: the
    attempt reports its own outcome (``_call/attempt.py``), reading :attr:`expired`.

    On the deadline lane when the attempt holds a connection (``conn``) that can end its
    waits (``attempt_expired``: HTTP/1.1 closes itself, HTTP/2 fails the attempt's stream
    only), the timekeeper runs and the deadline keeps the lane in order; in a cancel scope
    otherwise (:attr:`scope`, which ``aclose()`` and ``drain()`` may also cancel)."""

    __slots__ = ("_conn", "_lane", "due", "expired", "progress", "scope")

    def __init__(
        self,
        timekeeper: Keeper | None,
        due: float,
        progress: AttemptProgress,
        conn: AttemptHolder | None,
    ) -> None:
        self.due = due
        self.progress = progress
        self.expired = False
        self._conn = conn
        self._lane: DeadlineLaneLike | None = None
        self.scope: trio.CancelScope | None = None
        if (
            conn is not None
            and timekeeper is not None
            and timekeeper.running
            and timekeeper.deadline.arm_at(self, due)
        ):
            self._lane = timekeeper.deadline
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
