"""What a received frame does on the HTTP/2 fast path (``fast.py``), and the pieces the fast
path's two halves share.

:func:`receive` is ``FastMachine.receive_data`` once the machine is engaged: it cuts ``data`` at
frame boundaries and, frame by frame, does what h2 would do to the state the machine keeps (its
streams, windows and closed streams) and returns h2's events; a frame that is not its to handle
raises :class:`_Defer` *before* anything changed, and the machine hands everything over to h2,
which takes that frame and the rest (see ``fast.py``'s docstring for the rules, and why a
header block, once decoded, is never deferred).
"""

from __future__ import annotations

import struct
from typing import Any, Protocol

import h2.connection
import h2.events
import h2.exceptions
from h2.connection import _decode_headers
from h2.errors import ErrorCodes
from h2.stream import StreamClosedBy
from h2.utilities import is_informational_response
from h2.windows import WindowManager

__all__ = ["no_length_check", "one_by_one", "receive"]

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


class FastMachine(Protocol):
    """What :func:`receive` reads and changes of ``fast.FastMachine`` (its state, which the
    two halves of the fast path share; named here so that this module needs not import it)."""

    _h2: h2.connection.H2Connection
    _streams: dict[int, _Stream]
    _closed: dict[int, StreamClosedBy | None]
    _out: bytearray
    _pending: bytearray
    _highest: int
    _out_window: int
    _conn_window: WindowManager
    _local_window: int
    _max_frame: int

    def handover(self) -> None: ...

    def close_stream(self, stream: _Stream, closed_by: StreamClosedBy | None) -> None: ...


def receive(
    machine: FastMachine, data: bytes, pos: int = 0, end: int | None = None
) -> tuple[list[h2.events.Event], h2.exceptions.ProtocolError | None]:
    """``FastMachine.receive_frames`` on the fast path: the events of the complete frames in
    ``data[pos:end]`` (an incomplete frame is kept for the next call), as h2 would give them
    for one frame at a time, up to the first frame h2 would refuse: then also the error (the
    connection terminated as h2 terminates it)."""
    if end is None:
        end = len(data)
    pending = machine._pending
    if pending:
        pending += data[pos:end]
        data = bytes(pending)
        pending.clear()
        pos = 0
        end = len(data)
    events: list[h2.events.Event] = []
    deferred = False
    mark = 0
    # DATA payloads are views of the read, not copies: ``data`` is ``bytes``, which nothing
    # changes, and the stream joins what it hands out (``stream.py``'s ``_take``).
    view = memoryview(data)
    try:
        while end - pos >= _FRAME_HEADER:
            head, flags, stream_id = _HEAD.unpack_from(data, pos)
            length = head >> 8
            if length > machine._max_frame:
                deferred = True  # h2 refuses it on its header
                break
            if end - pos < _FRAME_HEADER + length:
                break
            mark = len(events)
            kind = head & 0xFF
            stream_id &= _TOP_ID
            try:
                if kind == _DATA and stream_id & 1:  # a download's every frame: no dispatch
                    start = pos + _FRAME_HEADER
                    _data(machine, flags, stream_id, view[start : start + length], length, events)
                else:
                    _frame(machine, kind, flags, stream_id, data, view, pos, length, events)
            except _Defer:
                deferred = True  # h2 takes this frame and everything after it
                break
            pos += _FRAME_HEADER + length
    except h2.exceptions.ProtocolError as exc:
        # As h2: a connection error queues GOAWAY; the frame's own events are not delivered.
        del events[mark:]
        machine.handover()
        machine._h2._terminate_connection(exc.error_code)
        return events, exc
    if deferred:
        machine.handover()
        return events, one_by_one(machine._h2, data, pos, end, events)
    if pos < end:
        pending += data[pos:end]
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
        if end - pos >= _FRAME_HEADER:
            stop = min(end, pos + _FRAME_HEADER + (_HEAD.unpack_from(data, pos)[0] >> 8))
        try:
            events += machine.receive_data(data[pos:stop])
        except h2.exceptions.ProtocolError as exc:
            return exc
        pos = stop
    return None


