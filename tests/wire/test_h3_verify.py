"""``_wire/http3/verify.py`` against the real thing: for each context, chain and host name, the
verdict of :func:`check_chain` (the context's client handed a stand-in server's first flight)
is the verdict of a whole TLS handshake of the same context with a server really holding the
chain and its key (both ends in memory). A stand-in that encoded its flight wrongly would show
here as an acceptance the real handshake refuses, or a different reason."""

from __future__ import annotations

import datetime
import ssl
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization

from trio_retry._wire.http3.verify import check_chain

CA = trustme.CA()
OTHER_CA = trustme.CA()
GOOD = CA.issue_cert("localhost", "127.0.0.1")
EXPIRED = CA.issue_cert(
    "localhost", not_after=datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(1)
)
STRANGER = OTHER_CA.issue_cert("localhost")


def handshake(context: ssl.SSLContext, cert: trustme.LeafCert, host: str) -> str | None:
    """A whole TLS handshake of ``context`` with a server presenting ``cert``: ``None`` when
    it completed, else the client's verify message (or its error's reason)."""
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server_context)
    client_in, client_out, server_in, server_out = (ssl.MemoryBIO() for _ in range(4))
    client = context.wrap_bio(client_in, client_out, server_hostname=host)
    server = server_context.wrap_bio(server_in, server_out, server_side=True)
    client_done = server_done = False
    for _ in range(20):
        try:
            client.do_handshake()
            client_done = True
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLCertVerificationError as exc:
            return exc.verify_message
        except ssl.SSLError as exc:
            return str(exc.reason)
        server_in.write(client_out.read())
        try:
            server.do_handshake()
            server_done = True
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLError:
            pass  # the client's alert: its own error says why
        client_in.write(server_out.read())
        if client_done and server_done:
            return None
    raise AssertionError("the handshake neither completed nor failed in 20 rounds")


def chain_of(cert: trustme.LeafCert) -> list[bytes]:
    return [ssl.PEM_cert_to_DER_cert(blob.bytes().decode()) for blob in cert.cert_chain_pems]


def trusting(*cas: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    for ca in cas:
        ca.configure_trust(context)
    return context


def strict() -> ssl.SSLContext:
    context = trusting(CA)
    context.verify_flags |= ssl.VERIFY_X509_STRICT
    return context


def crl_checked(revoked: bool) -> ssl.SSLContext:
    """CRL checks on the leaf, with a CRL from the CA that revokes ``GOOD`` or nothing."""
    context = trusting(CA)
    context.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    issuer = x509.load_pem_x509_certificate(CA.cert_pem.bytes())
    key = serialization.load_pem_private_key(CA.private_key_pem.bytes(), password=None)
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(issuer.subject)
        .last_update(now - datetime.timedelta(hours=1))
        .next_update(now + datetime.timedelta(days=1))
    )
    if revoked:
        serial = x509.load_pem_x509_certificate(GOOD.cert_chain_pems[0].bytes()).serial_number
        builder = builder.add_revoked_certificate(
            x509.RevokedCertificateBuilder()
            .serial_number(serial)
            .revocation_date(now - datetime.timedelta(minutes=1))
            .build()
        )
    crl = builder.sign(key, hashes.SHA256())  # type: ignore[arg-type]
    with tempfile.TemporaryDirectory() as directory:  # a CRL loads from a file only
        path = Path(directory) / "crl.pem"
        path.write_bytes(crl.public_bytes(serialization.Encoding.PEM))
        context.load_verify_locations(cafile=str(path))
    return context


def unnamed() -> ssl.SSLContext:
    context = trusting(CA)
    context.check_hostname = False
    return context


def curve(name: str) -> Callable[[], ssl.SSLContext]:
    def make() -> ssl.SSLContext:
        context = trusting(CA)
        context.set_ecdh_curve(name)
        return context

    return make


CASES: list[tuple[str, Callable[[], ssl.SSLContext], trustme.LeafCert, str]] = [
    ("trusted", lambda: trusting(CA), GOOD, "localhost"),
    ("trusted by IP", lambda: trusting(CA), GOOD, "127.0.0.1"),
    ("another name", lambda: trusting(CA), GOOD, "other.example"),
    ("another IP", lambda: trusting(CA), GOOD, "127.0.0.2"),
    ("name not checked", unnamed, GOOD, "other.example"),
    ("unknown authority", lambda: trusting(CA), STRANGER, "localhost"),
    ("two authorities", lambda: trusting(OTHER_CA, CA), STRANGER, "localhost"),
    ("no authority at all", lambda: ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), GOOD, "localhost"),
    ("expired", lambda: trusting(CA), EXPIRED, "localhost"),
    ("strict", strict, GOOD, "localhost"),
    ("CRL checked, not revoked", lambda: crl_checked(False), GOOD, "localhost"),
    ("CRL checked, revoked", lambda: crl_checked(True), GOOD, "localhost"),
    ("P-256 only", curve("prime256v1"), GOOD, "localhost"),
    ("P-384 only", curve("secp384r1"), GOOD, "localhost"),
]


@pytest.mark.parametrize(
    ("make", "cert", "host"), [case[1:] for case in CASES], ids=[case[0] for case in CASES]
)
def test_the_verdict_is_a_real_handshakes(
    make: Callable[[], ssl.SSLContext], cert: trustme.LeafCert, host: str
) -> None:
    real = handshake(make(), cert, host)
    verdict = check_chain(make(), host, chain_of(cert))
    assert verdict.accepted is (real is None)
    if real is not None:
        assert verdict.certificate
        assert verdict.reason == real


def test_every_case_above_is_not_all_alike() -> None:
    """The table holds acceptances and refusals of several kinds (a table of one verdict
    would prove nothing)."""
    verdicts = {handshake(make(), cert, host) for _, make, cert, host in CASES}
    assert None in verdicts
    assert len(verdicts) >= 5


def test_a_context_without_tls13_cannot_check_and_says_so() -> None:
    context = trusting(CA)
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    verdict = check_chain(context, "localhost", chain_of(GOOD))
    assert not verdict.accepted
    assert not verdict.certificate
    assert "TLS 1.3" in verdict.reason


def test_a_chain_of_many_records_is_read_whole() -> None:
    """A Certificate message larger than one record (16 KiB) spans records: the stand-in
    splits it, and the context still checks it (an unknown authority, refused as such)."""
    padding = [chain_of(STRANGER)[0]] * 40  # ~20 KiB of extra certificates after the leaf
    verdict = check_chain(trusting(CA), "localhost", chain_of(STRANGER) + padding)
    assert not verdict.accepted
    assert verdict.certificate
    assert verdict.reason == "unable to get local issuer certificate"
    assert check_chain(trusting(CA), "localhost", chain_of(GOOD) + padding[:1]).accepted
