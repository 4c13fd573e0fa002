"""The reader's side of an HTTP/2 connection: what each inbound frame and h2 event does.

Called by the connection's reader task (:func:`receive`) with every read; never awaits, never
raises (a broken peer ends the connection through ``Session.die``). It works on the
connection's :class:`~.session.Session` only. The rules it applies:

- frames reach h2 one at a time (``frames.py``), so a stream's head is seen before a broken
  frame after it, however the bytes were read;
- GOAWAY is the session's (``Session.goaway``): from the moment it is parsed the connection
  takes no new stream; streams above its last-stream-id that got no response byte are proven
  ``NOT_SENT``;
- a connection error (a frame ``frames.py`` refuses, or one h2 refuses) ends the connection
  with a GOAWAY carrying the error's code (RFC 9113 §5.4.1, ``Session.die``);
- a malformed response (headers, Content-Length, DATA before the head) fails its own stream
  (``Session.stream_error``); ``RST_STREAM(REFUSED_STREAM)`` before any response byte is
  ``NOT_SENT``; any other reset carries the stage reached.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import h2.events
import h2.exceptions
from h2.errors import ErrorCodes

from ..._core.evidence import FailureCategory, Stage
from ..contract import Failure
from ..exchange import head_too_large
from .frames import DroppedData, FrameError, Frames, GoAway, code_name
from .headers import check_head, malformed
from .session import Session
from .stream import Stream, StreamState

__all__ = ["receive"]


def receive(session: Session, data: bytes) -> None:
    """Process what the socket gave: frame by frame (``frames.py``), GOAWAY and dropped DATA
    handled here, every other frame through h2 and its events to the streams."""
    try:
        for part in session.frames.feed(data):
            if session.closed:
                return
            if isinstance(part, Frames):
                events, error = session.h2.receive_frames(part.data, part.start, part.end)
                for event in events:
                    if session.closed:  # as between frames fed one at a time
                        return
                    handler = _HANDLERS.get(type(event))
                    if handler is not None:
                        handler(session, event)
                if error is not None:
                    _broken(session, error)
                    return
            elif isinstance(part, bytes):
                try:
                    events = session.h2.receive_data(part)
                except h2.exceptions.ProtocolError as exc:
                    _broken(session, exc)
                    return
                for event in events:
                    handler = _HANDLERS.get(type(event))
                    if handler is not None:
                        handler(session, event)
            elif isinstance(part, GoAway):
                session.goaway(part.last_stream_id, part.error_code)
            else:
                _on_dropped(session, part)
    except FrameError as exc:
        session.die(Failure(FailureCategory.REMOTE_PROTOCOL, str(exc)), exc.error_code)


def _broken(session: Session, exc: h2.exceptions.ProtocolError) -> None:
    """h2 (or the fast path, as h2) found a connection error: it queued its GOAWAY with the
    error's code already; the session says it and closes (RFC 9113 §5.4.1)."""
    session.die(
        Failure(FailureCategory.REMOTE_PROTOCOL, _protocol_message(exc)), int(exc.error_code)
    )


def _on_dropped(session: Session, dropped: DroppedData) -> None:
    """DATA before the final head: a stream error (RFC 9113 §8.1.1). The frame never reaches
    h2, so its octets are counted against the connection's window here (past it, a connection
    error FLOW_CONTROL_ERROR, §6.9.1), then credited back once the stream is reset, as any
    DATA of a failed stream (§6.9: the server's window does not leak)."""
    length = dropped.length
    if length:
        try:
            session.h2.receive_dropped(length)
        except h2.exceptions.ProtocolError as exc:
            _broken(session, exc)
            return
    stream = session.streams.get(dropped.stream_id)
    if stream is not None:
        session.stream_error(stream, "DATA before its response head")
    session.consumed(dropped.stream_id, length)


def _on_data(session: Session, event: h2.events.DataReceived) -> None:
    stream = session.streams.get(event.stream_id)
    flow = event.flow_controlled_length
    if stream is not None and (  # stream.open, inlined: this runs per DATA frame
        stream.state is StreamState.RECEIVING or stream.state is StreamState.OPEN
    ):
        stream.on_data(event.data, flow)  # bytes, or a view of the read (the fast path's)
    elif flow:
        session.consumed(event.stream_id, flow)


