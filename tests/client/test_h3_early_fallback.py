"""HTTP/3's fallback to TCP when early data is on (SPEC §16, issue #39 item 5).

- The handshake limit (``min(tls, 3 s)``) bounds every request waiting on a handshake, early
  or not, and counts from the connection's start: a request that joins a connection whose
  handshake is stuck falls back when that connection's limit runs out, not a limit after it
  joined; the connection then takes no new request, and the origin goes over TCP while the
  handshake goes on in the background (pending).
- A handshake that ends (ICMP port unreachable) after early data was sent marks the origin
  broken like any failed handshake. Either way the request goes over TCP, not on a second QUIC
  connection, within the same attempt (uncounted: the engine's essay, rule 1 of "not
  consulted"), and its trail keeps the early try with true evidence: ``"unconfirmed"`` early
  data, ``SENT_NO_RESPONSE`` (it may have run).
- Every QUIC try in a trail says ``HTTP/3``, also for the calls that waited for a connection
  another call was opening.

FaultServer(http3=True) sits behind a UDP relay (tests/support/udp_relay.py) that blackholes
or stops taking UDP (the port then answers ICMP unreachable) and pipes TCP to the server's own
port, so the fallback finds the same server; the server's record counts what ran and over
which protocol. QUIC's timers run on the run's clock, so these tests use the real clock (an
autojumping MockClock would fire them while a datagram is in flight); every wait is bounded by
``trio.fail_after``, and each time asserted has a margin of a second for a loaded machine.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import trio
from aioquic.buffer import Buffer
from aioquic.quic.packet import QuicPacketType, pull_quic_header

from tests.support.udp_relay import Faults, UdpRelay
from trio_retry import (
    Attempt,
    Client,
    DeadlineExceeded,
    Evidence,
    FailureCategory,
    Response,
    RetryPolicy,
    StageTimeouts,
    Upstream,
)
from trio_retry._wire.http3 import backend
from trio_retry.testing import FaultServer, Respond

#: The handshake limit of these tests (``StageTimeouts(tls=...)``, below the 3 s cap).
LIMIT = 1.0
#: What a loaded machine may add to a time asserted.
SLACK = 1.0
#: Far beyond LIMIT + SLACK: without the limit, an early request would wait this long.
FIRST_BYTE = 8.0
TIMEOUTS = StageTimeouts(connect=5, tls=LIMIT, write=5, first_byte=FIRST_BYTE, read=5)


@dataclass
class Origin:
    """FaultServer, and the relay in front of it (UDP with faults, TCP piped)."""

    server: FaultServer
    relay: UdpRelay

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.relay.port}"

    def client(
        self, stage_timeouts: StageTimeouts = TIMEOUTS, keepalive_expiry: float = 0
    ) -> Client:
        """Over HTTP/3 from the first request, early data on, a new connection per request
        (each resumes the previous one's session), one attempt per call: a fallback that
        counted as an attempt would fail the call."""
        return Client(
            upstreams={self.url: Upstream(http3=True)},
            ssl_context=self.server.client_ssl_context(),
            early_data=True,
            keepalive_expiry=keepalive_expiry,
            retry=RetryPolicy(max_attempts=1),
            stage_timeouts=stage_timeouts,
        )

    def ran(self, path: str) -> list[tuple[str, bool]]:
        """How the server ran each request for `path`: (protocol, came in early data)."""
        return [(r.http_version, r.early_data) for r in self.server.requests if r.path == path]


@pytest.fixture
async def origin(nursery: trio.Nursery) -> Origin:
    server = FaultServer(tls=True, http3=True)
    await nursery.start(server.serve)
    relay = UdpRelay(("127.0.0.1", server.port), tcp=True)
    await nursery.start(relay.run)
    return Origin(server, relay)


async def warm_up(origin: Origin, client: Client) -> None:
    """One request over HTTP/3: the client now holds a session ticket that allows 0-RTT."""
    response = await client.get(f"{origin.url}/warm")
    assert (response.http_version, response.attempts[0].early_data) == ("HTTP/3", None)


def early_try_then_tcp(response: Response) -> tuple[Attempt, Attempt]:
    """The trail of a call whose early try fell back: the QUIC try, then TCP's answer."""
    quic, tcp = response.attempts
    assert (quic.http_version, quic.early_data, quic.evidence, quic.decision) == (
        "HTTP/3",
        "unconfirmed",
        Evidence.SENT_NO_RESPONSE,  # it went in 0-RTT: it may have run
        None,  # not counted: the same attempt went on over TCP
    )
    assert (tcp.http_version, tcp.evidence, tcp.status) == (
        "HTTP/2",
        Evidence.RESPONSE_RECEIVED,
        200,
    )
    assert response.http_version == "HTTP/2"
    return quic, tcp


async def test_a_blackhole_after_early_data_falls_back_within_the_handshake_limit(
    origin: Origin,
) -> None:
    finished: dict[str, float] = {}
    responses: dict[str, Response] = {}
    with trio.fail_after(30):
        async with origin.client() as client:
            await warm_up(origin, client)
            origin.relay.faults = Faults(blackhole=True)
            started = trio.current_time()

            async def get(name: str, after: float) -> None:
                await trio.sleep(after)
                responses[name] = await client.get(f"{origin.url}/{name}")
                finished[name] = trio.current_time() - started

            async with trio.open_nursery() as nursery:
                nursery.start_soon(get, "first", 0.0)
                # Joins the connection stuck in its handshake, and goes early too.
                nursery.start_soon(get, "joined", 0.6 * LIMIT)
            # The origin is pending (the handshake goes on): the next request goes over TCP.
            later = await client.get(f"{origin.url}/later")
    for name in ("first", "joined"):
        quic, _ = early_try_then_tcp(responses[name])
        assert quic.category is FailureCategory.TIMEOUT
        assert "QUIC handshake" in str(quic.error)
        assert origin.ran(f"/{name}") == [("HTTP/2", False)]  # run once, over TCP
    # Both fell back when the connection's limit ran out (LIMIT after it opened), the joined
    # one too (not LIMIT after it joined); without the limit they would wait FIRST_BYTE.
    assert LIMIT <= finished["first"] < LIMIT + SLACK
    assert finished["joined"] < LIMIT + SLACK
    assert [(a.http_version, a.evidence) for a in later.attempts] == [
        ("HTTP/2", Evidence.RESPONSE_RECEIVED)
    ]
    # Two QUIC connections in all: the warm-up's and the stuck one (no second try of QUIC).
    assert len(origin.relay.clients) == 2


async def test_a_connection_past_its_limit_serves_once_its_handshake_completes(
    origin: Origin,
) -> None:
    """The early GET goes over TCP at the limit; UDP comes back, the handshake (going on in
    the background) completes, and a later call goes over HTTP/3 on that same connection: no
    second QUIC connection."""
    relay = origin.relay
    versions: list[str | None] = []
    with trio.fail_after(30):
        async with origin.client(keepalive_expiry=30) as client:
            origin.server.route("GET", "/warm", Respond(200, close_after=True))
            await warm_up(origin, client)
            while not repr(client._rt.pool).startswith("<ConnectionPool 0 active, 0 idle"):
                await trio.sleep(0.01)  # (until the GOAWAY came and the connection closed)
            relay.faults = Faults(blackhole=True)
            first = await client.get(f"{origin.url}/first")
            relay.faults = Faults()
            for _ in range(16):  # 4 s more: QUIC's retransmissions get through meanwhile
                await trio.sleep(0.25)
                response = await client.get(f"{origin.url}/again")
                versions.append(response.http_version)
                if response.http_version == "HTTP/3":
                    break
    early_try_then_tcp(first)
    assert versions[-1] == "HTTP/3", versions
    assert len(relay.clients) == 2  # the warm-up's connection, and the one that went on
    assert origin.ran("/first") == [("HTTP/2", False)]


async def test_the_limit_is_the_connection_s_not_each_request_s(origin: Origin) -> None:
    """The call that opened the stuck connection gives up early (its caller's cancel scope;
    the connection stays in the pool); a call joining at 90 % of the limit still falls back
    when the connection's limit runs out, not a whole limit after it joined; a call after
    that finds the origin pending and goes over TCP at once."""
    limit = 2.0
    timeouts = StageTimeouts(connect=5, tls=limit, write=5, first_byte=FIRST_BYTE, read=5)
    # The warm-up's connection goes away after its response (GOAWAY): the next call opens
    # one, resuming its session with early data.
    origin.server.route("GET", "/warm", Respond(200, close_after=True))
    with trio.fail_after(30):
        async with origin.client(stage_timeouts=timeouts, keepalive_expiry=30) as client:
            await warm_up(origin, client)
            while not repr(client._rt.pool).startswith("<ConnectionPool 0 active, 0 idle"):
                await trio.sleep(0.01)  # (until the GOAWAY came and the connection closed)
            origin.relay.faults = Faults(blackhole=True)
            started = trio.current_time()
            with trio.move_on_after(0.2 * limit):
                await client.get(f"{origin.url}/opener")
            await trio.sleep_until(started + 0.9 * limit)
            joined = await client.get(f"{origin.url}/joined")
            finished = trio.current_time() - started
            later = await client.get(f"{origin.url}/later")
    if backend.NAME == "qh3" and joined.attempts[0].early_data is None:
        # qh3 writes no more early data after its first loss-recovery timeout of a stalled
        # handshake (shims_qh3.py): the request handed then never left, and says so.
        quic, _ = joined.attempts
        assert (quic.http_version, quic.evidence) == ("HTTP/3", Evidence.NOT_SENT)
    else:
        early_try_then_tcp(joined)
    # By the connection's limit (2 s), not the joined call's own (0.9 * 2 + 2 = 3.8 s).
    assert limit <= finished < limit + SLACK
    assert [a.http_version for a in later.attempts] == ["HTTP/2"]
    assert origin.ran("/joined") == [("HTTP/2", False)]
    assert origin.ran("/opener") == []


async def test_a_call_deadline_shorter_than_the_limit_ends_an_early_request(
    origin: Origin,
) -> None:
    """The call's deadline (0.3 s) ends a request waiting, early, on a stuck handshake before
    the handshake's limit does: DeadlineExceeded, its early data unconfirmed."""
    with trio.fail_after(30):
        async with origin.client() as client:
            await warm_up(origin, client)
            origin.relay.faults = Faults(blackhole=True)
            started = trio.current_time()
            with pytest.raises(DeadlineExceeded) as raised:
                await client.get(f"{origin.url}/late", deadline=0.3)
            took = trio.current_time() - started
    [quic] = raised.value.attempts
    assert (quic.http_version, quic.early_data, quic.evidence, quic.category) == (
        "HTTP/3",
        "unconfirmed",
        Evidence.SENT_NO_RESPONSE,
        FailureCategory.TIMEOUT,
    )
    assert 0.3 <= took < LIMIT
    assert origin.ran("/late") == []


async def test_a_request_that_waits_for_the_handshake_falls_back_with_it(
    origin: Origin,
) -> None:
    """A POST (never early) on the stuck connection waits for its handshake within the same
    limit, and its QUIC try is NOT_SENT."""
    with trio.fail_after(30):
        async with origin.client() as client:
            await warm_up(origin, client)
            origin.relay.faults = Faults(blackhole=True)
            started = trio.current_time()
            response = await client.post(f"{origin.url}/pay", content=b"1")
            took = trio.current_time() - started
    quic, tcp = response.attempts
    assert (quic.http_version, quic.early_data, quic.evidence, quic.category, quic.decision) == (
        "HTTP/3",
        None,
        Evidence.NOT_SENT,
        FailureCategory.TIMEOUT,
        None,
    )
    assert (tcp.http_version, tcp.status) == ("HTTP/2", 200)
    assert LIMIT <= took < LIMIT + SLACK
    assert origin.ran("/pay") == [("HTTP/2", False)]


async def test_icmp_unreachable_after_early_data_marks_the_origin_and_goes_over_tcp(
    origin: Origin, nursery: trio.Nursery
) -> None:
    relay = origin.relay
    with trio.fail_after(30):
        async with origin.client() as client:
            await warm_up(origin, client)
            # The early request's first flight (ClientHello and 0-RTT) is swallowed; then
            # the port stops taking UDP, and QUIC's next datagram meets ICMP unreachable.
            relay.faults = Faults(blackhole=True)
            known = len(relay.clients)

            async def stop_udp_after_the_first_flight() -> None:
                while len(relay.clients) == known:  # (the new connection's first datagram)
                    await trio.sleep(0.001)
                relay.close_udp()

            nursery.start_soon(stop_udp_after_the_first_flight)
            started = trio.current_time()
            response = await client.get(f"{origin.url}/report")
            took = trio.current_time() - started
            later = await client.get(f"{origin.url}/later")
    assert relay.udp_closed
    quic, _ = early_try_then_tcp(response)
    assert quic.category is FailureCategory.CONNECT
    assert "QUIC handshake" in str(quic.error)
    assert took < LIMIT  # the ICMP ended it, not the limit
    assert origin.ran("/report") == [("HTTP/2", False)]
    # The origin was marked broken: TCP at once, no second QUIC connection (the relay saw the
    # warm-up's and the early request's, no third).
    assert [a.http_version for a in later.attempts] == ["HTTP/2"]
    assert len(relay.clients) == 2


def packet_types(datagram: bytes) -> list[QuicPacketType]:
    """The QUIC packets coalesced in one datagram, by type."""
    buf = Buffer(data=datagram)
    types = []
    while not buf.eof() and datagram[buf.tell()] & 0x40:  # (no fixed bit: padding, RFC 9000 §14.1)
        start = buf.tell()
        header = pull_quic_header(buf, host_cid_length=8)
        types.append(header.packet_type)
        if header.packet_type is QuicPacketType.ONE_RTT:
            break  # (a short header runs to the datagram's end)
        buf.seek(start + header.packet_length)
    return types


async def test_the_first_flight_carries_the_early_request(origin: Origin) -> None:
    """A connection that may send early data sends its first flight once the request that
    opened it is handed over: the request's bytes go in 0-RTT with the ClientHello, not in
    1-RTT after a handshake that (on loopback) may be over before it is handed. Six rounds: a
    POST (never early) whose connection brings the next session ticket, then the GET on a
    connection resuming it; a ClientHello sent alone would lose the race about half the time.
    (A connection that carried an early request is closed, keepalive_expiry=0, before the
    server's ticket for it comes: hence the POSTs.)"""
    relay = origin.relay
    responses = []
    with trio.fail_after(30):
        async with origin.client() as client:
            for i in range(6):
                await client.post(f"{origin.url}/ticket", content=b"")
                responses.append(await client.get(f"{origin.url}/early{i}"))
    for response in responses:
        [attempt] = response.attempts
        assert (attempt.http_version, attempt.early_data) == ("HTTP/3", "accepted")
    assert [origin.ran(f"/early{i}") for i in range(6)] == [[("HTTP/3", True)]] * 6
    # Each resumed connection's first flight: its ClientHello (one Initial packet, or two
    # where it is larger than a datagram: qh3's post-quantum key share), then the request in
    # a 0-RTT packet (aioquic's in the same datagram, qh3's in the next).
    first_flights = [
        [kind for datagram in flight for kind in packet_types(datagram)]
        for flight in relay.first_flights[1::2]
    ]
    for flight in first_flights:
        assert flight[-1] is QuicPacketType.ZERO_RTT, first_flights
        assert set(flight[:-1]) == {QuicPacketType.INITIAL}, first_flights


async def test_calls_that_wait_for_a_quic_opening_say_http3_in_their_trail(
    nursery: trio.Nursery,
) -> None:
    """Five calls at once: one opens the QUIC connection, four wait for it (the pool's
    opening); the UDP port is closed, and each call's QUIC try says HTTP/3."""
    server = FaultServer(tls=True)  # TCP only: the UDP port answers ICMP unreachable
    await nursery.start(server.serve)
    responses: list[Response] = []
    with trio.fail_after(30):
        async with Client(
            upstreams={server.url: Upstream(http3=True)},
            ssl_context=server.client_ssl_context(),
            retry=RetryPolicy(max_attempts=1),
        ) as client:

            async def get(i: int) -> None:
                responses.append(await client.get(f"{server.url}/{i}"))

            async with trio.open_nursery() as calls:
                for i in range(5):
                    calls.start_soon(get, i)
    assert len(responses) == 5
    for response in responses:
        quic, tcp = response.attempts
        assert (quic.http_version, quic.evidence, quic.decision) == (
            "HTTP/3",
            Evidence.NOT_SENT,
            None,
        )
        assert (tcp.http_version, tcp.status) == ("HTTP/2", 200)
