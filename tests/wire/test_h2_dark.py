"""A dark HTTP/2 connection (``contract.DarkWatch``, Go's ``ReadIdleTimeout``/``PingTimeout``):
with a request waiting, a connection that receives nothing for ``FIXED.read_idle`` seconds
takes no new stream and is PINGed; anything received lifts that; nothing within
``FIXED.read_idle_ping`` closes it: its requests fail with the evidence each has (one that never
got a stream is ``NOT_SENT`` and goes on another connection, uncounted). Against the scripted
server of ``test_http2.py``, made deaf (it reads nothing more, so it answers nothing, not even
a PING), on ``MockClock``: exact virtual times."""

from __future__ import annotations

from typing import Any, cast

import h2.events
import h2.settings
import pytest
import trio
import trio.testing

from trio_retry._core.evidence import Evidence, FailureCategory
from trio_retry._wire.clock import FIXED, NO_LIMITS
from trio_retry._wire.exchange import WireRequest
from trio_retry._wire.http2.connection import HTTP2Connection
from trio_retry._wire.http2.session import Session
from trio_retry._wire.progress import WireError
from trio_retry._wire.timekeeper import Timekeeper

from .test_http2 import Connect, Server, connect, get, progress_at_pool

__all__ = ["connect"]  # the fixture, from test_http2.py

IDLE, PING = FIXED.read_idle, FIXED.read_idle_ping
LIMIT = 20 * (IDLE + PING)  # virtual seconds: every wait here is bounded by it


@pytest.fixture
def timekeeper(nursery: trio.Nursery) -> Timekeeper:
    """A client's timekeeper, running (its lanes keep the watch). (Each test asks for
    ``autojump_clock`` itself: pytest-trio runs a test on a clock the test asks for.)"""
    running = Timekeeper(NO_LIMITS)
    running.start(nursery)
    return running


def deafen(server: Server) -> None:
    """From now on the server reads nothing more (a read already under way takes one chunk,
    which its HTTP/2 state machine ignores), so it answers nothing, not even a PING."""

    async def deaf(max_bytes: int | None = None) -> bytes:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    server.stream.receive_some = deaf  # type: ignore[method-assign]
    server.h2.receive_data = lambda data: []  # type: ignore[method-assign]


def count_pings(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """When our connections send a PING (a spy on ``Session.send_ping``, which still acts)."""
    sent: list[float] = []
    original = Session.send_ping

    def spy(self: Session, uid: int) -> None:
        sent.append(trio.current_time())
        original(self, uid)

    monkeypatch.setattr(Session, "send_ping", spy)
    return sent


async def send(conn: HTTP2Connection, results: dict[str, Any], name: str, **kw: Any) -> None:
    """``send_request`` of ``/name``; its response or its WireError (and when) in ``results``."""
    progress = kw.get("progress") or progress_at_pool()
    try:
        results[name] = await conn.send_request(get("/" + name), progress)
    except WireError as exc:
        results[name] = exc
    results[name + "_at"] = trio.current_time()


async def test_a_silent_busy_connection_takes_no_stream_then_closes(
    connect: Connect, timekeeper: Timekeeper, autojump_clock: trio.testing.MockClock
) -> None:
    conn, server = await connect(timekeeper=timekeeper)
    retired: list[float] = []
    conn.on_retired = lambda: retired.append(trio.current_time())
    results: dict[str, Any] = {}
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send, conn, results, "waiting")
            await server.next(h2.events.RequestReceived)
            deafen(server)
            start = trio.current_time()
            await trio.sleep(IDLE - 0.01)
            assert conn.is_available(), "silent for less than read_idle"
            await trio.sleep(0.02)
            assert not conn.is_available(), "silent for read_idle with a request waiting"
            assert not conn.closed
            await trio.sleep(PING - 0.02)
            assert not conn.closed
            await trio.sleep(0.02)
            assert conn.closed
    error = results["waiting"]
    assert isinstance(error, WireError)
    assert (error.category, error.evidence) == (
        FailureCategory.CONNECTION_BROKEN,
        Evidence.SENT_NO_RESPONSE,
    )
    assert "went dark" in str(error)
    assert results["waiting_at"] - start == pytest.approx(IDLE + PING, abs=0.1)
    assert retired == [pytest.approx(results["waiting_at"], abs=0.01)]  # the pool: at once


