"""qh3's QUIC connection as the client runs it (``shims_qh3.py``): what it works around in
qh3 2.1, each against an aioquic server connection in memory (datagrams handed over in an
order the test chooses, on a clock the test advances; no socket, no task). The same client
runs every HTTP/3 suite with ``TRIO_RETRY_QUIC=qh3``; these are the cases those reach only by
luck or through a server's log."""

from __future__ import annotations

import dataclasses
import heapq
import ssl
from pathlib import Path

import pytest
import trustme
from aioquic.buffer import Buffer
from aioquic.h3.connection import H3_ALPN
from aioquic.quic import events as aioquic_events
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection, QuicConnectionState
from aioquic.quic.packet import pull_quic_header

from trio_retry._wire.http3 import backend

if backend.NAME != "qh3":  # (the configuration the connector builds is the backend's)
    pytest.skip("the client runs on aioquic's QUIC here", allow_module_level=True)

from qh3.quic import events as qh3_events

from tests.wire.test_h3_zero_rtt import pki as pki  # (the same certificates, module-wide)
from trio_retry._wire.http3.quic import TicketStore, quic_trust
from trio_retry._wire.http3.shims_qh3 import CheckedQuicConnection, translate

CLIENT = ("127.0.0.1", 40000)
SERVER = ("127.0.0.1", 443)


class Pair:
    """The client (qh3's, as the connector builds it) and an aioquic server connection."""

    def __init__(
        self,
        pki: tuple[trustme.CA, Path, Path],
        tickets: TicketStore,
        *,
        server_streams: int = 128,
        token: bytes = b"",
    ) -> None:
        ca, chain, key = pki
        context = ssl.create_default_context()
        ca.configure_trust(context)
        trust = quic_trust(context, None, owns_context=True)
        from trio_retry._wire.http3.quic import quic_configuration

        self.server_config = QuicConfiguration(is_client=False, alpn_protocols=list(H3_ALPN))
        self.server_config.load_cert_chain(chain, key)
        self.server_streams = server_streams
        self.server_tickets: dict[bytes, object] = {}
        self.client = CheckedQuicConnection(
            configuration=quic_configuration(trust, "localhost", tickets.take(SERVER)),
            trust=trust,
            session_ticket_handler=lambda t: tickets.keep(SERVER, t),
            token=token,
        )
        self.now = 1.0
        self.client.connect(SERVER, now=self.now)
        self._server: QuicConnection | None = None
        self.server_events: list[aioquic_events.QuicEvent] = []
        self.first_datagram = b""

    @property
    def server(self) -> QuicConnection:
        assert self._server is not None
        return self._server

    def to_server(self, *, drop: bool = False) -> int:
        datagrams = self.client.datagrams_to_send(now=self.now)
        for data, _ in datagrams:
            self.serve(data, drop=drop)
        self.server_read()
        return len(datagrams)

    def serve(self, data: bytes, *, drop: bool = False) -> None:
        """One datagram of the client's (the server made by the first, dropped or not)."""
        if self._server is None:
            self.first_datagram = data
            header = pull_quic_header(Buffer(data=data), host_cid_length=8)
            self._server = QuicConnection(
                configuration=self.server_config,
                original_destination_connection_id=header.destination_cid,
                session_ticket_fetcher=self.server_tickets.get,  # type: ignore[arg-type]
                session_ticket_handler=lambda t: self.server_tickets.__setitem__(t.ticket, t),
            )
            limit = self._server._local_max_streams_bidi  # (its transport parameter)
            limit.value = limit.sent = self.server_streams
        if not drop:
            self.server.receive_datagram(data, CLIENT, now=self.now)

    def server_read(self) -> None:
        if self._server is not None:
            while (event := self.server.next_event()) is not None:
                self.server_events.append(event)

    def to_client(self) -> int:
        datagrams = self.server.datagrams_to_send(now=self.now)
        for data, _ in datagrams:
            self.client.receive_datagram(data, SERVER, now=self.now)
        return len(datagrams)

    def rounds(self, count: int = 6, step: float = 0.01) -> None:
        for _ in range(count):
            self.now += step
            self.to_server()
            self.to_client()
            while self.client.next_event() is not None:
                pass

    def received(self, stream_id: int) -> bytes:
        return b"".join(
            event.data
            for event in self.server_events
            if isinstance(event, aioquic_events.StreamDataReceived) and event.stream_id == stream_id
        )


