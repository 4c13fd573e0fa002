"""The http2 package's parts on their own: inbound frame cutting, the stream's first proof,
GOAWAY closing the connection to new streams at once, the idle PING check."""

from __future__ import annotations

import itertools

import h2.events
import pytest
import trio
from h2.errors import ErrorCodes
from hypothesis import given
from hypothesis import strategies as st

from tests.support.h2_frames import frame
from trio_retry._core.evidence import Evidence, FailureCategory, Stage
from trio_retry._wire.contract import Failure
from trio_retry._wire.http2.frames import DroppedData, FrameError, Frames, GoAway, InboundFrames
from trio_retry._wire.http2.stream import Stream, StreamState
from trio_retry._wire.progress import AttemptProgress, WireError

from .test_http2 import LIMIT, Connect, connect, get, goaway, progress_at_pool

__all__ = ["connect"]  # the fixture, shared with test_http2.py

FRAMES = [
    frame(0x4, 0, 0, b""),  # SETTINGS
    frame(0x1, 0x4, 1, b"\x88"),  # HEADERS :status 200
    frame(0x0, 0, 1, b"a" * 300),
    goaway(1),
    frame(0x0, 0, 3, b"early"),  # DATA for a stream still awaiting its head: dropped
    frame(0x0, 0x1, 1, b"b"),
]


@given(st.lists(st.integers(min_value=0), max_size=12))
def test_each_run_ends_at_most_one_frame_or_holds_whole_frames(cuts: list[int]) -> None:
    """Whatever the reads: a byte run ends at most one frame; a :class:`Frames` run starts and
    ends at frame boundaries (whole frames, handed on together); GOAWAY and dropped DATA come
    in order between them."""
    data = b"".join(FRAMES)
    bounds = [0, *sorted(c % (len(data) + 1) for c in cuts), len(data)]
    inbound = InboundFrames({3})
    parts: list[bytes | Frames | GoAway | DroppedData] = []
    for start, end in itertools.pairwise(bounds):
        parts.extend(inbound.feed(data[start:end]))
    runs = [
        (p.data[p.start : p.end], True) if isinstance(p, Frames) else (p, False)
        for p in parts
        if isinstance(p, (bytes, Frames))
    ]
    handed = b"".join(run for run, _ in runs)
    assert handed == FRAMES[0] + FRAMES[1] + FRAMES[2] + FRAMES[5]
    assert [p for p in parts if isinstance(p, (GoAway, DroppedData))] == [
        GoAway(1, 0),
        DroppedData(3, 5),
    ]
    # Re-split the handed bytes at frame boundaries: no byte run crosses one, every Frames
    # run lies between two.
    ends = set(itertools.accumulate(len(f) for f in (FRAMES[0], FRAMES[1], FRAMES[2], FRAMES[5])))
    offset = 0
    for run, whole in runs:
        if whole:
            assert offset == 0 or offset in ends
            assert offset + len(run) in ends
        else:
            assert len([e for e in ends if offset < e <= offset + len(run)]) <= 1
        offset += len(run)
    if not cuts:  # one read: the frames before the GOAWAY together, and the last after it
        assert runs == [(FRAMES[0] + FRAMES[1] + FRAMES[2], True), (FRAMES[5], True)]


CONTINUED = [
    frame(0x1, 0x0, 1, b"\x88"),  # HEADERS, no END_HEADERS
    frame(0x9, 0x0, 1, b"\x0f\x0d\x012"),  # CONTINUATION
    frame(0x9, 0x4, 1, b""),  # CONTINUATION, END_HEADERS
    frame(0x0, 0x1, 1, b"2"),
]


def _fed(data: bytes, cuts: list[int]) -> bytes:
    bounds = [0, *sorted(c % (len(data) + 1) for c in cuts), len(data)]
    inbound = InboundFrames(set())
    handed = b""
    for start, end in itertools.pairwise(bounds):
        for part in inbound.feed(data[start:end]):
            handed += part.data[part.start : part.end] if isinstance(part, Frames) else part
    return handed


@given(st.lists(st.integers(min_value=0), max_size=8))
def test_a_field_block_in_several_frames_is_handed_on_whatever_the_reads(cuts: list[int]) -> None:
    one = b"".join(CONTINUED)
    data = one + one.replace(b"\x00\x00\x00\x01", b"\x00\x00\x00\x03")  # and on stream 3
    assert _fed(data, cuts) == data


@pytest.mark.parametrize(
    ("frames", "says"),
    [
        pytest.param([CONTINUED[0], CONTINUED[3]], "a DATA frame on stream 1 inside", id="data"),
        pytest.param([CONTINUED[0], frame(0x6, 0, 0, bytes(8))], "a PING frame", id="ping"),
        pytest.param([CONTINUED[0], frame(0x9, 0, 3, b"")], "stream 3 inside", id="other-stream"),
        pytest.param(
            [frame(0x1, 0x4, 1, b"\x88"), frame(0x9, 0x4, 1, b"")],
            "no field block left open",
            id="after-end-headers",
        ),
        pytest.param([*CONTINUED[:3], CONTINUED[2]], "no field block left open", id="twice"),
    ],
)
@given(cuts=st.lists(st.integers(min_value=0), max_size=6))
def test_a_field_block_broken_is_a_connection_error(
    frames: list[bytes], says: str, cuts: list[int]
) -> None:
    """RFC 9113 §6.10, on the frame headers, whatever the reads: only CONTINUATION frames of
    its stream inside a field block, and none outside one."""
    with pytest.raises(FrameError, match=says) as info:
        _fed(b"".join(frames), cuts)
    assert info.value.error_code == ErrorCodes.PROTOCOL_ERROR


