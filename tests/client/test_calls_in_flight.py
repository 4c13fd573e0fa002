"""What a call holds while it is in flight (issue #41): at 10,000 calls at once, every object
each holds is visited by every full pass of the garbage collector, and those passes were most
of what made a call cost twice its price at 1,000 (docs/benchmarks.md, 'Thousands of calls at
once'). So none of the library's coroutines suspended under a call keeps closure cells in its
frame, and a call queued for a connection holds no ``trio.Event`` and no
``functools.partial`` of its own.

Calls are held in flight by a handler that waits for the test's word: some waiting for their
response head on the server, the rest queued in the client's pool (a pool of 4 connections
over HTTP/1.1; over HTTP/2 one connection, the server allowing 4 streams). What they hold is
read from ``gc.get_objects()`` while they wait, against the same census before.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import socket
import types
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
from h2.settings import SettingCodes

import trio_retry
from tests.support.fixtures import StartNginx
from tests.support.fixtures import nginx as nginx
from tests.support.h2_frames import settings_frame
from tests.support.loopback import connects_waiting
from trio_retry import Client, RetryPolicy, Upstream
from trio_retry._wire import connect_backup
from trio_retry._wire.clock import FIXED
from trio_retry.testing import FaultServer, RecordedRequest, Respond

ONE = RetryPolicy(max_attempts=1)
HELD = 4  # requests the server holds at once: connections (HTTP/1.1) or streams (HTTP/2)
CALLS = 24  # started at once: HELD at the server, the rest queued in the pool (HTTP/3: all held)
LIBRARY = Path(trio_retry.__file__).parent
TESTING = LIBRARY / "testing"


def _library_coroutines() -> list[types.CoroutineType[object, object, object]]:
    """The suspended coroutines of the client's own code (not ``trio_retry.testing``'s)."""
    found = []
    for obj in gc.get_objects():
        if isinstance(obj, types.CoroutineType) and obj.cr_frame is not None:
            path = Path(obj.cr_code.co_filename)
            if path.is_relative_to(LIBRARY) and not path.is_relative_to(TESTING):
                found.append(obj)
    return found


def _count(kind: type) -> int:
    return sum(1 for obj in gc.get_objects() if type(obj) is kind)


def _census() -> dict[str, int]:
    """How many GC-tracked objects of each type there are, after a full collection."""
    gc.collect()
    counts: dict[str, int] = {}
    for obj in gc.get_objects():
        name = type(obj).__qualname__
        counts[name] = counts.get(name, 0) + 1
    return counts


def _growth(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Per type, how many more objects ``after`` counts than ``before``."""
    grown = {name: after.get(name, 0) - count for name, count in before.items()}
    grown.update({name: count for name, count in after.items() if name not in before})
    return grown


def _per_call(grown: dict[str, int], calls: int) -> tuple[float, list[tuple[int, str]]]:
    """Objects per call, and the types that grew (most first), for a failure's message."""
    return sum(grown.values()) / calls, sorted((-n, name) for name, n in grown.items() if n > 0)


async def _held_in_flight(
    protocol: str, look: Callable[[int], None], nursery: trio.Nursery
) -> None:
    """Start ``CALLS`` calls, hold them until ``look(held)`` has looked, then let them end."""
    release = trio.Event()

    async def wait_for_word(request: RecordedRequest) -> Respond:
        await release.wait()
        return Respond(200, body=b"ok")

    server = FaultServer(tls=protocol != "h1", http3=protocol == "h3", max_concurrent_streams=HELD)
    server.route("GET", "/held", wait_for_word)
    server.route("GET", "/warm", lambda request: Respond(200, body=b"ok"))
    await nursery.start(server.serve)
    client = Client(
        retry=ONE,
        http2=protocol != "h1",
        max_connections=HELD if protocol == "h1" else 1,  # HTTP/2: HELD streams of one
        ssl_context=server.client_ssl_context() if protocol != "h1" else None,
        upstreams={server.url: Upstream(http3=True)} if protocol == "h3" else None,
    )
    held = CALLS if protocol == "h3" else HELD
    async with client:
        await client.get(server.url + "/warm")  # imports, the first connection
        statuses: list[int] = []

        async def one() -> None:
            statuses.append((await client.get(server.url + "/held")).status)

        with trio.fail_after(20):
            async with trio.open_nursery() as calls:
                for _ in range(CALLS):
                    calls.start_soon(one)
                while len(server.requests) < 1 + held:
                    await trio.sleep(0.01)
                await trio.sleep(0.05)  # the queued calls parked in the pool
                assert len(server.requests) == 1 + held  # the rest are queued, not sent
                look(held)
                release.set()
        assert statuses == [200] * CALLS


