"""``TLSSocketStream`` honours the caller's ``ssl.SSLContext`` exactly as ``trio.SSLStream``
does: verification, the host name check, SNI, ALPN, client certificates, versions, session
resumption, and renegotiation as the context allows or refuses it.

Each case runs against both client streams (``tests/support/tls_peer.py``), real loopback
sockets, trustme certificates; the outcomes must be equal and mean what the case says.
Renegotiation needs a server that asks for one, which Python's ``ssl`` cannot: pyOpenSSL's
(installed with aioquic, the ``http3`` extra) plays it.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
from collections.abc import Callable

import pytest
import trio
import trustme

from tests.support.tls_peer import KINDS, Certs, ClientStream, Peer, connect, outcome, tls_object
from trio_retry._wire.rawsock import RawSocketStream, open_socket
from trio_retry._wire.tlschoice import supported, tls_stream
from trio_retry._wire.tlssock import TLSSocketStream

VERSIONS = [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3]


@pytest.fixture(scope="module")
def certs() -> Certs:
    return Certs()


async def both(
    server_context: ssl.SSLContext,
    client_context: ssl.SSLContext,
    server: object,
    client: object,
    **options: object,
) -> list[object]:
    seen = [
        await outcome(kind, server_context, client_context, server, client, **options)  # type: ignore[arg-type]
        for kind in KINDS
    ]
    assert seen[0] == seen[1], f"trio.SSLStream: {seen[0]!r}\nTLSSocketStream: {seen[1]!r}"
    return seen[1]


async def hello(peer: Peer) -> None:
    await peer.send(b"hello")
    await peer.close_notify()


async def facts(stream: ClientStream) -> list[object]:
    """What the TLS object says after the handshake, and the first read."""
    tls = tls_object(stream)
    peer = tls.getpeercert()
    subject = dict(x[0] for x in peer["subject"]) if peer else None
    return [tls.version(), tls.selected_alpn_protocol(), subject, await stream.receive_some()]


@pytest.mark.parametrize("version", VERSIONS, ids=["tls1.2", "tls1.3"])
async def test_version_alpn_and_the_certificate(certs: Certs, version: ssl.TLSVersion) -> None:
    server_ctx = certs.server_context(version, alpn=["h2", "http/1.1"])
    client_ctx = certs.client_context(alpn=["http/1.1"])
    seen = await both(server_ctx, client_ctx, hello, facts)
    name = "TLSv1.3" if version is ssl.TLSVersion.TLSv1_3 else "TLSv1.2"
    assert seen[:2] == [name, "http/1.1"]
    assert seen[3] == b"hello"
    # No ALPN offered: none selected.
    seen = await both(
        certs.server_context(version, alpn=["h2"]), certs.client_context(), hello, facts
    )
    assert seen[1] is None


async def test_sni_is_the_name_given_and_none_for_an_address(certs: Certs) -> None:
    names: list[str | None] = []
    server_ctx = certs.server_context()
    server_ctx.sni_callback = lambda obj, name, ctx: names.append(name)  # type: ignore[assignment,misc,return-value]
    await both(server_ctx, certs.client_context(), hello, facts)
    assert names == ["localhost", "localhost"]
    names.clear()
    await both(server_ctx, certs.client_context(), hello, facts, hostname="127.0.0.1")
    assert names == [None, None]  # an IP address is never sent as SNI


async def test_an_untrusted_certificate_fails_the_handshake(certs: Certs) -> None:
    stranger = ssl.create_default_context()
    trustme.CA().configure_trust(stranger)
    seen = await both(certs.server_context(), stranger, hello, facts)
    assert seen == [("error", "BrokenResourceError", "SSLCertVerificationError")]


async def test_the_host_name_is_checked_unless_the_context_says_not(certs: Certs) -> None:
    seen = await both(
        certs.server_context(), certs.client_context(), hello, facts, hostname="example.org"
    )
    assert seen == [("error", "BrokenResourceError", "SSLCertVerificationError")]
    lax = certs.client_context()
    lax.check_hostname = False
    seen = await both(certs.server_context(), lax, hello, facts, hostname="example.org")
    assert seen[3] == b"hello"
    blind = ssl.create_default_context()  # trusts nothing, verifies nothing
    blind.check_hostname = False
    blind.verify_mode = ssl.CERT_NONE
    seen = await both(certs.server_context(), blind, hello, facts, hostname=None)
    assert seen[2] is None  # (no verified certificate to show)
    assert seen[3] == b"hello"


@pytest.mark.parametrize("version", VERSIONS, ids=["tls1.2", "tls1.3"])
async def test_a_client_certificate_is_presented_when_the_context_has_one(
    certs: Certs, version: ssl.TLSVersion
) -> None:
    server_ctx = certs.server_context(version)
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    certs.ca.configure_trust(server_ctx)
    presented: list[object] = []

    async def server(peer: Peer) -> None:
        cert = peer.tls.getpeercert()
        presented.append(dict(x[0] for x in cert["subject"]) if cert else None)
        await hello(peer)

    with_cert = certs.client_context()
    certs.client.configure_cert(with_cert)
    seen = await both(server_ctx, with_cert, server, facts)
    assert seen[3] == b"hello"
    assert len(presented) == 2
    assert presented[0] == presented[1]
    assert presented[0] is not None
    # Without one the server refuses: at the handshake (TLS 1.2) or at the first read (1.3).
    seen = await both(server_ctx, certs.client_context(), server, facts)
    assert seen[-1][:2] == ("error", "BrokenResourceError")


async def test_versions_the_context_refuses_are_refused(certs: Certs) -> None:
    old_only = certs.client_context()
    old_only.maximum_version = ssl.TLSVersion.TLSv1_2
    seen = await both(certs.server_context(ssl.TLSVersion.TLSv1_3), old_only, hello, facts)
    assert seen == [("error", "BrokenResourceError", "SSLError")]


@pytest.mark.parametrize("version", VERSIONS, ids=["tls1.2", "tls1.3"])
async def test_a_session_resumes(certs: Certs, version: ssl.TLSVersion) -> None:
    server_ctx = certs.server_context(version)  # one context: its ticket keys
    client_ctx = certs.client_context()
    sessions: list[ssl.SSLSession | None] = []
    for kind in KINDS:
        sessions.clear()

        async def first(stream: ClientStream) -> list[object]:
            data = await stream.receive_some()  # (TLS 1.3 tickets come after the handshake)
            sessions.append(tls_object(stream).session)
            return [data, tls_object(stream).session_reused]

        async def again(stream: ClientStream) -> list[object]:
            return [await stream.receive_some(), tls_object(stream).session_reused]

        assert await outcome(kind, server_ctx, client_ctx, hello, first) == [b"hello", False]
        assert sessions[0] is not None
        seen = await outcome(kind, server_ctx, client_ctx, hello, again, session=sessions[0])
        assert seen == [b"hello", True], kind


# --- renegotiation -----------------------------------------------------------------------------


def _renegotiating_context(certs: Certs) -> object:
    SSL = pytest.importorskip("OpenSSL.SSL")
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    ctx = SSL.Context(SSL.TLS_SERVER_METHOD)
    ctx.set_max_proto_version(SSL.TLS1_2_VERSION)  # (TLS 1.3 has no renegotiation)
    ctx.use_certificate(x509.load_pem_x509_certificate(certs.server.cert_chain_pems[0].bytes()))
    ctx.use_privatekey(
        serialization.load_pem_private_key(certs.server.private_key_pem.bytes(), None)
    )
    return ctx


async def _read_to_the_end(client: ClientStream) -> tuple[bytes, str | None]:
    """What ``client`` receives until the server closes (at most 100 reads), and, if the
    stream broke first, the name of the error beneath trio's ``BrokenResourceError``."""
    data = b""
    try:
        for _ in range(100):  # bounded
            chunk = await client.receive_some()
            if not chunk:
                break
            data += chunk
    except trio.BrokenResourceError as exc:
        return data, type(exc.__cause__).__name__
    return data, None


