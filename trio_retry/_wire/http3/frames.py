"""The frames of a request stream, read as they arrive, before aioquic's HTTP/3 layer keeps them.

One job: say where, in the bytes of a request stream, the first frame the client will not
take begins, before aioquic's ``H3Connection`` is given them (the driver gives it only what
comes before, ``driver.py``'s entry for ``StreamDataReceived``). :class:`RequestFrames`
follows the frame boundaries of one request stream's bytes (RFC 9114 §7.1: a type and a
length, each a variable-length integer, then the payload), and raises :class:`FrameRefused`
at the first frame refused:

- a HEADERS frame (a head, or trailers) announced longer than ``max_header_bytes``: refused
  at its frame header, before any of its payload is kept (a QPACK-encoded section is never
  longer than the size it decodes to, which the limit bounds); a stream error,
  H3_EXCESSIVE_LOAD (RFC 9114 §4.2.2, §10.5.1);
- a HEADERS frame longer than :data:`SCAN_FROM` whose section decodes past the limit, told
  from its encoded bytes (``qpack.py``) before the decoder builds it: the same stream error;
- a PUSH_PROMISE: the client advertises no MAX_PUSH_ID, so any push id is past it
  (RFC 9114 §7.2.5): a connection error, H3_ID_ERROR, at the frame header.

Why before aioquic: its ``H3Connection`` keeps a HEADERS or PUSH_PROMISE frame until it is
whole (joining every datagram to what it holds, a copy each time), then decodes it whole,
with no limit of its own: a frame announced at 1 GiB was kept, and copied, until the call's
deadline; a 384 KiB one was decoded before the size check. Everything else passes: DATA
(aioquic hands it on as it arrives), and the frame types aioquic refuses or skips at their
header. (The control stream's frames are read by ``control.py``.)

:func:`read_varint` reads RFC 9000 §16's integers for this module and ``control.py``.
"""

from __future__ import annotations

from ..exchange import head_too_large
from .codes import H3_EXCESSIVE_LOAD, H3_ID_ERROR
from .qpack import decoded_size_at_least

__all__ = [
    "SCAN_FROM",
    "FrameRefused",
    "RequestFrames",
    "read_varint",
]

_HEADERS = 0x01
_PUSH_PROMISE = 0x05
#: HEADERS frames at most this long go to the decoder unscanned: the most their section can
#: decode to (each byte one reference to the static table's longest entry, 69 bytes, plus
#: 32) builds well under a MiB of Python objects. Longer ones are kept here (they are at most
#: ``max_header_bytes``) and scanned before aioquic is given their last byte.
SCAN_FROM = 4096
#: A frame header is two integers of at most 8 bytes each.
_HEADER_MAX = 16


class FrameRefused(Exception):
    """The server sent a frame (or a field section in one, ``headers.py``) the client refuses:
    ``code`` is the HTTP/3 error to reset the stream with (``stream_error``) or to close the
    connection with; ``message`` says what the server did, in words."""

    def __init__(self, code: int, message: str, *, stream_error: bool) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.stream_error = stream_error
        #: Where the refused frame began in the bytes being read (``RequestFrames.feed``).
        self.at = 0


def read_varint(data: bytes | bytearray, at: int) -> tuple[int, int] | None:
    """The variable-length integer at ``at`` and the offset after it, or ``None`` when
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


class RequestFrames:
    """Where one request stream's bytes are in its frames; see the module docstring.

    The cost on the way of a response: a frame header is read once (a few integer operations),
    a DATA payload is skipped by its length whatever its size, and only a HEADERS frame longer
    than :data:`SCAN_FROM` is copied (once).
    """

    __slots__ = ("_frame_at", "_header", "_left", "_section")

    def __init__(self) -> None:
        self._frame_at = 0  # where, in the data being fed, the frame being read began
        self._header: bytearray | None = None  # a frame header cut by the end of what arrived
        self._left = 0  # payload bytes of that frame still to come
        self._section: bytearray | None = None  # a long HEADERS frame's payload, kept

    def feed(self, data: bytes, limit: int) -> None:
        """Take the stream's next ``data``; raises :class:`FrameRefused` at the first frame
        refused, its :attr:`~FrameRefused.at` the offset in ``data`` where that frame began
        (0 when it began before): only the bytes before it may reach aioquic."""
        at = 0
        end = len(data)
        self._frame_at = 0
        try:
            while at < end:
                left = self._left
                if left:
                    take = min(left, end - at)
                    section = self._section
                    if section is not None:
                        section += data[at : at + take]
                        if take == left:
                            self._section = None
                            _check_section(section, limit)
                    self._left = left - take
                    at += take
                    continue
                header = self._header
                if header is not None:
                    taken = min(_HEADER_MAX - len(header), end - at)
                    header += data[at : at + taken]
                    parsed = _frame_header(header, 0)
                    if parsed is None:
                        return  # (all of ``data`` is in the header's bytes kept)
                    kind, length, used = parsed
                    at += taken - (len(header) - used)
                    self._header = None
                else:
                    self._frame_at = at
                    # (inline, the usual: a one-byte type, a length of one or two bytes)
                    kind = data[at]
                    first = data[at + 1] if at + 2 < end else 0xFF
                    if kind < 0x40 and first < 0x40:
                        length = first
                        at += 2
                    elif kind < 0x40 and first < 0x80:
                        length = (first & 0x3F) << 8 | data[at + 2]
                        at += 3
                    else:
                        parsed = _frame_header(data, at)
                        if parsed is None:
                            self._header = bytearray(data[at:])
                            return
                        kind, length, at = parsed
                self._start(kind, length, limit)
        except FrameRefused as refused:
            refused.at = self._frame_at
            raise

    def _start(self, kind: int, length: int, limit: int) -> None:
        """A frame's header was read: refuse it, or follow its payload."""
        self._left = length
        if kind == _HEADERS:
            if length > limit:
                raise FrameRefused(
                    H3_EXCESSIVE_LOAD,
                    head_too_large(f"a HEADERS frame of {length} bytes"),
                    stream_error=True,
                )
            if length > SCAN_FROM:
                self._section = bytearray()
        elif kind == _PUSH_PROMISE:
            raise FrameRefused(
                H3_ID_ERROR,
                "the server sent a PUSH_PROMISE, though this client allows no push (it sends "
                "no MAX_PUSH_ID)",
                stream_error=False,
            )


def _frame_header(data: bytes | bytearray, at: int) -> tuple[int, int, int] | None:
    """The frame type, length and the offset after them, or ``None`` if cut short."""
    kind = read_varint(data, at)
    if kind is None:
        return None
    length = read_varint(data, kind[1])
    if length is None:
        return None
    return kind[0], length[0], length[1]


def _check_section(section: bytearray, limit: int) -> None:
    """Refuse a HEADERS frame whose field section decodes past ``limit``."""
    size = decoded_size_at_least(section, limit)
    if size is not None and size > limit:
        raise FrameRefused(
            H3_EXCESSIVE_LOAD,
            head_too_large(f"a field section of at least {size} bytes"),
            stream_error=True,
        )
