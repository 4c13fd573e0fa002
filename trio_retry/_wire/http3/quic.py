"""What a QUIC connection is configured with: trust, client certificate, windows, tickets.

One job: turn the client's TLS settings (the same ``verify=``, ``cert=`` and ``ssl_context=``
its TCP connections use) into aioquic's ``QuicConfiguration``, and keep the session tickets
servers issue (the key to resumption and to 0-RTT early data) per origin.

Trust comes from what the client's ``ssl.SSLContext`` holds, never from a second setting: its
verification mode and hostname check, and its CA certificates (``get_ca_certs``, handed to
aioquic as PEM). A context built from the system's store loads it through OpenSSL's default
paths, which ``get_ca_certs`` does not list; those paths are then given to aioquic as they
are. The obvious alternative, aioquic's own default (certifi's bundle), would trust another
set of authorities over QUIC than over TCP, and was rejected for that.
"""

from __future__ import annotations

import os
import ssl
import time
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..._tls import CertTypes, VerifyTypes

if TYPE_CHECKING:
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.tls import SessionTicket

__all__ = [
    "QuicTrust",
    "TicketStore",
    "TrustSource",
    "quic_configuration",
    "quic_trust",
]

#: Receive windows: 8 MiB per connection, 2 MiB per stream (aioquic's defaults are 1 MiB
#: each, which caps a 10 ms-RTT transfer at ~100 MB/s and lets one stream use all of it).
CONNECTION_WINDOW = 8 * 1024 * 1024
STREAM_WINDOW = 2 * 1024 * 1024
#: A QUIC connection with nothing to do is closed by aioquic after this long.
IDLE_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class TrustSource:
    """Where a QUIC connection's verification settings come from (the client's TLS ones)."""

    context: ssl.SSLContext
    verify: VerifyTypes = True
    cert: CertTypes = None
    owns_context: bool = True


@dataclass(frozen=True, slots=True)
class QuicTrust:
    """What every QUIC connection of a client verifies with, worked out once per client
    (:func:`quic_trust`): listing and checking a context's CA certificates costs milliseconds."""

    verify: bool
    check_hostname: bool
    cadata: bytes | None = None
    cafile: str | None = None
    capath: str | None = None
    cert: CertTypes = None


def quic_trust(source: TrustSource) -> QuicTrust:
    """The client's TLS trust as aioquic takes it; see the module docstring."""
    context = source.context
    verify = context.verify_mode != ssl.CERT_NONE
    check = verify and context.check_hostname
    if not verify:
        return QuicTrust(False, False, cert=source.cert)
    given = source.verify
    if source.owns_context and isinstance(given, (str, os.PathLike)):
        path = os.fspath(given)
        if os.path.isdir(path):
            return QuicTrust(True, check, capath=path, cert=source.cert)
        return QuicTrust(True, check, cafile=path, cert=source.cert)
    if source.owns_context:
        # verify=True: the system's store, by the paths OpenSSL loads it from.
        paths = ssl.get_default_verify_paths()
        cafile = paths.cafile if paths.cafile and os.path.isfile(paths.cafile) else None
        capath = paths.capath if paths.capath and os.path.isdir(paths.capath) else None
        return QuicTrust(True, check, cafile=cafile, capath=capath, cert=source.cert)
    pem = _loadable_pem(context.get_ca_certs(binary_form=True))
    return QuicTrust(True, check, cadata=pem or None, cert=source.cert)


def _loadable_pem(certificates: list[bytes]) -> bytes:
    """The DER ``certificates`` as PEM, without those the certificate library warns about or
    refuses (a system store may hold one with a negative serial number, which RFC 5280
    forbids): aioquic parses the list at every handshake, and a warning there would be one
    per connection, or an error in a program that turns warnings into errors."""
    from cryptography import x509

    kept = []
    for der in certificates:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                x509.load_der_x509_certificate(der)
            except Exception:  # a warning (now an error) or a certificate it cannot read
                continue
        kept.append(ssl.DER_cert_to_PEM_cert(der))
    return "".join(kept).encode("ascii")


def quic_configuration(
    trust: QuicTrust,
    server_name: str,
    ticket: SessionTicket | None,
) -> QuicConfiguration:
    """A client configuration for one connection to ``server_name`` (SNI and the name its
    certificate must carry), resuming ``ticket`` if given. Raises ``ValueError`` naming
    ``cert`` when the client certificate does not load."""
    from aioquic.h3.connection import H3_ALPN
    from aioquic.quic.configuration import QuicConfiguration

    config = QuicConfiguration(
        is_client=True,
        alpn_protocols=list(H3_ALPN),
        # SNI and the name the certificate must carry (aioquic checks it whenever it has one,
        # so a context that verifies the chain but not the name sends none).
        server_name=server_name if trust.check_hostname or not trust.verify else None,
        verify_mode=ssl.CERT_REQUIRED if trust.verify else ssl.CERT_NONE,
        max_data=CONNECTION_WINDOW,
        max_stream_data=STREAM_WINDOW,
        idle_timeout=IDLE_TIMEOUT,
    )
    if trust.verify:
        config.load_verify_locations(cafile=trust.cafile, capath=trust.capath, cadata=trust.cadata)
    cert = trust.cert
    if cert is not None:
        certfile, keyfile, password = (
            (cert, None, None)
            if isinstance(cert, str)
            else (cert[0], cert[1], cert[2] if len(cert) == 3 else None)
        )
        try:
            config.load_cert_chain(certfile, keyfile, password)
        except (OSError, ValueError, TypeError) as exc:
            raise ValueError(f"cert={cert!r}: the client certificate did not load: {exc}") from None
    if ticket is not None:
        config.session_ticket = ticket
    return config


@dataclass(slots=True)
class TicketStore:
    """Session tickets per origin (``(host, port)``), the latest first-use only.

    A ticket is used once (RFC 8446 §C.4 and RFC 9001 §4.5: reuse lets an observer link
    connections), and not after its lifetime. The store holds one per origin: each new
    connection is issued a fresh one.
    """

    tickets: dict[tuple[str, int], SessionTicket] = field(default_factory=dict)

    def take(self, origin: tuple[str, int]) -> SessionTicket | None:
        """The origin's ticket, removed from the store, if one is still valid."""
        ticket = self.tickets.pop(origin, None)
        if ticket is None:
            return None
        expiry = ticket.not_valid_after.timestamp()
        return ticket if expiry > time.time() else None

    def keep(self, origin: tuple[str, int], ticket: SessionTicket) -> None:
        """Remember ``ticket`` (the server's newest) for the next connection to ``origin``."""
        self.tickets[origin] = ticket


def allows_early_data(ticket: SessionTicket | None) -> bool:
    """Whether ``ticket`` lets the next connection send 0-RTT early data."""
    return ticket is not None and bool(ticket.max_early_data_size)
