"""During a download the connection's task reads the socket less often, and so acknowledges
more datagrams per ACK (``_wire/http3/acks.py``, ``BulkReads``), on real loopback sockets
through a UDP relay that counts datagrams each way: against our FaultServer (aioquic) and
against caddy (quic-go). With the wait turned off (``FIXED.ack_coalesce = 0``: the
differential) the same download gets the same bytes, and the client sends several times more
datagrams per datagram received. With datagrams lost on the way, the download still completes
intact (the rounds after a hole read at once)."""

from __future__ import annotations

import dataclasses
import hashlib
import os

import pytest
import trio

pytest.importorskip("aioquic", reason="needs the http3 extra")

from tests.support.caddy import RunningCaddy
from tests.support.fixtures import caddy as caddy
from tests.support.udp_relay import Faults, http3_client_through
from trio_retry._wire.clock import FIXED
from trio_retry._wire.http3 import acks, backend
from trio_retry.testing import FaultServer, Respond

SIZE = 4 * 1024 * 1024
SPACED = 0.005
BODY = os.urandom(SIZE)


async def _download(
    nursery: trio.Nursery, port: int, context: object, path: str, faults: Faults | None = None
) -> tuple[float, bytes]:
    """The body of ``path`` downloaded through a relay on a warm connection, and the client's
    datagrams per datagram it received during the download."""
    async with http3_client_through(nursery, port, context, seed=7) as (relay, url, client):
        warm = await client.get(url + "/warm")
        assert warm.http_version == "HTTP/3"
        await trio.sleep(0.05)
        if faults is not None:
            relay.faults = faults
        sent, received = relay.counts.to_server.received, relay.counts.to_client.received
        chunks = []
        async with client.stream("GET", url + path) as response:
            assert (response.status, response.http_version) == (200, "HTTP/3")
            async for chunk in response.aiter_raw():
                chunks.append(chunk)
        sent = relay.counts.to_server.received - sent
        received = relay.counts.to_client.received - received
    return sent / received, b"".join(chunks)


def _spaced(monkeypatch: pytest.MonkeyPatch, coalesce: bool) -> None:
    """The wait between reads: 5 ms (within the 25 ms ``max_ack_delay``; the default, 1 ms,
    is measured in ``benchmarks/http3.py``: through this relay, in the test's own loop, the
    datagrams 1 ms brings vary with the machine's load), or none."""
    interval = SPACED if coalesce else 0.0
    monkeypatch.setattr(acks, "FIXED", dataclasses.replace(FIXED, ack_coalesce=interval))


async def _fault_server(nursery: trio.Nursery) -> FaultServer:
    server = FaultServer(tls=True, http3=True)
    server.route("GET", "/big", lambda request: Respond(200, body=BODY))
    await nursery.start(server.serve)
    return server


async def _both(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch, port: int, context: object, path: str
) -> None:
    """The same download spaced, then not: intact both ways, and spaced in a fraction of the
    datagrams (qh3 acknowledges every second packet by itself)."""
    ratios = []
    for coalesce in (True, False):
        _spaced(monkeypatch, coalesce)
        ratio, body = await _download(nursery, port, context, path)
        assert hashlib.sha256(body).digest() == hashlib.sha256(BODY).digest()
        ratios.append(ratio)
    spaced, off = ratios
    assert spaced < 0.25, ratios
    assert spaced * 2 < off, ratios


#: aioquic delays each ACK by itself: its reads are not spaced (``acks.py``; the rule is
#: ``tests/wire/test_h3_datagram_pump.py``'s).
_SPACED_HERE = pytest.mark.skipif(
    backend.NAME == "aioquic", reason="over aioquic a download's reads are not spaced"
)


@_SPACED_HERE
async def test_a_download_is_acknowledged_in_fewer_datagrams_fault_server(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = await _fault_server(nursery)
    with trio.fail_after(30):
        await _both(nursery, monkeypatch, server.port, server.client_ssl_context(), "/big")
    assert [r.path for r in server.requests].count("/big") == 2


@_SPACED_HERE
async def test_a_download_is_acknowledged_in_fewer_datagrams_caddy(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch, caddy: RunningCaddy
) -> None:
    caddy.put_files({"big": BODY})
    with trio.fail_after(30):
        await _both(nursery, monkeypatch, caddy.port, caddy.ssl_context(), "/files/big")
    served = [e for e in caddy.log(expect=4).entries if e.uri == "/files/big"]
    assert [(e.protocol, e.status, e.size) for e in served] == [("HTTP/3.0", 200, SIZE)] * 2


@pytest.mark.parametrize("against", ["fault_server", "caddy"])
async def test_a_download_with_datagrams_lost_completes_intact(
    nursery: trio.Nursery, request: pytest.FixtureRequest, against: str
) -> None:
    if against == "caddy":
        caddy: RunningCaddy = request.getfixturevalue("caddy")
        caddy.put_files({"big": BODY})
        port, context, path = caddy.port, caddy.ssl_context(), "/files/big"
    else:
        server = await _fault_server(nursery)
        port, context, path = server.port, server.client_ssl_context(), "/big"
    with trio.fail_after(60):
        _, body = await _download(nursery, port, context, path, Faults(drop=0.01, only="to_client"))
    assert hashlib.sha256(body).digest() == hashlib.sha256(BODY).digest()
