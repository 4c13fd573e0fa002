"""TLS conveniences (SPEC §12): verify= (True, False, a CA bundle path, a caller's context) and
cert= (mutual TLS), against the FaultServer on loopback with trustme certificates."""

from __future__ import annotations

import ssl
from functools import partial
from pathlib import Path

import pytest
import trio
import trustme
from cryptography.hazmat.primitives import serialization

import trio_retry
from tests.conftest import FAST
from trio_retry import Evidence, FailureCategory, Stage
from trio_retry._call.alpn import offered_alpn
from trio_retry._tls import InsecureTLSWarning, build_ssl_context
from trio_retry.testing import FaultServer, Respond

LIMIT = 10


async def _tls_server(nursery: trio.Nursery, *, http2: bool = False) -> FaultServer:
    server = FaultServer(tls=True, http2=http2)
    server.default = Respond(200, body=b"hello")
    await nursery.start(server.serve)
    return server


def _ca_file(server: FaultServer, tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    path.write_bytes(server.ca_pem)
    return str(path)


async def test_verify_with_a_ca_bundle_path(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = await _tls_server(nursery, http2=True)
    async with trio_retry.Client(retry=FAST, verify=_ca_file(server, tmp_path)) as client:
        with trio.fail_after(LIMIT):
            response = await client.get(server.url + "/")
    assert response.content == b"hello"
    # The client's own context: it offers h2, so the HTTP/2 server is spoken to in HTTP/2.
    assert response.http_version == "HTTP/2"


async def test_default_verify_refuses_an_unknown_ca(nursery: trio.Nursery) -> None:
    server = await _tls_server(nursery)
    async with trio_retry.Client(retry=FAST) as client:
        with trio.fail_after(LIMIT), pytest.raises(trio_retry.TLSFailed) as info:
            await client.get(server.url + "/")
    assert info.value.evidence is Evidence.NOT_SENT
    assert info.value.category is FailureCategory.TLS_CERTIFICATE
    assert server.requests == []


async def test_verify_false_warns_and_accepts_any_certificate(nursery: trio.Nursery) -> None:
    server = await _tls_server(nursery)
    with pytest.warns(InsecureTLSWarning, match="NOT checked") as warned:
        client = trio_retry.Client(retry=FAST, verify=False)
    assert len(warned) == 1  # once, when the client is built; never per request
    async with client:
        with trio.fail_after(LIMIT):
            first = await client.get(server.url + "/")
            second = await client.get(server.url.replace("127.0.0.1", "localhost") + "/")
    assert first.content == second.content == b"hello"
    assert trio_retry.InsecureTLSWarning is InsecureTLSWarning


async def test_a_callers_context_is_used_as_given_and_never_changed(
    nursery: trio.Nursery,
) -> None:
    server = await _tls_server(nursery, http2=True)
    context = ssl.create_default_context(cadata=server.ca_pem.decode("ascii"))
    before = (context.verify_mode, context.check_hostname, context.options)
    # No ALPN on the caller's context: had the client added its own (h2 first), the HTTP/2
    # server would have picked h2. It picks nothing, so the client speaks HTTP/1.1 (http2's
    # default: not given explicitly, so not refused).
    async with trio_retry.Client(retry=FAST, verify=context) as client:
        with trio.fail_after(LIMIT):
            response = await client.get(server.url + "/")
        assert client.config.ssl_context is context
    assert response.http_version == "HTTP/1.1"
    assert (context.verify_mode, context.check_hostname, context.options) == before
    # The caller opts in to HTTP/2 on its own context.
    context.set_alpn_protocols(["h2", "http/1.1"])
    async with trio_retry.Client(retry=FAST, ssl_context=context) as client:
        with trio.fail_after(LIMIT):
            response = await client.get(server.url + "/")
    assert response.http_version == "HTTP/2"


async def test_a_callers_h2_context_with_http2_false_fails_before_sending(
    nursery: trio.Nursery,
) -> None:
    server = await _tls_server(nursery, http2=True)
    async with trio_retry.Client(
        retry=FAST, verify=server.client_ssl_context(), http2=False
    ) as client:
        with trio.fail_after(LIMIT), pytest.raises(trio_retry.TLSFailed, match="http2=False") as e:
            await client.get(server.url + "/")
    assert (e.value.evidence, e.value.attempts[-1].stage) == (Evidence.NOT_SENT, Stage.TLS)
    assert len(e.value.attempts) == 1  # not retried: it would negotiate the same again
    assert server.requests == []


# --- mutual TLS --------------------------------------------------------------------------------


def _require_client_certs(server: FaultServer, client_ca: trustme.CA) -> None:
    assert server._certs is not None
    context = server._certs.server_context
    context.verify_mode = ssl.CERT_REQUIRED
    client_ca.configure_trust(context)


def _write_client_cert(tmp_path: Path, ca: trustme.CA, password: bytes | None) -> tuple[str, str]:
    issued = ca.issue_cert("client@example.test")
    cert_path, key_path = tmp_path / "client.crt", tmp_path / "client.key"
    cert_path.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
    key = serialization.load_pem_private_key(issued.private_key_pem.bytes(), None)
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password)
        if password
        else serialization.NoEncryption()
    )
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    )
    return str(cert_path), str(key_path)


