"""What a QUIC connection is configured with: trust, client certificate, windows, tickets.

One job: turn the client's TLS settings (the same ``verify=``, ``cert=`` and ``ssl_context=``
its TCP connections use) into what a QUIC connection needs, refusing at construction what
QUIC cannot honour, and keep the session tickets servers issue (the key to resumption and to
0-RTT early data) per origin.

Trust is the client's ``ssl.SSLContext`` itself, never a second setting: aioquic's own check
is off, and the server's chain is checked by that context (``verify.py``, run by
``shims.CheckedQuicConnection`` before the client answers the server's handshake), so its CA
certificates and CA directory, verify flags, CRLs and host-name rules apply to QUIC exactly as
to TCP. Rejected: handing aioquic the context's CA list, as before: an empty list (a context
trusting only a ``capath`` directory, or nothing) made aioquic trust certifi's bundle, and the
flags never reached it.

What QUIC cannot honour is refused when the client is built (:func:`quic_trust`): a context
that allows no TLS 1.3 (QUIC is TLS 1.3), and a ``cert=`` the ``cryptography`` package cannot
load (aioquic signs with its key objects). A client certificate loaded into a caller's context
cannot be read back (Python offers no way), so it cannot be presented over QUIC: a server that
asks for one is answered over TCP instead (``shims.py``).
"""

from __future__ import annotations

import base64
import datetime
import os
import re
import ssl
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

import trio

from ..._state.file import Entry
from ..._tls import CertTypes
from ..clock import FIXED
from .verify import ClientCertificate, QuicTrust

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes

    from ..._state.memory import ProtocolMemory
    from .backend import QuicConfiguration, SessionTicket

    PrivateKey: TypeAlias = CertificateIssuerPrivateKeyTypes

__all__ = [
    "ClientCertificate",
    "QuicTrust",
    "TicketStore",
    "quic_configuration",
    "quic_trust",
    "ticket_from_record",
    "ticket_record",
]

#: Receive windows: 8 MiB per connection, 2 MiB per stream (aioquic's defaults are 1 MiB
#: each, which caps a 10 ms-RTT transfer at ~100 MB/s and lets one stream use all of it).
CONNECTION_WINDOW = 8 * 1024 * 1024
STREAM_WINDOW = 2 * 1024 * 1024

_PRIVATE_KEY = re.compile(rb"-----BEGIN ([A-Z0-9 ]*PRIVATE KEY)-----.*?-----END \1-----", re.S)


def quic_trust(context: ssl.SSLContext, cert: CertTypes, *, owns_context: bool) -> QuicTrust:
    """The client's TLS settings for QUIC; see the module docstring. Raises ``ValueError``
    naming ``ssl_context``/``verify`` or ``cert`` for what QUIC cannot honour (never quoting a
    password)."""
    maximum = context.maximum_version
    if (context.options & ssl.OP_NO_TLSv1_3) or (
        maximum is not ssl.TLSVersion.MAXIMUM_SUPPORTED and maximum < ssl.TLSVersion.TLSv1_3
    ):
        name = "verify=/ssl_context=" if not owns_context else "verify="
        raise ValueError(
            f"HTTP/3 needs TLS 1.3 (QUIC carries no other version), and the TLS context given "
            f"as {name} does not allow it (maximum_version={maximum.name}"
            f"{', OP_NO_TLSv1_3' if context.options & ssl.OP_NO_TLSv1_3 else ''}): allow "
            "TLS 1.3 on it, or leave HTTP/3 off (http3=False, Upstream(http3=False))"
        )
    loaded = _load_client_certificate(cert) if owns_context and cert is not None else None
    return QuicTrust(
        context=context,
        verify=context.verify_mode != ssl.CERT_NONE,
        client_certificate=loaded,
        presents_as_tcp=owns_context,
    )


