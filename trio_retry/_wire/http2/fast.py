"""A strict fast path for HTTP/2's common frames, in front of h2, which stays the reference.

h2 is a general HTTP/2 state machine: every frame is parsed into an object, every stream has a
state machine of its own, every header block goes through encoding and validation helpers, and
counting the open streams walks all of them. For a client that opens a stream, sends a small
request and reads a small response, that generality was most of a request's cost (h2 and hpack
were 47 % of an HTTP/2 request's profile with 32 concurrent streams, twice HTTP/1.1's cost).

:class:`FastMachine` stands where the connection used an ``h2.connection.H2Connection``, with
the same methods (the ones the connection uses). It starts as a plain wrapper, delegating to h2
through the handshake; :meth:`FastMachine.engage` then takes over the common frames and calls:

- out: HEADERS (with CONTINUATION when the block is larger than a frame), DATA, END_STREAM,
  RST_STREAM, PING, WINDOW_UPDATE (the same window algorithm: h2's own ``WindowManager``);
- in: a response's HEADERS (final, informational, trailers), unpadded DATA, WINDOW_UPDATE,
  RST_STREAM, PING and its ACK, the ACK of our SETTINGS, and the frames that arrive late for
  a stream the client reset (handled as h2 handles them: DATA's credit handed back, a
  RST_STREAM(STREAM_CLOSED) answered).

Anything else — a SETTINGS change, a padded or prioritised frame, PRIORITY, PUSH_PROMISE, an
unknown frame type, a frame on a stream in a state the fast path does not keep, a flow-control
violation, a call h2 would refuse — *defers to h2*: the machine hands its state over
(:meth:`FastMachine._handover`: h2's stream objects made by replaying each stream's inputs
through h2's own state machine, the window managers handed over as the same objects) and h2
handles that frame and everything after it, on that connection, for good. A deferral is
decided before any state is touched, with one exception by necessity: a header block is
decoded (which may change the HPACK table) before the stream is looked at, exactly as h2 does
it, so the fast path never defers after decoding; it finishes that frame itself, errors
included (an HPACK error ends the connection as h2 ends it).

What makes it safe to stand in for h2: for every sequence of calls and received bytes, the
bytes it queues, the events it returns and the h2 exceptions it raises are h2's own (a
differential property test, ``tests/wire/test_h2_fast.py``, runs random client scripts and
server frames through both, deferring at random points). What it does not do is exactly what
it defers. ``Client(http2_fast_path=False)`` (or ``TRIO_RETRY_HTTP2_FAST_PATH=0``) keeps h2 on
every frame.

Why not the obvious alternatives: subclassing H2Connection to shortcut its hot methods still
builds a frame object and a stream state machine per request (the cost is in the generality,
not in one method); writing a complete HTTP/2 engine instead of deferring would make every rare
frame and every error ours to get right, where h2 already is.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from h2.connection import ConnectionInputs, ConnectionState, _decode_headers
from h2.errors import ErrorCodes
from h2.stream import H2Stream, StreamClosedBy, StreamInputs
from h2.utilities import is_informational_response
from h2.windows import WindowManager

__all__ = ["FastMachine", "no_length_check"]

_HEAD = struct.Struct(">IBI")  # 24-bit length + 8-bit type, flags, R + 31-bit stream id
_U32 = struct.Struct(">I")
_FRAME_HEADER = 9
_DATA = 0x0
_HEADERS = 0x1
_RST_STREAM = 0x3
_SETTINGS = 0x4
_PING = 0x6
_WINDOW_UPDATE = 0x8
_CONTINUATION = 0x9
_END_STREAM = 0x1
_ACK = 0x1
_END_HEADERS = 0x4
_PADDED = 0x8
_PRIORITY_FLAG = 0x20
_TOP_ID = 2**31 - 1
_MAX_WINDOW = 2**31 - 1
#: Closed streams remembered (as h2 remembers them: ``H2Connection.MAX_CLOSED_STREAMS``).
_CLOSED_KEPT = h2.connection.H2Connection.MAX_CLOSED_STREAMS


def no_length_check(*_args: object) -> None:
    """Stands in for h2's per-stream Content-Length checks: ``stream.py`` checks a response's
    length itself, as a stream error (h2's check fails the connection)."""


class _Stream:
    """What the fast path keeps of one open stream: the inputs h2's stream state machine would
    have seen (replayed into h2 by a hand-over), and the stream's windows."""

    __slots__ = (
        "authority",
        "headers_received",
        "informational",
        "local_ended",
        "method",
        "out_window",
        "remote_ended",
        "stream_id",
        "trailers_received",
        "window",
    )

    #: h2's ``H2Stream.closed``: a stream the fast path keeps is never closed (it forgets it).
    closed = False

    def __init__(self, stream_id: int, window: int, out_window: int) -> None:
        self.stream_id = stream_id
        self.window = WindowManager(window)
        self.out_window = out_window
        self.local_ended = False
        self.remote_ended = False
        self.headers_received = False
        self.trailers_received = False
        self.informational = False
        self.method: bytes | None = None
        self.authority: bytes | None = None


def _processed(manager: WindowManager, size: int) -> int:
    """``manager.process_bytes(size)``, h2's window algorithm, in one call instead of two
    (``tests/wire/test_h2_fast.py`` holds it to h2's: every WINDOW_UPDATE is compared)."""
    processed = manager._bytes_processed = manager._bytes_processed + size
    if not processed:
        return 0
    current = manager.current_window_size
    maximum = manager.max_window_size
    if (current == 0 and processed > min(1024, maximum // 4)) or processed >= maximum // 2:
        increment = min(processed, maximum - current)
        manager._bytes_processed = 0
        manager.current_window_size = current + increment
        return increment
    return 0


class _Defer(Exception):
    """Raised inside the fast path before any state changed: h2 takes this over."""


_DEFER = _Defer()


class FastMachine:
    """An h2 connection whose common frames take the fast path; see the module docstring.

    Until :meth:`engage`, and after a hand-over, every call goes to h2 (``machine``).
    """

    __slots__ = (
        "_closed",
        "_conn_window",
        "_fast",
        "_h2",
        "_highest",
        "_local_window",
        "_max_frame",
        "_max_streams",
        "_opened",
        "_out",
        "_out_window",
        "_pending",
        "_remote_window",
        "_streams",
        "handed_over",
    )

    def __init__(self, machine: h2.connection.H2Connection) -> None:
        self._h2 = machine
        self._fast = False
        #: Set when the fast path handed the connection to h2 (for tests and ``repr``).
        self.handed_over = False
        self._streams: dict[int, _Stream] = {}
        self._out = bytearray()
        self._pending = bytearray()  # an incomplete frame from the last read
        self._highest = 0
        self._opened = False
        self._out_window = 0
        self._remote_window = 0
        self._local_window = 0
        self._max_streams = 0
        self._max_frame = 0
        #: How each stream the fast path forgot was closed (h2's ``_closed_streams``, which a
        #: hand-over fills from this), the most recent :data:`_CLOSED_KEPT`.
        self._closed: dict[int, StreamClosedBy | None] = {}
        self._conn_window: WindowManager = machine._inbound_flow_control_window_manager

    # --- taking over and handing back ---------------------------------------------------------

    def engage(self) -> bool:
        """Take the common frames over from h2, if h2's state is one the fast path keeps: no
        stream opened yet, no header block half received, nothing of h2's still to send, a
        connection not closed. Returns whether it did."""
        machine = self._h2
        buffer = machine.incoming_buffer
        if (
            self._fast
            or self.handed_over
            or machine.streams
            or machine.highest_outbound_stream_id
            or buffer._headers_buffer
            or machine._data_to_send
            or machine.state_machine.state is ConnectionState.CLOSED
        ):
            return False
        self._pending += buffer._data
        buffer._data = bytearray()
        self._conn_window = machine._inbound_flow_control_window_manager
        self._out_window = machine.outbound_flow_control_window
        self._remote_window = machine.remote_settings.initial_window_size
        self._local_window = machine.local_settings.initial_window_size
        # The server's settings change only by a SETTINGS frame, which the fast path defers.
        self._max_streams = machine.remote_settings.max_concurrent_streams
        self._max_frame = machine.max_inbound_frame_size
        self._fast = True
        return True

    def _handover(self) -> None:
        """From now on h2 handles everything: give it the state the fast path kept."""
        if not self._fast:
            return
        self._fast = False
        self.handed_over = True
        machine = self._h2
        machine.highest_outbound_stream_id = self._highest
        machine.outbound_flow_control_window = self._out_window
        if self._opened and machine.state_machine.state is ConnectionState.IDLE:
            machine.state_machine.process_input(ConnectionInputs.SEND_HEADERS)
        for stream_id, kept in self._streams.items():
            stream = H2Stream(
                stream_id,
                config=machine.config,
                inbound_window_size=self._local_window,
                outbound_window_size=kept.out_window,
            )
            stream._inbound_window_manager = kept.window
            stream.max_outbound_frame_size = machine.max_outbound_frame_size
            stream.request_method = kept.method
            stream._authority = kept.authority
            stream.__dict__["_initialize_content_length"] = no_length_check
            stream.__dict__["_track_content_length"] = no_length_check
            states = stream.state_machine
            states.process_input(StreamInputs.SEND_HEADERS)
            if kept.local_ended:
                states.process_input(StreamInputs.SEND_END_STREAM)
            if kept.informational:
                states.process_input(StreamInputs.RECV_INFORMATIONAL_HEADERS)
            if kept.headers_received:
                states.process_input(StreamInputs.RECV_HEADERS)
            if kept.remote_ended:
                states.process_input(StreamInputs.RECV_END_STREAM)
            machine.streams[stream_id] = stream
        self._streams = {}
        for stream_id, closed_by in self._closed.items():
            machine._closed_streams[stream_id] = closed_by
        self._closed = {}
        if self._pending:
            machine.incoming_buffer.add_data(bytes(self._pending))
            self._pending.clear()

    # --- what the connection reads ------------------------------------------------------------

    @property
    def fast(self) -> bool:
        """The fast path handles the common frames now (engaged, not handed over)."""
        return self._fast

    @property
    def streams(self) -> dict[int, Any]:
        """The open streams by id (the fast path's, or h2's); each has ``closed``."""
        return self._streams if self._fast else self._h2.streams

    @property
    def remote_settings(self) -> h2.settings.Settings:
        return self._h2.remote_settings

    @property
    def max_outbound_frame_size(self) -> int:
        return self._h2.max_outbound_frame_size

    @property
    def highest_outbound_stream_id(self) -> int:
        return self._highest if self._fast else self._h2.highest_outbound_stream_id

    @property
    def open_outbound_streams(self) -> int:
        return len(self._streams) if self._fast else self._h2.open_outbound_streams

    @property
    def encoder(self) -> Any:
        return self._h2.encoder

    @property
    def decoder(self) -> Any:
        return self._h2.decoder

    def local_flow_control_window(self, stream_id: int) -> int:
        if self._fast:
            stream = self._streams.get(stream_id)
            if stream is not None:
                out = self._out_window
                return out if out < stream.out_window else stream.out_window
            self._gone(stream_id)
        return self._h2.local_flow_control_window(stream_id)

    def _gone(self, stream_id: int) -> None:
        """A call on a stream the fast path does not keep: raise as h2 does for a stream it
        forgot (``StreamClosedError``), or hand over (one never opened: h2 says how)."""
        if 0 < stream_id <= self._highest and stream_id & 1:
            raise h2.exceptions.StreamClosedError(stream_id)
        self._handover()

    def get_next_available_stream_id(self) -> int:
        if not self._fast:
            return self._h2.get_next_available_stream_id()
        stream_id = self._highest + 2 if self._highest else 1
        if stream_id > _TOP_ID:
            raise h2.exceptions.NoAvailableStreamIDError("Exhausted allowed stream IDs")
        return stream_id

    # --- sending ------------------------------------------------------------------------------

    def initiate_connection(self) -> None:
        self._handover()
        self._h2.initiate_connection()

    def increment_flow_control_window(self, increment: int, stream_id: int | None = None) -> None:
        if self._fast and stream_id is None and 1 <= increment <= _MAX_WINDOW:
            self._conn_window.window_opened(increment)
            self._out += _HEAD.pack(4 << 8 | _WINDOW_UPDATE, 0, 0) + _U32.pack(increment)
            return
        self._handover()
        self._h2.increment_flow_control_window(increment, stream_id)

    def send_headers(
        self, stream_id: int, headers: Iterable[Any], end_stream: bool = False
    ) -> None:
        if (
            not self._fast
            or stream_id in self._streams
            or stream_id <= self._highest
            or not stream_id & 1
            or stream_id > _TOP_ID
            or len(self._streams) >= self._max_streams
            or type(headers) is not list
        ):
            self._handover()
            self._h2.send_headers(stream_id, headers, end_stream=end_stream)
            return
        machine = self._h2
        block = machine.encoder.encode(headers)
        stream = _Stream(stream_id, self._local_window, self._remote_window)
        self._streams[stream_id] = stream
        self._highest = stream_id
        self._opened = True
        # As h2's stream: the method and the authority of the request, from its pseudo-headers.
        for name, value in headers:
            if name == b":method":
                if stream.method is None:  # the first, as h2 takes it
                    stream.method = value
            elif name == b":authority":
                if stream.authority is None:
                    stream.authority = value
            elif name[:1] != b":":
                break
        flags = _END_STREAM if end_stream else 0
        size = machine.max_outbound_frame_size
        out = self._out
        if len(block) <= size:
            out += _HEAD.pack(len(block) << 8 | _HEADERS, flags | _END_HEADERS, stream_id)
            out += block
        else:
            out += _HEAD.pack(size << 8 | _HEADERS, flags, stream_id)
            out += block[:size]
            for start in range(size, len(block), size):
                piece = block[start : start + size]
                last = _END_HEADERS if start + size >= len(block) else 0
                out += _HEAD.pack(len(piece) << 8 | _CONTINUATION, last, stream_id)
                out += piece
        if end_stream:
            stream.local_ended = True

    def send_data(self, stream_id: int, data: bytes | memoryview, end_stream: bool = False) -> None:
        stream = self._streams.get(stream_id) if self._fast else None
        size = len(data)
        if stream is None and self._fast and size:
            self._gone(stream_id)
        if (
            stream is None
            or stream.local_ended
            or (size and (size > self._out_window or size > stream.out_window))
            or size > self._h2.max_outbound_frame_size
        ):
            self._handover()
            self._h2.send_data(stream_id, data, end_stream=end_stream)
            return
        out = self._out
        out += _HEAD.pack(size << 8 | _DATA, _END_STREAM if end_stream else 0, stream_id)
        out += data
        self._out_window -= size
        stream.out_window -= size
        if end_stream:
            stream.local_ended = True
            if stream.remote_ended:
                self._close(stream, StreamClosedBy.SEND_END_STREAM)

    def end_stream(self, stream_id: int) -> None:
        stream = self._streams.get(stream_id) if self._fast else None
        if stream is None and self._fast:
            self._gone(stream_id)
        if stream is None or stream.local_ended:
            self._handover()
            self._h2.end_stream(stream_id)
            return
        self._out += _HEAD.pack(_DATA, _END_STREAM, stream_id)
        stream.local_ended = True
        if stream.remote_ended:
            self._close(stream, StreamClosedBy.SEND_END_STREAM)

    def reset_stream(self, stream_id: int, error_code: int = 0) -> None:
        stream = self._streams.get(stream_id) if self._fast else None
        if stream is None:
            if self._fast:
                self._gone(stream_id)
            self._h2.reset_stream(stream_id, error_code)
            return
        self._out += _HEAD.pack(4 << 8 | _RST_STREAM, 0, stream_id) + _U32.pack(int(error_code))
        self._close(stream, StreamClosedBy.SEND_RST_STREAM)

    def ping(self, opaque_data: bytes) -> None:
        if not self._fast or type(opaque_data) is not bytes or len(opaque_data) != 8:
            self._handover()
            self._h2.ping(opaque_data)
            return
        self._out += _HEAD.pack(8 << 8 | _PING, 0, 0) + opaque_data

    def acknowledge_received_data(self, acknowledged_size: int, stream_id: int) -> None:
        if not self._fast or stream_id <= 0 or stream_id > self._highest or acknowledged_size < 0:
            self._handover()
            self._h2.acknowledge_received_data(acknowledged_size, stream_id)
            return
        increment = _processed(self._conn_window, acknowledged_size)
        if increment:
            self._out += _HEAD.pack(4 << 8 | _WINDOW_UPDATE, 0, 0) + _U32.pack(increment)
        stream = self._streams.get(stream_id)
        if stream is not None:
            increment = _processed(stream.window, acknowledged_size)
            if increment:
                self._out += _HEAD.pack(4 << 8 | _WINDOW_UPDATE, 0, stream_id) + _U32.pack(
                    increment
                )

    def data_to_send(self) -> bytes:
        out = self._out
        if out:
            data = bytes(out)
            out.clear()
            if not self._fast:
                data += self._h2.data_to_send()
            return data
        return b"" if self._fast else self._h2.data_to_send()

    def _close(self, stream: _Stream, closed_by: StreamClosedBy | None) -> None:
        del self._streams[stream.stream_id]
        closed = self._closed
        closed[stream.stream_id] = closed_by
        if len(closed) > _CLOSED_KEPT:
            del closed[next(iter(closed))]  # the oldest (dicts keep their order)

    # --- receiving ----------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> list[h2.events.Event]:
        """As ``H2Connection.receive_data``: the events of the complete frames in ``data``
        (an incomplete frame is kept for the next call)."""
        if not self._fast:
            return self._h2.receive_data(data)
        pending = self._pending
        if pending:
            pending += data
            data = bytes(pending)
            pending.clear()
        events: list[h2.events.Event] = []
        pos = 0
        end = len(data)
        deferred = False
        try:
            while end - pos >= _FRAME_HEADER:
                head, flags, stream_id = _HEAD.unpack_from(data, pos)
                length = head >> 8
                if length > self._max_frame:
                    deferred = True  # h2 refuses it on its header
                    break
                if end - pos < _FRAME_HEADER + length:
                    break
                try:
                    self._frame(head & 0xFF, flags, stream_id & _TOP_ID, data, pos, length, events)
                except _Defer:
                    deferred = True  # h2 takes this frame and everything after it
                    break
                pos += _FRAME_HEADER + length
        except h2.exceptions.ProtocolError as exc:
            # As h2: a connection error queues GOAWAY and raises (no events delivered).
            self._handover()
            self._h2._terminate_connection(exc.error_code)
            raise
        if deferred:
            self._handover()
            return events + self._h2.receive_data(data[pos:])
        if pos < end:
            pending += data[pos:]
        return events

    def _frame(
        self,
        kind: int,
        flags: int,
        stream_id: int,
        data: bytes,
        pos: int,
        length: int,
        events: list[h2.events.Event],
    ) -> None:
        """One complete frame; raises :class:`_Defer` before changing anything if it is not
        the fast path's to handle."""
        if stream_id and not stream_id & 1:
            raise _DEFER  # the server's own stream ids: none here (push is off)
        start = pos + _FRAME_HEADER
        if kind == _DATA:
            self._data(flags, stream_id, data[start : start + length], length, events)
        elif kind == _HEADERS:
            self._headers(flags, stream_id, data[start : start + length], events)
        elif kind == _WINDOW_UPDATE:
            if length != 4:
                raise _DEFER
            increment = _U32.unpack_from(data, start)[0] & _TOP_ID
            if not increment:
                raise _DEFER
            if not stream_id:
                window = self._out_window + increment
                if window > _MAX_WINDOW:
                    raise _DEFER
                self._out_window = window
                events.append(h2.events.WindowUpdated(stream_id=0, delta=increment))
                return
            stream = self._streams.get(stream_id)
            if stream is None:
                if stream_id > self._highest:
                    raise _DEFER
                return  # a closed stream's: h2 ignores it
            window = stream.out_window + increment
            if window > _MAX_WINDOW:
                raise _DEFER
            stream.out_window = window
            events.append(h2.events.WindowUpdated(stream_id=stream_id, delta=increment))
        elif kind == _RST_STREAM:
            if length != 4 or not stream_id:
                raise _DEFER
            stream = self._streams.get(stream_id)
            if stream is None:
                if stream_id > self._highest:
                    raise _DEFER
                return  # a closed stream's: h2 ignores it
            code = _U32.unpack_from(data, start)[0]
            try:
                error_code: int = ErrorCodes(code)
            except ValueError:
                error_code = code
            self._close(stream, StreamClosedBy.RECV_RST_STREAM)
            events.append(
                h2.events.StreamReset(stream_id=stream_id, error_code=error_code, remote_reset=True)
            )
        elif kind == _PING:
            if length != 8 or stream_id:
                raise _DEFER
            opaque = data[start : start + 8]
            if flags & _ACK:
                events.append(h2.events.PingAckReceived(ping_data=opaque))
            else:
                self._out += _HEAD.pack(8 << 8 | _PING, _ACK, 0) + opaque
                events.append(h2.events.PingReceived(ping_data=opaque))
        elif kind == _SETTINGS and flags & _ACK and not length and not stream_id:
            machine = self._h2
            changes = machine._local_settings_acked()  # h2 has no stream: ours are adjusted
            self._max_frame = machine.max_inbound_frame_size
            window = machine.local_settings.initial_window_size
            delta = window - self._local_window
            if delta:
                for stream in self._streams.values():
                    manager = stream.window
                    maximum = manager.max_window_size + delta
                    manager.window_opened(delta)
                    manager.max_window_size = maximum
                self._local_window = window
            event = h2.events.SettingsAcknowledged()
            event.changed_settings = changes
            events.append(event)
        else:
            raise _DEFER

    def _data(
        self,
        flags: int,
        stream_id: int,
        payload: bytes,
        length: int,
        events: list[h2.events.Event],
    ) -> None:
        if flags & _PADDED or not stream_id:
            raise _DEFER
        conn = self._conn_window
        if conn.current_window_size < length:
            raise _DEFER  # a flow-control violation: h2 says how
        stream = self._streams.get(stream_id)
        if stream is None:
            if stream_id > self._highest:
                raise _DEFER
            # Late DATA for a stream that closed (the client reset it, say): as h2, its
            # credit goes back to the connection and the stream is reset again.
            conn.window_consumed(length)
            increment = _processed(conn, length)
            if increment:
                self._out += _HEAD.pack(4 << 8 | _WINDOW_UPDATE, 0, 0) + _U32.pack(increment)
            self._out += _HEAD.pack(4 << 8 | _RST_STREAM, 0, stream_id) + _U32.pack(
                ErrorCodes.STREAM_CLOSED
            )
            return
        if (
            stream.remote_ended
            or not stream.headers_received
            or stream.window.current_window_size < length
        ):
            raise _DEFER
        conn.window_consumed(length)
        stream.window.window_consumed(length)
        event = h2.events.DataReceived(
            stream_id=stream_id, data=payload, flow_controlled_length=length
        )
        events.append(event)
        if flags & _END_STREAM:
            ended = h2.events.StreamEnded(stream_id=stream_id)
            event.stream_ended = ended
            events.append(ended)
            self._remote_end(stream)

    def _headers(
        self, flags: int, stream_id: int, block: bytes, events: list[h2.events.Event]
    ) -> None:
        if flags & (_PADDED | _PRIORITY_FLAG) or not flags & _END_HEADERS or not stream_id:
            raise _DEFER
        stream = self._streams.get(stream_id)
        if stream is None:
            if stream_id > self._highest or (
                self._closed.get(stream_id)
                not in (StreamClosedBy.SEND_RST_STREAM, StreamClosedBy.RECV_RST_STREAM)
            ):
                raise _DEFER
            # A head for a stream that was reset: decoded (the HPACK table must follow the
            # server's), then answered with RST_STREAM(STREAM_CLOSED), as h2 does.
            _decode_headers(self._h2.decoder, block)
            self._out += _HEAD.pack(4 << 8 | _RST_STREAM, 0, stream_id) + _U32.pack(
                ErrorCodes.STREAM_CLOSED
            )
            return
        if stream.remote_ended or stream.trailers_received:
            raise _DEFER
        # From here on the block is decoded: no deferral (h2 would decode it again).
        headers = list(_decode_headers(self._h2.decoder, block))
        end_stream = bool(flags & _END_STREAM)
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
            event: Any = h2.events.InformationalResponseReceived(
                stream_id=stream_id, headers=headers
            )
            events.append(event)
            return
        if stream.headers_received:
            if not end_stream:
                raise h2.exceptions.ProtocolError("Trailers must have END_STREAM set")
            stream.trailers_received = True
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

    def _remote_end(self, stream: _Stream) -> None:
        stream.remote_ended = True
        if stream.local_ended:
            self._close(stream, StreamClosedBy.RECV_END_STREAM)
