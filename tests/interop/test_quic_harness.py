"""The QUIC case harness holds to what it promises: the UDP relay's faults (seeded, counted),
its rebinding and its TCP pipe, against a plain UDP echo server; and the server-side oracles
the case table reads (gtlsserver's log, FaultServer's watched connections) see a client's
CONNECTION_CLOSE, 0-RTT data and a probe of the preferred address when a client does send
them: here aioquic's own client (tests/support/h3client.py) sends them, so the xfail rows
of test_quic_cases.py fail on the client, not on a blind oracle."""

from __future__ import annotations

import socket
from functools import partial

import pytest
import trio

from tests.support.fault_quic import watch_fault_quic
from tests.support.fixtures import StartNgtcp2
from tests.support.h3client import open_h3_client
from tests.support.ngtcp2 import Ngtcp2Log, Ngtcp2Options
from tests.support.udp_relay import Faults, UdpRelay
from trio_retry.testing import FaultServer, Respond

HOST = "127.0.0.1"


class Echo:
    """A UDP server that answers each datagram with itself, to the address it came from,
    and remembers those addresses."""

    def __init__(self) -> None:
        self.sock = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.seen: list[tuple[str, int]] = []

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        with self.sock:
            await self.sock.bind((HOST, 0))
            task_status.started(self.sock.getsockname()[1])
            while True:
                data, addr = await self.sock.recvfrom(65536)
                self.seen.append(addr)
                await self.sock.sendto(data, addr)


@pytest.fixture
async def echo(nursery: trio.Nursery) -> Echo:
    server = Echo()
    await nursery.start(server.run)
    return server


async def relay_for(nursery: trio.Nursery, echo: Echo, **options: object) -> UdpRelay:
    relay = UdpRelay((HOST, echo.sock.getsockname()[1]), **options)  # type: ignore[arg-type]
    await nursery.start(relay.run)
    return relay


async def exchange(port: int, payloads: list[bytes], *, settle: float = 0.2) -> list[bytes]:
    """Send each payload from one client socket to `port`; what came back within `settle`
    seconds of the last send."""
    got: list[bytes] = []
    with trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        await sock.bind((HOST, 0))
        await sock.connect((HOST, port))
        for payload in payloads:
            await sock.send(payload)
            await trio.sleep(0)
        with trio.move_on_after(settle):
            while True:
                got.append(await sock.recv(65536))
    return got


PAYLOADS = [b"%04d" % i + bytes(100) for i in range(200)]


async def test_relay_drops_a_seeded_fraction(nursery: trio.Nursery, echo: Echo) -> None:
    first = await relay_for(nursery, echo, seed=7, faults=Faults(drop=0.3, only="to_server"))
    again = await relay_for(nursery, echo, seed=7, faults=Faults(drop=0.3, only="to_server"))
    other = await relay_for(nursery, echo, seed=8, faults=Faults(drop=0.3, only="to_server"))
    with trio.fail_after(10):
        results = [await exchange(relay.port, PAYLOADS) for relay in (first, again, other)]
    assert 30 < first.counts.to_server.dropped < 90
    assert first.counts.to_server.dropped + len(results[0]) == 200
    assert first.counts.to_client.dropped == 0  # only="to_server"
    assert results[0] == results[1]  # the same seed, the same datagrams lost
    assert results[0] != results[2]
    assert all(reply in PAYLOADS for reply in results[0])


async def test_relay_corrupts_one_byte_and_duplicates(nursery: trio.Nursery, echo: Echo) -> None:
    relay = await relay_for(nursery, echo, seed=1, faults=Faults(corrupt=0.2, only="to_client"))
    twice = await relay_for(nursery, echo, seed=1, faults=Faults(duplicate=0.5))
    with trio.fail_after(10):
        corrupted = await exchange(relay.port, PAYLOADS)
        duplicated = await exchange(twice.port, PAYLOADS[:20])
    damaged = [(got, sent) for got, sent in zip(corrupted, PAYLOADS, strict=True) if got != sent]
    assert len(damaged) == relay.counts.to_client.corrupted > 10
    for got, sent in damaged:
        assert len(got) == len(sent)
        assert sum(a != b for a, b in zip(got, sent, strict=True)) == 1
    extra = twice.counts.to_server.duplicated + twice.counts.to_client.duplicated
    assert extra > 5
    assert len(duplicated) == 20 + extra


async def test_relay_delays_and_blackholes(nursery: trio.Nursery, echo: Echo) -> None:
    relay = await relay_for(nursery, echo, faults=Faults(delay=0.1))
    with trio.fail_after(10), trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        await sock.connect((HOST, relay.port))
        start = trio.current_time()
        await sock.send(b"x")
        assert await sock.recv(100) == b"x"
        assert trio.current_time() - start >= 0.2  # 0.1 s each way
    with trio.fail_after(10):
        relay.faults = Faults(blackhole=True)
        assert await exchange(relay.port, [b"y"] * 5) == []
    assert relay.counts.to_server.dropped == 5


