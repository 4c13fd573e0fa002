"""What each event of aioquic's QUIC and HTTP/3 state machines means to a connection, and the
one place they are dispatched.

One job: :func:`dispatch`, called by the connection's task (``driver.py``) after each round,
hands every event to its function (:data:`QUIC_EVENTS`, :data:`H3_EVENTS`), which works
through the driver's fields and moves (:class:`QuicDriver`, the part of ``driver.QuicDriver``
they see). A new meaning is a new entry. A QUIC event's function
that returns ``False`` keeps the event from HTTP/3.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from aioquic.h3.events import DataReceived, H3Event, HeadersReceived
from aioquic.quic.events import (
    ConnectionTerminated,
    HandshakeCompleted,
    PingAcknowledged,
    QuicEvent,
    StopSendingReceived,
    StreamDataReceived,
    StreamReset,
)

from ..._core.evidence import FailureCategory
from ..contract import Failure, IdlePing
from .codes import (
    CERTIFICATE_ALERTS,
    H3_MESSAGE_ERROR,
    H3_REQUEST_REJECTED,
    H3_STREAM_CREATION_ERROR,
    application_error,
    closed_words,
    tls_alert,
)
from .control import ControlReader
from .frames import FrameRefused
from .headers import check_trailers, response_head
from .shims import MalformedResponse
from .stream import H3Stream
from .whole import read_whole

if TYPE_CHECKING:
    from .shims import CheckedQuicConnection, PushlessH3Connection

__all__ = ["H3_EVENTS", "NOT_FOR_H3", "QUIC_EVENTS", "QuicDriver", "dispatch", "to_h3"]


class QuicDriver(Protocol):
    """What the events' functions read and move of a connection (``driver.QuicDriver``)."""

    quic: CheckedQuicConnection
    h3: PushlessH3Connection
    control: ControlReader
    streams: dict[int, H3Stream]
    idle: IdlePing
    max_header_bytes: int

    @property
    def closed(self) -> bool: ...

    @property
    def handshaking(self) -> bool: ...

    def handshake_completed(self, early_accepted: bool) -> None: ...

    def handshake_failed(self, category: FailureCategory, message: str) -> None: ...

    def goaway(self, first_unprocessed: int) -> None: ...

    def stream_error(self, stream: H3Stream, code: int, message: str) -> None: ...

    def connection_error(self, code: int, message: str) -> None: ...

    def die(self, category: FailureCategory, message: str) -> None: ...


def dispatch(driver: QuicDriver) -> None:
    """Dispatch every event QUIC produced (:data:`QUIC_EVENTS`), then hand each to HTTP/3 and
    dispatch what it made of it (:data:`H3_EVENTS`): the one place where aioquic's events are
    handled. An event of a kind with no entry changes nothing here, nor one its entry keeps
    (returning ``False``) HTTP/3; once the connection is closed no event does (a handshake
    the client refused must not complete afterwards).

    A stream's data in consecutive events (one per datagram: a download's round brings up to
    a few hundred) is handled as one event of all of it (:func:`_events`)."""
    if driver.closed:
        return
    quic = driver.quic
    for event in _events(quic):
        handler = QUIC_EVENTS.get(type(event))
        kept = handler is not None and handler(driver, event) is False
        if not kept and type(event) not in NOT_FOR_H3:
            to_h3(driver, event)
        if driver.closed:
            return  # (what else QUIC made of the datagrams is not read)
    # aioquic's HTTP/3 found the server broke HTTP/3 or QPACK, and asked QUIC to close (an
    # application close, sent next; it hands on no event after that): every stream fails now
    # (``REMOTE_PROTOCOL``), not once QUIC's closing period is over.
    asked = quic.close_asked
    if asked is not None and asked[1] is None:
        words = closed_words(asked[0], None, asked[2])
        driver.die(FailureCategory.REMOTE_PROTOCOL, f"the server broke HTTP/3 ({words})")


