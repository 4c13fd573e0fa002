"""Which TLS stream a connection gets: TLS on its socket (``tlssock.py``) or ``trio.SSLStream``.

What TLS on the socket needs (:func:`supported`), else the connection uses ``trio.SSLStream``:
a :class:`~.rawsock.RawSocketStream` (not a proxy's tunnel, not a caller's ``transport=``) and
a plain ``ssl.SSLContext`` (a subclass, or a custom ``sslsocket_class``/``sslobject_class``,
may change what wrapping does: truststore's context verifies in its ``wrap_*`` methods), on
OpenSSL 3 with the ``ssl`` module's private names it relies on (``tlssock.AVAILABLE``).

Off by default: ``TRIO_RETRY_TLS_FAST_PATH=1`` turns it on (:func:`enabled_by_env`).
"""

from __future__ import annotations

import os
import ssl

import trio

from .rawsock import RawSocketStream
from .tlssock import AVAILABLE, OPENSSL_3, TLSSocketStream

__all__ = ["ENV", "enabled_by_env", "supported", "tls_stream"]

#: ``1``, ``true``, ``yes`` or ``on``: TLS on the socket where :func:`supported`; unset (the
#: default), ``0``, ``false``, ``no`` or ``off``: every connection uses ``trio.SSLStream``.
ENV = "TRIO_RETRY_TLS_FAST_PATH"
_OFF = frozenset({"", "0", "false", "no", "off"})
_ON = frozenset({"1", "true", "yes", "on"})


def enabled_by_env() -> bool:
    """True when ``TRIO_RETRY_TLS_FAST_PATH`` turns this stream on (read once per client; off
    when unset); a value in neither set raises ``ValueError`` naming the variable."""
    value = os.environ.get(ENV, "").strip().lower()
    if value in _OFF:
        return False
    if value in _ON:
        return True
    raise ValueError(
        f"{ENV} must be one of 0, false, no, off (TLS through trio.SSLStream, the default) or "
        f"1, true, yes, on (TLS on the socket), got {value!r}"
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
