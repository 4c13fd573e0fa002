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
  a closed stream (handled as h2 handles them, ``h2_private.ignore_after_reset`` included:
  DATA's credit handed back; on a stream the client reset, ignored, RFC 9113 §5.1; on one
  the server reset, answered with RST_STREAM(STREAM_CLOSED)).

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
compares the two as h2 is after counting. What it does not do is exactly what it defers.

The jobs, one per module: this one stands in for h2 (each call and each run of frames goes to
the fast path while it is engaged and takes it, to h2 otherwise) and moves the state between
the two (:meth:`FastMachine.engage`, :meth:`FastMachine.handover`); the fast path itself is
``fast_connection.FastConnection``, its state and its frame handlers, with its streams'
moves in ``fast_inbound.FastStream`` (as h2 splits ``H2Connection`` and ``H2Stream``) and
its frames encoded by ``fast_frames.FrameQueue``. Every private name of h2 any of them
needs is in ``h2_private``, behind a probe that keeps the fast path off when one is missing.
``Client(http2_fast_path=False)`` (or ``TRIO_RETRY_HTTP2_FAST_PATH=0``) keeps h2 on every
frame.

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
from h2.errors import ErrorCodes

from .fast_connection import FastConnection
from .fast_frames import FRAME_HEADER, HEAD, FrameQueue
from .h2_private import (
    adopt_closed,
    adopt_stream,
    connection_window,
    holds_nothing,
    take_unread,
    terminate,
    usable,
)

__all__ = ["FastMachine", "one_by_one"]