def _events(quic: CheckedQuicConnection) -> Iterator[QuicEvent]:
    """QUIC's events, in order, but a stream's data in consecutive events as one event: the
    same bytes, ending where the last ended (nothing is joined after an end). The frames,
    HTTP/3's parser and the caller see the same bytes in fewer pieces. Reads the queue only
    as far as it hands on (one event ahead)."""
    event = quic.next_event()
    while event is not None:
        if type(event) is not StreamDataReceived:
            yield event
            event = quic.next_event()
            continue
        parts = [event.data]
        last = event
        following = quic.next_event()
        while (
            type(following) is StreamDataReceived
            and following.stream_id == event.stream_id
            and not last.end_stream
        ):
            parts.append(following.data)
            last = following
            following = quic.next_event()
        if last is event:
            yield event
        else:
            yield StreamDataReceived(b"".join(parts), last.end_stream, event.stream_id)
        event = following


def to_h3(driver: QuicDriver, event: QuicEvent) -> None:
    """Hand ``event`` to HTTP/3 and dispatch what it made of it (:data:`H3_EVENTS`)."""
    for h3_event in driver.h3.handle_event(event):
        h3_handler = H3_EVENTS.get(type(h3_event))
        if h3_handler is not None:
            h3_handler(driver, h3_event)


def _handshake_completed(driver: QuicDriver, event: HandshakeCompleted) -> None:
    driver.handshake_completed(bool(event.early_data_accepted))


def _terminated(driver: QuicDriver, event: ConnectionTerminated) -> None:
    """QUIC's CONNECTION_CLOSE (the peer's, or an idle timeout, or ours); during the
    handshake, a TLS alert that refuses the certificate is ``TLS_CERTIFICATE``."""
    code, frame_type = event.error_code, event.frame_type
    detail = f"the QUIC connection closed ({closed_words(code, frame_type, event.reason_phrase)})"
    if driver.handshaking:
        category = (
            FailureCategory.TLS_CERTIFICATE
            if tls_alert(code, frame_type) in CERTIFICATE_ALERTS
            else FailureCategory.TLS_HANDSHAKE
        )
        driver.handshake_failed(category, detail)
    driver.die(FailureCategory.CONNECTION_BROKEN, detail)


def _stream_data(driver: QuicDriver, event: StreamDataReceived) -> bool:
    """A stream's bytes are read before HTTP/3 keeps any (``False``: none): a request stream's
    frames (``frames.py``: one refused is a stream error, HTTP/3 given the frames before it,
    or a connection error), the control stream's (``control.py``: GOAWAY, its id and the
    limits). A stream the caller is done with gets nothing more; a bidirectional stream the
    server opened is a connection error (RFC 9114 §6.1)."""
    stream_id = event.stream_id
    stream = driver.streams.get(stream_id)
    control = driver.control
    try:
        if stream is not None:
            if event.end_stream and _whole(driver, stream, event.data):
                return False  # (read whole: never past frames.py's limits, ``whole.py``)
            stream.frames.feed(event.data, driver.max_header_bytes)
        elif stream_id % 4 == 3:
            goaway = control.feed(stream_id, event.data)
            if goaway is not None:
                driver.goaway(goaway)
        elif stream_id % 4 == 1:
            message = f"the server opened a bidirectional stream ({stream_id})"
            raise FrameRefused(H3_STREAM_CREATION_ERROR, message, stream_error=False)
        else:
            return False
    except FrameRefused as refused:
        if stream is not None and refused.stream_error:
            if refused.at:  # (the frames before it stand: a head, a body)
                to_h3(driver, StreamDataReceived(event.data[: refused.at], False, stream_id))
            # As if the server had reset it: aioquic's HTTP/3 drops what it kept of the stream.
            driver.h3.handle_event(StreamReset(stream_id=stream_id, error_code=refused.code))
            driver.stream_error(stream, refused.code, refused.message)
            return False
        if stream is None and control.goaway is not None:
            driver.goaway(control.goaway)  # (the GOAWAYs before the refused frame stand)
        words = f"the server broke HTTP/3: {refused.message} ({application_error(refused.code)})"
        driver.connection_error(refused.code, words)
        return False
    return True


def _whole(driver: QuicDriver, stream: H3Stream, data: bytes) -> bool:
    """Whether ``data``, all of ``stream``'s bytes, was a plain response read whole
    (``whole.py``), its head and body handed to the stream; ``False``: ``frames.py``'s limits
    and HTTP/3 read them, as any."""
    h3 = driver.h3
    stream_id = stream.stream_id
    no_content = h3.untouched(stream_id)
    if no_content is None:
        return False
    limit = driver.max_header_bytes
    whole = read_whole(data, stream_id, h3.decode_section, no_content, limit, stream)
    if whole is None:
        return False
    h3.read_elsewhere(stream_id)
    body = whole.body
    stream.head(whole.head, not body)
    if body:
        stream.data(body, True)
    return True


