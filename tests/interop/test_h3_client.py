"""The client over HTTP/3 against servers we did not write: caddy (quic-go) and hypercorn
(aioquic), started by the tests on loopback; nginx (no HTTP/3) for the fallback to TCP.

What ran is counted where the server records it: caddy's proxied backend (its ledger) and
access log, hypercorn's application ledger, nginx's access log. caddy logs no sign of early
data (and passes none to its backend), so whether a request went in 0-RTT is read from the
client's trail (``Attempt.early_data``, from the handshake's own answer) and its execution
count from the ledger.
"""

from __future__ import annotations

import ssl

import pytest
import trio

import trio_retry
from tests.support.caddy import BIG, HUGE_HEAD, LARGE_HEAD, RunningCaddy
from tests.support.fixtures import StartNginx
from tests.support.hypercorn_server import RunningHypercorn
from tests.support.nginx import NginxConfig
from tests.support.udp_relay import Faults, UdpRelay
from trio_retry import Client, Evidence, StageTimeouts, Upstream

MIB = 1 << 20
ONE = trio_retry.RetryPolicy(max_attempts=1)


def caddy_client(caddy: RunningCaddy, **options: object) -> Client:
    return Client(
        upstreams={caddy.url(""): Upstream(http3=True)},
        ssl_context=caddy.ssl_context(),
        retry=ONE,
        **options,  # type: ignore[arg-type]
    )


async def test_caddy_heads_within_and_past_max_header_bytes(caddy: RunningCaddy) -> None:
    """A real QPACK encoder's heads (quic-go's, Huffman-coded): one of ~20 KB is read (the
    client scans a section over 4 KiB before decoding it, ``_wire/http3/qpack.py``, and must
    take it); one of ~100 KB is refused as it arrives (``ProtocolFailed``, its stream alone:
    the connection carries the next request), and caddy did serve it."""
    with trio.fail_after(30):
        async with caddy_client(caddy) as client:
            large = await client.get(caddy.url("/head/large"), headers={"x-request-id": "l"})
            with pytest.raises(trio_retry.ProtocolFailed) as refused:
                await client.get(caddy.url("/head/huge"), headers={"x-request-id": "h"})
            after = await client.get(caddy.url("/get"))
    assert (large.http_version, large.status_code) == ("HTTP/3", 200)
    assert {name: large.headers[name] for name in LARGE_HEAD} == LARGE_HEAD
    error = refused.value
    assert (error.category, error.evidence) == (
        trio_retry.FailureCategory.REMOTE_PROTOCOL,
        Evidence.SENT_NO_RESPONSE,
    )
    assert "max_header_bytes" in str(error)
    assert [a.http_version for a in error.attempts] == ["HTTP/3"]
    assert (after.status_code, after.attempts[-1].connection_reused) == (200, True)
    assert sum(len(name) + len(value) for name, value in HUGE_HEAD.items()) > 65536
    log = caddy.log(expect=3)
    assert (log.count(request_id="l"), log.count(request_id="h")) == (1, 1)


async def test_caddy_get_post_and_a_mib_each_way(caddy: RunningCaddy) -> None:
    upload = bytes(reversed(BIG))
    with trio.fail_after(30):
        async with caddy_client(caddy) as client:
            got = await client.get(caddy.url("/get"), headers={"x-request-id": "g"})
            posted = await client.post(
                caddy.url("/echo"), content=b"hello", headers={"x-request-id": "p"}
            )
            static = await client.get(caddy.url("/big.bin"))
            echoed = await client.put(
                caddy.url("/echo"), content=upload, headers={"x-request-id": "u"}
            )
    assert {r.http_version for r in (got, posted, static, echoed)} == {"HTTP/3"}
    assert (got.content, posted.content) == (b"ok", b"hello")
    assert static.content == BIG
    assert echoed.content == upload
    assert caddy.backend.count(request_id="p") == 1
    assert caddy.backend.count(request_id="u") == 1
    assert [e.body_length for e in caddy.backend.executions] == [5, MIB]
    log = caddy.log(expect=4)
    assert log.protocols() == ["HTTP/3.0"] * 4
    assert (log.count(request_id="g"), log.count(request_id="p")) == (1, 1)


