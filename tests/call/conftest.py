"""Fixtures: a real FaultServer on loopback (HTTP/1.1, cleartext)."""

from __future__ import annotations

import pytest
import trio

from trio_retry.testing import FaultServer


@pytest.fixture
async def server(nursery: trio.Nursery) -> FaultServer:
    fault_server = FaultServer(http2=False)
    await nursery.start(fault_server.serve)
    return fault_server
