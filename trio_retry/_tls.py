"""The client's TLS context from ``verify=`` and ``cert=`` (httpx's meanings).

``verify=True`` (the default) trusts the system's store and checks host names; ``verify="ca.pem"``
(a file or a directory of hashed certificates) trusts that instead; ``verify=False`` turns both
checks off and warns, loudly, every time a client is built that way. ``cert="client.pem"``,
``cert=("client.crt", "client.key")`` or ``cert=("client.crt", "client.key", "password")``
presents a client certificate (mutual TLS).

For all of those the client builds, and so owns, its context, and sets its ALPN list on it,
and matches the host name against the certificate's subjectAltName only, never its subject's
common name (``hostname_checks_common_name = False``, RFC 9525 §6.3: Python's default still
falls back to the CN of a certificate without a DNS name).

``verify=ssl_context`` (or the older ``ssl_context=``) hands the client a context of the caller's.
It is used exactly as given and never changed. Python cannot copy an ``SSLContext`` (no copy, no
pickling, no way to read back a loaded client certificate or a lazily loaded CA directory) nor
set ALPN per connection (``set_alpn_protocols`` exists only on the context), so a "copy with our
ALPN" would silently drop part of what the caller configured. Rejected for that reason. Instead
the caller's own ALPN list is what is offered: call ``ctx.set_alpn_protocols(["h2", "http/1.1"])``
for HTTP/2, or leave it unset for HTTP/1.1. :func:`check_alpn` refuses a connection on which
the server picked a protocol the client was told not to speak (``h2`` with ``http2=False``).
"""

from __future__ import annotations

import os
import ssl
import warnings
from typing import TypeAlias, Union

from ._core.secrecy import unencodable_at, withheld

__all__ = [
    "CertTypes",
    "ContextSource",
    "InsecureTLSWarning",
    "VerifyTypes",
    "build_ssl_context",
    "context_source",
]

VerifyTypes: TypeAlias = Union[bool, str, "os.PathLike[str]", ssl.SSLContext]
CertTypes: TypeAlias = str | tuple[str, str] | tuple[str, str, str] | None


class InsecureTLSWarning(UserWarning):
    """Issued when a ``Client`` is built with ``verify=False``: its TLS connections accept any
    certificate for any host name, so anyone on the path can read and change the traffic."""


_INSECURE = (
    "Client(verify=False): TLS certificates and host names are NOT checked. Anyone on the "
    "network path can impersonate the server and read or change every request, credentials "
    "included. Use verify='ca.pem' to trust a private CA instead."
)


def alpn_protocols(http2: bool) -> list[str]:
    """The ALPN list the client offers on a context it owns."""
    return ["h2", "http/1.1"] if http2 else ["http/1.1"]


def build_ssl_context(
    verify: VerifyTypes, cert: CertTypes, *, http2: bool
) -> tuple[ssl.SSLContext, bool]:
    """The context for every TLS connection of one client, and whether the client owns it.

    A context the client owns is new and carries the ALPN list for ``http2``; a caller's context
    (``verify=ctx``) comes back as the same object, untouched. Raises ``TypeError`` or
    ``ValueError`` naming ``verify`` or ``cert`` for a wrong value, a missing file, or a
    certificate/key that does not load; nothing is connected here.
    """
    if isinstance(verify, ssl.SSLContext):
        if cert is not None:
            raise ValueError(
                "cert= cannot be combined with verify=<ssl.SSLContext>: load the client "
                "certificate into your context (ctx.load_cert_chain(...)), or pass "
                "verify=True or a CA bundle path together with cert="
            )
        return verify, False
    if isinstance(verify, bool):
        if not verify:
            warnings.warn(_INSECURE, InsecureTLSWarning, stacklevel=3)
        context = _system_context(verify, http2)
    elif isinstance(verify, (str, os.PathLike)):
        path = os.fspath(verify)
        try:
            if os.path.isdir(path):
                context = ssl.create_default_context(capath=path)
            elif os.path.isfile(path):
                context = ssl.create_default_context(cafile=path)
            else:
                raise ValueError(
                    f"verify={path!r}: no such file or directory (verify= accepts True, False, "
                    "the path of a CA bundle file or of a directory of CA certificates, or an "
                    "ssl.SSLContext)"
                )
        except (ssl.SSLError, OSError) as exc:
            raise ValueError(f"verify={path!r}: the CA certificates did not load: {exc}") from None
    else:
        raise TypeError(
            "verify= must be True, False, a CA bundle path (str) or an ssl.SSLContext, got "
            f"{type(verify).__name__}"
        )
    context.hostname_checks_common_name = False
    if cert is not None:
        _load_cert(context, cert)
    context.set_alpn_protocols(alpn_protocols(http2))
    return context, True


