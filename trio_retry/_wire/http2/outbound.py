"""The request side of an HTTP/2 connection: a stream opened, its request written, its head read.

Functions of the connection's :class:`~.session.Session`, used by ``HTTP2Connection.
send_request``. Every write goes one way (:func:`send`): advance the stage, queue the frames
with h2, hand them to the writer (``writer.py``) and wait until they are written; a cancelled
wait leaves the frames queued and whole. A failure raised here is the stream's own first (its
proof wins, as ``stream.py`` says), then the connection's.
"""

from __future__ import annotations

import h2.exceptions

from ..._core.evidence import FailureCategory, Stage
from ..clock import Bound
from ..contract import interrupted
from ..exchange import WireRequest, WireResponse, closing_body
from ..progress import AttemptProgress, WireError
from .h2_private import skip_length_checks
from .headers import REASONS
from .session import Session
from .stream import Stream, StreamState
from .writer import WriterBroken

__all__ = [
    "HTTP_VERSION",
    "open_stream",
    "queue_whole",
    "response_head",
    "write_body",
]

HTTP_VERSION = "HTTP/2"
#: The most request body queued before the writer is waited for (see :func:`send_data`).
SEND_BATCH = 256 * 1024


async def open_stream(
    session: Session,
    progress: AttemptProgress,
    headers: list[tuple[bytes, bytes]],
    *,
    end_stream: bool,
    head_request: bool,
) -> Stream:
    """Wait for a free stream slot, then queue the HEADERS frame (the writer sends it).

    Allocating the id and queueing HEADERS happen with no await in between: h2 hands out
    the same id until HEADERS are sent, and ids must reach the wire in increasing order.
    """
    while True:
        if progress.interrupted:
            raise interrupted(progress)
        if session.dark.suspect and not session.closed and session.goaway_last is None:
            # Silent with requests waiting, PINGed (``contract.DarkWatch``): nothing of this
            # request was written; it goes on another connection, uncounted.
            raise WireError.at(
                progress,
                FailureCategory.CONNECTION_BROKEN,
                "the HTTP/2 connection received nothing for a while and takes no new stream "
                "until it answers a PING",
                reconnect=True,
            )
        if session.closed or session.goaway_last is not None:
            # Nothing of this request was written: the stage (POOL) says NOT_SENT.
            category = (
                FailureCategory.GOAWAY
                if session.goaway_last is not None
                else FailureCategory.CONNECTION_BROKEN
            )
            raise WireError.at(
                progress,
                category,
                "the HTTP/2 connection no longer accepts new streams",
                # The connection failed, not the request (as for a stream none of whose
                # bytes left when it died: ``Session.die``): it goes on another, uncounted.
                reconnect=True,
            )
        if len(session.streams) < session.max_streams:
            break
        # The pool hands out a connection with a free slot, but another task may have
        # taken it meanwhile: wait for a stream to finish (bounded by the call deadline).
        await session.capacity.park()
    machine = session.h2
    try:
        stream_id = machine.get_next_available_stream_id()
    except h2.exceptions.NoAvailableStreamIDError as exc:
        session.refuse_new_streams()
        raise WireError.at(
            progress,
            FailureCategory.GOAWAY,
            "the HTTP/2 connection ran out of stream ids",
            reconnect=True,
        ) from exc
    first_offset = session.writer.collect()  # other streams' frames go first
    try:
        machine.send_headers(stream_id, headers, end_stream=end_stream)
    except h2.exceptions.ProtocolError as exc:
        raise WireError.at(
            progress, FailureCategory.LOCAL_PROTOCOL, f"invalid HTTP/2 request: {exc}"
        ) from exc
    if not machine.fast:
        # h2 checks a response's Content-Length inside its stream and fails the *connection*
        # on a mismatch; RFC 9113 §8.1.1 makes it a stream error. Our Stream checks it
        # (stream.py), so h2's checks are switched off for this stream (the fast path makes
        # none, and switches them off on the streams it hands over).
        skip_length_checks(machine.streams[stream_id])
    stream = Stream(
        stream_id,
        progress,
        first_offset=first_offset,
        head_request=head_request,
        owner=session,
        timekeeper=session.run_clock,
        bounds=session.timekeeper,
    )
    session.add(stream)
    return stream


def queue_whole(session: Session, stream: Stream, body: bytes, progress: AttemptProgress) -> bool:
    """A request whose HEADERS are queued and whose body is ``b""`` (sent with them) or fits
    the flow-control windows: queue the body too and return ``True`` without waiting; the
    writer reports the bytes written to the stream (``Stream.on_written``: bytes sent, stage
    ``AWAITING_RESPONSE``). ``False`` (nothing queued): send it with :func:`write_body`.

    The caller then waits only for its response: its frames are whole in the writer's queue,
    so a cancellation from here on cannot cut them (they leave, the reset after them).
    """
    writer = session.writer
    if writer.broken:
        return False
    if body:
        if len(body) > send_window(session, stream.stream_id):
            return False
        session.h2.send_data(stream.stream_id, body, end_stream=True)
        stage = Stage.REQUEST_BODY
    else:
        stage = Stage.REQUEST_HEAD
    before = writer.queued
    mark = writer.collect(request=True)  # dropped by a closing connection if none left
    progress.advance(stage)
    writer.notify(mark, mark - before, stream)
    return True


