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

aioquic is an optional dependency (the ``http3`` extra): :func:`require_aioquic` is the one
place that imports it, with an error naming the extra.
"""

from __future__ import annotations

import os
import ssl
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..._tls import CertTypes, VerifyTypes

if TYPE_CHECKING:
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.tls import SessionTicket

__all__ = ["TicketStore", "TrustSource", "quic_configuration", "require_aioquic"]

#: Receive windows: 8 MiB per connection, 2 MiB per stream (aioquic's defaults are 1 MiB
#: each, which caps a 10 ms-RTT transfer at ~100 MB/s and lets one stream use all of it).
CONNECTION_WINDOW = 8 * 1024 * 1024
STREAM_WINDOW = 2 * 1024 * 1024
#: A QUIC connection with nothing to do is closed by aioquic after this long.
IDLE_TIMEOUT = 30.0


def require_aioquic() -> None:
    """Import aioquic, or raise ``ImportError`` naming the extra that installs it."""
    try:
        import aioquic.h3.connection
        import aioquic.quic.connection  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "HTTP/3 (http3=True) needs aioquic; install it with pip install 'trio_retry[http3]'"
        ) from exc


@dataclass(frozen=True, slots=True)
class TrustSource:
    """Where a QUIC connection's verification settings come from (the client's TLS ones)."""

    context: ssl.SSLContext
    verify: VerifyTypes = True
    cert: CertTypes = None
    owns_context: bool = True


def _ca_pem(source: TrustSource) -> tuple[bytes | None, str | None, str | None]:
    """The CA certificates to trust: ``(cadata, cafile, capath)`` for aioquic."""
    verify = source.verify
    if source.owns_context and isinstance(verify, (str, os.PathLike)):
        path = os.fspath(verify)
        return (None, None, path) if os.path.isdir(path) else (None, path, None)
    listed = source.context.get_ca_certs(binary_form=True)
    pem = "".join(ssl.DER_cert_to_PEM_cert(der) for der in listed).encode("ascii")
    if source.owns_context or not listed:
        # The system's store, loaded by path (not listed by get_ca_certs until used).
        paths = ssl.get_default_verify_paths()
        cafile = paths.cafile if paths.cafile and os.path.isfile(paths.cafile) else None
        capath = paths.capath if paths.capath and os.path.isdir(paths.capath) else None
        if cafile is not None or capath is not None:
            return (pem or None), cafile, capath
    return (pem or None), None, None


def quic_configuration(
    source: TrustSource,
    server_name: str,
    ticket: SessionTicket | None,
    max_header_bytes: int,
) -> QuicConfiguration:
    """A client configuration for one connection to ``server_name`` (SNI and the name its
    certificate must carry), resuming ``ticket`` if given. Raises ``ValueError`` naming
    ``cert`` when the client certificate does not load."""
    from aioquic.h3.connection import H3_ALPN
    from aioquic.quic.configuration import QuicConfiguration

    context = source.context
    verifying = context.verify_mode != ssl.CERT_NONE
    config = QuicConfiguration(
        is_client=True,
        alpn_protocols=list(H3_ALPN),
        server_name=server_name,
        verify_mode=ssl.CERT_REQUIRED if verifying else ssl.CERT_NONE,
        max_data=CONNECTION_WINDOW,
        max_stream_data=STREAM_WINDOW,
        idle_timeout=IDLE_TIMEOUT,
    )
    if verifying and not context.check_hostname:
        # A context that verifies the chain but not the name (rare, explicit): aioquic checks
        # the name whenever it has one, so SNI is left out rather than the check faked.
        config.server_name = None
    if verifying:
        cadata, cafile, capath = _ca_pem(source)
        config.load_verify_locations(cafile=cafile, capath=capath, cadata=cadata)
    cert = source.cert
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
