"""Checking a QUIC server's certificate chain with the client's own ``ssl.SSLContext``.

One job: say whether the chain a QUIC handshake received (DER certificates, the server's
first) is one the client's TCP connections would accept for the host. The very context the
TCP connections use checks it: its CA certificates and CA directory (``capath``, read lazily),
its verify flags (``VERIFY_X509_STRICT``, CRL checks) and CRLs, its host-name rules and
security level. QUIC then trusts exactly what TCP trusts, and nothing else.

How: Python's ``ssl`` module checks a chain only inside a handshake. So the context's own
client (an ``SSLObject`` over memory BIOs, which changes nothing in the context) is handed the
first flight of a TLS 1.3 server presenting that chain: a ServerHello answering its key share,
then EncryptedExtensions and the Certificate, encrypted under the handshake keys both sides
derive (RFC 8446 §7.1). OpenSSL checks the chain as the Certificate message arrives, before
the CertificateVerify (which this stand-in cannot sign: it holds no key), so the verdict is
read there: a certificate error is a refusal, in OpenSSL's own words; waiting for the
CertificateVerify is acceptance. The stand-in's flight is then dropped; nothing goes on any
network. The proof of possession of the key is aioquic's: it checks the real server's
CertificateVerify in the real handshake.

Rejected alternatives: handing aioquic the context's CA list (``get_ca_certs``), as before,
missed a CA directory (an empty list then meant certifi's bundle) and never carried the flags,
CRLs or name rules; rebuilding an equivalent store (pyOpenSSL) from the settings fails the same
way, since a caller's context cannot be read back (its ``capath``, its CRLs). A TLS 1.2
stand-in (its Certificate in clear text) would need no encryption, but a context whose
minimum is TLS 1.3 refuses it; QUIC is TLS 1.3 anyway.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from cryptography.hazmat.primitives.asymmetric import ec, x448, x25519
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ..._core.evidence import FailureCategory

if TYPE_CHECKING:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes

__all__ = [
    "ChainVerdict",
    "ClientCertificate",
    "HandshakeChecks",
    "HandshakeRefused",
    "QuicTrust",
    "check_chain",
]

_HANDSHAKE = 22
_APPLICATION_DATA = 23
_CLIENT_HELLO = 1
_SERVER_HELLO = 2
_ENCRYPTED_EXTENSIONS = 8
_CERTIFICATE = 11
_SUPPORTED_VERSIONS = 43
_KEY_SHARE = 51
_TLS13 = 0x0304
_RECORD_LIMIT = 1 << 14  # plaintext bytes per record (RFC 8446 §5.1)

#: TLS 1.3 cipher suites: hash, key length, AEAD (RFC 8446 §B.4), in the order preferred.
_SUITES: dict[int, tuple[str, int, type[AESGCM] | type[ChaCha20Poly1305]]] = {
    0x1301: ("sha256", 16, AESGCM),
    0x1302: ("sha384", 32, AESGCM),
    0x1303: ("sha256", 32, ChaCha20Poly1305),
}
#: Key-share groups answered (RFC 8446 §4.2.7), in the order preferred.
_CURVES: dict[int, ec.EllipticCurve] = {
    0x0017: ec.SECP256R1(),
    0x0018: ec.SECP384R1(),
    0x0019: ec.SECP521R1(),
}
_X25519 = 0x001D
_X448 = 0x001E


@dataclass(frozen=True, slots=True)
class ChainVerdict:
    """What the context said: ``accepted``, or why not. ``certificate`` is true when the
    chain itself was refused (``TLS_CERTIFICATE``); false when it could not be checked at
    all (the context offered nothing this check can answer: treated as a refusal too)."""

    accepted: bool
    reason: str = ""
    certificate: bool = False


class _Unanswerable(Exception):
    """The context's ClientHello offers nothing the stand-in can answer."""


@dataclass(frozen=True, slots=True)
class ClientCertificate:
    """``cert=`` loaded for QUIC: the certificate, the rest of its chain, its key."""

    certificate: x509.Certificate
    chain: tuple[x509.Certificate, ...]
    key: CertificateIssuerPrivateKeyTypes


@dataclass(frozen=True, slots=True)
class QuicTrust:
    """What every QUIC connection of a client verifies and presents with (:func:`quic_trust`,
    worked out once, when the client is built)."""

    #: The client's TLS context: the one that checks every server chain.
    context: ssl.SSLContext
    #: Whether the context checks the server's chain at all (``verify=False``: no).
    verify: bool
    #: ``cert=``, loaded; ``None`` for none (or one inside a caller's context).
    client_certificate: ClientCertificate | None
    #: Whether what the client presents over QUIC is what it presents over TCP: true for a
    #: context the client built; false for a caller's, whose certificate cannot be read back.
    presents_as_tcp: bool


