"""Hand-made HTTP/2 frames for the fault server (``StreamFrames``, its own GOAWAY), and the
filter that takes the client's GOAWAY frames out before h2 sees them (``_h2.py`` says why)."""

from __future__ import annotations

import struct
from collections.abc import Sequence

import hpack

__all__ = [
    "PREFACE",
    "data_frame",
    "frame",
    "goaway_frame",
    "headers_frame",
    "rst_stream_frame",
]

#: The client connection preface that announces HTTP/2 with prior knowledge (RFC 9113 §3.4).
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def goaway_frame(last_stream_id: int, error_code: int) -> bytes:
    """A serialized GOAWAY frame (RFC 9113 §6.8) without debug data."""
    payload = struct.pack(">II", last_stream_id & 0x7FFFFFFF, error_code)
    # 24-bit length, type 0x7, no flags, stream 0.
    return struct.pack(">I", len(payload))[1:] + bytes((0x7, 0)) + struct.pack(">I", 0) + payload


# --- hand-made frames (for `StreamFrames`) ---------------------------------------------------


def frame(kind: int, flags: int, stream_id: int, payload: bytes) -> bytes:
    """One serialized frame (RFC 9113 §4.1): nothing checks it."""
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes((kind, flags))
        + struct.pack(">I", stream_id & 0x7FFFFFFF)
        + payload
    )


def headers_frame(
    stream_id: int, headers: Sequence[tuple[str, str]], *, end_stream: bool = False
) -> bytes:
    """A HEADERS frame (END_HEADERS set) carrying `headers` exactly as given, in order and
    case. Encoded as HPACK literals that are never indexed, so the client's HPACK table is
    left as it was and the connection's other streams decode as before."""
    encoder = hpack.Encoder()
    block = encoder.encode(
        [
            hpack.NeverIndexedHeaderTuple(n.encode("latin-1"), v.encode("latin-1"))
            for n, v in headers
        ]
    )
    return frame(0x1, 0x4 | (0x1 if end_stream else 0), stream_id, block)


def data_frame(stream_id: int, data: bytes, *, end_stream: bool = False) -> bytes:
    return frame(0x0, 0x1 if end_stream else 0, stream_id, data)


def rst_stream_frame(stream_id: int, error_code: int) -> bytes:
    return frame(0x3, 0, stream_id, struct.pack(">I", error_code))


class _GoAwayFilter:
    """Split incoming bytes into what h2 should see and the client's GOAWAY frames."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._preface_left = len(PREFACE)

    def feed(self, data: bytes) -> tuple[bytes, bool]:
        """Bytes for h2 (preface and complete non-GOAWAY frames), and whether a GOAWAY came.

        Incomplete frames wait for more data; h2 itself validates everything it gets.
        """
        self._buffer += data
        out = bytearray()
        if self._preface_left:
            taken = self._buffer[: self._preface_left]
            del self._buffer[: self._preface_left]
            self._preface_left -= len(taken)
            out += taken
        goaway = False
        while not self._preface_left and len(self._buffer) >= 9:
            end = 9 + int.from_bytes(self._buffer[:3], "big")
            if len(self._buffer) < end:
                break
            if self._buffer[3] == 0x7:
                goaway = True
            else:
                out += self._buffer[:end]
            del self._buffer[:end]
        return bytes(out), goaway
