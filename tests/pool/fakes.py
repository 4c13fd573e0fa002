"""Fake connections and a step driver for the pool's bookkeeping tests.

The driver runs real pool code in a real Trio run: every "call" is a task blocked in
``acquire`` or holding a connection; every opening is a fake opener blocked until the test
says how it ends. With ``queued=True`` (or :data:`Driver.queued_default`) a call waits as the
attempt runner's does (``_call/attempt.py``): ``take_idle``, then ``queue``, parked in its own
frame, then ``acquire(joined=True)``; ``leave`` when cancelled while parked. After each step
:func:`check_invariants` compares the pool's own counts with what the fakes know
(connections opened and not closed, openings in progress, tasks waiting).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable
from dataclasses import dataclass, field

import trio
import trio.testing

from trio_retry._core.evidence import Evidence, FailureCategory, Stage
from trio_retry._wire import pool_ledger
from trio_retry._wire.contract import Opener, PooledConnection
from trio_retry._wire.pool import ConnectionPool
from trio_retry._wire.pool_ledger import Waiter
from trio_retry._wire.progress import AttemptProgress, WireError


class FakeConnection:
    """Enough of HTTP11Connection / HTTP2Connection for the pool."""

    def __init__(
        self,
        origin: object,
        *,
        multiplexed: bool,
        stream_limit: int = 2,
        per_origin: int | None = None,
    ) -> None:
        self.origin_key = origin
        self.multiplexed = multiplexed
        self.stream_limit = stream_limit
        #: As HTTP3Connection's: at most this many such connections per origin (None: no rule).
        self.per_origin = per_origin
        #: Told when GOAWAY makes it drain (set by the pool where the origin is capped).
        self.on_draining: object = None
        self.closed = False
        self.goaway = False
        #: As a connection its dark-connection watch made suspect (``contract.DarkWatch``).
        self.suspect = False
        self.streams = 0  # streams the "client" has open on it (HTTP/2)
        self.expires_at = math.inf
        self.on_retired: object = None

    def is_available(self) -> bool:
        return not self.closed and not self.goaway and not self.suspect

    def lift(self) -> None:
        """No longer suspect: tell the pool, as ``DarkWatch.received`` does."""
        self.suspect = False
        hook = getattr(self, "on_available", None)
        if callable(hook):
            hook()

    def is_reusable(self) -> bool:
        return not self.closed

    def peer_closed(self) -> bool:
        return self.closed

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            hook, self.on_retired = self.on_retired, None
            if callable(hook):
                hook()

    def attempt_expired(self, progress: object) -> None:
        raise NotImplementedError  # the pool never calls it (the attempt does)

    def stream_done(self) -> None:
        """As HTTP2Connection: after GOAWAY the last finished stream retires it."""
        self.streams -= 1
        if self.goaway and self.streams == 0:
            self.close()

    async def send_request(self, *args: object, **kwargs: object) -> object:
        raise NotImplementedError


@dataclass
class Opening:
    origin: object
    task: trio.lowlevel.Task
    done: trio.Event = field(default_factory=trio.Event)
    outcome: str = ""  # "ok" or "fail", set by the test


@dataclass
class Call:
    number: int
    origin: object
    multiplexed: bool
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    state: str = "acquiring"  # acquiring -> holding -> done
    conn: FakeConnection | None = None
    order: int = -1  # when it got its connection (serving order)
    task: trio.lowlevel.Task | None = None
    command: trio.Event = field(default_factory=trio.Event)
    how: str = ""  # "release", "discard" or "die", set by the test
    error: BaseException | None = None


def queued_call(opener: Opener) -> Waiter:
    """A call's own waiter, as the attempt runner is its own (``ConnectionPool.queue``): of
    the class the ledger makes waiters of (a test may have replaced it)."""
    base: type[Waiter] = pool_ledger.Waiter
    waiter = object.__new__(base)
    waiter.opener = opener
    waiter.parked = False
    waiter.task = None
    return waiter


class Driver:
    """Starts calls and openings against a pool, step by step."""

    #: Whether calls wait as the attempt runner's do (``queue``) when not told (conftest.py).
    queued_default = False

    def __init__(
        self,
        pool: ConnectionPool,
        nursery: trio.Nursery,
        *,
        answers_h2: frozenset[object] = frozenset(),
        stream_limit: int = 2,
        one_per_origin: frozenset[object] = frozenset(),
        queued: bool | None = None,
    ) -> None:
        self.queued = self.queued_default if queued is None else queued
        self.pool = pool
        self.nursery = nursery
        self.answers_h2 = answers_h2 | one_per_origin
        #: Origins whose connections say ``per_origin = 1`` (as HTTP/3's).
        self.one_per_origin = one_per_origin
        self.stream_limit = stream_limit
        self.calls: list[Call] = []
        self.openings: list[Opening] = []
        self.connections: list[FakeConnection] = []
        self.served = 0

    # --- what the pool sees ------------------------------------------------------------------

    async def _opener(self, progress: AttemptProgress, *, origin: object) -> PooledConnection:
        opening = Opening(origin, trio.lowlevel.current_task())
        self.openings.append(opening)
        progress.advance(Stage.CONNECT)
        try:
            await opening.done.wait()
        finally:
            self.openings.remove(opening)
        if opening.outcome == "fail":
            raise WireError(
                "connect refused (scripted)",
                stage=Stage.CONNECT,
                evidence=Evidence.NOT_SENT,
                category=FailureCategory.CONNECT,
            )
        conn = FakeConnection(
            origin,
            multiplexed=origin in self.answers_h2,
            stream_limit=self.stream_limit,
            per_origin=1 if origin in self.one_per_origin else None,
        )
        self.connections.append(conn)
        return conn

    async def _call(self, call: Call) -> None:
        call.task = trio.lowlevel.current_task()
        progress = AttemptProgress(trio.current_time())
        with call.scope:
            try:
                conn = await self._acquire(call, progress)
            except WireError as exc:
                call.error = exc
                call.state = "done"
                return
            call.conn = conn  # type: ignore[assignment]
            assert isinstance(conn, FakeConnection)
            assert conn.origin_key == call.origin
            assert not conn.closed
            if conn.multiplexed:
                conn.streams += 1
                assert conn.streams <= conn.stream_limit, "more streams lent than allowed"
            call.order = self.served
            self.served += 1
            call.state = "holding"
            try:
                await call.command.wait()
            finally:
                call.state = "done"
                self._give_back(call, conn)
        if call.scope.cancelled_caught and call.state != "done":
            call.state = "done"
        call.state = "done"

    async def _acquire(self, call: Call, progress: AttemptProgress) -> PooledConnection:
        pool = self.pool

        def opener(p: AttemptProgress) -> Awaitable[PooledConnection]:
            return self._opener(p, origin=call.origin)

        if self.queued:
            conn = pool.take_idle(call.origin, progress)
            if conn is not None:
                return conn
            waiter = queued_call(opener)
            joined = pool.queue(call.origin, progress, waiter, expect_multiplexed=call.multiplexed)
            if joined is not None:
                if joined:
                    try:
                        await waiter
                    except BaseException:
                        pool.leave(waiter)
                        raise
                return await pool.acquire(call.origin, progress, waiter, joined=True)
        return await pool.acquire(
            call.origin, progress, opener, expect_multiplexed=call.multiplexed
        )

    def _give_back(self, call: Call, conn: FakeConnection) -> None:
        if call.how == "die":
            conn.close()
        if conn.multiplexed:
            conn.stream_done()
        if call.how == "release":
            self.pool.release(conn)
        else:
            self.pool.discard(conn)

    # --- steps -------------------------------------------------------------------------------

    def start(self, origin: object, *, multiplexed: bool) -> Call:
        call = Call(len(self.calls), origin, multiplexed)
        self.calls.append(call)
        self.nursery.start_soon(self._call, call)
        return call

    async def start_in_order(self, origins: list[object], *, multiplexed: bool) -> list[Call]:
        """Start calls one after the other (Trio runs new tasks in no set order)."""
        calls = []
        for origin in origins:
            calls.append(self.start(origin, multiplexed=multiplexed))
            await self.settle()
        return calls

    def holders(self) -> list[Call]:
        return [c for c in self.calls if c.state == "holding"]

    def acquiring(self) -> list[Call]:
        return [c for c in self.calls if c.state == "acquiring"]

    def end(self, call: Call, how: str) -> None:
        call.how = how
        call.command.set()

    def finish_opening(self, opening: Opening, outcome: str) -> None:
        opening.outcome = outcome
        opening.done.set()

    def goaway(self, conn: FakeConnection) -> None:
        conn.goaway = True
        if conn.streams == 0:
            conn.close()
        elif callable(conn.on_draining):
            conn.on_draining()

    async def settle(self) -> None:
        await trio.testing.wait_all_tasks_blocked()

    # --- the oracle --------------------------------------------------------------------------

    def check_invariants(self) -> None:
        pool = self.pool
        text = pool.describe()
        # (a connection a capped origin set aside while it drains is open, and not counted)
        live = [c for c in self.connections if not c.closed and c not in pool.book.draining]
        # Every connection the pool counts is a socket the fakes know is open, or an opening.
        assert pool.total == len(live) + len(self.openings), text
        assert pool.total <= pool.max_connections, text
        for origin in {c.origin_key for c in live} | {o.origin for o in self.openings}:
            count = sum(c.origin_key == origin for c in live)
            count += sum(o.origin == origin for o in self.openings)
            assert pool.origin_count(origin) == count, (origin, text)
            assert count <= pool.max_per_origin, (origin, text)
            if origin in self.one_per_origin:
                assert count <= 1, ("a second connection to a one-per-origin origin", text)
        # The repr is the oracle: its numbers are these.
        inline = {o.task for o in self.openings}
        asleep = [c for c in self.acquiring() if c.task not in inline]
        assert f"{pool.active_count} active, {pool.idle_count} idle, " in repr(pool)
        assert f"{len(asleep)} waiting" in repr(pool), (len(asleep), text)
        assert pool.active_count + pool.idle_count == pool.total
        idle = [c for c in live if c.streams == 0 and not _held(self, c)]
        assert pool.idle_count == len(idle), text
        # No waiter asleep while something it could use is free.
        for state in pool.book.ledger.origins.values():
            if state.head() is not None:  # a waiter a slot or a whole connection would serve
                assert not state.idle, ("waiter asleep beside an idle connection", text)
                if state.count < state.cap:
                    assert pool.total >= pool.max_connections, ("waiter asleep, slot free", text)
                    assert pool.idle_count == 0, ("waiter asleep, idle connection to close", text)
            if state.mux:  # waiters a free stream would serve
                for conn, lent in state.shared.items():
                    assert not (conn.is_available() and lent < conn.stream_limit), (  # type: ignore[attr-defined]
                        "waiter asleep beside a free stream",
                        text,
                    )


def _held(driver: Driver, conn: FakeConnection) -> bool:
    return any(c.conn is conn and c.state == "holding" for c in driver.calls)
