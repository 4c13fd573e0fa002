"""The pool's records and its ledger: counts, orders, who waits first. Synchronous.

The records: what the pool keeps per origin (:class:`Origin`), per HTTP/2 connection being
opened (:class:`Opening`) and per attempt that could not be served at once (:class:`Waiter`,
whose ``state`` is one of :data:`WAITING` ... :data:`FAILED`). What it needs of a connection
is the connection contract's (``contract.py``).

The ledger (:class:`Ledger`) keeps the counts the two limits are checked against, and the
orders the rules of :mod:`.pool` follow:

- per origin, in its record: a count of its connections (idle, busy, multiplexed and being
  opened), a LIFO stack of idle HTTP/1.1 connections (the warmest socket is the least likely
  to have been closed by the peer), its HTTP/2 connections with the streams lent on each, a
  FIFO of waiters, and at most one HTTP/2 connection being opened;
- globally: the total count, every idle connection in least-recently-used order (HTTP/1.1
  *and* HTTP/2 connections with no stream: either may be closed to make room, rule 3), and a
  heap of the origins whose first waiter could open a connection if a global slot were free,
  keyed by that waiter's arrival number (rule 4), so that the earliest such waiter across all
  origins is found in O(log origins) instead of a scan.

Its one judgement is the limits' (:meth:`Ledger.reserve`: room for one more connection, an
idle one closed to make it if need be); which rule applies, and when, is
:class:`~.pool_book.PoolBook`'s, which writes each decision down here. Nothing here awaits: a
waiter sleeps in :mod:`.pool`, and is woken here by setting its event once its outcome is
written down.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import OrderedDict
from collections.abc import Callable
from typing import cast

import trio

from .._core.errors import RejectReason
from .._core.evidence import Evidence, FailureCategory, Stage
from .contract import MultiplexedConnection, Opener, PooledConnection
from .progress import AttemptProgress, WireError

__all__ = [
    "ATTACHED",
    "CONN",
    "FAILED",
    "SLOT",
    "WAITING",
    "Opening",
    "Ledger",
    "Origin",
    "Waiter",
    "closed_error",
]


# Waiter states, ints rather than an enum: they are compared on every wait, and WAITING and
# ATTACHED (the two that sleep) are told from the outcomes by one comparison, ``<= ATTACHED``.
WAITING = 0  # in its origin's queue
ATTACHED = 1  # sharing the HTTP/2 connection its origin is opening
SLOT = 2  # may open a connection itself (the slot is counted already)
CONN = 3  # given a connection (or a stream on one)
FAILED = 4  # given an error, or gave back what it held: holds nothing


class Waiter:
    """An attempt the pool could not serve at once, and the outcome it is handed."""

    __slots__ = (
        "conn",
        "error",
        "event",
        "multiplexed",
        "opened",
        "opener",
        "origin",
        "scope",
        "seq",
        "state",
    )

    def __init__(self, origin: Origin, seq: int, opener: Opener, multiplexed: bool) -> None:
        self.origin = origin
        self.seq = seq  # arrival number: the order of rule 4
        self.opener = opener
        self.multiplexed = multiplexed
        self.state = WAITING
        self.event = trio.Event()
        self.scope: trio.CancelScope | None = None  # its sleep, once it sleeps
        self.conn: PooledConnection | None = None
        self.error: BaseException | None = None
        # The progress of the opening that made ``conn`` (or failed: ``error``), when the pool
        # opened it for us.
        self.opened: AttemptProgress | None = None


class Opening:
    """An HTTP/2 connection being opened for an origin, and the waiters that will share it."""

    __slots__ = ("origin", "scope", "waiters")

    def __init__(self, origin: Origin) -> None:
        self.origin = origin
        self.waiters: OrderedDict[Waiter, None] = OrderedDict()
        self.scope = trio.CancelScope()  # the opening task runs in it; close() cancels it


class Origin:
    """What the pool keeps for one origin (one pool key)."""

    __slots__ = ("cap", "count", "idle", "key", "opening", "shared", "waiting")

    def __init__(self, key: object, cap: int) -> None:
        self.key = key
        #: Connections the origin may have: ``max_connections_per_origin``, or fewer where its
        #: protocol says so (HTTP/3: one, set by its first connection; ``PoolBook._add_shared``).
        self.cap = cap
        self.count = 0  # connections: idle, busy, multiplexed, and the one being opened
        self.idle: list[PooledConnection] = []  # HTTP/1.1, LIFO
        self.shared: dict[PooledConnection, int] = {}  # HTTP/2 -> streams lent on it
        self.waiting: OrderedDict[Waiter, None] = OrderedDict()
        self.opening: Opening | None = None

    def head(self) -> Waiter | None:
        return next(iter(self.waiting)) if self.waiting else None

    def __repr__(self) -> str:
        return (
            f"{self.key}: {self.count} open, {len(self.idle)} idle HTTP/1.1, "
            f"{len(self.shared)} HTTP/2, {len(self.waiting)} waiting"
            + (f", opening for {len(self.opening.waiters)}" if self.opening else "")
        )


class Ledger:
    """The pool's counts and orders, and its two limits; see the module docstring."""

    __slots__ = (
        "_seq",
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
        self.waiting = 0  # waiters asleep: queued or attached to an opening
        #: Per pool key, the lent connections (or HTTP/2 and HTTP/3 streams) held by a response
        #: whose body the caller reads in a ``stream()`` block: counted only, for the message
        #: of a wait that ran out (:meth:`why_full`).
        self.held: dict[object, int] = {}

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
            waiting = len(state.waiting) + (
                len(state.opening.waiters) if state.opening is not None else 0
            )
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
            cast(MultiplexedConnection, conn).on_retired = None
        else:
            state.idle.remove(conn)  # the oldest is at the bottom of a short stack
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
            and not state.waiting
            and state.opening is None
            and self.origins.get(state.key) is state
        ):
            del self.origins[state.key]

    # --- waiters, in arrival order ------------------------------------------------------------

    def arrive(self, origin: Origin, opener: Opener, multiplexed: bool) -> Waiter:
        """A new waiter for ``origin``, numbered in arrival order (not queued yet)."""
        return Waiter(origin, next(self._seq), opener, multiplexed)

    def enqueue(self, waiter: Waiter) -> None:
        """``waiter`` joins its origin's queue (rule 4)."""
        state = waiter.origin
        first = not state.waiting
        state.waiting[waiter] = None
        self.waiting += 1
        if first:
            self.mark_ready(state)

    def dequeue(self, waiter: Waiter) -> None:
        """``waiter`` leaves its origin's queue (served, failed or gone)."""
        state = waiter.origin
        first = state.head() is waiter
        del state.waiting[waiter]
        self.waiting -= 1
        if first:
            self.mark_ready(state)

    def mark_ready(self, state: Origin) -> None:
        """Push ``state``'s first waiter on the heap if its origin is under its own limit."""
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

    def attach(self, waiter: Waiter, opening: Opening) -> None:
        """``waiter`` (not queued) will share the connection ``opening`` makes."""
        opening.waiters[waiter] = None
        self.waiting += 1
        waiter.state = ATTACHED
        if waiter.scope is not None:
            waiter.scope.deadline = math.inf  # no pool_timeout while the connection opens

    def detach(self, waiter: Waiter) -> None:
        """An attached ``waiter`` leaves its origin's opening (cancelled)."""
        opening = waiter.origin.opening
        assert opening is not None
        del opening.waiters[waiter]
        self.waiting -= 1

    def requeue(self, waiter: Waiter) -> None:
        """An attached waiter the new connection could not carry goes back to its origin's
        queue, in its place by arrival (it arrived before anyone queued since)."""
        state = waiter.origin
        self.waiting -= 1
        waiter.state = WAITING
        self.enqueue(waiter)
        if len(state.waiting) > 1:
            ordered = sorted(state.waiting, key=lambda w: w.seq)
            state.waiting = OrderedDict.fromkeys(ordered)
            self.mark_ready(state)

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
        if waiter.state == ATTACHED:
            self.waiting -= 1
        waiter.state = outcome
        waiter.conn = conn
        waiter.error = error
        waiter.opened = opened
        waiter.event.set()

    def fail_all(self, make_error: Callable[[], BaseException]) -> int:
        """End every waiter, queued or attached, with ``make_error()`` (one each); return how
        many. The openings themselves carry on."""
        failed = 0
        for state in list(self.origins.values()):
            while state.waiting:
                waiter = next(iter(state.waiting))
                self.dequeue(waiter)
                self.resolve(waiter, FAILED, error=make_error())
                failed += 1
            opening = state.opening
            if opening is not None:
                for waiter in list(opening.waiters):
                    del opening.waiters[waiter]
                    self.resolve(waiter, FAILED, error=make_error())
                    failed += 1
        return failed


def closed_error() -> WireError:
    """The error of an attempt that meets a closed pool: nothing was sent."""
    return WireError(
        "the client is closed",
        stage=Stage.POOL,
        evidence=Evidence.NOT_SENT,
        category=FailureCategory.ADMISSION,
        reason=RejectReason.CLOSED,
    )
