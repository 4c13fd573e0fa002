"""A good QUIC citizen (issue #39 item 6): CONNECTION_CLOSE whenever a connection is closed,
the client's exit included; one connection per origin, a burst queueing for its streams; a
QUIC handshake slower than the fallback limit kept going while TCP serves the request.

Against FaultServer(http3=True), its QUIC connections watched from inside
(tests/support/fault_quic.py: the CONNECTION_CLOSE frames it received, its handshakes), and
through the UDP relay (tests/support/udp_relay.py) where the network must fail. Real time:
QUIC's timers run on the run's clock (an autojumping MockClock would fire them while a
datagram is in flight); every wait is bounded by ``trio.fail_after``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.cli.support import cli
from tests.support.fault_quic import QuicWatch, watch_fault_quic
from tests.support.fixtures import StartNgtcp2
from tests.support.fixtures import ngtcp2 as ngtcp2
from tests.support.ngtcp2 import Ngtcp2Options
from tests.support.quic_backend import FOLLOWS_PREFERRED_ADDRESS
from tests.support.udp_relay import Faults, UdpRelay
from trio_retry import Client, Evidence, RetryPolicy, StageTimeouts, Upstream
from trio_retry._models import Origin
from trio_retry._wire.http3 import udp
from trio_retry.testing import FaultServer, GoAway, Respond, Stall

ONE = RetryPolicy(max_attempts=1)


@pytest.fixture
def watch(monkeypatch: pytest.MonkeyPatch) -> QuicWatch:
    return watch_fault_quic(monkeypatch)


@pytest.fixture
async def server(watch: QuicWatch, nursery: trio.Nursery) -> FaultServer:
    server = FaultServer(tls=True, http3=True)
    await nursery.start(server.serve)
    return server


def h3_client(server: FaultServer, url: str | None = None, **options: object) -> Client:
    """A client that reaches ``url`` (the server's own by default) over HTTP/3 first."""
    options.setdefault("retry", ONE)
    return Client(
        upstreams={url or server.url: Upstream(http3=True)},
        ssl_context=server.client_ssl_context(),
        **options,  # type: ignore[arg-type]
    )


async def closes_within(watch: QuicWatch, count: int, limit: float) -> None:
    """Until the server has received ``count`` CONNECTION_CLOSE frames in all."""
    with trio.fail_after(limit):
        while sum(c.closes_received for c in watch.connections) < count:
            await trio.sleep(0.01)


# --- CONNECTION_CLOSE ------------------------------------------------------------------------


async def test_leaving_the_client_sends_connection_close(
    server: FaultServer, watch: QuicWatch
) -> None:
    with trio.fail_after(20):
        async with h3_client(server) as client:
            response = await client.get(f"{server.url}/")
            await trio.sleep(0.3)  # idle: nothing arrives that would wake the connection's task
            started = trio.current_time()
        took = trio.current_time() - started
    assert response.http_version == "HTTP/3"
    await closes_within(watch, 1, 2)
    [conn] = watch.connections
    assert conn.closes_received == 1
    assert took < 0.5  # the close is one datagram, sent without waiting


async def test_aclose_inside_the_block_sends_connection_close(
    server: FaultServer, watch: QuicWatch
) -> None:
    with trio.fail_after(20):
        async with h3_client(server) as client:
            await client.get(f"{server.url}/")
            await client.aclose()
            await closes_within(watch, 1, 2)


async def test_a_connection_the_pool_drops_sends_connection_close(
    server: FaultServer, watch: QuicWatch
) -> None:
    with trio.fail_after(20):
        async with h3_client(server, keepalive_expiry=0.2) as client:
            await client.get(f"{server.url}/")
            await trio.sleep(0.3)
            await client.get(f"{server.url}/")  # finds the first expired: closed, a new one
            await closes_within(watch, 1, 2)
    assert len(watch.connections) == 2


async def test_a_cancelled_caller_still_sends_connection_close(
    server: FaultServer, watch: QuicWatch
) -> None:
    server.route("GET", "/slow", Stall(5.0))
    with trio.fail_after(20):
        with trio.move_on_after(0.5):
            async with h3_client(server) as client:
                await client.get(f"{server.url}/slow")
        await closes_within(watch, 1, 2)


async def test_the_command_line_sends_connection_close(
    server: FaultServer, watch: QuicWatch, tmp_path: Path
) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(server.ca_pem)
    ran = await cli("get", f"{server.url}/", "--http3", "--cacert", str(ca))
    assert ran.code == 0
    assert [r.http_version for r in server.requests] == ["HTTP/3"]
    await closes_within(watch, 1, 2)


# --- one connection per origin ----------------------------------------------------------------


async def test_a_burst_past_the_stream_limit_shares_one_connection(
    server: FaultServer, watch: QuicWatch
) -> None:
    """aioquic's server allows 128 request streams at once: 300 calls queue for them."""
    server.route("GET", "/w", Respond(200, body=b"w", delay=0.05))
    statuses: list[int] = []
    with trio.fail_after(30):
        async with h3_client(server) as client:

            async def one() -> None:
                statuses.append((await client.get(f"{server.url}/w")).status)

            async with trio.open_nursery() as calls:
                for _ in range(300):
                    calls.start_soon(one)
            assert client.pool.opened == 1
    assert statuses == [200] * 300
    assert len(watch.connections) == 1
    assert server.connections_accepted == 1
    assert len({r.stream_id for r in server.requests}) == 300


async def test_after_goaway_the_next_call_does_not_wait_for_the_draining_connection(
    server: FaultServer, watch: QuicWatch
) -> None:
    """A GOAWAY that lets a 3 s response finish: the next call opens the successor at once
    instead of queueing behind that response (one connection per origin counts only the
    connection that takes new streams); the drained one sends CONNECTION_CLOSE as it ends."""
    server.route("GET", "/slow", Stall(3.0, then=Respond(200, body=b"slow")))
    server.route("GET", "/go", GoAway(then=Respond(200, body=b"go")))
    took: dict[str, float] = {}
    with trio.fail_after(20):
        async with h3_client(server) as client:
            started = trio.current_time()

            async def slow() -> None:
                assert (await client.get(f"{server.url}/slow")).status == 200
                took["slow"] = trio.current_time() - started

            async with trio.open_nursery() as calls:
                calls.start_soon(slow)
                await trio.sleep(0.2)
                assert (await client.get(f"{server.url}/go")).status == 200
                after = await client.get(f"{server.url}/after")
                took["after"] = trio.current_time() - started
            # The drained connection closed with its last stream, saying so.
            await closes_within(watch, 1, 2)
            assert client.pool.total == 1
    assert after.status == 200
    assert took["after"] < 2.0 < took["slow"]
    assert len(watch.connections) == 2


# --- the background handshake ------------------------------------------------------------------


async def _relayed(server: FaultServer, nursery: trio.Nursery) -> UdpRelay:
    relay = UdpRelay(("127.0.0.1", server.port), seed=1, tcp=True)
    await nursery.start(relay.run)
    return relay


async def test_a_slow_handshake_goes_on_while_tcp_serves_and_is_used_after(
    server: FaultServer, watch: QuicWatch, nursery: trio.Nursery
) -> None:
    relay = await _relayed(server, nursery)
    url = f"https://127.0.0.1:{relay.port}"
    relay.faults = Faults(blackhole=True)
    timeouts = StageTimeouts(connect=5, tls=0.5, write=5, first_byte=5, read=5)
    with trio.fail_after(20):
        async with h3_client(server, url, stage_timeouts=timeouts) as client:
            routes = client._rt.connector.quic_routes
            assert routes is not None
            first = await client.get(f"{url}/a")
            assert routes.broken_until(Origin.parse(url)) is None  # not broken: still trying
            relay.faults = Faults()
            versions = []
            for _ in range(40):  # QUIC's retransmissions get through once the network does
                await trio.sleep(0.1)
                response = await client.get(f"{url}/b")
                versions.append(response.http_version)
                if response.http_version == "HTTP/3":
                    break
            assert client.pool.opened == 2  # the TCP one, and the QUIC one handed over
    assert first.http_version == "HTTP/2"
    quic, tcp = first.attempts
    assert (quic.evidence, tcp.evidence) == (Evidence.NOT_SENT, Evidence.RESPONSE_RECEIVED)
    assert versions[-1] == "HTTP/3", versions
    assert set(versions[:-1]) <= {"HTTP/2"}
    # The request went on the connection whose handshake began with the first call.
    assert watch.handshakes == 1
    assert len(relay.clients) == 1


async def test_a_slow_handshake_that_then_fails_marks_the_origin_broken(
    server: FaultServer, watch: QuicWatch, nursery: trio.Nursery
) -> None:
    async with trio.open_nursery() as relay_nursery:
        relay = await _relayed(server, relay_nursery)
        url = f"https://127.0.0.1:{relay.port}"
        relay.faults = Faults(blackhole=True)
        timeouts = StageTimeouts(connect=5, tls=0.5, write=5, first_byte=5, read=5)
        with trio.fail_after(20):
            async with h3_client(server, url, stage_timeouts=timeouts) as client:
                routes = client._rt.connector.quic_routes
                assert routes is not None
                origin = Origin.parse(url)
                first = await client.get(f"{url}/a")
                assert first.http_version == "HTTP/2"
                assert routes.broken_until(origin) is None
                # The relay goes: its UDP port answers the next retransmission with ICMP
                # port unreachable, which ends the handshake for good.
                relay_nursery.cancel_scope.cancel()
                while routes.broken_until(origin) is None:
                    await trio.sleep(0.05)
    assert watch.handshakes == 0


# --- the server's preferred address ------------------------------------------------------------


@pytest.mark.parametrize("migrates", [True, False], ids=["migrates", "declines"])
async def test_the_preferred_address_is_used_or_declined(
    ngtcp2: StartNgtcp2, monkeypatch: pytest.MonkeyPatch, migrates: bool
) -> None:
    """gtlsserver offers another port as its preferred address (RFC 9000 §9.6). Where the
    socket can follow QUIC's paths (Linux) the client validates it and moves there; where it
    cannot (the decline, forced here as on other systems: ``udp.py``), or where the QUIC
    library does not follow one (qh3's), everything stays on the first address and works."""
    if not migrates:
        monkeypatch.setattr(udp, "_report_errors", lambda sock, family: False)
    server = ngtcp2({"a.bin": b"a" * 200_000, "b.txt": b"b"}, Ngtcp2Options(preferred_address=True))
    origin = f"https://{server.authority}"
    with trio.fail_after(20):
        async with Client(
            upstreams={origin: Upstream(http3=True)}, ssl_context=server.ssl_context(), retry=ONE
        ) as client:
            first = await client.get(server.url("/a.bin"))
            await trio.sleep(0.2)  # the new path's validation takes a round trip or two
            second = await client.get(server.url("/b.txt"))
    assert (first.http_version, second.http_version) == ("HTTP/3", "HTTP/3")
    assert (first.content, second.content) == (b"a" * 200_000, b"b")
    [conn] = server.log().connections
    ports = {address.rsplit(":", 1)[1] for address in conn.local_addresses}
    assert str(server.port) in ports
    assert (str(server.preferred_port) in ports) is (migrates and FOLLOWS_PREFERRED_ADDRESS)
