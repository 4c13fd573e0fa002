"""pytest fixtures for testing code that uses trio_retry (registered by the package's entry
point ``pytest11: trio_retry``; see docs/testing.md).

Inert unless used: loading the plugin defines fixtures and nothing else (no server starts, no
socket opens, trustme is not imported) until a test asks for one. The fixtures are async, so
they need pytest-trio (``trio_mode = true``, or ``@pytest.mark.trio`` on the test).

Servers:

* ``fault_server``: a started cleartext `FaultServer` (HTTP/1.1, and h2c for a client with
  prior knowledge);
* ``tls_fault_server``: a started `FaultServer` over TLS (ALPN ``h2`` or ``http/1.1``; needs
  trustme, the ``testing`` extra);
* ``mock_transport``: a `MockTransport` over a fresh, unstarted `FaultServer` (no socket).

Clients bound to them (``base_url`` set, so calls take paths):

* ``fault_client`` (HTTP/1.1), ``h2c_fault_client`` (HTTP/2 with prior knowledge),
  ``tls_fault_client`` (trusts the server's throwaway CA; HTTP/2 through ALPN);
* ``mock_client`` (``base_url="http://testserver"``, over ``mock_transport``).

Options come from two fixtures a test module or conftest.py may override:
``fault_server_options`` (keyword arguments of `FaultServer`, e.g. ``{"strict": True}``) and
``trio_retry_client_options`` (keyword arguments of `trio_retry.Client`, e.g. a fast
``retry=`` policy). With ``strict`` the fixtures fail the test whose scripted actions were not
all used: at teardown, with `UnusedScriptError` listing them.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

from trio_retry import Client  # the public facade, as any user's fixture would

from ._mock import MockTransport
from ._server import FaultServer

if sys.version_info < (3, 11):  # builtin from 3.11; trio itself needs the backport on 3.10
    from exceptiongroup import BaseExceptionGroup

__all__ = [
    "MOCK_BASE_URL",
    "fault_client",
    "fault_server",
    "fault_server_options",
    "h2c_fault_client",
    "mock_client",
    "mock_transport",
    "tls_fault_client",
    "tls_fault_server",
    "trio_retry_client_options",
]

#: The base URL of ``mock_client`` (any host works with a MockTransport; none is resolved).
MOCK_BASE_URL = "http://testserver"


@pytest.fixture
def fault_server_options() -> dict[str, Any]:
    """Keyword arguments for the fixtures' `FaultServer` (override to change them)."""
    return {}


@pytest.fixture
def trio_retry_client_options() -> dict[str, Any]:
    """Keyword arguments for the fixtures' `trio_retry.Client` (override to change them)."""
    return {}


def _sole_error(group: BaseExceptionGroup[BaseException]) -> Exception | None:
    """The one leaf of `group` (however nested) when it is an `Exception`, else None."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        exc = pending.pop()
        if isinstance(exc, BaseExceptionGroup):
            pending.extend(exc.exceptions)
        else:
            leaves.append(exc)
    return leaves[0] if len(leaves) == 1 and isinstance(leaves[0], Exception) else None


@pytest.fixture
async def fault_server(fault_server_options: dict[str, Any]) -> AsyncIterator[FaultServer]:
    """A cleartext `FaultServer` serving on loopback (port 0) for the test's duration."""
    server = FaultServer(**fault_server_options)
    # serve() runs in the fixture's own nursery (pytest-trio allows a yield inside one),
    # cancelled at teardown; a strict server fails there, as serve checks its script. The
    # nursery's group around serve's one error is unwrapped: the report shows the error
    # (pytest-trio's own nursery still wraps what a fixture raises in one group).
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve)
            yield server
            nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        error = _sole_error(group)
        if error is None:
            raise
        raise error from None


@pytest.fixture
async def tls_fault_server(fault_server_options: dict[str, Any]) -> AsyncIterator[FaultServer]:
    """A TLS `FaultServer` (trustme certificate for 127.0.0.1, ::1 and localhost)."""
    server = FaultServer(**{**fault_server_options, "tls": True})
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve)
            yield server
            nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:  # as in fault_server
        error = _sole_error(group)
        if error is None:
            raise
        raise error from None


@pytest.fixture
async def mock_transport(fault_server_options: dict[str, Any]) -> AsyncIterator[MockTransport]:
    """A `MockTransport` over a fresh `FaultServer` (not listening: no socket, no port)."""
    transport = MockTransport(FaultServer(**fault_server_options))
    yield transport
    if transport.server.strict:
        transport.server.assert_all_used()


@pytest.fixture
async def fault_client(
    fault_server: FaultServer, trio_retry_client_options: dict[str, Any]
) -> AsyncIterator[Client]:
    """A `trio_retry.Client` with ``base_url=fault_server.url`` (HTTP/1.1)."""
    async with Client(base_url=fault_server.url, **trio_retry_client_options) as client:
        yield client


@pytest.fixture
async def h2c_fault_client(
    fault_server: FaultServer, trio_retry_client_options: dict[str, Any]
) -> AsyncIterator[Client]:
    """Like ``fault_client``, speaking HTTP/2 with prior knowledge (h2c)."""
    options = {"http2_prior_knowledge": True, **trio_retry_client_options}
    async with Client(base_url=fault_server.url, **options) as client:
        yield client


@pytest.fixture
async def tls_fault_client(
    tls_fault_server: FaultServer, trio_retry_client_options: dict[str, Any]
) -> AsyncIterator[Client]:
    """A `trio_retry.Client` trusting ``tls_fault_server``'s CA, ``base_url`` its URL."""
    options = {"ssl_context": tls_fault_server.client_ssl_context(), **trio_retry_client_options}
    async with Client(base_url=tls_fault_server.url, **options) as client:
        yield client


@pytest.fixture
async def mock_client(
    mock_transport: MockTransport, trio_retry_client_options: dict[str, Any]
) -> AsyncIterator[Client]:
    """A `trio_retry.Client` over ``mock_transport``, ``base_url="http://testserver"``."""
    options = {"base_url": MOCK_BASE_URL, **trio_retry_client_options}
    async with Client(transport=mock_transport, **options) as client:
        yield client
