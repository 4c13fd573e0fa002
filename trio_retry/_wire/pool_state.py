"""The pool's bookkeeping: who holds which slot, who waits, in what order. Synchronous.

Everything here runs without awaiting: counts per origin and in total, idle connections in
least-recently-used order, the HTTP/2 streams lent on each connection, the FIFO of waiters per
origin and the heap that orders origins by their first waiter's arrival. The rules it applies
are written down in :mod:`.pool`, which adds the awaits (a waiter's sleep, an opening's task)
on top. :class:`PoolState` is not used on its own.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol, cast

import trio

from .._core.evidence import Evidence, FailureCategory, Stage
from .progress import AttemptProgress, WireError

if TYPE_CHECKING:
    from .exchange import WireRequest, WireResponse

__all__ = ["MultiplexedConnection", "Opener", "PoolState", "PooledConnection"]


class PooledConnection(Protocol):
    """What the pool needs of a connection (HTTP/1.1 or HTTP/2)."""

    @property
    def origin_key(self) -> object: ...
    @property
    def multiplexed(self) -> bool: ...
    @property
    def closed(self) -> bool: ...

    expires_at: float

    def is_available(self) -> bool: ...
    def is_reusable(self) -> bool: ...
    def peer_closed(self) -> bool: ...
    def close(self) -> None: ...
    def attempt_expired(self, progress: AttemptProgress) -> None:
        """The call deadline of the attempt ``progress`` belongs to passed (the client's
        deadline lane): end that attempt's waits at once, and only its. Must not raise or
        block."""

    async def send_request(self, request: WireRequest, progress: AttemptProgress) -> WireResponse:
        """Write ``request`` and read up to its final response head, each wait within the
        bounds of the client's clock (``clock.py``). Raises ``WireError``."""


class MultiplexedConnection(PooledConnection, Protocol):
    """What the pool needs in addition of a connection whose ``multiplexed`` is true.

    ``is_available()`` is false once the connection is closed or received GOAWAY;
    ``stream_limit`` is the server's ``SETTINGS_MAX_CONCURRENT_STREAMS``: the pool lends at
    most that many streams at once.
    """

    on_retired: Callable[[], None] | None
    #: h2 (#13): streams the connection may take in all, set by the pool from what the origin
    #: allowed before (``None``: no limit known); ``is_available()`` honours it.
    request_limit: int | None
    #: Set by the connection when a rotation GOAWAY refused streams: how many it was allowed.
    accepted_streams: int | None

    @property
    def stream_limit(self) -> int: ...


#: Opens one connection to the origin; stages and timings go to the progress it is given.
Opener = Callable[[AttemptProgress], Awaitable[PooledConnection]]

# Waiter states. WAITING and ATTACHED sleep; the others are the outcome handed to the waiter.
_WAITING = 0  # in its origin's queue
_ATTACHED = 1  # sharing the HTTP/2 connection its origin is opening
_SLOT = 2  # may open a connection itself (the slot is counted already)
_CONN = 3  # given a connection (or a stream on one)
_FAILED = 4  # given an error


class _Waiter:
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

    def __init__(self, origin: _Origin, seq: int, opener: Opener, multiplexed: bool) -> None:
        self.origin = origin
        self.seq = seq
        self.opener = opener
        self.multiplexed = multiplexed
        self.state = _WAITING
        self.event = trio.Event()
        self.scope: trio.CancelScope | None = None
        self.conn: PooledConnection | None = None
        self.error: BaseException | None = None
        # The progress of the opening that made ``conn``, when the pool opened it for us.
        self.opened: AttemptProgress | None = None


class _Opening:
    """An HTTP/2 connection being opened for an origin, and the waiters that will share it."""

    __slots__ = ("origin", "scope", "waiters")

    def __init__(self, origin: _Origin) -> None:
        self.origin = origin
        self.waiters: OrderedDict[_Waiter, None] = OrderedDict()
        self.scope = trio.CancelScope()


class _Origin:
    __slots__ = ("count", "idle", "key", "opening", "shared", "waiting")

    def __init__(self, key: object) -> None:
        self.key = key
        self.count = 0  # connections: idle, busy, multiplexed, and the one being opened
        self.idle: list[PooledConnection] = []  # HTTP/1.1, LIFO
        self.shared: dict[PooledConnection, int] = {}  # HTTP/2 -> streams lent on it
        self.waiting: OrderedDict[_Waiter, None] = OrderedDict()
        self.opening: _Opening | None = None

    def head(self) -> _Waiter | None:
        return next(iter(self.waiting)) if self.waiting else None

    def __repr__(self) -> str:
        return (
            f"{self.key}: {self.count} open, {len(self.idle)} idle HTTP/1.1, "
            f"{len(self.shared)} HTTP/2, {len(self.waiting)} waiting"
            + (f", opening for {len(self.opening.waiters)}" if self.opening else "")
        )


