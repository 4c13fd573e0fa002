"""The connection pool: synchronous bookkeeping, with I/O kept outside it.

State, all per :class:`Origin`:

- ``idle``: HTTP/1.1 connections between requests, a LIFO stack (the most recently used socket
  is the warmest and the least likely to have been closed by the peer);
- ``shared``: multiplexed (HTTP/2) connections, which take new streams while they have capacity;
- counts of all connections (idle, busy and still connecting) per origin and in total, checked
  against ``max_connections_per_origin`` and ``max_connections``;
- a FIFO of waiters. A released connection is handed straight to the first waiter for its
  origin; a freed slot goes to the first waiter allowed to open a connection.

Taking and returning a connection is O(1): no scan of all connections per request. The one
check before reusing an idle HTTP/1.1 connection is a single non-blocking ``recv(MSG_PEEK)``
(:meth:`HTTP11Connection.peer_closed`): a connection the peer closed while it sat idle is
dropped and the *same* attempt continues on a fresh one — it never turns into a request written
into a dead socket, which would be ``SENT_NO_RESPONSE`` instead of the ``NOT_SENT`` it really is.

Multiplexed (HTTP/2) connections stay in ``shared`` while they live: a stream that fails or is
cancelled resets only itself, so ``discard`` of a multiplexed connection is a ``release``. The
connection tells the pool when it dies or retires (after a GOAWAY, once its last stream
finished) through its ``on_retired`` hook, which frees its slot at once. An HTTP/2 connection
with no open stream expires after ``keepalive_expiry`` like an idle HTTP/1.1 one.

When an attempt expects HTTP/2 (``acquire(..., expect_multiplexed=True)``) and another attempt
is already connecting to the same origin, it waits for that connection instead of opening a
parallel one, then shares it if it turned out multiplexed with a free stream slot (else it
opens its own). Origins that answered HTTP/1.1 despite the expectation are remembered, so a
burst to them is not serialised behind one connect.

Cancellation: a waiter cancelled after it was granted a connection or slot gives it back, so the
counts stay exact; :meth:`__repr__` ("1 active, 2 idle, 0 waiting") doubles as a test oracle.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol, cast

import trio

from .._core.evidence import Evidence, FailureCategory, Stage
from .progress import AttemptProgress, WireError

if TYPE_CHECKING:
    from .http11 import WireRequest, WireResponse

__all__ = ["ConnectionPool", "PooledConnection"]


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
    """What the pool needs in addition of a connection whose ``multiplexed`` is true."""

    on_retired: Callable[[], None] | None

    @property
    def active_streams(self) -> int: ...


Opener = Callable[[AttemptProgress], Awaitable[PooledConnection]]


class _Waiter:
    __slots__ = ("conn", "event", "granted", "origin")

    def __init__(self, origin: object) -> None:
        self.origin = origin
        self.event = trio.Event()
        self.granted = False
        self.conn: PooledConnection | None = None


class ConnectionPool:
    """Per-origin keep-alive pool with global and per-origin limits; see the module docstring."""

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
        self._idle: dict[object, list[PooledConnection]] = {}
        self._idle_lru: dict[PooledConnection, None] = {}  # insertion order = oldest first
        self._shared: dict[object, list[PooledConnection]] = {}
        self._count: dict[object, int] = {}
        self._total = 0
        self._waiters: deque[_Waiter] = deque()
        # Origins with a connection being opened by an attempt that expects HTTP/2; set when
        # that connect ends, however it ends.
        self._opening: dict[object, trio.Event] = {}
        # Origins that answered HTTP/1.1 when HTTP/2 was expected.
        self._not_multiplexed: set[object] = set()
        # HTTP/1.1 connections lent to an attempt (or being handed to a waiter): close() must
        # reach them too, or a response body still being read would outlive the client.
        self._lent: set[PooledConnection] = set()
        self.closed = False

    # --- inspection ------------------------------------------------------------------------

    @property
    def idle_count(self) -> int:
        return len(self._idle_lru)

    @property
    def total(self) -> int:
        return self._total

    @property
    def active_count(self) -> int:
        """Connections not idle: busy, multiplexed or still connecting."""
        return self._total - len(self._idle_lru)

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def __repr__(self) -> str:
        return (
            f"<ConnectionPool {self.active_count} active, {self.idle_count} idle, "
            f"{self.waiting} waiting; limits {self.max_connections} total, "
            f"{self.max_per_origin} per origin>"
        )

    # --- acquire -----------------------------------------------------------------------------

    async def acquire(
        self,
        origin: object,
        progress: AttemptProgress,
        opener: Opener,
        *,
        expect_multiplexed: bool = False,
    ) -> PooledConnection:
        """A connection for ``origin``: a reusable one, or a new one from ``opener``.

        Waits at most ``pool_timeout`` for capacity (then ``WireError(POOL_TIMEOUT)``,
        ``NOT_SENT``). ``progress.connection_reused`` says which it was. With
        ``expect_multiplexed`` it first waits for a connection another attempt is opening to
        the same origin (see the module docstring). If cancelled, any connection or slot
        granted meanwhile is given back: the pool's counts stay exact. The connection must be
        given back with :meth:`release` or :meth:`discard`; :meth:`close` closes it meanwhile.
        """
        conn = await self._acquire(origin, progress, opener, expect_multiplexed)
        if not conn.multiplexed:
            self._lent.add(conn)
        return conn

    def take_idle(self, origin: object, progress: AttemptProgress) -> PooledConnection | None:
        """A connection for ``origin`` at once, or ``None``. Never blocks.

        An idle HTTP/1.1 connection, or a shared (multiplexed) one with a free stream, as
        :meth:`acquire` would hand out without waiting; give it back the same way. ``None``
        when there is none: then :meth:`acquire` decides whether to wait or connect.
        """
        if self.closed:
            return None
        conn = self._take(origin)
        if conn is None:
            return None
        progress.advance(Stage.POOL)
        progress.connection_reused = True
        if not conn.multiplexed:
            self._lent.add(conn)
        return conn

    async def _acquire(
        self,
        origin: object,
        progress: AttemptProgress,
        opener: Opener,
        expect_multiplexed: bool,
    ) -> PooledConnection:
        progress.advance(Stage.POOL)
        if self.closed:
            raise WireError(
                "the client is closed",
                stage=Stage.POOL,
                evidence=Evidence.NOT_SENT,
                category=FailureCategory.ADMISSION,
            )
        conn = self._take(origin)
        expect_multiplexed = expect_multiplexed and origin not in self._not_multiplexed
        if conn is None and expect_multiplexed and origin in self._opening:
            # Waiting once is enough: if that connection cannot carry us too (HTTP/1.1, full,
            # or it failed), we open our own rather than queue behind another connect.
            await self._opening[origin].wait()
            conn = self._take(origin)
        if conn is not None:
            progress.connection_reused = True
            return conn
        if not self._reserve(origin):
            conn = await self._wait(origin, progress)
            if conn is not None:
                progress.connection_reused = True
                return conn
        # We hold a slot: connect outside the bookkeeping.
        opening: trio.Event | None = None
        if expect_multiplexed and origin not in self._opening:
            opening = self._opening[origin] = trio.Event()
        try:
            conn = await opener(progress)
        except BaseException:
            self._release_slot(origin)
            raise
        finally:
            if opening is not None:
                del self._opening[origin]
                opening.set()
        if expect_multiplexed and not conn.multiplexed:
            self._not_multiplexed.add(origin)
        elif conn.multiplexed:
            self._not_multiplexed.discard(origin)
        if self.closed:
            conn.close()
            self._release_slot(origin)
            raise WireError(
                "the client closed while connecting",
                stage=progress.stage,
                evidence=Evidence.NOT_SENT,
                category=FailureCategory.ADMISSION,
            )
        if conn.multiplexed:
            self._shared.setdefault(origin, []).append(conn)
            shared = conn
            cast(MultiplexedConnection, conn).on_retired = lambda: self._forget_shared(shared)
        return conn

    def _take(self, origin: object) -> PooledConnection | None:
        shared = self._shared.get(origin)
        if shared:
            now = trio.current_time()
            for conn in list(shared):
                if conn.is_available():
                    if conn.expires_at <= now and not _streams(conn):
                        self._forget_shared(conn)  # idle longer than keepalive_expiry
                        continue
                    return conn
        stack = self._idle.get(origin)
        if not stack:
            return None
        now = trio.current_time()
        while stack:
            conn = stack.pop()
            del self._idle_lru[conn]
            if conn.expires_at > now and not conn.peer_closed():
                return conn
            self._drop(conn)
        return None

    def _can_open(self, origin: object) -> bool:
        if self._count.get(origin, 0) >= self.max_per_origin:
            return False
        if self._total < self.max_connections:
            return True
        # At the global limit: make room by closing the oldest idle connection elsewhere.
        for conn in self._idle_lru:
            if conn.origin_key != origin:
                self._idle[conn.origin_key].remove(conn)
                del self._idle_lru[conn]
                self._drop(conn, wake=False)
                return True
        return False

    def _reserve(self, origin: object) -> bool:
        if not self._can_open(origin):
            return False
        self._count[origin] = self._count.get(origin, 0) + 1
        self._total += 1
        return True

    async def _wait(self, origin: object, progress: AttemptProgress) -> PooledConnection | None:
        waiter = _Waiter(origin)
        self._waiters.append(waiter)
        limit = self.pool_timeout if self.pool_timeout is not None else float("inf")
        try:
            with trio.move_on_after(limit):
                await waiter.event.wait()
        except BaseException:
            self._abandon(waiter)
            raise
        if not waiter.granted:
            self._abandon(waiter)
            raise WireError(
                f"no connection to {origin} became available within pool_timeout "
                f"({self.pool_timeout}s); limits: max_connections={self.max_connections}, "
                f"max_connections_per_origin={self.max_per_origin}, "
                f"{self.active_count} active",
                stage=Stage.POOL,
                evidence=Evidence.NOT_SENT,
                category=FailureCategory.POOL_TIMEOUT,
            )
        if waiter.conn is None and self.closed:
            self._release_slot(origin)
            raise WireError(
                "the client is closed",
                stage=Stage.POOL,
                evidence=Evidence.NOT_SENT,
                category=FailureCategory.ADMISSION,
            )
        return waiter.conn

    def _abandon(self, waiter: _Waiter) -> None:
        """A waiter leaves (timeout, cancellation): give back anything it was granted."""
        if waiter.granted:
            if waiter.conn is not None:
                self.release(waiter.conn)
            else:
                self._release_slot(waiter.origin)
        else:
            self._waiters.remove(waiter)

    # --- release -----------------------------------------------------------------------------

    def release(self, conn: PooledConnection) -> None:
        """Return ``conn`` after a request: kept alive if reusable, else closed. Never blocks."""
        if conn.multiplexed:
            if conn.closed or not conn.is_reusable():
                self._forget_shared(conn)
                return
            if not _streams(conn):
                expiry = self.keepalive_expiry
                if self.closed or (expiry is not None and expiry <= 0):
                    self._forget_shared(conn)
                    return
                now = trio.current_time()
                conn.expires_at = now + expiry if expiry is not None else float("inf")
            self._grant_shared(conn)
            return
        self._lent.discard(conn)
        if self.closed or conn.closed or not conn.is_reusable():
            self._drop(conn)
            return
        for waiter in self._waiters:
            if waiter.origin == conn.origin_key:
                self._waiters.remove(waiter)
                waiter.granted, waiter.conn = True, conn
                self._lent.add(conn)
                waiter.event.set()
                return
        expiry = self.keepalive_expiry
        if expiry is not None and expiry <= 0:
            self._drop(conn)
            return
        conn.expires_at = trio.current_time() + (expiry if expiry is not None else float("inf"))
        self._idle.setdefault(conn.origin_key, []).append(conn)
        self._idle_lru[conn] = None

    def discard(self, conn: PooledConnection) -> None:
        """``conn`` broke or was interrupted: close it and free its slot.

        A multiplexed connection is only closed if it is itself dead: a failed or cancelled
        HTTP/2 stream has already reset itself, and the connection carries the other streams.
        """
        if conn.multiplexed:
            self.release(conn)
            return
        self._lent.discard(conn)
        conn.close()
        self._drop(conn)

    def _forget_shared(self, conn: PooledConnection) -> None:
        """A multiplexed connection is finished with: close it and free its slot, once.

        Also the connection's ``on_retired`` hook, so it may run from its reader task.
        """
        shared = self._shared.get(conn.origin_key)
        if shared and conn in shared:
            shared.remove(conn)
            if not shared:
                del self._shared[conn.origin_key]
            conn.close()
            self._release_slot(conn.origin_key)

    def _grant_shared(self, conn: PooledConnection) -> None:
        """A stream finished on a multiplexed connection: wake a waiter for its origin."""
        for waiter in self._waiters:
            if waiter.origin == conn.origin_key and conn.is_available():
                self._waiters.remove(waiter)
                waiter.granted, waiter.conn = True, conn
                waiter.event.set()
                return

    def _drop(self, conn: PooledConnection, *, wake: bool = True) -> None:
        conn.close()
        self._release_slot(conn.origin_key, wake=wake)

    def _release_slot(self, origin: object, *, wake: bool = True) -> None:
        remaining = self._count.get(origin, 0) - 1
        if remaining > 0:
            self._count[origin] = remaining
        else:
            self._count.pop(origin, None)
        self._total -= 1
        if wake:
            self._wake()

    def _wake(self) -> None:
        """A slot is free: grant it to the first waiter that may open a connection."""
        for waiter in self._waiters:
            if self._reserve(waiter.origin):
                self._waiters.remove(waiter)
                waiter.granted = True
                waiter.event.set()
                return

    # --- shutdown ----------------------------------------------------------------------------

    def close(self) -> None:
        """Close every connection, idle, shared or lent; waiters are released with an error.

        A lent connection is closed under its user, whose next read or write fails; its slot
        is freed when the user gives it back (:meth:`release` or :meth:`discard`).
        """
        self.closed = True
        for conn in list(self._idle_lru):
            self._idle[conn.origin_key].remove(conn)
            del self._idle_lru[conn]
            self._drop(conn, wake=False)
        for conns in list(self._shared.values()):
            for conn in list(conns):
                conn.close()
        for conn in list(self._lent):
            conn.close()
        while self._waiters:
            waiter = self._waiters.popleft()
            waiter.granted = True  # a slot, refused again on wake-up because we are closed
            self._count[waiter.origin] = self._count.get(waiter.origin, 0) + 1
            self._total += 1
            waiter.event.set()


def _streams(conn: PooledConnection) -> int:
    return cast(MultiplexedConnection, conn).active_streams
