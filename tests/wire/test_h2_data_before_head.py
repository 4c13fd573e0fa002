"""DATA before a stream's final head (RFC 9113 §8.1.1: a stream error), and the connection's
flow-control window (§6.9), on h2 and on the fast path.

``frames.py`` keeps such a frame from the machine (``frames.DroppedData``); the connection
resets the stream. The frame's octets, padding included, still count against the connection's
receive window, as every DATA octet the server sends shrinks its view of it, and are credited
back once the stream is reset, in the WINDOW_UPDATE h2's algorithm sends once half the window
is due. Crediting them without counting them (as it was) left the client's window larger
than the server's by those octets: it would have taken that much DATA beyond the window. And
past the window such a frame is a connection error FLOW_CONTROL_ERROR (§6.9.1), like any DATA.
Driven over a socketpair against an h2 server that sends the frames raw; the scenario table
(``h2_conformance/rows_messages.py``, ``Expect.window_kept``) plays the same over TCP and TLS.
"""

from __future__ import annotations

import h2.events
import pytest
import trio
from h2.errors import ErrorCodes

from tests.support.h2_frames import Kind, data_frame, padded
from trio_retry._core.evidence import FailureCategory
from trio_retry._wire.http2 import connection
from trio_retry._wire.http2.connection import HTTP2Connection
from trio_retry._wire.http2.h2_private import connection_window
from trio_retry._wire.progress import WireError

from .test_http2 import LIMIT, Connect, connect, get, progress_at_pool

__all__ = ["connect"]  # the fixture, shared with test_http2.py

#: The fast path, or h2 on every frame (``Client(http2_fast_path=False)``).
WAYS = ("fast", "h2")
#: The connection's receive window, made small here (64 MiB in use): its credit is due once
#: half of it was received.
WINDOW = 65536
FULL = b"x" * 16384


@pytest.fixture(autouse=True)
def small_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client raises its connection window to :data:`WINDOW` (its one WINDOW_UPDATE at
    the handshake)."""
    monkeypatch.setattr(connection, "CONNECTION_WINDOW", WINDOW)


def failures(conn: HTTP2Connection, count: int, nursery: trio.Nursery) -> list[WireError]:
    """Start ``count`` GETs on ``conn`` (streams 1, 3, 5, ...), each expected to fail; the
    list fills as they do."""
    failed: list[WireError] = []

    async def call(path: str) -> None:
        with pytest.raises(WireError) as info:
            await conn.send_request(get(path), progress_at_pool())
        failed.append(info.value)

    for n in range(count):
        nursery.start_soon(call, f"/{n}")
    return failed


def _summary(event: h2.events.Event) -> tuple[str, int, int]:
    if isinstance(event, h2.events.StreamReset):
        return ("RST_STREAM", event.stream_id or 0, int(event.error_code or 0))
    assert isinstance(event, h2.events.WindowUpdated)
    return ("WINDOW_UPDATE", event.stream_id or 0, event.delta or 0)


@pytest.mark.parametrize("way", WAYS)
async def test_data_before_the_head_is_counted_then_credited_back(
    way: str, connect: Connect, nursery: trio.Nursery
) -> None:
    """Three streams each get DATA before their head (two full frames, then 5 octets padded
    to 206): each is reset with PROTOCOL_ERROR; the first two frames' 32,768 octets, past
    half the window, come back in one WINDOW_UPDATE, the padded frame's are owed."""
    conn, server = await connect(fast_path=way == "fast")
    assert conn.session.h2.fast is (way == "fast")
    with trio.fail_after(LIMIT):
        failed = failures(conn, 3, nursery)
        for _ in range(3):
            await server.next(h2.events.RequestReceived)
        await server.flush(
            data_frame(1, FULL) + data_frame(3, FULL) + padded(Kind.DATA, 0, 5, b"early", 200)
        )
        seen: list[h2.events.Event] = []
        while len(seen) < 4:  # bounded by fail_after
            event = await server.next(h2.events.Event)
            if isinstance(event, (h2.events.StreamReset, h2.events.WindowUpdated)):
                seen.append(event)
        while len(failed) < 3:  # bounded by fail_after: each fails with its reset
            await trio.sleep(0.001)
    # The credit is due with the second frame, before the third stream's reset.
    assert [_summary(event) for event in seen] == [
        ("RST_STREAM", 1, ErrorCodes.PROTOCOL_ERROR),
        ("RST_STREAM", 3, ErrorCodes.PROTOCOL_ERROR),
        ("WINDOW_UPDATE", 0, 2 * 16384),
        ("RST_STREAM", 5, ErrorCodes.PROTOCOL_ERROR),
    ]
    assert all(f.category is FailureCategory.REMOTE_PROTOCOL for f in failed)
    assert all("DATA before its response head" in str(f) for f in failed)
    # The client's view of its window is the server's: 65,536, less every octet sent, plus
    # the credit; the rest (the padded frame's 206 octets) owed in the next WINDOW_UPDATE.
    window = connection_window(conn.session.h2._h2)
    assert window.current_window_size == WINDOW - (2 * 16384 + 206) + 2 * 16384
    assert window.current_window_size + window._bytes_processed == WINDOW
    assert not conn.closed
    assert conn.session.h2.fast is (way == "fast")


@pytest.mark.parametrize("way", WAYS)
async def test_data_before_the_head_past_the_window_is_a_flow_control_error(
    way: str, connect: Connect, nursery: trio.Nursery
) -> None:
    """Stream 1's response fills the connection's window (65,536 octets its caller has not
    read, so not credited yet); one more octet, DATA before stream 3's head, exceeds it: a
    connection error FLOW_CONTROL_ERROR (GOAWAY), not a reset of stream 3 alone."""
    conn, server = await connect(fast_path=way == "fast")
    with trio.fail_after(LIMIT):
        first: list[object] = []

        async def call_first() -> None:
            first.append(await conn.send_request(get("/first"), progress_at_pool()))

        nursery.start_soon(call_first)
        await server.next(h2.events.RequestReceived)
        failed = failures(conn, 1, nursery)
        await server.next(h2.events.RequestReceived)
        server.h2.send_headers(1, [(b":status", b"200")])
        await server.flush(data_frame(1, FULL) * 4 + data_frame(3, b"x"))
        terminated = await server.next(h2.events.ConnectionTerminated)
        while not failed:  # bounded by fail_after: the connection's end fails it
            await trio.sleep(0.001)
    assert first, "stream 1's head did not arrive"
    assert terminated.error_code == ErrorCodes.FLOW_CONTROL_ERROR
    assert failed[0].category is FailureCategory.REMOTE_PROTOCOL
    assert conn.closed
