"""Decrypted bytes already in hand, taken in one go: a read of a TLS stream that returns more
than one TLS record.

``trio.SSLStream.receive_some`` returns the plaintext of at most one TLS record (16 KiB, often
less: nginx sends HTTP/2 DATA in 8 KiB records), however many records its last socket read
brought in, and each call goes through its ``_retry`` loop and two scheduler checkpoints. A
50 MB download is then thousands of rounds through trio, the reader and the body's consumer
for bytes that were already in memory: most of a bulk transfer's CPU.

:func:`more_decrypted` takes what the TLS object can decrypt *now*, from what the socket
already gave, right after a ``receive_some`` returned: the same bytes, in the same order, the
next ``receive_some`` calls would have returned, without their rounds. It never reads the
socket and never waits. It stops at the first record not fully received, at ``limit`` bytes,
and at anything else the TLS object says (the peer's close_notify, an alert, a broken record):
that is left for the next ``receive_some``, which reports it as it would have.

It reaches into ``trio.SSLStream``'s TLS object (``_ssl_object``, an ``ssl.SSLObject``): no
public API gives more than one record per call. A stream without one (plain TCP, a test's
memory stream) is left alone, so a trio that renamed the attribute only costs the speed-up;
``tests/wire/test_tlsread.py`` checks that it is found and that a download through it gives
the bytes a read per record gives.

The obvious alternative, a TLS stream of our own over ``ssl.MemoryBIO``, would make
handshakes, renegotiation, close_notify and TLS 1.3 tickets ours to get right; this reads
only, between two of trio's own calls, where trio would call the very same ``read``.
"""

from __future__ import annotations

import ssl

import trio

__all__ = ["MORE_AFTER", "more_decrypted"]

#: Only a record at least this large is followed by a look for more: a short one is, as a
#: rule, the end of what the peer sent, and the look would cost a small response an
#: exception (``SSLWantReadError``) for nothing.
MORE_AFTER = 8192


def more_decrypted(
    stream: trio.abc.ReceiveStream, data: bytes | bytearray, limit: int
) -> bytes | bytearray:
    """``data`` (what ``stream.receive_some`` just returned) and whatever ``stream`` can
    decrypt without reading its socket, up to ``limit`` bytes in all. Never raises, never
    waits; ``data`` itself when there is nothing more, when ``stream`` is not TLS, or when
    ``data`` is shorter than :data:`MORE_AFTER`."""
    if len(data) < MORE_AFTER or len(data) >= limit:
        return data
    tls = getattr(stream, "_ssl_object", None)
    if not isinstance(tls, ssl.SSLObject):
        return data
    parts = [data]
    size = len(data)
    while size < limit:
        try:
            more = tls.read(limit - size)
        except (ssl.SSLError, ValueError):
            break  # nothing whole left (SSLWantReadError), or news for the next receive_some
        if not more:
            break
        parts.append(more)
        size += len(more)
    return data if len(parts) == 1 else b"".join(parts)