@pytest.mark.parametrize("protocol", ["h1", "h2", "h3"])
async def test_no_coroutine_of_a_call_in_flight_keeps_closure_cells(
    protocol: str, nursery: trio.Nursery
) -> None:
    seen: list[str] = []

    def look(held: int) -> None:
        coroutines = _library_coroutines()
        assert coroutines, "no call in flight seen"
        seen.extend(c.cr_code.co_qualname for c in coroutines)
        with_cells = sorted(
            {f"{c.cr_code.co_qualname} {c.cr_code.co_cellvars}" for c in coroutines
             if c.cr_code.co_cellvars}
        )  # fmt: skip
        assert with_cells == []

    await _held_in_flight(protocol, look, nursery)
    assert "AttemptRun._exchange" in seen  # the calls were seen at the exchange


@pytest.mark.parametrize("protocol", ["h1", "h2"])
async def test_a_call_queued_for_a_connection_holds_no_event_and_no_partial(
    protocol: str, nursery: trio.Nursery
) -> None:
    before = {kind: 0 for kind in (trio.Event, functools.partial)}
    gc.collect()
    for kind in before:
        before[kind] = _count(kind)
    grown: dict[type, int] = {}

    def look(held: int) -> None:
        gc.collect()
        queued = CALLS - held
        assert queued >= 16
        for kind, count in before.items():
            grown[kind] = _count(kind) - count

    await _held_in_flight(protocol, look, nursery)
    # The server's own (one Event per request it holds, over HTTP/2 one per stream) aside,
    # nothing per queued call.
    assert grown[functools.partial] <= 2
    assert grown[trio.Event] <= 2 * HELD + 4


async def test_no_coroutine_of_a_call_connecting_keeps_closure_cells() -> None:
    """The connect stage too (where 10,000 HTTP/1.1 calls at once all are at their peak): a
    listener whose backlog is full leaves the calls' connects waiting for the handshake,
    looked at past ``FIXED.happy_eyeballs``, once each has its backup connect too."""
    with connects_waiting() as port:
        seen: list[str] = []
        async with Client(retry=ONE) as client:
            with trio.move_on_after(10) as waited:
                async with trio.open_nursery() as calls:
                    for _ in range(HELD):
                        calls.start_soon(client.get, f"http://127.0.0.1:{port}/")
                    await trio.sleep(FIXED.happy_eyeballs + 0.35)
                    coroutines = _library_coroutines()
                    seen.extend(c.cr_code.co_qualname for c in coroutines)
                    with_cells = sorted(
                        {f"{c.cr_code.co_qualname} {c.cr_code.co_cellvars}"
                         for c in coroutines if c.cr_code.co_cellvars}
                    )  # fmt: skip
                    calls.cancel_scope.cancel()
            assert not waited.cancelled_caught
        assert seen.count("backed_up") == HELD  # every call was connecting
        assert seen.count("_Backup.attempt") == 2 * HELD  # its first connect, and its backup
        assert with_cells == []


