"""qh3's QUIC connection as this client runs it, and the private names it reads.

qh3 is aioquic's fork with its QUIC packets, encryption, loss recovery and congestion control
in Rust (its ``QuicConnection`` is a Python facade over a native core) and its TLS handshake
in Python, aioquic's. The client runs aioquic's HTTP/3 layer over it (``shims.py``: every rule
of a response's frames is written against that layer; qh3's own HTTP/3 layer has other private
methods and checks no content-length), so this connection hands on aioquic's event classes,
and takes what aioquic's HTTP/3 gives a QUIC connection. One job: the client's needs of qh3
where it offers no public way, each behind a probe that fails closed (qh3 is pinned below 3
in ``pyproject.toml``), the same needs as ``shims.CheckedQuicConnection`` of aioquic:

- **The server's chain** is checked by the client's own ``ssl.SSLContext`` (``verify.py``)
  after each datagram of the handshake, before anything more is sent: qh3's TLS is aioquic's,
  with the same names (``_peer_certificate``, ``_peer_certificate_chain``,
  ``_certificate_request``, ``state``, ``session_resumed``; its certificates give their DER
  with ``public_bytes()``). Gone: every handshake is refused in words (HTTP/3 then falls back
  to TCP), never accepted unchecked. A refusal closes the connection with the TLS alert; qh3's
  core then sends only its CONNECTION_CLOSE (the client's Finished it had queued never leaves).
- **Which packets carry a stream's bytes** (0-RTT evidence, ``handshake.py``): stream bytes go
  in 0-RTT packets while the 0-RTT key is installed (``_early_data_attempted``, set as qh3
  installs it) and the 1-RTT send key is not yet (its core's ``send_key_phase`` is ``None``
  until then); a stream's bytes in packets are those handed to it (counted here, as they are
  handed) less those qh3 still queues for their first transmission (``get_send_buffer_size``,
  public). Gone (:attr:`~CheckedQuicConnection.zero_rtt_visible` false): nothing goes early.
- **Address-validation tokens** (RFC 9000 §8.1.3): qh3's configuration takes none and it calls
  back on none. The token is given to its core (``_core.set_initial_token``, which qh3 itself
  uses after a Retry) as the connection starts, before its first Initial packet is built; a
  NEW_TOKEN frame's token is read from ``_peer_token`` after each round of datagrams and handed
  to ``token_handler``. Gone: no token is used or kept (a server may then ask for a Retry).
- **The acknowledgement riding with a request**: qh3's core puts the acknowledgement it owes
  in the next packet it writes, so :meth:`~CheckedQuicConnection.acknowledge_with_next` has
  nothing to do; but it makes that acknowledgement due at once when a packet ends a stream
  (a response's last), so :meth:`~CheckedQuicConnection.owes_only_an_ack` tells the driver
  when it may hold it for the caller's next request (``acks.py``), reading its core's timer
  kind. Gone (another shape): never held, sent at once as before.
- **A stream beyond the server's limit** (its MAX_STREAMS, RFC 9000 §4.6) is held here until
  the limit rises, as aioquic holds it (qh3 refuses it): nothing of it leaves before then, so
  its bytes are not counted as written; reset while held, it never sends its request.
- **The close** (``close``): qh3 dates its closing period from its last packet, so after an
  idle while the period is over before the CONNECTION_CLOSE is written, and the timer would
  end the connection silently (the server then keeps it until its idle timeout); the timer
  waits until the close has been written.
- **Early data while the handshake stalls**: qh3 2.1 probes unacknowledged 0-RTT data in
  1-RTT packets, and before it has the 1-RTT key that fails (``missing OneRtt packet key``)
  at every loss-recovery timeout from the first (~1.3 s on loopback), losing the Initial
  probe it had written in the same round; raised, it ended the connection before the
  handshake's limit. :meth:`~CheckedQuicConnection.datagrams_to_send` polls qh3's core itself
  and, during such a handshake, sends what was written before that failure and no more: the
  ClientHello is probed again, the handshake may still complete (or run out its limit, with
  its early requests' evidence as over aioquic: ``handshake.py``). Any other failure is raised.
- **A large session ticket**: qh3 2.1 writes a ClientHello that offers a session into 2,048
  bytes, which its post-quantum key share (1,216 bytes) and a large ticket (GnuTLS's) overflow
  (``BufferWriteError``); :meth:`~CheckedQuicConnection.connect` then starts afresh without
  the ticket (a full handshake, no early data: nothing went early).
- **A close between the handshake's end and its confirmation**: qh3 2.1 then sends its
  CONNECTION_CLOSE in a 1-RTT packet only and drops the client's Finished it had queued, so
  the server, which cannot read 1-RTT before it has that Finished, never learns of the close
  (RFC 9000 §10.2.3 wants it in a Handshake packet too). The close first writes what was due
  (the Finished), then the CONNECTION_CLOSE; never for a server the client refused, which
  must not receive the Finished.
- **The Initial keys at the handshake's end**: qh3 2.1 discards them only once it sends a
  Handshake packet (RFC 9001 §4.9.1), and counts its Initial packets in flight until then.
  After handshake loss its congestion window may have collapsed to two packets, which the
  Initial packets it writes as the server's flight completes the handshake (an ACK, a
  ClientHello declared lost) then fill: the client's Finished never left, nor any ACK or
  probe (its loss-recovery timer fired and sent nothing), and the connection went silent
  until an idle timeout, its request unanswered. The Initial keys are discarded as soon as
  the handshake completed and passed the client's checks (the server has every Initial
  byte it needs: it answered the ClientHello; a client's first Handshake packet lets it
  drop its own): those packets leave the window, and the Finished goes in the same round.
- **A first flight's probes**: the ClientHello takes two datagrams (qh3's post-quantum key
  share), and qh3 2.1 probes a first flight that had no answer with the first half and a
  PING-only Initial packet. The second half then went again only once the server
  acknowledged something, and when the PING arrived first an aioquic server refused the
  connection ("Packet contains no CRYPTO frame", RFC 9000 §17.2.2: it holds the first
  packet it receives to be the client's first); the attempt went over TCP. The ClientHello's
  CRYPTO data is kept as qh3 hands it to its core (its TLS bridge's queue) and given to the
  core again before each loss-recovery timeout until the ServerHello arrives: the probes
  carry all of it (three datagrams, the whole ClientHello and qh3's own probe; a server
  ignores what it has already). Not only before the server's first packet: with early data,
  once the server's ACK had shown half of it lost, qh3 sent that half again once and its
  later probes never (the handshake stalled until a limit). Gone: qh3's probes, as they are.
- **No SNI for an IP address** (RFC 6066 §3, as over TCP): qh3 2.1 sends the configured
  server name whatever it is (aioquic leaves an address out; GnuTLS refuses an IPv6 one with
  ``illegal_parameter``), so an address is not handed to it as a name; the client's own check
  of the chain still uses it.
- **A reset beside a STOP_SENDING**: qh3 2.1 drops a STOP_SENDING not yet written when the
  same stream is reset, so a server kept sending a response the client had given up (the
  driver asks for both). The reset is handed to qh3 once what is queued has been written
  (always: it is what stops qh3 sending a request again that the server may not have yet).
- **An upload's progress** (``sending.py``): qh3 shows what a stream still queues, not what
  the server acknowledged; :meth:`~CheckedQuicConnection.stream_offsets` says the bytes sent
  (handed less queued) where aioquic's says the bytes acknowledged. An upload then waits on
  what QUIC has not sent yet; what is in flight is bounded by QUIC's congestion window.
- **Its logging**: qh3 2.1 logs each CONNECTION_CLOSE a server sends ("Native peer close",
  a server's ordinary close among them) and each protocol error its core reports at WARNING
  on the ``quic`` logger, so a program that configured no logging printed them on stderr
  (Python's last-resort handler). The client reports how a connection ended itself (the
  attempt's error and evidence); those two records go on at DEBUG (:class:`_NativeNotes`, a
  filter on that logger; every other record of it is untouched).

Rejected: qh3's whole stack (its HTTP/3 layer too). Its QPACK decoder is Rust, but its HTTP/3
frames are parsed in Python as aioquic's are, so it is not faster there, and every rule of
``shims.StreamErrorsH3Connection`` (a malformed response a stream error, a body shorter than
its content-length caught, HEAD/204/304) would have to be written again against other private
methods.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aioquic.quic import events as aioquic_events
from qh3._hazmat import BufferWriteError, QuicConnectionCore
from qh3.quic import events as qh3_events
from qh3.quic.connection import NetworkAddress, QuicConnection, QuicConnectionError
from qh3.quic.packet import QuicErrorCode

from .verify import HandshakeChecks

if TYPE_CHECKING:
    from qh3.quic.configuration import QuicConfiguration
    from qh3.tls import SessionTicketHandler

    from .verify import QuicTrust

__all__ = ["CheckedQuicConnection", "translate"]


#: qh3's QUIC event classes to aioquic's (the same fields in the same order): aioquic's HTTP/3
#: layer and ``events.py`` dispatch on aioquic's.
_EVENTS: dict[type[Any], type[Any]] = {
    getattr(qh3_events, name): getattr(aioquic_events, name)
    for name in (
        "ConnectionIdIssued",
        "ConnectionIdRetired",
        "ConnectionTerminated",
        "DatagramFrameReceived",
        "HandshakeCompleted",
        "PingAcknowledged",
        "ProtocolNegotiated",
        "StopSendingReceived",
        "StreamDataReceived",
        "StreamReset",
    )
}


#: What qh3 2.1 raises writing a probe of early data before it has the 1-RTT key.
class _NativeNotes(logging.Filter):
    """qh3's notes of a peer's close and of its core's protocol errors, at DEBUG instead of
    WARNING (the module docstring says why). Passes every record on."""

    NOTES = frozenset({"Native peer close: %r", "Native protocol error: %r"})

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING and record.msg in self.NOTES:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


if not any(isinstance(f, _NativeNotes) for f in logging.getLogger("quic").filters):
    logging.getLogger("quic").addFilter(_NativeNotes())

_NO_ONE_RTT_KEY = "missing OneRtt packet key"
#: The Initial keys' epoch, as qh3's core numbers it (``tls.Epoch.INITIAL``).
_INITIAL = 0
#: The kind qh3's core names its timer of a due acknowledgement of 1-RTT packets.
_ACK_TIMER = "ack_application"
#: qh3's core keeps time in whole nanoseconds, rounded up: a time it was given comes back as
#: much as a nanosecond later.
_TICK = 1e-6
_QH3_DATA = qh3_events.StreamDataReceived
_AIOQUIC_DATA = aioquic_events.StreamDataReceived


def translate(event: Any) -> aioquic_events.QuicEvent | None:
    """qh3's ``event`` as aioquic's class of the same name (``None`` for a kind aioquic has
    not: nothing in the client reads it)."""
    if type(event) is _QH3_DATA:  # (the one kind a download brings by the thousand)
        return _AIOQUIC_DATA(event.data, event.end_stream, event.stream_id)
    kind = _EVENTS.get(type(event))
    if kind is None:
        return None
    translated: aioquic_events.QuicEvent = kind(
        *(getattr(event, field.name) for field in dataclasses.fields(event))
    )
    return translated


def _names() -> tuple[bool, bool]:
    """Whether this qh3 has the names read to tell 0-RTT bytes from 1-RTT ones, and those
    that carry address-validation tokens (checked once, on an object of its own making)."""
    try:
        from qh3.quic.configuration import QuicConfiguration

        probe = QuicConnection(configuration=QuicConfiguration(is_client=True))
        state = probe.__dict__
        core = all(
            hasattr(QuicConnectionCore, name) for name in ("send_key_phase", "get_send_buffer_size")
        )
        zero_rtt = core and state.get("_early_data_attempted") is False and "_core" in state
        tokens = state.get("_peer_token") == b"" and hasattr(
            QuicConnectionCore, "set_initial_token"
        )
    except Exception:
        return False, False
    return zero_rtt, tokens


_ZERO_RTT_NAMES, _TOKEN_NAMES = _names()
#: Whether qh3's core can be told to discard a packet number space's keys (qh3 calls it
#: itself for the 0-RTT keys); else the Initial keys go when qh3 discards them.
_DISCARDS_KEYS = hasattr(QuicConnectionCore, "discard_keys")
#: Whether the ClientHello can be read as qh3 hands it to its core, and given again: its
#: TLS bridge's queue of CRYPTO data and its core's ``send_crypto`` (else probes are qh3's).
_HELLO_NAMES = hasattr(QuicConnectionCore, "send_crypto") and hasattr(QuicConnection, "_drain_tls")


class CheckedQuicConnection(HandshakeChecks, QuicConnection):
    """A client ``QuicConnection`` of qh3's whose server is checked by the client's TLS
    context, handing on aioquic's events; see the module docstring."""

    _library = "qh3"
    #: qh3 acknowledges at once what each round took (``acks.py``, "During a download").
    delays_acks = False

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
        host = configuration.server_name
        if _is_address(configuration.server_name):
            configuration.server_name = None  # (the module docstring: no SNI for an address)
        super().__init__(configuration=configuration, session_ticket_handler=session_ticket_handler)
        self._trust_start(trust, host)
        self._token_out = token if _TOKEN_NAMES else b""
        self._token_handler = token_handler if _TOKEN_NAMES else None
        #: Bytes handed to each stream so far (0-RTT evidence, an upload's progress).
        self._handed: dict[int, int] = {}
        #: Streams beyond the server's limit, in order, with what was handed to them.
        self._held: dict[int, _Held] = {}
        #: Resets asked for, not yet handed to qh3.
        self._resets: list[tuple[int, int]] = []
        #: A close was asked for and its CONNECTION_CLOSE not written yet; what was due
        #: before it (the client's Finished), written as it was asked for.
        self._close_unsent = False
        #: The ClientHello's CRYPTO data (offset, bytes), given again with each probe until
        #: the ServerHello arrives (the module docstring); ``None``: not kept.
        self._hello: list[tuple[int, bytes]] | None = None
        self._hello_core: QuicConnectionCore | None = None
        self._before_close: list[tuple[bytes, NetworkAddress]] = []
        #: The latest time QUIC was given.
        self._now = 0.0
        #: Whether :meth:`sends_zero_rtt` and :meth:`stream_written` can be read here (else
        #: nothing goes early on this connection).
        self.zero_rtt_visible = _ZERO_RTT_NAMES

    # --- qh3's, with the client's checks --------------------------------------------------------

    def connect(self, addr: NetworkAddress, now: float) -> None:
        """qh3's; the address-validation token given is in the first Initial packet. A
        session ticket qh3 cannot offer (the module docstring) is left out: the connection
        then starts afresh, with a full handshake."""
        try:
            super().connect(addr, now)
        except BufferWriteError:
            configuration = self._configuration
            written = self.__dict__.get("_pre_handshake_writes")
            if configuration.session_ticket is None or not isinstance(written, list):
                raise
            # What HTTP/3 wrote so far (its control and QPACK streams) is written again into
            # the fresh state, in order: the stream ids stay those HTTP/3 was given.
            configuration.session_ticket = None
            QuicConnection.__init__(
                self,
                configuration=configuration,
                session_ticket_handler=self._session_ticket_handler,
            )
            for stream_id, data, end in written:
                QuicConnection.send_stream_data(self, stream_id, data, end)
            super().connect(addr, now)
        core = self._core
        if self._token_out and core is not None:
            core.set_initial_token(self._token_out)

    def close(
        self,
        error_code: int = QuicErrorCode.NO_ERROR,
        frame_type: int | None = None,
        reason_phrase: str = "",
    ) -> None:
        """qh3's; the first close asked for is kept in :attr:`close_asked`."""
        if self.close_asked is None:
            self.close_asked = (error_code, frame_type, reason_phrase)
        if self._core is not None and self._close_event is None:
            self._close_unsent = True
            if (
                self._handshake_complete
                and not self._handshake_confirmed
                and not self._trust_refused
            ):
                self._before_close = self._poll(self._now)
        super().close(error_code=error_code, frame_type=frame_type, reason_phrase=reason_phrase)

    def handle_timer(self, now: float) -> None:
        """qh3's, but not before a close asked for was written, and with the whole ClientHello
        in the probes of a first flight that had no answer (the module docstring)."""
        self._now = now
        if self._close_unsent:
            return
        if self._hello:
            self._probe_hello(now)
        super().handle_timer(now)

    def _drain_tls(self) -> None:
        """qh3's; the ClientHello's CRYPTO data is kept as qh3 hands it to its core (again
        for a new core: after a Retry or a version negotiation, a new ClientHello)."""
        if _HELLO_NAMES and not self._handshake_complete and self._core is not self._hello_core:
            outbound = getattr(self._tls, "_outbound", None)
            if outbound:
                self._hello_core = self._core
                initial = [c for c in outbound if int(c.epoch) == _INITIAL]
                self._hello = [(c.offset, bytes(c.data)) for c in initial]
        super()._drain_tls()

    def _probe_hello(self, now: float) -> None:
        """Before a loss-recovery timeout while the ServerHello has not arrived: the
        ClientHello given to qh3's core again, so that its probes carry all of it (the
        server ignores what it has already)."""
        core = self._core
        if core is None or core is not self._hello_core or self._server_hello_read():
            self._hello = []  # (qh3 probes as it does from now on)
            return
        timer = core.get_timer()
        if timer is not None and timer[0] == "loss_detection" and now >= timer[1]:
            for offset, data in self._hello or ():
                core.send_crypto(_INITIAL, offset, data)

    def _server_hello_read(self) -> bool:
        """Whether the server's ServerHello arrived (its TLS state is past waiting for it)."""
        state = getattr(getattr(self.tls, "state", None), "name", None)
        return state != "CLIENT_EXPECT_SERVER_HELLO"

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, NetworkAddress]]:
        """qh3's, after handing it the streams the server's limit now allows; during a
        handshake that sent early data, a probe qh3 cannot encrypt yet is left out (the module
        docstring)."""
        self._now = now
        if self._held:
            self._release()
        datagrams = self._poll(now)
        if self._resets:
            resets, self._resets = self._resets, []
            for stream_id, error_code in resets:
                try:
                    super().reset_stream(stream_id, error_code)
                except (ValueError, QuicConnectionError):
                    pass  # (qh3 forgot a stream that ended both ways: nothing is left to end)
            datagrams += self._poll(now)
        if self._before_close:
            datagrams[:0], self._before_close = self._before_close, []
        if datagrams:
            self._close_unsent = False
        return datagrams

    def _poll(self, now: float) -> list[tuple[bytes, NetworkAddress]]:
        """What qh3's core has to send now (qh3's own loop, but for a failed probe of early
        data: the module docstring)."""
        core = self._core
        if core is None or self._quic_logger is not None:
            return super().datagrams_to_send(now)
        datagrams: list[tuple[bytes, NetworkAddress]] = []
        while True:
            try:
                transmit = core.poll_transmit(now)
            except RuntimeError as exc:
                if not self._early_probe_failed(exc):
                    raise QuicConnectionError(QuicErrorCode.INTERNAL_ERROR, None, str(exc)) from exc
                return datagrams
            if transmit is None:
                return datagrams
            datagrams.append((transmit[0], transmit[1]))

    def _early_probe_failed(self, exc: RuntimeError) -> bool:
        """Whether ``exc`` is qh3 failing to write a probe of early data in a 1-RTT packet
        before it has the 1-RTT key."""
        return (
            not self._handshake_complete
            and bool(self._early_data_attempted)
            and _NO_ONE_RTT_KEY in str(exc)
        )

    def receive_datagram(self, data: bytes, addr: NetworkAddress, now: float) -> None:
        """qh3's, then the checks of the handshake's progress and a new token. Raises
        :class:`~shims.HandshakeRefused` (the connection closed with an alert) on a refusal."""
        self._now = now
        super().receive_datagram(data, addr, now)
        if not self._trust_settled and not self._trust_refused:
            self._check_handshake()
            if self._trust_settled and self._core is not None and _DISCARDS_KEYS:
                self._core.discard_keys(_INITIAL)  # (the module docstring: the Initial keys)
        if self._token_handler is not None and self._peer_token:
            self._new_token()

    def receive_datagrams(self, datagrams: list[bytes], addr: NetworkAddress, now: float) -> None:
        """:meth:`receive_datagram` for each of ``datagrams`` (all from ``addr``); once the
        handshake is past every check, all of them in one call of qh3's core."""
        if not self._trust_settled:
            for data in datagrams:
                self.receive_datagram(data, addr, now)
            return
        self._now = now
        self.receive_many_datagrams(datagrams, addr, now)
        if self._token_handler is not None and self._peer_token:
            self._new_token()

    def next_event(self) -> Any:
        """qh3's next event as aioquic's class; none once the client refused the server."""
        if self._trust_refused:
            return None
        while True:
            event = super().next_event()
            if event is None:
                return None
            translated = translate(event)
            if translated is not None:
                return translated

    def send_stream_data(self, stream_id: int, data: Any, end_stream: bool = False) -> None:
        """qh3's; the bytes handed are counted per stream, and held for a stream beyond the
        server's limit. An empty write that ends nothing, on a stream written before, is
        nothing to hand (aioquic's HTTP/3 makes one per request head, on its QPACK encoder
        stream, when the server allows no dynamic table): qh3 is not called."""
        if not end_stream and not data and stream_id in self._handed:
            return
        held = self._held.get(stream_id)
        if held is None and stream_id not in self._handed and self._beyond_limit(stream_id):
            held = self._held[stream_id] = _Held()
            self._record_local_stream(stream_id)  # (the next stream's id moves on, as in qh3)
        if held is not None:
            if held.reset is None:
                held.data.append((bytes(data), end_stream))
        else:
            super().send_stream_data(stream_id, data, end_stream)
        self._handed[stream_id] = self._handed.get(stream_id, 0) + len(data)

    def reset_stream(self, stream_id: int, error_code: int) -> None:
        """qh3's, handed to it once what is queued (a STOP_SENDING asked for beside it) has
        been written (the module docstring); a held stream drops what it held (its request
        never leaves) and is reset once the limit allows."""
        held = self._held.get(stream_id)
        if held is not None:
            held.data.clear()
            held.reset = error_code
        else:
            self._resets.append((stream_id, error_code))

    def stop_stream(self, stream_id: int, error_code: int) -> None:
        """qh3's; for a held stream, once the limit allows it."""
        held = self._held.get(stream_id)
        if held is None:
            return super().stop_stream(stream_id, error_code)
        held.stop = error_code

    def get_peer_address(self) -> NetworkAddress | None:
        """Where datagrams go now (qh3's core's active path)."""
        core = self._core
        return None if core is None else core.active_path[2]

    # --- what the driver reads ------------------------------------------------------------------

    def sends_zero_rtt(self) -> bool:
        """Whether the stream bytes QUIC writes into packets now go in 0-RTT ones: the 0-RTT
        key is installed and the 1-RTT send key is not yet (RFC 9001 §4.9.3)."""
        if not self.zero_rtt_visible:
            return False
        core = self._core
        return (
            bool(self._early_data_attempted) and core is not None and (core.send_key_phase is None)
        )

    def acknowledge_with_next(self, now: float) -> None:
        """Nothing: qh3's core puts the acknowledgement it owes in the next packet it writes."""

    def owes_only_an_ack(self, now: float) -> bool:
        """Whether all QUIC would send at ``now`` is the acknowledgement of 1-RTT packets it
        owes (``acks.py`` may then hold it for the next request): its core's next timer is
        that acknowledgement's, due; no stream byte is queued (``get_send_buffer_size``,
        public); and nothing of this class's own waits to be handed to qh3 (a held stream, a
        reset, a close). The core's timer names its kind (``"ack_application"``) and keeps
        whole nanoseconds (:data:`_TICK`); read where it is not a ``(kind, time)`` pair, the
        answer is no (sent at once, as before)."""
        core = self._core
        if core is None or self._held or self._resets or self._close_unsent:
            return False
        timer = core.get_timer()
        if not (isinstance(timer, tuple) and len(timer) == 2):
            return False
        kind, due = timer
        return kind == _ACK_TIMER and due <= now + _TICK and core.get_send_buffer_size() == 0

    def stream_written(self, stream_id: int) -> int:
        """How many bytes of stream ``stream_id`` QUIC has written into packets so far: those
        handed less those still queued for their first transmission. 0 for a stream it does
        not have."""
        if not self.zero_rtt_visible:
            return 0
        return self.stream_offsets(stream_id)[0]

    def stream_offsets(self, stream_id: int) -> tuple[int, int]:
        """``(sent, handed)``: the bytes of ``stream_id`` QUIC has written into packets, and
        those handed to it (qh3 shows no acknowledged offset: the module docstring)."""
        handed = self._handed.get(stream_id, 0)
        if handed == 0:
            return 0, 0
        if stream_id in self._held:
            return 0, handed
        return handed - self.get_send_buffer_size(stream_id), handed

    def peer_max_streams(self) -> int | None:
        """The server's limit on request streams (its transport parameter), once known."""
        limit = self.max_concurrent_bidi_streams
        return limit if limit > 0 else None

    def forget_stream(self, stream_id: int) -> None:
        """The client is done with ``stream_id``: what was noted of it goes."""
        self._handed.pop(stream_id, None)

    # --- streams beyond the server's limit ------------------------------------------------------

    def _beyond_limit(self, stream_id: int) -> bool:
        """Whether ``stream_id`` is a request stream the server's limit does not allow yet
        (known once the handshake completed)."""
        core = self._core
        return (
            stream_id & 3 == 0
            and self._handshake_complete
            and core is not None
            and stream_id // 4 >= core.stream_limits[0]
        )

    def _release(self) -> None:
        """Hand qh3 the held streams the server's limit now allows, in order."""
        held = self._held
        while held:
            stream_id = next(iter(held))
            if self._beyond_limit(stream_id):
                return
            stream = held.pop(stream_id)
            if stream.reset is not None:
                super().reset_stream(stream_id, stream.reset)
            for data, end in stream.data:
                super().send_stream_data(stream_id, data, end)
            if stream.stop is not None:
                super().stop_stream(stream_id, stream.stop)

    # --- the checks -----------------------------------------------------------------------------

    def _new_token(self) -> None:
        token, self._peer_token = self._peer_token, b""
        assert self._token_handler is not None
        self._token_handler(token)

    def _der(self, leaf: Any, chain: list[Any]) -> list[bytes] | None:
        """qh3's certificate objects give their DER with ``public_bytes()``."""
        if leaf is None:
            return None
        return [bytes(certificate.public_bytes()) for certificate in [leaf, *chain]]


@dataclasses.dataclass(slots=True)
class _Held:
    """A stream beyond the server's limit: what was handed to it, and its reset or STOP_SENDING
    asked for, until the limit allows it."""

    data: list[tuple[bytes, bool]] = dataclasses.field(default_factory=list)
    reset: int | None = None
    stop: int | None = None


def _is_address(name: str | None) -> bool:
    """Whether ``name`` is an IP address (written as one)."""
    try:
        ipaddress.ip_address(name or "")
    except ValueError:
        return False
    return True
