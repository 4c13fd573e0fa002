"""HTTP/3 trusts exactly what TCP trusts (SPEC §16, §12): the client's ``ssl.SSLContext`` checks
every QUIC server, never certifi's bundle behind the caller's back; what a context sets that
QUIC cannot honour is refused; a certificate QUIC refuses is ``TLS_CERTIFICATE``, marks the
origin and goes to TCP, where the same context decides. Against FaultServer(http3=True) on
loopback with trustme certificates; certificates trustme does not make (a dNSName holding an
IP literal, a leaf without an authority key identifier) are made here with ``cryptography``.

"certifi's bundle" is played by a file holding the server's authority (``certifi.where`` is
pointed at it): a server certificate the caller never trusted but certifi would.
"""

from __future__ import annotations

import datetime
import ssl
from collections.abc import Callable
from pathlib import Path

import certifi
import pytest
import trio
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from OpenSSL import crypto

from trio_retry import (
    Client,
    Evidence,
    FailureCategory,
    RequestFailed,
    RetryPolicy,
    Upstream,
)
from trio_retry._url import Origin
from trio_retry.testing import FaultServer

ONE = RetryPolicy(max_attempts=1)


def present(server: FaultServer, chain_pem: bytes, key_pem: bytes, tmp: Path) -> None:
    """Make ``server`` (before ``serve``) present ``chain_pem`` over TCP and QUIC alike."""
    certs = server._certs
    assert certs is not None
    (tmp / "server.pem").write_bytes(chain_pem)
    (tmp / "server.key").write_bytes(key_pem)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp / "server.pem", tmp / "server.key")
    context.set_alpn_protocols(["h2", "http/1.1"])
    certs.server_context, certs.cert_pem, certs.key_pem = context, chain_pem, key_pem


def leaf(
    ca: trustme.CA, names: list[x509.GeneralName], *, authority_key_id: bool = True
) -> tuple[bytes, bytes]:
    """A server certificate ``ca`` signs, with exactly ``names`` as its subjectAltName;
    ``(chain PEM, key PEM)``."""
    issuer = x509.load_pem_x509_certificate(ca.cert_pem.bytes())
    issuer_key = serialization.load_pem_private_key(ca.private_key_pem.bytes(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "test")]))
        .issuer_name(issuer.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
    )
    if authority_key_id:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.public_key()),  # type: ignore[arg-type]
            critical=False,
        )
    cert = builder.sign(issuer_key, hashes.SHA256())  # type: ignore[arg-type]
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def hashed_directory(ca: trustme.CA, path: Path) -> Path:
    """A CA directory as OpenSSL reads it (``capath``): ``<subject hash>.0`` per certificate."""
    path.mkdir()
    pem = ca.cert_pem.bytes()
    digest = crypto.load_certificate(crypto.FILETYPE_PEM, pem).subject_name_hash()
    (path / f"{digest:08x}.0").write_bytes(pem)
    return path


@pytest.fixture
def certifi_trusts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[[bytes], None]:
    """Point certifi's bundle at a file holding the given PEM."""

    def trust(pem: bytes) -> None:
        bundle = tmp_path / "certifi.pem"
        bundle.write_bytes(pem)
        monkeypatch.setattr(certifi, "where", lambda: str(bundle))

    return trust


def h3_client(server: FaultServer, context: ssl.SSLContext, **options: object) -> Client:
    return Client(
        upstreams={server.url: Upstream(http3=True)},
        ssl_context=context,
        retry=ONE,
        **options,  # type: ignore[arg-type]
    )


def localhost_client(url: str, context: ssl.SSLContext) -> Client:
    """A client reaching ``url`` (``https://localhost:PORT/...``) over HTTP/3 first."""
    origin = "/".join(url.split("/", 3)[:3])  # an upstreams key is an origin, without a path
    return Client(upstreams={origin: Upstream(http3=True)}, ssl_context=context, retry=ONE)


def broken(client: Client, server: FaultServer) -> bool:
    routes = client._rt.connector.quic_routes
    assert routes is not None
    return routes.broken_until(Origin("https", "127.0.0.1", server.port)) is not None


async def refused(client: Client, url: str) -> RequestFailed:
    with pytest.raises(RequestFailed) as caught:
        await client.get(url)
    return caught.value


