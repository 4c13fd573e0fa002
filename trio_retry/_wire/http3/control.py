"""The server's HTTP/3 control stream, read for the one frame aioquic does not report, GOAWAY,
and for the limits on its frames.

aioquic's ``H3Connection`` parses the server's control stream and discards GOAWAY's payload
(it has no event for it). The id a GOAWAY carries is a proof we need (RFC 9114 §5.2): every
request stream at or above it was not processed and may be sent again. So the bytes of the
server's unidirectional streams are also fed here, before aioquic sees them, and this reader
finds the control stream (stream type 0x00) and the GOAWAY frames on it (type 0x07, payload
one variable-length integer). Every other frame is skipped by its length, and not kept past
:data:`_MAX_KEPT` bytes; aioquic stays the judge of the rest of the stream's validity.

What is refused is raised as :class:`~.frames.FrameRefused`, a connection error (nothing of
that feed should reach aioquic; the reader reads nothing more):

- a GOAWAY's id is a proof only when it is one (RFC 9114 §5.2): the id of a client-initiated
  bidirectional stream (a multiple of 4), and no larger than an earlier GOAWAY's. Any other is
  H3_ID_ERROR and proves nothing: taken as proof, a GOAWAY(1) would tell the client that its
  stream 4 was not processed, though the server ran it, and the client would send it again.
  The GOAWAYs before it stand (:attr:`ControlReader.goaway`);
- a frame longer than its content may be (checked at its header, before it is kept): a GOAWAY
  whose length is not that of its integer (RFC 9114 §7.1: H3_FRAME_ERROR), a SETTINGS frame
  longer than :data:`SETTINGS_LIMIT` (aioquic keeps a SETTINGS frame whole before reading it:
  H3_EXCESSIVE_LOAD, RFC 9114 §10.5).

The alternative, subclassing ``H3Connection`` to override its private frame handler, would
tie us to a private method's name and signature; reading the same public event data twice
costs a few hundred bytes of parsing per connection.
"""

from __future__ import annotations

from .codes import H3_EXCESSIVE_LOAD, H3_FRAME_ERROR, H3_ID_ERROR
from .frames import FrameRefused, read_varint

__all__ = ["SETTINGS_LIMIT", "ControlReader"]

_CONTROL = 0x00
_SETTINGS = 0x04
_GOAWAY = 0x07
#: A frame on the control stream longer than this is skipped as it arrives, never kept whole
#: (a GOAWAY is at most 8 bytes).
_MAX_KEPT = 64
#: The longest SETTINGS frame taken: 256 settings of the longest encoding (a server sends a
#: handful, and some reserved ones to exercise the rule that unknown ones are ignored).
SETTINGS_LIMIT = 4096


class ControlReader:
    """Feeds of the server's unidirectional streams in; :attr:`goaway` out (the id of the last
    valid GOAWAY received, or ``None``); see the module docstring."""

    __slots__ = ("_buffer", "_control", "_others", "_refused", "_skip", "goaway")

    def __init__(self) -> None:
        self._control: int | None = None  # the control stream's id, once known
        self._others: set[int] = set()  # server streams that are not the control stream
        self._buffer = bytearray()
        self._skip = 0  # bytes of a long frame still to drop
        self.goaway: int | None = None
        self._refused = False  # a frame was refused: nothing more is read

    def feed(self, stream_id: int, data: bytes) -> int | None:
        """Take ``data`` of server stream ``stream_id``; return the id of the last valid
        GOAWAY found in it (also kept in :attr:`goaway`), else ``None``. Raises
        :class:`~.frames.FrameRefused` at a frame refused (the GOAWAYs before it stand)."""
        if self._refused:
            return None
        if stream_id % 4 != 3 or stream_id in self._others:
            return None  # not a server-initiated unidirectional stream, or not the control one
        if self._control is None or stream_id != self._control:
            if self._control is not None:
                self._others.add(stream_id)
                return None
            kind = read_varint(data, 0)
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
        try:
            while True:
                head = read_varint(self._buffer, 0)
                length = None if head is None else read_varint(self._buffer, head[1])
                if head is None or length is None:
                    break
                start, size = length[1], length[0]
                _check(head[0], size)
                available = len(self._buffer) - start
                if available < size:
                    if size > _MAX_KEPT:
                        # A long frame we do not read: drop what is here, skip the rest.
                        self._skip = size - available
                        self._buffer.clear()
                    break
                if head[0] == _GOAWAY:
                    payload = self._buffer[start : start + size]
                    found = self.goaway = _goaway_id(payload, self.goaway)
                del self._buffer[: start + size]
        except FrameRefused:
            self._refused = True
            self._buffer.clear()
            raise
        return found


def _check(kind: int, size: int) -> None:
    """Refuse a control frame at its header when its length is past what it may hold."""
    if kind == _GOAWAY and not 1 <= size <= 8:
        raise FrameRefused(
            H3_FRAME_ERROR,
            f"the server sent a GOAWAY frame of {size} bytes, whose content is one integer "
            "(1 to 8 bytes)",
            stream_error=False,
        )
    if kind == _SETTINGS and size > SETTINGS_LIMIT:
        raise FrameRefused(
            H3_EXCESSIVE_LOAD,
            f"the server sent a SETTINGS frame of {size} bytes (at most {SETTINGS_LIMIT} are read)",
            stream_error=False,
        )


def _goaway_id(payload: bytearray, earlier: int | None) -> int:
    """The stream id a whole GOAWAY frame's ``payload`` carries, received after a GOAWAY with
    id ``earlier`` (if any); refused unless the payload is exactly that one integer, and the
    id a valid one from a server (RFC 9114 §5.2)."""
    value = read_varint(payload, 0)
    if value is None or value[1] != len(payload):
        raise FrameRefused(
            H3_FRAME_ERROR,
            f"the server sent a GOAWAY frame of {len(payload)} bytes whose integer does not "
            "fill it",
            stream_error=False,
        )
    goaway = value[0]
    if goaway % 4:
        message = (
            f"the server sent GOAWAY({goaway}), whose id is not a client-initiated "
            "bidirectional stream's: it proves nothing about any request"
        )
        raise FrameRefused(H3_ID_ERROR, message, stream_error=False)
    if earlier is not None and goaway > earlier:
        message = (
            f"the server sent GOAWAY({goaway}) after GOAWAY({earlier}): a GOAWAY's id may "
            "never grow"
        )
        raise FrameRefused(H3_ID_ERROR, message, stream_error=False)
    return goaway