@pytest.mark.parametrize("form", ["one-file", "pair", "with-password"])
async def test_client_certificate_is_presented(
    nursery: trio.Nursery, tmp_path: Path, form: str
) -> None:
    client_ca = trustme.CA()
    server = FaultServer(tls=True, http2=False)
    server.default = Respond(200, body=b"mutual")
    _require_client_certs(server, client_ca)
    await nursery.start(server.serve)
    cert_path, key_path = _write_client_cert(
        tmp_path, client_ca, b"s3cret" if form == "with-password" else None
    )
    cert: trio_retry._tls.CertTypes
    if form == "one-file":
        combined = tmp_path / "both.pem"
        combined.write_bytes(Path(cert_path).read_bytes() + Path(key_path).read_bytes())
        cert = str(combined)
    elif form == "pair":
        cert = (cert_path, key_path)
    else:
        cert = (cert_path, key_path, "s3cret")
    ca_file = _ca_file(server, tmp_path)
    async with trio_retry.Client(retry=FAST, verify=ca_file, cert=cert) as client:
        with trio.fail_after(LIMIT):
            response = await client.get(server.url + "/")
    assert response.content == b"mutual"
    assert [r.executed for r in server.requests] == [True]


async def test_without_a_client_certificate_the_server_executes_nothing(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = FaultServer(tls=True, http2=False)
    _require_client_certs(server, trustme.CA())
    await nursery.start(server.serve)
    async with trio_retry.Client(retry=FAST, verify=_ca_file(server, tmp_path)) as client:
        with trio.fail_after(LIMIT), pytest.raises(trio_retry.TrioRetryError):
            await client.get(server.url + "/")
    assert server.requests == []


# --- bad input ---------------------------------------------------------------------------------


def test_bad_tls_options_are_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"verify='/nonexistent/ca.pem': no such file"):
        trio_retry.Client(verify="/nonexistent/ca.pem")
    with pytest.raises(TypeError, match="verify= must be"):
        trio_retry.Client(verify=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cert=: no such file"):
        trio_retry.Client(cert="/nonexistent/client.pem")
    with pytest.raises(TypeError, match="cert= accepts"):
        trio_retry.Client(cert=("a",))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cannot be combined"):
        trio_retry.Client(verify=ssl.create_default_context(), cert="x.pem")
    with pytest.raises(ValueError, match="either ssl_context= or verify="):
        trio_retry.Client(ssl_context=ssl.create_default_context(), verify=False)
    not_pem = tmp_path / "junk.pem"
    not_pem.write_text("not a certificate")
    with pytest.raises(ValueError, match="did not load"):
        trio_retry.Client(verify=str(not_pem))
    ca = trustme.CA()
    cert_path, key_path = _write_client_cert(tmp_path, ca, b"right")
    with pytest.raises(ValueError, match="did not load") as info:
        trio_retry.Client(cert=(cert_path, key_path, "hunter2"))
    assert "hunter2" not in str(info.value)


def test_the_clients_own_context_verifies_by_default() -> None:
    context, owned = build_ssl_context(True, None, http2=True)
    assert owned
    assert context.verify_mode is ssl.CERT_REQUIRED
    assert context.check_hostname


def test_every_context_the_client_builds_ignores_the_subject_cn(tmp_path: Path) -> None:
    """RFC 9525 §6.3 on every context built here (the client's, the CLI's, the testing
    helper's); a caller's own context is left as it was."""
    import io

    from trio_retry._cli.args import parse
    from trio_retry._cli.main import _tls
    from trio_retry._cli.output import Streams

    ca = trustme.CA()
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    built = [
        build_ssl_context(True, None, http2=True)[0],
        build_ssl_context(str(ca_file), None, http2=False)[0],
        build_ssl_context(str(tmp_path), None, http2=False)[0],
        FaultServer(tls=True).client_ssl_context(),
    ]
    with pytest.warns(InsecureTLSWarning):
        built.append(build_ssl_context(False, None, http2=False)[0])
    streams = Streams(io.StringIO(), io.StringIO())
    for argv in (["--cacert", str(ca_file)], ["-k"]):
        options = parse(["get", "https://example.test/", *argv])
        context = _tls(options, streams)  # type: ignore[arg-type]
        assert context is not None
        built.append(context)
    assert [c.hostname_checks_common_name for c in built] == [False] * len(built)

    callers = ssl.create_default_context()
    assert build_ssl_context(callers, None, http2=False) == (callers, False)
    assert callers.hostname_checks_common_name is True  # never mutated


def _cn_only_pki(tmp_path: Path, name: str) -> tuple[str, ssl.SSLContext]:
    """A CA, and a server certificate it signed whose ``name`` is only in the subject's CN
    (no subjectAltName: trustme always adds one, so both are made here). Returns the CA
    file and a server context presenting the certificate."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "CN-only test CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_name)
        .public_key(leaf_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    ca_file = tmp_path / "cn-only-ca.pem"
    ca_file.write_bytes(ca_cert.public_bytes(pem))
    chain = tmp_path / "cn-only-leaf.pem"
    chain.write_bytes(
        leaf.public_bytes(pem)
        + leaf_key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(str(chain))
    return str(ca_file), server


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
async def test_a_name_only_in_the_subject_cn_is_refused(
    nursery: trio.Nursery, tmp_path: Path, host: str
) -> None:
    """RFC 9525 §6.3: a client matches names in subjectAltName only, never the subject's CN,
    on every context it builds (``hostname_checks_common_name = False``)."""
    ca_file, server_context = _cn_only_pki(tmp_path, host)
    handshakes = 0

    async def serve(stream: trio.SocketStream) -> None:
        nonlocal handshakes
        tls = trio.SSLStream(stream, server_context, server_side=True)
        with trio.move_on_after(LIMIT):
            try:
                await tls.do_handshake()
                handshakes += 1
                await tls.receive_some(65536)
                await tls.send_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass

    listeners = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
    port = listeners[0].socket.getsockname()[1]
    async with trio_retry.Client(retry=FAST, verify=ca_file) as client:
        with trio.fail_after(2), pytest.raises(trio_retry.TLSFailed) as info:
            await client.get(f"https://{host}:{port}/")
    assert info.value.evidence is Evidence.NOT_SENT
    assert info.value.category is FailureCategory.TLS_CERTIFICATE
    assert len(info.value.attempts) == 1  # a certificate failure is permanent
    assert handshakes == 0


@pytest.mark.parametrize("alpn", [None, ["http/1.1"]], ids=["no-alpn", "http1-only"])
@pytest.mark.parametrize("option", ["verify", "ssl_context"])
def test_explicit_http2_with_a_context_not_offering_h2_is_refused(
    alpn: list[str] | None, option: str
) -> None:
    # SPEC §12: HTTP/2 is never dropped silently. Before: accepted, then HTTP/1.1 spoken.
    context = ssl.create_default_context()
    if alpn is not None:
        context.set_alpn_protocols(alpn)
    with pytest.raises(ValueError, match="http2=True") as info:
        trio_retry.Client(http2=True, **{option: context})
    message = str(info.value)
    assert 'ctx.set_alpn_protocols(["h2", "http/1.1"])' in message
    assert "http2=False" in message
    assert ("no ALPN protocol" if alpn is None else "['http/1.1']") in message
    # The ways out the message names, and http2's default, are accepted.
    trio_retry.Client(http2=False, **{option: context})
    trio_retry.Client(**{option: context})
    context.set_alpn_protocols(["h2", "http/1.1"])
    trio_retry.Client(http2=True, **{option: context})


def test_http2_default_shows_as_true() -> None:
    import inspect

    default = inspect.signature(trio_retry.Client).parameters["http2"].default
    assert repr(default) == "True"
    assert trio_retry.Client().config.http2 is True


@pytest.mark.parametrize(
    ("alpn", "offered"),
    [(None, []), (["http/1.1"], ["http/1.1"]), (["h2", "http/1.1"], ["h2", "http/1.1"])],
)
def test_offered_alpn_reads_the_contexts_client_hello(
    alpn: list[str] | None, offered: list[str]
) -> None:
    context = ssl.create_default_context()
    if alpn is not None:
        context.set_alpn_protocols(alpn)
    before = (context.verify_mode, context.check_hostname, context.options)
    assert offered_alpn(context) == offered
    assert (context.verify_mode, context.check_hostname, context.options) == before
    # A context that cannot start a client handshake: unknown.
    assert offered_alpn(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)) is None


async def test_the_clients_own_context_is_built_by_its_first_tls_connection(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verify=True/False without cert=: Client() and cleartext calls never load the system's
    CA store (ssl.create_default_context); the first TLS connection builds the context, once,
    with the client's settings. verify=False still warns at Client()."""
    built: list[ssl.SSLContext] = []
    create = ssl.create_default_context

    def counted(*args: object, **kwargs: object) -> ssl.SSLContext:
        context = create(*args, **kwargs)  # type: ignore[arg-type]
        built.append(context)
        return context

    plain = FaultServer()
    plain.default = Respond(200, body=b"plain")
    await nursery.start(plain.serve)
    tls = await _tls_server(nursery, http2=True)
    monkeypatch.setattr(ssl, "create_default_context", counted)  # (the servers' are built)
    async with trio_retry.Client(retry=FAST) as client:
        with trio.fail_after(LIMIT):
            assert (await client.get(plain.url + "/")).content == b"plain"
        assert built == []
        with trio.fail_after(LIMIT), pytest.raises(trio_retry.TLSFailed):
            await client.get(tls.url + "/")  # (the system's store does not trust trustme's CA)
        assert len(built) == 1
        context = client.config.ssl_context
        assert context is built[0]
        assert context.verify_mode is ssl.CERT_REQUIRED
        assert context.check_hostname
        assert offered_alpn(context) == ["h2", "http/1.1"]
        with trio.fail_after(LIMIT), pytest.raises(trio_retry.TLSFailed):
            await client.get(tls.url + "/")
        assert len(built) == 1
    with pytest.warns(InsecureTLSWarning):
        insecure = trio_retry.Client(retry=FAST, verify=False)
    assert len(built) == 1
    async with insecure:
        with trio.fail_after(LIMIT):
            assert (await insecure.get(tls.url + "/")).content == b"hello"
    assert len(built) == 2
    assert built[1].verify_mode is ssl.CERT_NONE
