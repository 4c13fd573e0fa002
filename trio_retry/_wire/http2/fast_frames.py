"""The frames the HTTP/2 fast path (``fast.py``) writes, and the frame layout it reads them by.

One job: turning the fast path's decisions into bytes. :class:`FrameQueue` encodes each frame
the fast path sends (RFC 9113 §4.1: a 9-byte header, then the payload) and keeps them in order
until the writer (``writer.py``) takes them, in pieces (:meth:`FrameQueue.take`) or joined
(:meth:`FrameQueue.join`). It decides nothing: whether a frame may be sent, and what it does
to the connection's state, is ``FastMachine``'s.

A large DATA payload in an object nobody can change is queued as given, not copied
(:data:`KEPT_PAYLOAD`): the writer joins it with the frames around it once, into the buffer it
hands to the transport. Rejected: one ``bytearray`` for everything (the way it was), which
copied every upload three times (into the queue, out of it, into the writer's buffer).
"""

from __future__ import annotations

import struct
from collections import deque

__all__ = [
    "ACK",
    "CONTINUATION",
    "DATA",
    "END_HEADERS",
    "END_STREAM",
    "FRAME_HEADER",
    "HEAD",
    "HEADERS",
    "KEPT_PAYLOAD",
    "MAX_WINDOW",
    "PADDED",
    "PING",
    "PRIORITY_FLAG",
    "RST_STREAM",
    "SETTINGS",
    "TOP_ID",
    "U32",
    "WINDOW_UPDATE",
    "FrameQueue",
]

HEAD = struct.Struct(">IBI")  # 24-bit length + 8-bit type, flags, R + 31-bit stream id
U32 = struct.Struct(">I")
FRAME_HEADER = 9
DATA = 0x0
HEADERS = 0x1
RST_STREAM = 0x3
SETTINGS = 0x4
PING = 0x6
WINDOW_UPDATE = 0x8
CONTINUATION = 0x9
END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20
TOP_ID = 2**31 - 1
MAX_WINDOW = 2**31 - 1

#: A DATA payload at least this large, in an object nobody can change (``bytes``, or a view of
#: ``bytes``), is queued as given rather than copied.
KEPT_PAYLOAD = 4096


def _immutable(data: bytes | memoryview) -> bool:
    """``data`` cannot change before it is written: ``bytes``, or a contiguous view of
    ``bytes`` (what ``outbound.send_data`` passes: slices of the body's chunks)."""
    if type(data) is bytes:
        return True
    return type(data) is memoryview and type(data.obj) is bytes and data.c_contiguous


class FrameQueue:
    """The fast path's frames, encoded, in the order they were queued."""

    __slots__ = ("out", "pieces")

    def __init__(self) -> None:
        #: The frames queued since the last kept payload.
        self.out = bytearray()
        #: What was queued before :attr:`out`: kept payloads, each with its frame header, and
        #: what :attr:`out` held before each.
        self.pieces: list[bytes | memoryview] = []

    def headers(self, stream_id: int, block: bytes, end_stream: bool, max_frame: int) -> None:
        """A HEADERS frame carrying ``block``, with CONTINUATION frames when it is larger
        than ``max_frame``."""
        flags = END_STREAM if end_stream else 0
        out = self.out
        if len(block) <= max_frame:
            out += HEAD.pack(len(block) << 8 | HEADERS, flags | END_HEADERS, stream_id)
            out += block
            return
        out += HEAD.pack(max_frame << 8 | HEADERS, flags, stream_id)
        out += block[:max_frame]
        for start in range(max_frame, len(block), max_frame):
            piece = block[start : start + max_frame]
            last = END_HEADERS if start + max_frame >= len(block) else 0
            out += HEAD.pack(len(piece) << 8 | CONTINUATION, last, stream_id)
            out += piece

    def data(self, stream_id: int, data: bytes | memoryview, end_stream: bool) -> None:
        """A DATA frame of ``data`` (kept as given when large and unchangeable)."""
        size = len(data)
        out = self.out
        head = HEAD.pack(size << 8 | DATA, END_STREAM if end_stream else 0, stream_id)
        if size >= KEPT_PAYLOAD and _immutable(data):
            pieces = self.pieces
            if out:
                pieces.append(bytes(out))
                out.clear()
            pieces.append(head)
            pieces.append(data)
        else:
            out += head
            out += data

    def window_update(self, stream_id: int, increment: int) -> None:
        self.out += HEAD.pack(4 << 8 | WINDOW_UPDATE, 0, stream_id) + U32.pack(increment)

    def rst_stream(self, stream_id: int, error_code: int) -> None:
        self.out += HEAD.pack(4 << 8 | RST_STREAM, 0, stream_id) + U32.pack(error_code)

    def ping(self, opaque: bytes, flags: int = 0) -> None:
        """A PING frame (``flags``: :data:`ACK` for the answer to one)."""
        self.out += HEAD.pack(8 << 8 | PING, flags, 0) + opaque

    def join(self) -> bytes:
        """Everything queued, as one ``bytes``; the queue is then empty."""
        out = self.out
        pieces = self.pieces
        if pieces:
            data = b"".join(pieces) + out
            pieces.clear()
            out.clear()
            return data
        data = bytes(out)
        out.clear()
        return data

    def take(self, into: deque[bytes | memoryview]) -> int:
        """Everything queued, appended to ``into`` as pieces (kept payloads as given); returns
        their total size. The queue is then empty."""
        size = 0
        pieces = self.pieces
        if pieces:
            for piece in pieces:
                size += len(piece)
            into.extend(pieces)
            pieces.clear()
        out = self.out
        if out:
            data = bytes(out)
            out.clear()
            into.append(data)
            size += len(data)
        return size
