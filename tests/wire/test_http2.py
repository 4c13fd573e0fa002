"""The HTTP/2 adapter on its own: GOAWAY filtering, and frame-exact scenarios against a
scripted h2 server over a socketpair (what the FaultServer cannot show: the RST_STREAM code a
cancelled stream sends, the stage a stream had reached when GOAWAY arrived)."""

from __future__ import annotations

import contextlib
import itertools
import math
import struct
from collections.abc import AsyncIterator, Awaitable, Callable

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest
import trio
from h2.errors import ErrorCodes
from hypothesis import given
from hypothesis import strategies as st

from tests.support.h2_frames import frame
from trio_retry._core.evidence import Evidence, FailureCategory, Stage
from trio_retry._wire.exchange import WireRequest
from trio_retry._wire.http2 import HTTP2Connection
from trio_retry._wire.http2.frames import FrameError, Frames, GoAway, InboundFrames
from trio_retry._wire.progress import AttemptProgress, WireError
from trio_retry._wire.transport import Transport

LIMIT = 5


def goaway(last: int, code: int = 0, debug: bytes = b"") -> bytes:
    return frame(0x7, 0, 0, struct.pack(">II", last, code) + debug)


# --- the GOAWAY filter ------------------------------------------------------------------------

STREAM = [
    frame(0x4, 0, 0, b""),  # SETTINGS
    frame(0x0, 0, 1, b"a" * 16_384),  # DATA, as large as a frame may be (SETTINGS_MAX_FRAME_SIZE)
    goaway(1, 0, b"bye"),
    frame(0x0, 0, 1, b"tail"),
    goaway(0, 2),
]


def run_filter(data: bytes, cuts: list[int]) -> list[bytes | GoAway]:
    """The filter's parts, a run of whole frames (``Frames``) as its bytes."""
    parts: list[bytes | GoAway] = []
    bounds = [0, *sorted(c % (len(data) + 1) for c in cuts), len(data)]
    filt = InboundFrames(set())
    for start, end in itertools.pairwise(bounds):
        for part in filt.feed(data[start:end]):
            if isinstance(part, Frames):
                parts.append(part.data[part.start : part.end])
            elif isinstance(part, (bytes, GoAway)):
                parts.append(part)
    return parts


@given(st.lists(st.integers(min_value=0), max_size=12))
def test_goaway_filter_keeps_order_at_any_read_boundaries(cuts: list[int]) -> None:
    data = b"".join(STREAM)
    parts = run_filter(data, cuts)
    # Merge consecutive byte runs: where reads split them is not significant.
    merged: list[bytes | GoAway] = []
    for part in parts:
        if isinstance(part, bytes) and merged and isinstance(merged[-1], bytes):
            merged[-1] += part
        else:
            merged.append(part)
    assert merged == [
        STREAM[0] + STREAM[1],
        GoAway(1, 0),
        STREAM[3],
        GoAway(0, 2),
    ]


def test_goaway_filter_rejects_malformed_goaway() -> None:
    with pytest.raises(FrameError):
        list(InboundFrames(set()).feed(frame(0x7, 0, 0, b"short")))
    with pytest.raises(FrameError):
        list(InboundFrames(set()).feed(frame(0x7, 0, 3, struct.pack(">II", 1, 0))))


# --- a scripted server --------------------------------------------------------------------------


class Server:
    """An h2 server on the far end of a socketpair; the test drives it event by event."""

    def __init__(self, stream: trio.SocketStream, settings: dict[int, int] | None = None) -> None:
        self.stream = stream
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        if settings:
            self.h2.local_settings = h2.settings.Settings(client=False, initial_values=settings)
        self.send_events, self.events = trio.open_memory_channel[h2.events.Event](math.inf)
        self.lock = trio.StrictFIFOLock()

    async def run(self) -> None:
        self.h2.initiate_connection()
        await self.flush()
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            while data := await self.stream.receive_some(65536):
                for event in self.h2.receive_data(data):
                    if isinstance(event, h2.events.DataReceived):
                        self.h2.acknowledge_received_data(
                            event.flow_controlled_length, event.stream_id
                        )
                    self.send_events.send_nowait(event)
                await self.flush()

    async def flush(self, extra: bytes = b"") -> None:
        async with self.lock:
            await self.stream.send_all(self.h2.data_to_send() + extra)

    async def next(self, kind: type[h2.events.Event]) -> h2.events.Event:
        async for event in self.events:
            if isinstance(event, kind):
                return event
        raise AssertionError("server closed")

    async def respond(self, stream_id: int, body: bytes = b"ok") -> None:
        self.h2.send_headers(stream_id, [(b":status", b"200")])
        self.h2.send_data(stream_id, body, end_stream=True)
        await self.flush()