#: GC-tracked objects a call queued in the pool holds, its task and the test's own coroutine
#: included (issue #41: 28.9 with the attempt's cancel scope and what it brings, the waiter's
#: bound abort method, an opener object, the frames of Client._call and the pool's sleep, and
#: the call's list of attempts before its first ended; 16.9 without them; 15.8 once the
#: attempt runner was its own waiter in the pool, no ``Waiter`` object of its own; 11.9 once
#: the waiter was its own park, ``_wire/park.py``: no coroutine, generator and message of
#: trio's ``wait_task_rescheduled``, nor the message's ``__dict__``; 10.9 once the call's
#: request was slotted: no ``__dict__`` object).
QUEUED_OBJECTS = 11


@pytest.mark.parametrize("protocol", ["h1", "h2"])
async def test_a_call_queued_for_a_connection_holds_few_objects(
    protocol: str, nursery: trio.Nursery
) -> None:
    """What a queued call holds, counted as the objects that ``QUEUED`` more calls queued
    behind ``HELD`` add; among them no cancel scope: ``drain()`` and ``aclose()`` end its
    wait through the pool (``tests/call/test_drain.py``)."""
    release = trio.Event()

    async def wait_for_word(request: RecordedRequest) -> Respond:
        await release.wait()
        return Respond(200, body=b"ok")

    server = FaultServer(tls=protocol == "h2", max_concurrent_streams=HELD)
    server.route("GET", "/held", wait_for_word)
    await nursery.start(server.serve)
    client = Client(
        retry=ONE,
        http2=protocol == "h2",
        max_connections=HELD if protocol == "h1" else 1,
        ssl_context=server.client_ssl_context() if protocol == "h2" else None,
    )
    queued = 40
    census: list[dict[str, int]] = []

    async with client:

        async def one() -> None:
            assert (await client.get(server.url + "/held")).status == 200

        with trio.fail_after(20):
            async with trio.open_nursery() as calls:
                for _ in range(HELD):
                    calls.start_soon(one)
                while len(server.requests) < HELD:
                    await trio.sleep(0.01)
                await trio.sleep(0.05)
                census.append(_census())
                for _ in range(queued):
                    calls.start_soon(one)
                while client.pool.waiting < queued:
                    await trio.sleep(0.01)
                await trio.sleep(0.05)
                census.append(_census())
                assert len(server.requests) == HELD
                release.set()
    grown = _growth(*census)
    per_call, held = _per_call(grown, queued)
    assert per_call <= QUEUED_OBJECTS, f"{per_call:.1f} per queued call: {held[:20]}"
    assert grown.get("CancelScope", 0) <= 0, held


#: Calls added to the ``HELD`` ones and counted, in the tests below.
ADDED = 40


async def _grown_by_calls(url: str, at: str, *, http2: bool = False) -> dict[str, int]:
    """How the objects grew when ``ADDED`` more calls to ``url`` (besides ``HELD`` first)
    reached the library's coroutine named ``at``, and stayed there (a census each time);
    ``http2``: over HTTP/2 with prior knowledge (h2c), one connection."""
    census: list[dict[str, int]] = []

    def there() -> int:
        return [c.cr_code.co_qualname for c in _library_coroutines()].count(at)

    client = (
        Client(retry=ONE, http2_prior_knowledge=True, max_connections=1)
        if http2
        else Client(retry=ONE, max_connections=2 * ADDED)
    )
    async with client:
        with trio.move_on_after(8) as waited:  # (within Client()'s 10 s connect limit)
            async with trio.open_nursery() as calls:
                for count in (HELD, ADDED):
                    before = there()
                    for _ in range(count):
                        calls.start_soon(client.get, url)
                    while there() < before + count:
                        await trio.sleep(0.01)
                    await trio.sleep(0.05)  # (their writes written, the connection's tasks idle)
                    census.append(_census())
                calls.cancel_scope.cancel()
        assert not waited.cancelled_caught
    return _growth(*census)


