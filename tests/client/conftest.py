"""Fixtures: a real FaultServer on loopback and a client with fast, deterministic backoff."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio

import trio_retry
from tests.conftest import FAST
from trio_retry.testing import FaultServer


@pytest.fixture
async def tls_server(nursery: trio.Nursery) -> FaultServer:
    """An HTTP/1.1 fault server over TLS (trustme CA)."""
    fault_server = FaultServer(tls=True, http2=False)
    await nursery.start(fault_server.serve)
    return fault_server


@pytest.fixture
async def client() -> AsyncIterator[trio_retry.Client]:
    async with trio_retry.Client(retry=FAST) as c:
        yield c
