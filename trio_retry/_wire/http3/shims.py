"""aioquic's classes as this client runs them, and the private names they read.

One job: the places where the client needs of aioquic what it offers no public way to do,
each behind a probe that fails closed (the dependency is pinned below 2 in ``pyproject.toml``):

- :class:`CheckedQuicConnection` checks the server's certificate chain with the client's own
  ``ssl.SSLContext`` (``verify.py``) after each datagram of the handshake, before the driver
  sends anything more, so a refused server never receives the client's Finished, its
  certificate or a request. It reads the chain and the server's CertificateRequest from
  aioquic's TLS state (``_peer_certificate``, ``_peer_certificate_chain``,
  ``_certificate_request``); if those names are gone, every handshake is refused in words
  (HTTP/3 then falls back to TCP), never accepted unchecked.
- :class:`CheckedQuicConnection` lets a pending acknowledgement ride in the next packet
  (:meth:`~CheckedQuicConnection.acknowledge_with_next`: aioquic's ``_spaces``, ``ack_at``).
- :class:`CheckedQuicConnection` also says which packets carried a stream's bytes
  (:meth:`~CheckedQuicConnection.sends_zero_rtt`, :meth:`~CheckedQuicConnection.
  stream_written`): application data goes in 0-RTT packets while the 0-RTT key is installed
  and 1-RTT's is not yet (aioquic's ``_write_application`` picks the packet type so), and a
  stream's bytes written into packets end at its sender's ``highest_offset``. It reads
  aioquic's ``_cryptos`` (each key's ``send.is_valid()``) and ``_streams``; if those names are
  gone (:attr:`~CheckedQuicConnection.zero_rtt_visible` is false), the connection sends nothing
  early: no request's evidence then rests on a guess.
- :class:`CheckedQuicConnection` says how far a stream's bytes were handed to QUIC and
  acknowledged by the server (:meth:`~CheckedQuicConnection.stream_offsets`: the bounds of its
  sender's unacknowledged buffer, ``_buffer_start`` and ``_buffer_stop``), which paces an
  upload and counts its bytes sent; if those names are gone, both read 0 (no pacing, no count,
  never a hang).
- :class:`PushlessH3Connection` advertises no MAX_PUSH_ID (aioquic's client sends 8, though
  this client never takes a push): a server may then push nothing (RFC 9114 §4.6), and a
  PUSH_PROMISE is a connection error H3_ID_ERROR (§7.2.5; ``frames.py`` refuses it at its
  frame header). It also advertises a QPACK dynamic table of capacity 0 (aioquic's is 4096)
  and its field-section limit (SETTINGS_MAX_FIELD_SECTION_SIZE: ``max_header_bytes``, RFC
  9114 §4.2.2). Capacity 0 is what bounds a field section's decoding: with aioquic's 4096, a
  16 KB section referring 16,000 times to one 4 KB entry decoded to 64 MB before any size
  could be checked; with 0, a server that inserts anything breaks QPACK (a connection error,
  QPACK_ENCODER_STREAM_ERROR, RFC 9204 §4.3.1), and what is left, the static table, is
  bounded before decoding (``qpack.py``). What a server loses: compressing repeated fields
  across responses (quiche's HTTP/3 advertises 0 by default too). aioquic's ``_max_push_id``,
  ``_max_table_capacity``, ``_blocked_streams`` and ``_decoder`` are set before the control
  stream is written (``_init_connection``), and ``_get_local_settings`` adds the limit; the
  probe: aioquic's constructor must have made a ``pylsqpack.Decoder`` named ``_decoder``
  first, and the SETTINGS it then sent (``sent_settings``, public) must say what was meant,
  else :class:`LimitsUnsupported` is raised and the connection is not used.
- :class:`StreamErrorsH3Connection` (what :func:`client_h3` makes) keeps a malformed
  response on its stream. aioquic checks each response (field names and values,
  pseudo-header fields, connection-specific fields, content-length against the DATA
  received) and makes a failed check a connection error, which fails every request beside
  it; RFC 9114 §4.1.2 makes it a stream error (H3_MESSAGE_ERROR). So aioquic's handlers of a
  request stream's frames and end (``_handle_request_or_push_frame``,
  ``_handle_request_or_push_end``) are wrapped: the ``MessageError`` they raise becomes a
  :class:`MalformedResponse` event for that stream alone, after the events of the frames
  before it; the QPACK encoder is told that the stream's field sections will not be read
  (RFC 9204 §4.4.2); what else arrives on the stream is dropped
  (``_receive_request_or_push_data``); the driver resets and stops the stream with
  H3_MESSAGE_ERROR. The content-length check (``_check_content_length``) is kept until its
  frame was handled, so a valid head, or data, that came in the frame which ended the body
  still reach the caller (its evidence says they arrived), ending nothing; and it is skipped
  for a response that has no content (RFC 9110 §6.4.1, RFC 9114 §4.1.2): one to a HEAD
  (seen as the request is sent, ``send_headers``), a 204 or a 304 (seen as QPACK decodes the
  head, ``_decode_headers``), which may carry the length of a body it never sends. Two
  content-length values that disagree (which aioquic lets pass) are malformed too. Every
  other error aioquic raises stays a connection error, as RFC 9114 makes them. When one of
  those names is missing or takes other parameters, :func:`client_h3` makes a
  :class:`PushlessH3Connection` instead: a malformed response (and a HEAD) then closes the
  connection as aioquic does, which fails the requests beside it but proves nothing false.
- :class:`StreamErrorsH3Connection` lets a whole response be read elsewhere (``whole.py``,
  the fast path of a small response): :meth:`~StreamErrorsH3Connection.untouched` says when
  aioquic has read nothing of a stream yet (its ``H3Stream``'s buffer, frame, head state),
  :meth:`~PushlessH3Connection.decode_section` decodes a field section with aioquic's own
  decoder (``_decoder``), and :meth:`~StreamErrorsH3Connection.read_elsewhere` marks the
  stream's receiving side ended, so that aioquic forgets it as it forgets any stream ended
  both ways. It writes a request's head itself (``send_headers``, on a stream aioquic has
  not seen: the QPACK encoder ``_encoder`` and its stream, aioquic's ``H3Stream`` made in
  the state aioquic's own would leave). The same probe (:func:`_wrappable`) covers those
  names; without them nothing is read elsewhere and aioquic writes every head.

A refusal is raised out of :meth:`CheckedQuicConnection.receive_datagram` as
:class:`HandshakeRefused` once the connection is closed with the matching TLS alert
(CRYPTO_ERROR, RFC 9001 §4.8); the connection then yields no more events, so the handshake
it refused never completes as far as the driver sees.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pylsqpack
from aioquic.buffer import encode_uint_var
from aioquic.h3.connection import H3Connection, HeadersState, MessageError, Setting
from aioquic.h3.connection import H3Stream as AioquicStream
from aioquic.h3.events import DataReceived, H3Event, HeadersReceived
from aioquic.quic.connection import NetworkAddress, QuicConnection
from aioquic.quic.packet import QuicErrorCode
from aioquic.tls import Epoch
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from .verify import HandshakeChecks
from .verify import HandshakeRefused as HandshakeRefused

if TYPE_CHECKING:
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.events import QuicEvent
    from aioquic.tls import SessionTicketHandler

    from .verify import QuicTrust

__all__ = [
    "CheckedQuicConnection",
    "HandshakeRefused",
    "LimitsUnsupported",
    "MalformedResponse",
    "PushlessH3Connection",
    "StreamErrorsH3Connection",
    "client_h3",
]


def _zero_rtt_names() -> bool:
    """Whether this aioquic's key and stream objects carry the names read to tell 0-RTT
    bytes from 1-RTT ones (checked once, on objects of its own making)."""
    try:
        from aioquic.quic.crypto import CryptoPair
        from aioquic.quic.stream import QuicStreamSender

        valid = CryptoPair().send.is_valid()
        offset = QuicStreamSender(stream_id=0, writable=True).highest_offset
    except Exception:
        return False
    return valid is False and isinstance(offset, int)


_ZERO_RTT_NAMES = _zero_rtt_names()


class CheckedQuicConnection(HandshakeChecks, QuicConnection):
    """A client ``QuicConnection`` whose server is checked by the client's TLS context; see
    the module docstring."""

    #: aioquic delays each acknowledgement by itself (1 ms): a download's reads are not spaced
    #: out on top of that (``acks.py``, "During a download").
    delays_acks = True

    def __init__(
        self,
        *,
        configuration: QuicConfiguration,
        trust: QuicTrust,
        session_ticket_handler: SessionTicketHandler | None = None,
        token_handler: Callable[[bytes], None] | None = None,
        token: bytes = b"",
    ) -> None:
        #: The first close asked for: ``(error_code, frame_type, reason_phrase)``.
        self.close_asked: tuple[int, int | None, str] | None = None
        configuration.token = token  # (the server's address-validation token, if any)
        super().__init__(
            configuration=configuration,
            session_ticket_handler=session_ticket_handler,
            token_handler=token_handler,
        )
        self._trust_start(trust, configuration.server_name)
        #: Whether :meth:`sends_zero_rtt` and :meth:`stream_written` can be read here (else
        #: nothing goes early on this connection).
        self.zero_rtt_visible = (
            _ZERO_RTT_NAMES
            and isinstance(self.__dict__.get("_cryptos"), dict)
            and isinstance(self.__dict__.get("_streams"), dict)
        )

    def close(
        self,
        error_code: int = QuicErrorCode.NO_ERROR,
        frame_type: int | None = None,
        reason_phrase: str = "",
    ) -> None:
        """aioquic's; the first close asked for is kept in :attr:`close_asked` (the driver tells
        one aioquic's HTTP/3 layer asked for, on what the server sent, from its own)."""
        if self.close_asked is None:
            self.close_asked = (error_code, frame_type, reason_phrase)
        super().close(error_code=error_code, frame_type=frame_type, reason_phrase=reason_phrase)

    def receive_datagram(self, data: bytes, addr: NetworkAddress, now: float) -> None:
        """aioquic's, then the checks of the handshake's progress. Raises
        :class:`HandshakeRefused` (the connection closed with an alert) on a refusal."""
        super().receive_datagram(data, addr, now)
        if not self._trust_settled and not self._trust_refused:
            self._check_handshake()

    def receive_datagrams(self, datagrams: list[bytes], addr: NetworkAddress, now: float) -> None:
        """:meth:`receive_datagram` for each of ``datagrams`` (all from ``addr``)."""
        for data in datagrams:
            self.receive_datagram(data, addr, now)

    def next_event(self) -> QuicEvent | None:
        """aioquic's next event; none once the client refused the server."""
        return None if self._trust_refused else super().next_event()

    def sends_zero_rtt(self) -> bool:
        """Whether the stream bytes QUIC writes into packets now go in 0-RTT ones: the 0-RTT
        key is installed and the 1-RTT key is not yet. Once the 1-RTT key is installed, no
        byte goes in 0-RTT any more (RFC 9001 §4.9.3)."""
        if not self.zero_rtt_visible:
            return False
        cryptos = self._cryptos
        zero, one = cryptos.get(Epoch.ZERO_RTT), cryptos.get(Epoch.ONE_RTT)
        return (
            zero is not None
            and zero.send.is_valid()
            and not (one is not None and one.send.is_valid())
        )

    def acknowledge_with_next(self, now: float) -> None:
        """The 1-RTT packets waiting for their acknowledgement get it in the next packet QUIC
        writes (one carrying a request), rather than in a packet of its own once aioquic's
        delay (1 ms) runs out: one datagram, and one wake-up, fewer per sequential request.
        Reads aioquic's ``_spaces`` and its ``ack_at``; where those are gone, nothing changes
        (the acknowledgement then goes on its own, as before).

        The acknowledgement is made due just *before* ``now``: aioquic lets pacing hold back
        an acknowledgement due at ``now`` exactly, and then its timer stays at ``now``, a
        wait that ends at once and moves nothing. On a clock that does not move by itself
        (trio's ``MockClock`` with autojump, which jumps only when every task waits) the
        driver went round that loop forever."""
        spaces = self.__dict__.get("_spaces")
        space = spaces.get(Epoch.ONE_RTT) if isinstance(spaces, dict) else None
        ack_at = getattr(space, "ack_at", None)
        if isinstance(ack_at, float) and ack_at > now:
            space.ack_at = math.nextafter(now, -math.inf)  # type: ignore[union-attr]

    def owes_only_an_ack(self, now: float) -> bool:
        """Never: aioquic delays its acknowledgements itself (1 ms), and a request flushed
        within that carries one (:meth:`acknowledge_with_next`), so the driver's task holds
        nothing back over aioquic (``acks.py``)."""
        return False

    def stream_written(self, stream_id: int) -> int:
        """How many bytes of stream ``stream_id`` QUIC has written into packets so far (the
        highest offset sent; a retransmission adds none). 0 for a stream it does not have."""
        if not self.zero_rtt_visible:
            return 0
        stream = self._streams.get(stream_id)
        return 0 if stream is None else stream.sender.highest_offset

    def stream_offsets(self, stream_id: int) -> tuple[int, int]:
        """``(acknowledged, handed)``: the offsets in stream ``stream_id`` up to which the
        server acknowledged what QUIC sent, and up to which bytes (HTTP/3 frames) were handed
        to QUIC. Read from aioquic's stream sender (the bounds of its unacknowledged buffer):
        aioquic has no public measure of either. A change there reads ``(0, 0)``."""
        stream = getattr(self, "_streams", {}).get(stream_id)
        sender = getattr(stream, "sender", None)
        start = getattr(sender, "_buffer_start", None)
        stop = getattr(sender, "_buffer_stop", None)
        if isinstance(start, int) and isinstance(stop, int):
            return start, stop
        return 0, 0

    def peer_max_streams(self) -> int | None:
        """The server's initial limit on request streams, once the handshake says it: aioquic
        keeps it in a private attribute and has no getter; ``None`` if it is gone (aioquic
        holds back a stream beyond the server's limit itself, so nothing breaks)."""
        limit = self.__dict__.get("_remote_max_streams_bidi")
        return limit if isinstance(limit, int) and limit > 0 else None

    def forget_stream(self, stream_id: int) -> None:
        """The client is done with ``stream_id`` (aioquic forgets it by itself)."""

    def _der(self, leaf: object, chain: list[x509.Certificate]) -> list[bytes] | None:
        if not isinstance(leaf, x509.Certificate):
            return None
        return [cert.public_bytes(Encoding.DER) for cert in [leaf, *chain]]


