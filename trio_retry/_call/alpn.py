"""What a caller's ``ssl.SSLContext`` offers by ALPN, which Python gives no getter for.

Read from what the context does, not from what it was told: the context writes a ClientHello
into memory (``wrap_bio``, nothing connected, the context itself unchanged) and the ALPN
extension of that ClientHello is the list every connection of the client would offer. Asked only
at construction, for ``Client(http2=True)`` given explicitly with a caller's context
(SPEC §12: HTTP/2 is never dropped silently).
"""

from __future__ import annotations

import ssl

__all__ = ["offered_alpn"]

_HANDSHAKE = 22  # TLS record type
_CLIENT_HELLO = 1  # handshake message type
_ALPN = 16  # extension type (RFC 7301)


def offered_alpn(context: ssl.SSLContext) -> list[str] | None:
    """The protocols ``context`` offers by ALPN (``[]``: none), or ``None`` when that cannot be
    known (a context that cannot start a client handshake, or a ClientHello not understood)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    try:
        tls = context.wrap_bio(
            incoming, outgoing, server_side=False, server_hostname="alpn.invalid"
        )
        try:
            tls.do_handshake()
        except ssl.SSLWantReadError:  # the ClientHello is written; the server's answer awaited
            pass
        return _alpn_of(_handshake_bytes(outgoing.read()))
    except (ssl.SSLError, ValueError, IndexError, OSError):
        return None


def _handshake_bytes(records: bytes) -> bytes:
    """The handshake messages carried by ``records`` (TLS records), joined."""
    out = bytearray()
    at = 0
    while at + 5 <= len(records):
        kind, length = records[at], int.from_bytes(records[at + 3 : at + 5], "big")
        if kind != _HANDSHAKE:
            raise ValueError("not a handshake record")
        out += records[at + 5 : at + 5 + length]
        at += 5 + length
    return bytes(out)


def _alpn_of(hello: bytes) -> list[str]:
    """The ALPN list of a ClientHello message (``[]`` without the extension)."""
    if not hello or hello[0] != _CLIENT_HELLO:
        raise ValueError("not a ClientHello")
    end = 4 + int.from_bytes(hello[1:4], "big")
    at = 4 + 2 + 32  # type and length; legacy version; random
    at += 1 + hello[at]  # session id
    at += 2 + int.from_bytes(hello[at : at + 2], "big")  # cipher suites
    at += 1 + hello[at]  # compression methods
    if at >= end:
        return []  # no extensions at all
    extensions_end = at + 2 + int.from_bytes(hello[at : at + 2], "big")
    at += 2
    while at + 4 <= extensions_end:
        kind = int.from_bytes(hello[at : at + 2], "big")
        length = int.from_bytes(hello[at + 2 : at + 4], "big")
        at += 4
        if kind == _ALPN:
            body = hello[at + 2 : at + length]  # past the list's own length
            names = []
            while body:
                size = body[0]
                names.append(body[1 : 1 + size].decode("ascii"))
                body = body[1 + size :]
            return names
        at += length
    return []
