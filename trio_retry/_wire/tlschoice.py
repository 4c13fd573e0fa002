"""Which TLS stream a connection gets: TLS on its socket (``tlssock.py``), or ``trio.SSLStream``.

TLS on the socket is the default wherever it can carry the connection exactly as
``trio.SSLStream`` would (:func:`supported`): a small request over TLS costs about a third less
CPU on it, HTTP/1.1 and HTTP/2, and since its large writes leave in full segments (``TCP_CORK``)
50 MB uploads are as fast as on ``trio.SSLStream`` (docs/benchmarks.md, "TLS on the socket").
``trio.SSLStream`` stays for what it needs:

- a socket that is not ours: a proxy's tunnel (HTTP CONNECT, SOCKS, an ``https://`` proxy; the
  caller passes ``fast=False``), a caller's ``transport=``, a custom Trio socket factory;
- a context whose wrapping may differ: a subclass of ``ssl.SSLContext`` (truststore's verifies
  in its ``wrap_*`` methods) or one with a custom ``sslsocket_class``/``sslobject_class``;
- a Python or an OpenSSL without what it relies on (OpenSSL 3, ``tlssock.AVAILABLE``).

``TRIO_RETRY_TLS_FAST_PATH=0`` (:func:`enabled_by_env`) puts every connection on
``trio.SSLStream``: the way back, should a server ever show a difference the differential tests
(``tests/wire/test_tlssock*.py``) do not.
"""

from __future__ import annotations

import os
import ssl

import trio

from .rawsock import RawSocketStream
from .tlssock import AVAILABLE, OPENSSL_3, TLSSocketStream

__all__ = ["ENV", "enabled_by_env", "supported", "tls_stream"]

#: Unset (the default), ``1``, ``true``, ``yes`` or ``on``: TLS on the socket where
#: :func:`supported`; ``0``, ``false``, ``no`` or ``off``: every connection uses
#: ``trio.SSLStream``.
ENV = "TRIO_RETRY_TLS_FAST_PATH"
_OFF = frozenset({"0", "false", "no", "off"})
_ON = frozenset({"", "1", "true", "yes", "on"})


def enabled_by_env() -> bool:
    """False when ``TRIO_RETRY_TLS_FAST_PATH`` turns TLS on the socket off (read once per
    client; on when unset); a value in neither set raises ``ValueError`` naming the variable."""
    value = os.environ.get(ENV, "").strip().lower()
    if value in _OFF:
        return False
    if value in _ON:
        return True
    raise ValueError(
        f"{ENV} must be one of 0, false, no, off (TLS through trio.SSLStream) or 1, true, "
        f"yes, on (TLS on the socket where it can be, the default), got {value!r}"
    )


def supported(transport: trio.abc.Stream, context: ssl.SSLContext) -> bool:
    """Whether :class:`TLSSocketStream` can carry TLS over ``transport`` with ``context``
    exactly as ``trio.SSLStream`` would (see the module's docstring)."""
    return (
        AVAILABLE
        and OPENSSL_3
        and type(transport) is RawSocketStream
        and type(context) is ssl.SSLContext
        and context.sslsocket_class is ssl.SSLSocket
        and context.sslobject_class is ssl.SSLObject
    )


def tls_stream(
    transport: trio.abc.Stream,
    context: ssl.SSLContext,
    server_hostname: str | None,
    *,
    fast: bool = True,
) -> TLSSocketStream | trio.SSLStream[trio.abc.Stream]:
    """The client-side TLS stream over ``transport``, its handshake not yet made: a
    :class:`TLSSocketStream` when ``fast`` and :func:`supported`, else
    ``trio.SSLStream(..., https_compatible=True)``. Either raises the same errors."""
    if fast and supported(transport, context):
        assert isinstance(transport, RawSocketStream)
        return TLSSocketStream(transport, context, server_hostname)
    return trio.SSLStream(
        transport, context, server_hostname=server_hostname, https_compatible=True
    )
