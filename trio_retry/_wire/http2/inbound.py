"""The reader's side of an HTTP/2 connection: what each inbound frame and h2 event does.

Called by the connection's reader task (:func:`receive`) with every read; never awaits, never
raises (a broken peer ends the connection through ``conn._die``). The rules it applies:

- frames reach h2 one at a time (``frames.py``), so a stream's head is seen before a broken
  frame after it, however the bytes were read;
- GOAWAY (:func:`on_goaway`): from the moment it is parsed the connection takes no new stream;
  streams above its last-stream-id that got no response byte are proven ``NOT_SENT``
  (``reconnect`` when the connection had served streams: a rotation); on a rotation the number
  of streams the server allowed is kept in ``conn.accepted_streams`` for the pool;
- a malformed response (headers, Content-Length, DATA before the head) fails its own stream
  (``conn.stream_error``); ``RST_STREAM(REFUSED_STREAM)`` before any response byte is
  ``NOT_SENT``; any other reset carries the stage reached.
"""

from __future__ import annotations

from collections.abc import Iterable

import h2.events
import h2.exceptions
from h2.errors import ErrorCodes

from ..._core.evidence import FailureCategory, Stage
from ..exchange import head_too_large
from .frames import DroppedData, FrameError, GoAway
from .headers import content_length, malformed
from .shared import ConnectionState
from .stream import Failure, Stream, StreamState

__all__ = ["on_goaway", "receive"]


def receive(conn: ConnectionState, data: bytes) -> None:
    """Process what the socket gave: frame by frame (``frames.py``), GOAWAY and dropped DATA
    handled here, every other frame through h2 and its events to the streams."""
    try:
        for part in conn._inbound.feed(data):
            if conn.closed:
                return
            if isinstance(part, bytes):
                try:
                    events = conn._h2.receive_data(part)
                except h2.exceptions.ProtocolError as exc:
                    conn._die(Failure(FailureCategory.REMOTE_PROTOCOL, _protocol_message(exc)))
                    return
                for event in events:
                    _on_event(conn, event)
            elif isinstance(part, GoAway):
                on_goaway(conn, part)
            else:
                _on_dropped(conn, part)
    except FrameError as exc:
        conn._die(Failure(FailureCategory.REMOTE_PROTOCOL, str(exc)))


def _on_dropped(conn: ConnectionState, dropped: DroppedData) -> None:
    """DATA before the final head: a stream error (the frame never reached h2, so its
    connection-level flow-control credit is handed back here)."""
    if dropped.length:
        conn._h2.increment_flow_control_window(dropped.length)
    stream = conn._streams.get(dropped.stream_id)
    if stream is not None:
        conn.stream_error(stream, "DATA before its response head")


def _on_event(conn: ConnectionState, event: h2.events.Event) -> None:
    if isinstance(event, h2.events.DataReceived):
        stream = conn._streams.get(event.stream_id or 0)
        flow = event.flow_controlled_length or 0
        if stream is not None and stream.open:
            stream.on_data(bytes(event.data or b""), flow)
        elif flow:
            conn.consumed(event.stream_id or 0, flow)
    elif isinstance(event, h2.events.ResponseReceived):
        stream = conn._streams.get(event.stream_id or 0)
        if stream is None:
            return
        headers = _fields(event.headers)
        problem = malformed(headers, trailers=False)
        length = content_length(headers) if problem is None else None
        if isinstance(length, str):
            problem = length
        if problem is not None:
            conn.stream_error(stream, problem)
            return
        conn._awaiting_head.discard(stream.stream_id)
        stream.on_head(headers, length if isinstance(length, int) else None)
    elif isinstance(event, h2.events.InformationalResponseReceived):
        stream = conn._streams.get(event.stream_id or 0)
        if stream is None:
            return
        headers = _fields(event.headers)
        problem = malformed(headers, trailers=False)
        if problem is not None:
            conn.stream_error(stream, problem)
        else:
            stream.on_first_byte()
    elif isinstance(event, h2.events.TrailersReceived):
        stream = conn._streams.get(event.stream_id or 0)
        headers = _fields(event.headers)
        problem = malformed(headers, trailers=True)
        if problem is not None and stream is not None:
            conn.stream_error(stream, problem)
    elif isinstance(event, h2.events.StreamEnded):
        stream = conn._streams.get(event.stream_id or 0)
        if stream is not None:
            if stream.state is StreamState.OPEN:
                conn.stream_error(stream, "no final head before the end of the stream")
            else:
                stream.on_end()
    elif isinstance(event, h2.events.StreamReset):
        stream = conn._streams.get(event.stream_id or 0)
        if stream is not None:
            _on_reset(conn, stream, int(event.error_code or 0), bool(event.remote_reset))
        conn._capacity.unpark_all()
    elif isinstance(event, h2.events.WindowUpdated):
        if event.stream_id:
            stream = conn._streams.get(event.stream_id)
            if stream is not None:
                stream.wake()
        else:
            for stream in conn._streams.values():
                stream.wake()
    elif isinstance(event, h2.events.RemoteSettingsChanged):
        # MAX_CONCURRENT_STREAMS and INITIAL_WINDOW_SIZE may have changed.
        conn._settings_received = True
        conn._max_streams = conn._h2.remote_settings.max_concurrent_streams
        for stream in conn._streams.values():
            stream.wake()
        conn._capacity.unpark_all()
    elif isinstance(event, h2.events.PingAckReceived):
        conn._pings_answered = conn._pings_sent
        conn._ping_lot.unpark_all()
    elif isinstance(event, h2.events.ConnectionTerminated):  # pragma: no cover - filtered
        on_goaway(conn, GoAway(event.last_stream_id or 0, int(event.error_code or 0)))
    # Pings are answered by h2 itself; priorities, (valid) trailers, ALTSVC and unknown
    # frames change nothing for a client.