def _system_context(verify: bool, http2: bool) -> ssl.SSLContext:
    """A new context trusting the system's store (``verify=True``) or nothing checked, with the
    client's settings and ALPN list. Raises nothing."""
    context = ssl.create_default_context()
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    context.hostname_checks_common_name = False
    context.set_alpn_protocols(alpn_protocols(http2))
    return context


class ContextSource:
    """A client's TLS context, as :func:`build_ssl_context` gives it, but for ``verify=True``
    or ``False`` without ``cert=`` built on its first use (the first TLS connection) instead
    of by ``Client()``: ``ssl.create_default_context()`` loads the system's CA store, tens of
    milliseconds a client of ``http://`` URLs never needs. Nothing in building that one can
    fail, so no error moves from ``Client()`` to a request; ``verify=False`` still warns at
    ``Client()``. :meth:`get` returns the same context every time."""

    __slots__ = ("_context", "_http2", "_verify")

    def __init__(
        self, context: ssl.SSLContext | None, *, verify: bool = True, http2: bool = False
    ) -> None:
        self._context = context
        self._verify = verify
        self._http2 = http2

    @property
    def built(self) -> bool:
        """Whether the context exists yet."""
        return self._context is not None

    def get(self) -> ssl.SSLContext:
        context = self._context
        if context is None:
            context = self._context = _system_context(self._verify, self._http2)
        return context


def context_source(
    verify: VerifyTypes, cert: CertTypes, *, http2: bool
) -> tuple[ContextSource, bool]:
    """:func:`build_ssl_context`'s context and whether the client owns it, built now where
    building can fail (a CA path, ``cert=``) or is the caller's (a context), else on first use
    (see :class:`ContextSource`); the same errors and warning, raised here."""
    if isinstance(verify, bool) and cert is None:
        if not verify:
            warnings.warn(_INSECURE, InsecureTLSWarning, stacklevel=3)
        return ContextSource(None, verify=verify, http2=http2), True
    context, owned = build_ssl_context(verify, cert, http2=http2)
    return ContextSource(context), owned


def _load_cert(context: ssl.SSLContext, cert: CertTypes) -> None:
    accepted = (
        "cert= accepts a path to a PEM file holding the certificate and its key, or a tuple "
        "(certfile, keyfile) or (certfile, keyfile, password)"
    )
    if isinstance(cert, (str, os.PathLike)):
        certfile, keyfile, password = os.fspath(cert), None, None
    elif isinstance(cert, tuple) and len(cert) in (2, 3) and all(isinstance(c, str) for c in cert):
        certfile, keyfile = cert[0], cert[1]
        password = cert[2] if len(cert) == 3 else None
    else:
        raise TypeError(f"{accepted}; got {withheld(cert)}")  # it may hold the password
    for path in (certfile, keyfile):
        if path is not None and not os.path.isfile(path):
            raise ValueError(f"cert=: no such file {path!r} ({accepted})")
    position = None if password is None else unencodable_at(password)
    if position is not None:  # (OpenSSL's loader would raise UnicodeEncodeError, holding it)
        raise ValueError(
            f"cert=: the password holds a lone surrogate at position {position}, which UTF-8 "
            "cannot encode (it is not shown)"
        )
    try:
        context.load_cert_chain(certfile, keyfile, password)
    except (ssl.SSLError, OSError) as exc:
        # The message never includes the password.
        raise ValueError(
            f"cert=: the client certificate {certfile!r} did not load (wrong key, wrong "
            f"password, or not PEM): {exc}"
        ) from None


def check_alpn(selected: str | None, http2: bool) -> str | None:
    """Why a negotiated protocol cannot be used (``None``: it can).

    Only a caller's context can offer ``h2`` to a ``Client(http2=False)``: ours never does.
    """
    if selected == "h2" and not http2:
        return (
            "the server chose HTTP/2 from the ALPN list of the ssl.SSLContext given to the "
            "client, but the client was built with http2=False; offer only 'http/1.1' on that "
            "context (ctx.set_alpn_protocols(['http/1.1'])) or allow http2"
        )
    if selected not in (None, "h2", "http/1.1"):
        return f"the server chose ALPN protocol {selected!r}, which this client does not speak"
    return None
