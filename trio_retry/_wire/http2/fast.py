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
(:meth:`FastMachine.handover`: h2's stream objects made by replaying each stream's inputs
through h2's own state machine, the window managers handed over as the same objects) and h2
handles that frame and everything after it, on that connection, for good. A deferral is
decided before any state is touched, with one exception by necessity: a header block is
decoded (which may change the HPACK table) before the stream is looked at, exactly as h2 does
it, so the fast path never defers after decoding; it finishes that frame itself, errors
included (an HPACK error ends the connection as h2 ends it).

What makes it safe to stand in for h2: for the calls the connection makes and the frames it
hands on (``frames.py`` in front), the bytes it queues, the events it returns and the h2
exceptions it raises are h2's own (a differential property test, ``tests/wire/test_h2_fast.py``,
runs random client scripts and server frames, odd ones included, through both, deferring at
random points). One difference is h2's own timing, not a behaviour: h2 forgets a closed stream
only when it next counts its streams, the fast path at once, so a call on a stream closed a
moment ago may answer "closed" where h2 would still have answered as for an open one; the test
compares the two as h2 is after counting. What it does not do is exactly what it defers. The
received frames are ``fast_inbound.py``'s; this module is the machine, its hand-over and its
sending. ``Client(http2_fast_path=False)`` (or ``TRIO_RETRY_HTTP2_FAST_PATH=0``) keeps h2 on
every frame.

Why not the obvious alternatives: subclassing H2Connection to shortcut its hot methods still
builds a frame object and a stream state machine per request (the cost is in the generality,
not in one method); writing a complete HTTP/2 engine instead of deferring would make every rare
frame and every error ours to get right, where h2 already is.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from h2.connection import ConnectionInputs, ConnectionState
from h2.stream import H2Stream, StreamClosedBy, StreamInputs
from h2.windows import WindowManager

from .fast_inbound import (
    _CLOSED_KEPT,
    _CONTINUATION,
    _DATA,
    _END_HEADERS,
    _END_STREAM,
    _HEAD,
    _HEADERS,
    _MAX_WINDOW,
    _PING,
    _RST_STREAM,
    _TOP_ID,
    _U32,
    _WINDOW_UPDATE,
    _processed,
    _Stream,
    no_length_check,
    one_by_one,
    receive,
)

__all__ = ["KEPT_PAYLOAD", "FastMachine", "no_length_check"]

#: A DATA payload at least this large, in an object nobody can change (``bytes``, or a view of
#: ``bytes``), is queued as given rather than copied (:meth:`FastMachine.take_output`).
KEPT_PAYLOAD = 4096