async def test_caddy_fifty_concurrent_streams_on_one_connection(caddy: RunningCaddy) -> None:
    bodies: dict[int, bytes] = {}
    with trio.fail_after(30):
        async with caddy_client(caddy) as client:

            async def one(i: int) -> None:
                response = await client.post(
                    caddy.url(f"/echo/{i}"), content=b"%d" % i, headers={"x-request-id": f"r{i}"}
                )
                assert response.http_version == "HTTP/3"
                bodies[i] = response.content

            async with trio.open_nursery() as nursery:
                for i in range(50):
                    nursery.start_soon(one, i)
            assert repr(client._rt.pool).startswith("<ConnectionPool 0 active, 1 idle")
    assert bodies == {i: b"%d" % i for i in range(50)}
    assert all(caddy.backend.count(request_id=f"r{i}") == 1 for i in range(50))
    assert len(caddy.log(expect=50)) == 50


async def test_caddy_alt_svc_discovery(caddy: RunningCaddy) -> None:
    with trio.fail_after(30):
        async with Client(http3=True, ssl_context=caddy.ssl_context(), retry=ONE) as client:
            versions = [(await client.get(caddy.url("/get"))).http_version for _ in range(3)]
    assert versions == ["HTTP/2", "HTTP/3", "HTTP/3"]
    assert caddy.log(expect=3).protocols() == ["HTTP/2.0", "HTTP/3.0", "HTTP/3.0"]


async def test_caddy_head_and_not_modified_of_a_static_file(caddy: RunningCaddy) -> None:
    """caddy's file server answers a HEAD with the file's content-length and no body, and a
    conditional GET with a 304 (issue #39: the HEAD closed the QUIC connection, "content-length
    does not match data size", and failed after 3 attempts). One attempt each, one connection,
    and caddy logs each once, over HTTP/3."""
    with trio.fail_after(30):
        async with caddy_client(caddy) as client:
            head = await client.head(caddy.url("/big.bin"), headers={"x-request-id": "h"})
            etag = head.headers["etag"]
            same = await client.get(
                caddy.url("/big.bin"), headers={"if-none-match": etag, "x-request-id": "c"}
            )
            after = await client.get(caddy.url("/get"), headers={"x-request-id": "g"})
    assert (head.status, head.content, head.http_version) == (200, b"", "HTTP/3")
    assert head.headers["content-length"] == str(MIB)
    assert (same.status, same.content, same.http_version) == (304, b"", "HTTP/3")
    assert [len(r.attempts) for r in (head, same, after)] == [1, 1, 1]
    assert [r.attempts[0].connection_reused for r in (head, same, after)] == [False, True, True]
    log = caddy.log(expect=3)
    assert log.protocols() == ["HTTP/3.0"] * 3
    assert [e.status for e in log.entries] == [200, 304, 200]


async def test_caddy_zero_rtt_for_a_get_never_for_a_post(caddy: RunningCaddy) -> None:
    with trio.fail_after(30):
        async with caddy_client(caddy, early_data=True, keepalive_expiry=0) as client:
            # The session ticket: caddy sends it after the handshake, and a small response
            # may outrun it before the connection closes (keepalive_expiry=0), the next GET
            # then a full handshake; 1 MiB cannot (as in the test below).
            assert (await client.get(caddy.url("/big.bin"))).content == BIG
            early = await client.get(caddy.url("/echo/g"), headers={"x-request-id": "early"})
            post = await client.post(
                caddy.url("/echo"), content=b"pay", headers={"x-request-id": "post"}
            )
    assert early.attempts[-1].early_data == "accepted"
    assert post.attempts[-1].early_data is None  # it waited for the handshake
    assert (caddy.backend.count(request_id="early"), caddy.backend.count(request_id="post")) == (
        1,
        1,
    )