def test_qh3_events_are_handed_on_as_aioquic_s() -> None:
    for kind, args in (
        ("StreamDataReceived", (b"data", True, 4)),
        ("StreamReset", (0x10C, 8)),
        ("StopSendingReceived", (0x10C, 8)),
        ("HandshakeCompleted", ("h3", True, True)),
        ("ConnectionTerminated", (0x100, None, "bye")),
        ("PingAcknowledged", (7,)),
    ):
        event = getattr(qh3_events, kind)(*args)
        translated = translate(event)
        assert type(translated) is getattr(aioquic_events, kind)
        assert dataclasses.astuple(translated) == dataclasses.astuple(event)  # type: ignore[arg-type]


def test_a_stream_beyond_the_server_s_limit_waits_and_then_goes(
    pki: tuple[trustme.CA, Path, Path],
) -> None:
    """qh3 refuses a stream beyond the server's MAX_STREAMS; the shim holds it, counted as
    not written, until the server allows it; one reset while held never sends its request."""
    pair = Pair(pki, TicketStore(), server_streams=2)
    pair.rounds()
    client = pair.client
    for stream_id in (0, 4, 8, 12):
        client.send_stream_data(stream_id, f"request {stream_id}".encode(), end_stream=True)
    client.reset_stream(12, 0x10C)  # (its caller gave up while it waited)
    pair.rounds(2)
    assert (pair.received(0), pair.received(4), pair.received(8)) == (
        b"request 0",
        b"request 4",
        b"",
    )
    assert client.stream_written(8) == 0
    for stream_id in (0, 4):  # the responses end both streams: the server allows two more
        pair.server.send_stream_data(stream_id, b"response", end_stream=True)
    pair.rounds(4)
    assert pair.received(8) == b"request 8"
    assert client.stream_written(8) == len(b"request 8")
    assert pair.received(12) == b""


