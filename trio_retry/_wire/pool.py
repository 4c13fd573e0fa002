"""The connection pool: who gets which connection, and the awaits around that decision.

One job: decide which attempt gets which connection, or which attempt may open one, under
``max_connections`` (across all origins) and ``max_connections_per_origin``. Every decision is
made synchronously, in the method that changed the state; the only awaits are a waiter's sleep
and the opener (which runs outside the bookkeeping). The synchronous bookkeeping is a
collaborator the pool owns, :class:`~.pool_book.PoolBook` (the rules), which writes its
decisions down in a :class:`~.pool_ledger.Ledger` (the counts and orders; the state is
described there). This module adds the awaits: :meth:`ConnectionPool.acquire`'s sleep, the
openings, run inline or in the bound nursery.

The rules, in the order they are applied:

1. A connection of the caller's origin that can take the request is used at once (an idle
   HTTP/1.1 one, or an HTTP/2 one with a free stream).
2. An attempt that expects HTTP/2 joins the connection its origin is already opening: the
   connection is shared, up to the server's concurrent-stream limit, instead of one connection
   per waiter. The opening runs in a task of the nursery given to :meth:`~ConnectionPool.bind`,
   not in the attempt that started it, so cancelling that attempt does not lose the
   connection: it is finished and handed to the others (or kept idle). A GOAWAY ends a
   connection's new streams; the next attempts coalesce on one new opening in the same way.
   A protocol whose connections say ``per_origin = 1`` (HTTP/3: RFC 9114 §3.3, clients SHOULD
   NOT open more than one connection to an address and port) caps its origin at that one
   connection: a call past the server's stream limit queues for a stream of it (rule 4, within
   ``pool_timeout``) instead of opening another; HTTP/2 opens another (up to
   ``max_connections_per_origin``). Such a connection tells the pool at its GOAWAY
   (``on_draining``): it then drains outside the counts and its successor opens at once.
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
limit and the pool has a free slot or an idle connection to close (but for a waiter sharing
its origin's HTTP/2 opening, rule 2: that connection is its).

What a step costs does not grow with the number of waiters: a waiter enters its origin's queue
once and leaves it once, in arrival order, and an opening that cannot carry every waiter
sharing it leaves the rest in their place (``pool_ledger.py`` says how, and what it replaced:
a queue sorted again per waiter, which made 10,000 calls at once cost five to fifteen times
what 1,000 do).

:meth:`~ConnectionPool.__repr__` ("1 active, 2 idle, 0 waiting") is a test oracle.

Cancellation: a waiter cancelled after it was granted a connection or slot gives it back, so
the counts stay exact.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import trio

from .._core.errors import RejectReason
from .._core.evidence import Evidence, FailureCategory, Stage
from .clock import timeout_message, until
from .contract import Opener, PooledConnection
from .pool_book import PoolBook
from .pool_ledger import (
    CONN,
    FAILED,
    SLOT,
    WAITING,
    Opening,
    Origin,
    Waiter,
    closed_error,
)
from .progress import AttemptProgress, WireError
from .timekeeper import Timekeeper

__all__ = ["ConnectionPool"]


_POOL = Stage.POOL  # (a global: an enum attribute is slow on Python 3.11)


class ConnectionPool:
    """Keep-alive pool with global and per-origin limits; see the module docstring."""

    #: ``release(conn)``: give ``conn`` back after a request: kept if reusable, else closed.
    #: Never blocks. It is the book's own method (:meth:`.PoolBook.release`), bound in
    #: ``__init__`` rather than forwarded by a method here: every request calls it, and a
    #: forwarding frame costs each about 600 instructions (callgrind).
    release: Callable[[PooledConnection], None]

    def __init__(
        self,
        *,
        max_connections: int = 100,
        max_connections_per_origin: int | None = None,
        keepalive_expiry: float | None = 5.0,
        pool_timeout: float | None = None,
    ) -> None:
        self._book = PoolBook(
            max_connections=max_connections,
            max_connections_per_origin=max_connections_per_origin,
            keepalive_expiry=keepalive_expiry,
            pool_timeout=pool_timeout,
        )
        self._ledger = self._book.ledger
        self._nursery: trio.Nursery | None = None
        self._timekeeper: Timekeeper | None = None
        self.release = self._book.release

    def bind(self, nursery: trio.Nursery, timekeeper: Timekeeper | None = None) -> None:
        """Run HTTP/2 openings in ``nursery`` (the client's), so that they survive the
        cancellation of the attempt that started them. Without it, every attempt opens its
        own connections inline. From here on the pool reads the run's clock directly, and a
        waiter's ``pool_timeout`` is kept on ``timekeeper``'s pool lane while it runs (when
        its limit is the pool's)."""
        self._nursery = nursery
        self._timekeeper = timekeeper
        self._book.bind(self._start_opening, trio.lowlevel.current_clock().current_time)

    # --- what it holds (the book's and its ledger's figures) ----------------------------------

    @property
    def book(self) -> PoolBook:
        """The synchronous bookkeeping, to read (tests, debugging); change it through the
        pool's methods only."""
        return self._book

    @property
    def max_connections(self) -> int:
        return self._ledger.max_connections

    @property
    def max_per_origin(self) -> int:
        return self._ledger.max_per_origin

    @property
    def opened(self) -> int:
        """Connections opened over the pool's life (an observation for tests)."""
        return self._book.opened

    @property
    def closed(self) -> bool:
        return self._book.closed

    @property
    def idle_count(self) -> int:
        """Connections with nothing to do: idle HTTP/1.1 ones and HTTP/2 ones with no stream."""
        return self._ledger.idle_count

    @property
    def total(self) -> int:
        return self._ledger.total

    @property
    def active_count(self) -> int:
        """Connections not idle: busy, carrying streams, or still being opened."""
        return self._ledger.active_count

    @property
    def waiting(self) -> int:
        """Attempts waiting: for a slot, or for the HTTP/2 connection being opened."""
        return self._ledger.waiting

    def origin_count(self, origin: object) -> int:
        """Connections of ``origin`` (idle, busy, multiplexed, being opened)."""
        return self._ledger.origin_count(origin)

    def origin_counts(self) -> dict[object, tuple[int, int, int]]:
        """``{pool key: (active, idle, waiting)}`` per origin with a connection or a waiter:
        see :meth:`.Ledger.origin_counts`."""
        return self._ledger.origin_counts()

    def __repr__(self) -> str:
        return f"<ConnectionPool {self._ledger.summary()}>"

    def describe(self) -> str:
        """The repr, then one line per origin (for debugging and test failure messages)."""
        return "\n".join([repr(self), *(f"  {o!r}" for o in self._ledger.origins.values())])

    # --- lending --------------------------------------------------------------------------

    async def acquire(
        self,
        origin: object,
        progress: AttemptProgress,
        opener: Opener | Waiter,
        *,
        expect_multiplexed: bool = False,
        scopes: dict[trio.CancelScope, AttemptProgress] | None = None,
        joined: bool = False,
    ) -> PooledConnection:
        """A connection for ``origin``: a usable pooled one, a shared or new one.

        Waits at most ``pool_timeout`` in the queue (then ``WireError(POOL_TIMEOUT)``,
        ``NOT_SENT``); the wait for an HTTP/2 connection being opened is bounded by the
        opening itself (its connect and TLS timeouts) and the caller's deadline: a waiter's
        ``pool_timeout`` counts from its arrival or from the end of the last opening it
        shared, whichever came later. The limit is kept on the client's timekeeper (its pool
        lane: the waiter is the entry, woken by :meth:`.Waiter.expire` when it falls due), not
        by a cancel scope per waiter (at 10,000 calls at once, 9,000 wait for an HTTP/2
        stream, and a scope each was about a fifth of their cost, issue #41); in a scope
        (``clock.until``) when there is no timekeeper running, or when a restarted limit would
        fall due before waits armed since (the lane stays in due order). An opening does not
        touch its waiters' timers (one per waiter: the cost of an opening would be its number
        of waiters); each waiter looks when its own runs out (:func:`_restart`).
        ``progress.connection_reused`` says whether the connection served a request before.
        Failures of the opening are raised as :class:`WireError` (``NOT_SENT``), to every
        attempt that waited for it.

        ``scopes``: the caller runs in no cancel scope that ``drain()`` or ``aclose()`` would
        cancel. They end its wait with :meth:`fail_waiters` (or :meth:`close`), also when it
        was granted a connection or slot just before and has not run since (it gives it back
        and raises that error); a connection it opens itself (a slot) is opened in a cancel
        scope registered in ``scopes`` (the client's, which ``aclose()`` cancels), whose
        cancellation is raised as a ``WireError`` (``CONNECTION_BROKEN``, ``NOT_SENT``). At
        10,000 calls at once, 9,000 of which queue for an HTTP/2 stream, a scope each was a
        quarter of what a queued call held, visited by every full pass of the garbage
        collector (issue #41).

        ``joined``: ``opener`` is a waiter that joined the queue with :meth:`queue` (and
        parked if that said so): this goes on from there, with the same outcome as if it had
        waited here. (Then ``origin`` and ``expect_multiplexed`` are not looked at again.)

        If cancelled, anything granted meanwhile is given back and an HTTP/2 opening carries on
        for the others: the counts stay exact. The connection must be given back with
        :meth:`release` or :meth:`discard`; :meth:`close` closes it meanwhile.
        """
        parked = False  # it waited once already, parked by its caller (queue())
        if joined:
            assert isinstance(opener, Waiter)
            waiter = opener
            parked = waiter.parked
            if parked:
                self._unpark(waiter)
        else:
            got = self._arrive(origin, progress, opener, expect_multiplexed)
            if not isinstance(got, Waiter):
                return got
            waiter = got
        if waiter.state == WAITING or parked:
            # The wait, here rather than in a coroutine of its own: one frame less for each of
            # thousands of calls queued at once (issue #41).
            ledger = self._ledger
            book = self._book
            limit = book.pool_timeout
            if parked:
                failures = waiter.failures
                arrived = waiter.arrived
            else:
                failures = ledger.failures
                arrived = book.now()
            deadline = math.inf if limit is None else arrived + limit
            keeper = self._timekeeper
            lane = keeper.pool if keeper is not None and keeper.running else None
            if lane is not None and lane.limit != limit:
                lane = None
            on_lane = True  # the limit falls due limit seconds from now (the lane's one limit)
            try:
                while True:
                    # Parked until resolve() wakes it (Waiter.wake), or its pool_timeout (the
                    # lane: Waiter.expire; a scope: the waiter's abort, Waiter.__call__) or the
                    # caller cancels the park: it is WAITING each time here. (``await waiter``:
                    # the waiter is its own park, ``park.Parking``: nothing of trio's is held
                    # while it sleeps, four objects fewer per queued call, issue #41.)
                    if parked:  # its first park was its caller's, on the lane (queue())
                        parked = False
                    elif limit is None:
                        waiter.task = trio.lowlevel.current_task()
                        await waiter
                    elif on_lane and lane is not None and keeper is not None and keeper.running:
                        # (Lane.arm and Lane.disarm without their calls, two fewer per queued
                        # call: on the lane, ``deadline`` is ``limit`` from the time read on
                        # arrival or on restart, just before, which is what arm() would set.)
                        waiter.task = trio.lowlevel.current_task()
                        pending = lane.pending
                        pending[waiter] = deadline
                        try:
                            await waiter
                        finally:
                            pending.pop(waiter, None)
                    else:
                        waiter.task = trio.lowlevel.current_task()
                        with until(deadline):
                            await waiter
                    if waiter.state != WAITING or limit is None:
                        break
                    now = book.now()
                    later = _restart(waiter, arrived, limit, now)
                    if later is None:
                        break
                    deadline = later
                    on_lane = later == now + limit  # (else earlier than waits armed since)
            except BaseException:
                book.abandon(waiter)
                raise
            if waiter.state == WAITING:
                why = self._ledger.why_full(waiter.origin)  # (before it forgets the waiter)
                book.abandon(waiter)
                raise WireError(
                    timeout_message("pool", limit, why),
                    stage=Stage.POOL,
                    evidence=Evidence.NOT_SENT,
                    category=FailureCategory.POOL_TIMEOUT,
                )
            if scopes is not None and ledger.failures != failures and waiter.state != FAILED:
                # fail_waiters() came after it was granted, before it ran: it ends too.
                self._book.abandon(waiter)
                waiter.error = ledger.failed_with()
                waiter.opened = None
        if waiter.state != SLOT:
            return _outcome(waiter, progress)
        # Open a connection in the calling task, under the slot the waiter holds; if that
        # fails or is cancelled, the slot goes to the next waiter. (Here rather than in a
        # coroutine of its own: one frame less for each of thousands of calls connecting at
        # once, issue #41.) An unscoped caller opens in a scope of its own that aclose()
        # cancels, and the opening's bounds end their waits by cancelling it too
        # (``clock.opening``): one scope for the opening, none for its connect or TLS.
        conn: PooledConnection | None = None
        scope = None
        if scopes is not None:
            scope = progress.opening = trio.CancelScope()
            scopes[scope] = progress
        try:
            if scope is None:
                conn = await waiter.open(progress)
            else:
                # Entered and left by hand: a `with` statement's frame would hold the scope's
                # bound __exit__ while the opening waits, one object more for each of
                # thousands of calls connecting at once (issue #41). The same semantics:
                # the scope's own Cancelled (aclose()) is swallowed, leaving conn None.
                scope.__enter__()
                try:
                    conn = await waiter.open(progress)
                except BaseException as exc:
                    if not scope.__exit__(type(exc), exc, exc.__traceback__):
                        raise
                else:
                    scope.__exit__(None, None, None)
        except BaseException:
            self._book.abandon(waiter)
            raise
        finally:
            if scope is not None:
                assert scopes is not None
                del scopes[scope]
                progress.opening = None
        if conn is None:  # aclose() cancelled the opening's scope
            self._book.abandon(waiter)
            raise WireError(
                "the client closed while connecting",
                stage=progress.stage,
                evidence=Evidence.NOT_SENT,
                category=FailureCategory.CONNECTION_BROKEN,
            )
        if not self._book.connected(waiter, conn):
            raise WireError(
                "the client closed while connecting",
                stage=progress.stage,
                evidence=Evidence.NOT_SENT,
                category=FailureCategory.ADMISSION,
                reason=RejectReason.CLOSED,
            )
        return conn

    def _arrive(
        self,
        origin: object,
        progress: AttemptProgress,
        opener: Opener | Waiter,
        expect_multiplexed: bool,
    ) -> PooledConnection | Waiter:
        """Rule 1 at once (a connection), else the caller's :class:`Waiter` (rules 2 to 4)."""
        progress.advance(_POOL)
        book = self._book
        if book.closed:
            raise closed_error()
        conn = book.take(origin)
        if conn is not None:
            progress.connection_reused = True
            return conn
        return book.join(origin, opener, expect_multiplexed)

    def queue(
        self,
        origin: object,
        progress: AttemptProgress,
        waiter: Waiter,
        *,
        expect_multiplexed: bool = False,
    ) -> bool | None:
        """For an attempt :meth:`take_idle` had nothing for, in the same step (rule 1 is not
        asked again): rules 2 to 4 at once, with no coroutine of the pool's.

        ``True``: ``waiter`` (its own, the one its caller parks) is queued and its
        ``pool_timeout`` armed on the timekeeper's pool lane; the caller parks it in its own
        frame (``await waiter``) until it is woken (served, failed, or its limit due), then
        calls :meth:`acquire` with ``joined=True``, which goes on as if it had waited there.
        Parked so, a queued call holds neither the pool's coroutine nor the frames its caller
        would have awaited it from: at 10,000 calls at once, 9,000 queue for an HTTP/2 stream,
        and those were two of the dozen objects each held (issue #41). Cancelled while parked,
        the caller calls :meth:`leave`.

        ``False``: served at once (a slot to open a connection under, or an error): call
        :meth:`acquire` with ``joined=True`` without parking. ``None``: nothing done, as it
        cannot wait that way (no timekeeper running, or a lane of another limit): call
        :meth:`acquire` as usual.
        """
        book = self._book
        limit = book.pool_timeout
        keeper = self._timekeeper
        lane = None
        if limit is not None:
            lane = keeper.pool if keeper is not None and keeper.running else None
            if lane is None or lane.limit != limit:
                return None
        if book.closed:
            return None  # (acquire raises the closed pool's error)
        progress.advance(_POOL)
        joined = book.join(origin, waiter, expect_multiplexed)
        assert joined is waiter  # (it is its own waiter: the one its caller parks)
        if waiter.state != WAITING:
            return False
        waiter.failures = self._ledger.failures
        waiter.parked = True
        waiter.task = trio.lowlevel.current_task()
        now = waiter.arrived = book.now()
        if lane is not None:
            lane.pending[waiter] = now + lane.limit  # (Lane.arm, without its call)
        return True

    def leave(self, waiter: Waiter) -> None:
        """``waiter``, parked by its caller after :meth:`queue`, was cancelled (or its caller
        raised): it leaves, and anything it was granted meanwhile goes back."""
        self._unpark(waiter)
        self._book.abandon(waiter)

    def _unpark(self, waiter: Waiter) -> None:
        """``waiter``'s park after :meth:`queue` is over: its lane entry goes (if still there)."""
        waiter.parked = False
        keeper = self._timekeeper
        if keeper is not None and keeper.pool is not None:
            keeper.pool.disarm(waiter)

    def take_idle(self, origin: object, progress: AttemptProgress) -> PooledConnection | None:
        """A connection for ``origin`` at once, or ``None``. Never blocks.

        An idle HTTP/1.1 connection, or an HTTP/2 one with a free stream, as :meth:`acquire`
        would hand out without waiting; give it back the same way. ``None`` when there is none
        (or the pool is closed): then :meth:`acquire` decides whether to wait or connect.
        """
        conn = self._book.take(origin)
        if conn is None:
            return None
        progress.advance(_POOL)
        progress.connection_reused = True
        return conn

    def hold(self, conn: PooledConnection) -> None:
        """``conn`` (or a stream on it) stays lent to a response whose body the caller reads in
        a ``stream()`` block, until :meth:`unhold`. Counted only: a ``PoolTimeout`` says how
        many such responses hold connections (the caller's own, which only it can give back)."""
        self._ledger.hold(conn.origin_key, 1)

    def unhold(self, conn: PooledConnection) -> None:
        """The response :meth:`hold` counted gave ``conn`` back (call it before
        :meth:`release` or :meth:`discard`)."""
        self._ledger.hold(conn.origin_key, -1)

    def why_full(self, origin: object) -> str:
        """Why a call to ``origin`` waits for a connection now (the words of a
        ``PoolTimeout``), for a call deadline that ran out while it waited."""
        ledger = self._ledger
        state = ledger.origins.get(origin)
        return ledger.why_full(
            state if state is not None else Origin(origin, ledger.max_per_origin), queued=False
        )

    def discard(self, conn: PooledConnection) -> None:
        """``conn`` broke or was interrupted: close it and free its slot. Never blocks.

        A multiplexed connection is only closed if it is itself dead: a failed or cancelled
        HTTP/2 stream has already reset itself, and the connection carries the other streams.
        """
        self._book.discard(conn)

    def fail_waiters(self, make_error: Callable[[], BaseException]) -> int:
        """End every attempt waiting in the pool with ``make_error()`` (one each); return how
        many. Openings in progress carry on and their connections are kept. For ``drain()``:
        attempts still waiting for a connection have sent nothing."""
        return self._book.fail_waiters(make_error)

    def close(self) -> None:
        """Close every connection, idle, shared or lent; waiters and openings end with an error.

        A lent connection is closed under its user, whose next read or write fails; its slot
        is freed when the user gives it back (:meth:`release` or :meth:`discard`).
        """
        self._book.close()

    # --- the awaits -----------------------------------------------------------------------

    def _start_opening(self, opening: Opening, opener: Opener) -> None:
        """The book's way to run an HTTP/2 opening in the background (``RuntimeError`` once
        the nursery is closing)."""
        assert self._nursery is not None
        self._nursery.start_soon(self._open, opening, opener)

    async def _open(self, opening: Opening, opener: Opener) -> None:
        """The background task of an opening: never raises (but for the nursery's own
        cancellation, after the bookkeeping is done)."""
        book = self._book
        progress = AttemptProgress(book.now())
        progress.advance(Stage.POOL)
        progress.opening = opening.scope  # (its connect and TLS bounds end it: clock.opening)
        conn: PooledConnection | None = None
        error: BaseException | None = None
        try:
            with opening.scope:
                conn = await opener(progress)
        except Exception as exc:  # delivered to the waiters, raised in their tasks
            error = exc
        except BaseException:
            book.opening_finished(opening, progress, None, closed_error())
            raise
        if conn is None and error is None:  # the pool closed while connecting
            error = closed_error()
        book.opening_finished(opening, progress, conn, error)


def _outcome(waiter: Waiter, progress: AttemptProgress) -> PooledConnection:
    """What a waiter was given (a connection, or an error, raised), as :meth:`acquire`
    returns it."""
    if waiter.state == CONN:
        conn = waiter.conn
        assert conn is not None
        if waiter.opened is not None:  # a fresh connection, opened by the pool for us
            _merge(progress, waiter.opened)
        else:
            progress.connection_reused = True
        return conn
    assert waiter.state == FAILED
    error = waiter.error
    assert error is not None
    if waiter.opened is not None:  # an opening failed: its try was of its protocol
        progress.http_version = waiter.opened.http_version
    if isinstance(error, WireError):
        progress.advance(error.stage)
        raise WireError(
            str(error),
            stage=error.stage,
            evidence=error.evidence,
            category=error.category,
            # (a QUIC handshake that failed: every waiter goes again over TCP, uncounted)
            reconnect=error.reconnect,
        ) from error
    raise error


def _restart(waiter: Waiter, arrived: float, limit: float, now: float) -> float | None:
    """When ``waiter``'s ``pool_timeout`` (``limit``), which ran out now, really runs out; or
    ``None``: now. A multiplexed waiter counts nothing while it shares its origin's opening (it
    looks again ``limit`` from now), and counts from the end of the last opening it shared."""
    if not waiter.multiplexed:
        return None
    origin = waiter.origin
    if origin.opening is not None:
        return now + limit
    due = origin.opening_ended + limit
    return due if origin.opening_ended > arrived and due > now else None


def _merge(progress: AttemptProgress, opened: AttemptProgress) -> None:
    """An attempt served by a connection the pool opened for it takes the opening's stages and
    timings, as if it had opened the connection itself."""
    progress.advance(opened.stage)
    for key in ("connect", "tls"):
        if key in opened.timings:
            progress.timings.setdefault(key, opened.timings[key])
