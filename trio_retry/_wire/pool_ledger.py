"""The pool's records and its ledger: counts, orders, who waits first. Synchronous.

The records: what the pool keeps per origin (:class:`Origin`), per HTTP/2 connection being
opened (:class:`Opening`) and per attempt that could not be served at once (:class:`Waiter`,
whose ``state`` is one of :data:`WAITING` ... :data:`FAILED`). What it needs of a connection
is the connection contract's (``contract.py``).

The ledger (:class:`Ledger`) keeps the counts the two limits are checked against, and the
orders the rules of :mod:`.pool` follow:

- per origin, in its record: a count of its connections (idle, busy, multiplexed and being
  opened), a LIFO stack of idle HTTP/1.1 connections (the warmest socket is the least likely
  to have been closed by the peer), its HTTP/2 connections with the streams lent on each, two
  FIFOs of waiters (those that expect HTTP/2 or HTTP/3, which a free stream serves, and the
  others), and at most one HTTP/2 connection being opened, which every waiter of the first FIFO
  shares while it opens;
- globally: the total count, every idle connection in least-recently-used order (HTTP/1.1
  *and* HTTP/2 connections with no stream: either may be closed to make room, rule 3), and a
  heap of the origins whose first waiter could open a connection if a global slot were free,
  keyed by that waiter's arrival number (rule 4), so that the earliest such waiter across all
  origins is found in O(log origins) instead of a scan.

Every step costs O(1) (O(log origins) on the heap) whatever the number of waiters: a waiter
enters its FIFO once, on arrival, and leaves it once, served or gone; nothing is sorted, moved
from one queue to another or scanned. (The obvious way, and the way it was: a waiter expecting
HTTP/2 moved into the opening's own list, then back into its origin's queue in its place by
arrival when the new connection could not carry it, the queue sorted again for each: with
10,000 calls at once to a server allowing 1,000 streams, tens of millions of sort keys, and
seconds of CPU. Now an opening keeps no list: it covers its origin's multiplexed FIFO, serves
its head, and leaves the rest where they are.)

Its one judgement is the limits' (:meth:`Ledger.reserve`: room for one more connection, an
idle one closed to make it if need be); which rule applies, and when, is
:class:`~.pool_book.PoolBook`'s, which writes each decision down here. Nothing here awaits: a
waiter sleeps in :mod:`.pool`, and is woken here (:meth:`Waiter.wake`) once its outcome is
written down.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from typing import cast

import trio

from .._core.errors import RejectReason
from .._core.evidence import Evidence, FailureCategory, Stage
from .contract import MultiplexedConnection, Opener, PooledConnection
from .park import Parking
from .progress import AttemptProgress, WireError

__all__ = [
    "CONN",
    "FAILED",
    "SLOT",
    "WAITING",
    "Opening",
    "Ledger",
    "Origin",
    "Waiter",
    "closed_error",
    "not_admitted",
]


# Waiter states, ints rather than an enum: they are compared on every wait. A WAITING waiter
# that expects HTTP/2 shares the connection its origin is opening, if one is.
WAITING = 0  # in one of its origin's FIFOs
SLOT = 2  # may open a connection itself (the slot is counted already)
CONN = 3  # given a connection (or a stream on one)
FAILED = 4  # given an error, or gave back what it held: holds nothing


class Waiter(Parking):
    """An attempt the pool could not serve at once, and the outcome it is handed.

    An opener may be its own waiter (the attempt runner, ``_call/attempt.py``, a subclass
    whose :meth:`open` opens): queued, it is set up as one (:meth:`arrive`) rather than
    wrapped in a waiter object of its own, one object fewer for each of thousands of calls
    queued at once (issue #41). Any other opener gets a waiter made for it. ``await waiter``
    parks the waiting task (:class:`.park.Parking`), until :meth:`wake`."""

    __slots__ = (
        "arrived",
        "conn",
        "error",
        "failures",
        "multiplexed",
        "opened",
        "opener",
        "origin",
        "parked",
        "seq",
        "state",
        "task",
    )

    # Set by ``ConnectionPool.queue`` before their first reading (``parked``: by
    # :meth:`arrive`), for a waiter its caller parks: when it arrived, the pool's count of
    # ``fail_waiters()`` then, and whether it parked there (``pool.py``).
    arrived: float
    failures: int

    def __init__(self, origin: Origin, seq: int, opener: Opener, multiplexed: bool) -> None:
        self.opener = opener
        self.arrive(origin, seq, multiplexed)

    def arrive(self, origin: Origin, seq: int, multiplexed: bool) -> None:
        """Set up as a new waiter for ``origin``, ``WAITING``, numbered ``seq``."""
        self.origin = origin
        self.seq = seq  # arrival number: the order of rule 4
        self.multiplexed = multiplexed
        self.state = WAITING
        self.parked = False
        #: The task parked until the waiter is resolved (``pool.py``), else ``None``. Parked
        #: by itself rather than on a ``trio.Event``: an event, its set of tasks and its wait's
        #: closure were four more objects for each of thousands of calls queued at once,
        #: visited by every pass of the garbage collector (issue #41).
        self.task: trio.lowlevel.Task | None = None
        self.conn: PooledConnection | None = None
        self.error: BaseException | None = None
        # The progress of the opening that made ``conn`` (or failed: ``error``), when the pool
        # opened it for us.
        self.opened: AttemptProgress | None = None

    def open(self, progress: AttemptProgress) -> Awaitable[PooledConnection]:
        """A new connection for the waiter's origin (its opener's), to be awaited."""
        return self.opener(progress)

    def wake(self) -> None:
        """The waiter was resolved: its parked task, if any, runs again."""
        task = self.task
        if task is not None:
            self.task = None
            trio.lowlevel.reschedule(task)

    #: Its ``pool_timeout`` fell due on the timekeeper's pool lane (``pool.py``): its parked
    #: task, if any, runs again and looks whether the wait is over (it is still waiting).
    expire = wake

    def __call__(self, _: object) -> trio.lowlevel.Abort:
        """Its parked task's abort function (``await waiter``, :class:`.park.Parking`): the
        task is cancelled (its ``pool_timeout``, or its caller): it is no longer parked, and a
        later :meth:`wake` has nothing to do. The waiter itself rather than its bound ``abort``
        method: that was one more object per parked call (issue #41)."""
        self.task = None
        return trio.lowlevel.Abort.SUCCEEDED


class Opening:
    """An HTTP/2 connection being opened for an origin. It keeps no list: the waiters that will
    share it are its origin's multiplexed FIFO (:attr:`Origin.mux`)."""

    __slots__ = ("origin", "scope")

    def __init__(self, origin: Origin) -> None:
        self.origin = origin
        self.scope = trio.CancelScope()  # the opening task runs in it; close() cancels it


class Origin:
    """What the pool keeps for one origin (one pool key).

    Its waiters are in two FIFOs, each in arrival order: :attr:`mux`, those that expect a
    multiplexed connection (a free stream serves them; while :attr:`opening` is not ``None``
    they all share it), and :attr:`plain`, the others. :meth:`head` is the earliest waiter a
    free slot or a whole connection would serve."""

    __slots__ = (
        "cap",
        "count",
        "free",
        "idle",
        "key",
        "mux",
        "opening",
        "opening_ended",
        "plain",
        "shared",
    )

    def __init__(self, key: object, cap: int) -> None:
        self.key = key
        #: Connections the origin may have: ``max_connections_per_origin``, or fewer where its
        #: protocol says so (HTTP/3: one, set by its first connection; ``PoolBook._add_shared``).
        self.cap = cap
        self.count = 0  # connections: idle, busy, multiplexed, and the one being opened
        #: Idle HTTP/1.1 connections, LIFO: taken at the right; the oldest, at the left, is
        #: the one closed to make room (``Ledger._evict_oldest``).
        self.idle: deque[PooledConnection] = deque()
        self.shared: dict[PooledConnection, int] = {}  # HTTP/2 -> streams lent on it
        #: The HTTP/2 connections that may have a free stream, oldest first: each leaves when
        #: found full or unavailable (``PoolBook.take``) and comes back when a stream of it
        #: returns, so a call finds a stream without looking at every connection of its origin.
        self.free: dict[PooledConnection, None] = {}
        self.mux: OrderedDict[Waiter, None] = OrderedDict()
        self.plain: OrderedDict[Waiter, None] = OrderedDict()
        self.opening: Opening | None = None
        #: When its last opening ended: a multiplexed waiter's ``pool_timeout`` counts from
        #: then, as it counted nothing while it shared the opening (``pool.py``).
        self.opening_ended = -math.inf

    @property
    def waiting(self) -> int:
        """Waiters of this origin, in either FIFO."""
        return len(self.mux) + len(self.plain)

    def head(self) -> Waiter | None:
        """The earliest waiter a free slot or an idle connection would serve: the first of
        :attr:`plain` or, unless they share an opening, of :attr:`mux`."""
        plain = next(iter(self.plain)) if self.plain else None
        if self.opening is not None or not self.mux:
            return plain
        mux = next(iter(self.mux))
        return mux if plain is None or mux.seq < plain.seq else plain

    def mux_head(self) -> Waiter | None:
        """The earliest waiter a free stream would serve."""
        return next(iter(self.mux)) if self.mux else None

    def __repr__(self) -> str:
        return (
            f"{self.key}: {self.count} open, {len(self.idle)} idle HTTP/1.1, "
            f"{len(self.shared)} HTTP/2, {self.waiting} waiting"
            + (f", opening for {len(self.mux)}" if self.opening else "")
        )


class Ledger:
    """The pool's counts and orders, and its two limits; see the module docstring."""

    __slots__ = (
        "_seq",
        "failed_with",
        "failures",
        "held",
        "idle",
        "max_connections",
        "max_per_origin",
        "origins",
        "ready",
        "total",
        "waiting",
    )

    def __init__(self, max_connections: int, max_connections_per_origin: int | None) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {max_connections}")
        per_origin = max_connections_per_origin or max_connections
        if per_origin < 1:
            raise ValueError(f"max_connections_per_origin must be >= 1, got {per_origin}")
        self.max_connections = max_connections
        self.max_per_origin = min(per_origin, max_connections)
        #: The record of each origin with a connection, a waiter or an opening.
        self.origins: dict[object, Origin] = {}
        self.total = 0  # connections of every origin, counted as Origin.count counts them
        #: Every idle connection (HTTP/1.1, or HTTP/2 with no stream), oldest first.
        self.idle: dict[PooledConnection, None] = {}
        #: ``(first waiter's arrival number, id, origin)`` for origins under their own limit;
        #: entries go stale when that waiter leaves and are skipped lazily (see
        #: :meth:`eligible`). Empty when nobody waits, which callers test before calling it.
        self.ready: list[tuple[int, int, Origin]] = []
        self._seq = itertools.count()
        self.waiting = 0  # waiters asleep, in either FIFO of their origin
        #: Per pool key, the lent connections (or HTTP/2 and HTTP/3 streams) held by a response
        #: whose body the caller reads in a ``stream()`` block: counted only, for the message
        #: of a wait that ran out (:meth:`why_full`).
        self.held: dict[object, int] = {}
        #: :meth:`fail_all` calls so far, and the error maker of the last.
        self.failures = 0
        self.failed_with: Callable[[], BaseException] = closed_error

    # --- counts -------------------------------------------------------------------------------

    @property
    def idle_count(self) -> int:
        """Connections with nothing to do: idle HTTP/1.1 ones and HTTP/2 ones with no stream."""
        return len(self.idle)

    @property
    def active_count(self) -> int:
        """Connections not idle: busy, carrying streams, or still being opened."""
        return self.total - len(self.idle)

    def origin_count(self, origin: object) -> int:
        """Connections of ``origin`` (idle, busy, multiplexed, being opened)."""
        state = self.origins.get(origin)
        return state.count if state is not None else 0

    def origin_counts(self) -> dict[object, tuple[int, int, int]]:
        """``{pool key: (active, idle, waiting)}`` for each origin with a connection or a
        waiter, counted as the pool-wide properties count (what the
        ``trio_retry.client.pool.*`` gauges report; O(origins + idle connections))."""
        idle: dict[object, int] = {}
        for conn in self.idle:
            idle[conn.origin_key] = idle.get(conn.origin_key, 0) + 1
        counts: dict[object, tuple[int, int, int]] = {}
        for key, state in self.origins.items():
            waiting = state.waiting
            if state.count or waiting:
                resting = idle.get(key, 0)
                counts[key] = (state.count - resting, resting, waiting)
        return counts

    def summary(self) -> str:
        """``"2 active, 1 idle, 0 waiting; limits ..."``: the pool's repr, a test oracle."""
        return (
            f"{self.active_count} active, {self.idle_count} idle, "
            f"{self.waiting} waiting; limits {self.max_connections} total, "
            f"{self.max_per_origin} per origin"
        )

    def __repr__(self) -> str:
        return f"<Ledger {self.summary()}>"

    def why_full(self, state: Origin, *, queued: bool = True) -> str:
        """Why a waiter of ``state`` found nothing it could use: the limit that binds (named as
        the caller sets it) and what holds the connections; when responses the caller still
        reads in ``stream()`` blocks hold some (nothing else would ever give those back), how
        many, and the way out. ``queued=False``: the waiter may instead have been waiting for
        the HTTP/2 connection its origin is opening."""
        if not queued and state.opening is not None:  # (its waiters share what it makes)
            return f"the connection to {state.key} being opened is not ready (connect, TLS)"
        if state.cap < self.max_per_origin and state.count >= state.cap:
            option = "pool_timeout"
            text = (
                f"every stream the server allows on the one connection to {state.key} is in "
                "use (HTTP/3 opens one connection per origin, RFC 9114 §3.3, and queues the "
                "rest)"
            )
            held = self.held.get(state.key, 0)
        elif self.max_per_origin < self.max_connections and state.count >= self.max_per_origin:
            option, limit = "max_connections_per_origin", self.max_per_origin
            text = f"all {state.count} connections to {state.key} are in use ({option}={limit})"
            held = self.held.get(state.key, 0)
        else:
            option, limit = "max_connections", self.max_connections
            text = f"all {option}={limit} connections are in use ({state.count} to {state.key})"
            held = sum(self.held.values())
        if held:
            text += (
                f"; {held} held by {'a response' if held == 1 else 'responses'} still open in "
                "`async with client.stream(...)`: read the body to its end or leave the block "
                f"before another call needs a connection, or raise {option}"
            )
        return text

    def hold(self, key: object, count: int) -> None:
        """``count`` more (or fewer) of ``key``'s lent connections or streams are held by a
        response the caller reads in a ``stream()`` block."""
        held = self.held.get(key, 0) + count
        if held:
            self.held[key] = held
        else:
            self.held.pop(key, None)

    def origin(self, key: object) -> Origin:
        """The record of origin ``key``, made if it has none."""
        state = self.origins.get(key)
        if state is None:
            state = self.origins[key] = Origin(key, self.max_per_origin)
        return state

    def reserve(self, state: Origin) -> bool:
        """Rule 3: count a new connection for ``state`` if both limits allow it, closing the
        least recently used idle connection (of any origin) at the global limit."""
        if state.count >= state.cap:
            return False
        if self.total >= self.max_connections:
            if not self.idle:
                return False
            self._evict_oldest()
        state.count += 1
        self.total += 1
        return True

    def _evict_oldest(self) -> None:
        conn = next(iter(self.idle))
        del self.idle[conn]
        state = self.origins[conn.origin_key]
        if conn.multiplexed:
            del state.shared[conn]
            state.free.pop(conn, None)
            cast(MultiplexedConnection, conn).on_retired = None
            cast(MultiplexedConnection, conn).on_available = None
        else:
            # The oldest idle connection of all is the oldest of its origin, the bottom of its
            # stack: both are in the order the connections became idle.
            assert state.idle[0] is conn
            state.idle.popleft()
        conn.close()
        self.count_down(state)

    def count_down(self, state: Origin) -> None:
        """One connection of ``state`` is gone: its slot is free (granted by the caller)."""
        at_limit = state.count >= state.cap
        state.count -= 1
        self.total -= 1
        if at_limit:
            self.mark_ready(state)
        self.forget_if_empty(state)

    def forget_if_empty(self, state: Origin) -> None:
        """Drop ``state``'s record once it holds nothing (no connection, waiter, opening)."""
        if (
            state.count == 0
            and not state.mux
            and not state.plain
            and state.opening is None
            and self.origins.get(state.key) is state
        ):
            del self.origins[state.key]

    # --- waiters, in arrival order ------------------------------------------------------------

    def arrive(self, origin: Origin, opener: Opener | Waiter, multiplexed: bool) -> Waiter:
        """A new waiter for ``origin``, numbered in arrival order (not queued yet): the
        opener itself when it is its own waiter, else one made for it."""
        if isinstance(opener, Waiter):
            opener.arrive(origin, next(self._seq), multiplexed)
            return opener
        return Waiter(origin, next(self._seq), opener, multiplexed)

    def enqueue(self, waiter: Waiter) -> None:
        """``waiter`` joins the end of its origin's FIFO (:attr:`Origin.mux` if it expects a
        multiplexed connection, else :attr:`Origin.plain`): it arrived last."""
        state = waiter.origin
        first = not state.mux and not state.plain
        (state.mux if waiter.multiplexed else state.plain)[waiter] = None
        self.waiting += 1
        if first:
            self.mark_ready(state)

    def dequeue(self, waiter: Waiter) -> None:
        """``waiter`` leaves its origin's FIFO (served, failed or gone)."""
        state = waiter.origin
        first = state.head() is waiter
        del (state.mux if waiter.multiplexed else state.plain)[waiter]
        self.waiting -= 1
        if first:
            self.mark_ready(state)

    def pop_mux(self, state: Origin) -> Waiter:
        """The first waiter of ``state``'s multiplexed FIFO leaves it (to be served a stream);
        as :meth:`dequeue` of it, without looking for it (it is first)."""
        waiter, _ = state.mux.popitem(last=False)
        self.waiting -= 1
        if state.opening is None and (not state.plain or waiter.seq < next(iter(state.plain)).seq):
            self.mark_ready(state)  # it was its origin's head: the next one is
        return waiter

    def mark_ready(self, state: Origin) -> None:
        """Push ``state``'s :meth:`~Origin.head` on the heap if its origin is under its own
        limit (whenever the head may have changed: a waiter came first or left first, the
        origin went under its limit, its opening ended)."""
        head = state.head()
        if head is not None and state.count < state.cap:
            heapq.heappush(self.ready, (head.seq, id(state), state))

    def eligible(self) -> Waiter | None:
        """The earliest waiter whose origin is under its own limit, or ``None``."""
        ready = self.ready
        while ready:
            seq, _, state = ready[0]
            head = state.head()
            if head is not None and head.seq == seq and state.count < state.cap:
                return head
            heapq.heappop(ready)
        return None

    def resolve(
        self,
        waiter: Waiter,
        outcome: int,
        *,
        conn: PooledConnection | None = None,
        error: BaseException | None = None,
        opened: AttemptProgress | None = None,
    ) -> None:
        """Hand ``waiter`` its outcome and wake it (it must already be out of any queue)."""
        waiter.state = outcome
        waiter.conn = conn
        waiter.error = error
        waiter.opened = opened
        waiter.wake()

    def fail_mux(
        self, state: Origin, error: BaseException | None, opened: AttemptProgress | None = None
    ) -> None:
        """End every waiter of ``state``'s multiplexed FIFO with ``error``: those that shared
        an opening that failed (``opened``, its progress, goes with the error: its protocol is
        theirs)."""
        mux, state.mux = state.mux, OrderedDict()
        self.waiting -= len(mux)
        for waiter in mux:
            self.resolve(waiter, FAILED, error=error, opened=opened)

    def fail_all(self, make_error: Callable[[], BaseException]) -> int:
        """End every waiter with ``make_error()`` (one each); return how many. The openings
        themselves carry on. Counted (:attr:`failures`), ``make_error`` kept
        (:attr:`failed_with`): for a waiter granted something just before, that has not run
        since and ends too (``ConnectionPool.wait``)."""
        self.failures += 1
        self.failed_with = make_error
        failed = 0
        for state in list(self.origins.values()):
            for queue in (state.mux, state.plain):
                for waiter in queue:
                    self.resolve(waiter, FAILED, error=make_error())
                failed += len(queue)
                self.waiting -= len(queue)
                queue.clear()
        return failed


def closed_error() -> WireError:
    """The error of an attempt that meets a closed pool: nothing was sent."""
    return not_admitted("the client is closed", RejectReason.CLOSED)


def not_admitted(message: str, reason: RejectReason) -> WireError:
    """An attempt turned away at the pool (``reason``: the client closed, or drains):
    ``ADMISSION``, nothing was sent."""
    return WireError(
        message,
        stage=Stage.POOL,
        evidence=Evidence.NOT_SENT,
        category=FailureCategory.ADMISSION,
        reason=reason,
    )
