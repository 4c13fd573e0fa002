"""A connection's reads that take every TLS record already received, not one per call.

``trio.SSLStream.receive_some`` returns the plaintext of at most one TLS record (16 KiB, often
less: nginx sends HTTP/2 DATA in 8 KiB records), however many records its last socket read
brought in, and each call goes through its ``_retry`` loop and two scheduler checkpoints. A
50 MB download is then thousands of rounds through trio, the reader and the body's consumer
for bytes that were already in memory: most of a bulk transfer's CPU.

:meth:`Reads.more`, applied to what ``receive_some`` returned, takes what the TLS object can
decrypt *now*, from what the socket already gave: the same bytes, in the same
order, the next ``receive_some`` calls would have returned, without their rounds. It never
reads the socket and never waits for more. It stops at the first record not fully received,
at its limit, and at the peer's close_notify or the transport's end (left for the next
``receive_some``, which reports them as it would have). A fatal TLS error met there (a broken
record, an alert) cannot be left: OpenSSL reports it once, then only an EOF. It is kept and
raised by the next read instead, as the ``trio.BrokenResourceError`` trio raises for it, so a
connection cut by a forged record never reads as a clean end.

It looks only when trio's buffer of received bytes (``_incoming``, the ``ssl.MemoryBIO`` the
TLS object reads from) or the TLS object itself holds something: a small response is then
joined as well as a bulk one (with 32 HTTP/2 streams, nginx writes each response in a record
of its own, and one socket read brings in many), and a read with nothing behind it costs one
attribute look, never an ``SSLWantReadError``.

It reaches into ``trio.SSLStream``'s TLS object (``_ssl_object``, an ``ssl.SSLObject``): no
public API gives more than one record per call. A stream without one (plain TCP, a test's
memory stream) is read as it is, so a trio that renamed the attribute only costs the speed-up;
``tests/wire/test_tlsread.py`` checks that it is found, that a download through it gives the
bytes a read per record gives, and that a broken record stays an error.

The obvious alternative, a TLS stream of our own over ``ssl.MemoryBIO``, would make
handshakes, renegotiation, close_notify and TLS 1.3 tickets ours to get right; this reads
only, between two of trio's own calls, where trio would call the very same ``read`` (what it
writes, a KeyUpdate's answer, goes out with trio's next call either way).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable

import trio

__all__ = ["MORE_AFTER", "Reads", "reads_of"]

#: A record at least this large is followed by a look for more even when trio's incoming
#: buffer cannot be seen (a trio without ``_incoming``): a short one is, as a rule, the end of
#: what the peer sent, and the blind look would cost a small response an exception
#: (``SSLWantReadError``) for nothing.
MORE_AFTER = 8192


class Reads:
    """What one connection's reads of its TLS ``stream`` (whose TLS object is ``tls``) take
    besides trio's one record (the connection is the stream's only reader)."""

    __slots__ = ("_error", "_incoming", "_limit", "_stream", "_tls")

    def __init__(self, stream: trio.abc.ReceiveStream, limit: int, tls: ssl.SSLObject) -> None:
        self._stream = stream
        self._tls = tls
        #: trio's buffer of received, still encrypted bytes (``SSLStream._incoming``), when it
        #: can be seen: the look for more is then made only when it holds bytes.
        incoming = getattr(stream, "_incoming", None)
        self._incoming = incoming if isinstance(incoming, ssl.MemoryBIO) else None
        #: The most one read returns when it takes more than trio's one record.
        self._limit = limit
        self._error: ssl.SSLError | None = None

    def more(self, data: bytes | bytearray) -> bytes | bytearray:
        """``data``, what ``stream.receive_some()`` just returned, and then whatever is
        decrypted already (up to the limit) if that was a large record. Raises
        ``trio.BrokenResourceError`` (its cause the ``ssl.SSLError``) for a fatal TLS error
        the previous call met after its bytes: whatever the read after it returned (OpenSSL
        then reports only an end), the error is what the caller sees. Never waits."""
        error = self._error
        if error is not None:
            self._error = None
            raise trio.BrokenResourceError("TLS error") from error
        incoming = self._incoming
        if incoming is None:
            if len(data) < MORE_AFTER:
                return data
        elif not incoming.pending:
            return data  # nothing received after this record: no look (and no exception)
        tls = self._tls
        limit = self._limit
        parts = [data]
        size = len(data)
        while size < limit:
            if incoming is not None and not incoming.pending and not tls.pending():
                break  # nothing left that a read could decrypt
            try:
                more = tls.read(limit - size)
            except (ssl.SSLWantReadError, ssl.SSLZeroReturnError, ssl.SSLEOFError):
                break  # nothing whole left, or the end: the next receive_some says which
            except ssl.SSLError as exc:
                self._error = exc  # reported once by OpenSSL: kept for the next read
                break
            if not more:
                break
            parts.append(more)
            size += len(more)
        return data if len(parts) == 1 else b"".join(parts)


def _as_read(data: bytes | bytearray) -> bytes | bytearray:
    return data


def reads_of(
    stream: trio.abc.ReceiveStream, limit: int
) -> Callable[[bytes | bytearray], bytes | bytearray]:
    """What a connection applies to each read of ``stream``: ``Reads(stream, limit).more``
    for a TLS stream, and for any other the read as it is."""
    tls = getattr(stream, "_ssl_object", None)
    if isinstance(tls, ssl.SSLObject):
        return Reads(stream, limit, tls).more
    return _as_read
