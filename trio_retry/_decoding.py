"""Content decoding (gzip, deflate) with the standard library, streaming and size-bounded.

``Accept-Encoding: gzip, deflate`` is sent by default; ``content``, ``text`` and
``aiter_bytes()`` are decoded, ``aiter_raw()`` is not. The decoded size is checked *while*
decompressing (``max_length`` on each step), so a decompression bomb costs at most the limit in
memory, never its full expansion.
"""

from __future__ import annotations

import zlib

__all__ = ["ACCEPT_ENCODING", "DecodeError", "Decoder", "make_decoder"]

ACCEPT_ENCODING = "gzip, deflate"


class DecodeError(Exception):
    """The body does not decode as its Content-Encoding says, or exceeds the size limit."""


class Decoder:
    """Decodes one body incrementally; ``limit`` bounds the decoded total (None: unbounded)."""

    __slots__ = ("_decompressors", "_deflate_probe", "_limit", "_total", "encodings")

    def __init__(self, encodings: list[str], limit: int | None) -> None:
        self.encodings = encodings
        self._limit = limit
        self._total = 0
        self._deflate_probe = False
        self._decompressors: list[zlib._Decompress] = []
        for encoding in reversed(encodings):  # the last applied is undone first
            if encoding in ("gzip", "x-gzip"):
                self._decompressors.append(zlib.decompressobj(16 + zlib.MAX_WBITS))
            elif encoding == "deflate":
                # RFC 9110 "deflate" is zlib-wrapped, but some servers send raw deflate.
                self._decompressors.append(zlib.decompressobj(zlib.MAX_WBITS))
                self._deflate_probe = True
            else:  # pragma: no cover - filtered by make_decoder
                raise DecodeError(f"unsupported content-encoding {encoding!r}")

    def _step(self, index: int, data: bytes) -> bytes:
        room = None if self._limit is None else self._limit - self._total + 1
        decompressor = self._decompressors[index]
        try:
            out = (
                decompressor.decompress(data, room or 0)
                if room is not None
                else (decompressor.decompress(data))
            )
        except zlib.error as exc:
            if self._deflate_probe and index == 0 and self._total == 0:
                # Retry as raw deflate (no zlib header).
                self._decompressors[index] = zlib.decompressobj(-zlib.MAX_WBITS)
                self._deflate_probe = False
                return self._step(index, data)
            raise DecodeError(f"the body is not valid {self.encodings}: {exc}") from exc
        if decompressor.unconsumed_tail:
            raise DecodeError(self._too_large())
        return out

    def _too_large(self) -> str:
        return (
            f"the decoded response body exceeds max_body_bytes ({self._limit} bytes): "
            "possibly a decompression bomb"
        )

    def decode(self, data: bytes) -> bytes:
        """Decode one chunk (may return ``b""`` while the decompressor buffers)."""
        for index in range(len(self._decompressors)):
            data = self._step(index, data)
        self._deflate_probe = False
        self._total += len(data)
        if self._limit is not None and self._total > self._limit:
            raise DecodeError(self._too_large())
        return data

    def flush(self) -> bytes:
        """Whatever is left at the end of the body."""
        data = b""
        for index, decompressor in enumerate(self._decompressors):
            data = (self._step(index, data) if data else b"") + decompressor.flush()
        self._total += len(data)
        if self._limit is not None and self._total > self._limit:
            raise DecodeError(self._too_large())
        return data


def make_decoder(content_encoding: str | None, limit: int | None) -> Decoder | None:
    """A decoder for a ``Content-Encoding`` value, or ``None`` when the body is not encoded
    (or uses an encoding we did not ask for, which is then passed through undecoded)."""
    if not content_encoding:
        return None
    encodings = [e.strip().lower() for e in content_encoding.split(",") if e.strip()]
    encodings = [e for e in encodings if e != "identity"]
    if not encodings or any(e not in ("gzip", "x-gzip", "deflate") for e in encodings):
        return None
    return Decoder(encodings, limit)
