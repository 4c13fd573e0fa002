"""What the stream tests share: the protocol a test runs over (HTTP/1.1, HTTP/2 over TLS,
HTTP/3), and a FaultServer with one route plus a client reaching it over that protocol."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

import trio_retry
from trio_retry import Upstream
from trio_retry.testing import FaultServer, RequestHandler

PROTOCOLS = ["h1", "h2", "h3"]


@pytest.fixture(params=PROTOCOLS)
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@asynccontextmanager
async def serving(
    protocol: str, method: str, path: str, handler: RequestHandler, **client_options: object
) -> AsyncIterator[tuple[FaultServer, trio_retry.Client]]:
    """A FaultServer answering ``method path`` with ``handler``, and a client (with
    ``client_options``) reaching it over ``protocol``; everything bounded by 30 s."""
    if protocol == "h3":
        pytest.importorskip("aioquic")
    server = FaultServer(tls=protocol != "h1", http3=protocol == "h3")
    server.route(method, path, handler)
    options = dict(client_options)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        if protocol != "h1":
            options.update(ssl_context=server.client_ssl_context(), http2=True)
        if protocol == "h3":
            options["upstreams"] = {server.url: Upstream(http3=True)}
        with trio.fail_after(30):
            async with trio_retry.Client(**options) as client:  # type: ignore[arg-type]
                yield server, client
        nursery.cancel_scope.cancel()
