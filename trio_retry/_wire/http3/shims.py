"""aioquic's two classes as this client runs them, and the private names they read.

One job: the places where the client needs of aioquic what it offers no public way to do,
each behind a probe that fails closed (the dependency is pinned below 2 in ``pyproject.toml``):

- :class:`CheckedQuicConnection` checks the server's certificate chain with the client's own
  ``ssl.SSLContext`` (``verify.py``) after each datagram of the handshake, before the driver
  sends anything more, so a refused server never receives the client's Finished, its
  certificate or a request. It reads the chain and the server's CertificateRequest from
  aioquic's TLS state (``_peer_certificate``, ``_peer_certificate_chain``,
  ``_certificate_request``); if those names are gone, every handshake is refused in words
  (HTTP/3 then falls back to TCP), never accepted unchecked.
- :class:`PushlessH3Connection` advertises no MAX_PUSH_ID (aioquic's client sends 8, though
  this client never takes a push): a server may then push nothing (RFC 9114 §4.6), and a
  PUSH_PROMISE is a connection error H3_ID_ERROR (aioquic's own check, §7.2.5). It sets
  aioquic's ``_max_push_id`` before the control stream is written (``_init_connection``).

A refusal is raised out of :meth:`CheckedQuicConnection.receive_datagram` as
:class:`HandshakeRefused` once the connection is closed with the matching TLS alert
(CRYPTO_ERROR, RFC 9001 §4.8); the connection then yields no more events, so the handshake
it refused never completes as far as the driver sees.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

from aioquic.h3.connection import H3Connection
from aioquic.quic.connection import NetworkAddress, QuicConnection
from aioquic.quic.packet import QuicErrorCode, QuicFrameType
from aioquic.tls import State
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from ..._core.evidence import FailureCategory
from .verify import check_chain

if TYPE_CHECKING:
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.events import QuicEvent
    from aioquic.tls import SessionTicketHandler

    from .quic import QuicTrust

__all__ = ["CheckedQuicConnection", "HandshakeRefused", "PushlessH3Connection"]

_MISSING = object()
#: TLS alerts sent when the client refuses (RFC 8446 §6.2).
_BAD_CERTIFICATE = 42
_HANDSHAKE_FAILURE = 40


class HandshakeRefused(Exception):
    """The client refused the server's side of the QUIC handshake: ``category`` and words."""

    def __init__(self, category: FailureCategory, message: str) -> None:
        super().__init__(message)
        self.category = category
        self.message = message


class CheckedQuicConnection(QuicConnection):
    """A client ``QuicConnection`` whose server is checked by the client's TLS context; see
    the module docstring."""

    def __init__(
        self,
        *,
        configuration: QuicConfiguration,
        trust: QuicTrust,
        session_ticket_handler: SessionTicketHandler | None = None,
    ) -> None:
        super().__init__(configuration=configuration, session_ticket_handler=session_ticket_handler)
        self._trust_source = trust
        self._trust_host = configuration.server_name
        self._trust_chain_checked = not trust.verify
        self._trust_settled = False  # the handshake is past every check
        self._trust_refused = False

    def receive_datagram(self, data: bytes, addr: NetworkAddress, now: float) -> None:
        """aioquic's, then the checks of the handshake's progress. Raises
        :class:`HandshakeRefused` (the connection closed with an alert) on a refusal."""
        super().receive_datagram(data, addr, now)
        if not self._trust_settled and not self._trust_refused:
            self._check_handshake()

    def next_event(self) -> QuicEvent | None:
        """aioquic's next event; none once the client refused the server."""
        return None if self._trust_refused else super().next_event()

    def _check_handshake(self) -> None:
        tls = self.tls
        request = getattr(tls, "_certificate_request", _MISSING)
        leaf = getattr(tls, "_peer_certificate", _MISSING)
        chain = getattr(tls, "_peer_certificate_chain", _MISSING)
        if request is _MISSING or leaf is _MISSING or not isinstance(chain, list):
            self._refuse(
                FailureCategory.TLS_HANDSHAKE,
                "this aioquic version does not show the server's certificate, so HTTP/3 "
                "cannot check it",
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
        if not self._trust_chain_checked and isinstance(leaf, x509.Certificate):
            der = [cert.public_bytes(Encoding.DER) for cert in [leaf, *chain]]
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
        if tls.state is State.CLIENT_POST_HANDSHAKE:
            if not self._trust_chain_checked and not tls.session_resumed:
                self._refuse(
                    FailureCategory.TLS_CERTIFICATE,
                    "the handshake ended without a certificate to check",
                    _BAD_CERTIFICATE,
                )
            self._trust_settled = True  # (a resumed session's server was checked before)

    def _refuse(self, category: FailureCategory, message: str, alert: int) -> NoReturn:
        self._trust_refused = True
        self.close(
            error_code=QuicErrorCode.CRYPTO_ERROR + alert,
            frame_type=QuicFrameType.CRYPTO,
            reason_phrase="",
        )
        raise HandshakeRefused(category, message)


class PushlessH3Connection(H3Connection):
    """A client ``H3Connection`` that advertises no MAX_PUSH_ID; see the module docstring."""

    def _init_connection(self) -> None:
        # aioquic writes MAX_PUSH_ID on the control stream here when this is not None.
        self._max_push_id = None
        super()._init_connection()