class LimitsUnsupported(Exception):
    """This aioquic cannot be made to keep the client's HTTP/3 limits (a name the shim sets is
    gone): the connection is not used."""


class PushlessH3Connection(H3Connection):
    """A client ``H3Connection`` that advertises no MAX_PUSH_ID, no QPACK dynamic table and
    ``max_header_bytes`` as its field-section limit; see the module docstring. Raises
    :class:`LimitsUnsupported` when this aioquic does not let it."""

    def __init__(self, quic: QuicConnection, *, max_header_bytes: int) -> None:
        self._max_field_section = max_header_bytes
        super().__init__(quic)
        sent = self.sent_settings or {}
        if (
            sent.get(Setting.QPACK_MAX_TABLE_CAPACITY) != 0
            or sent.get(Setting.QPACK_BLOCKED_STREAMS) != 0
            or sent.get(Setting.MAX_FIELD_SECTION_SIZE) != max_header_bytes
        ):
            raise LimitsUnsupported(
                f"this aioquic sent the SETTINGS {sent!r} instead of the client's limits"
            )

    def _init_connection(self) -> None:
        if not isinstance(getattr(self, "_decoder", None), pylsqpack.Decoder):
            raise LimitsUnsupported("this aioquic keeps no QPACK decoder named _decoder")
        # aioquic writes MAX_PUSH_ID on the control stream here when this is not None, and
        # the SETTINGS from the two QPACK values; the decoder it made with its own are replaced.
        self._max_push_id = None
        self._max_table_capacity = 0
        self._blocked_streams = 0
        self._decoder = pylsqpack.Decoder(0, 0)
        super()._init_connection()

    def _get_local_settings(self) -> dict[int, int]:
        settings = super()._get_local_settings()
        settings[Setting.MAX_FIELD_SECTION_SIZE] = self._max_field_section
        return settings

    # --- a whole response read elsewhere (``whole.py``) -------------------------------------

    def untouched(self, stream_id: int) -> bool | None:
        """``None``: the stream's response is this layer's to read (here, none is read
        elsewhere); see :meth:`StreamErrorsH3Connection.untouched`."""
        return None

    def decode_section(self, stream_id: int, section: bytes) -> list[tuple[bytes, bytes]] | None:
        """The fields of ``section`` (a field section of ``stream_id``), as this layer decodes
        them, or ``None`` when the decoder refuses it; what the decoder has to tell the
        server's encoder goes on the decoder stream, as here."""
        try:
            decoder, fields = self._decoder.feed_header(stream_id, section)
        except (pylsqpack.DecompressionFailed, pylsqpack.StreamBlocked):
            return None
        stream = self._local_decoder_stream_id
        if decoder and stream is not None:  # (none for a section that needs no dynamic table)
            self._decoder_bytes_sent += len(decoder)
            self._quic.send_stream_data(stream, decoder)
        return fields

    def read_elsewhere(self, stream_id: int) -> None:
        """The whole response of ``stream_id`` was read elsewhere (``whole.py``): this layer
        receives nothing more of it, and forgets it once its request is sent."""