Connect = Callable[..., Awaitable[tuple[HTTP2Connection, "Server"]]]


@pytest.fixture
async def connect(nursery: trio.Nursery) -> AsyncIterator[Connect]:
    """``await connect(settings)``: a handshaken connection and its server; closed after."""
    opened: list[tuple[HTTP2Connection, Server]] = []

    async def open_pair(
        settings: dict[int, int] | None = None, **options: float | None
    ) -> tuple[HTTP2Connection, Server]:
        a, b = trio.socket.socketpair()
        server = Server(trio.SocketStream(b), settings)
        nursery.start_soon(server.run)
        with trio.fail_after(LIMIT):
            conn = await HTTP2Connection.open(
                Transport(trio.SocketStream(a), a, None),
                "origin",
                scheme="http",
                authority="example.test",
                max_header_bytes=65536,
                nursery=nursery,
                progress=AttemptProgress(trio.current_time()),
                **options,
            )
        opened.append((conn, server))
        return conn, server

    yield open_pair
    for conn, server in opened:
        conn.close()
        server.stream.socket.close()


@pytest.fixture
async def pair(connect: Connect) -> tuple[HTTP2Connection, Server]:
    return await connect()


def get(path: str = "/", body: bytes = b"", method: str = "GET") -> WireRequest:
    return WireRequest(method, path, [(b"host", b"example.test")], body, None)


def progress_at_pool() -> AttemptProgress:
    progress = AttemptProgress(trio.current_time())
    progress.advance(Stage.POOL)
    return progress


async def test_cancelled_stream_sends_rst_cancel_and_the_connection_carries_on(
    pair: tuple[HTTP2Connection, Server],
) -> None:
    conn, server = pair
    with trio.fail_after(LIMIT):
        progress = progress_at_pool()
        with trio.move_on_after(0.05) as scope:
            await conn.send_request(get("/victim"), progress)
        assert scope.cancelled_caught
        assert progress.stage is Stage.AWAITING_RESPONSE
        assert progress.evidence is Evidence.SENT_NO_RESPONSE
        reset = await server.next(h2.events.StreamReset)
        assert (reset.stream_id, reset.error_code) == (1, ErrorCodes.CANCEL)
        assert conn.is_available()
        assert conn.active_streams == 0

        async def answer() -> None:
            received = await server.next(h2.events.RequestReceived)
            await server.respond(received.stream_id or 0, b"still here")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(answer)
            progress = progress_at_pool()
            response = await conn.send_request(get("/next"), progress)
            assert await response.source.receive_body(progress) == b"still here"
            assert await response.source.receive_body(progress) == b""
        assert progress.stage is Stage.COMPLETE
        assert not conn.closed


async def test_request_pseudo_headers_and_forbidden_fields(
    pair: tuple[HTTP2Connection, Server],
) -> None:
    conn, server = pair
    request = WireRequest(
        "POST",
        "/p?q=1",
        [
            (b"Host", b"api.test:8443"),
            (b"Connection", b"keep-alive"),
            (b"Transfer-Encoding", b"chunked"),
            (b"X-Custom", b"1"),
        ],
        b"body",
        None,
    )
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:

            async def answer() -> None:
                received = await server.next(h2.events.RequestReceived)
                assert received.headers == [
                    (b":method", b"POST"),
                    (b":scheme", b"http"),
                    (b":authority", b"api.test:8443"),
                    (b":path", b"/p?q=1"),
                    (b"x-custom", b"1"),
                    (b"content-length", b"4"),
                ]
                await server.respond(received.stream_id or 0)

            nursery.start_soon(answer)
            response = await conn.send_request(request, progress_at_pool())
    assert (response.status, response.reason, response.http_version) == (200, "OK", "HTTP/2")


async def test_goaway_fails_streams_above_as_not_sent_and_finishes_those_below(
    pair: tuple[HTTP2Connection, Server],
) -> None:
    conn, server = pair
    retired: list[bool] = []
    conn.on_retired = lambda: retired.append(True)
    results: dict[str, object] = {}
    progresses = {"below": progress_at_pool(), "above": progress_at_pool()}

    async def call(name: str) -> None:
        try:
            response = await conn.send_request(get(f"/{name}"), progresses[name])
            body = b""
            while chunk := await response.source.receive_body(progresses[name]):
                body += chunk
            results[name] = body
        except WireError as exc:
            results[name] = exc

    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, "below")
            await server.next(h2.events.RequestReceived)
            nursery.start_soon(call, "above")
            await server.next(h2.events.RequestReceived)
            # h2's close_connection() would stop the server's own stream 1: send the frame raw.
            await server.flush(goaway(1))
            await trio.sleep(0.05)
            assert not conn.is_available()
            assert not retired  # stream 1 is still owed its response
            await server.respond(1, b"finished")

    above = results["above"]
    assert isinstance(above, WireError)
    assert (above.evidence, above.category) == (Evidence.NOT_SENT, FailureCategory.GOAWAY)
    assert progresses["above"].proven_not_sent
    assert results["below"] == b"finished"
    assert conn.closed
    assert retired == [True]


