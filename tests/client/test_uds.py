"""Unix domain sockets (SPEC §12): Client(uds=...) for HTTP/1.1, h2c and TLS, against the
FaultServer's own connection handler served on a Unix socket; connect failures are NOT_SENT."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import trio

import trio_retry
from tests.conftest import FAST
from trio_retry import Evidence, FailureCategory, Stage
from trio_retry.testing import FaultServer, Respond

LIMIT = 10


async def _serve_unix(
    server: FaultServer, path: str, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """The FaultServer's per-connection handling (scripts, recording), on a Unix socket."""
    listener = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    await listener.bind(path)
    listener.listen()
    task_status.started()
    count = 0
    with listener:
        async with trio.open_nursery() as nursery:
            while True:
                sock, _ = await listener.accept()
                count += 1
                nursery.start_soon(server._serve_connection, trio.SocketStream(sock), count)


async def _server(
    nursery: trio.Nursery, tmp_path: Path, **options: bool
) -> tuple[FaultServer, str]:
    server = FaultServer(**options)
    server.default = Respond(200, body=b"over unix")
    path = str(tmp_path / "api.sock")
    await nursery.start(_serve_unix, server, path)
    return server, path


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_http11_over_a_unix_socket(
    nursery: trio.Nursery, tmp_path: Path, method: str
) -> None:
    server, path = await _server(nursery, tmp_path, http2=False)
    async with trio_retry.Client(retry=FAST, uds=path) as client:
        with trio.fail_after(LIMIT):
            first = await client.request(method, "http://localhost/v1/info", content=b"x")
            second = await client.request(method, "http://localhost/v1/info", content=b"x")
    assert first.content == second.content == b"over unix"
    assert first.http_version == "HTTP/1.1"
    assert [(r.method, r.path, r.executed) for r in server.requests] == [
        (method, "/v1/info", True)
    ] * 2
    assert second.attempts[0].connection_reused  # pooled like a TCP connection


async def test_h2c_over_a_unix_socket(nursery: trio.Nursery, tmp_path: Path) -> None:
    server, path = await _server(nursery, tmp_path, http2=True)
    async with trio_retry.Client(retry=FAST, uds=path, http2_prior_knowledge=True) as client:
        with trio.fail_after(LIMIT):
            response = await client.get("http://localhost/")
    assert (response.http_version, response.content) == ("HTTP/2", b"over unix")
    assert server.requests[0].http_version == "HTTP/2"


async def test_tls_over_a_unix_socket_checks_the_urls_host(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server, path = await _server(nursery, tmp_path, tls=True, http2=True)
    async with trio_retry.Client(retry=FAST, uds=path, verify=server.client_ssl_context()) as c:
        with trio.fail_after(LIMIT):
            response = await c.get("https://localhost/")
            assert (response.http_version, response.content) == ("HTTP/2", b"over unix")
            with pytest.raises(trio_retry.TLSFailed) as info:  # not a name on the certificate
                await c.get("https://other.example/")
    assert info.value.category is FailureCategory.TLS_CERTIFICATE


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_connect_failure_is_not_sent(tmp_path: Path, method: str) -> None:
    missing = str(tmp_path / "nobody.sock")
    stale = tmp_path / "stale.sock"  # a socket file nobody listens on
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(stale))
    for path in (missing, str(stale)):
        async with trio_retry.Client(retry=FAST, uds=path) as client:
            with trio.fail_after(LIMIT), pytest.raises(trio_retry.ConnectFailed) as info:
                await client.request(method, "http://localhost/", content=b"x")
        # Not ambiguous even for POST: nothing can have left.
        assert info.value.evidence is Evidence.NOT_SENT
        assert {(a.stage, a.evidence) for a in info.value.attempts} == {
            (Stage.CONNECT, Evidence.NOT_SENT)
        }
        assert len(info.value.attempts) == FAST.max_attempts
        assert "Unix socket" in str(info.value)


def test_bad_uds_options() -> None:
    with pytest.raises(TypeError, match="uds"):
        trio_retry.Client(uds=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cannot be combined"):
        trio_retry.Client(uds="/tmp/x.sock", proxy="http://127.0.0.1:3128")