def _reset(driver: QuicDriver, event: StreamReset) -> None:
    """A stream reset by the server: ``H3_REQUEST_REJECTED`` before a response head proves
    it was not processed (RFC 9114 §4.1.1); after one the server did answer, so the reset
    carries the stage reached, as any other (HTTP/2's REFUSED_STREAM likewise)."""
    stream = driver.streams.get(event.stream_id)
    if stream is None:
        return
    code = event.error_code
    if code == H3_REQUEST_REJECTED and stream.response is None:
        failure = Failure(
            FailureCategory.REFUSED_STREAM,
            "the server refused the stream (H3_REQUEST_REJECTED): the request was not processed",
            not_sent=True,
        )
    else:
        failure = Failure(
            FailureCategory.CONNECTION_BROKEN,
            f"the server reset the stream ({application_error(code)})",
        )
    stream.fail(failure)


def _ping_acknowledged(driver: QuicDriver, event: PingAcknowledged) -> None:
    driver.idle.answer(event.uid)


def _stop_sending(driver: QuicDriver, event: StopSendingReceived) -> None:
    stream = driver.streams.get(event.stream_id)
    if stream is not None:
        stream.send_stopped = True


def _headers(driver: QuicDriver, event: HeadersReceived) -> None:
    """A HEADERS frame: a final head, an interim one (skipped), or trailers (dropped: the
    head's fields are what a response carries); one refused (``headers.py``) is a stream
    error."""
    stream = driver.streams.get(event.stream_id)
    if stream is None:
        return
    try:
        if stream.response is not None:
            check_trailers(event.headers, driver.max_header_bytes)
            if event.stream_ended:
                stream.data(b"", True)
            return
        head = response_head(event.headers, driver.max_header_bytes, stream)
    except FrameRefused as refused:
        driver.stream_error(stream, refused.code, refused.message)
        return
    if head is not None:
        stream.head(head, event.stream_ended)


def _data(driver: QuicDriver, event: DataReceived) -> None:
    """Body bytes, or the stream's end. An end before any final head (the server ended the
    stream after nothing, or after frames of unknown types only: aioquic hands on the end
    alone) is a malformed response, a stream error H3_MESSAGE_ERROR (RFC 9114 §4.1.2); taken
    as the body's end, it left the caller waiting for a head until its first-byte bound."""
    stream = driver.streams.get(event.stream_id)
    if stream is None:
        return
    if stream.response is None and event.stream_ended:
        driver.stream_error(
            stream,
            H3_MESSAGE_ERROR,
            f"the server broke HTTP/3 on stream {stream.stream_id}: a malformed response "
            "(the stream ended with no response head)",
        )
        return
    stream.data(event.data, event.stream_ended)


def _malformed(driver: QuicDriver, event: MalformedResponse) -> None:
    """A malformed response (``shims.py``): a stream error H3_MESSAGE_ERROR (RFC 9114
    §4.1.2), its stream's alone."""
    stream = driver.streams.get(event.stream_id)
    if stream is not None:
        driver.stream_error(
            stream,
            H3_MESSAGE_ERROR,
            f"the server broke HTTP/3 on stream {stream.stream_id}: a malformed response "
            f"({event.reason})",
        )


#: What each QUIC event does (a function of the driver), by its type; one that returns
#: ``False`` keeps the event from HTTP/3.
QUIC_EVENTS: dict[type[QuicEvent], Callable[[QuicDriver, Any], bool | None]] = {
    HandshakeCompleted: _handshake_completed,
    ConnectionTerminated: _terminated,
    StreamDataReceived: _stream_data,
    StreamReset: _reset,
    PingAcknowledged: _ping_acknowledged,
    StopSendingReceived: _stop_sending,
}
#: QUIC events HTTP/3 is not given (the connection is over).
NOT_FOR_H3: frozenset[type[QuicEvent]] = frozenset({ConnectionTerminated})
#: What each HTTP/3 event does, by its type.
H3_EVENTS: dict[type[H3Event], Callable[[QuicDriver, Any], None]] = {
    HeadersReceived: _headers,
    DataReceived: _data,
    MalformedResponse: _malformed,
}
