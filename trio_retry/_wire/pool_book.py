"""The pool's bookkeeping: which connection or slot goes to whom. Synchronous.

:class:`PoolBook` applies the rules written down in :mod:`.pool`, each decision made in the
method that changed the state, and writes it down in its :class:`~.pool_ledger.Ledger` (the
counts and orders the rules read); it never awaits. The pool (:class:`~.pool.ConnectionPool`)
owns one and adds the awaits around it: a waiter's sleep, an opener's task. The one thing the
book cannot do itself, start an opening in the background, it asks of the callback the pool
gives it (:meth:`PoolBook.bind`).

Every request costs O(1) bookkeeping (O(log origins) on the ledger's heap): no scan of every
connection or every waiter. A call finds a free HTTP/2 stream among the connections that may
have one (:attr:`~.pool_ledger.Origin.free`: one found full leaves that list until one of its
streams returns), not by looking at every connection of its origin. The only loops are over
the waiters actually served, and, once per opening, over its origin's HTTP/2 connections (at
most ``max_connections_per_origin``).

The one check before reusing an idle HTTP/1.1 connection is a single non-blocking poll
(:meth:`HTTP11Connection.peer_closed`): a connection the peer closed while it sat idle is dropped
and the *same* attempt continues on a fresh one — never a request written into a dead socket,
which would be ``SENT_NO_RESPONSE`` instead of the ``NOT_SENT`` it really is.

HTTP/2 connections tell the pool when they die or retire (after a GOAWAY, once their last
stream finished) through their ``on_retired`` hook, which frees the slot at once. A failed or
cancelled HTTP/2 stream resets only itself, so :meth:`~PoolBook.discard` of one is a
:meth:`~PoolBook.release`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import cast

import trio

from .._core.evidence import Evidence, FailureCategory
from .contract import MultiplexedConnection, Opener, PooledConnection
from .pool_ledger import (
    CONN,
    FAILED,
    SLOT,
    WAITING,
    Ledger,
    Opening,
    Origin,
    Waiter,
    closed_error,
)
from .progress import AttemptProgress, WireError

__all__ = ["PoolBook"]


class PoolBook:
    """Bookkeeping of :class:`~.pool.ConnectionPool`; see :mod:`.pool` for the rules."""

    def __init__(
        self,
        *,
        max_connections: int,
        max_connections_per_origin: int | None,
        keepalive_expiry: float | None,
        pool_timeout: float | None,
    ) -> None:
        #: The counts and orders this book writes its decisions down in (read them there).
        self.ledger = Ledger(max_connections, max_connections_per_origin)
        self.keepalive_expiry = keepalive_expiry
        self.pool_timeout = pool_timeout
        # Origins that answered HTTP/1.1 when HTTP/2 was expected: not coalesced.
        self._not_multiplexed: set[object] = set()
        # Per origin, how many streams an HTTP/2 connection was allowed before the server
        # rotated it (GOAWAY refusing the rest, e.g. nginx keepalive_requests): new connections
        # take no more, so a burst spreads over connections, not refusals.
        self._stream_limits: dict[object, int] = {}
        # HTTP/1.1 connections lent to an attempt (or being handed to a waiter): close() must
        # reach them too, or a response body still being read would outlive the client.
        self._lent: set[PooledConnection] = set()
        # Connections set aside from their capped origin's count while they drain (GOAWAY):
        # close() must reach them too; each leaves when it retires.
        self._draining: set[PooledConnection] = set()
        # Runs an HTTP/2 opening in the background; None until bound: then attempts open inline.
        self._start_opening: Callable[[Opening, Opener], None] | None = None
        #: The clock. Once bound, the run's clock read directly (``trio.current_time()`` is
        #: three calls).
        self.now: Callable[[], float] = trio.current_time
        self.opened = 0  # connections opened over the pool's life (an observation for tests)
        self.closed = False

    def bind(
        self, start_opening: Callable[[Opening, Opener], None], now: Callable[[], float]
    ) -> None:
        """From here on, HTTP/2 openings are handed to ``start_opening`` (which raises
        ``RuntimeError`` if it cannot start one: the client is closing), and time is ``now()``."""
        self._start_opening = start_opening
        self.now = now

    # --- rules 1 to 4, for one attempt ------------------------------------------------------

    def take(self, origin: object) -> PooledConnection | None:
        """Rule 1: a usable connection of ``origin``, lent; or ``None`` (also once closed)."""
        if self.closed:
            return None
        ledger = self.ledger
        state = ledger.origins.get(origin)
        if state is None:
            return None
        dropped = False
        free = state.free
        if free:
            now = self.now()
            shared = state.shared
            while free:
                conn = next(iter(free))
                lent = shared[conn]
                if lent == 0 and conn.expires_at <= now:
                    self._forget_shared(conn, grant=False)  # idle longer than keepalive_expiry
                    dropped = True
                elif self._has_stream(conn, lent):
                    self._lend_stream(state, conn, lent)
                    return conn
                else:
                    del free[conn]  # full or unavailable: back when one of its streams returns
        stack = state.idle
        conn_h1: PooledConnection | None = None
        if stack:
            now = self.now()
            while stack:
                candidate = stack.pop()
                del ledger.idle[candidate]
                if candidate.expires_at > now and not candidate.peer_closed():
                    conn_h1 = candidate
                    self._lent.add(candidate)
                    break
                candidate.close()
                ledger.count_down(state)
                dropped = True
        if dropped:
            self._grant_slots()
        return conn_h1

    def join(self, origin: object, opener: Opener | Waiter, expect_multiplexed: bool) -> Waiter:
        """Rules 2 to 4 for an attempt :meth:`take` had nothing for. The waiter returned is
        ``WAITING`` in one of its origin's FIFOs (sharing its origin's HTTP/2 opening, when it
        expects HTTP/2 and one is under way), to sleep until resolved, or already resolved:
        ``SLOT`` (open a connection under it), or ``FAILED`` (the client is closing)."""
        ledger = self.ledger
        # (A fresh record if take() dropped the origin's last, expired or peer-closed,
        # connection and its record with it, as for an origin never seen.)
        state = ledger.origins.get(origin) or ledger.origin(origin)
        multiplexed = expect_multiplexed and origin not in self._not_multiplexed
        waiter = ledger.arrive(state, opener, multiplexed)
        if multiplexed and state.opening is not None:
            ledger.enqueue(waiter)  # it shares the opening
        elif ledger.reserve(state):
            self._grant_slot(waiter, queued=False)
        else:
            ledger.enqueue(waiter)
        return waiter

    def abandon(self, waiter: Waiter) -> None:
        """``waiter`` leaves (cancelled, timed out, or its opener failed): give back anything
        it was granted."""
        state = waiter.state
        if state == WAITING:
            self.ledger.dequeue(waiter)
            self.ledger.forget_if_empty(waiter.origin)
        elif state == SLOT:
            self.ledger.count_down(waiter.origin)
            self._grant_slots()
        elif state == CONN:
            assert waiter.conn is not None
            self.release(waiter.conn)
        waiter.state = FAILED  # nothing held any more

    def connected(self, waiter: Waiter, conn: PooledConnection) -> bool:
        """``waiter``, holding a slot, opened ``conn`` itself: lend it (and share its other
        streams with the origin's waiters). False if the pool closed meanwhile: then ``conn``
        is closed and the slot freed."""
        self.opened += 1
        state = waiter.origin
        if self.closed:
            conn.close()
            self.ledger.count_down(state)
            return False
        self._learn(state, conn, waiter.multiplexed)
        if conn.multiplexed:
            self._add_shared(state, conn, lent=1)
            self._serve_streams(state, conn)
        else:
            self._lent.add(conn)
        return True

    def opening_finished(
        self,
        opening: Opening,
        progress: AttemptProgress,
        conn: PooledConnection | None,
        error: BaseException | None,
    ) -> None:
        """The background ``opening`` ended with ``conn`` or ``error``: hand the connection's
        streams (or the error) to the waiters that shared it, its origin's multiplexed FIFO,
        first come first served; those it cannot carry stay where they are, in their place.
        O(waiters served): the others are not touched."""
        state = opening.origin
        state.opening = None
        state.opening_ended = self.now()
        if conn is not None:
            self.opened += 1
            if self.closed:
                conn.close()
                conn, error = None, closed_error()
            elif not conn.is_reusable():
                conn.close()
                conn = None
                error = WireError(
                    "the new connection closed before it could carry a request",
                    stage=progress.stage,
                    evidence=Evidence.NOT_SENT,
                    category=FailureCategory.CONNECTION_BROKEN,
                )
        ledger = self.ledger
        if conn is None:
            ledger.count_down(state)
            ledger.fail_mux(state, error, opened=progress)
            ledger.forget_if_empty(state)
            self._grant_slots()
            return
        self._learn(state, conn, True)
        if conn.multiplexed:
            self._add_shared(state, conn, lent=0)
            mux = state.mux
            while mux:
                lent = state.shared[conn]
                if not self._has_stream(conn, lent):
                    break
                waiter = next(iter(mux))
                ledger.dequeue(waiter)
                # The first waiter's attempt opened the connection (its connect and TLS
                # timings are that opening's); every later one shares it with that attempt:
                # ``connection_reused`` (it was False for every stream of a new connection).
                self._lend_stream(state, conn, lent)
                ledger.resolve(waiter, CONN, conn=conn, opened=progress if lent == 0 else None)
            if state.shared.get(conn) == 0:
                self._stream_returned(state, conn)
        else:
            self._lent.add(conn)
            first = state.mux_head()
            if first is None:
                self.release(conn)
            else:
                ledger.dequeue(first)
                ledger.resolve(first, CONN, conn=conn, opened=progress)
        if state.mux or state.plain:
            # A stream freed elsewhere meanwhile. (Once per opening, over the origin's HTTP/2
            # connections: at most max_connections_per_origin.)
            for other in list(state.shared):
                if other is not conn and state.mux:
                    self._serve_streams(state, other)
            ledger.mark_ready(state)  # its multiplexed FIFO shares no opening any more
            self._grant_slots()

    # --- giving back ----------------------------------------------------------------------

    def release(self, conn: PooledConnection) -> None:
        """Give ``conn`` back after a request: kept if reusable, else closed."""
        ledger = self.ledger
        state = ledger.origins.get(conn.origin_key)
        if conn.multiplexed:
            lent = state.shared.get(conn) if state is not None else None
            if state is None or lent is None:
                return  # retired (or evicted) meanwhile: its slot is free already
            state.shared[conn] = lent - 1
            state.free[conn] = None  # (where it was, if it still was)
            self._stream_returned(state, conn)
            return
        self._lent.discard(conn)
        assert state is not None
        if self.closed or not conn.is_reusable():  # (not reusable once closed)
            conn.close()
            ledger.count_down(state)
            self._grant_slots()
            return
        # (no waiter anywhere, the common case: two calls fewer)
        mine = state.head() if state.mux or state.plain else None
        other = ledger.eligible() if ledger.ready else None
        if mine is not None and (other is None or mine.seq <= other.seq):
            ledger.dequeue(mine)
            self._lent.add(conn)
            ledger.resolve(mine, CONN, conn=conn)
            return
        expiry = self.keepalive_expiry
        if other is not None or (expiry is not None and expiry <= 0):
            conn.close()  # an earlier waiter elsewhere needs the slot, or no keep-alive
            ledger.count_down(state)
            self._grant_slots()
            return
        conn.expires_at = self.now() + (expiry if expiry is not None else math.inf)
        state.idle.append(conn)
        ledger.idle[conn] = None

    def discard(self, conn: PooledConnection) -> None:
        """``conn`` broke or was interrupted: close it and free its slot.

        A multiplexed connection is only closed if it is itself dead: a failed or cancelled
        HTTP/2 stream has already reset itself, and the connection carries the other streams.
        """
        if not conn.multiplexed:
            conn.close()
        self.release(conn)

    def fail_waiters(self, make_error: Callable[[], BaseException]) -> int:
        """End every attempt waiting with ``make_error()`` (one each); return how many.
        Openings in progress carry on and their connections are kept."""
        return self.ledger.fail_all(make_error)

    @property
    def draining(self) -> frozenset[PooledConnection]:
        """Connections set aside from their capped origin's count while they drain (to read:
        tests, debugging)."""
        return frozenset(self._draining)

    def close(self) -> None:
        """Close every connection, idle, shared or lent; waiters and openings end with an error.

        A lent connection is closed under its user, whose next read or write fails; its slot
        is freed when the user gives it back (:meth:`release` or :meth:`discard`).
        """
        self.closed = True
        self.fail_waiters(closed_error)
        ledger = self.ledger
        for state in list(ledger.origins.values()):
            if state.opening is not None:
                state.opening.scope.cancel()
            idle, state.idle = state.idle, deque()
            for conn in idle:
                del ledger.idle[conn]
                conn.close()
                ledger.count_down(state)
            for conn in list(state.shared):
                conn.close()  # its on_retired hook frees the slot
                self._forget_shared(conn, grant=False)
        for conn in list(self._draining):
            conn.close()  # (its on_retired hook forgets it)
        for conn in list(self._lent):
            conn.close()

    # --- internals --------------------------------------------------------------------------

    # (``conn`` is multiplexed in these two: read as one without a typing.cast call.)

    def _has_stream(self, conn: PooledConnection, lent: int) -> bool:
        return conn.is_available() and lent < conn.stream_limit  # type: ignore[attr-defined]

    def _lend_stream(self, state: Origin, conn: PooledConnection, lent: int, n: int = 1) -> None:
        if lent == 0:
            self.ledger.idle.pop(conn, None)
        lent += n
        state.shared[conn] = lent
        if lent >= conn.stream_limit:  # type: ignore[attr-defined]
            state.free.pop(conn, None)

    def _grant_slots(self) -> None:
        """Rule 4: give free slots (or idle connections to close) to the earliest waiters."""
        ledger = self.ledger
        while not self.closed:
            waiter = ledger.eligible()
            if waiter is None or not ledger.reserve(waiter.origin):
                return
            self._grant_slot(waiter, queued=True)

    def _grant_slot(self, waiter: Waiter, *, queued: bool) -> None:
        """``waiter`` (in its origin's FIFO if ``queued``) holds a counted slot: it opens
        inline, or an HTTP/2 opening starts that it and its origin's other HTTP/2 waiters
        share; they stay in their FIFO, which the opening covers."""
        state = waiter.origin
        ledger = self.ledger
        multiplexed = waiter.multiplexed and state.key not in self._not_multiplexed
        if multiplexed and self._start_opening is not None:
            if not queued:
                ledger.enqueue(waiter)  # (first in its FIFO: a slot was free, nobody waited)
            opening = state.opening = Opening(state)
            try:
                self._start_opening(opening, waiter.open)
            except RuntimeError:  # the nursery is closing: so is the client
                state.opening = None
                ledger.count_down(state)
                ledger.fail_mux(state, closed_error())
            return
        if queued:
            ledger.dequeue(waiter)
        ledger.resolve(waiter, SLOT)

    def _learn(self, state: Origin, conn: PooledConnection, multiplexed: bool) -> None:
        if multiplexed and not conn.multiplexed:
            self._not_multiplexed.add(state.key)
        elif conn.multiplexed:
            self._not_multiplexed.discard(state.key)

    def _add_shared(self, state: Origin, conn: PooledConnection, *, lent: int) -> None:
        state.shared[conn] = lent
        state.free[conn] = None
        # A protocol that allows one connection per origin (HTTP/3: ``per_origin = 1``) caps
        # the origin's count, so that a burst past the server's stream limit queues for its
        # streams instead of opening another connection. getattr: HTTP/2's has no such rule.
        per_origin: int | None = getattr(conn, "per_origin", None)
        if per_origin is not None:
            state.cap = min(state.cap, per_origin)
            # Told at its GOAWAY, so that calls queued behind it need not wait for its last
            # stream to end before its successor opens (:meth:`_drained`).
            conn.on_draining = lambda: self._drained(conn)  # type: ignore[attr-defined]
        multiplexed = cast(MultiplexedConnection, conn)
        multiplexed.on_retired = lambda: self._forget_shared(conn)
        multiplexed.on_available = lambda: self._available_again(conn)
        if (limit := self._stream_limits.get(state.key)) is not None:
            multiplexed.request_limit = limit  # what the origin allowed its last connection

    def _serve_streams(self, state: Origin, conn: PooledConnection) -> bool:
        """Hand free streams of ``conn`` to its origin's multiplexed waiters, first come first
        served (those sharing an opening too: a stream now beats a handshake); true if any was
        handed. O(streams handed): counted out once, then handed, the connection not looked
        at again per waiter and once more to stop (issue #41)."""
        mux = state.mux
        lent = state.shared[conn]
        if not mux or not self._has_stream(conn, lent):
            return False
        handed = min(conn.stream_limit - lent, len(mux))  # type: ignore[attr-defined]
        self._lend_stream(state, conn, lent, handed)
        ledger = self.ledger
        for _ in range(handed):
            ledger.resolve(ledger.pop_mux(state), CONN, conn=conn)
        return True

    def _stream_returned(self, state: Origin, conn: PooledConnection) -> None:
        """A stream of ``conn`` ended (or the connection is new): serve a waiter, keep it
        idle, or close it for an earlier waiter of another origin."""
        if not conn.is_reusable() or self.closed:  # (not reusable once closed)
            self._forget_shared(conn)
            return
        if state.mux and self._serve_streams(state, conn):
            return
        if state.shared[conn] > 0:
            return
        expiry = self.keepalive_expiry
        ledger = self.ledger
        if (ledger.ready and ledger.eligible() is not None) or (expiry is not None and expiry <= 0):
            self._forget_shared(conn)  # closed for an earlier waiter elsewhere, or no keep-alive
            return
        conn.expires_at = self.now() + (expiry if expiry is not None else math.inf)
        ledger.idle[conn] = None

    def _available_again(self, conn: PooledConnection) -> None:
        """``conn`` takes streams again: it heard from its peer after a silence that made it
        suspect (``contract.DarkWatch``). Its origin's waiters may use it at once."""
        state = self.ledger.origins.get(conn.origin_key)
        if self.closed or state is None or conn not in state.shared:
            return
        state.free[conn] = None
        if state.mux:
            self._serve_streams(state, conn)

    def _drained(self, conn: PooledConnection) -> None:
        """``conn``, of an origin capped at one connection (HTTP/3), received GOAWAY and
        drains: it no longer counts, so the calls queued for its streams get a slot for its
        successor at once instead of waiting for its last stream to end. It stays open,
        outside the counts (``max_connections`` too, for its last moments), until it retires by
        itself; its streams' releases then find it gone (:meth:`release`). Elsewhere (HTTP/2)
        a draining connection keeps its slot until it closes, as the origin may open others."""
        state = self.ledger.origins.get(conn.origin_key)
        if state is None or conn not in state.shared:
            return
        del state.shared[conn]
        state.free.pop(conn, None)
        self.ledger.idle.pop(conn, None)
        self._draining.add(conn)
        multiplexed = cast(MultiplexedConnection, conn)
        multiplexed.on_retired = lambda: self._draining.discard(conn)
        multiplexed.on_available = None
        self.ledger.count_down(state)
        self._grant_slots()

    def _forget_shared(self, conn: PooledConnection, *, grant: bool = True) -> None:
        """An HTTP/2 connection is finished with: close it and free its slot, once.

        Also its ``on_retired`` hook, so it may run from its reader task.
        """
        ledger = self.ledger
        state = ledger.origins.get(conn.origin_key)
        if state is None or conn not in state.shared:
            return
        # getattr: a connection that never learns its limit need not carry the field.
        accepted: int | None = getattr(conn, "accepted_streams", None)
        if accepted:
            self._stream_limits[state.key] = accepted
        del state.shared[conn]
        state.free.pop(conn, None)
        ledger.idle.pop(conn, None)
        cast(MultiplexedConnection, conn).on_retired = None
        cast(MultiplexedConnection, conn).on_available = None
        conn.close()
        ledger.count_down(state)
        if grant:
            self._grant_slots()
