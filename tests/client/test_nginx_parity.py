"""The round-two transports against a server we did not write: nginx, started by the test on
loopback from a generated config, counting what its own access log says it executed.

- mutual TLS: ``ssl_verify_client on`` with a trustme client CA; ``cert=`` gets in, a client
  without a certificate is refused (nginx answers 400 and executes nothing);
- ``verify="ca.pem"`` against nginx's trustme certificate, over HTTP/1.1 and HTTP/2;
- a Unix domain socket (``listen unix:...``) with ``Client(uds=...)``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trustme

import trio_retry

from .conftest import FAST

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
pytestmark = pytest.mark.skipif(NGINX is None, reason="nginx is not installed")
LIMIT = 10


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class Nginx:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.server_ca = trustme.CA()
        self.client_ca = trustme.CA()
        self.mtls_port = _free_port()
        self.tls_port = _free_port()
        self.uds = str(root / "nginx.sock")
        self.log = root / "access.log"

    def files(self) -> None:
        cert = self.server_ca.issue_cert("127.0.0.1", "localhost")
        cert.cert_chain_pems[0].write_to_path(str(self.root / "server.crt"))
        for blob in cert.cert_chain_pems[1:]:
            blob.write_to_path(str(self.root / "server.crt"), append=True)
        cert.private_key_pem.write_to_path(str(self.root / "server.key"))
        self.client_ca.cert_pem.write_to_path(str(self.root / "client-ca.pem"))
        self.server_ca.cert_pem.write_to_path(str(self.root / "ca.pem"))
        client = self.client_ca.issue_cert("client@example.test")
        (self.root / "client.pem").write_bytes(
            b"".join(b.bytes() for b in client.cert_chain_pems) + client.private_key_pem.bytes()
        )
        tls = f"ssl_certificate {self.root}/server.crt; ssl_certificate_key {self.root}/server.key;"
        location = 'location / { return 200 "executed\\n"; }'
        (self.root / "nginx.conf").write_text(
            "worker_processes 1; daemon off;\n"
            f"pid {self.root}/nginx.pid; error_log {self.root}/error.log warn;\n"
            "events { worker_connections 64; }\n"
            "http {\n"
            "  log_format t '$server_port $request_method $request_uri $status "
            "$ssl_client_verify';\n"
            f"  access_log {self.log} t;\n"
            f"  client_body_temp_path {self.root}/tmp;\n"
            f"  server {{ listen 127.0.0.1:{self.mtls_port} ssl http2; {tls}\n"
            f"    ssl_client_certificate {self.root}/client-ca.pem; ssl_verify_client on;\n"
            f"    {location} }}\n"
            f"  server {{ listen 127.0.0.1:{self.tls_port} ssl http2; {tls} {location} }}\n"
            f"  server {{ listen unix:{self.uds}; {location} }}\n"
            "}\n"
        )

    def executed(self) -> list[str]:
        if not self.log.exists():
            return []
        return self.log.read_text().splitlines()


@pytest.fixture(scope="module")
def nginx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nginx]:
    root = tmp_path_factory.mktemp("nginx")
    os.chmod(root, 0o755)  # nginx workers run unprivileged when we are root
    (root / "tmp").mkdir()
    server = Nginx(root)
    server.files()
    proc = subprocess.Popen(
        [str(NGINX), "-p", str(root), "-c", str(root / "nginx.conf")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(server.uds):
            if proc.poll() is not None or time.monotonic() > deadline:
                error = (root / "error.log").read_text() if (root / "error.log").exists() else ""
                pytest.skip(f"nginx did not start: {error[-500:]}")
            time.sleep(0.05)
        os.chmod(server.uds, 0o777)
        yield server
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _lines(nginx: Nginx, port: int) -> list[str]:
    return [line for line in nginx.executed() if line.startswith(f"{port} ")]


async def _logged(nginx: Nginx, port: int | None, before: int, count: int) -> list[str]:
    """The log lines after ``before``, once ``count`` are there: nginx writes its access log
    line after the response has left, so the client can read it first (bounded: 100 x 20 ms)."""
    lines: list[str] = []
    for _ in range(100):
        lines = (_lines(nginx, port) if port is not None else nginx.executed())[before:]
        if len(lines) >= count:
            break
        await trio.sleep(0.02)
    return lines


@pytest.mark.parametrize("http2", [False, True], ids=["h1", "h2"])
async def test_mutual_tls_with_nginx(nginx: Nginx, http2: bool) -> None:
    before = len(_lines(nginx, nginx.mtls_port))
    url = f"https://localhost:{nginx.mtls_port}/mtls"
    async with trio_retry.Client(
        retry=FAST, http2=http2, verify=str(nginx.root / "ca.pem"),
        cert=str(nginx.root / "client.pem"),
    ) as client:  # fmt: skip
        with trio.fail_after(LIMIT):
            response = await client.get(url)
    assert (response.status, response.content) == (200, b"executed\n")
    assert response.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
    logged = await _logged(nginx, nginx.mtls_port, before, 1)
    assert logged == [f"{nginx.mtls_port} GET /mtls 200 SUCCESS"]


async def test_nginx_refuses_a_client_without_a_certificate(nginx: Nginx) -> None:
    before = len(_lines(nginx, nginx.mtls_port))
    async with trio_retry.Client(retry=FAST, verify=str(nginx.root / "ca.pem")) as client:
        with trio.fail_after(LIMIT):
            response = await client.get(f"https://localhost:{nginx.mtls_port}/mtls")
    assert response.status == 400  # nginx: "No required SSL certificate was sent"
    logged = await _logged(nginx, nginx.mtls_port, before, 1)
    assert logged == [f"{nginx.mtls_port} GET /mtls 400 NONE"]


async def test_verify_ca_path_and_a_callers_context_with_nginx(nginx: Nginx) -> None:
    url = f"https://127.0.0.1:{nginx.tls_port}/ca"
    async with trio_retry.Client(retry=FAST, verify=str(nginx.root / "ca.pem")) as client:
        with trio.fail_after(LIMIT):
            assert (await client.get(url)).http_version == "HTTP/2"
    import ssl

    context = ssl.create_default_context(cafile=str(nginx.root / "ca.pem"))
    async with trio_retry.Client(retry=FAST, verify=context) as client:
        with trio.fail_after(LIMIT):
            # No ALPN on the caller's context, and the client added none: HTTP/1.1.
            assert (await client.get(url)).http_version == "HTTP/1.1"
    async with trio_retry.Client(retry=FAST) as client:
        with trio.fail_after(LIMIT), pytest.raises(trio_retry.TLSFailed):
            await client.get(url)


async def test_unix_socket_with_nginx(nginx: Nginx) -> None:
    before = len(nginx.executed())
    async with trio_retry.Client(retry=FAST, uds=nginx.uds) as client:
        with trio.fail_after(LIMIT):
            first = await client.post("http://localhost/uds", content=b"x")
            second = await client.get("http://localhost/uds")
    assert first.content == second.content == b"executed\n"
    assert second.attempts[0].connection_reused
    lines = await _logged(nginx, None, before, 2)
    assert [line.split(" ", 1)[1] for line in lines] == ["POST /uds 200 -", "GET /uds 200 -"]
