"""The acknowledgement a response is owed rides with the caller's next request
(``_wire/http3/acks.py``), on real loopback sockets through a UDP relay that counts the
client's datagrams: against our FaultServer and against caddy. With the hold turned off
(``FIXED.ack_hold = 0``: the differential), the same calls get the same answers, and over qh3 each
sequential request cost two datagrams (the acknowledgement alone, then the request). A
response no request follows still gets its acknowledgement, alone, within the hold."""

from __future__ import annotations

import dataclasses

import pytest
import trio

pytest.importorskip("aioquic", reason="needs the http3 extra")

import trio_retry
from tests.support.caddy import RunningCaddy
from tests.support.fixtures import caddy as caddy
from tests.support.udp_relay import Faults, UdpRelay, http3_client_through
from trio_retry._wire.clock import FIXED
from trio_retry._wire.http3 import acks, backend
from trio_retry.testing import FaultServer

CALLS = 20


async def _sequential(
    relay: UdpRelay, url: str, client: trio_retry.Client
) -> tuple[int, list[bytes]]:
    """``CALLS`` GETs one after the other on a warm connection: the client's datagrams they
    cost (the last one's acknowledgement aside), and the bodies."""
    warm = await client.get(url + "/warm")
    assert warm.http_version == "HTTP/3"
    await trio.sleep(0.05)  # (the warm-up's acknowledgement gone)
    before = relay.counts.to_server.received
    bodies = []
    for index in range(CALLS):
        response = await client.get(f"{url}/{index}")
        assert (response.status, response.http_version) == (200, "HTTP/3")
        bodies.append(response.content)
    return relay.counts.to_server.received - before, bodies


async def _server(nursery: trio.Nursery) -> FaultServer:
    server = FaultServer(tls=True, http3=True)
    await nursery.start(server.serve)
    return server


@pytest.mark.parametrize("hold", [True, False], ids=["held", "off"])
async def test_a_sequential_request_carries_the_acknowledgement_fault_server(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch, hold: bool
) -> None:
    if not hold:
        monkeypatch.setattr(acks, "FIXED", dataclasses.replace(FIXED, ack_hold=0.0))
    server = await _server(nursery)
    with trio.fail_after(20):
        async with http3_client_through(nursery, server.port, server.client_ssl_context()) as (
            relay,
            url,
            client,
        ):
            sent, bodies = await _sequential(relay, url, client)
    assert len(bodies) == CALLS
    assert len(set(bodies)) == 1  # the same answers either way
    assert [r.path for r in server.requests][-CALLS:] == [f"/{i}" for i in range(CALLS)]
    if hold or backend.NAME == "aioquic":  # (aioquic delays its acknowledgement by itself)
        assert sent <= CALLS + CALLS // 4  # one datagram a request (a late caller aside)
    else:
        assert sent >= 2 * CALLS - CALLS // 4  # the acknowledgement alone, then the request


@pytest.mark.parametrize("hold", [True, False], ids=["held", "off"])
async def test_a_sequential_request_carries_the_acknowledgement_caddy(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch, caddy: RunningCaddy, hold: bool
) -> None:
    if not hold:
        monkeypatch.setattr(acks, "FIXED", dataclasses.replace(FIXED, ack_hold=0.0))
    with trio.fail_after(20):
        async with http3_client_through(nursery, caddy.port, caddy.ssl_context()) as (
            relay,
            url,
            client,
        ):
            sent, _ = await _sequential(relay, url + "/get?", client)
    if hold or backend.NAME == "aioquic":
        assert sent <= CALLS + CALLS // 4
    else:
        assert sent >= 2 * CALLS - CALLS // 4
    served = [e for e in caddy.log(expect=CALLS + 1).entries if e.uri.startswith("/get")]
    assert len(served) == CALLS + 1  # caddy's own log: each call executed once
    assert {e.protocol for e in served} == {"HTTP/3.0"}


@pytest.mark.parametrize("against", ["fault_server", "caddy"])
async def test_a_response_no_request_follows_is_still_acknowledged(
    nursery: trio.Nursery, request: pytest.FixtureRequest, against: str
) -> None:
    """The hold ends by itself: the acknowledgement goes alone, within the hold (the relay
    counts it), though nothing more comes from the server (the relay drops what it sends from
    the moment the caller has its response: our FaultServer's aioquic acknowledges the request
    a millisecond later, which would end the hold instead); the connection stays usable."""
    if against == "caddy":
        caddy: RunningCaddy = request.getfixturevalue("caddy")
        port, context, path = caddy.port, caddy.ssl_context(), "/get?"
    else:
        server = await _server(nursery)
        port, context, path = server.port, server.client_ssl_context(), "/"
    with trio.fail_after(20):
        async with http3_client_through(nursery, port, context) as (relay, url, client):
            assert (await client.get(url + path + "warm")).http_version == "HTTP/3"
            await trio.sleep(0.05)
            answered = await client.get(url + path + "alone")
            relay.faults = Faults(blackhole=True, only="to_client")
            after = relay.counts.to_server.received
            for _ in range(50):  # (bounded: 0.5 s at most)
                if relay.counts.to_server.received > after:
                    break
                await trio.sleep(0.01)
            assert relay.counts.to_server.received > after  # the acknowledgement, alone
            relay.faults = Faults()
            again = await client.get(url + path + "again")
    assert (answered.status, again.status, again.http_version) == (200, 200, "HTTP/3")