async def test_relay_rebinding_moves_the_client_address(nursery: trio.Nursery, echo: Echo) -> None:
    relay = await relay_for(nursery, echo)
    with trio.fail_after(10), trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        await sock.bind((HOST, 0))
        await sock.connect((HOST, relay.port))
        await sock.send(b"before")
        assert await sock.recv(100) == b"before"
        relay.rebind()
        await sock.send(b"after")
        assert await sock.recv(100) == b"after"  # still from the relay's address
        try:
            relay.rebind("127.0.0.2")
        except OSError:
            pytest.skip("127.0.0.2 cannot be bound here")
        await sock.send(b"moved")
        assert await sock.recv(100) == b"moved"
    assert len(relay.clients) == 1
    assert echo.seen[0][1] != echo.seen[1][1]
    assert [host for host, _ in echo.seen] == [HOST, HOST, "127.0.0.2"]
    assert relay.answered_after_rebind == 1


async def test_relay_pipes_tcp_on_the_same_port(nursery: trio.Nursery) -> None:
    async def upper(stream: trio.SocketStream) -> None:
        async with stream:
            while data := await stream.receive_some(100):
                await stream.send_all(data.upper())

    [listener] = await nursery.start(partial(trio.serve_tcp, upper, 0, host=HOST))
    relay = UdpRelay((HOST, listener.socket.getsockname()[1]), tcp=True)
    await nursery.start(relay.run)
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream(HOST, relay.port)
        async with stream:
            await stream.send_all(b"piped")
            assert await stream.receive_some(100) == b"PIPED"


async def test_the_fault_watch_sees_a_close_and_0rtt(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch = watch_fault_quic(monkeypatch)
    server = FaultServer(tls=True, http3=True)
    server.route("*", "/{rest:path}", *[Respond(200, body=b"ok")] * 3)
    await nursery.start(server.serve)
    with trio.fail_after(20):
        async with open_h3_client(server.port, ca_pem=server.ca_pem) as first:
            await first.request("GET", "/a")
            await first.wait_until(lambda: bool(first.tickets))
        async with open_h3_client(
            server.port, ca_pem=server.ca_pem, session_ticket=first.tickets[-1]
        ) as second:
            sid = second.send_request("GET", "/early")
            await second.response(sid)
            await second.wait_handshake()
            later = await second.request("GET", "/later")
        await trio.sleep(0.2)
    one, two = watch.connections
    assert (one.closes_received, two.closes_received) == (1, 1)
    assert (one.resumed, two.resumed) == (False, True)
    assert two.early_streams == {sid}
    assert later.stream_id not in two.early_streams
    early = [r.early_data for r in server.requests]
    assert early == [False, True, False]  # FaultServer's own record agrees


async def test_the_ngtcp2_log_sees_a_close_and_a_preferred_address_probe(
    ngtcp2: StartNgtcp2,
) -> None:
    server = ngtcp2({"a.txt": b"hello"}, Ngtcp2Options(preferred_address=True))
    with trio.fail_after(20):
        async with open_h3_client(server.port, ca_pem=server.ca_pem) as client:
            response = await client.request("GET", "/a.txt", [("x-request-id", "h")])
            await trio.sleep(0.3)  # aioquic probes the preferred address once confirmed
    assert bytes(response.body) == b"hello"
    log = server.log()
    conn = log.connection_of("h")
    assert conn.closes_received == 1
    assert f"127.0.0.1:{server.preferred_port}" in conn.local_addresses
    assert log.handshakes == 1


def test_the_ngtcp2_log_parser_on_a_known_excerpt() -> None:
    lines = [
        "Received packet: local=[127.0.0.1]:4433 remote=[127.0.0.1]:5000 if=lo ecn=0x0 1200 bytes",
        "I00000000 0xab con recv packet len=1200",
        "I00000000 0xab frm rx 1 0RTT STREAM(0x0b) id=0x0 fin=1 offset=0 len=61 uni=0",
        "http: stream 0x0 request headers started",
        "http: stream 0x0 [:path: /z]",
        "http: stream 0x0 [x-request-id: z]",
        "http: stream 0x0 headers ended",
        "I00000001 0xab frm tx 0 Handshake CRYPTO(0x06) offset=0 len=179",
        "QUIC handshake has completed",
        "Negotiated cipher suite is CHACHA20-POLY1305",
        "Verifying Retry token from [127.0.0.1]:5000",
        "I00000002 0xab frm tx 3 1RTT MAX_STREAM_DATA(0x11) id=0x0 max_stream_data=9",
        "I00000002 0xab frm rx 7 1RTT CONNECTION_CLOSE(0x1d) error_code=(unknown)(0x100)",
    ]
    log = Ngtcp2Log.parse(lines)
    [conn] = log.connections
    assert (log.handshakes, log.retries, conn.cipher) == (1, 1, "CHACHA20-POLY1305")
    assert conn.resumed  # no certificate in its 179 bytes of Handshake CRYPTO
    [request] = conn.requests
    assert (request.path, request.request_id, conn.early(request)) == ("/z", "z", True)
    assert (conn.closes_received, conn.window_updates_sent) == (1, 1)
    assert (conn.local_addresses, conn.remote_addresses) == ({"127.0.0.1:4433"}, {"127.0.0.1:5000"})
