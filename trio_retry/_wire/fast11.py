"""The strict HTTP/1.1 fast path: the canonical request head and response shape, nothing else.

h11 is the reference HTTP/1.1 parser (SPEC §1). This module handles only the message shape
nearly every server sends, and does it with a few C-level calls instead of h11's general
machinery; whatever falls outside that shape is handed to h11 *before* anything about it was
decided here, so h11's answer (an event, or its error) is the one the client gets.

- :func:`request_head` writes the bytes h11 would write for a request, or returns ``None`` when
  the request is not one this path takes (a method other than GET/POST/PUT/DELETE/PATCH/OPTIONS,
  a Host header missing or repeated, framing, ``Connection``, ``Expect`` or ``Upgrade`` headers
  from the caller, a target h11 would refuse): the caller then uses h11 from the start.
- :class:`FastParser` is a response parser fed bytes in any split. ``next_event()`` answers
  ``NEED`` (feed more), ``DEFER`` (hand everything to h11: :meth:`FastParser.handover`), the
  :class:`ResponseHead`, body bytes, or ``END``. It accepts only: ``HTTP/1.1``, a three-digit
  final status 200-599 other than 204 and 304, a reason of printable bytes, CRLF line ends,
  token header names, values of printable bytes and spaces (no HTAB, no control character, no
  obs-fold), exactly one all-digit ``Content-Length`` or exactly one ``Transfer-Encoding:
  chunked`` (not both), a head no longer than ``max_header_bytes``; a chunked body of bare hex
  chunk sizes (at most 16 digits) without extensions, and ``0`` CRLF CRLF at its end (no
  trailers). Anything else DEFERs. A request for HEAD never comes here (see above).

Deferring is always possible without loss: during the head nothing was decided and h11 gets the
exact bytes received; inside a body, :meth:`FastParser.handover` gives h11 a synthetic head that
puts its body reader in the same state (same framing, same remaining length, same keep-alive),
followed by the exact unconsumed bytes. tests/wire/test_fast11_differential.py proves, for
generated and mutated byte streams split at arbitrary points, that the result is h11's.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from typing import Final

__all__ = [
    "CHUNKED",
    "DEFER",
    "END",
    "NEED",
    "FastParser",
    "ResponseHead",
    "Signal",
    "request_head",
]


class Signal(enum.Enum):
    """What :meth:`FastParser.next_event` answers when it has no head or data to give."""

    NEED = "need"  # feed more bytes
    DEFER = "defer"  # not the canonical shape: hand over to h11
    END = "end"  # the response is complete


NEED: Final = Signal.NEED
DEFER: Final = Signal.DEFER
END: Final = Signal.END

#: ``ResponseHead.length`` of a chunked body.
CHUNKED: Final = -1

_FAST_METHODS = frozenset({"GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})
#: h11's request-target: one or more visible ASCII characters.
_TARGET = re.compile(r"[\x21-\x7e]+")
#: The lengths of the request header names that need a look (host, expect, upgrade,
#: connection, content-length, transfer-encoding): other names are written as they are.
_LOOK_LENGTHS = frozenset({4, 6, 7, 10, 14, 17})
_NOT_FAST = frozenset(
    {b"connection", b"expect", b"upgrade", b"content-length", b"transfer-encoding"}
)

_TOKEN = rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+"
#: The whole canonical head, status line to blank line: linear (no two parts can match the
#: same byte), so a hostile head costs one pass.
_HEAD = re.compile(
    rb"HTTP/1\.1 ([0-9]{3})(?: ([\x20-\x7e\x80-\xff]*))?\r\n((?:"
    + _TOKEN
    + rb":[\x20-\x7e\x80-\xff]*\r\n)*)\r\n"
)
#: One header line of a head that matched ``_HEAD``; leading spaces are not captured.
_FIELD = re.compile(rb"(" + _TOKEN + rb"): *([\x20-\x7e\x80-\xff]*)\r\n")
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")
#: A chunk-size line this path takes: at most 16 hex digits and CRLF.
_SIZE_LINE_MAX = 18


def request_head(
    method: str, target: str, headers: Sequence[tuple[bytes, bytes]], length: bytes | None
) -> bytes | None:
    """The request head h11 would write for these headers plus ``Content-Length: length``
    (when not ``None``), byte for byte: the request line, the Host header first, the others in
    order, the blank line. ``None`` when the request is not one the fast path takes (the
    caller uses h11). The names and values were validated when they entered the client."""
    if method not in _FAST_METHODS or _TARGET.fullmatch(target) is None:
        return None
    host: tuple[bytes, bytes] | None = None
    for pair in headers:
        if len(pair[0]) in _LOOK_LENGTHS:
            name = pair[0].lower()
            if name == b"host":
                if host is not None:
                    return None  # h11: "Found multiple Host: headers"
                host = pair
            elif name in _NOT_FAST:
                return None
    if host is None:
        return None  # h11: "Missing mandatory Host: header"
    if headers[0] is not host:
        headers = [host, *[pair for pair in headers if pair is not host]]
    lines = [b"%s %s HTTP/1.1\r\n" % (method.encode(), target.encode())]
    lines += [b"%s: %s\r\n" % pair for pair in headers]
    if length is not None:
        lines.append(b"content-length: %s\r\n" % length)
    lines.append(b"\r\n")
    return b"".join(lines)


class ResponseHead:
    """A canonical final response head, as h11 would give it: ``headers`` as
    ``h11.Response.headers.raw_items()`` (raw names, OWS-stripped values), ``reason`` as bytes,
    ``length`` the Content-Length or :data:`CHUNKED`, ``keep_alive`` h11's decision (false when
    a ``Connection`` header lists ``close``), ``encoded`` whether a ``Content-Encoding`` field
    is among the headers (any case: the reader of the body need not look for one when not)."""

    __slots__ = ("encoded", "headers", "keep_alive", "length", "reason", "status")

    def __init__(
        self,
        status: int,
        reason: bytes,
        headers: list[tuple[bytes, bytes]],
        length: int,
        keep_alive: bool,
        encoded: bool = False,
    ) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.length = length
        self.keep_alive = keep_alive
        self.encoded = encoded


class FastParser:
    """One response, fed bytes in any split (``parser.buf += data``), read with
    :meth:`next_event`. ``buf`` always holds exactly the bytes not yet consumed."""

    __slots__ = ("buf", "footer", "head", "keep_alive", "left", "max_header_bytes")

    def __init__(self, max_header_bytes: int) -> None:
        self.buf = b""
        self.max_header_bytes = max_header_bytes
        self.head: ResponseHead | None = None
        #: Body bytes still to come: of the whole body (Content-Length) or of the current
        #: chunk (0: at a chunk-size line).
        self.left = 0
        #: Chunked: the CRLF after a chunk's data is still to be consumed.
        self.footer = False
        #: h11's keep-alive decision for this response (valid once the head was given).
        self.keep_alive = True

    def next_event(self) -> ResponseHead | bytes | Signal:
        """The head, then non-empty body bytes, then ``END``; ``NEED`` when more bytes are
        needed first; ``DEFER`` when the message is not the canonical shape (h11 takes over
        from :meth:`handover`; calling this again after ``DEFER`` is not allowed)."""
        head = self.head
        if head is None:
            return self._head()
        if head.length >= 0:
            left = self.left
            if not left:
                return END
            buf = self.buf
            if not buf:
                return NEED
            if len(buf) <= left:
                self.buf = b""
                self.left = left - len(buf)
                return buf
            self.buf = buf[left:]
            self.left = 0
            return buf[:left]
        return self._chunk()

    def _head(self) -> ResponseHead | Signal:
        buf = self.buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            # Defer whatever h11 would judge before the blank line: a head too long (h11
            # raises), a bare LF (h11 may see a blank line here), a start that is not ours.
            if (
                len(buf) > self.max_header_bytes
                or buf.count(b"\n") != buf.count(b"\r\n")
                or not (buf.startswith(b"HTTP/1.1 ") or b"HTTP/1.1 ".startswith(buf))
            ):
                return DEFER
            return NEED
        end += 4
        if end > self.max_header_bytes:
            return DEFER
        match = _HEAD.fullmatch(buf, 0, end)
        if match is None:
            return DEFER
        status = int(match[1])
        if status < 200 or status > 599 or status == 204 or status == 304:
            return DEFER
        headers = []
        length = None
        chunked = False
        keep_alive = True
        encoded = False
        for name, value in _FIELD.findall(buf, match.start(3), match.end(3)):
            if value and value[-1] == 32:
                value = value.rstrip(b" ")
            headers.append((name, value))
            size = len(name)
            if size == 14 or size == 17 or size == 10:
                lowered = name.lower()
                if lowered == b"content-length":
                    if length is not None or not value.isdigit() or len(value) > 18:
                        return DEFER  # h11 merges, or refuses (over 20 digits): its business
                    length = int(value)
                elif lowered == b"transfer-encoding":
                    if chunked or value != b"chunked":
                        return DEFER
                    chunked = True
                elif lowered == b"connection" and b"close" in value.lower():
                    # h11: close iff a comma-separated, stripped, lower-cased token is "close"
                    if b"close" in [token.strip() for token in value.lower().split(b",")]:
                        keep_alive = False
            elif size == 16 and name.lower() == b"content-encoding":
                encoded = True
        if chunked:
            if length is not None:
                return DEFER  # TE + CL: refused on the h11 path (http11_rules.framing_conflict)
            length = CHUNKED
        elif length is None:
            return DEFER  # read until close: h11's
        self.head = ResponseHead(status, match[2] or b"", headers, length, keep_alive, encoded)
        self.keep_alive = keep_alive
        self.buf = buf[end:]
        self.left = 0 if chunked else length
        return self.head

    def _chunk(self) -> bytes | Signal:
        buf = self.buf
        if self.footer:
            if buf[:2] != b"\r\n":
                return NEED if buf == b"" or buf == b"\r" else DEFER
            buf = self.buf = buf[2:]
            self.footer = False
        left = self.left
        if not left:
            eol = buf.find(b"\r\n", 0, _SIZE_LINE_MAX)
            if eol < 0:
                # (h11 also bounds this line by max_header_bytes; a head that came this far
                # was at least 45 bytes long and within it, so the 18 here are too.)
                return DEFER if len(buf) >= _SIZE_LINE_MAX else NEED
            if _HEX.fullmatch(buf, 0, eol) is None:
                return DEFER  # an extension, whitespace, a bad size: h11's
            left = int(buf[:eol], 16)
            if not left:
                last = buf[eol + 2 : eol + 4]
                if last == b"\r\n":
                    self.buf = buf[eol + 4 :]
                    self.head = _DONE
                    return END
                # trailers (or a bare LF) are h11's; the size line stays unconsumed
                return NEED if last == b"" or last == b"\r" else DEFER
            buf = self.buf = buf[eol + 2 :]
            self.left = left
        if not buf:
            return NEED
        data = buf[:left]
        self.buf = buf[len(data) :]
        self.left = left = left - len(data)
        if not left:
            self.footer = True
        return data

    def handover(self) -> tuple[bytes, int]:
        """What h11 must be fed before ``buf`` to stand where this parser stands, and how
        many of the events it then yields are synthetic (to be discarded).

        Before the head: nothing (h11 parses the real bytes). In a body: a head with the same
        framing and keep-alive decision, then, mid-chunk, a chunk-size line for the rest of
        the chunk, or, before a chunk's CRLF, a one-byte chunk whose data event is dropped.
        """
        head = self.head
        if head is None:
            return b"", 0
        close = b"" if self.keep_alive else b"connection: close\r\n"
        if head.length >= 0:
            return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n" % (self.left, close), 1
        synthetic = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n%s\r\n" % close
        if self.footer:
            return synthetic + b"1\r\n\x00", 2
        if self.left:
            return synthetic + b"%x\r\n" % self.left, 1
        return synthetic, 1


#: The head of a chunked response after its last chunk: ``next_event`` answers ``END``.
_DONE = ResponseHead(0, b"", [], 0, True)
