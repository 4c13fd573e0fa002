"""Inbound HTTP/2 bytes, cut at frame boundaries before h2 sees them.

Four jobs, all on the 9-byte frame headers (no payload is parsed but a GOAWAY's):

- **The server's preface is a SETTINGS frame** (RFC 9113 §3.4): a first frame of another kind,
  or bytes that are not a frame at all, fail the connection at once (:class:`FrameError`),
  rather than leaving the handshake to wait for a SETTINGS frame that will never come.
- **A SETTINGS ACK is empty** (RFC 9113 §6.5): one with a payload is a connection error
  FRAME_SIZE_ERROR (h2 would say PROTOCOL_ERROR).
- **A field block is one run of frames** (RFC 9113 §4.3, §6.10): once a HEADERS (or
  PUSH_PROMISE) frame without END_HEADERS arrived, only CONTINUATION frames on its stream may
  follow until one carries END_HEADERS, and a CONTINUATION comes only then. Anything else is a
  connection error PROTOCOL_ERROR, judged here on the frame headers, before the DATA rule
  below could take a DATA frame inside a block for a stream error, and whatever h2 or the fast
  path would have concluded from the stream's state (a CONTINUATION after a reset drew a
  RST_STREAM from one and a GOAWAY from the other, depending on when h2 forgot the stream).
- **A frame on a stream the client never opened is a connection error** (RFC 9113 §5.1.1,
  §5.1: a frame other than PRIORITY on an idle stream): an even id (the server may open none,
  push being off) or an odd id above the highest we opened. h2 would ignore a HEADERS frame on
  an even id, and the call would wait out its deadline. A stream we opened and since reset or
  finished is not idle: frames may still arrive for it a while, and are h2's to handle.

- **GOAWAY is taken out.** h2 moves its whole connection to CLOSED on a received GOAWAY and from
  then on rejects every frame, including the responses of the streams the GOAWAY promised to
  finish; the connection handles GOAWAY itself (:class:`GoAway`).
- **One frame per h2 call.** Every byte run handed on ends at most one frame, or is a run of
  whole frames (:class:`Frames`) for ``FastMachine.receive_frames``, which takes them one by
  one and reports the events of those before a broken one. h2 processes a run
  all-or-nothing: a run holding a valid response head and a broken DATA frame after it would
  raise before the head's event is delivered, and the stream's evidence would depend on how
  TCP split the bytes. Fed frame by frame, the head is seen first, whatever the reads. A run
  holds only frames the checks below let through as they stand: it ends before a GOAWAY, a
  refused frame, a frame not fully received, a frame of a field block in several frames (the
  HEADERS without END_HEADERS, its CONTINUATIONs, and anything while the block is open) and a
  DATA frame for a stream in
  ``awaiting_head``, which is judged once the run before it was processed — unless its
  stream's final head is in the run: a HEADERS frame with END_HEADERS alone whose block starts
  with an indexed ``:status`` of the static table (what nginx sends): once processed, that
  head takes its stream out of ``awaiting_head`` (a malformed one by resetting the stream),
  so the DATA after it would be handed on either way. (A malformed head's DATA then reaches
  the machine before the reset, and its credit goes back as for any DATA of a failed stream;
  after the reset it would be credited back alike, and otherwise ignored, RFC 9113 §5.1.)
  One call per frame, the way it was, cost a 50 MB download a round through the reader and
  the fast path per 8 KiB DATA frame, and 32 small responses 64 rounds.
- **DATA before a final head is a stream error.** h2 treats it as a connection error, which
  fails every sibling; RFC 9113 §8.1.1 makes it malformed, a stream error. A DATA frame for a
  stream in ``awaiting_head`` is not handed on at all: :class:`DroppedData` tells the
  connection to count the frame against its flow-control window (as the machine counts any
  DATA), reset that stream and credit the frame back.

The frame size is checked here, on the header: h2 checks it only once the whole frame has
arrived, so a peer that is not speaking HTTP/2 at all (an HTTP/1.1 answer reads as a 4.7 MB
frame header) would otherwise hold the connection until a deadline fired.

:class:`FrameError` carries the error code of the connection error (RFC 9113 §5.4.1), which the
connection's GOAWAY says. :func:`code_name` names the error code a GOAWAY or a RST_STREAM
carries, for the failures' messages.
"""