async def _renegotiation(kind: str, server_ctx: object, client_ctx: ssl.SSLContext) -> list[object]:
    """A TLS 1.2 server that sends "before", asks for a renegotiation, and once it is done
    sends "after" and closes; what the client read, and how it ended."""
    from OpenSSL import SSL

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    renegotiated: list[bool] = []

    async def serve() -> None:
        stream = await listeners[0].accept()
        conn = SSL.Connection(server_ctx, None)  # type: ignore[arg-type]
        conn.set_accept_state()

        async def pump(call: Callable[[], object], done: Callable[[], bool]) -> None:
            """Call ``call`` until it succeeds or ``done()``, moving bytes both ways."""
            for _ in range(200):  # bounded: a handshake is a few flights
                try:
                    call()
                    finished = True
                except SSL.WantReadError:
                    finished = False
                try:
                    out = conn.bio_read(65536)
                except SSL.WantReadError:
                    out = b""
                if out:
                    await stream.send_all(out)
                if finished or done():
                    return
                data = await stream.receive_some(65536)
                if not data:
                    raise trio.BrokenResourceError("the client left")
                conn.bio_write(data)
            raise AssertionError("no progress in 200 rounds")

        try:
            await pump(conn.do_handshake, lambda: False)
            conn.send(b"before")
            conn.renegotiate()  # a HelloRequest, then the client's new handshake
            await pump(lambda: conn.recv(1), lambda: not conn.renegotiate_pending())
            renegotiated.append(conn.total_renegotiations() > 0 and not conn.renegotiate_pending())
            conn.send(b"after")
            conn.shutdown()
            await stream.send_all(conn.bio_read(65536))
        except SSL.Error:  # (the client refused): the fatal alert goes out
            renegotiated.append(False)
            try:
                await stream.send_all(conn.bio_read(65536))
            except (SSL.Error, trio.BrokenResourceError):
                pass
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            renegotiated.append(False)
        finally:
            await trio.aclose_forcefully(stream)
            await listeners[0].aclose()

    seen: list[object] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve)
        with trio.fail_after(20):
            client = await connect(kind, port, client_ctx)
            try:
                await client.do_handshake()
                data, error = await _read_to_the_end(client)
                seen += [data] if error is None else [data, ("error", error)]
            finally:
                await trio.aclose_forcefully(client)
    return [*seen, renegotiated]