def _frame(
    machine: FastMachine,
    kind: int,
    flags: int,
    stream_id: int,
    data: bytes,
    view: memoryview,
    pos: int,
    length: int,
    events: list[h2.events.Event],
) -> None:
    """One complete frame (``data``, and ``view`` of it, at ``pos``); raises :class:`_Defer`
    before changing anything if it is not the fast path's to handle."""
    if stream_id and not stream_id & 1:
        raise _DEFER  # the server's own stream ids: none here (push is off)
    start = pos + _FRAME_HEADER
    if kind == _DATA:
        _data(machine, flags, stream_id, view[start : start + length], length, events)
    elif kind == _HEADERS:
        _headers(machine, flags, stream_id, data[start : start + length], events)
    elif kind == _WINDOW_UPDATE:
        if length != 4:
            raise _DEFER
        increment = _U32.unpack_from(data, start)[0] & _TOP_ID
        if not increment:
            raise _DEFER
        if not stream_id:
            window = machine._out_window + increment
            if window > _MAX_WINDOW:
                raise _DEFER
            machine._out_window = window
            events.append(h2.events.WindowUpdated(stream_id=0, delta=increment))
            return
        stream = machine._streams.get(stream_id)
        if stream is None:
            if stream_id > machine._highest:
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
        stream = machine._streams.get(stream_id)
        if stream is None:
            if stream_id > machine._highest:
                raise _DEFER
            return  # a closed stream's: h2 ignores it
        code = _U32.unpack_from(data, start)[0]
        try:
            error_code: int = ErrorCodes(code)
        except ValueError:
            error_code = code
        machine.close_stream(stream, StreamClosedBy.RECV_RST_STREAM)
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
            machine._out += _HEAD.pack(8 << 8 | _PING, _ACK, 0) + opaque
            events.append(h2.events.PingReceived(ping_data=opaque))
    elif kind == _SETTINGS and flags & _ACK and not length and not stream_id:
        reference = machine._h2
        changes = reference._local_settings_acked()  # h2 has no stream: ours are adjusted
        machine._max_frame = reference.max_inbound_frame_size
        window = reference.local_settings.initial_window_size
        delta = window - machine._local_window
        if delta:
            # (O(streams), once per SETTINGS ACK that changed our window: once or twice a
            # connection.)
            for stream in machine._streams.values():
                manager = stream.window
                maximum = manager.max_window_size + delta
                manager.window_opened(delta)
                manager.max_window_size = maximum
            machine._local_window = window
        event = h2.events.SettingsAcknowledged()
        event.changed_settings = changes
        events.append(event)
    else:
        raise _DEFER


def _data(
    machine: FastMachine,
    flags: int,
    stream_id: int,
    payload: memoryview,
    length: int,
    events: list[h2.events.Event],
) -> None:
    if flags & _PADDED or not stream_id:
        raise _DEFER
    conn = machine._conn_window
    if conn.current_window_size < length:
        raise _DEFER  # a flow-control violation: h2 says how
    stream = machine._streams.get(stream_id)
    if stream is None:
        if stream_id > machine._highest:
            raise _DEFER
        # Late DATA for a stream that closed (the client reset it, say): as h2, its
        # credit goes back to the connection and the stream is reset again.
        conn.window_consumed(length)
        increment = _processed(conn, length)
        if increment:
            machine._out += _HEAD.pack(4 << 8 | _WINDOW_UPDATE, 0, 0) + _U32.pack(increment)
        machine._out += _HEAD.pack(4 << 8 | _RST_STREAM, 0, stream_id) + _U32.pack(
            ErrorCodes.STREAM_CLOSED
        )
        return
    if (
        stream.remote_ended
        or not stream.headers_received
        or stream.window.current_window_size < length
    ):
        raise _DEFER
    # h2's ``window_consumed``, whose check (never below 0) the two above made.
    conn.current_window_size -= length
    stream.window.current_window_size -= length
    # h2 types ``data`` as bytes; a view of the read holds the same bytes (inbound.py and the
    # stream take either), without a copy per frame.
    event = h2.events.DataReceived(
        stream_id=stream_id,
        data=payload,  # type: ignore[arg-type]
        flow_controlled_length=length,
    )
    events.append(event)
    if flags & _END_STREAM:
        ended = h2.events.StreamEnded(stream_id=stream_id)
        event.stream_ended = ended
        events.append(ended)
        _remote_end(machine, stream)


def _headers(
    machine: FastMachine, flags: int, stream_id: int, block: bytes, events: list[h2.events.Event]
) -> None:
    if flags & (_PADDED | _PRIORITY_FLAG) or not flags & _END_HEADERS or not stream_id:
        raise _DEFER
    stream = machine._streams.get(stream_id)
    if stream is None:
        if stream_id > machine._highest or (
            machine._closed.get(stream_id)
            not in (StreamClosedBy.SEND_RST_STREAM, StreamClosedBy.RECV_RST_STREAM)
        ):
            raise _DEFER
        # A head for a stream that was reset: decoded (the HPACK table must follow the
        # server's), then answered with RST_STREAM(STREAM_CLOSED), as h2 does.
        _decode_headers(machine._h2.decoder, block)
        machine._out += _HEAD.pack(4 << 8 | _RST_STREAM, 0, stream_id) + _U32.pack(
            ErrorCodes.STREAM_CLOSED
        )
        return
    if stream.remote_ended or stream.trailers_received:
        raise _DEFER
    # From here on the block is decoded: no deferral (h2 would decode it again).
    headers = list(_decode_headers(machine._h2.decoder, block))
    end_stream = bool(flags & _END_STREAM)
    first = headers[0] if headers else None
    if (
        first[1][:1] == b"1"
        if first is not None and first[0] == b":status"
        else is_informational_response(headers)
    ):
        if end_stream:
            raise h2.exceptions.ProtocolError("Cannot set END_STREAM on informational responses")
        if stream.headers_received:
            machine.close_stream(stream, None)  # h2's stream machine closes on a refused move
            raise h2.exceptions.ProtocolError("Informational response after final response")
        stream.informational = True
        event: Any = h2.events.InformationalResponseReceived(stream_id=stream_id, headers=headers)
        events.append(event)
        return
    if stream.headers_received:
        # h2's stream machine marks the second head as trailers before its END_STREAM check
        # refuses it: so does this one (the hand-over replays it; a hypothesis example found it).
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
        _remote_end(machine, stream)


def _remote_end(machine: FastMachine, stream: _Stream) -> None:
    stream.remote_ended = True
    if stream.local_ended:
        machine.close_stream(stream, StreamClosedBy.RECV_END_STREAM)