def test_an_empty_write_that_ends_nothing_is_not_handed_to_qh3(
    pki: tuple[trustme.CA, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """aioquic's HTTP/3 writes its QPACK encoder stream's (empty) instructions with every
    request head: on a stream written before, an empty write that ends nothing reaches qh3
    no more (nothing would be sent); one that ends the stream, or opens it, does."""
    from qh3.quic.connection import QuicConnection as Qh3Connection

    pair = Pair(pki, TicketStore())
    pair.rounds()
    client = pair.client
    handed: list[tuple[int, bytes, bool]] = []
    native = Qh3Connection.send_stream_data

    def counted(self: Qh3Connection, stream_id: int, data: bytes, end: bool = False) -> None:
        handed.append((stream_id, bytes(data), end))
        native(self, stream_id, data, end)

    monkeypatch.setattr(Qh3Connection, "send_stream_data", counted)
    client.send_stream_data(0, b"request")
    client.send_stream_data(0, b"")
    client.send_stream_data(4, b"")
    client.send_stream_data(0, b"", end_stream=True)
    assert handed == [(0, b"request", False), (4, b"", False), (0, b"", True)]
    pair.rounds(2)
    assert pair.received(0) == b"request"
    ended = [e for e in pair.server_events if isinstance(e, aioquic_events.StreamDataReceived)]
    assert any(event.stream_id == 0 and event.end_stream for event in ended)


def test_a_close_after_an_idle_while_is_sent(pki: tuple[trustme.CA, Path, Path]) -> None:
    """qh3 dates its closing period from its last packet: after 0.3 s idle the period was
    over before the CONNECTION_CLOSE was written, and the timer ended the connection
    silently. The driver's order: close, the timer if due, then what there is to send."""
    pair = Pair(pki, TicketStore())
    pair.rounds()
    pair.now += 0.3
    client = pair.client
    client.close(error_code=0x100)
    timer = client.get_timer()
    if timer is not None and pair.now >= timer:
        client.handle_timer(pair.now)
    pair.to_server()
    assert pair.server._state is QuicConnectionState.DRAINING  # it received the close


def test_a_close_before_the_handshake_is_confirmed_reaches_the_server(
    pki: tuple[trustme.CA, Path, Path],
) -> None:
    """The client's handshake completed (the server's flight read), its Finished not sent
    yet, when it closes: qh3 would drop the Finished and send the close in 1-RTT only, which
    the server cannot read yet."""
    pair = Pair(pki, TicketStore())
    pair.to_server()
    pair.to_client()
    client = pair.client
    assert client._handshake_complete
    assert not client._handshake_confirmed
    client.close(error_code=0x107, reason_phrase="the server broke HTTP/3")
    pair.to_server()
    assert pair.server._state is QuicConnectionState.DRAINING
    assert pair.server._close_event is not None
    assert pair.server._close_event.error_code == 0x107


def test_the_token_given_is_in_the_first_initial(pki: tuple[trustme.CA, Path, Path]) -> None:
    pair = Pair(pki, TicketStore(), token=b"address-validation token")
    pair.to_server()
    header = pull_quic_header(Buffer(data=pair.first_datagram), host_cid_length=8)
    assert header.token == b"address-validation token"


@pytest.fixture
def tickets(pki: tuple[trustme.CA, Path, Path]) -> TicketStore:
    """A client that holds a session ticket of the server's (0-RTT allowed)."""
    tickets = TicketStore()
    first = Pair(pki, tickets)
    first.rounds()
    assert tickets.memory.recall("quic_tickets")
    return tickets


def test_a_stalled_handshake_with_early_data_goes_on(
    pki: tuple[trustme.CA, Path, Path], tickets: TicketStore
) -> None:
    """qh3 2.1 fails to write a probe of its 0-RTT data before it has the 1-RTT key (from its
    first loss-recovery timeout, ~1.3 s here); raised, that ended the connection. Nothing
    reaches the server for 3 s; then the path is back, and the handshake completes with the
    early request received once."""
    pair = Pair(pki, tickets)
    client = pair.client
    client.send_stream_data(0, b"GET early", end_stream=True)
    assert client.sends_zero_rtt()
    pair.to_server(drop=True)
    assert client.stream_written(0) == len(b"GET early")
    while pair.now < 4.0:
        timer = client.get_timer()
        assert timer is not None
        pair.now = max(pair.now, timer)
        client.handle_timer(pair.now)
        pair.to_server(drop=pair.now < 3.0)  # (never raises)
    pair.to_client()
    pair.rounds(4)
    assert client._handshake_complete
    assert pair.received(0) == b"GET early"


def test_a_ticket_too_large_for_qh3_s_client_hello_is_left_out(
    pki: tuple[trustme.CA, Path, Path], tickets: TicketStore
) -> None:
    """qh3 writes a ClientHello offering a session into 2,048 bytes: a large ticket overflowed
    it and ``connect`` raised. The connection starts afresh without it: a full handshake,
    nothing early, HTTP/3's streams written before ``connect`` kept."""
    ticket = tickets.take(SERVER)
    assert ticket is not None
    tickets.keep(SERVER, dataclasses.replace(ticket, ticket=ticket.ticket + b"\0" * 1500))
    pair = Pair(pki, tickets)
    client = pair.client
    assert not client.sends_zero_rtt()
    client.send_stream_data(0, b"GET /", end_stream=True)
    pair.rounds()
    assert client._handshake_complete
    assert not client.tls.session_resumed
    assert pair.received(0) == b"GET /"


@pytest.mark.parametrize("whole", [True, False], ids=["request-whole", "request-unfinished"])
def test_a_stream_given_up_is_stopped_and_reset(
    pki: tuple[trustme.CA, Path, Path], whole: bool
) -> None:
    """The driver resets a stream it gives up and stops its reading (RESET_STREAM, then
    STOP_SENDING): qh3 dropped the STOP_SENDING when a reset of the same stream followed it
    unwritten, so the server went on sending."""
    pair = Pair(pki, TicketStore())
    pair.rounds()
    client = pair.client
    client.send_stream_data(0, b"POST /upload", end_stream=whole)
    pair.rounds(2)
    pair.server.send_stream_data(0, b"x" * 3000)
    pair.to_client()
    client.reset_stream(0, 0x10C)
    client.stop_stream(0, 0x10C)
    pair.to_server()
    ends = {
        (type(event).__name__, event.error_code)
        for event in pair.server_events
        if isinstance(event, (aioquic_events.StopSendingReceived, aioquic_events.StreamReset))
    }
    assert ("StopSendingReceived", 0x10C) in ends
    if not whole:  # (aioquic's server reports no reset of a stream it has whole)
        assert ("StreamReset", 0x10C) in ends


def test_a_server_s_close_is_noted_at_debug_not_warning(
    pki: tuple[trustme.CA, Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """qh3 notes a server's CONNECTION_CLOSE at WARNING on the ``quic`` logger, which a
    program with no logging configured printed on stderr at every ordinary close: it goes on
    at DEBUG."""
    caplog.set_level("DEBUG", logger="quic")
    pair = Pair(pki, TicketStore())
    pair.rounds()
    pair.server.close(error_code=0x100, reason_phrase="done")  # H3_NO_ERROR
    pair.to_client()
    notes = [r for r in caplog.records if r.name == "quic" and "peer close" in r.getMessage()]
    assert notes, caplog.records  # (qh3 2.1 notes it: if that changes, so may this filter)
    assert {r.levelname for r in notes} == {"DEBUG"}
    assert not [r for r in caplog.records if r.name == "quic" and r.levelno >= 30]


def test_a_handshake_completed_behind_its_own_initial_packets_goes_on(
    pki: tuple[trustme.CA, Path, Path], tickets: TicketStore
) -> None:
    """Handshake loss on a link of 10 ms each way (a 0-RTT attempt; 5 of the client's first
    12 datagrams lost, 4 of the server's first 8): the ClientHello's losses collapse qh3's
    congestion window to two packets, and the Initial packets the client writes as the
    server's flight completes its handshake fill it. qh3 2.1 then sent nothing more (not
    its Finished, not an ACK, no probe: its loss-recovery timer fired 9 times, then the idle
    timeout), and the server never completed its handshake. The shim discards the Initial
    keys as the handshake completes: those packets leave the window, the Finished goes and
    the request is answered at once. (The pattern is one a seeded walk of 30 % handshake
    loss found: 1 connection of 180 stalled so.)"""
    pair = Pair(pki, tickets)
    client = pair.client
    client.send_stream_data(0, b"GET", end_stream=True)
    queue: list[tuple[float, int, str, bytes]] = []  # (due, order, way, datagram)
    lost = {"to_server": {0, 3, 4, 6, 11}, "to_client": {0, 1, 2, 4}}
    numbered = {"to_server": 0, "to_client": 0}

    def send(way: str, datagrams: list[tuple[bytes, object]]) -> None:
        for data, _ in datagrams:
            number = numbered[way]
            numbered[way] += 1
            if number not in lost[way]:
                heapq.heappush(queue, (pair.now + 0.01, sum(numbered.values()), way, data))

    answered = b""
    for _ in range(1000):  # (rounds of the link; its clock stops at 30 s)
        if pair.now >= 30.0 or answered == b"OK":
            break
        send("to_server", client.datagrams_to_send(now=pair.now))
        if pair._server is not None:
            send("to_client", pair.server.datagrams_to_send(now=pair.now))
            pair.server_read()
            for event in pair.server_events:
                if isinstance(event, aioquic_events.StreamDataReceived) and event.end_stream:
                    pair.server.send_stream_data(event.stream_id, b"OK", end_stream=True)
            pair.server_events.clear()
        while (event := client.next_event()) is not None:
            if isinstance(event, aioquic_events.StreamDataReceived):
                answered += event.data
        timers = [client.get_timer(), pair._server and pair._server.get_timer()]
        due = [t for t in timers if t] + ([queue[0][0]] if queue else [])
        pair.now = max(pair.now, min(due))
        while queue and queue[0][0] <= pair.now:
            _, _, way, data = heapq.heappop(queue)
            if way == "to_server":
                pair.serve(data)
            else:
                client.receive_datagram(data, SERVER, now=pair.now)
        for connection in (client, pair._server):
            timer = connection and connection.get_timer()
            if timer is not None and pair.now >= timer:
                connection.handle_timer(pair.now)
    assert client._handshake_complete
    assert pair.server._handshake_complete, "the server never got the client's Finished"
    assert answered == b"OK"
    assert pair.now < 8.0  # (the server's flight arrived at 7.0 s)


def test_a_first_flight_s_probes_carry_the_whole_client_hello(
    pki: tuple[trustme.CA, Path, Path],
) -> None:
    """The ClientHello takes two datagrams (qh3's post-quantum key share). Both lost, qh3 2.1
    probed with the first half and a PING-only Initial: the second half never went again
    until the server acknowledged something, and the PING alone, the first packet an aioquic
    server received, made it refuse the connection ("Packet contains no CRYPTO frame"). The
    shim gives the ClientHello to qh3's core again before each such probe: with the probes'
    first datagram lost too, the server reads the whole ClientHello from the others and
    answers, and the handshake completes."""
    pair = Pair(pki, TicketStore())
    client = pair.client
    assert pair.to_server(drop=True) == 2
    timer = client.get_timer()
    assert timer is not None
    pair.now = timer
    client.handle_timer(pair.now)
    probes = client.datagrams_to_send(now=pair.now)
    for number, (data, _) in enumerate(probes):
        pair.serve(data, drop=number == 0)
    pair.server_read()
    assert pair.server._close_event is None
    pair.to_client()
    assert client._handshake_complete


def test_a_client_hello_half_lost_twice_is_probed_until_the_server_hello(
    pki: tuple[trustme.CA, Path, Path], tickets: TicketStore
) -> None:
    """With early data: the ClientHello's second datagram lost, the server's ACK shows it,
    and qh3 2.1 sends that half once more (lost too); its later probes (0-RTT ones among
    them) never carried it again, so the server never had the whole ClientHello and the
    handshake stalled until a limit. The shim's probes carry all of it until the
    ServerHello arrives, not only until the server's first packet."""
    pair = Pair(pki, tickets)
    client = pair.client
    client.send_stream_data(0, b"GET early", end_stream=True)
    first = client.datagrams_to_send(now=pair.now)
    assert len(first) == 3  # (the ClientHello's two, a 0-RTT packet)
    pair.serve(first[0][0])
    pair.serve(first[1][0], drop=True)
    pair.now += 0.01
    assert pair.to_client() >= 1  # (the server's ACK of the first half)
    for _ in range(3):  # the half sent again and the next two probes lost
        pair.to_server(drop=True)
        timer = client.get_timer()
        assert timer is not None
        pair.now = max(pair.now, timer)
        client.handle_timer(pair.now)
    pair.to_server()
    pair.now += 0.01
    pair.to_client()
    assert client._handshake_complete