#: GC-tracked objects an HTTP/1.1 call holds while it waits for its response head, its
#: connection's included (and its task and the test's coroutine): issue #41, 47.0 with an h11
#: state machine per connection (five objects, though the fast path had every exchange), a
#: write, a read and a no-limit head bound (of four), the write bound's ``renew`` method and a
#: bound method of the clock's; 37.0 without; 35.0 once the opening's connect no longer left its
#: scope (and the scope's entry) in trio's deadline heap for its 10 s; 34.0 once the head's
#: bound was entered and left by hand (a ``with`` held its bound ``__exit__`` method); 33.0
#: once the call's ``PreparedRequest`` was slotted (no ``__dict__``).
WAITING_OBJECTS = 33


async def test_an_http11_call_waiting_for_its_head_holds_few_objects() -> None:
    """What a call and its connection hold while the server has not answered, counted as the
    objects that ``ADDED`` more calls add: a listener that never accepts (the kernel
    completes the handshakes and takes the requests; nothing answers). A connection whose
    exchanges the fast path has makes no h11 state machine, and no read or write bound until
    a read or write must wait under one."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/"
        grown = await _grown_by_calls(url, "HTTP11Connection._events")
    per_call, held = _per_call(grown, ADDED)
    assert per_call <= WAITING_OBJECTS, f"{per_call:.1f} per waiting call: {held[:20]}"
    assert grown.get("Connection", 0) <= 0, held  # (h11's)
    assert grown.get("Bound", 0) <= ADDED, held  # the head's, and no other


#: GC-tracked objects an HTTP/1.1 call holds while it connects (its task and the test's
#: coroutine included): issue #41, 48.0 with two cancel scopes (its opening's and its
#: connect's, each with its status and two sets; the connect's deadline in trio's heap) and the
#: frames of ``ConnectionPool._open_slot`` and ``transport._connect``; 41.0 without; 39.0
#: once the connect no longer held its addresses (their list and its address-info tuple); 37.0
#: once it was made on the stdlib socket (``rawsock.connect_socket``: no Trio socket and no
#: coroutine of trio's ``connect`` while it waits); 35.0 once the opening's scope and the
#: connect's bound were entered by hand, not by ``with`` (whose frame holds the bound
#: ``__exit__`` method while the connect waits); 34.0 once the attempt runner was its own
#: waiter in the pool (the slot's holder); 41.0 with the bound wait for the handshake's
#: answer before a backup connect (issue #43, ``connect_backup.backed_up``: its cancel scope,
#: the scope's status and deadline entry, its coroutine; a connect answered at once,
#: loopback's usual case, has none of it). A connect still unanswered after
#: ``FIXED.happy_eyeballs`` holds more: its backup's socket, the race's tasks and nursery (a
#: SYN lost, not the thousands of connects at once of #41); 40.0 once the call's
#: ``PreparedRequest`` was slotted. (A connect answered by the next round of the scheduler,
#: loopback's, waits for no socket at all: ``tests/wire/test_connect_backup.py``.)
CONNECTING_OBJECTS = 40


async def test_an_http11_call_connecting_holds_few_objects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a call holds while its connect waits for the handshake, counted as the objects
    that ``ADDED`` more calls add, before any backup connect (the delay made long, so that
    the census cannot race it): two cancel scopes (its opening's, which ``aclose()`` cancels
    and the connect limit's lane entry cancels too; and the wait before a backup), no other."""
    monkeypatch.setattr(connect_backup, "FIXED", dataclasses.replace(FIXED, happy_eyeballs=60.0))
    with connects_waiting() as port:
        grown = await _grown_by_calls(f"http://127.0.0.1:{port}/", "open_transport")
    per_call, held = _per_call(grown, ADDED)
    assert per_call <= CONNECTING_OBJECTS, f"{per_call:.1f} per connecting call: {held[:20]}"
    assert grown.get("CancelScope", 0) <= 2 * ADDED, held