def _on_response(session: Session, event: h2.events.ResponseReceived) -> None:
    stream = session.streams.get(event.stream_id)
    if stream is None:
        return
    headers = _fields(event.headers)
    problem, length = check_head(headers, session.heads)
    if problem is not None:
        session.stream_error(stream, problem)
        return
    session.awaiting_head.discard(stream.stream_id)
    stream.on_head(headers, length)


def _on_informational(session: Session, event: h2.events.InformationalResponseReceived) -> None:
    stream = session.streams.get(event.stream_id)
    if stream is None:
        return
    problem = malformed(_fields(event.headers), trailers=False)
    if problem is not None:
        session.stream_error(stream, problem)
    else:
        stream.on_first_byte()


def _on_trailers(session: Session, event: h2.events.TrailersReceived) -> None:
    stream = session.streams.get(event.stream_id)
    problem = malformed(_fields(event.headers), trailers=True)
    if problem is not None and stream is not None:
        session.stream_error(stream, problem)


def _on_end(session: Session, event: h2.events.StreamEnded) -> None:
    stream = session.streams.get(event.stream_id)
    if stream is not None:
        if stream.state is StreamState.OPEN:
            session.stream_error(stream, "no final head before the end of the stream")
        else:
            stream.on_end()


def _on_reset(session: Session, event: h2.events.StreamReset) -> None:
    stream = session.streams.get(event.stream_id)
    if stream is not None:
        _reset(session, stream, int(event.error_code), bool(event.remote_reset))
    session.wake_capacity()


def _on_window(session: Session, event: h2.events.WindowUpdated) -> None:
    if event.stream_id:
        stream = session.streams.get(event.stream_id)
        if stream is not None:
            stream.wake()
    else:  # the connection's window: the streams waiting for window look again
        for stream in list(session.window_waiters):
            stream.wake()


def _on_settings(session: Session, _event: h2.events.RemoteSettingsChanged) -> None:
    session.settings_changed()


def _on_ping_ack(session: Session, _event: h2.events.PingAckReceived) -> None:
    session.ping_answered()


def _on_terminated(session: Session, event: h2.events.ConnectionTerminated) -> None:
    session.goaway(event.last_stream_id or 0, int(event.error_code or 0))  # pragma: no cover


#: What each h2 event does, by its type (one lookup, not a chain of ``isinstance``). Pings are
#: answered by h2 itself (or the fast path); priorities, (valid) trailers, ALTSVC and unknown
#: frames change nothing for a client, and have no entry. ConnectionTerminated cannot come
#: (``frames.py`` takes GOAWAY out) but would be a GOAWAY.
_HANDLERS: dict[type[h2.events.Event], Callable[[Session, Any], None]] = {
    h2.events.DataReceived: _on_data,
    h2.events.ResponseReceived: _on_response,
    h2.events.StreamEnded: _on_end,
    h2.events.InformationalResponseReceived: _on_informational,
    h2.events.TrailersReceived: _on_trailers,
    h2.events.StreamReset: _on_reset,
    h2.events.WindowUpdated: _on_window,
    h2.events.RemoteSettingsChanged: _on_settings,
    h2.events.PingAckReceived: _on_ping_ack,
    h2.events.ConnectionTerminated: _on_terminated,
}


def _fields(headers: Iterable[tuple[bytes, bytes]] | None) -> list[tuple[bytes, bytes]]:
    """An event's header block as ``(name, value)`` pairs. h2 runs with
    ``header_encoding=None``, so hpack's tuples hold bytes already: a copy of the list, not
    of each field (a comprehension of ``bytes()`` calls cost 40 times as much)."""
    return list(headers or ())


def _reset(session: Session, stream: Stream, code: int, remote: bool) -> None:
    session.awaiting_head.discard(stream.stream_id)
    name = code_name(code)
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


def _protocol_message(exc: h2.exceptions.ProtocolError) -> str:
    if isinstance(exc, h2.exceptions.DenialOfServiceError) and "header" in str(exc).lower():
        return head_too_large(str(exc))
    return f"the server broke HTTP/2: {exc}"
