"""The connection pool: synchronous bookkeeping, with I/O kept outside it.

One job: decide which attempt gets which connection, or which attempt may open one, under
``max_connections`` (across all origins) and ``max_connections_per_origin``. Every decision is
made synchronously, in the method that changed the state; the only awaits are a waiter's sleep
and the opener (which runs outside the bookkeeping).

State:

- per origin (:class:`_Origin`): a count of its connections (idle, busy, multiplexed and being
  opened), a LIFO stack of idle HTTP/1.1 connections (the warmest socket is the least likely to
  have been closed by the peer), its HTTP/2 connections with the streams lent on each, a FIFO
  of waiters, and at most one HTTP/2 connection being opened (:class:`_Opening`);
- globally: the total count, every idle connection in least-recently-used order (HTTP/1.1
  *and* HTTP/2 connections with no stream: either may be closed to make room), and a heap of
  the origins whose first waiter could open a connection if a global slot were free, keyed by
  that waiter's arrival number.

The rules, in the order they are applied:

1. A connection of the caller's origin that can take the request is used at once (an idle
   HTTP/1.1 one, or an HTTP/2 one with a free stream).
2. An attempt that expects HTTP/2 joins the connection its origin is already opening: the
   connection is shared, up to the server's concurrent-stream limit, instead of one connection
   per waiter. The opening runs in a task of the nursery given to :meth:`bind`, not in the
   attempt that started it, so cancelling that attempt does not lose the connection: it is
   finished and handed to the others (or kept idle). A GOAWAY ends a connection's new streams;
   the next attempts coalesce on one new opening in the same way.
3. Otherwise, with room under both limits, the attempt opens a connection. At the global limit,
   the least recently used idle connection of any origin is closed to make room.
4. Otherwise the attempt waits. Waiters are served in arrival order across origins: a released
   HTTP/1.1 connection goes to its origin's first waiter unless a waiter of another origin that
   could use the slot arrived earlier, in which case the connection is closed and the slot
   given to that waiter; a freed slot goes to the earliest waiter whose origin is under its own
   limit. An HTTP/2 stream is not a slot: a finished stream goes to its origin's first waiter,
   and a connection with no stream left is closed for an earlier waiter elsewhere.

Invariant (checked by the property test after every step): no waiter sleeps while something it
could use is free, i.e. while its origin has a usable connection, or its origin is under its
limit and the pool has a free slot or an idle connection to close.

Every request costs O(1) bookkeeping (O(log origins) on the heap): no scan of every connection
or every waiter. The only loops are over one origin's HTTP/2 connections (at most
``max_connections_per_origin``) and over the waiters actually served. :meth:`__repr__` ("1
active, 2 idle, 0 waiting") is a test oracle.

The one check before reusing an idle HTTP/1.1 connection is a single non-blocking poll
(:meth:`HTTP11Connection.peer_closed`): a connection the peer closed while it sat idle is dropped
and the *same* attempt continues on a fresh one — never a request written into a dead socket,
which would be ``SENT_NO_RESPONSE`` instead of the ``NOT_SENT`` it really is.

HTTP/2 connections tell the pool when they die or retire (after a GOAWAY, once their last
stream finished) through their ``on_retired`` hook, which frees the slot at once. A failed or
cancelled HTTP/2 stream resets only itself, so :meth:`discard` of one is a :meth:`release`.

Cancellation: a waiter cancelled after it was granted a connection or slot gives it back, so
the counts stay exact.
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
    from .http11 import WireRequest, WireResponse

__all__ = ["ConnectionPool", "MultiplexedConnection", "Opener", "PooledConnection"]


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
    async def send_request(
        self,
        request: WireRequest,
        progress: AttemptProgress,
        *,
        write_timeout: float | None = None,
        first_byte_timeout: float | None = None,
    ) -> WireResponse: ...


class MultiplexedConnection(PooledConnection, Protocol):
    """What the pool needs in addition of a connection whose ``multiplexed`` is true.

    ``is_available()`` is false once the connection is closed or received GOAWAY;
    ``stream_limit`` is the server's ``SETTINGS_MAX_CONCURRENT_STREAMS``: the pool lends at
    most that many streams at once.
    """

    on_retired: Callable[[], None] | None

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


class ConnectionPool:
    """Keep-alive pool with global and per-origin limits; see the module docstring."""

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
        # HTTP/1.1 connections lent to an attempt (or being handed to a waiter): close() must
        # reach them too, or a response body still being read would outlive the client.
        self._lent: set[PooledConnection] = set()
        self._nursery: trio.Nursery | None = None
        self.opened = 0  # connections opened over the pool's life (an observation for tests)
        self.closed = False

    def bind(self, nursery: trio.Nursery) -> None:
        """Run HTTP/2 openings in ``nursery`` (the client's), so that they survive the
        cancellation of the attempt that started them. Without it, every attempt opens its
        own connections inline."""
        self._nursery = nursery

    # --- inspection ------------------------------------------------------------------------

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

    def __repr__(self) -> str:
        return (
            f"<ConnectionPool {self.active_count} active, {self.idle_count} idle, "
            f"{self.waiting} waiting; limits {self.max_connections} total, "
            f"{self.max_per_origin} per origin>"
        )

    def describe(self) -> str:
        """The repr, then one line per origin (for debugging and test failure messages)."""
        return "\n".join([repr(self), *(f"  {o!r}" for o in self._origins.values())])

    # --- acquire -----------------------------------------------------------------------------

    async def acquire(
        self,
        origin: object,
        progress: AttemptProgress,
        opener: Opener,
        *,
        expect_multiplexed: bool = False,
    ) -> PooledConnection:
        """A connection for ``origin``: a usable pooled one, a shared or new one.

        Waits at most ``pool_timeout`` in the queue (then ``WireError(POOL_TIMEOUT)``,
        ``NOT_SENT``); the wait for an HTTP/2 connection being opened is bounded by the
        opening itself (its connect and TLS timeouts) and the caller's deadline.
        ``progress.connection_reused`` says whether the connection served a request before.
        Failures of the opening are raised as :class:`WireError` (``NOT_SENT``), to every
        attempt that waited for it.

        If cancelled, anything granted meanwhile is given back and an HTTP/2 opening carries on
        for the others: the counts stay exact. The connection must be given back with
        :meth:`release` or :meth:`discard`; :meth:`close` closes it meanwhile.
        """
        progress.advance(Stage.POOL)
        if self.closed:
            raise _closed_error()
        state = self._origins.get(origin)
        if state is None:
            state = self._origins[origin] = _Origin(origin)
        conn = self._take(state)
        if conn is not None:
            progress.connection_reused = True
            return conn
        multiplexed = expect_multiplexed and origin not in self._not_multiplexed
        waiter = _Waiter(state, next(self._seq), opener, multiplexed)
        opening = state.opening
        if multiplexed and opening is not None:
            self._attach(waiter, opening)
        elif self._reserve(state):
            self._grant_slot(waiter)
        else:
            self._enqueue(waiter)
        if waiter.state <= _ATTACHED:
            await self._sleep(waiter)
        return await self._outcome(waiter, progress)

    def take_idle(self, origin: object, progress: AttemptProgress) -> PooledConnection | None:
        """A connection for ``origin`` at once, or ``None``. Never blocks.

        An idle HTTP/1.1 connection, or an HTTP/2 one with a free stream, as :meth:`acquire`
        would hand out without waiting; give it back the same way. ``None`` when there is none:
        then :meth:`acquire` decides whether to wait or connect.
        """
        if self.closed:
            return None
        state = self._origins.get(origin)
        if state is None:
            return None
        conn = self._take(state)
        if conn is None:
            return None
        progress.advance(Stage.POOL)
        progress.connection_reused = True
        return conn

    def _take(self, state: _Origin) -> PooledConnection | None:
        """Rule 1: a usable connection of ``state``'s origin, lent; or ``None``."""
        dropped = False
        if state.shared:
            now = trio.current_time()
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
            now = trio.current_time()
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

    # --- waiting -----------------------------------------------------------------------------

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
                self._nursery.start_soon(self._open, opening, waiter.opener)
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

    async def _sleep(self, waiter: _Waiter) -> None:
        limit = self.pool_timeout
        deadline = math.inf
        if waiter.state == _WAITING and limit is not None:
            deadline = trio.current_time() + limit
        waiter.scope = trio.CancelScope(deadline=deadline)
        try:
            with waiter.scope:
                await waiter.event.wait()
        except BaseException:
            self._abandon(waiter)
            raise
        if waiter.state == _WAITING:
            self._abandon(waiter)
            raise WireError(
                f"no connection to {waiter.origin.key} became available within pool_timeout "
                f"({self.pool_timeout}s); limits: max_connections={self.max_connections}, "
                f"max_connections_per_origin={self.max_per_origin}, "
                f"{self.active_count} active",
                stage=Stage.POOL,
                evidence=Evidence.NOT_SENT,
                category=FailureCategory.POOL_TIMEOUT,
            )

    def _abandon(self, waiter: _Waiter) -> None:
        """``waiter`` leaves (cancelled, timed out): give back anything it was granted."""
        state = waiter.state
        if state == _WAITING:
            self._dequeue(waiter)
            self._forget_if_empty(waiter.origin)
        elif state == _ATTACHED:
            opening = waiter.origin.opening
            assert opening is not None
            del opening.waiters[waiter]
            self._waiting -= 1
        elif state == _SLOT:
            self._count_down(waiter.origin)
            self._grant_slots()
        elif state == _CONN:
            assert waiter.conn is not None
            self.release(waiter.conn)
        waiter.state = _FAILED  # nothing held any more

    async def _outcome(self, waiter: _Waiter, progress: AttemptProgress) -> PooledConnection:
        """What a waiter was given, as :meth:`acquire` returns it."""
        if waiter.state == _CONN:
            conn = waiter.conn
            assert conn is not None
            if waiter.opened is not None:  # a fresh connection, opened by the pool for us
                _merge(progress, waiter.opened)
            else:
                progress.connection_reused = True
            return conn
        if waiter.state == _FAILED:
            error = waiter.error
            assert error is not None
            if isinstance(error, WireError):
                progress.advance(error.stage)
                raise WireError(
                    str(error), stage=error.stage, evidence=error.evidence, category=error.category
                ) from error
            raise error
        assert waiter.state == _SLOT
        return await self._open_inline(waiter.origin, progress, waiter.opener, waiter.multiplexed)

    async def _open_inline(
        self, state: _Origin, progress: AttemptProgress, opener: Opener, multiplexed: bool
    ) -> PooledConnection:
        """Open a connection in the calling task, under the slot it holds."""
        try:
            conn = await opener(progress)
        except BaseException:
            self._count_down(state)
            self._grant_slots()
            raise
        self.opened += 1
        if self.closed:
            conn.close()
            self._count_down(state)
            raise WireError(
                "the client closed while connecting",
                stage=progress.stage,
                evidence=Evidence.NOT_SENT,
                category=FailureCategory.ADMISSION,
            )
        self._learn(state, conn, multiplexed)
        if conn.multiplexed:
            self._add_shared(state, conn, lent=1)
            self._serve_streams(state, conn)
        else:
            self._lent.add(conn)
        return conn

    def _learn(self, state: _Origin, conn: PooledConnection, multiplexed: bool) -> None:
        if multiplexed and not conn.multiplexed:
            self._not_multiplexed.add(state.key)
        elif conn.multiplexed:
            self._not_multiplexed.discard(state.key)

    def _add_shared(self, state: _Origin, conn: PooledConnection, *, lent: int) -> None:
        state.shared[conn] = lent
        cast(MultiplexedConnection, conn).on_retired = lambda: self._forget_shared(conn)

    # --- the HTTP/2 opening (rule 2) ---------------------------------------------------------

    async def _open(self, opening: _Opening, opener: Opener) -> None:
        """The background task of an opening: never raises (but for the nursery's own
        cancellation, after the bookkeeping is done)."""
        progress = AttemptProgress(trio.current_time())
        progress.advance(Stage.POOL)
        conn: PooledConnection | None = None
        error: BaseException | None = None
        try:
            with opening.scope:
                conn = await opener(progress)
        except Exception as exc:  # delivered to the waiters, raised in their tasks
            error = exc
        except BaseException:
            self._opening_done(opening, progress, None, _closed_error())
            raise
        if conn is None and error is None:  # the pool closed while connecting
            error = _closed_error()
        self._opening_done(opening, progress, conn, error)

    def _opening_done(
        self,
        opening: _Opening,
        progress: AttemptProgress,
        conn: PooledConnection | None,
        error: BaseException | None,
    ) -> None:
        state = opening.origin
        state.opening = None
        waiters = list(opening.waiters)
        opening.waiters.clear()
        if conn is not None:
            self.opened += 1
            if self.closed:
                conn.close()
                conn, error = None, _closed_error()
            elif not conn.is_reusable():
                conn.close()
                conn = None
                error = WireError(
                    "the new connection closed before it could carry a request",
                    stage=progress.stage,
                    evidence=Evidence.NOT_SENT,
                    category=FailureCategory.CONNECTION_BROKEN,
                )
        if conn is None:
            self._count_down(state)
            for waiter in waiters:
                self._resolve(waiter, _FAILED, error=error)
            self._grant_slots()
            return
        self._learn(state, conn, True)
        left = iter(waiters)
        if conn.multiplexed:
            self._add_shared(state, conn, lent=0)
            for waiter in left:
                lent = state.shared[conn]
                if not self._has_stream(conn, lent):
                    self._requeue(waiter)
                    break
                state.shared[conn] = lent + 1
                self._resolve(waiter, _CONN, conn=conn, opened=progress)
            if state.shared.get(conn) == 0:
                self._stream_returned(state, conn)
        else:
            first = next(left, None)
            if first is None:
                self._lent.add(conn)
                self.release(conn)
            else:
                self._lent.add(conn)
                self._resolve(first, _CONN, conn=conn, opened=progress)
        for waiter in left:
            self._requeue(waiter)
        if state.waiting:
            for other in list(state.shared):  # a stream freed elsewhere meanwhile
                if other is not conn and state.waiting:
                    self._serve_streams(state, other)
            self._mark_ready(state)
            self._grant_slots()

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

    # --- release -----------------------------------------------------------------------------

    def release(self, conn: PooledConnection) -> None:
        """Give ``conn`` back after a request: kept if reusable, else closed. Never blocks."""
        state = self._origins.get(conn.origin_key)
        if conn.multiplexed:
            lent = state.shared.get(conn) if state is not None else None
            if state is None or lent is None:
                return  # retired (or evicted) meanwhile: its slot is free already
            state.shared[conn] = lent - 1
            self._stream_returned(state, conn)
            return
        self._lent.discard(conn)
        assert state is not None
        if self.closed or conn.closed or not conn.is_reusable():
            conn.close()
            self._count_down(state)
            self._grant_slots()
            return
        mine = state.head()
        other = self._eligible()
        if mine is not None and (other is None or mine.seq <= other.seq):
            self._dequeue(mine)
            self._lent.add(conn)
            self._resolve(mine, _CONN, conn=conn)
            return
        expiry = self.keepalive_expiry
        if other is not None or (expiry is not None and expiry <= 0):
            conn.close()  # an earlier waiter elsewhere needs the slot, or no keep-alive
            self._count_down(state)
            self._grant_slots()
            return
        conn.expires_at = trio.current_time() + (expiry if expiry is not None else math.inf)
        state.idle.append(conn)
        self._idle_lru[conn] = None

    def discard(self, conn: PooledConnection) -> None:
        """``conn`` broke or was interrupted: close it and free its slot.

        A multiplexed connection is only closed if it is itself dead: a failed or cancelled
        HTTP/2 stream has already reset itself, and the connection carries the other streams.
        """
        if not conn.multiplexed:
            conn.close()
        self.release(conn)

    def _stream_returned(self, state: _Origin, conn: PooledConnection) -> None:
        """A stream of ``conn`` ended (or the connection is new): serve a waiter, keep it
        idle, or close it for an earlier waiter of another origin."""
        if conn.closed or not conn.is_reusable() or self.closed:
            self._forget_shared(conn)
            return
        if (state.waiting or state.opening is not None) and self._serve_streams(state, conn):
            return
        if state.shared[conn] > 0:
            return
        expiry = self.keepalive_expiry
        if self._eligible() is not None or (expiry is not None and expiry <= 0):
            self._forget_shared(conn)  # closed for an earlier waiter elsewhere, or no keep-alive
            return
        conn.expires_at = trio.current_time() + (expiry if expiry is not None else math.inf)
        self._idle_lru[conn] = None

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
        del state.shared[conn]
        self._idle_lru.pop(conn, None)
        cast(MultiplexedConnection, conn).on_retired = None
        conn.close()
        self._count_down(state)
        if grant:
            self._grant_slots()

    # --- shutdown ----------------------------------------------------------------------------

    def fail_waiters(self, make_error: Callable[[], BaseException]) -> int:
        """End every attempt waiting in the pool with ``make_error()`` (one each); return how
        many. Openings in progress carry on and their connections are kept. For ``drain()``:
        attempts still waiting for a connection have sent nothing."""
        failed = 0
        for state in list(self._origins.values()):
            while state.waiting:
                waiter = next(iter(state.waiting))
                self._dequeue(waiter)
                self._resolve(waiter, _FAILED, error=make_error())
                failed += 1
            opening = state.opening
            if opening is not None:
                for waiter in list(opening.waiters):
                    del opening.waiters[waiter]
                    self._resolve(waiter, _FAILED, error=make_error())
                    failed += 1
        return failed

    def close(self) -> None:
        """Close every connection, idle, shared or lent; waiters and openings end with an error.

        A lent connection is closed under its user, whose next read or write fails; its slot
        is freed when the user gives it back (:meth:`release` or :meth:`discard`).
        """
        self.closed = True
        self.fail_waiters(_closed_error)
        for state in list(self._origins.values()):
            if state.opening is not None:
                state.opening.scope.cancel()
            for conn in list(state.idle):
                state.idle.remove(conn)
                del self._idle_lru[conn]
                conn.close()
                self._count_down(state)
            for conn in list(state.shared):
                conn.close()  # its on_retired hook frees the slot
                self._forget_shared(conn, grant=False)
        for conn in list(self._lent):
            conn.close()


def _closed_error() -> WireError:
    return WireError(
        "the client is closed",
        stage=Stage.POOL,
        evidence=Evidence.NOT_SENT,
        category=FailureCategory.ADMISSION,
    )


def _merge(progress: AttemptProgress, opened: AttemptProgress) -> None:
    """An attempt served by a connection the pool opened for it takes the opening's stages and
    timings, as if it had opened the connection itself."""
    progress.advance(opened.stage)
    for key in ("connect", "tls"):
        if key in opened.timings:
            progress.timings.setdefault(key, opened.timings[key])
