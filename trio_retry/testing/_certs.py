"""The fault server's certificates: one throwaway authority, one certificate it signed.

One job: make them (with trustme, the ``testing`` extra, imported only when TLS is asked for)
and hand them out in the forms each side needs: the server's TCP context with its ALPN list,
the certificate and key as PEM for QUIC, and a client context that trusts the authority.
"""

from __future__ import annotations

import ssl

__all__ = ["ServerCertificates"]


class ServerCertificates:
    """An authority and a certificate for ``127.0.0.1``, ``::1`` and ``localhost``; see the module
    docstring. Raises ``ImportError`` naming the extra when trustme is missing."""

    __slots__ = ("_ca", "cert_pem", "key_pem", "server_context")

    def __init__(self, *, http2: bool) -> None:
        try:
            import trustme
        except ImportError as exc:
            raise ImportError(
                "FaultServer(tls=True) needs trustme to make its certificates; install it with "
                "pip install 'trio_retry[testing]'"
            ) from exc

        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1", "::1", "localhost")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(context)
        context.set_alpn_protocols(["h2", "http/1.1"] if http2 else ["http/1.1"])
        self._ca = ca
        #: The server's TCP context (its ALPN list: ``h2`` only when it speaks HTTP/2).
        self.server_context = context
        #: The certificate chain and its key, as PEM (the QUIC endpoint loads them).
        self.cert_pem = b"".join(blob.bytes() for blob in cert.cert_chain_pems)
        self.key_pem = cert.private_key_pem.bytes()

    @property
    def ca_pem(self) -> bytes:
        """The authority's certificate, as PEM."""
        return self._ca.cert_pem.bytes()

    def client_context(self, *, offer_h2: bool) -> ssl.SSLContext:
        """A new client context that trusts the authority, offering ``h2`` by ALPN if told."""
        context = ssl.create_default_context()
        context.hostname_checks_common_name = False  # RFC 9525 §6.3, as the client's own
        self._ca.configure_trust(context)
        context.set_alpn_protocols(["h2", "http/1.1"] if offer_h2 else ["http/1.1"])
        return context