def _immutable(data: bytes | memoryview) -> bool:
    """``data`` cannot change before it is written: ``bytes``, or a contiguous view of
    ``bytes`` (what ``outbound.send_data`` passes: slices of the body's chunks)."""
    if type(data) is bytes:
        return True
    return type(data) is memoryview and type(data.obj) is bytes and data.c_contiguous


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
        "_queued",
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
        #: What was queued before ``_out``: the pieces of large DATA frames, kept as given
        #: (see :meth:`take_output`), and what ``_out`` held before each.
        self._queued: list[bytes | memoryview] = []
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

    def handover(self) -> None:
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
        for stream_id, kept in self._streams.items():  # (once in a connection's life)
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
            if kept.trailers_received:  # a second head: h2's machine marks it as trailers
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
        self.handover()

    def get_next_available_stream_id(self) -> int:
        if not self._fast:
            return self._h2.get_next_available_stream_id()
        stream_id = self._highest + 2 if self._highest else 1
        if stream_id > _TOP_ID:
            raise h2.exceptions.NoAvailableStreamIDError("Exhausted allowed stream IDs")
        return stream_id

    # --- sending ------------------------------------------------------------------------------

    def initiate_connection(self) -> None:
        self.handover()
        self._h2.initiate_connection()

    def increment_flow_control_window(self, increment: int, stream_id: int | None = None) -> None:
        if self._fast and stream_id is None and 1 <= increment <= _MAX_WINDOW:
            self._conn_window.window_opened(increment)
            self._out += _HEAD.pack(4 << 8 | _WINDOW_UPDATE, 0, 0) + _U32.pack(increment)
            return
        self.handover()
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
            self.handover()
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
            self.handover()
            self._h2.send_data(stream_id, data, end_stream=end_stream)
            return
        out = self._out
        head = _HEAD.pack(size << 8 | _DATA, _END_STREAM if end_stream else 0, stream_id)
        if size >= KEPT_PAYLOAD and _immutable(data):
            # An upload's payload is not copied into the queue: the writer joins it with the
            # frames around it once, into the buffer it hands to the transport.
            queued = self._queued
            if out:
                queued.append(bytes(out))
                out.clear()
            queued.append(head)
            queued.append(data)
        else:
            out += head
            out += data
        self._out_window -= size
        stream.out_window -= size
        if end_stream:
            stream.local_ended = True
            if stream.remote_ended:
                self.close_stream(stream, StreamClosedBy.SEND_END_STREAM)

    def end_stream(self, stream_id: int) -> None:
        stream = self._streams.get(stream_id) if self._fast else None
        if stream is None and self._fast:
            self._gone(stream_id)
        if stream is None or stream.local_ended:
            self.handover()
            self._h2.end_stream(stream_id)
            return
        self._out += _HEAD.pack(_DATA, _END_STREAM, stream_id)
        stream.local_ended = True
        if stream.remote_ended:
            self.close_stream(stream, StreamClosedBy.SEND_END_STREAM)

    def reset_stream(self, stream_id: int, error_code: int = 0) -> None:
        stream = self._streams.get(stream_id) if self._fast else None
        if stream is None:
            if self._fast:
                self._gone(stream_id)
            self._h2.reset_stream(stream_id, error_code)
            return
        self._out += _HEAD.pack(4 << 8 | _RST_STREAM, 0, stream_id) + _U32.pack(int(error_code))
        self.close_stream(stream, StreamClosedBy.SEND_RST_STREAM)

    def ping(self, opaque_data: bytes) -> None:
        if not self._fast or type(opaque_data) is not bytes or len(opaque_data) != 8:
            self.handover()
            self._h2.ping(opaque_data)
            return
        self._out += _HEAD.pack(8 << 8 | _PING, 0, 0) + opaque_data

    def close_connection(self, error_code: int) -> None:
        """Queue a GOAWAY with ``error_code`` and a last-stream-id of 0 (a client takes no
        stream: push is off), unless h2 ended the connection itself, its GOAWAY queued
        already (on a connection error it detects; so does ``fast_inbound.receive``). The
        connection's last frame: h2 writes it, after a hand-over (nothing follows it)."""
        if self._h2.state_machine.state is ConnectionState.CLOSED:
            return
        self.handover()
        self._h2.close_connection(error_code, last_stream_id=0)

    def acknowledge_received_data(self, acknowledged_size: int, stream_id: int) -> None:
        if not self._fast or stream_id <= 0 or stream_id > self._highest or acknowledged_size < 0:
            self.handover()
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
        queued = self._queued
        if queued:
            data = b"".join(queued) + out
            queued.clear()
            out.clear()
            if not self._fast:
                data += self._h2.data_to_send()
            return data
        if out:
            data = bytes(out)
            out.clear()
            if not self._fast:
                data += self._h2.data_to_send()
            return data
        return b"" if self._fast else self._h2.data_to_send()

    def take_output(self, into: deque[bytes | memoryview]) -> int:
        """What :meth:`data_to_send` would return, appended to ``into`` as pieces instead of
        joined (the pieces of large DATA frames as :meth:`send_data` was given them); returns
        their total size. The writer (``writer.py``) joins pieces once, into each buffer it
        writes: a large upload's bytes are copied once here, not three times (into ``_out``,
        out of it, and into the writer's queue)."""
        size = 0
        queued = self._queued
        if queued:
            for piece in queued:
                size += len(piece)
            into.extend(queued)
            queued.clear()
        out = self._out
        if out:
            data = bytes(out)
            out.clear()
            into.append(data)
            size += len(data)
        if not self._fast:
            data = self._h2.data_to_send()
            if data:
                into.append(data)
                size += len(data)
        return size

    def close_stream(self, stream: _Stream, closed_by: StreamClosedBy | None) -> None:
        """Forget ``stream`` (closed as ``closed_by`` says), remembering how it closed."""
        del self._streams[stream.stream_id]
        closed = self._closed
        closed[stream.stream_id] = closed_by
        if len(closed) > _CLOSED_KEPT:
            del closed[next(iter(closed))]  # the oldest (dicts keep their order)

    # --- receiving ----------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> list[h2.events.Event]:
        """As ``H2Connection.receive_data``: the events of the complete frames in ``data``
        (an incomplete frame is kept for the next call); ``fast_inbound.receive`` when
        engaged."""
        if not self._fast:
            return self._h2.receive_data(data)
        events, error = receive(self, data)
        if error is not None:
            raise error
        return events

    def receive_frames(
        self, data: bytes, start: int, end: int
    ) -> tuple[list[h2.events.Event], h2.exceptions.ProtocolError | None]:
        """``data[start:end]``, whole frames from a frame boundary (``frames.Frames``), as
        :meth:`receive_data` of each frame in turn would take them, up to the first that
        raises: the events of the frames before it, and that error (``None``: no error)."""
        if self._fast:
            return receive(self, data, start, end)
        events: list[h2.events.Event] = []
        return events, one_by_one(self._h2, data, start, end, events)
