"""The HTTP/2 fast path's own connection: its state, the calls it takes, the frames it handles.

:class:`FastConnection` is what ``FastMachine`` (``fast.py``) runs while it is engaged: the
streams the fast path keeps, the connection's windows, and, for each call of h2's API the
connection makes and each frame received, either the fast path's answer or the word that it is
not the fast path's (a call returns ``False``; a frame stops the run of frames at that frame).
That word comes before anything changed, so ``FastMachine`` can hand this state to h2 and let
h2 take the call or the frame as if it had been h2's all along. Which calls and frames are the
fast path's, and why a decoded head is never handed on, is ``fast.py``'s docstring.

The frame handlers are this class's methods, with the state they change (each stream's in its
:class:`~.fast_inbound.FastStream`, a record; the moves are here, written once for the
connection rather than as a method call per frame: the hot path of every response); the bytes
it sends are encoded by ``fast_frames.FrameQueue``; what it needs of h2's insides
(decoding a head as h2 does, h2's window algorithm, our SETTINGS acknowledged) comes from
``h2_private``. It never hands over by itself: ``FastMachine`` does.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import h2.connection
import h2.events
import h2.exceptions
from h2.errors import ErrorCodes
from h2.stream import StreamClosedBy
from h2.utilities import is_informational_response
from h2.windows import WindowManager

from .fast_frames import (
    ACK,
    DATA,
    END_HEADERS,
    END_STREAM,
    FRAME_HEADER,
    HEAD,
    HEADERS,
    MAX_WINDOW,
    PADDED,
    PING,
    PRIORITY_FLAG,
    RST_STREAM,
    SETTINGS,
    TOP_ID,
    U32,
    WINDOW_UPDATE,
    FrameQueue,
)
from .fast_inbound import FastStream
from .h2_private import connection_window, decode_headers, processed, settings_acked

__all__ = ["FastConnection", "Received"]

#: Closed streams remembered, and so how long a stream the client reset has the frames that
#: arrive late for it ignored (RFC 9113 §5.1 lets an endpoint limit that period): the last
#: 65,536 streams closed, as h2 remembers its own (``H2Connection.MAX_CLOSED_STREAMS``), a
#: bounded dict whatever the connection's life. Past it a late DATA frame draws a
#: RST_STREAM(STREAM_CLOSED) and a late head is h2's (a connection error), as with h2.
_CLOSED_KEPT = h2.connection.H2Connection.MAX_CLOSED_STREAMS
_SENT_RST = StreamClosedBy.SEND_RST_STREAM


class _Defer(Exception):
    """Raised by a frame handler before any state changed: the frame is h2's."""


_DEFER = _Defer()

#: What :meth:`FastConnection.receive` returns: the events of the frames it handled; the
#: connection error h2 would have raised on the next (the connection is then over), or
#: ``None``; and the frames it did not handle, from a frame boundary (``None``: it handled
#: all, keeping an incomplete frame for the next call).
Received = tuple[list[h2.events.Event], h2.exceptions.ProtocolError | None, bytes | None]