class PoolState:
    """Bookkeeping of :class:`~.pool.ConnectionPool`; see :mod:`.pool` for the rules."""

    def __init__(
        self,
        *,
        max_connections: int = 100,
        max_connections_per_origin: int | None = None,
        keepalive_expiry: float | None = 5.0,
        pool_timeout: float | None = None,
    ) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {max_connections}")
        per_origin = max_connections_per_origin or max_connections
        if per_origin < 1:
            raise ValueError(f"max_connections_per_origin must be >= 1, got {per_origin}")
        self.max_connections = max_connections
        self.max_per_origin = min(per_origin, max_connections)
        self.keepalive_expiry = keepalive_expiry
        self.pool_timeout = pool_timeout
        self._origins: dict[object, _Origin] = {}
        self._total = 0
        self._idle_lru: dict[PooledConnection, None] = {}  # insertion order = oldest first
        # (first waiter's arrival number, origin) for origins under their own limit; entries
        # go stale when that waiter leaves and are skipped lazily (see _eligible).
        self._ready: list[tuple[int, int, _Origin]] = []
        self._seq = itertools.count()
        self._waiting = 0  # waiters asleep: queued or attached to an opening
        # Origins that answered HTTP/1.1 when HTTP/2 was expected: not coalesced.
        self._not_multiplexed: set[object] = set()
        # h2 (#13): per origin, how many streams an HTTP/2 connection was allowed before the
        # server rotated it (GOAWAY refusing the rest, e.g. nginx keepalive_requests): new
        # connections take no more, so a burst spreads over connections, not refusals.
        self._stream_limits: dict[object, int] = {}
        # HTTP/1.1 connections lent to an attempt (or being handed to a waiter): close() must
        # reach them too, or a response body still being read would outlive the client.
        self._lent: set[PooledConnection] = set()
        self._nursery: trio.Nursery | None = None
        #: The run's clock, read directly once bound (``trio.current_time()`` is three calls).
        self._now: Callable[[], float] = trio.current_time
        self.opened = 0  # connections opened over the pool's life (an observation for tests)
        self.closed = False

    @property
    def idle_count(self) -> int:
        """Connections with nothing to do: idle HTTP/1.1 ones and HTTP/2 ones with no stream."""
        return len(self._idle_lru)

    @property
    def total(self) -> int:
        return self._total

    @property
    def active_count(self) -> int:
        """Connections not idle: busy, carrying streams, or still being opened."""
        return self._total - len(self._idle_lru)

    @property
    def waiting(self) -> int:
        """Attempts waiting: for a slot, or for the HTTP/2 connection being opened."""
        return self._waiting

    def origin_count(self, origin: object) -> int:
        """Connections of ``origin`` (idle, busy, multiplexed, being opened)."""
        state = self._origins.get(origin)
        return state.count if state is not None else 0

    def origin_counts(self) -> dict[object, tuple[int, int, int]]:
        """``{pool key: (active, idle, waiting)}`` for each origin with a connection or a
        waiter, counted as the pool-wide properties count (what the
        ``trio_retry.client.pool.*`` gauges report; O(origins + idle connections))."""
        idle: dict[object, int] = {}
        for conn in self._idle_lru:
            idle[conn.origin_key] = idle.get(conn.origin_key, 0) + 1
        counts: dict[object, tuple[int, int, int]] = {}
        for key, state in self._origins.items():
            waiting = len(state.waiting) + (
                len(state.opening.waiters) if state.opening is not None else 0
            )
            if state.count or waiting:
                resting = idle.get(key, 0)
                counts[key] = (state.count - resting, resting, waiting)
        return counts

    def __repr__(self) -> str:
        return (
            f"<ConnectionPool {self.active_count} active, {self.idle_count} idle, "
            f"{self.waiting} waiting; limits {self.max_connections} total, "
            f"{self.max_per_origin} per origin>"
        )

    def describe(self) -> str:
        """The repr, then one line per origin (for debugging and test failure messages)."""
        return "\n".join([repr(self), *(f"  {o!r}" for o in self._origins.values())])

    def _take(self, state: _Origin) -> PooledConnection | None:
        """Rule 1: a usable connection of ``state``'s origin, lent; or ``None``."""
        dropped = False
        if state.shared:
            now = self._now()
            for conn, lent in list(state.shared.items()):
                if lent == 0 and conn.expires_at <= now:
                    self._forget_shared(conn, grant=False)  # idle longer than keepalive_expiry
                    dropped = True
                elif self._has_stream(conn, lent):
                    self._lend_stream(state, conn, lent)
                    return conn
        stack = state.idle
        conn_h1: PooledConnection | None = None
        if stack:
            now = self._now()
            while stack:
                candidate = stack.pop()
                del self._idle_lru[candidate]
                if candidate.expires_at > now and not candidate.peer_closed():
                    conn_h1 = candidate
                    self._lent.add(candidate)
                    break
                candidate.close()
                self._count_down(state)
                dropped = True
        if dropped:
            self._grant_slots()
        return conn_h1

    def _has_stream(self, conn: PooledConnection, lent: int) -> bool:
        return conn.is_available() and lent < cast(MultiplexedConnection, conn).stream_limit

    def _lend_stream(self, state: _Origin, conn: PooledConnection, lent: int) -> None:
        if lent == 0:
            self._idle_lru.pop(conn, None)
        state.shared[conn] = lent + 1

    def _reserve(self, state: _Origin) -> bool:
        """Rule 3: count a new connection for ``state`` if both limits allow it, closing the
        least recently used idle connection (of any origin) at the global limit."""
        if state.count >= self.max_per_origin:
            return False
        if self._total >= self.max_connections:
            if not self._idle_lru:
                return False
            self._evict_one()
        state.count += 1
        self._total += 1
        return True

    def _evict_one(self) -> None:
        conn = next(iter(self._idle_lru))
        del self._idle_lru[conn]
        state = self._origins[conn.origin_key]
        if conn.multiplexed:
            del state.shared[conn]
            cast(MultiplexedConnection, conn).on_retired = None
        else:
            state.idle.remove(conn)  # the oldest is at the bottom of a short stack
        conn.close()
        self._count_down(state)

    def _count_down(self, state: _Origin) -> None:
        """One connection of ``state`` is gone: its slot is free (granted by the caller)."""
        at_limit = state.count >= self.max_per_origin
        state.count -= 1
        self._total -= 1
        if at_limit:
            self._mark_ready(state)
        self._forget_if_empty(state)

    def _forget_if_empty(self, state: _Origin) -> None:
        if (
            state.count == 0
            and not state.waiting
            and state.opening is None
            and self._origins.get(state.key) is state
        ):
            del self._origins[state.key]

    def _enqueue(self, waiter: _Waiter) -> None:
        state = waiter.origin
        first = not state.waiting
        state.waiting[waiter] = None
        self._waiting += 1
        if first:
            self._mark_ready(state)

    def _dequeue(self, waiter: _Waiter) -> None:
        state = waiter.origin
        first = state.head() is waiter
        del state.waiting[waiter]
        self._waiting -= 1
        if first:
            self._mark_ready(state)

    def _mark_ready(self, state: _Origin) -> None:
        """Push ``state``'s first waiter on the heap if its origin is under its own limit."""
        head = state.head()
        if head is not None and state.count < self.max_per_origin:
            heapq.heappush(self._ready, (head.seq, id(state), state))

    def _eligible(self) -> _Waiter | None:
        """The earliest waiter whose origin is under its own limit, or ``None``."""
        ready = self._ready
        while ready:
            seq, _, state = ready[0]
            head = state.head()
            if head is not None and head.seq == seq and state.count < self.max_per_origin:
                return head
            heapq.heappop(ready)
        return None

    def _grant_slots(self) -> None:
        """Rule 4: give free slots (or idle connections to close) to the earliest waiters."""
        while not self.closed:
            waiter = self._eligible()
            if waiter is None or not self._reserve(waiter.origin):
                return
            self._dequeue(waiter)
            self._grant_slot(waiter)

    def _grant_slot(self, waiter: _Waiter) -> None:
        """``waiter`` holds a counted slot: it opens inline, or an HTTP/2 opening starts that
        it and its origin's other HTTP/2 waiters share."""
        state = waiter.origin
        multiplexed = waiter.multiplexed and state.key not in self._not_multiplexed
        if multiplexed and self._nursery is not None:
            opening = state.opening = _Opening(state)
            self._attach(waiter, opening)
            for other in [w for w in state.waiting if w.multiplexed]:
                self._dequeue(other)
                self._attach(other, opening)
            try:
                self._start_opening(opening, waiter.opener)
            except RuntimeError:  # the nursery is closing: so is the client
                state.opening = None
                self._count_down(state)
                for other in list(opening.waiters):
                    self._resolve(other, _FAILED, error=_closed_error())
            return
        self._resolve(waiter, _SLOT)

    def _attach(self, waiter: _Waiter, opening: _Opening) -> None:
        """``waiter`` (not queued) will share the connection ``opening`` makes."""
        opening.waiters[waiter] = None
        self._waiting += 1
        waiter.state = _ATTACHED
        if waiter.scope is not None:
            waiter.scope.deadline = math.inf  # no pool_timeout while the connection opens

    def _resolve(
        self,
        waiter: _Waiter,
        outcome: int,
        *,
        conn: PooledConnection | None = None,
        error: BaseException | None = None,
        opened: AttemptProgress | None = None,
    ) -> None:
        """Hand ``waiter`` its outcome and wake it (it must already be out of any queue)."""
        if waiter.state == _ATTACHED:
            self._waiting -= 1
        waiter.state = outcome
        waiter.conn = conn
        waiter.error = error
        waiter.opened = opened
        waiter.event.set()

    def _learn(self, state: _Origin, conn: PooledConnection, multiplexed: bool) -> None:
        if multiplexed and not conn.multiplexed:
            self._not_multiplexed.add(state.key)
        elif conn.multiplexed:
            self._not_multiplexed.discard(state.key)

    def _add_shared(self, state: _Origin, conn: PooledConnection, *, lent: int) -> None:
        state.shared[conn] = lent
        multiplexed = cast(MultiplexedConnection, conn)
        multiplexed.on_retired = lambda: self._forget_shared(conn)
        if (limit := self._stream_limits.get(state.key)) is not None:  # h2 (#13)
            multiplexed.request_limit = limit

    def _requeue(self, waiter: _Waiter) -> None:
        """An attached waiter the new connection could not carry goes back to its origin's
        queue, in its place by arrival (it arrived before anyone queued since)."""
        state = waiter.origin
        self._waiting -= 1
        waiter.state = _WAITING
        self._enqueue(waiter)
        if len(state.waiting) > 1:
            ordered = sorted(state.waiting, key=lambda w: w.seq)
            state.waiting = OrderedDict.fromkeys(ordered)
            self._mark_ready(state)

    def _serve_streams(self, state: _Origin, conn: PooledConnection) -> bool:
        """Hand free streams of ``conn`` to its origin's waiters, first come first served;
        true if any was handed."""
        served = False
        while (head := state.head()) is not None:
            lent = state.shared[conn]
            if not self._has_stream(conn, lent):
                return served
            self._dequeue(head)
            self._lend_stream(state, conn, lent)
            self._resolve(head, _CONN, conn=conn)
            served = True
        # Then the waiters of the connection being opened: a stream now beats a handshake.
        opening = state.opening
        while opening is not None and opening.waiters:
            lent = state.shared[conn]
            if not self._has_stream(conn, lent):
                break
            waiter = next(iter(opening.waiters))
            del opening.waiters[waiter]
            self._lend_stream(state, conn, lent)
            self._resolve(waiter, _CONN, conn=conn)
            served = True
        return served

    def _forget_shared(self, conn: PooledConnection, *, grant: bool = True) -> None:
        """An HTTP/2 connection is finished with: close it and free its slot, once.

        Also its ``on_retired`` hook, so it may run from its reader task.
        """
        state = self._origins.get(conn.origin_key)
        if state is None or conn not in state.shared:
            return
        # h2 (#13); getattr: a connection that never learns limits need not carry the field.
        accepted: int | None = getattr(conn, "accepted_streams", None)
        if accepted:
            self._stream_limits[state.key] = accepted
        del state.shared[conn]
        self._idle_lru.pop(conn, None)
        cast(MultiplexedConnection, conn).on_retired = None
        conn.close()
        self._count_down(state)
        if grant:
            self._grant_slots()

    def _start_opening(self, opening: _Opening, opener: Opener) -> None:
        """Run ``opener`` for ``opening`` in the bound nursery (the pool's async side)."""
        raise NotImplementedError


def _closed_error() -> WireError:
    return WireError(
        "the client is closed",
        stage=Stage.POOL,
        evidence=Evidence.NOT_SENT,
        category=FailureCategory.ADMISSION,
    )
