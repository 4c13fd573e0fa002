"""HTTP/2 frames made and read by hand (RFC 9113 §4.1), for tests that play a server byte by byte.

One place for them (issue #40): the builders ``trio_retry.testing`` already has for its fault
server (:func:`frame`, :func:`headers_frame`, :func:`data_frame`, :func:`rst_stream_frame`,
:func:`goaway_frame`, :data:`PREFACE`) are re-exported here, and the rest are added beside them;
:class:`FrameReader` cuts what a client sent into :class:`Frame` values a test can assert on.

Nothing here checks what it builds: a test that needs a broken frame (a PING of six bytes, a
SETTINGS frame on a stream) asks for exactly that.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum

import hpack
from h2.errors import ErrorCodes

from trio_retry.testing._h2_frames import (
    PREFACE,
    data_frame,
    frame,
    goaway_frame,
    headers_frame,
    rst_stream_frame,
)

__all__ = [
    "ACK",
    "DATA_MAX",
    "DEFINED_FLAGS",
    "END_HEADERS",
    "END_STREAM",
    "PADDED",
    "PREFACE",
    "PRIORITY_FLAG",
    "Frame",
    "FrameReader",
    "Kind",
    "continuation_frame",
    "data_frame",
    "frame",
    "goaway_frame",
    "header_block",
    "headers_frame",
    "names",
    "padded",
    "ping_frame",
    "priority_frame",
    "raw_headers_frame",
    "rst_stream_frame",
    "settings_frame",
    "window_update_frame",
    "with_reserved_bit",
]


class Kind(IntEnum):
    """The frame types of RFC 9113 §6."""

    DATA = 0x0
    HEADERS = 0x1
    PRIORITY = 0x2
    RST_STREAM = 0x3
    SETTINGS = 0x4
    PUSH_PROMISE = 0x5
    PING = 0x6
    GOAWAY = 0x7
    WINDOW_UPDATE = 0x8
    CONTINUATION = 0x9


#: The largest frame payload a peer must accept before SETTINGS say more (RFC 9113 §4.2).
DATA_MAX = 16384

END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20

#: The flags each frame type defines (RFC 9113 §6): any other is "undefined", to be left unset
#: by a sender (§4.1).
DEFINED_FLAGS = {
    Kind.DATA: END_STREAM | PADDED,
    Kind.HEADERS: END_STREAM | END_HEADERS | PADDED | PRIORITY_FLAG,
    Kind.PRIORITY: 0,
    Kind.RST_STREAM: 0,
    Kind.SETTINGS: ACK,
    Kind.PUSH_PROMISE: END_HEADERS | PADDED,
    Kind.PING: ACK,
    Kind.GOAWAY: 0,
    Kind.WINDOW_UPDATE: 0,
    Kind.CONTINUATION: END_HEADERS,
}

_HEAD = struct.Struct(">IBI")  # 24-bit length + 8-bit type, flags, R + 31-bit stream id


# --- building --------------------------------------------------------------------------------


def settings_frame(*pairs: tuple[int, int], ack: bool = False, stream_id: int = 0) -> bytes:
    """A SETTINGS frame carrying ``(identifier, value)`` pairs, in order (§6.5)."""
    payload = b"".join(struct.pack(">HI", ident, value) for ident, value in pairs)
    return frame(Kind.SETTINGS, ACK if ack else 0, stream_id, payload)


def ping_frame(opaque: bytes = bytes(8), *, ack: bool = False, stream_id: int = 0) -> bytes:
    """A PING frame (§6.7); ``opaque`` is sent as given, whatever its length."""
    return frame(Kind.PING, ACK if ack else 0, stream_id, opaque)


def window_update_frame(stream_id: int, increment: int) -> bytes:
    """A WINDOW_UPDATE frame (§6.9); the increment is not checked (0 is a test's to send)."""
    return frame(Kind.WINDOW_UPDATE, 0, stream_id, struct.pack(">I", increment & 0x7FFFFFFF))


def priority_frame(stream_id: int, depends_on: int = 0, weight: int = 16) -> bytes:
    """A PRIORITY frame of the five octets §6.3 defines."""
    return frame(Kind.PRIORITY, 0, stream_id, struct.pack(">IB", depends_on, weight - 1))


def header_block(headers: Sequence[tuple[str, str]]) -> bytes:
    """``headers`` as an HPACK block of literals never indexed: the client's decoding table is
    left as it was, so blocks can be cut, repeated or dropped without breaking later ones."""
    return hpack.Encoder().encode(
        [
            hpack.NeverIndexedHeaderTuple(n.encode("latin-1"), v.encode("latin-1"))
            for n, v in headers
        ]
    )


def raw_headers_frame(stream_id: int, block: bytes, *, flags: int = END_HEADERS) -> bytes:
    """A HEADERS frame carrying ``block`` (a whole block or its first fragment) with ``flags``."""
    return frame(Kind.HEADERS, flags, stream_id, block)


def continuation_frame(stream_id: int, block: bytes, *, end_headers: bool) -> bytes:
    """A CONTINUATION frame (§6.10) carrying a fragment of a header block."""
    return frame(Kind.CONTINUATION, END_HEADERS if end_headers else 0, stream_id, block)


def padded(kind: int, flags: int, stream_id: int, body: bytes, pad_length: int) -> bytes:
    """A DATA or HEADERS frame with the PADDED flag: a Pad Length octet of ``pad_length``, then
    ``body``, then as many zero octets as fit. A ``pad_length`` beyond the frame is a test's
    way to send invalid padding (§6.1, §6.2)."""
    padding = bytes(max(0, pad_length))
    return frame(kind, flags | PADDED, stream_id, bytes((pad_length,)) + body + padding)


def with_reserved_bit(data: bytes) -> bytes:
    """``data`` (one frame) with the reserved bit of its stream identifier set (§4.1)."""
    marked = bytearray(data)
    marked[5] |= 0x80
    return bytes(marked)


# --- reading ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame a client sent, as it was on the wire."""

    kind: int
    flags: int
    stream_id: int
    payload: bytes
    #: The reserved bit of the stream identifier (§4.1: a sender leaves it unset).
    reserved: bool = False

    @property
    def name(self) -> str:
        try:
            return Kind(self.kind).name
        except ValueError:
            return f"type {self.kind:#x}"

    @property
    def error_code(self) -> ErrorCodes | int:
        """A RST_STREAM's or GOAWAY's error code."""
        offset = 4 if self.kind == Kind.GOAWAY else 0
        code = int.from_bytes(self.payload[offset : offset + 4], "big")
        try:
            return ErrorCodes(code)
        except ValueError:
            return code

    @property
    def last_stream_id(self) -> int:
        """A GOAWAY's last-stream-id."""
        return int.from_bytes(self.payload[:4], "big") & 0x7FFFFFFF

    @property
    def increment(self) -> int:
        """A WINDOW_UPDATE's increment."""
        return int.from_bytes(self.payload[:4], "big") & 0x7FFFFFFF

    @property
    def settings(self) -> dict[int, int]:
        """A SETTINGS frame's values, by identifier."""
        return {
            ident: value
            for ident, value in struct.iter_unpack(
                ">HI", self.payload[: len(self.payload) // 6 * 6]
            )
        }

    @property
    def ack(self) -> bool:
        return bool(self.flags & ACK) and self.kind in (Kind.SETTINGS, Kind.PING)

    def __str__(self) -> str:
        detail = ""
        if self.kind in (Kind.RST_STREAM, Kind.GOAWAY):
            code = self.error_code
            name = code.name if isinstance(code, ErrorCodes) else hex(code)
            detail = f" {name}"
            if self.kind == Kind.GOAWAY:
                detail += f" last={self.last_stream_id}"
        elif self.kind == Kind.WINDOW_UPDATE:
            detail = f" +{self.increment}"
        elif self.kind == Kind.PING:
            detail = f" {self.payload!r}"
        ack = " ACK" if self.ack else ""
        return f"{self.name}[{self.stream_id}]{ack}{detail}"


class FrameReader:
    """Feed it what a client sent; it gives back the frames as they complete. With
    ``preface=True`` the first 24 octets are taken as the client connection preface (§3.4),
    kept in :attr:`preface`, whatever they are."""

    def __init__(self, *, preface: bool = True) -> None:
        self._buffer = bytearray()
        self._preface_left = len(PREFACE) if preface else 0
        self.preface = b""

    def feed(self, data: bytes) -> list[Frame]:
        self._buffer += data
        if self._preface_left:
            taken = bytes(self._buffer[: self._preface_left])
            del self._buffer[: self._preface_left]
            self.preface += taken
            self._preface_left -= len(taken)
            if self._preface_left:
                return []
        frames = []
        while len(self._buffer) >= 9:
            head, flags, word = _HEAD.unpack_from(self._buffer)
            length = head >> 8
            if len(self._buffer) < 9 + length:
                break
            payload = bytes(self._buffer[9 : 9 + length])
            del self._buffer[: 9 + length]
            frames.append(
                Frame(head & 0xFF, flags, word & 0x7FFFFFFF, payload, reserved=bool(word >> 31))
            )
        return frames

    @property
    def leftover(self) -> bytes:
        """Bytes of a frame not complete yet."""
        return bytes(self._buffer)


def names(frames: Iterable[Frame]) -> list[str]:
    """The frames as short strings (``"GOAWAY[0] PROTOCOL_ERROR last=0"``), for a message."""
    return [str(f) for f in frames]
