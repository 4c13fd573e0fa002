"""The round-two transports against a server we did not write: nginx, started by the test on
loopback from a generated config (:mod:`tests.support.nginx`), counting what its own access log
says it executed.

- mutual TLS: ``ssl_verify_client on`` with a trustme client CA; ``cert=`` gets in, a client
  without a certificate is refused (nginx answers 400 and executes nothing);
- ``verify="ca.pem"`` against nginx's trustme certificate, over HTTP/1.1 and HTTP/2;
- a Unix domain socket (``listen unix:...``) with ``Client(uds=...)``.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator

import pytest
import trio
import trustme

import trio_retry
from tests.conftest import FAST
from tests.support.nginx import (
    SKIP_REASON,
    NginxConfig,
    RunningNginx,
    find_nginx,
    running_nginx,
)

LIMIT = 10
SERVERS = """
  server { listen {{host}}:{{mtls}} ssl http2; {{tls}}
    ssl_client_certificate {{workdir}}/client-ca.pem; ssl_verify_client on;
    LOCATION }
  server { listen {{host}}:{{tls_port}} ssl http2; {{tls}} LOCATION }
  server { listen {{uds}}; LOCATION }
""".replace("LOCATION", 'location / { return 200 "executed\\n"; }')


@pytest.fixture(scope="module")
def nginx() -> Iterator[RunningNginx]:
    """One nginx for the module: the mutual-TLS, TLS and Unix-socket servers above."""
    if find_nginx() is None:
        pytest.skip(SKIP_REASON)
    client_ca = trustme.CA()
    client = client_ca.issue_cert("client@example.test")
    pem = b"".join(b.bytes() for b in client.cert_chain_pems) + client.private_key_pem.bytes()
    config = NginxConfig(
        servers=SERVERS,
        listeners=("mtls", "tls_port"),
        unix_listeners=("uds",),
        files={"client-ca.pem": client_ca.cert_pem.bytes(), "client.pem": pem},
    )
    with running_nginx(config) as server:
        yield server


def _logged(
    nginx: RunningNginx, port: str | None, before: int, count: int
) -> list[tuple[int | None, str, str, int, str | None]]:
    """The log lines after the first ``before`` (of ``port``'s listener, if given), once
    ``count`` are there: nginx writes its access log line after the response has left, so the
    client can read it first (bounded by the helper)."""
    entries = nginx.log(expect=before + count).entries[before:]
    lines = [(e.server_port, e.method, e.uri, e.status, e.ssl_client_verify) for e in entries]
    return [line for line in lines if port is None or line[0] == nginx.ports[port]]


@pytest.mark.parametrize("http2", [False, True], ids=["h1", "h2"])
async def test_mutual_tls_with_nginx(nginx: RunningNginx, http2: bool) -> None:
    before = len(nginx.log())
    url = f"https://localhost:{nginx.ports['mtls']}/mtls"
    async with trio_retry.Client(
        retry=FAST, http2=http2, verify=str(nginx.workdir / "ca.pem"),
        cert=str(nginx.workdir / "client.pem"),
    ) as client:  # fmt: skip
        with trio.fail_after(LIMIT):
            response = await client.get(url)
    assert (response.status, response.content) == (200, b"executed\n")
    assert response.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
    logged = _logged(nginx, "mtls", before, 1)
    assert logged == [(nginx.ports["mtls"], "GET", "/mtls", 200, "SUCCESS")]


async def test_nginx_refuses_a_client_without_a_certificate(nginx: RunningNginx) -> None:
    before = len(nginx.log())
    async with trio_retry.Client(retry=FAST, verify=str(nginx.workdir / "ca.pem")) as client:
        with trio.fail_after(LIMIT):
            response = await client.get(f"https://localhost:{nginx.ports['mtls']}/mtls")
    assert response.status == 400  # nginx: "No required SSL certificate was sent"
    logged = _logged(nginx, "mtls", before, 1)
    assert logged == [(nginx.ports["mtls"], "GET", "/mtls", 400, "NONE")]


async def test_verify_ca_path_and_a_callers_context_with_nginx(nginx: RunningNginx) -> None:
    url = f"https://127.0.0.1:{nginx.ports['tls_port']}/ca"
    async with trio_retry.Client(retry=FAST, verify=str(nginx.workdir / "ca.pem")) as client:
        with trio.fail_after(LIMIT):
            assert (await client.get(url)).http_version == "HTTP/2"
    context = ssl.create_default_context(cafile=str(nginx.workdir / "ca.pem"))
    async with trio_retry.Client(retry=FAST, verify=context) as client:
        with trio.fail_after(LIMIT):
            # No ALPN on the caller's context, and the client added none: HTTP/1.1.
            assert (await client.get(url)).http_version == "HTTP/1.1"
    async with trio_retry.Client(retry=FAST) as client:
        with trio.fail_after(LIMIT), pytest.raises(trio_retry.TLSFailed):
            await client.get(url)


async def test_unix_socket_with_nginx(nginx: RunningNginx) -> None:
    before = len(nginx.log())
    async with trio_retry.Client(retry=FAST, uds=nginx.unix_socket("uds")) as client:
        with trio.fail_after(LIMIT):
            first = await client.post("http://localhost/uds", content=b"x")
            second = await client.get("http://localhost/uds")
    assert first.content == second.content == b"executed\n"
    assert second.attempts[0].connection_reused
    lines = _logged(nginx, None, before, 2)
    assert [line[1:] for line in lines] == [("POST", "/uds", 200, None), ("GET", "/uds", 200, None)]