def check_chain(
    context: ssl.SSLContext, server_hostname: str | None, chain: Sequence[bytes]
) -> ChainVerdict:
    """Whether ``context`` accepts ``chain`` (DER, the server's certificate first) for
    ``server_hostname`` (checked when the context checks host names); see the module
    docstring. Never raises for what the context or the chain hold."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    try:
        client = context.wrap_bio(incoming, outgoing, server_hostname=server_hostname)
    except (ValueError, ssl.SSLError) as exc:
        return ChainVerdict(False, f"the TLS context cannot check it: {exc}")
    try:
        client.do_handshake()
    except ssl.SSLWantReadError:
        pass
    except ssl.SSLError as exc:
        return ChainVerdict(False, f"the TLS context cannot start a handshake: {exc}")
    try:
        flight = _server_flight(_client_hello(outgoing.read()), chain)
    except _Unanswerable as exc:
        return ChainVerdict(False, str(exc))
    incoming.write(flight)
    try:
        client.do_handshake()
    except ssl.SSLCertVerificationError as exc:
        return ChainVerdict(False, exc.verify_message or str(exc), certificate=True)
    except ssl.SSLWantReadError:
        # Every record read, the chain checked: it now waits for the CertificateVerify.
        return ChainVerdict(True)
    except ssl.SSLError as exc:
        return ChainVerdict(False, f"the TLS context refused the handshake: {exc.reason}")
    return ChainVerdict(False, "the TLS context finished a handshake it could not have")


@dataclass(frozen=True, slots=True)
class _Hello:
    message: bytes  # the handshake message, header included (for the transcript)
    session_id: bytes
    suites: tuple[int, ...]
    shares: dict[int, bytes]
    tls13: bool


def _client_hello(records: bytes) -> _Hello:
    """The ClientHello in ``records`` (TLS records as the client wrote them)."""
    fragments = b""
    at = 0
    while at + 5 <= len(records):
        length = int.from_bytes(records[at + 3 : at + 5], "big")
        if records[at] == _HANDSHAKE:
            fragments += records[at + 5 : at + 5 + length]
        at += 5 + length
    if len(fragments) < 4 or fragments[0] != _CLIENT_HELLO:
        raise _Unanswerable("the TLS context wrote no ClientHello")
    body = _Reader(fragments[4 : 4 + int.from_bytes(fragments[1:4], "big")])
    message = fragments[: 4 + len(body.data)]
    body.take(2 + 32)  # legacy_version, random
    session_id = body.take(body.int(1))
    suites_data = _Reader(body.take(body.int(2)))
    suites = tuple(suites_data.int(2) for _ in range(len(suites_data.data) // 2))
    body.take(body.int(1))  # compression methods
    extensions = _Reader(body.take(body.int(2)))
    shares: dict[int, bytes] = {}
    tls13 = False
    while not extensions.done:
        kind = extensions.int(2)
        data = _Reader(extensions.take(extensions.int(2)))
        if kind == _SUPPORTED_VERSIONS:
            versions = _Reader(data.take(data.int(1)))
            while not versions.done:
                if versions.int(2) == _TLS13:
                    tls13 = True
        elif kind == _KEY_SHARE:
            entries = _Reader(data.take(data.int(2)))
            while not entries.done:
                group = entries.int(2)
                shares[group] = entries.take(entries.int(2))
    return _Hello(message, session_id, suites, shares, tls13)


def _server_flight(hello: _Hello, chain: Sequence[bytes]) -> bytes:
    """The records of a TLS 1.3 server answering ``hello`` and presenting ``chain``."""
    if not hello.tls13:
        raise _Unanswerable("the TLS context does not offer TLS 1.3, which QUIC needs")
    suite = next((s for s in _SUITES if s in hello.suites), None)
    if suite is None:
        raise _Unanswerable("the TLS context offers no TLS 1.3 cipher suite")
    group, public, shared = _key_exchange(hello.shares)
    extensions = _u16(_SUPPORTED_VERSIONS) + _vec(2, _TLS13.to_bytes(2, "big"))
    extensions += _u16(_KEY_SHARE) + _vec(2, _u16(group) + _vec(2, public))
    server_hello = _message(
        _SERVER_HELLO,
        b"\x03\x03"
        + os.urandom(32)
        + _vec(1, hello.session_id)
        + _u16(suite)
        + b"\x00"
        + _vec(2, extensions),
    )
    digest, key_length, aead = _SUITES[suite]
    secret = _server_handshake_secret(digest, shared, hello.message + server_hello)
    key = _expand_label(digest, secret, b"key", b"", key_length)
    iv = _expand_label(digest, secret, b"iv", b"", 12)
    entries = b"".join(_vec(3, der) + b"\x00\x00" for der in chain)
    plaintext = _message(_ENCRYPTED_EXTENSIONS, _vec(2, b"")) + _message(
        _CERTIFICATE, b"\x00" + _vec(3, entries)
    )
    records = _record(_HANDSHAKE, server_hello)
    cipher = aead(key)
    for sequence, start in enumerate(range(0, len(plaintext), _RECORD_LIMIT)):
        inner = plaintext[start : start + _RECORD_LIMIT] + bytes([_HANDSHAKE])
        header = bytes([_APPLICATION_DATA, 3, 3]) + _u16(len(inner) + 16)
        nonce = bytes(a ^ b for a, b in zip(iv, sequence.to_bytes(12, "big"), strict=True))
        records += header + cipher.encrypt(nonce, inner, header)
    return records


def _key_exchange(shares: dict[int, bytes]) -> tuple[int, bytes, bytes]:
    """``(group, our public key, shared secret)`` for the first client share we answer."""
    for group, share in shares.items():
        try:
            raw = (Encoding.Raw, PublicFormat.Raw)
            if group == _X25519:
                x_key = x25519.X25519PrivateKey.generate()
                shared = x_key.exchange(x25519.X25519PublicKey.from_public_bytes(share))
                return group, x_key.public_key().public_bytes(*raw), shared
            if group == _X448:
                y_key = x448.X448PrivateKey.generate()
                shared = y_key.exchange(x448.X448PublicKey.from_public_bytes(share))
                return group, y_key.public_key().public_bytes(*raw), shared
            curve = _CURVES.get(group)
            if curve is not None:
                ec_key = ec.generate_private_key(curve)
                peer = ec.EllipticCurvePublicKey.from_encoded_point(curve, share)
                shared = ec_key.exchange(ec.ECDH(), peer)
                point = ec_key.public_key().public_bytes(
                    Encoding.X962, PublicFormat.UncompressedPoint
                )
                return group, point, shared
        except ValueError:
            continue  # a share we cannot read: try the next
    raise _Unanswerable(
        "the TLS context offers no key share this check answers (X25519, X448, P-256, "
        f"P-384, P-521); it offered groups {sorted(shares)}"
    )


def _server_handshake_secret(digest: str, shared: bytes, transcript: bytes) -> bytes:
    """``server_handshake_traffic_secret`` (RFC 8446 §7.1) after ClientHello..ServerHello."""
    size = hashlib.new(digest).digest_size
    zero = bytes(size)
    early = hmac.new(zero, zero, digest).digest()  # HKDF-Extract(0, 0): no PSK
    derived = _expand_label(digest, early, b"derived", hashlib.new(digest).digest(), size)
    handshake = hmac.new(derived, shared, digest).digest()
    hashed = hashlib.new(digest, transcript).digest()
    return _expand_label(digest, handshake, b"s hs traffic", hashed, size)


def _expand_label(digest: str, secret: bytes, label: bytes, context: bytes, length: int) -> bytes:
    """HKDF-Expand-Label (RFC 8446 §7.1) over HMAC (RFC 5869 §2.3)."""
    info = _u16(length) + _vec(1, b"tls13 " + label) + _vec(1, context)
    out = block = b""
    counter = 1
    while len(out) < length:
        block = hmac.new(secret, block + info + bytes([counter]), digest).digest()
        out += block
        counter += 1
    return out[:length]


def _u16(value: int) -> bytes:
    return value.to_bytes(2, "big")


def _vec(width: int, data: bytes) -> bytes:
    return len(data).to_bytes(width, "big") + data


def _message(kind: int, body: bytes) -> bytes:
    return bytes([kind]) + _vec(3, body)


def _record(kind: int, payload: bytes) -> bytes:
    return bytes([kind, 3, 3]) + _vec(2, payload)


class _Reader:
    """Reads a TLS structure; running past its end is :class:`_Unanswerable`."""

    __slots__ = ("at", "data")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    @property
    def done(self) -> bool:
        return self.at >= len(self.data)

    def take(self, size: int) -> bytes:
        if self.at + size > len(self.data):
            raise _Unanswerable("the TLS context wrote a ClientHello this check cannot read")
        chunk = self.data[self.at : self.at + size]
        self.at += size
        return chunk

    def int(self, size: int) -> int:
        return int.from_bytes(self.take(size), "big")


class HandshakeRefused(Exception):
    """The client refused the server's side of the QUIC handshake: ``category`` and words."""

    def __init__(self, category: FailureCategory, message: str) -> None:
        super().__init__(message)
        self.category = category
        self.message = message