async def test_flow_control_both_ways_beyond_the_initial_window(connect: Connect) -> None:
    # The server allows 1000-byte windows; the upload and download are 300 KB each.
    conn, server = await connect({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1000})
    upload = bytes(range(256)) * 1200
    progress = progress_at_pool()
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as inner:

            async def answer() -> None:
                received = bytearray()
                while True:
                    event = await server.next(h2.events.Event)
                    if isinstance(event, h2.events.DataReceived):
                        received += event.data or b""
                    if isinstance(event, h2.events.StreamEnded):
                        break
                assert received == upload
                server.h2.send_headers(1, [(b":status", b"200")])
                for start in range(0, len(upload), 16384):
                    while server.h2.local_flow_control_window(1) < 16384:
                        await server.next(h2.events.WindowUpdated)
                    server.h2.send_data(1, upload[start : start + 16384])
                    await server.flush()
                server.h2.end_stream(1)
                await server.flush()

            inner.start_soon(answer)
            response = await conn.send_request(get("/up", upload, "PUT"), progress)
            assert progress.bytes_sent > len(upload)
            body = bytearray()
            while chunk := await response.source.receive_body(progress):
                body += chunk
    assert body == upload
    assert progress.bytes_received == len(upload)


async def test_stage_is_advanced_before_the_write(pair: tuple[HTTP2Connection, Server]) -> None:
    conn, _ = pair
    seen: list[Stage] = []
    progress = progress_at_pool()
    original = conn.session.writer._stream  # the writer task does every write

    class Spy(trio.abc.Stream):
        async def send_all(self, data: bytes | bytearray | memoryview) -> None:
            seen.append(progress.stage)
            await original.send_all(data)

        async def wait_send_all_might_not_block(self) -> None:  # pragma: no cover
            await original.wait_send_all_might_not_block()

        async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
            return await original.receive_some(max_bytes)  # pragma: no cover

        async def aclose(self) -> None:  # pragma: no cover
            await original.aclose()

    conn.session.writer._stream = Spy()
    with trio.fail_after(LIMIT), trio.move_on_after(0.05):
        await conn.send_request(get("/s", b"x" * 100_000, "POST"), progress)
    conn.session.writer._stream = original
    assert seen[0] is Stage.REQUEST_HEAD
    assert set(seen[1:]) == {Stage.REQUEST_BODY}
    assert progress.stage is Stage.AWAITING_RESPONSE


async def test_server_eof_fails_open_streams_with_their_stage(
    pair: tuple[HTTP2Connection, Server],
) -> None:
    conn, server = pair
    progress = progress_at_pool()
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:

            async def close_after_head() -> None:
                received = await server.next(h2.events.RequestReceived)
                server.h2.send_headers(received.stream_id or 0, [(b":status", b"200")])
                server.h2.send_data(received.stream_id or 0, b"part")
                await server.flush()
                await trio.sleep(0.05)
                server.stream.socket.close()

            nursery.start_soon(close_after_head)
            response = await conn.send_request(get(), progress)
            assert await response.source.receive_body(progress) == b"part"
            with pytest.raises(WireError) as info:
                await response.source.receive_body(progress)
    assert (info.value.evidence, info.value.category) == (
        Evidence.PARTIAL_RESPONSE,
        FailureCategory.CONNECTION_BROKEN,
    )
    assert conn.closed
    assert not conn.is_reusable()


async def test_the_response_carries_the_content_length_its_head_was_checked_by(
    pair: tuple[HTTP2Connection, Server],
) -> None:
    conn, server = pair
    lengths = []
    with trio.fail_after(LIMIT):
        for fields in ([(b"content-length", b"5")], []):
            progress = progress_at_pool()

            async def answer(fields: list[tuple[bytes, bytes]] = fields) -> None:
                received = await server.next(h2.events.RequestReceived)
                server.h2.send_headers(received.stream_id or 0, [(b":status", b"200"), *fields])
                server.h2.send_data(received.stream_id or 0, b"hello", end_stream=True)
                await server.flush()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(answer)
                response = await conn.send_request(get("/sized"), progress)
                assert await response.source.receive_body(progress) == b"hello"
            lengths.append(response.content_length)
    assert lengths == [5, None]  # (None: no Content-Length; the head's fields say so)