async def _silent_h2c_peer(listener: trio.socket.SocketType) -> None:
    """An h2c server that takes every request and answers none: its SETTINGS (streams for
    every call), an acknowledgement of the client's, then it reads and drops what comes. It
    keeps nothing per request: the census counts the client's objects alone."""
    conn, _ = await listener.accept()
    with conn:
        await conn.send(settings_frame((SettingCodes.MAX_CONCURRENT_STREAMS, 1000)))
        acked = False
        while await conn.recv(65536):
            if not acked:  # (the client's preface and SETTINGS come first)
                acked = True
                await conn.send(settings_frame(ack=True))


#: GC-tracked objects an HTTP/2 call holds while its stream waits for the response head (its
#: task and the test's coroutine included; the connection is shared): issue #41, 24.9 with the
#: frames of ``outbound.read_head`` and ``Stream.wait``, the first-byte bound's ``__exit__`` (a
#: ``with``), the stream's bound ``_abort`` method as its park's abort function, and its deque
#: of DATA made before any arrived; 20.0 without; 16.0 once the stream was its own park
#: (``_wire/park.py``: four objects of trio's ``wait_task_rescheduled`` fewer); 15.0 once the
#: call's request was slotted (no ``__dict__`` object). At 10,000
#: HTTP/2 calls at once, 1,000 per connection are here and the rest queued in the pool (the
#: test above). Half an object of slack: a stray one of the run's (a tuple) showed in the whole
#: file's run, never in its own.
STREAM_OBJECTS = 15.5


async def test_an_http2_call_waiting_for_its_head_holds_few_objects(
    nursery: trio.Nursery,
) -> None:
    """What a call and its stream hold while the server has not answered, counted as the
    objects that ``ADDED`` more calls add on one h2c connection."""
    listener = trio.socket.socket()
    with listener:
        await listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        nursery.start_soon(_silent_h2c_peer, listener)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/"
        grown = await _grown_by_calls(url, "HTTP2Connection.send_request", http2=True)
    per_call, held = _per_call(grown, ADDED)
    assert per_call <= STREAM_OBJECTS, f"{per_call:.1f} per waiting HTTP/2 call: {held[:20]}"
    assert grown.get("Stream", 0) <= ADDED, held


#: GC-tracked objects an HTTP/1.1 connection idle in the pool keeps: issue #41, 7 with the last
#: attempt's record (``AttemptProgress``, kept by the connection's first-byte bound); 6
#: without: the connection, its reader, its first-byte bound, its socket stream, the Trio
#: socket and the stdlib one. Half an object of slack: a stray one of the pool's (a cancel
#: scope) showed in some runs, never one per connection.
IDLE_OBJECTS = 6.5


async def test_an_idle_http11_connection_holds_few_objects(nginx: StartNginx) -> None:
    """What a connection keeps once its exchange ended and it waits in the pool, counted as
    the objects that ``ADDED`` connections opened at once and left idle add (against nginx:
    nothing of the server's in this process), and none of them an attempt's record."""
    url = nginx().h1_url("/get")
    census: list[dict[str, int]] = []
    async with Client(retry=ONE, max_connections=HELD + ADDED) as client:
        for count in (HELD, HELD + ADDED):  # (the first: imports, the pool's own objects)
            with trio.fail_after(20):
                async with trio.open_nursery() as calls:
                    for _ in range(count):
                        calls.start_soon(client.get, url)
            census.append(_census())
        assert client.pool.idle_count == HELD + ADDED
    grown = _growth(*census)
    opened = grown.get("HTTP11Connection", 0)
    assert opened == ADDED, grown
    per_connection, held = _per_call(grown, opened)
    assert per_connection <= IDLE_OBJECTS, f"{per_connection:.2f} per idle connection: {held}"
    assert grown.get("AttemptProgress", 0) <= 0, held