class FastConnection:
    """The fast path's state and moves, made from h2's state once the handshake is done."""

    __slots__ = (
        "_conn_window",
        "_h2",
        "_max_frame",
        "_max_streams",
        "_remote_window",
        "closed",
        "highest",
        "local_window",
        "opened",
        "out_window",
        "pending",
        "queue",
        "streams",
    )

    def __init__(self, machine: h2.connection.H2Connection, queue: FrameQueue) -> None:
        """Take over from ``machine`` (h2, with no stream opened yet), queueing into
        ``queue``."""
        self._h2 = machine
        self.queue = queue
        #: The open streams the fast path keeps, by id.
        self.streams: dict[int, FastStream] = {}
        #: How each stream the fast path forgot was closed, the most recent
        #: :data:`_CLOSED_KEPT` (as h2 keeps its closed streams).
        self.closed: dict[int, StreamClosedBy | None] = {}
        #: The highest stream id opened; whether any was.
        self.highest = 0
        self.opened = False
        #: An incomplete frame from the last read.
        self.pending = bytearray()
        #: The connection's send window; our initial window of a stream.
        self.out_window = machine.outbound_flow_control_window
        self.local_window = machine.local_settings.initial_window_size
        self._conn_window: WindowManager = connection_window(machine)
        self._remote_window = machine.remote_settings.initial_window_size
        # The server's settings change only by a SETTINGS frame, which is h2's.
        self._max_streams = machine.remote_settings.max_concurrent_streams
        self._max_frame = machine.max_inbound_frame_size

    # --- calls --------------------------------------------------------------------------------

    def gone(self, stream_id: int) -> bool:
        """A call on a stream the fast path does not keep: raise as h2 does for a stream it
        forgot (``StreamClosedError``); ``False`` for one never opened (h2 says how)."""
        if 0 < stream_id <= self.highest and stream_id & 1:
            raise h2.exceptions.StreamClosedError(stream_id)
        return False

    def local_flow_control_window(self, stream_id: int) -> int | None:
        stream = self.streams.get(stream_id)
        if stream is None:
            self.gone(stream_id)
            return None
        out = self.out_window
        return out if out < stream.out_window else stream.out_window

    def next_stream_id(self) -> int:
        stream_id = self.highest + 2 if self.highest else 1
        if stream_id > TOP_ID:
            raise h2.exceptions.NoAvailableStreamIDError("Exhausted allowed stream IDs")
        return stream_id

    def increment_flow_control_window(self, increment: int, stream_id: int | None) -> bool:
        if stream_id is not None or not 1 <= increment <= MAX_WINDOW:
            return False
        self._conn_window.window_opened(increment)
        self.queue.window_update(0, increment)
        return True

    def send_headers(self, stream_id: int, headers: Iterable[Any], end_stream: bool) -> bool:
        streams = self.streams
        if (
            stream_id in streams
            or stream_id <= self.highest
            or not stream_id & 1
            or stream_id > TOP_ID
            or len(streams) >= self._max_streams
            or type(headers) is not list
        ):
            return False
        machine = self._h2
        block = machine.encoder.encode(headers)
        streams[stream_id] = FastStream(
            stream_id, self.local_window, self._remote_window, headers, end_stream
        )
        self.highest = stream_id
        self.opened = True
        self.queue.headers(stream_id, block, end_stream, machine.max_outbound_frame_size)
        return True

    def send_data(self, stream_id: int, data: bytes | memoryview, end_stream: bool) -> bool:
        stream = self.streams.get(stream_id)
        size = len(data)
        if stream is None:
            return size > 0 and self.gone(stream_id)
        if (
            stream.local_ended
            or (size and (size > self.out_window or size > stream.out_window))
            or size > self._h2.max_outbound_frame_size
        ):
            return False
        self.queue.data(stream_id, data, end_stream)
        self.out_window -= size
        stream.out_window -= size
        if end_stream:
            self._local_end(stream)
        return True

    def end_stream(self, stream_id: int) -> bool:
        stream = self.streams.get(stream_id)
        if stream is None:
            return self.gone(stream_id)
        if stream.local_ended:
            return False
        self.queue.data(stream_id, b"", True)
        self._local_end(stream)
        return True

    def reset_stream(self, stream_id: int, error_code: int) -> bool:
        stream = self.streams.get(stream_id)
        if stream is None:
            return self.gone(stream_id)
        self.queue.rst_stream(stream_id, int(error_code))
        self._close(stream, StreamClosedBy.SEND_RST_STREAM)
        return True

    def ping(self, opaque_data: bytes) -> bool:
        if type(opaque_data) is not bytes or len(opaque_data) != 8:
            return False
        self.queue.ping(opaque_data)
        return True

    def acknowledge_received_data(self, acknowledged_size: int, stream_id: int) -> bool:
        if stream_id <= 0 or stream_id > self.highest or acknowledged_size < 0:
            return False
        queue = self.queue
        increment = processed(self._conn_window, acknowledged_size)
        if increment:
            queue.window_update(0, increment)
        stream = self.streams.get(stream_id)
        if stream is not None:
            increment = processed(stream.window, acknowledged_size)
            if increment:
                queue.window_update(stream_id, increment)
        return True

    def _local_end(self, stream: FastStream) -> None:
        stream.local_ended = True
        if stream.remote_ended:
            self._close(stream, StreamClosedBy.SEND_END_STREAM)

    def _close(self, stream: FastStream, closed_by: StreamClosedBy | None) -> None:
        """Forget ``stream`` (closed as ``closed_by`` says), remembering how it closed."""
        del self.streams[stream.stream_id]
        closed = self.closed
        closed[stream.stream_id] = closed_by
        if len(closed) > _CLOSED_KEPT:
            del closed[next(iter(closed))]  # the oldest (dicts keep their order)

    # --- frames -------------------------------------------------------------------------------

    def receive(self, data: bytes, pos: int, end: int) -> Received:
        """The frames in ``data[pos:end]``, handled one at a time as h2 would handle each
        (an incomplete frame is kept for the next call), up to the first that is not the
        fast path's (nothing of it changed) or that h2 would refuse (h2's error, the
        frame's own events dropped: h2 delivers none of a frame it refuses)."""
        pending = self.pending
        if pending:
            pending += data[pos:end]
            data = bytes(pending)
            pending.clear()
            pos = 0
            end = len(data)
        events: list[h2.events.Event] = []
        mark = 0
        # DATA payloads are views of the read, not copies: ``data`` is ``bytes``, which
        # nothing changes, and the stream joins what it hands out (``stream.py``'s ``_take``).
        view = memoryview(data)
        try:
            while end - pos >= FRAME_HEADER:
                head, flags, stream_id = HEAD.unpack_from(data, pos)
                length = head >> 8
                if length > self._max_frame:
                    return events, None, data[pos:end]  # h2 refuses it on its header
                if end - pos < FRAME_HEADER + length:
                    break
                mark = len(events)
                kind = head & 0xFF
                stream_id &= TOP_ID
                start = pos + FRAME_HEADER
                try:
                    if kind == DATA and stream_id & 1:  # a download's every frame: no dispatch
                        self._data(flags, stream_id, view[start : start + length], length, events)
                    else:
                        self._frame(kind, flags, stream_id, data, view, start, length, events)
                except _Defer:
                    return events, None, data[pos:end]  # h2 takes it and all after it
                pos = start + length
        except h2.exceptions.ProtocolError as exc:
            del events[mark:]
            return events, exc, None
        if pos < end:
            pending += data[pos:end]
        return events, None, None

    def _frame(
        self,
        kind: int,
        flags: int,
        stream_id: int,
        data: bytes,
        view: memoryview,
        start: int,
        length: int,
        events: list[h2.events.Event],
    ) -> None:
        """One complete frame, its payload at ``data[start:]`` (and ``view``); raises
        :class:`_Defer` before changing anything if it is not the fast path's."""
        if stream_id and not stream_id & 1:
            raise _DEFER  # the server's own stream ids: none here (push is off)
        if kind == DATA:
            self._data(flags, stream_id, view[start : start + length], length, events)
        elif kind == HEADERS:
            self._headers(flags, stream_id, data[start : start + length], events)
        elif kind == WINDOW_UPDATE:
            if length != 4:
                raise _DEFER
            increment = U32.unpack_from(data, start)[0] & TOP_ID
            if not increment:
                raise _DEFER
            if not stream_id:
                window = self.out_window + increment
                if window > MAX_WINDOW:
                    raise _DEFER
                self.out_window = window
                events.append(h2.events.WindowUpdated(stream_id=0, delta=increment))
                return
            stream = self.streams.get(stream_id)
            if stream is None:
                if stream_id > self.highest:
                    raise _DEFER
                return  # a closed stream's: h2 ignores it
            window = stream.out_window + increment
            if window > MAX_WINDOW:
                raise _DEFER
            stream.out_window = window
            events.append(h2.events.WindowUpdated(stream_id=stream_id, delta=increment))
        elif kind == RST_STREAM:
            if length != 4 or not stream_id:
                raise _DEFER
            stream = self.streams.get(stream_id)
            if stream is None:
                if stream_id > self.highest:
                    raise _DEFER
                return  # a closed stream's: h2 ignores it
            code = U32.unpack_from(data, start)[0]
            try:
                error_code: int = ErrorCodes(code)
            except ValueError:
                error_code = code
            self._close(stream, StreamClosedBy.RECV_RST_STREAM)
            events.append(
                h2.events.StreamReset(stream_id=stream_id, error_code=error_code, remote_reset=True)
            )
        elif kind == PING:
            if length != 8 or stream_id:
                raise _DEFER
            opaque = data[start : start + 8]
            if flags & ACK:
                events.append(h2.events.PingAckReceived(ping_data=opaque))
            else:
                self.queue.ping(opaque, ACK)
                events.append(h2.events.PingReceived(ping_data=opaque))
        elif kind == SETTINGS and flags & ACK and not length and not stream_id:
            self._settings_acked(events)
        else:
            raise _DEFER

    def _settings_acked(self, events: list[h2.events.Event]) -> None:
        """The server acknowledged our SETTINGS: h2 (which has no stream) applies them; the
        windows of the streams the fast path keeps change with our initial window."""
        reference = self._h2
        changes = settings_acked(reference)
        self._max_frame = reference.max_inbound_frame_size
        window = reference.local_settings.initial_window_size
        delta = window - self.local_window
        if delta:
            # (O(streams), once per SETTINGS ACK that changed our window: once or twice a
            # connection.)
            for stream in self.streams.values():
                manager = stream.window
                maximum = manager.max_window_size + delta
                manager.window_opened(delta)
                manager.max_window_size = maximum
            self.local_window = window
        event = h2.events.SettingsAcknowledged()
        event.changed_settings = changes
        events.append(event)

    def _data(
        self,
        flags: int,
        stream_id: int,
        payload: memoryview,
        length: int,
        events: list[h2.events.Event],
    ) -> None:
        if flags & PADDED or not stream_id:
            raise _DEFER
        conn = self._conn_window
        if conn.current_window_size < length:
            raise _DEFER  # a flow-control violation: h2 says how
        stream = self.streams.get(stream_id)
        if stream is None:
            if stream_id > self.highest:
                raise _DEFER
            # Late DATA for a stream that closed: as h2, it counts against the connection's
            # window and its credit goes back (§6.9: the server's window must not leak).
            # On a stream the client reset it is then ignored (RFC 9113 §5.1, as
            # ``h2_private.ignore_after_reset`` makes h2 do); otherwise answered with
            # RST_STREAM(STREAM_CLOSED), as h2 answers it.
            conn.window_consumed(length)
            increment = processed(conn, length)
            if increment:
                self.queue.window_update(0, increment)
            if self.closed.get(stream_id) is not _SENT_RST:
                self.queue.rst_stream(stream_id, ErrorCodes.STREAM_CLOSED)
            return
        if (
            stream.remote_ended
            or not stream.headers_received
            or stream.window.current_window_size < length
        ):
            raise _DEFER
        # h2's ``window_consumed``, whose check (never below 0) the one above made.
        conn.current_window_size -= length
        stream.window.current_window_size -= length
        # h2 types ``data`` as bytes; a view of the read holds the same bytes (inbound.py and
        # the stream take either), without a copy per frame.
        event = h2.events.DataReceived(
            stream_id=stream_id,
            data=payload,  # type: ignore[arg-type]
            flow_controlled_length=length,
        )
        events.append(event)
        if flags & END_STREAM:
            ended = h2.events.StreamEnded(stream_id=stream_id)
            event.stream_ended = ended
            events.append(ended)
            self._remote_end(stream)

    def _headers(
        self, flags: int, stream_id: int, block: bytes, events: list[h2.events.Event]
    ) -> None:
        if flags & (PADDED | PRIORITY_FLAG) or not flags & END_HEADERS or not stream_id:
            raise _DEFER
        stream = self.streams.get(stream_id)
        if stream is None:
            closed_by = self.closed.get(stream_id)
            if stream_id > self.highest or (
                closed_by is not _SENT_RST and closed_by is not StreamClosedBy.RECV_RST_STREAM
            ):
                raise _DEFER
            # A head for a stream that was reset: decoded (the HPACK table must follow the
            # server's), then ignored if the client reset it (RFC 9113 §5.1), answered with
            # RST_STREAM(STREAM_CLOSED) if the server did, as h2 does (``h2_private.
            # ignore_after_reset``).
            decode_headers(self._h2.decoder, block)
            if closed_by is not _SENT_RST:
                self.queue.rst_stream(stream_id, ErrorCodes.STREAM_CLOSED)
            return
        if stream.remote_ended or stream.trailers_received:
            raise _DEFER
        # From here on the block is decoded: no deferral (h2 would decode it again).
        headers = list(decode_headers(self._h2.decoder, block))
        end_stream = flags & END_STREAM
        first = headers[0] if headers else None
        if (
            first[1][:1] == b"1"
            if first is not None and first[0] == b":status"
            else is_informational_response(headers)
        ):
            if end_stream:
                raise h2.exceptions.ProtocolError(
                    "Cannot set END_STREAM on informational responses"
                )
            if stream.headers_received:
                self._close(stream, None)  # h2's stream machine closes on a refused move
                raise h2.exceptions.ProtocolError("Informational response after final response")
            stream.informational = True
            events.append(
                h2.events.InformationalResponseReceived(stream_id=stream_id, headers=headers)
            )
            return
        event: h2.events.ResponseReceived | h2.events.TrailersReceived
        if stream.headers_received:
            # h2's stream machine marks the second head as trailers before its END_STREAM
            # check refuses it: so does this one (the hand-over replays it; a hypothesis
            # example found it).
            stream.trailers_received = True
            if not end_stream:
                raise h2.exceptions.ProtocolError("Trailers must have END_STREAM set")
            event = h2.events.TrailersReceived(stream_id=stream_id, headers=headers)
        else:
            stream.headers_received = True
            event = h2.events.ResponseReceived(stream_id=stream_id, headers=headers)
        events.append(event)
        if end_stream:
            ended = h2.events.StreamEnded(stream_id=stream_id)
            event.stream_ended = ended
            events.append(ended)
            self._remote_end(stream)

    def _remote_end(self, stream: FastStream) -> None:
        stream.remote_ended = True
        if stream.local_ended:
            self._close(stream, StreamClosedBy.RECV_END_STREAM)