def _fields(headers: Iterable[tuple[bytes, bytes]] | None) -> list[tuple[bytes, bytes]]:
    """An event's header block as ``(name, value)`` pairs. h2 runs with
    ``header_encoding=None``, so hpack's tuples hold bytes already: a copy of the list, not
    of each field (a comprehension of ``bytes()`` calls cost 40 times as much)."""
    return list(headers or ())


def _on_reset(conn: ConnectionState, stream: Stream, code: int, remote: bool) -> None:
    conn._awaiting_head.discard(stream.stream_id)
    name = _code_name(code)
    if not remote:
        failure = Failure(
            FailureCategory.REMOTE_PROTOCOL,
            f"the server broke HTTP/2 on stream {stream.stream_id} (reset with {name})",
        )
    elif code == ErrorCodes.REFUSED_STREAM and stream.progress.stage < Stage.RESPONSE_HEAD:
        # RFC 9113 §8.7: REFUSED_STREAM means no application processing happened. Claimed
        # only before any response byte: a server that answered and then "refused" lied.
        failure = Failure(
            FailureCategory.REFUSED_STREAM,
            f"the server refused stream {stream.stream_id} (RST_STREAM REFUSED_STREAM) "
            "before processing it",
            not_sent=True,
        )
    else:
        failure = Failure(
            FailureCategory.CONNECTION_BROKEN,
            f"the server reset stream {stream.stream_id} ({name})",
        )
    stream.fail(failure)


def on_goaway(conn: ConnectionState, goaway: GoAway) -> None:
    """From this moment the connection takes no new stream (``is_available`` is false
    before any other task runs); streams above the last-stream-id are proven unsent."""
    last = goaway.last_stream_id
    if conn._goaway_last is not None:
        last = min(last, conn._goaway_last)  # it may only go down (RFC 9113 §6.8)
    conn._goaway_last = last
    code = _code_name(goaway.error_code)
    refused = 0
    for stream_id, stream in list(conn._streams.items()):
        if stream_id > last:
            # Above the last-stream-id the server promises it did nothing; a stream that
            # already got response bytes proves otherwise, and keeps its stage.
            not_sent = stream.progress.stage < Stage.RESPONSE_HEAD
            refused += not_sent
            stream.fail(
                Failure(
                    FailureCategory.GOAWAY,
                    f"the server sent GOAWAY ({code}, last stream {last}): stream "
                    f"{stream_id} was not processed",
                    not_sent=not_sent,
                    # A rotation (the connection served streams, or the attempt reused
                    # it): sending it again on a fresh connection is routine.
                    reconnect=last > 0 or stream.progress.connection_reused,
                )
            )
    if refused and goaway.error_code == ErrorCodes.NO_ERROR and last > 0:
        conn.accepted_streams = (last + 1) // 2  # client streams are the odd ids from 1
    conn._capacity.unpark_all()
    if not conn._streams:
        conn._die(Failure(FailureCategory.GOAWAY, f"the server sent GOAWAY ({code})", True))


def _code_name(code: int) -> str:
    try:
        return ErrorCodes(code).name
    except ValueError:
        return f"error code {code:#x}"


def _protocol_message(exc: h2.exceptions.ProtocolError) -> str:
    if isinstance(exc, h2.exceptions.DenialOfServiceError) and "header" in str(exc).lower():
        return head_too_large(str(exc))
    return f"the server broke HTTP/2: {exc}"
