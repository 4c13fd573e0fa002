"""The connection pool: synchronous bookkeeping, with I/O kept outside it.

One job: decide which attempt gets which connection, or which attempt may open one, under
``max_connections`` (across all origins) and ``max_connections_per_origin``. Every decision is
made synchronously, in the method that changed the state; the only awaits are a waiter's sleep
and the opener (which runs outside the bookkeeping). The synchronous bookkeeping is
:mod:`.pool_state` (:class:`~.pool_state.PoolState`); this module adds acquire, release and the
openings.

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

import math
from collections.abc import Callable

import trio

from .._core.evidence import Evidence, FailureCategory, Stage
from .pool_state import (
    _ATTACHED,
    _CONN,
    _FAILED,
    _SLOT,
    _WAITING,
    MultiplexedConnection,
    Opener,
    PooledConnection,
    PoolState,
    _closed_error,
    _Opening,
    _Origin,
    _Waiter,
)
from .progress import AttemptProgress, WireError

__all__ = ["ConnectionPool", "MultiplexedConnection", "Opener", "PooledConnection"]


_POOL = Stage.POOL  # (a global: an enum attribute is slow on Python 3.11)


class ConnectionPool(PoolState):
    """Keep-alive pool with global and per-origin limits; see the module docstring."""

    def bind(self, nursery: trio.Nursery) -> None:
        """Run HTTP/2 openings in ``nursery`` (the client's), so that they survive the
        cancellation of the attempt that started them. Without it, every attempt opens its
        own connections inline. From here on the pool reads the run's clock directly."""
        self._nursery = nursery
        self._now = trio.lowlevel.current_clock().current_time

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
        if self._origins.get(origin) is not state:
            # _take dropped the origin's last (expired or peer-closed) connection, and the
            # origin's state with it: start a fresh one, as for an origin never seen.
            state = self._origins[origin] = _Origin(origin)
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
        progress.advance(_POOL)
        progress.connection_reused = True
        return conn

    async def _sleep(self, waiter: _Waiter) -> None:
        limit = self.pool_timeout
        deadline = math.inf
        if waiter.state == _WAITING and limit is not None:
            deadline = self._now() + limit
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

    async def _open(self, opening: _Opening, opener: Opener) -> None:
        """The background task of an opening: never raises (but for the nursery's own
        cancellation, after the bookkeeping is done)."""
        progress = AttemptProgress(self._now())
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
        # (no waiter anywhere, the common case: two calls fewer)
        mine = state.head() if state.waiting else None
        other = self._eligible() if self._ready else None
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
        conn.expires_at = self._now() + (expiry if expiry is not None else math.inf)
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
        if (self._ready and self._eligible() is not None) or (expiry is not None and expiry <= 0):
            self._forget_shared(conn)  # closed for an earlier waiter elsewhere, or no keep-alive
            return
        conn.expires_at = self._now() + (expiry if expiry is not None else math.inf)
        self._idle_lru[conn] = None

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

    def _start_opening(self, opening: _Opening, opener: Opener) -> None:
        assert self._nursery is not None
        self._nursery.start_soon(self._open, opening, opener)


def _merge(progress: AttemptProgress, opened: AttemptProgress) -> None:
    """An attempt served by a connection the pool opened for it takes the opening's stages and
    timings, as if it had opened the connection itself."""
    progress.advance(opened.stage)
    for key in ("connect", "tls"):
        if key in opened.timings:
            progress.timings.setdefault(key, opened.timings[key])