def _load_client_certificate(cert: CertTypes) -> ClientCertificate:
    """``cert=`` as aioquic signs with it. TCP loaded the same files already (``_tls.py``), so
    what fails here is what OpenSSL reads and the ``cryptography`` package does not. A password
    given for a key that is not encrypted is ignored, as OpenSSL ignores it."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    assert cert is not None
    certfile, keyfile, password = (
        (os.fspath(cert), None, None)
        if not isinstance(cert, tuple)
        else (cert[0], cert[1], cert[2] if len(cert) == 3 else None)
    )
    secret = None if password is None else password.encode("utf-8")
    problem: str | None = None
    try:
        with open(certfile, "rb") as file:
            cert_pem = file.read()
        key_pem = cert_pem
        if keyfile is not None:
            with open(keyfile, "rb") as file:
                key_pem = file.read()
    except OSError as exc:
        problem = f"it could not be read ({exc.strerror})"
    if problem is None:
        try:
            certificates = x509.load_pem_x509_certificates(cert_pem)
        except ValueError:
            problem = f"{certfile!r} holds no PEM certificate the cryptography package reads"
    block = _PRIVATE_KEY.search(key_pem) if problem is None else None
    if problem is None and block is None:
        problem = f"{keyfile or certfile!r} holds no PEM private key"
    key = None
    if problem is None and block is not None:
        key, why = _load_key(block.group(0), secret)
        problem = why or None
    if problem is None and key is not None:
        spki = (Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
        if key.public_key().public_bytes(*spki) != certificates[0].public_key().public_bytes(*spki):
            problem = "the private key does not belong to the certificate"
    if problem is not None or key is None:
        raise ValueError(
            f"cert=: the client certificate {certfile!r} cannot be presented over HTTP/3: "
            f"{problem}. Convert the key to PKCS#8 PEM (openssl pkcs8 -topk8), or leave "
            "HTTP/3 off (http3=False)"
        )
    return ClientCertificate(certificates[0], tuple(certificates[1:]), key)


def _load_key(pem: bytes, secret: bytes | None) -> tuple[PrivateKey | None, str]:
    """The key in ``pem``, or ``None`` and why not, in words that never hold the password (the
    library's own messages are not kept)."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    unreadable = "the private key did not load (a wrong password, or a format not read)"
    key: object = None
    try:
        key = load_pem_private_key(pem, password=secret)
    except TypeError:
        pass  # the password does not fit the key's form: below
    except (ValueError, UnsupportedAlgorithm):
        return None, unreadable
    if key is None:
        if secret is None:
            return None, "the private key is encrypted and no password was given"
        try:  # a password for a key that is not encrypted: ignored, as OpenSSL ignores it
            key = load_pem_private_key(pem, password=None)
        except (TypeError, ValueError, UnsupportedAlgorithm):
            return None, unreadable
    signing = (rsa.RSAPrivateKey, ec.EllipticCurvePrivateKey, ed25519.Ed25519PrivateKey)
    if isinstance(key, (*signing, ed448.Ed448PrivateKey, dsa.DSAPrivateKey)):
        return key, ""
    return None, "its key is of a kind TLS cannot sign with"


def quic_configuration(
    trust: QuicTrust, server_name: str, ticket: SessionTicket | None
) -> QuicConfiguration:
    """A client configuration for one connection to ``server_name`` (SNI, as over TCP; none
    for an IP address, RFC 6066 §3), resuming ``ticket`` if given, of the QUIC library in
    use (``backend.py``). The library's own certificate check is off: its
    ``CheckedQuicConnection`` runs the client's context's instead."""
    from aioquic.h3.connection import H3_ALPN

    from .backend import QuicConfiguration

    config = QuicConfiguration(
        is_client=True,
        alpn_protocols=list(H3_ALPN),
        server_name=server_name,
        verify_mode=ssl.CERT_NONE,
        max_data=CONNECTION_WINDOW,
        max_stream_data=STREAM_WINDOW,
        idle_timeout=FIXED.quic_idle,
    )
    presented = trust.client_certificate
    if presented is not None:
        _present(config, presented)
    if ticket is not None:
        config.session_ticket = ticket
    return config


def _present(config: QuicConfiguration, presented: ClientCertificate) -> None:
    """``config`` presents ``presented`` (``cert=``, loaded with the ``cryptography`` package)
    when a server asks for a client certificate: aioquic signs with those objects; qh3 with
    its own, made from the certificates' DER and the key's PKCS#8 form (kept in memory)."""
    from .backend import NAME

    if NAME == "aioquic":
        config.certificate = presented.certificate
        config.certificate_chain = list(presented.chain)
        config.private_key = presented.key
        return
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        NoEncryption,
        PrivateFormat,
    )
    from qh3._hazmat import Certificate
    from qh3.tls import load_pem_private_key

    native: Any = config  # (qh3's configuration: its own certificate and key types)
    chain = [presented.certificate, *presented.chain]
    der = [certificate.public_bytes(Encoding.DER) for certificate in chain]
    native.certificate = Certificate(der[0])
    native.certificate_chain = [Certificate(item) for item in der[1:]]
    pem = presented.key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    native.private_key = load_pem_private_key(pem, None)


#: How long an address-validation token (RFC 9000 §8.1.3, a NEW_TOKEN frame) is kept: the
#: frame gives no lifetime, and servers keep theirs about a day (quic-go: 24 hours).
TOKEN_LIFETIME = 24 * 3600.0


