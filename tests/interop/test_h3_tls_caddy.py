"""HTTP/3's TLS against caddy (quic-go), started by each test with a TLS policy of its own:
a handshake caddy refuses is named in words (issue #38 row 9: an IP-literal origin, which gets
no SNI, against a policy that matches SNI; it read "error 0x150"), ``default_sni`` is what such
an origin needs, and a client certificate caddy requires is presented over QUIC when given as
``cert=``. What ran is read from caddy's access log."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trustme

import trio_retry
from tests.support.caddy import CaddyUnavailable, RunningCaddy, start_caddy
from trio_retry import Client, RetryPolicy, Upstream

ONE = RetryPolicy(max_attempts=1)


@contextmanager
def caddy_with(tls_policy: dict[str, Any]) -> Iterator[RunningCaddy]:
    try:
        server = start_caddy(tls_policy=tls_policy)
    except CaddyUnavailable as exc:
        pytest.skip(str(exc))
    try:
        yield server
    finally:
        server.stop()


def h3_client(url: str, **options: Any) -> Client:
    origin = "/".join(url.split("/", 3)[:3])  # an upstreams key is an origin, without a path
    return Client(upstreams={origin: Upstream(http3=True)}, retry=ONE, **options)


async def test_a_refused_handshake_is_named_in_words() -> None:
    """caddy's policy matches SNI ``localhost``; ``https://127.0.0.1`` sends no SNI (RFC 6066
    §3), so caddy ends both handshakes with TLS alert 80."""
    with caddy_with({"match": {"sni": ["localhost"]}}) as caddy:
        url = caddy.url("/get")
        with trio.fail_after(20):
            async with h3_client(url, ssl_context=caddy.ssl_context()) as client:
                with pytest.raises(trio_retry.RequestFailed) as caught:
                    await client.get(url)
    quic, tcp = caught.value.attempts
    assert "TLS alert 80 (internal error)" in str(quic.error)
    assert "0x150" not in str(quic.error)
    assert quic.category is trio_retry.FailureCategory.TLS_HANDSHAKE
    assert tcp.category is trio_retry.FailureCategory.TLS_HANDSHAKE


async def test_default_sni_lets_an_ip_literal_origin_use_http3() -> None:
    with caddy_with({"default_sni": "localhost"}) as caddy:
        url = caddy.url("/get")
        with trio.fail_after(20):
            async with h3_client(url, ssl_context=caddy.ssl_context()) as client:
                response = await client.get(url)
        log = caddy.log(expect=1)
    assert [a.http_version for a in response.attempts] == ["HTTP/3"]
    assert log.protocols() == ["HTTP/3.0"]


def client_certificate(tmp: Path) -> tuple[trustme.CA, str, str]:
    """A CA for clients and a certificate it signed (key unencrypted), as files."""
    ca = trustme.CA()
    cert = ca.issue_cert("client@example")
    (tmp / "clients-ca.pem").write_bytes(ca.cert_pem.bytes())
    (tmp / "client.pem").write_bytes(cert.cert_chain_pems[0].bytes())
    (tmp / "client.key").write_bytes(cert.private_key_pem.bytes())
    return ca, str(tmp / "client.pem"), str(tmp / "client.key")


async def test_a_required_client_certificate_is_presented_over_quic(tmp_path: Path) -> None:
    """``cert=(crt, key, password)`` (a password for a key that is not encrypted: OpenSSL
    ignores it, and so does QUIC now; it was a bare ValueError quoting it)."""
    _, crt, key = client_certificate(tmp_path)
    policy = {
        "client_authentication": {
            "trusted_ca_certs_pem_files": [str(tmp_path / "clients-ca.pem")],
            "mode": "require_and_verify",
        }
    }
    with caddy_with(policy) as caddy:
        (tmp_path / "server-ca.pem").write_bytes(caddy.ca_pem)
        url = caddy.url("/get")
        with trio.fail_after(20):
            async with h3_client(
                url, verify=str(tmp_path / "server-ca.pem"), cert=(crt, key, "unused-pw")
            ) as client:
                response = await client.get(url)
        log = caddy.log(expect=1)
    assert [a.http_version for a in response.attempts] == ["HTTP/3"]
    assert log.protocols() == ["HTTP/3.0"]


async def test_a_client_certificate_inside_a_callers_context_goes_over_tcp(
    tmp_path: Path,
) -> None:
    """Python cannot read a client certificate back from a context: asked for one, the QUIC
    handshake is given up in words and TCP, which presents it, serves the request."""
    _, crt, key = client_certificate(tmp_path)
    policy = {
        "client_authentication": {
            "trusted_ca_certs_pem_files": [str(tmp_path / "clients-ca.pem")],
            "mode": "require_and_verify",
        }
    }
    with caddy_with(policy) as caddy:
        context = caddy.ssl_context()
        context.load_cert_chain(crt, key)
        url = caddy.url("/get")
        with trio.fail_after(20):
            async with h3_client(url, ssl_context=context) as client:
                response = await client.get(url)
        log = caddy.log(expect=1)
    quic, tcp = response.attempts
    assert "client certificate" in str(quic.error)
    assert "cert=" in str(quic.error)
    assert tcp.http_version == "HTTP/2"
    assert log.protocols() == ["HTTP/2.0"]