_MISSING = object()
#: TLS alerts sent when the client refuses (RFC 8446 §6.2), as QUIC's CRYPTO_ERROR + alert
#: in a CONNECTION_CLOSE of frame type CRYPTO (RFC 9001 §4.8).
_BAD_CERTIFICATE = 42
_HANDSHAKE_FAILURE = 40
_CRYPTO_ERROR = 0x100
_CRYPTO_FRAME = 0x06


class HandshakeChecks:
    """The client's checks of a QUIC handshake as it progresses, mixed into each library's
    client connection ahead of the library's class (``shims.py``, ``shims_qh3.py``), which
    calls :meth:`_check_handshake` after each datagram until it is settled: the server's
    chain checked by the client's ``ssl.SSLContext`` (:func:`check_chain`) before the client
    sends anything more, a CertificateRequest the client cannot answer as over TCP refused, a
    handshake ended with nothing checked refused. Reads the library's TLS state
    (``_peer_certificate``, ``_peer_certificate_chain``, ``_certificate_request``, ``state``,
    ``session_resumed``: aioquic's names, which qh3's TLS keeps); where they are gone, every
    handshake is refused in words, never accepted unchecked. A refusal closes the connection
    with the TLS alert and raises :class:`HandshakeRefused`."""

    #: The library's name, in a refusal's words.
    _library = "aioquic"
    _trust_source: QuicTrust
    _trust_host: str | None
    _trust_chain_checked: bool
    _trust_settled: bool
    _trust_refused: bool

    def _trust_start(self, trust: QuicTrust, host: str | None) -> None:
        self._trust_source = trust
        self._trust_host = host
        self._trust_chain_checked = not trust.verify
        self._trust_settled = False  # the handshake is past every check
        self._trust_refused = False

    def _der(self, leaf: Any, chain: list[Any]) -> list[bytes] | None:
        """The server's chain as DER, its certificate first (``None``: none arrived yet)."""
        raise NotImplementedError

    def _check_handshake(self) -> None:
        tls: Any = getattr(self, "tls", None)
        if tls is None:
            return  # (nothing of the server's handshake has arrived)
        request = getattr(tls, "_certificate_request", _MISSING)
        leaf = getattr(tls, "_peer_certificate", _MISSING)
        chain = getattr(tls, "_peer_certificate_chain", _MISSING)
        if request is _MISSING or leaf is _MISSING or not isinstance(chain, list):
            self._refuse(
                FailureCategory.TLS_HANDSHAKE,
                f"this {self._library} version does not show the server's certificate, so "
                "HTTP/3 cannot check it",
                _HANDSHAKE_FAILURE,
            )
        trust = self._trust_source
        if request is not None and not trust.presents_as_tcp:
            self._refuse(
                FailureCategory.TLS_HANDSHAKE,
                "the server asks for a client certificate, and one loaded into the "
                "ssl.SSLContext given to the client cannot be presented over QUIC (Python "
                "cannot read it back); pass cert= instead to present it over HTTP/3",
                _HANDSHAKE_FAILURE,
            )
        der = None if self._trust_chain_checked else self._der(leaf, chain)
        if der is not None:
            verdict = check_chain(trust.context, self._trust_host, der)
            if not verdict.accepted:
                self._refuse(
                    FailureCategory.TLS_CERTIFICATE
                    if verdict.certificate
                    else FailureCategory.TLS_HANDSHAKE,
                    f"the server's certificate was refused: {verdict.reason}",
                    _BAD_CERTIFICATE if verdict.certificate else _HANDSHAKE_FAILURE,
                )
            self._trust_chain_checked = True
        if getattr(tls.state, "name", None) == "CLIENT_POST_HANDSHAKE":
            if not self._trust_chain_checked and not tls.session_resumed:
                self._refuse(
                    FailureCategory.TLS_CERTIFICATE,
                    "the handshake ended without a certificate to check",
                    _BAD_CERTIFICATE,
                )
            self._trust_settled = True  # (a resumed session's server was checked before)

    def _refuse(self, category: FailureCategory, message: str, alert: int) -> NoReturn:
        self._trust_refused = True
        connection: Any = self  # (the library's connection: its close, the client's own)
        connection.close(
            error_code=_CRYPTO_ERROR + alert, frame_type=_CRYPTO_FRAME, reason_phrase=""
        )
        raise HandshakeRefused(category, message)