@dataclass
class MalformedResponse(H3Event):
    """The server's response on ``stream_id`` is malformed (RFC 9114 §4.1.2): a stream error
    H3_MESSAGE_ERROR; ``reason`` says what was wrong (aioquic's words)."""

    stream_id: int
    reason: str


#: The statuses whose responses have no content (RFC 9110 §15.3.5, §15.4.5); a HEAD's
#: response has none whatever its status (§9.3.2).
_NO_CONTENT = frozenset({b"204", b"304"})
#: aioquic's private methods :class:`StreamErrorsH3Connection` wraps, with their parameters.
_WRAPPED = {
    "_handle_request_or_push_frame": ["self", "frame_type", "frame_data", "stream", "stream_ended"],
    "_handle_request_or_push_end": ["self", "stream"],
    "_receive_request_or_push_data": ["self", "stream", "data", "stream_ended"],
    "_check_content_length": ["self", "stream"],
    "_decode_headers": ["self", "stream_id", "frame_data"],
}

#: The state of aioquic's ``H3Stream`` the wrappers read (``untouched``: all but the first).
_STREAM_STATE = (
    "stream_id",
    "buffer",
    "receiving_ended",
    "frame_size",
    "blocked",
    "interim_response_received",
    "headers_recv_state",
    "is_ended",
)
#: The state of aioquic's ``H3Connection`` the wrappers read (and ``send_headers`` writes).
_STATE = (
    "_stream",
    "_decoder",
    "_decoder_bytes_sent",
    "_local_decoder_stream_id",
    "_quic",
    "_quic_logger",
    "_encoder",
    "_encoder_bytes_sent",
    "_local_encoder_stream_id",
)