from __future__ import annotations

import struct
from collections.abc import Container, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from h2.errors import ErrorCodes

__all__ = [
    "MAX_FRAME",
    "DroppedData",
    "FrameError",
    "Frames",
    "GoAway",
    "InboundFrames",
    "code_name",
]

#: Our SETTINGS_MAX_FRAME_SIZE (h2's default, never raised): the largest frame we accept.
MAX_FRAME = 16384
_FRAME_HEADER = 9
_DATA = 0x0
_HEADERS = 0x1
_PRIORITY = 0x2
_SETTINGS = 0x4
_PUSH_PROMISE = 0x5
_GOAWAY = 0x7
_CONTINUATION = 0x9
_ACK = 0x1
_END_HEADERS = 0x4
#: A HEADERS frame's END_HEADERS, PADDED and PRIORITY flags: with END_HEADERS alone its block
#: starts its payload.
_HEAD_FLAGS = 0x2C
#: A header block whose first byte is one of these starts with an indexed ``:status`` of the
#: static table (RFC 7541 Appendix A: 200, 204, 206, 304, 400, 404, 500): a final head.
_FINAL_FIRST = 0x88
_FINAL_LAST = 0x8E
#: No stream id goes above this (31 bits).
_TOP = 0x7FFFFFFF
_NAMES = (
    "DATA",
    "HEADERS",
    "PRIORITY",
    "RST_STREAM",
    "SETTINGS",
    "PUSH_PROMISE",
    "PING",
    "GOAWAY",
    "WINDOW_UPDATE",
    "CONTINUATION",
)
_HEAD = struct.Struct(">IBI")  # 24-bit length + 8-bit type, flags, R + 31-bit stream id
_GOAWAY_FIELDS = struct.Struct(">II")  # last-stream-id, error code


@dataclass(frozen=True, slots=True)
class GoAway:
    last_stream_id: int
    error_code: int


@dataclass(frozen=True, slots=True)
class DroppedData:
    """A DATA frame for a stream still awaiting its final head: not given to h2."""

    stream_id: int
    #: Its flow-controlled length (the whole payload, padding included).
    length: int


class Frames(NamedTuple):
    """``data[start:end]``: whole frames, from a frame boundary, that passed every check here
    (the bytes are not copied out of the read). A tuple: one is made per read."""

    data: bytes
    start: int
    end: int


class FrameError(Exception):
    """A server preface that is not a SETTINGS frame, a frame on a stream we never opened, a
    field block interrupted or a CONTINUATION outside one, a malformed GOAWAY frame, or a frame
    larger than we allow: a connection error of the peer, whose code (:attr:`error_code`) the
    client's GOAWAY carries."""

    def __init__(self, message: str, error_code: int = ErrorCodes.PROTOCOL_ERROR) -> None:
        super().__init__(message)
        self.error_code = error_code