def test_data_after_its_final_head_stays_in_the_run() -> None:
    """DATA for a stream awaiting its head stays in the run when the run holds that stream's
    final head (an indexed static ``:status``: its processing ends the wait); after any other
    head (a 103, not in the static table) the DATA is judged once the run was processed."""
    awaiting = {1}
    final = frame(0x1, 0x4, 1, b"\x88") + frame(0x0, 0x1, 1, b"body")
    parts = list(InboundFrames(awaiting).feed(final))
    assert parts == [Frames(final, 0, len(final))]
    early = frame(0x1, 0x4, 1, b"\x08\x03103")  # :status 103, literal
    data = frame(0x0, 0x1, 1, b"body")
    feed = InboundFrames(awaiting).feed(early + data)
    assert next(feed) == Frames(early + data, 0, len(early))
    assert list(feed) == [DroppedData(1, 4)]  # still awaiting (the caller processed nothing)


class _Owner:
    def consumed(self, stream_id: int, flow_controlled: int) -> None: ...
    def stream_done(self, stream: Stream, unread: int) -> None: ...
    def stream_error(self, stream: Stream, problem: str) -> None: ...


async def test_a_stream_keeps_its_first_proof() -> None:
    progress = progress_at_pool()
    progress.advance(Stage.REQUEST_BODY)
    stream = Stream(1, progress, first_offset=0, head_request=False, owner=_Owner())
    stream.fail(Failure(FailureCategory.GOAWAY, "above the last stream id", not_sent=True))
    stream.fail(Failure(FailureCategory.CONNECTION_BROKEN, "then the server closed"))
    assert stream.state is StreamState.FAILED
    with pytest.raises(WireError) as info:
        stream.check(progress)
    assert (info.value.evidence, info.value.category) == (Evidence.NOT_SENT, FailureCategory.GOAWAY)


async def test_goaway_then_eof_in_one_read_keeps_streams_above_it_not_sent(
    connect: Connect,
) -> None:
    """GOAWAY(last=1) and the end of the connection arrive together while stream 3 is in
    flight (its whole request written): stream 3 is NOT_SENT (GOAWAY), not SENT_NO_RESPONSE
    (the EOF); stream 1, which the server kept, is SENT_NO_RESPONSE."""
    conn, server = await connect()
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            outcome: dict[int, WireError] = {}

            async def call(path: str) -> None:
                progress = progress_at_pool()
                with pytest.raises(WireError) as info:
                    await conn.send_request(get(path, b"x" * 10, "POST"), progress)
                outcome[len(outcome)] = info.value

            nursery.start_soon(call, "/one")
            await server.next(h2.events.RequestReceived)
            nursery.start_soon(call, "/three")
            await server.next(h2.events.RequestReceived)
            await server.flush(goaway(1))
            server.stream.socket.close()
    by_category = {e.category: e for e in outcome.values()}
    assert by_category[FailureCategory.GOAWAY].evidence is Evidence.NOT_SENT
    assert by_category[FailureCategory.CONNECTION_BROKEN].evidence is Evidence.SENT_NO_RESPONSE


async def test_a_goaway_is_applied_before_the_next_stream_is_opened(connect: Connect) -> None:
    conn, server = await connect()
    with trio.fail_after(LIMIT):
        await server.flush(goaway(0))
        while conn.is_available():  # bounded by fail_after: the reader parses it promptly
            await trio.sleep(0.001)
        with pytest.raises(WireError) as info:
            await conn.send_request(get(), progress_at_pool())
    assert (info.value.evidence, info.value.category) == (Evidence.NOT_SENT, FailureCategory.GOAWAY)


async def test_an_idle_connection_that_does_not_answer_its_ping_is_discarded(
    connect: Connect, autojump_clock: trio.testing.MockClock
) -> None:
    """The server stops reading (a dead peer that kept its socket): after the idle threshold
    the next request first PINGs, gets no answer within ping_timeout, closes the connection
    and fails NOT_SENT with ``reconnect`` set, so the client sends it on a fresh connection
    instead of waiting on a dead one."""
    conn, server = await connect(ping_after_idle=2.0, ping_timeout=1.0)
    progress = AttemptProgress(trio.current_time())
    progress.advance(Stage.POOL)
    # Silence the server: it reads no more, so it never answers the PING.
    server_task_blocker = trio.Event()
    original = server.stream.receive_some

    async def never(max_bytes: int | None = None) -> bytes:
        await server_task_blocker.wait()
        return await original(max_bytes)

    server.stream.receive_some = never  # type: ignore[method-assign]
    await trio.sleep(3.0)
    start = trio.current_time()
    with pytest.raises(WireError) as info:
        await conn.send_request(get(), progress)
    assert trio.current_time() - start == pytest.approx(1.0, abs=0.01)
    assert info.value.evidence is Evidence.NOT_SENT
    assert info.value.reconnect
    assert conn.closed
    server_task_blocker.set()


async def test_an_idle_connection_that_answers_is_used(connect: Connect) -> None:
    conn, server = await connect(ping_after_idle=0.05, ping_timeout=2.0)
    with trio.fail_after(LIMIT):
        await trio.sleep(0.1)
        async with trio.open_nursery() as nursery:

            async def answer() -> None:
                await server.next(h2.events.PingReceived)
                received = await server.next(h2.events.RequestReceived)
                await server.respond(received.stream_id or 0)

            nursery.start_soon(answer)
            progress = progress_at_pool()
            response = await conn.send_request(get(), progress)
            assert response.status == 200
    assert not conn.closed


def test_frames_module_takes_goaway_payload_fields() -> None:
    parts = list(InboundFrames(set()).feed(goaway(7, 2, b"debug")))
    assert parts == [GoAway(7, 2)]