def _wrappable() -> bool:
    """Whether this aioquic has each of :data:`_WRAPPED`, taking what it is given there, and
    the state the wrappers read."""
    for name, parameters in _WRAPPED.items():
        method = getattr(H3Connection, name, None)
        if not callable(method) or list(inspect.signature(method).parameters) != parameters:
            return False
    stream = AioquicStream(0)
    assigned = H3Connection.__init__.__code__.co_names  # (the attributes it sets, among others)
    return (
        all(
            hasattr(stream, name)
            for name in (*_STREAM_STATE, "headers_send_state", "sending_ended")
        )
        and stream.headers_recv_state is HeadersState.INITIAL
        and stream.headers_send_state is HeadersState.INITIAL
        and all(name in assigned for name in _STATE)
        and callable(getattr(H3Connection, "send_headers", None))
    )


class StreamErrorsH3Connection(PushlessH3Connection):
    """A client ``H3Connection`` whose malformed responses are stream errors, and whose
    responses without content may declare a length; see the module docstring."""

    def __init__(self, quic: QuicConnection, *, max_header_bytes: int) -> None:
        # Stream ids (a set of ints: a membership test per frame costs no Python call, where
        # a WeakSet's cost two): a response without content, until its end is checked; a
        # malformed one, until aioquic forgets the stream (pruned when another is added).
        self._malformed: set[int] = set()
        self._no_content: set[int] = set()
        # What aioquic's content-length check found wrong in the frame being handled: kept
        # for after it, so that the frame's events are not lost with an exception.
        self._length_error: str | None = None
        super().__init__(quic, max_header_bytes=max_header_bytes)

    def send_headers(
        self, stream_id: int, headers: list[tuple[bytes, bytes]], end_stream: bool = False
    ) -> None:
        """aioquic's; a HEAD request's response will have no content. A request's head, on a
        stream aioquic has not seen, is written here: the same bytes to QUIC (the encoder's
        instructions, if any, then the HEADERS frame) and the same state of aioquic's (the
        stream, its head sent, its end) as aioquic's own ``send_headers``, without its
        generic path (a context manager, the frame built in a ``Buffer``): a fifth of a
        sequential request's HTTP/3 Python. Not while aioquic logs (qlog)."""
        if stream_id in self._stream or self._quic_logger is not None:
            super().send_headers(stream_id, headers, end_stream)
        else:
            encoder, block = self._encoder.encode(stream_id, headers)
            self._encoder_bytes_sent += len(encoder)
            if encoder and self._local_encoder_stream_id is not None:
                self._quic.send_stream_data(self._local_encoder_stream_id, encoder)
            stream = self._stream[stream_id] = AioquicStream(stream_id)
            stream.headers_send_state = HeadersState.AFTER_HEADERS
            stream.sending_ended = end_stream
            frame = b"\x01" + encode_uint_var(len(block)) + block  # (HEADERS: RFC 9114 §7.2.2)
            self._quic.send_stream_data(stream_id, frame, end_stream)
        if (b":method", b"HEAD") in headers and stream_id in self._stream:
            self._no_content.add(stream_id)

    # --- a whole response read elsewhere (``whole.py``) -------------------------------------

    def untouched(self, stream_id: int) -> bool | None:
        """Whether the response on ``stream_id`` has no content (the request was a HEAD), when
        none of it was read here yet (no frame, no byte kept, no head) and the stream is in
        no other state of this class's (malformed): ``whole.py`` may then read it whole.
        ``None`` otherwise: the bytes are this layer's to read."""
        stream = self._stream.get(stream_id)
        if (
            stream is None
            or stream.buffer
            or stream.frame_size is not None
            or stream.blocked
            or stream.receiving_ended
            or stream.interim_response_received
            or stream.headers_recv_state is not HeadersState.INITIAL
            or stream_id in self._malformed
        ):
            return None
        return stream_id in self._no_content

    def read_elsewhere(self, stream_id: int) -> None:
        """The whole response of ``stream_id`` was read by ``whole.py``: the stream has
        received all it will (its end is not checked here again), and aioquic forgets it as
        it forgets any stream ended both ways (now, or once the request's last byte is
        handed over)."""
        self._no_content.discard(stream_id)
        stream = self._stream.get(stream_id)
        if stream is not None:
            stream.receiving_ended = True
            if stream.is_ended():
                del self._stream[stream_id]

    # --- aioquic's private methods, wrapped -------------------------------------------------

    def _decode_headers(
        self, stream_id: int, frame_data: bytes | None
    ) -> list[tuple[bytes, bytes]]:
        """aioquic's, and what its checks miss: content-length values that disagree
        (malformed, RFC 9110 §8.6: aioquic keeps the last), and a 204 or 304 (no content)."""
        headers = super()._decode_headers(stream_id, frame_data)
        declared = None  # (a loop, not a set built per head: this runs for every response)
        for name, value in headers:
            if name == b"content-length":
                if declared is not None and value != declared:
                    lengths = sorted({v for n, v in headers if n == b"content-length"})
                    raise MessageError(f"conflicting content-length values {lengths}")
                declared = value
        if headers and headers[0][0] == b":status" and headers[0][1] in _NO_CONTENT:
            if stream_id in self._stream:
                self._no_content.add(stream_id)
        return headers

    def _check_content_length(self, stream: AioquicStream) -> None:
        if stream.stream_id in self._no_content:  # (checked once, at the stream's end)
            self._no_content.discard(stream.stream_id)
            return
        try:
            super()._check_content_length(stream)
        except MessageError as exc:
            self._length_error = exc.reason_phrase

    def _handle_request_or_push_frame(
        self,
        frame_type: int,
        frame_data: bytes | None,
        stream: AioquicStream,
        stream_ended: bool,
    ) -> list[H3Event]:
        if stream.stream_id in self._malformed:
            return []
        try:
            events = super()._handle_request_or_push_frame(
                frame_type, frame_data, stream, stream_ended
            )
        except MessageError as exc:
            self._length_error = None
            return self._refuse(stream, exc.reason_phrase, [])
        if self._length_error is None:
            return events
        return self._length_checked(stream, events)

    def _handle_request_or_push_end(self, stream: AioquicStream) -> list[H3Event]:
        if stream.stream_id in self._malformed:
            return []
        try:
            events = super()._handle_request_or_push_end(stream)
        except MessageError as exc:
            self._length_error = None
            return self._refuse(stream, exc.reason_phrase, [])
        if self._length_error is None:
            return events
        return self._length_checked(stream, events)

    def _receive_request_or_push_data(
        self, stream: AioquicStream, data: bytes, stream_ended: bool
    ) -> list[H3Event]:
        if stream.stream_id in self._malformed:  # dropped: the stream is being reset
            stream.buffer = b""
            if stream_ended:
                stream.receiving_ended = True
            return []
        return super()._receive_request_or_push_data(stream, data, stream_ended)

    # --- the stream error -------------------------------------------------------------------

    def _length_checked(self, stream: AioquicStream, events: list[H3Event]) -> list[H3Event]:
        """``events``, unless the content-length check failed on the stream's end: then the
        events of its last frame stand (the head and data it carried) but end nothing, and
        the stream's end is its error."""
        reason, self._length_error = self._length_error, None
        if reason is None:
            return events
        kept = [
            dataclasses.replace(event, stream_ended=False)
            for event in events
            if isinstance(event, HeadersReceived)
            or (isinstance(event, DataReceived) and event.data)
        ]
        return self._refuse(stream, reason, kept)

    def _refuse(
        self, stream: AioquicStream, reason: str, events: Sequence[H3Event]
    ) -> list[H3Event]:
        """``stream``'s response is malformed: ``events`` (what came before it), then its
        :class:`MalformedResponse`; the QPACK encoder is told that the stream's field sections
        will not be read (RFC 9204 §4.4.2), and what else arrives on it is dropped."""
        stream_id = stream.stream_id
        self._malformed = {known for known in self._malformed if known in self._stream}
        self._malformed.add(stream_id)
        decoder = self._decoder.cancel_stream(stream_id)
        self._decoder_bytes_sent += len(decoder)
        decoder_stream = self._local_decoder_stream_id
        if decoder_stream is not None:
            self._quic.send_stream_data(decoder_stream, decoder)
        return [*events, MalformedResponse(stream_id=stream_id, reason=reason)]


_STREAM_ERRORS = _wrappable()


def client_h3(quic: QuicConnection, *, max_header_bytes: int) -> PushlessH3Connection:
    """The client's HTTP/3 state machine over ``quic``: a :class:`StreamErrorsH3Connection`
    when this aioquic has what it wraps, else a :class:`PushlessH3Connection`. Raises
    :class:`LimitsUnsupported` when this aioquic does not let the client's limits be set."""
    kind = StreamErrorsH3Connection if _STREAM_ERRORS else PushlessH3Connection
    return kind(quic, max_header_bytes=max_header_bytes)
