"""An HTTP/2 connection carrying hundreds of streams: what one event costs does not grow with
their number (issue #41; counted, not timed). A timeout of one attempt finds its stream at once
(``Session.attempts``), not by a look at every stream; a connection-level WINDOW_UPDATE wakes the
streams waiting for window (``Session.window_waiters``), not every stream. Against the scripted
server of ``test_http2.py``."""

from __future__ import annotations

from typing import Any

import h2.events
import h2.settings
import pytest
import trio
import trio.testing

from trio_retry._core.evidence import FailureCategory
from trio_retry._wire.http2 import outbound
from trio_retry._wire.http2.stream import Stream
from trio_retry._wire.progress import AttemptProgress, WireError

from .test_http2 import LIMIT, Connect, connect, get, progress_at_pool

__all__ = ["connect"]  # the fixture, from test_http2.py

STREAMS = 300


class CountingStream(Stream):
    """A stream that counts how often its attempt is looked at, and how often it is woken."""

    __slots__ = ("_progress",)
    reads = 0
    wakes = 0

    @property  # type: ignore[override]
    def progress(self) -> AttemptProgress:
        CountingStream.reads += 1
        return self._progress

    @progress.setter
    def progress(self, value: AttemptProgress) -> None:
        self._progress = value

    def wake(self) -> None:
        CountingStream.wakes += 1
        super().wake()


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> type[CountingStream]:
    monkeypatch.setattr(outbound, "Stream", CountingStream)
    CountingStream.reads = CountingStream.wakes = 0
    return CountingStream


async def open_streams(
    connect: Connect, results: dict[int, Any], nursery: trio.Nursery
) -> tuple[Any, Any, list[AttemptProgress]]:
    """A connection with :data:`STREAMS` GETs waiting for their heads, which never come."""
    conn, server = await connect({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 2 * STREAMS})
    while conn.session.max_streams != 2 * STREAMS:  # the server's SETTINGS, read by the reader
        await trio.sleep(0.001)
    progresses = [progress_at_pool() for _ in range(STREAMS)]

    async def send(i: int) -> None:
        try:
            results[i] = await conn.send_request(get(f"/{i}"), progresses[i])
        except WireError as exc:
            results[i] = exc

    for i in range(STREAMS):
        nursery.start_soon(send, i)
    for _ in range(STREAMS):
        await server.next(h2.events.RequestReceived)
    await trio.testing.wait_all_tasks_blocked()
    return conn, server, progresses


async def test_a_timeout_finds_its_stream_without_looking_at_the_others(
    connect: Connect, counted: type[CountingStream]
) -> None:
    results: dict[int, Any] = {}
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            conn, _, progresses = await open_streams(connect, results, nursery)
            counted.reads = 0
            for progress in progresses:  # each attempt's call deadline passes, one by one
                conn.attempt_expired(progress)
    assert all(
        isinstance(r, WireError) and r.category is FailureCategory.TIMEOUT for r in results.values()
    )
    # About one look per stream (its own end), not one per stream per timeout (45,000).
    assert counted.reads <= 4 * STREAMS, counted.reads


async def test_a_connection_window_update_wakes_only_the_streams_waiting_for_window(
    connect: Connect, counted: type[CountingStream]
) -> None:
    results: dict[int, Any] = {}
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            conn, server, _ = await open_streams(connect, results, nursery)
            counted.wakes = 0
            for _ in range(50):  # none of the streams waits for window: none is woken
                server.h2.increment_flow_control_window(1024)
                await server.flush()
            await trio.testing.wait_all_tasks_blocked()
            assert counted.wakes == 0, counted.wakes
            nursery.cancel_scope.cancel()
    conn.close()
