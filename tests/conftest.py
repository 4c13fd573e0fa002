"""What every test directory shares (STYLE habit 21: support written once).

- :data:`FAST`: retries fast enough that three attempts take milliseconds;
- :data:`LIMIT`: the bound, in seconds, on any one test's network activity;
- :data:`MODES` and :func:`server_for`: a `FaultServer` in each of the four protocol modes;
- :func:`client_for`: a client that speaks a server's protocol (TLS trusting its CA, or h2c
  with prior knowledge), retrying :data:`FAST` unless told otherwise.

Fixtures, each a `FaultServer` serving on loopback for the test's duration: ``server``
(HTTP/1.1, cleartext), ``any_server`` (each of :data:`MODES`), ``h1_server`` (``h1``,
``h1-tls``) and ``h2_server`` (``h2c``, ``h2-tls``). A directory's own conftest or a module
overrides one by its name (and may take the shared one as its argument).

The HTTP/2 and HTTP/3 frame builders are in ``tests/support/h2_frames.py`` and
``trio_retry.testing``; the real servers in ``tests/support/fixtures.py``.
"""

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
    """A client speaking the server's protocol: TLS trusting its CA, or h2c prior knowledge;
    ``retry`` :data:`FAST` unless ``options`` say otherwise."""
    options.setdefault("retry", FAST)
    options.setdefault("http2", server.http2)
    if server.tls:
        options.setdefault("ssl_context", server.client_ssl_context())
    else:
        options.setdefault("http2_prior_knowledge", server.http2)
    return trio_retry.Client(**options)


async def _serving(nursery: trio.Nursery, mode: str) -> FaultServer:
    server = server_for(mode)
    await nursery.start(server.serve)
    return server


@pytest.fixture
async def server(nursery: trio.Nursery) -> FaultServer:
    """An HTTP/1.1 cleartext fault server."""
    return await _serving(nursery, "h1")


@pytest.fixture(params=MODES)
async def any_server(request: pytest.FixtureRequest, nursery: trio.Nursery) -> FaultServer:
    return await _serving(nursery, str(request.param))


@pytest.fixture(params=["h1", "h1-tls"])
async def h1_server(request: pytest.FixtureRequest, nursery: trio.Nursery) -> FaultServer:
    return await _serving(nursery, str(request.param))


@pytest.fixture(params=["h2c", "h2-tls"])
async def h2_server(request: pytest.FixtureRequest, nursery: trio.Nursery) -> FaultServer:
    return await _serving(nursery, str(request.param))