class FastMachine:
    """An h2 connection whose common frames take the fast path; see the module docstring.

    Until :meth:`engage`, and after a hand-over, every call goes to h2 (``_h2``).
    """

    __slots__ = ("_conn", "_h2", "_queue", "handed_over")

    def __init__(self, machine: h2.connection.H2Connection) -> None:
        self._h2 = machine
        #: The fast path while it is engaged (``None`` before and after).
        self._conn: FastConnection | None = None
        #: What the fast path queued, sent before anything h2 queues after a hand-over.
        self._queue = FrameQueue()
        #: Set when the fast path handed the connection to h2 (for tests and ``repr``).
        self.handed_over = False

    # --- taking over and handing back ---------------------------------------------------------

    def engage(self) -> bool:
        """Take the common frames over from h2, if h2's state is one the fast path keeps: no
        stream opened yet, no header block half received, nothing of h2's still to send, a
        connection not closed, and every private name of h2 it needs there
        (``h2_private.usable()``). Returns whether it did."""
        machine = self._h2
        if (
            not usable()
            or self._conn is not None
            or self.handed_over
            or machine.streams
            or machine.highest_outbound_stream_id
            or not holds_nothing(machine)
            or machine.state_machine.state is ConnectionState.CLOSED
        ):
            return False
        conn = self._conn = FastConnection(machine, self._queue)
        conn.pending += take_unread(machine)
        return True

    def handover(self, closing: bool = False) -> None:
        """From now on h2 handles everything: give it the state the fast path kept.

        ``closing``: the hand-over of :meth:`close_connection`, whose GOAWAY leaves h2's state
        CLOSED; h2 is then given no record of how the streams the fast path forgot were
        closed (up to 65,536 of them): the session feeds h2 no frame after its close, and h2
        would look a closed stream up only to answer a frame received."""
        conn = self._conn
        if conn is None:
            return
        self._conn = None
        self.handed_over = True
        machine = self._h2
        machine.highest_outbound_stream_id = conn.highest
        machine.outbound_flow_control_window = conn.out_window
        if conn.opened and machine.state_machine.state is ConnectionState.IDLE:
            machine.state_machine.process_input(ConnectionInputs.SEND_HEADERS)
        for stream_id, kept in conn.streams.items():  # (once in a connection's life)
            adopt_stream(
                machine,
                stream_id,
                kept.window,
                kept.out_window,
                conn.local_window,
                kept.method,
                kept.authority,
                kept.inputs(),
            )
        if not closing:
            adopt_closed(machine, conn.closed)
        if conn.pending:
            machine.incoming_buffer.add_data(bytes(conn.pending))

    # --- what the connection reads ------------------------------------------------------------

    @property
    def fast(self) -> bool:
        """The fast path handles the common frames now (engaged, not handed over)."""
        return self._conn is not None

    @property
    def streams(self) -> dict[int, Any]:
        """The open streams by id (the fast path's, or h2's); each has ``closed``."""
        conn = self._conn
        return conn.streams if conn is not None else self._h2.streams

    @property
    def remote_settings(self) -> h2.settings.Settings:
        return self._h2.remote_settings

    @property
    def max_outbound_frame_size(self) -> int:
        return self._h2.max_outbound_frame_size

    @property
    def highest_outbound_stream_id(self) -> int:
        conn = self._conn
        return conn.highest if conn is not None else self._h2.highest_outbound_stream_id

    @property
    def open_outbound_streams(self) -> int:
        conn = self._conn
        return len(conn.streams) if conn is not None else self._h2.open_outbound_streams

    @property
    def encoder(self) -> Any:
        return self._h2.encoder

    @property
    def decoder(self) -> Any:
        return self._h2.decoder

    def local_flow_control_window(self, stream_id: int) -> int:
        conn = self._conn
        if conn is not None:
            window = conn.local_flow_control_window(stream_id)
            if window is not None:
                return window
            self.handover()
        return self._h2.local_flow_control_window(stream_id)

    def get_next_available_stream_id(self) -> int:
        conn = self._conn
        if conn is None:
            return self._h2.get_next_available_stream_id()
        return conn.next_stream_id()

    # --- sending: the fast path's, or h2's after a hand-over ----------------------------------

    def initiate_connection(self) -> None:
        self.handover()
        self._h2.initiate_connection()

    def increment_flow_control_window(self, increment: int, stream_id: int | None = None) -> None:
        conn = self._conn
        if conn is None or not conn.increment_flow_control_window(increment, stream_id):
            self.handover()
            self._h2.increment_flow_control_window(increment, stream_id)

    def send_headers(
        self, stream_id: int, headers: Iterable[Any], end_stream: bool = False
    ) -> None:
        conn = self._conn
        if conn is None or not conn.send_headers(stream_id, headers, end_stream):
            self.handover()
            self._h2.send_headers(stream_id, headers, end_stream=end_stream)

    def send_data(self, stream_id: int, data: bytes | memoryview, end_stream: bool = False) -> None:
        conn = self._conn
        if conn is None or not conn.send_data(stream_id, data, end_stream):
            self.handover()
            self._h2.send_data(stream_id, data, end_stream=end_stream)

    def end_stream(self, stream_id: int) -> None:
        conn = self._conn
        if conn is None or not conn.end_stream(stream_id):
            self.handover()
            self._h2.end_stream(stream_id)

    def reset_stream(self, stream_id: int, error_code: int = 0) -> None:
        conn = self._conn
        if conn is None or not conn.reset_stream(stream_id, error_code):
            self.handover()
            self._h2.reset_stream(stream_id, error_code)

    def ping(self, opaque_data: bytes) -> None:
        conn = self._conn
        if conn is None or not conn.ping(opaque_data):
            self.handover()
            self._h2.ping(opaque_data)

    def close_connection(self, error_code: int) -> None:
        """Queue a GOAWAY with ``error_code`` and a last-stream-id of 0 (a client takes no
        stream: push is off), unless h2 ended the connection itself, its GOAWAY queued
        already (on a connection error it detects; so does :meth:`receive_frames`). The
        connection's last frame: h2 writes it, after a hand-over (nothing follows it)."""
        if self._h2.state_machine.state is ConnectionState.CLOSED:
            return
        self.handover(closing=True)
        self._h2.close_connection(error_code, last_stream_id=0)

    def acknowledge_received_data(self, acknowledged_size: int, stream_id: int) -> None:
        conn = self._conn
        if conn is None or not conn.acknowledge_received_data(acknowledged_size, stream_id):
            self.handover()
            self._h2.acknowledge_received_data(acknowledged_size, stream_id)

    def data_to_send(self) -> bytes:
        queue = self._queue
        data = queue.join() if queue.out or queue.pieces else b""
        if self._conn is None:
            data += self._h2.data_to_send()
        return data

    def take_output(self, into: deque[bytes | memoryview]) -> int:
        """What :meth:`data_to_send` would return, appended to ``into`` as pieces instead of
        joined (the payloads of large DATA frames as :meth:`send_data` was given them:
        ``fast_frames.KEPT_PAYLOAD``); returns their total size. The writer (``writer.py``)
        joins pieces once, into each buffer it writes: a large upload's bytes are copied once
        here, not three times."""
        queue = self._queue
        size = queue.take(into) if queue.out or queue.pieces else 0  # (often nothing queued)
        if self._conn is None:
            data = self._h2.data_to_send()
            if data:
                into.append(data)
                size += len(data)
        return size

    # --- receiving ----------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> list[h2.events.Event]:
        """As ``H2Connection.receive_data``: the events of the complete frames in ``data``
        (an incomplete frame is kept for the next call)."""
        if self._conn is None:
            return self._h2.receive_data(data)
        events, error = self.receive_frames(data, 0, len(data))
        if error is not None:
            raise error
        return events

    def receive_dropped(self, length: int) -> None:
        """Count ``length`` flow-controlled octets (padding included) of a DATA frame the
        machine is not given (``frames.DroppedData``: DATA before its stream's final head)
        against the connection's receive window, as h2 counts those of any DATA frame it
        receives: the server's window shrank by them whatever the client did with the frame.
        Past the window, raises h2's ``FlowControlError``, the connection ended as h2 ends it
        (GOAWAY(FLOW_CONTROL_ERROR) queued; RFC 9113 §6.9.1: a receiver MUST treat it so).
        The caller credits them back as read (:meth:`acknowledge_received_data`), as for any
        DATA of a failed stream.

        Rejected: crediting them alone (``increment_flow_control_window``, as it was): the
        server's window regained octets the client's never lost, and the client would take
        that much DATA beyond the window without complaint."""
        window = connection_window(self._h2)  # the fast path's too: the same object
        try:
            window.window_consumed(length)
        except h2.exceptions.FlowControlError:
            self.handover()
            terminate(self._h2, ErrorCodes.FLOW_CONTROL_ERROR)
            raise

    def receive_frames(
        self, data: bytes, start: int, end: int
    ) -> tuple[list[h2.events.Event], h2.exceptions.ProtocolError | None]:
        """``data[start:end]``, whole frames from a frame boundary (``frames.Frames``), as
        :meth:`receive_data` of each frame in turn would take them, up to the first that
        raises: the events of the frames before it, and that error (``None``: no error).
        A frame that is not the fast path's hands over: h2 takes it and the rest; a
        connection error ends the connection as h2 ends it (its GOAWAY queued)."""
        conn = self._conn
        if conn is None:
            events: list[h2.events.Event] = []
            return events, one_by_one(self._h2, data, start, end, events)
        events, error, rest = conn.receive(data, start, end)
        if error is not None:
            self.handover()
            terminate(self._h2, error.error_code)
            return events, error
        if rest is not None:
            self.handover()
            return events, one_by_one(self._h2, rest, 0, len(rest), events)
        return events, None


def one_by_one(
    machine: h2.connection.H2Connection,
    data: bytes,
    pos: int,
    end: int,
    events: list[h2.events.Event],
) -> h2.exceptions.ProtocolError | None:
    """h2's ``receive_data`` for each frame of ``data[pos:end]`` (which starts at a frame
    boundary, h2 holding no part of a frame), its events added to ``events``, up to the
    first that raises: that error is returned. (h2 given them together would deliver no event
    at all when one of them is broken.)"""
    while pos < end:
        stop = end
        if end - pos >= FRAME_HEADER:
            stop = min(end, pos + FRAME_HEADER + (HEAD.unpack_from(data, pos)[0] >> 8))
        try:
            events += machine.receive_data(data[pos:stop])
        except h2.exceptions.ProtocolError as exc:
            return exc
        pos = stop
    return None
