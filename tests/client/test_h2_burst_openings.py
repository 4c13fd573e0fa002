"""A burst of HTTP/2 calls behind a full connection opens, at once, the connections it needs at
the streams the server allows (``pool_book._open_for_demand``), over TLS on real loopback
sockets, counted on the server's side: not one opening after another while calls wait."""

from __future__ import annotations

import trio

from trio_retry import Client, RetryPolicy
from trio_retry.testing import FaultServer, RecordedRequest, Respond

STREAMS = 4  # the server's SETTINGS_MAX_CONCURRENT_STREAMS
QUEUED = 10  # calls behind the full connection: ceil(10 / 4) = 3 connections more


async def test_calls_behind_a_full_connection_open_what_they_need_at_once(
    nursery: trio.Nursery,
) -> None:
    release = trio.Event()

    async def held(request: RecordedRequest) -> Respond:
        await release.wait()
        return Respond(200, body=b"ok")

    server = FaultServer(tls=True, max_concurrent_streams=STREAMS)
    server.route("GET", "/held", held)
    await nursery.start(server.serve)
    client = Client(
        retry=RetryPolicy(max_attempts=1), http2=True, ssl_context=server.client_ssl_context()
    )
    statuses: list[int] = []

    async def one() -> None:
        statuses.append((await client.get(server.url + "/held")).status)

    async with client:
        with trio.fail_after(20):
            async with trio.open_nursery() as calls:
                for _ in range(STREAMS):  # the first connection, full (its limit now known)
                    calls.start_soon(one)
                while len(server.requests) < STREAMS:
                    await trio.sleep(0.01)
                for _ in range(QUEUED):
                    calls.start_soon(one)
                while client.pool.waiting < QUEUED:
                    await trio.sleep(0)
                # As the last of them queued, every opening they need was under way.
                assert client.pool.active_count == 1 + 3, repr(client.pool)
                while len(server.requests) < STREAMS + QUEUED:
                    await trio.sleep(0.01)
                assert server.connections_accepted == 1 + 3
                release.set()
    assert statuses == [200] * (STREAMS + QUEUED)
    assert server.connections_accepted == 1 + 3  # none more, none refused
