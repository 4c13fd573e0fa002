"""The server's HTTP/3 control stream, read for the one frame aioquic does not report: GOAWAY.

aioquic's ``H3Connection`` parses the server's control stream and discards GOAWAY's payload
(it has no event for it). The id a GOAWAY carries is a proof we need (RFC 9114 §5.2): every
request stream at or above it was not processed and may be sent again. So the bytes of the
server's unidirectional streams are also fed here, and this reader finds the control stream
(stream type 0x00) and the GOAWAY frames on it (type 0x07, payload one variable-length
integer). Everything else is skipped by length; aioquic stays the judge of the stream's
validity (a malformed control stream closes the connection there, not here).

A GOAWAY's id is a proof only when it is one (RFC 9114 §5.2): the id of a client-initiated
bidirectional stream (a multiple of 4), and no larger than an earlier GOAWAY's. Any other is a
connection error H3_ID_ERROR (:attr:`ControlReader.error`) and proves nothing: taken as proof,
a GOAWAY(1) would tell the client that its stream 4 was not processed, though the server ran
it, and the client would send it again.

The alternative, subclassing ``H3Connection`` to override its private frame handler, would
tie us to a private method's name and signature; reading the same public event data twice
costs a few hundred bytes of parsing per connection.
"""

from __future__ import annotations

__all__ = [
    "H3_ID_ERROR",
    "H3_MESSAGE_ERROR",
    "H3_NO_ERROR",
    "H3_REQUEST_CANCELLED",
    "H3_REQUEST_REJECTED",
    "ControlReader",
]

H3_NO_ERROR = 0x100
H3_INTERNAL_ERROR = 0x102
H3_ID_ERROR = 0x108
H3_MESSAGE_ERROR = 0x10E
H3_REQUEST_REJECTED = 0x10B
H3_REQUEST_CANCELLED = 0x10C

_CONTROL = 0x00
_GOAWAY = 0x07
#: A frame on the control stream larger than this is not a GOAWAY we need to buffer.
_MAX_KEPT = 64


def _varint(data: bytes | bytearray, at: int) -> tuple[int, int] | None:
    """The QUIC variable-length integer at ``at`` and the offset after it, or ``None`` when
    ``data`` ends before it does (RFC 9000 §16)."""
    if at >= len(data):
        return None
    first = data[at]
    size = 1 << (first >> 6)
    if at + size > len(data):
        return None
    value = first & 0x3F
    for byte in data[at + 1 : at + size]:
        value = (value << 8) | byte
    return value, at + size


class ControlReader:
    """Feeds of the server's unidirectional streams in; :attr:`goaway` out (the smallest id
    of every GOAWAY received, or ``None``), and :attr:`error` once a GOAWAY's id is not one
    (then nothing more is read)."""

    __slots__ = ("_buffer", "_control", "_others", "_skip", "error", "goaway")

    def __init__(self) -> None:
        self._control: int | None = None  # the control stream's id, once known
        self._others: set[int] = set()  # server streams that are not the control stream
        self._buffer = bytearray()
        self._skip = 0  # bytes of a long frame still to drop
        self.goaway: int | None = None
        #: Why a GOAWAY was a connection error H3_ID_ERROR (RFC 9114 §5.2), once one was.
        self.error: str | None = None

    def feed(self, stream_id: int, data: bytes) -> int | None:
        """Take ``data`` of server stream ``stream_id``; return the id of the last valid
        GOAWAY found in it (also kept in :attr:`goaway`), else ``None``. A GOAWAY whose id is
        not valid sets :attr:`error` and ends the reading (what came before it stands)."""
        if self.error is not None:
            return None
        if stream_id % 4 != 3 or stream_id in self._others:
            return None  # not a server-initiated unidirectional stream, or not the control one
        if self._control is None or stream_id != self._control:
            if self._control is not None:
                self._others.add(stream_id)
                return None
            kind = _varint(data, 0)
            if kind is None or kind[0] != _CONTROL:
                # (a stream type split across two packets is not seen: its first byte alone
                # is a whole varint for every type below 64, which all defined ones are)
                self._others.add(stream_id)
                return None
            self._control = stream_id
            data = data[kind[1] :]
        if self._skip:  # the rest of a long frame being skipped
            dropped = min(self._skip, len(data))
            self._skip -= dropped
            data = data[dropped:]
        self._buffer += data
        found: int | None = None
        while True:
            head = _varint(self._buffer, 0)
            length = None if head is None else _varint(self._buffer, head[1])
            if head is None or length is None:
                break
            start, size = length[1], length[0]
            available = len(self._buffer) - start
            if available < size:
                if head[0] != _GOAWAY and size > _MAX_KEPT:
                    # A long frame we do not read: drop what is here, skip the rest as it comes.
                    self._skip = size - available
                    self._buffer.clear()
                break
            if head[0] == _GOAWAY:
                value = _varint(self._buffer[start : start + size], 0)
                if value is not None:
                    self.error = _invalid(value[0], self.goaway)
                    if self.error is not None:
                        self._buffer.clear()
                        break
                    found = self.goaway = value[0]
            del self._buffer[: start + size]
        return found


def _invalid(goaway: int, earlier: int | None) -> str | None:
    """Why ``goaway``, received after a GOAWAY with id ``earlier`` (if any), is not a valid
    GOAWAY id from a server (RFC 9114 §5.2), or ``None``."""
    if goaway % 4:
        return (
            f"the server sent GOAWAY({goaway}), whose id is not a client-initiated "
            "bidirectional stream's (H3_ID_ERROR): it proves nothing about any request"
        )
    if earlier is not None and goaway > earlier:
        return (
            f"the server sent GOAWAY({goaway}) after GOAWAY({earlier}): a GOAWAY's id may "
            "never grow (H3_ID_ERROR)"
        )
    return None
