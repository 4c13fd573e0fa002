"""Fixtures: a real FaultServer on loopback (HTTP/1.1, cleartext); and, for the tests of
``Client()``'s defaults, a patient server and a default client in each protocol."""

from __future__ import annotations

from typing import Any

import pytest
import trio

import trio_retry
from trio_retry.testing import FaultServer

#: Virtual seconds: far beyond any bound under test (the servers' bounds, the safety nets).
FOREVER = 1e6
#: The protocols: HTTP/1.1, h2c with prior knowledge, HTTP/2 over TLS (ALPN).
MODES = ("h1", "h2c", "h2-tls")


def patient_server(mode: str) -> FaultServer:
    """A server in protocol ``mode`` whose own idle, read and write bounds never fire first."""
    return FaultServer(
        tls=mode == "h2-tls",
        http2=mode != "h1",
        idle_timeout=FOREVER,
        read_timeout=FOREVER,
        write_timeout=FOREVER,
    )


def default_client(server: FaultServer, mode: str, **options: Any) -> trio_retry.Client:
    """``Client()`` with its defaults; only the protocol (and ``options``) chosen."""
    if mode == "h2c":
        options["http2_prior_knowledge"] = True
    elif mode == "h2-tls":
        options["ssl_context"] = server.client_ssl_context()
    return trio_retry.Client(**options)


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    """Each protocol of :data:`MODES` in turn."""
    return str(request.param)


@pytest.fixture
async def patient(mode: str, nursery: trio.Nursery) -> FaultServer:
    """A :func:`patient_server` in protocol ``mode``, serving."""
    fault_server = patient_server(mode)
    await nursery.start(fault_server.serve)
    return fault_server
