"""Fixtures for the FaultServer tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import trio

from trio_retry.testing import FaultServer

from .raw import close_opened

StartServer = Callable[..., Awaitable[FaultServer]]


@pytest.fixture
async def start_server(nursery: trio.Nursery) -> AsyncIterator[StartServer]:
    """``await start_server(**kwargs)``: a FaultServer serving in the test's nursery.

    Raw client connections the test opened are closed afterwards.
    """

    async def start(**kwargs: Any) -> FaultServer:
        server = FaultServer(**kwargs)
        url = await nursery.start(server.serve)
        assert url == server.url
        return server

    try:
        yield start
    finally:
        await close_opened()


@pytest.fixture(params=[False, True], ids=["clear", "tls"])
def tls(request: pytest.FixtureRequest) -> bool:
    """Run the test over cleartext and over TLS."""
    return bool(request.param)