async def test_a_private_ca_in_a_hashed_directory_is_trusted_over_quic(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = FaultServer(tls=True, http3=True)
    await nursery.start(server.serve)
    ca = server._certs._ca  # type: ignore[union-attr]
    context = ssl.create_default_context(capath=str(hashed_directory(ca, tmp_path / "cas")))
    with trio.fail_after(20):
        async with h3_client(server, context) as client:
            response = await client.get(f"{server.url}/capath")
    assert [a.http_version for a in response.attempts] == ["HTTP/3"]
    assert [r.http_version for r in server.requests] == ["HTTP/3"]


async def test_a_capath_context_never_trusts_certifi_over_quic(
    nursery: trio.Nursery, tmp_path: Path, certifi_trusts: Callable[[bytes], None]
) -> None:
    """The caller trusts only its private CA (a hashed directory); the server's authority is
    one certifi holds. TCP refuses it, so QUIC must: before, the CA list QUIC got from the
    context was empty and aioquic fell back to certifi."""
    server = FaultServer(tls=True, http3=True)
    await nursery.start(server.serve)
    certifi_trusts(server.ca_pem)
    private = trustme.CA()
    context = ssl.create_default_context(capath=str(hashed_directory(private, tmp_path / "cas")))
    with trio.fail_after(20):
        async with h3_client(server, context) as client:
            failed = await refused(client, f"{server.url}/secret")
            assert broken(client, server)
    quic, tcp = failed.attempts
    assert (quic.category, quic.evidence) == (FailureCategory.TLS_CERTIFICATE, Evidence.NOT_SENT)
    assert "QUIC handshake" in str(quic.error)
    assert "unable to get local issuer certificate" in str(quic.error)
    assert tcp.category is FailureCategory.TLS_CERTIFICATE
    assert "QUIC" not in str(tcp.error)
    assert server.requests == []


async def test_an_empty_context_trusts_nothing_over_quic(
    nursery: trio.Nursery, certifi_trusts: Callable[[bytes], None]
) -> None:
    server = FaultServer(tls=True, http3=True)
    await nursery.start(server.serve)
    certifi_trusts(server.ca_pem)
    empty = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies, and trusts no CA at all
    with trio.fail_after(20):
        async with h3_client(server, empty) as client:
            failed = await refused(client, f"{server.url}/secret")
    assert [a.category for a in failed.attempts] == [FailureCategory.TLS_CERTIFICATE] * 2
    assert server.requests == []


@pytest.mark.parametrize(
    ("flag", "authority_key_id", "words"),
    [
        (ssl.VERIFY_X509_STRICT, False, "Missing Authority Key Identifier"),
        (ssl.VERIFY_CRL_CHECK_LEAF, True, "unable to get certificate CRL"),
    ],
)
async def test_the_contexts_verify_flags_reach_quic(
    nursery: trio.Nursery,
    tmp_path: Path,
    flag: ssl.VerifyFlags,
    authority_key_id: bool,
    words: str,
) -> None:
    """A chain the flag refuses (strict: a leaf without an authority key identifier; CRL
    checks: no CRL for the leaf) is refused over QUIC as over TCP."""
    server = FaultServer(tls=True, http3=True)
    ca = server._certs._ca  # type: ignore[union-attr]
    names: list[x509.GeneralName] = [x509.DNSName("localhost")]
    present(server, *leaf(ca, names, authority_key_id=authority_key_id), tmp_path)
    await nursery.start(server.serve)
    lenient = server.client_ssl_context()
    strict = server.client_ssl_context()
    strict.verify_flags |= flag
    url = f"https://localhost:{server.port}/flag"
    with trio.fail_after(20):
        async with localhost_client(url, lenient) as client:  # without the flag: fine
            fine = await client.get(url)
        async with localhost_client(url, strict) as client:
            failed = await refused(client, url)
    assert fine.http_version == "HTTP/3"
    quic, tcp = failed.attempts
    assert quic.category is FailureCategory.TLS_CERTIFICATE
    assert "QUIC handshake" in str(quic.error)
    assert words in str(quic.error)
    assert tcp.category is FailureCategory.TLS_CERTIFICATE
    assert [r.path for r in server.requests] == ["/flag"]  # the lenient client's only


async def test_a_san_with_an_ip_literal_as_a_dns_name_fails_as_tcp_fails(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """dNSName entries ``127.0.0.1`` and ``*.0.0.1`` (invalid patterns) made aioquic's own
    check raise inside ``receive_datagram``: "internal error", the origin never marked, no
    TCP. Now the context decides, as over TCP: refused for 127.0.0.1 (no iPAddress entry),
    the origin marked broken, TCP refuses it too."""
    server = FaultServer(tls=True, http3=True)
    ca = server._certs._ca  # type: ignore[union-attr]
    names: list[x509.GeneralName] = [x509.DNSName("127.0.0.1"), x509.DNSName("*.0.0.1")]
    present(server, *leaf(ca, names), tmp_path)
    await nursery.start(server.serve)
    with trio.fail_after(20):
        async with h3_client(server, server.client_ssl_context()) as client:
            failed = await refused(client, f"{server.url}/hostile")
            assert broken(client, server)
            again = await refused(client, f"{server.url}/hostile")
    quic, tcp = failed.attempts
    assert (quic.category, quic.evidence) == (FailureCategory.TLS_CERTIFICATE, Evidence.NOT_SENT)
    assert "QUIC handshake" in str(quic.error)
    assert "internal error" not in str(quic.error)
    assert "IP address mismatch" in str(quic.error)
    assert tcp.category is FailureCategory.TLS_CERTIFICATE
    # Marked broken: the next call goes straight to TCP.
    assert len(again.attempts) == 1
    assert "QUIC" not in str(again.attempts[0].error)
    assert server.requests == []


async def test_a_hostile_san_beside_a_valid_name_is_accepted_as_over_tcp(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = FaultServer(tls=True, http3=True)
    ca = server._certs._ca  # type: ignore[union-attr]
    names: list[x509.GeneralName] = [x509.DNSName("*.0.0.1"), x509.DNSName("localhost")]
    present(server, *leaf(ca, names), tmp_path)
    await nursery.start(server.serve)
    url = f"https://localhost:{server.port}/named"
    with trio.fail_after(20):
        async with localhost_client(url, server.client_ssl_context()) as client:
            response = await client.get(url)
    assert [a.http_version for a in response.attempts] == ["HTTP/3"]


def write_client_certificate(tmp: Path, password: bytes | None) -> tuple[str, str]:
    """A client certificate and its key (encrypted with ``password`` if given), as files."""
    ca = trustme.CA()
    cert = ca.issue_cert("client@example")
    key = serialization.load_pem_private_key(cert.private_key_pem.bytes(), password=None)
    encryption: serialization.KeySerializationEncryption = (
        serialization.NoEncryption()
        if password is None
        else serialization.BestAvailableEncryption(password)
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )
    (tmp / "client.pem").write_bytes(cert.cert_chain_pems[0].bytes())
    (tmp / "client.key").write_bytes(key_pem)
    return str(tmp / "client.pem"), str(tmp / "client.key")


@pytest.mark.parametrize("encrypted", [False, True])
async def test_a_client_certificate_with_a_password_goes_over_quic(
    nursery: trio.Nursery, tmp_path: Path, encrypted: bool
) -> None:
    """``cert=(crt, key, password)`` that loads over TCP is presented over QUIC too. A
    password for a key that is not encrypted is ignored, as OpenSSL ignores it: aioquic
    refused it with a bare ValueError quoting the password, at the first request."""
    server = FaultServer(tls=True, http3=True)
    await nursery.start(server.serve)
    crt, key = write_client_certificate(tmp_path, b"s3cr3t-pw" if encrypted else None)
    (tmp_path / "ca.pem").write_bytes(server.ca_pem)
    client = Client(
        upstreams={server.url: Upstream(http3=True)},
        verify=str(tmp_path / "ca.pem"),
        cert=(crt, key, "s3cr3t-pw"),
        retry=ONE,
    )
    with trio.fail_after(20):
        async with client:
            response = await client.get(f"{server.url}/mtls")
    assert [a.http_version for a in response.attempts] == ["HTTP/3"]
    trust = client._rt.connector._quic_trust
    assert trust is not None
    assert trust.client_certificate is not None
    presented = trust.client_certificate.certificate.public_bytes(serialization.Encoding.PEM)
    assert presented == Path(crt).read_bytes()


def test_a_client_key_quic_cannot_use_is_refused_at_construction_without_its_password(
    tmp_path: Path,
) -> None:
    """What the QUIC side cannot load is a ValueError naming ``cert=`` when the client is
    built, never quoting the password, with no exception chained that would."""
    from trio_retry._wire.http3.quic import quic_trust

    crt, key = write_client_certificate(tmp_path, b"right-password")
    context = ssl.create_default_context()
    for cert in ((crt, key, "wrong-password"), (crt, key)):
        with pytest.raises(ValueError, match="cert=") as caught:
            quic_trust(context, cert, owns_context=True)
        error = caught.value
        assert "password" in str(error)  # says what was wrong ...
        assert "wrong-password" not in str(error)  # ... never what it was
        assert error.__context__ is None
        assert error.__cause__ is None


async def test_aioquic_failing_on_a_handshake_datagram_falls_back_to_tcp(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever aioquic raises on a datagram during the handshake is the handshake's failure:
    the origin is marked and the request goes over TCP (it was "internal error", unmarked,
    and the same QUIC try again)."""
    from trio_retry._wire.http3.backend import CheckedQuicConnection

    def broken_datagram(*args: object, **kwargs: object) -> None:
        raise RuntimeError("aioquic could not read this")

    # (the client's connection only: the server's is aioquic's own class)
    monkeypatch.setattr(CheckedQuicConnection, "receive_datagram", broken_datagram)
    server = FaultServer(tls=True, http3=True)
    await nursery.start(server.serve)
    with trio.fail_after(20):
        async with h3_client(server, server.client_ssl_context()) as client:
            response = await client.get(f"{server.url}/any")
            assert broken(client, server)
    quic, tcp = response.attempts
    assert quic.category is FailureCategory.TLS_HANDSHAKE
    assert "aioquic could not read this" in str(quic.error)
    assert (tcp.http_version, response.status) == ("HTTP/2", 200)