@pytest.mark.parametrize("allowed", [True, False], ids=["allowed", "refused"])
async def test_renegotiation_as_the_context_says(certs: Certs, allowed: bool) -> None:
    server_ctx = _renegotiating_context(certs)
    client_ctx = certs.client_context()
    if not allowed:
        client_ctx.options |= ssl.OP_NO_RENEGOTIATION
    seen = [await _renegotiation(kind, server_ctx, client_ctx) for kind in KINDS]
    assert seen[0] == seen[1]
    if allowed:
        assert seen[1] == [b"beforeafter", [True]]
    else:  # the client says no_renegotiation; this server then ends with a fatal alert
        assert seen[1] == [b"before", ("error", "SSLError"), [False]]


# --- where it is used -----------------------------------------------------------------------------


async def test_used_only_with_a_plain_context_over_our_socket(certs: Certs) -> None:
    sock, raw = open_socket()
    assert raw is not None
    transport = RawSocketStream(sock, raw)
    plain = certs.client_context()
    assert supported(transport, plain)

    class Custom(ssl.SSLContext):  # (truststore's verifies in its wrap_* methods)
        pass

    custom = Custom(ssl.PROTOCOL_TLS_CLIENT)
    assert not supported(transport, custom)
    other_class = certs.client_context()
    other_class.sslobject_class = type("Obj", (ssl.SSLObject,), {})
    assert not supported(transport, other_class)
    tunnel = trio.SSLStream(transport, plain, server_hostname="proxy")  # TLS inside TLS
    assert not supported(tunnel, plain)
    assert isinstance(tls_stream(transport, plain, "localhost"), TLSSocketStream)
    assert isinstance(tls_stream(transport, plain, "localhost", fast=False), trio.SSLStream)
    assert isinstance(tls_stream(transport, custom, "localhost"), trio.SSLStream)
    sock.close()


async def _renegotiation_during_upload(kind: str, certs: Certs, size: int) -> list[object]:
    """A TLS 1.2 server (16 KiB receive buffer) that reads a ``size``-byte upload slowly,
    asks for a renegotiation after its first bytes, and once it has all of it and the
    renegotiation is done answers "done" and closes; what the client saw."""
    from OpenSSL import SSL

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    listeners[0].socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    port = listeners[0].socket.getsockname()[1]
    server: list[object] = []

    async def serve() -> None:
        stream = await listeners[0].accept()
        conn = SSL.Connection(_renegotiating_context(certs), None)  # type: ignore[arg-type]
        conn.set_accept_state()
        got = 0
        asked = False
        try:
            for _ in range(20_000):  # bounded: about 125 rounds of 8 KiB per MB
                with contextlib.suppress(SSL.WantReadError):
                    conn.do_handshake()
                with contextlib.suppress(SSL.WantReadError):
                    for _ in range(100):  # what was received, decrypted
                        got += len(conn.recv(65536))
                if got and not asked:  # the upload has begun: the client's write waits
                    conn.renegotiate()
                    asked = True
                    with contextlib.suppress(SSL.WantReadError):
                        conn.do_handshake()
                with contextlib.suppress(SSL.WantReadError):
                    await stream.send_all(conn.bio_read(65536))
                if got >= size and not conn.renegotiate_pending():
                    server.append(conn.total_renegotiations())
                    conn.send(b"done")
                    conn.shutdown()
                    await stream.send_all(conn.bio_read(65536))
                    return
                await trio.sleep(0.0005)  # a slow reader
                data = await stream.receive_some(8192)
                if not data:
                    return
                conn.bio_write(data)
        except (SSL.Error, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            server.append(type(exc).__name__)
        finally:
            server.append(got)
            await trio.aclose_forcefully(stream)
            await listeners[0].aclose()

    seen: list[object] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve)
        with trio.fail_after(30):
            client = await connect(kind, port, certs.client_context())
            try:
                await client.do_handshake()
                await client.send_all(b"u" * size)
                data, error = await _read_to_the_end(client)
                seen.append(data if error is None else ("error", error))
            except trio.BrokenResourceError as exc:  # (the upload's)
                seen.append(("error", type(exc.__cause__).__name__))
            finally:
                await trio.aclose_forcefully(client)
    return [*seen, server]


async def test_a_renegotiation_asked_for_during_an_upload_completes(certs: Certs) -> None:
    """The HelloRequest arrives while the client's write waits for room; the client answers
    it at its next read, after the upload, on either stream (OpenSSL's one unfinished record
    is never in the way: the client writes no handshake message until then)."""
    pytest.importorskip("OpenSSL.SSL")
    size = 1_000_000
    seen = [await _renegotiation_during_upload(kind, certs, size) for kind in KINDS]
    assert seen[0] == seen[1] == [b"done", [1, size]]