class InboundFrames:
    """Feed it what the socket gave; iterate what to do with it, in the order it arrived.

    :meth:`feed` is a generator on purpose: a DATA frame is judged against ``awaiting_head``
    when its header is reached, after everything before it has been processed by the caller.
    """

    __slots__ = (
        "_block",
        "_buffer",
        "_dropping",
        "_passthrough",
        "_preface",
        "awaiting_head",
        "opened",
    )

    def __init__(
        self, awaiting_head: Container[int], *, preface: bool = False, opened: int = _TOP
    ) -> None:
        self.awaiting_head = awaiting_head
        #: The highest stream id the client opened (``Session.add`` raises it): a frame on an
        #: odd id above it, or on any even id, is refused. The top by default: a feed that
        #: does not track its streams (the unit tests') refuses even ids only.
        self.opened = opened
        #: The first frame is still to come and must be a SETTINGS frame (the server's
        #: connection preface); false for a feed that starts after it (the unit tests').
        self._preface = preface
        self._buffer = bytearray()  # an incomplete frame header (or GOAWAY) from the last read
        self._passthrough = 0  # bytes of the current frame still to hand on
        self._dropping = False  # ... or to skip (a dropped DATA frame)
        #: The stream whose field block is open (a HEADERS without END_HEADERS came, its last
        #: CONTINUATION not yet); 0: none.
        self._block = 0

    def feed(self, data: bytes) -> Iterator[bytes | Frames | GoAway | DroppedData]:
        """Yields byte runs for h2 (each ends at most one frame), :class:`Frames` (whole frames
        together), :class:`GoAway` and :class:`DroppedData`; raises :class:`FrameError` on a
        frame we refuse."""
        if not self._buffer and self._passthrough > len(data) and not self._dropping:
            # The common case on a download: the middle of a large DATA frame.
            self._passthrough -= len(data)
            yield data
            return
        if self._buffer:
            self._buffer += data
            data = bytes(self._buffer)
            self._buffer.clear()
        pos = 0
        end = len(data)
        run = -1  # where the whole frames not yet handed on begin
        heads: set[int] | None = None  # streams whose final head is in that run
        block = self._block
        while pos < end:
            if self._passthrough:
                take = min(self._passthrough, end - pos)
                if not self._dropping:
                    yield data if pos == 0 and take == end else data[pos : pos + take]
                pos += take
                self._passthrough -= take
                if self._passthrough:
                    return
                self._dropping = False
                continue
            if end - pos < _FRAME_HEADER:
                if run >= 0:
                    yield Frames(data, run, pos)
                    run = -1
                    heads = None
                if self._preface and end - pos >= 4 and data[pos + 3] != _SETTINGS:
                    # Four bytes tell the preface's frame type: a short answer that is no
                    # frame at all ("OK\r\n") fails now rather than waiting for five more.
                    raise FrameError(_not_preface(data[pos + 3], 0))
                break
            head, flags, stream_id = _HEAD.unpack_from(data, pos)
            length = head >> 8
            kind = head & 0xFF
            stream_id &= 0x7FFFFFFF
            idle = (
                stream_id
                and (stream_id > self.opened or not stream_id & 1)
                and kind <= _CONTINUATION
                and kind != _PRIORITY
            )
            # What this kind of frame asks to go on in a run (the common kinds asked first):
            # DATA, not of a stream awaiting its head (unless that head is earlier in the run);
            # HEADERS, ending its field block; a SETTINGS ACK, empty; never GOAWAY or
            # CONTINUATION.
            if kind == _DATA:
                whole = stream_id not in self.awaiting_head or (
                    heads is not None and stream_id in heads
                )
            elif kind == _HEADERS:
                whole = flags & _END_HEADERS != 0
            elif kind == _SETTINGS:
                whole = not (flags & _ACK and length)
            else:
                whole = kind != _GOAWAY and kind != _CONTINUATION
            if (
                whole
                and end - pos >= _FRAME_HEADER + length
                and length <= MAX_FRAME
                and not idle
                and not block
                and not self._preface
            ):
                if run < 0:
                    run = pos
                if (
                    kind == _HEADERS
                    and flags & _HEAD_FLAGS == _END_HEADERS
                    and length
                    and _FINAL_FIRST <= data[pos + _FRAME_HEADER] <= _FINAL_LAST
                ):
                    if heads is None:
                        heads = set()
                    heads.add(stream_id)
                pos += _FRAME_HEADER + length
                continue
            if run >= 0:
                # This frame is looked at again once the run before it was processed.
                yield Frames(data, run, pos)
                run = -1
                heads = None
                continue
            if self._preface:
                if kind != _SETTINGS or flags & _ACK or stream_id:
                    raise FrameError(_not_preface(kind, flags))
                self._preface = False
            if length > MAX_FRAME:
                raise FrameError(
                    f"the server sent a frame of {length} bytes, more than our "
                    f"SETTINGS_MAX_FRAME_SIZE ({MAX_FRAME})",
                    ErrorCodes.FRAME_SIZE_ERROR,
                )
            if idle:
                name = _NAMES[kind]
                raise FrameError(
                    f"the server sent a {name} frame on stream {stream_id}, which the client "
                    "never opened (RFC 9113 §5.1.1)"
                )
            if kind == _SETTINGS and flags & _ACK and length:
                raise FrameError(
                    f"the server sent a SETTINGS ACK with {length} bytes of payload (RFC 9113 "
                    "§6.5: an acknowledgement is empty)",
                    ErrorCodes.FRAME_SIZE_ERROR,
                )
            if block:
                if kind != _CONTINUATION or stream_id != block:
                    raise FrameError(
                        f"the server sent {_a_frame(kind)} on stream {stream_id} inside the "
                        f"field block of stream {block}, where only CONTINUATION frames may "
                        "come (RFC 9113 §6.10)"
                    )
                if flags & _END_HEADERS:
                    block = self._block = 0
            elif kind == _CONTINUATION:
                raise FrameError(
                    f"the server sent a CONTINUATION frame on stream {stream_id} that no field "
                    "block left open (RFC 9113 §6.10)"
                )
            elif (kind == _HEADERS or kind == _PUSH_PROMISE) and not flags & _END_HEADERS:
                block = self._block = stream_id
            if kind == _GOAWAY:
                if length < 8:
                    raise FrameError(
                        f"the server sent a GOAWAY frame of invalid size {length}",
                        ErrorCodes.FRAME_SIZE_ERROR,
                    )
                if end - pos < _FRAME_HEADER + length:
                    break  # held until complete
                if stream_id:
                    raise FrameError("the server sent a GOAWAY frame on a stream")
                last, code = _GOAWAY_FIELDS.unpack_from(data, pos + _FRAME_HEADER)
                yield GoAway(last & 0x7FFFFFFF, code)
                pos += _FRAME_HEADER + length
                continue
            if kind == _DATA and stream_id in self.awaiting_head:
                yield DroppedData(stream_id, length)
                self._dropping = True
                pos += _FRAME_HEADER
                self._passthrough = length
                if not length:
                    self._dropping = False
                continue
            # Handed on whole when it is all here (the usual small frame), else header first
            # and the rest as it comes.
            self._passthrough = _FRAME_HEADER + length
        if run >= 0:
            yield Frames(data, run, pos)
        if pos < end:
            self._buffer += data[pos:]  # kept until the rest of the frame header arrives


def _a_frame(kind: int) -> str:
    return f"a {_NAMES[kind]} frame" if kind < len(_NAMES) else f"a frame of type {kind:#x}"


def _not_preface(kind: int, flags: int) -> str:
    if kind == _SETTINGS:
        what = "a SETTINGS ACK" if flags & _ACK else "a SETTINGS frame on a stream"
    elif kind < len(_NAMES):
        what = f"a {_NAMES[kind]} frame"
    else:
        what = f"an unknown frame type {kind:#x}: not HTTP/2"
    return (
        "the server's connection preface is not a SETTINGS frame (RFC 9113 §3.4): its first "
        f"frame reads as {what}"
    )


def code_name(code: int) -> str:
    """The name of a GOAWAY's or RST_STREAM's error code, for a failure's message."""
    try:
        return ErrorCodes(code).name
    except ValueError:
        return f"error code {code:#x}"