async def test_caddy_early_data_falls_back_within_the_handshake_limit(
    caddy: RunningCaddy, nursery: trio.Nursery
) -> None:
    """A GET in 0-RTT to caddy through a relay that then drops every datagram: it goes to
    caddy over TCP (piped by the relay) when the handshake limit runs out, not after its
    first-byte limit; caddy ran it once, over HTTP/2; its QUIC try stays, unconfirmed."""
    relay = UdpRelay(("127.0.0.1", caddy.port), tcp=True)
    await nursery.start(relay.run)
    url = f"https://127.0.0.1:{relay.port}"
    limit = 1.0
    with trio.fail_after(30):
        async with Client(
            upstreams={url: Upstream(http3=True)},
            ssl_context=caddy.ssl_context(),
            retry=ONE,
            early_data=True,
            keepalive_expiry=0,
            stage_timeouts=StageTimeouts(tls=limit, first_byte=8),
        ) as client:
            # The session ticket (caddy sends it after the handshake: a response of 1 MiB
            # cannot outrun it, as a small one may before the connection closes).
            assert (await client.get(f"{url}/big.bin")).content == BIG
            relay.faults = Faults(blackhole=True)
            started = trio.current_time()
            response = await client.get(f"{url}/echo/g", headers={"x-request-id": "early"})
            took = trio.current_time() - started
    quic, tcp = response.attempts
    assert (quic.http_version, quic.early_data, quic.evidence, quic.decision) == (
        "HTTP/3",
        "unconfirmed",
        Evidence.SENT_NO_RESPONSE,
        None,
    )
    assert (tcp.http_version, tcp.status, response.content) == ("HTTP/2", 200, b"executed 1")
    assert limit <= took < limit + 1.0
    assert [e.client_proto for e in caddy.backend.executions] == ["HTTP/2.0"]
    log = caddy.log(expect=2)
    assert [e.protocol for e in log.entries if e.request_id == "early"] == ["HTTP/2.0"]


async def test_hypercorn_get_post_and_concurrency(hypercorn: RunningHypercorn) -> None:
    with trio.fail_after(30):
        async with Client(
            upstreams={hypercorn.url(""): Upstream(http3=True)},
            ssl_context=ssl.create_default_context(cadata=hypercorn.ca_pem.decode("ascii")),
            retry=ONE,
        ) as client:
            got = await client.get(hypercorn.url("/"), headers={"x-request-id": "g"})
            big = await client.put(hypercorn.url("/big"), content=BIG)
            results: list[bytes] = []

            async def one(i: int) -> None:
                response = await client.post(
                    hypercorn.url(f"/p/{i}"), content=b"%d" % i, headers={"x-request-id": f"p{i}"}
                )
                results.append(response.content)

            async with trio.open_nursery() as nursery:
                for i in range(50):
                    nursery.start_soon(one, i)
    assert (got.http_version, got.content) == ("HTTP/3", b"ok")
    assert big.content == BIG
    assert sorted(results) == sorted(b"%d" % i for i in range(50))
    ledger = hypercorn.ledger(expect=52)
    assert {e.http_version for e in ledger.entries} == {"3"}
    assert all(ledger.count(request_id=f"p{i}") == 1 for i in range(50))


async def test_nginx_without_http3_is_reached_over_tcp(nginx: StartNginx) -> None:
    """Upstream(http3=True) at a server with no QUIC listener: the UDP port is closed, the
    first attempt goes again over TCP at once, uncounted; nginx executed each POST once."""
    server = nginx(NginxConfig())
    url = server.h2_url("/post")
    origin = url.rsplit("/", 1)[0]
    with trio.fail_after(30):
        async with Client(
            upstreams={origin: Upstream(http3=True)},
            ssl_context=server.ssl_context(),
            retry=ONE,
        ) as client:
            first = await client.post(url, content=b"1", headers={"x-request-id": "a"})
            second = await client.post(url, content=b"2", headers={"x-request-id": "b"})
    quic, tcp = first.attempts
    assert (quic.evidence, quic.decision) == (trio_retry.Evidence.NOT_SENT, None)
    assert "QUIC" in str(quic.error)
    assert tcp.http_version == first.http_version == "HTTP/2"
    assert [a.http_version for a in second.attempts] == ["HTTP/2"]  # marked broken: TCP now
    log = server.log(expect=2)
    assert (log.count(request_id="a"), log.count(request_id="b")) == (1, 1)


@pytest.mark.parametrize("http3", [False, True])
async def test_discovery_is_off_without_the_option(caddy: RunningCaddy, http3: bool) -> None:
    with trio.fail_after(30):
        async with Client(http3=http3, ssl_context=caddy.ssl_context(), retry=ONE) as client:
            versions = [(await client.get(caddy.url("/get"))).http_version for _ in range(2)]
    assert versions == (["HTTP/2", "HTTP/3"] if http3 else ["HTTP/2", "HTTP/2"])
