"""Which packets carried a stream's bytes, as the client's ``CheckedQuicConnection`` reads it
from the QUIC library in use (``backend.py``: qh3 or aioquic, ``TRIO_RETRY_QUIC``; SPEC §16:
``Attempt.early_data`` is ``"accepted"`` only for a request whose bytes really went in 0-RTT
packets).

Sans-IO: the client's QUIC connection (built as the connector builds it) and an aioquic
server connection hand datagrams to each other in memory, in an order the test chooses, on
a clock the test advances; no socket, no task.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trustme
from aioquic.buffer import Buffer
from aioquic.h3.connection import H3_ALPN
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import HandshakeCompleted, QuicEvent, StreamDataReceived
from aioquic.quic.packet import pull_quic_header
from aioquic.tls import SessionTicket

from trio_retry._wire.http3 import backend
from trio_retry._wire.http3.backend import CheckedQuicConnection
from trio_retry._wire.http3.quic import TicketStore, quic_configuration, quic_trust

CLIENT = ("127.0.0.1", 40000)
SERVER = ("127.0.0.1", 443)


class Pair:
    """A client and a server QUIC connection, and the datagrams between them (the server's
    made from the client's first datagram, as a server endpoint makes it)."""

    def __init__(
        self, client: CheckedQuicConnection, server: Callable[[bytes], QuicConnection]
    ) -> None:
        self.client = client
        self._make_server = server
        self._server: QuicConnection | None = None
        self.now = 0.0
        self.server_events: list[QuicEvent] = []

    @property
    def server(self) -> QuicConnection:
        assert self._server is not None, "the client sent nothing yet"
        return self._server

    def to_server(self) -> int:
        """Everything the client has to send, delivered; how many datagrams."""
        datagrams = self.client.datagrams_to_send(now=self.now)
        for data, _ in datagrams:
            if self._server is None:
                header = pull_quic_header(Buffer(data=data), host_cid_length=8)
                self._server = self._make_server(header.destination_cid)
            self.server.receive_datagram(data, CLIENT, now=self.now)
        while (event := self.server.next_event()) is not None:
            self.server_events.append(event)
        return len(datagrams)

    def to_client(self) -> int:
        datagrams = self.server.datagrams_to_send(now=self.now)
        for data, _ in datagrams:
            self.client.receive_datagram(data, SERVER, now=self.now)
        return len(datagrams)

    def handshake(self) -> None:
        """Datagrams both ways until the client's handshake completed (a few rounds)."""
        for _ in range(10):
            self.now += 0.01
            self.to_server()
            self.to_client()
            if any(isinstance(e, HandshakeCompleted) for e in self.client_events()):
                return
        raise AssertionError("the handshake did not complete in 10 rounds")

    def client_events(self) -> Iterator[QuicEvent]:
        while (event := self.client.next_event()) is not None:
            yield event

    def early_streams(self) -> set[int]:
        """Request streams the server received data for before its handshake completed."""
        early: set[int] = set()
        for event in self.server_events:
            if isinstance(event, HandshakeCompleted):
                break
            if isinstance(event, StreamDataReceived) and event.stream_id % 4 == 0:
                early.add(event.stream_id)
        return early


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[trustme.CA, Path, Path]:
    ca = trustme.CA()
    cert = ca.issue_cert("localhost")
    directory = tmp_path_factory.mktemp("pki")
    chain, key = directory / "chain.pem", directory / "key.pem"
    chain.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    key.write_bytes(cert.private_key_pem.bytes())
    return ca, chain, key


class Endpoints:
    """Connections to one server that keeps its tickets, from one client keeping its own."""

    def __init__(self, pki: tuple[trustme.CA, Path, Path]) -> None:
        ca, self.chain, self.key = pki
        context = ssl.create_default_context()
        ca.configure_trust(context)
        self.trust = quic_trust(context, None, owns_context=True)
        self.client_tickets = TicketStore()
        self.server_tickets: dict[bytes, SessionTicket] = {}

    def pair(self) -> Pair:
        server_config = QuicConfiguration(is_client=False, alpn_protocols=list(H3_ALPN))
        server_config.load_cert_chain(self.chain, self.key)

        def server(original_destination: bytes) -> QuicConnection:
            return QuicConnection(
                configuration=server_config,
                original_destination_connection_id=original_destination,
                session_ticket_fetcher=lambda label: self.server_tickets.pop(label, None),
                session_ticket_handler=lambda t: self.server_tickets.__setitem__(t.ticket, t),
            )

        ticket = self.client_tickets.take(SERVER)
        client = CheckedQuicConnection(
            configuration=quic_configuration(self.trust, "localhost", ticket),
            trust=self.trust,
            session_ticket_handler=lambda t: self.client_tickets.keep(SERVER, t),
        )
        client.connect(SERVER, now=0.0)
        return Pair(client, server)


@pytest.fixture
def endpoints(pki: tuple[trustme.CA, Path, Path]) -> Endpoints:
    endpoints = Endpoints(pki)
    first = endpoints.pair()
    assert first.client.zero_rtt_visible
    assert not first.client.sends_zero_rtt()  # no ticket: nothing can go early
    first.handshake()
    first.to_server()  # (the client's Finished; the server then issues its ticket)
    first.to_client()
    assert endpoints.client_tickets.memory.recall("quic_tickets"), "the server issued no ticket"
    return endpoints


def test_bytes_handed_before_the_first_flight_go_in_0rtt(endpoints: Endpoints) -> None:
    pair = endpoints.pair()
    client = pair.client
    assert client.sends_zero_rtt()
    client.send_stream_data(0, b"GET / early", end_stream=True)
    assert client.stream_written(0) == 0  # handed, not yet in a packet
    pair.to_server()
    assert client.stream_written(0) == len(b"GET / early")
    assert client.sends_zero_rtt()  # still: what it wrote went in 0-RTT packets
    assert pair.early_streams() == {0}  # and the server says so
    pair.handshake()
    assert not client.sends_zero_rtt()


def test_bytes_written_after_the_handshake_go_in_1rtt(endpoints: Endpoints) -> None:
    pair = endpoints.pair()
    client = pair.client
    pair.to_server()  # the first flight, without the request
    client.send_stream_data(0, b"GET / late", end_stream=True)
    pair.to_client()  # the server's answer completes the handshake before the client sends
    assert not client.sends_zero_rtt()
    pair.now += 0.01
    pair.to_server()
    assert client.stream_written(0) == len(b"GET / late")
    assert pair.early_streams() == set()


def test_a_stream_never_opened_has_written_nothing(endpoints: Endpoints) -> None:
    assert endpoints.pair().client.stream_written(8) == 0


def test_a_streams_offsets_say_what_was_handed_and_what_acknowledged(
    endpoints: Endpoints,
) -> None:
    """``stream_offsets`` (an upload's pacing and its bytes sent, ``sending.py``): bytes handed
    to QUIC count at once, and as acknowledged once the server's acknowledgement arrives; a
    stream never opened, or a sender without aioquic's names, reads ``(0, 0)``."""
    pair = endpoints.pair()
    pair.handshake()
    _settle(pair)
    client = pair.client
    client.send_stream_data(0, b"x" * 5000)
    assert client.stream_offsets(0) == (0, 5000)
    _settle(pair)
    assert client.stream_offsets(0) == (5000, 5000)
    assert client.stream_offsets(8) == (0, 0)
    if backend.NAME == "aioquic":  # (qh3's first figure is what was sent: shims_qh3.py)
        del client._streams[0].sender._buffer_start
        assert client.stream_offsets(0) == (0, 0)


def _settle(pair: Pair) -> None:
    """Datagrams both ways, the clock past every delay, until neither side has any to send."""
    for _ in range(10):
        pair.now += 0.05
        if pair.to_server() + pair.to_client() == 0:
            return
    raise AssertionError("the connection did not settle in 10 rounds")


@pytest.mark.parametrize("with_next", [True, False], ids=["rides", "own-packet"])
def test_an_acknowledgement_due_later_rides_in_the_next_packet(
    endpoints: Endpoints, with_next: bool
) -> None:
    """A response arrives; the next request is handed before the acknowledgement delay runs
    out. With ``acknowledge_with_next`` the acknowledgement goes in the request's packet and
    nothing is left to send once the delay is over; without it, over aioquic, a packet of its
    own follows (the driver's flush asks for the first: one datagram per sequential request).
    qh3 puts the acknowledgement it owes in the next packet by itself."""
    pair = endpoints.pair()
    pair.handshake()
    _settle(pair)
    client = pair.client
    client.send_stream_data(0, b"GET /first", end_stream=True)
    assert pair.to_server() == 1
    pair.server.send_stream_data(0, b"the response", end_stream=True)
    assert pair.to_client() == 1  # (ack-eliciting: the client owes an acknowledgement)
    client.send_stream_data(4, b"GET /next", end_stream=True)
    if with_next:
        client.acknowledge_with_next(pair.now)
    assert pair.to_server() == 1
    later = client.datagrams_to_send(now=pair.now + 0.01)  # (past aioquic's 1 ms delay)
    assert len(later) == (0 if with_next or backend.NAME == "qh3" else 1)