async def write_body(
    session: Session, stream: Stream, request: WireRequest, progress: AttemptProgress
) -> None:
    body = request.body
    stream_id = stream.stream_id
    if isinstance(body, bytes):
        if body and len(body) <= send_window(session, stream_id):
            # One write for small requests: the body leaves with the head.
            session.h2.send_data(stream_id, body, end_stream=True)
            await send(session, stream, progress, Stage.REQUEST_BODY)
        else:
            await send(session, stream, progress, Stage.REQUEST_HEAD)
            if body:
                await send_data(session, stream, progress, body)
                await end_stream(session, stream, progress)
    else:
        await send(session, stream, progress, Stage.REQUEST_HEAD)
        async with closing_body(body):
            async for chunk in body:
                if chunk:
                    await send_data(session, stream, progress, bytes(chunk))
        await end_stream(session, stream, progress)
    progress.advance(Stage.AWAITING_RESPONSE)


def send_window(session: Session, stream_id: int) -> int:
    machine = session.h2
    try:
        window = machine.local_flow_control_window(stream_id)
    except h2.exceptions.ProtocolError:
        return 0
    return min(window, machine.max_outbound_frame_size)


async def send_data(
    session: Session, stream: Stream, progress: AttemptProgress, data: bytes
) -> None:
    """Send ``data`` as the server's flow-control windows allow: as many frames as the windows
    take, up to :data:`SEND_BATCH` bytes, queued at once, then one wait for them to be written;
    each wait (for window, then for the frames to be written) within the write bound: a server
    that never reopens its window is a write that makes no progress.

    (A wait per frame, the obvious way, cost an upload a round through the writer task per
    16 KiB.)"""
    bound = session.write_bound(progress)
    view = memoryview(data)
    offset = 0
    while offset < len(data):
        with bound:
            size = await wait_send_window(session, stream, progress)
        if not size:
            return  # the server already sent its whole response: it wants no more
        session.writer.collect()
        batch_end = min(len(data), offset + SEND_BATCH)
        try:
            while size and offset < batch_end:
                size = min(size, batch_end - offset)
                session.h2.send_data(stream.stream_id, view[offset : offset + size])
                offset += size
                size = send_window(session, stream.stream_id)
        except h2.exceptions.ProtocolError as exc:
            raise unusable(session, stream, progress, exc) from exc
        await send(session, stream, progress, Stage.REQUEST_BODY, bound)


async def end_stream(session: Session, stream: Stream, progress: AttemptProgress) -> None:
    if stream.state is StreamState.ENDED:
        return
    session.writer.collect()
    try:
        session.h2.end_stream(stream.stream_id)
    except h2.exceptions.ProtocolError as exc:
        raise unusable(session, stream, progress, exc) from exc
    await send(session, stream, progress, Stage.REQUEST_BODY)


def unusable(
    session: Session, stream: Stream, progress: AttemptProgress, exc: Exception
) -> WireError:
    """h2 refused to send on the stream: it was reset or the connection failed."""
    if stream.failure is not None:
        return stream.failure.error(progress)
    if session.death is not None:
        return session.death.error(progress)
    return WireError.at(
        progress, FailureCategory.CONNECTION_BROKEN, f"the stream was closed: {exc}"
    )


async def wait_send_window(session: Session, stream: Stream, progress: AttemptProgress) -> int:
    """The bytes that may be sent now (``0``: the response ended, stop sending)."""
    while True:
        stream.check(progress)  # the stream's own proof first, then the connection's
        if session.death is not None:
            raise session.death.error(progress)
        if stream.state is StreamState.ENDED:
            return 0
        size = send_window(session, stream.stream_id)
        if size > 0:
            return size
        # Woken by WINDOW_UPDATE (stream or connection), a SETTINGS change, or a failure.
        waiters = session.window_waiters
        waiters.add(stream)
        try:
            await stream.wait()
        finally:
            waiters.discard(stream)


async def send(
    session: Session,
    stream: Stream,
    progress: AttemptProgress,
    stage: Stage,
    bound: Bound | None = None,
) -> None:
    """The one path for request bytes: advance the stage, queue what h2 produced for the
    writer, and wait until it is written, within the write bound (an idle bound: each wait
    for the frames queued since the last; ``bound`` if the caller has one already). A
    cancelled wait leaves the frames queued."""
    if bound is None:
        bound = session.write_bound(progress)
    writer = session.writer
    before = writer.queued
    mark = writer.collect(request=True)  # dropped by a closing connection if none left
    progress.advance(stage)
    try:
        with bound:
            await writer.wait_written(mark, progress, bound)
    except WriterBroken:
        stream.check(progress)  # a stream's own proof wins over the connection's death
        assert session.death is not None
        raise session.death.error(progress) from None
    if writer.written < mark:  # a bound ran out: the frames stay queued, whole
        stream.check(progress)
        raise interrupted(progress)
    progress.bytes_sent += mark - before
    stream.check(progress)


def response_head(stream: Stream) -> WireResponse:
    """The final response head of ``stream``, which has it (``stream.head``): the caller
    waited for it within the first-byte bound (``HTTP2Connection.send_request``)."""
    # headers.malformed let through only heads that start with their one :status.
    head = stream.head
    assert head is not None
    status = int(head[0][1])
    return WireResponse(
        status, REASONS.get(status, ""), head[1:], HTTP_VERSION, stream, stream.expected_length
    )