class TicketStore:
    """Session tickets and address-validation tokens per UDP target (``(host, port)``),
    kept in the client's :class:`~trio_retry._state.memory.ProtocolMemory` (and so in its
    state file, if any), the latest of each only.

    A ticket is used once (RFC 8446 §C.4 and RFC 9001 §4.5: reuse lets an observer link
    connections), and not after its lifetime; a token is used once too (RFC 9000 §8.1.3).
    Each new connection is issued fresh ones.
    """

    __slots__ = ("_awaited", "memory")

    def __init__(self, memory: ProtocolMemory | None = None) -> None:
        if memory is None:  # (kept in memory only)
            from ..._state.memory import ProtocolMemory

            memory = ProtocolMemory(None, "")
        self.memory = memory
        #: Per origin resumed with a ticket, set when the server issues its next one.
        self._awaited: dict[tuple[str, int], trio.Event] = {}

    def take(self, origin: tuple[str, int]) -> SessionTicket | None:
        """The origin's ticket, removed from the store, if one is still valid."""
        record = self.memory.take("quic_tickets", origin, time.time())
        ticket = None if record is None else ticket_from_record(record)
        if ticket is not None:
            self._awaited[origin] = trio.Event()
        return ticket

    async def settle(self) -> None:
        """Wait, within :func:`~trio_retry._wire.clock.closing`, for the new ticket of each
        origin whose connection resumed with one and has received none yet.

        Why: a resumed connection's exchange can be over in one round trip (the request in
        0-RTT, the answer before the handshake ends), while the server issues the next ticket
        only once the handshake ends, half a round trip later: a client closing at once would
        keep no ticket, and its next process would start cold. Only resumed connections wait
        (their server issues tickets); at most ``FIXED.closing`` in all; cancelled, at once.
        """
        from ..clock import closing

        awaited, self._awaited = self._awaited, {}
        with closing():
            for event in awaited.values():
                await event.wait()

    def keep(self, origin: tuple[str, int], ticket: SessionTicket) -> None:
        """Remember ``ticket`` (the server's newest) for the next connection to ``origin``."""
        entry = Entry(
            origin[0],
            origin[1],
            expires=_seconds(ticket.not_valid_after),
            learned=time.time(),
            value=ticket_record(ticket),
        )
        self.memory.keep("quic_tickets", entry)
        awaited = self._awaited.pop(origin, None)
        if awaited is not None:
            awaited.set()

    def take_token(self, origin: tuple[str, int]) -> bytes:
        """The origin's address-validation token, removed from the store, or ``b""``."""
        record = self.memory.take("quic_tokens", origin, time.time())
        return b"" if record is None else base64.b64decode(record["token"])

    def keep_token(self, origin: tuple[str, int], token: bytes) -> None:
        """Remember the token of a NEW_TOKEN frame from ``origin`` (its newest)."""
        if not token or len(token) > 4096:
            return  # (an empty token means none; a huge one is not worth keeping)
        now = time.time()
        value = {"token": base64.b64encode(token).decode("ascii")}
        entry = Entry(origin[0], origin[1], expires=now + TOKEN_LIFETIME, learned=now, value=value)
        self.memory.keep("quic_tokens", entry)


def ticket_record(ticket: SessionTicket) -> dict[str, Any]:
    """``ticket`` as JSON values (the fields of ``_state.file.SCHEMAS["quic_tickets"]``)."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    return {
        "age_add": ticket.age_add,
        "cipher_suite": int(ticket.cipher_suite),
        "not_valid_before": _seconds(ticket.not_valid_before),
        "not_valid_after": _seconds(ticket.not_valid_after),
        "resumption_secret": b64(ticket.resumption_secret),
        "server_name": ticket.server_name or "",  # (qh3's for an IP address: none)
        "ticket": b64(ticket.ticket),
        "max_early_data_size": ticket.max_early_data_size,
        "other_extensions": [[kind, b64(data)] for kind, data in ticket.other_extensions],
    }


def ticket_from_record(record: Mapping[str, Any]) -> SessionTicket | None:
    """The ticket :func:`ticket_record` made, or ``None`` if it is not one aioquic can use
    (a cipher suite it does not know) or no longer valid. The shapes were checked when the
    file was read (``_state/file.py``)."""
    from .backend import CipherSuite, SessionTicket

    try:
        suite = CipherSuite(record["cipher_suite"])
    except ValueError:
        return None
    ticket = SessionTicket(
        age_add=record["age_add"],
        cipher_suite=suite,
        not_valid_after=_utc(record["not_valid_after"]),
        not_valid_before=_utc(record["not_valid_before"]),
        resumption_secret=base64.b64decode(record["resumption_secret"]),
        server_name=record["server_name"] or _NO_NAME,
        ticket=base64.b64decode(record["ticket"]),
        max_early_data_size=record["max_early_data_size"],
        other_extensions=[
            (kind, base64.b64decode(raw)) for kind, raw in record["other_extensions"]
        ],
    )
    return ticket if ticket.is_valid else None


#: The server name of qh3's ticket for an IP address (none was sent: ``shims_qh3.py``).
_NO_NAME: Any = None


def _utc(seconds: float) -> datetime.datetime:
    """``seconds`` as a ticket's time: in UTC, with its zone for aioquic, without for qh3
    (which compares its tickets' times with a UTC time that has none)."""
    from .backend import NAME

    moment = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    return moment.replace(tzinfo=None) if NAME == "qh3" else moment


def _seconds(moment: datetime.datetime) -> float:
    """A ticket's time as seconds since the epoch (one without a zone is in UTC: qh3's)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.timestamp()


def allows_early_data(ticket: SessionTicket | None) -> bool:
    """Whether ``ticket`` lets the next connection send 0-RTT early data."""
    return ticket is not None and bool(ticket.max_early_data_size)
