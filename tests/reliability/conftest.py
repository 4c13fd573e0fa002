"""Fixtures: a FaultServer in each of the four protocol modes, and a client that speaks to it."""

from __future__ import annotations

from typing import Any

import pytest
import trio

import trio_retry
from trio_retry.testing import FaultServer

#: Retries fast enough that a test with three attempts takes milliseconds.
FAST = trio_retry.RetryPolicy(
    max_attempts=3, backoff=trio_retry.Backoff(initial=0.01, max=0.05, jitter="none")
)
#: Seconds: the bound on any one test's network activity.
LIMIT = 10

MODES = ("h1", "h1-tls", "h2c", "h2-tls")


def server_for(mode: str) -> FaultServer:
    """``h1``/``h1-tls``: an HTTP/1.1-only server; ``h2c``/``h2-tls``: HTTP/2."""
    return FaultServer(tls=mode.endswith("tls"), http2=mode.startswith("h2"))


def client_for(server: FaultServer, **options: Any) -> trio_retry.Client:
    """A client speaking the server's protocol: TLS trusting its CA, or h2c prior knowledge."""
    options.setdefault("retry", FAST)
    options.setdefault("http2", server.http2)
    if server.tls:
        options.setdefault("ssl_context", server.client_ssl_context())
    else:
        options.setdefault("http2_prior_knowledge", server.http2)
    return trio_retry.Client(**options)


@pytest.fixture(params=MODES)
async def any_server(request: pytest.FixtureRequest, nursery: trio.Nursery) -> FaultServer:
    server = server_for(str(request.param))
    await nursery.start(server.serve)
    return server


@pytest.fixture(params=["h1", "h1-tls"])
async def h1_server(request: pytest.FixtureRequest, nursery: trio.Nursery) -> FaultServer:
    server = server_for(str(request.param))
    await nursery.start(server.serve)
    return server


@pytest.fixture(params=["h2c", "h2-tls"])
async def h2_server(request: pytest.FixtureRequest, nursery: trio.Nursery) -> FaultServer:
    server = server_for(str(request.param))
    await nursery.start(server.serve)
    return server