async def test_an_answer_lifts_the_suspicion(
    connect: Connect,
    timekeeper: Timekeeper,
    monkeypatch: pytest.MonkeyPatch,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A server that is slow to answer a request but reads and answers PINGs: PINGed once per
    silence, available again as soon as its answer arrives, never closed."""
    pings = count_pings(monkeypatch)
    conn, server = await connect(timekeeper=timekeeper)
    results: dict[str, Any] = {}
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send, conn, results, "slow")
            received = cast(h2.events.RequestReceived, await server.next(h2.events.RequestReceived))
            await trio.sleep(3 * (IDLE + PING) + IDLE / 2)  # (half-way between two PINGs)
            assert conn.is_available()
            assert not conn.closed
            assert len(pings) >= 3  # one per silence of read_idle, each answered at once
            await server.respond(received.stream_id or 0)
    assert results["slow"].status == 200


async def test_a_call_waiting_for_a_stream_on_a_dark_connection_goes_elsewhere_not_sent(
    connect: Connect, timekeeper: Timekeeper, autojump_clock: trio.testing.MockClock
) -> None:
    """The server allows one stream: a second call waits for it on the connection; when the
    connection goes dark the second has sent nothing (``NOT_SENT``, ``reconnect``: the client
    sends it on another connection uncounted), the first keeps its evidence."""
    conn, server = await connect(
        {h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 1}, timekeeper=timekeeper
    )
    results: dict[str, Any] = {}
    with trio.fail_after(LIMIT):
        while conn.session.max_streams != 1:
            await trio.sleep(0.001)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send, conn, results, "first")
            await server.next(h2.events.RequestReceived)
            deafen(server)
            nursery.start_soon(send, conn, results, "second")
    first, second = results["first"], results["second"]
    assert isinstance(first, WireError)
    assert first.evidence is Evidence.SENT_NO_RESPONSE
    assert isinstance(second, WireError)
    assert second.evidence is Evidence.NOT_SENT
    assert second.reconnect


async def test_a_new_request_on_a_suspect_connection_is_not_sent(
    connect: Connect, timekeeper: Timekeeper, autojump_clock: trio.testing.MockClock
) -> None:
    """A request handed the connection just before it turned suspect opens no stream on it:
    ``NOT_SENT``, ``reconnect``."""
    conn, server = await connect(timekeeper=timekeeper)
    results: dict[str, Any] = {}
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send, conn, results, "waiting")
            await server.next(h2.events.RequestReceived)
            deafen(server)
            await trio.sleep(IDLE + 0.1)
            assert not conn.is_available()
            await send(conn, results, "late")
            late = results["late"]
            assert isinstance(late, WireError)
            assert (late.evidence, late.reconnect) == (Evidence.NOT_SENT, True)
            assert results["late_at"] == trio.current_time()  # at once, not at the close


async def test_an_idle_connection_is_not_pinged(
    connect: Connect,
    timekeeper: Timekeeper,
    monkeypatch: pytest.MonkeyPatch,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """No request waits: silence is no sign of anything (the idle check PINGs it before its
    next stream instead: ``contract.IdlePing``)."""
    pings = count_pings(monkeypatch)
    conn, server = await connect(timekeeper=timekeeper)
    deafen(server)
    with trio.fail_after(LIMIT):
        await trio.sleep(10 * (IDLE + PING))
    assert conn.is_available()
    assert pings == []


async def test_a_stalled_write_is_the_write_bound_s_not_the_watch_s(
    connect: Connect,
    timekeeper: Timekeeper,
    monkeypatch: pytest.MonkeyPatch,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """While our own frames wait for a server that reads nothing, the connection is not judged
    dark: the write bound (here ``writer.py``'s stall bound) says when to give up, counted from
    the last progress, so a slow reader is never cut by a PING stuck behind our data."""
    pings = count_pings(monkeypatch)
    wide = {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 2**31 - 1}
    stall = 3 * (IDLE + PING)
    conn, server = await connect(wide, timekeeper=timekeeper, stall_timeout=stall)
    server.h2.increment_flow_control_window(2**31 - 1 - 65535)
    await server.flush()
    with trio.fail_after(LIMIT):
        await trio.testing.wait_all_tasks_blocked()  # the reader took the WINDOW_UPDATE
        deafen(server)
        start = trio.current_time()
        with pytest.raises(WireError) as info:
            await conn.send_request(
                WireRequest("PUT", "/upload", [(b"host", b"example.test")], b"x" * 2**26, None),
                progress_at_pool(),
            )
    assert pings == []
    assert "went dark" not in str(info.value)
    assert trio.current_time() - start == pytest.approx(stall, abs=0.1)
