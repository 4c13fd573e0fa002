"""A finished request gives its connection (HTTP/1.1) or its stream (HTTP/2) back to the pool
it came from, on every protocol: the connection is idle again, and the next call reuses it.

The pool finds a returned connection by the key it was pooled under (``pool_key()``): an HTTP/2
connection carrying any other key would never get its streams back, and with one connection
allowed the calls would hang once the server's stream limit was used up (seen once, while
the pool keys were being changed)."""

from __future__ import annotations

import pytest
import trio

import trio_retry
from trio_retry.testing import FaultServer

CALLS = 5  # more than the server's stream limit below


@pytest.mark.parametrize("protocol", ["h1", "h2-tls", "h2c"])
async def test_each_call_returns_its_connection(protocol: str) -> None:
    server = FaultServer(tls=protocol == "h2-tls", http2=protocol != "h1", max_concurrent_streams=3)
    options: dict[str, object] = {"max_connections": 1, "keepalive_expiry": None}
    if protocol == "h2-tls":
        options["ssl_context"] = server.client_ssl_context(http2=True)
    if protocol == "h2c":
        options["http2_prior_knowledge"] = True
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        async with trio_retry.Client(**options) as client:  # type: ignore[arg-type]
            for number in range(CALLS):
                with trio.fail_after(5):
                    response = await client.get(f"{server.url}/{number}")
                assert response.status == 200
                assert response.http_version == ("HTTP/1.1" if protocol == "h1" else "HTTP/2")
                assert response.attempts[0].connection_reused is (number > 0)
                assert (client.pool.active_count, client.pool.idle_count) == (0, 1), (
                    client.pool.describe()
                )
        nursery.cancel_scope.cancel()
    assert len(server.requests) == CALLS
