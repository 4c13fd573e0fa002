"""A whole response read in one pass: the fast path of a small response (the boundary).

One job: :func:`read_whole`, given all of a request stream's bytes at once (its FIN with
them, nothing of the stream read before), says whether they are one plain response (a
HEADERS frame, then DATA frames, nothing else) that every check of the generic path
passes, and if so returns its fields and body (:class:`Whole`). The generic path is
aioquic's HTTP/3 layer under ``shims.StreamErrorsH3Connection`` (``events.py`` hands it the
bytes otherwise): a frame parser with a buffer per stream, an event object per frame, a
dispatch per event. A sequential small request spent a quarter of its HTTP/3 CPU there
(docs/benchmarks.md, "HTTP/3"); this reads the same bytes with a few slices.

Why it is safe: it *declines* (returns ``None``, and the generic path reads the same bytes,
with every rule it has) whenever the response is anything but plain, and it decides nothing
the generic path would decide otherwise. What it takes is a subset of what the generic path
takes, and it yields what the generic path yields for it (``tests/wire/test_h3_whole.py``
feeds the same bytes to both, cut at every offset, and compares heads, bodies, errors and
evidence). It declines:

- a first frame that is not HEADERS, a frame that is not DATA after it (trailers, unknown
  and reserved types, PUSH_PROMISE), a frame cut short by the stream's end;
- a field section that needs the dynamic table (a Required Insert Count other than 0: the
  client allows no dynamic table, the generic path makes it a connection error), one the
  decoder refuses, and one that decodes past ``limit`` (the generic path's stream error
  H3_EXCESSIVE_LOAD);
- a head that aioquic, ``shims.py`` or ``headers.py`` would refuse or read otherwise: no
  ``:status`` first, a status outside 200-999 (an interim head, 101, a malformed one), any
  other pseudo-header, a field name or value outside what aioquic allows (RFC 9114 §4.2,
  RFC 9110 §5.5), a connection-specific field, a content-length that is not digits only,
  or a second one;
- a body whose length is not its content-length, and any DATA frame in a response that has
  no content (to a HEAD, a 204, a 304: RFC 9110 §6.4.1).

What stays where it was: the limits read before a byte is decoded (``frames.py``: a HEADERS
frame announced past ``max_header_bytes`` is refused at its frame header, a long section
scanned before decoding, a PUSH_PROMISE refused). This path decodes no section longer than
``frames.py`` lets through unscanned (:data:`~.frames.SCAN_FROM`, and ``max_header_bytes``),
and declines every frame ``frames.py`` refuses, so the bytes it declines meet those limits
before the generic path reads any of them (``events.py``), and those it reads never needed
them. The head it makes says the ``content-length`` it checked and whether the response
has a ``content-encoding`` (``WireResponse``), which spares the call a pass over the fields.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from ..exchange import BodySource, WireResponse
from .frames import SCAN_FROM
from .headers import final_head
from .qpack import FIELD_OVERHEAD

__all__ = ["Decode", "Whole", "read_whole"]

#: What decodes a field section of a stream (``shims.StreamErrorsH3Connection``): its fields,
#: or ``None`` when the decoder refuses it (nothing is then kept of it).
Decode = Callable[[int, bytes], "list[tuple[bytes, bytes]] | None"]

_DATA = 0x00
_HEADERS = 0x01
#: A regular field name aioquic takes (``validate_header_name``): no control character, space,
#: upper-case letter, DEL or byte above it, and no colon (a leading one makes a pseudo-header).
_NAME = re.compile(rb"[\x21-\x39\x3b-\x40\x5b-\x7e]+")
#: A field value aioquic takes (``validate_header_value``): no NUL, CR or LF, and no space or
#: tab at either end.
_VALUE = re.compile(rb"(?:[^\x00\n\r\t ](?:[^\x00\n\r]*[^\x00\n\r\t ])?)?")
_STATUS = re.compile(rb"[2-9][0-9][0-9]")
_DIGITS = re.compile(rb"[0-9]+")
#: Fields a response must not carry (RFC 9114 §4.2; aioquic's ``CONNECTION_SPECIFIC_HEADERS``,
#: and ``te``, which only a request may carry).
_CONNECTION_SPECIFIC = frozenset(
    (b"connection", b"keep-alive", b"proxy-connection", b"te", b"transfer-encoding", b"upgrade")
)
_NO_CONTENT = frozenset((b"204", b"304"))


@dataclass(frozen=True, slots=True)
class Whole:
    """A plain response read whole: its final ``head`` (as ``headers.final_head`` makes any,
    its body read from the stream given) and its ``body`` (the DATA frames' payloads,
    joined)."""

    head: WireResponse
    body: bytes


def _varint(data: bytes, at: int, end: int) -> tuple[int, int]:
    """The variable-length integer at ``at`` and the offset after it (RFC 9000 §16); an offset
    past ``end`` when ``data`` ends first."""
    first = data[at]
    size = 1 << (first >> 6)
    if at + size > end:
        return 0, end + 1
    value = first & 0x3F
    for byte in data[at + 1 : at + size]:
        value = (value << 8) | byte
    return value, at + size


def read_whole(
    data: bytes,
    stream_id: int,
    decode: Decode,
    no_content: bool,
    limit: int,
    source: BodySource,
) -> Whole | None:
    """``data`` (all of stream ``stream_id``'s bytes, its FIN with them) as a plain response
    (:class:`Whole`, its body to be read from ``source``), or ``None``: the generic path reads
    them; see the module docstring. ``no_content``: the request was a HEAD. ``limit``:
    ``max_header_bytes``. Never raises for anything in ``data``; decodes at most one field
    section, of at most :data:`~.frames.SCAN_FROM` bytes and ``limit``."""
    end = len(data)
    if end < 3 or data[0] != _HEADERS:
        return None
    length, at = _varint(data, 1, end)
    stop = at + length
    if stop > end or not 0 < length <= min(SCAN_FROM, limit) or data[at] != 0:
        return None  # (cut short; longer than frames.py lets through unscanned; dynamic)
    section = data[at:stop]
    body: list[bytes] = []
    at = stop
    while at < end:
        if data[at] != _DATA or at + 1 >= end:
            return None
        length, at = _varint(data, at + 1, end)
        stop = at + length
        if stop > end:
            return None
        body.append(data[at:stop])
        at = stop
    fields = decode(stream_id, section)
    if not fields:
        return None
    name, value = fields[0]
    if name != b":status" or _STATUS.fullmatch(value) is None:
        return None
    size = 7 + len(value) + FIELD_OVERHEAD
    no_content = no_content or value in _NO_CONTENT
    status = int(value)
    regular = fields[1:]
    declared = -1  # (the content-length declared: none yet)
    encoded = False
    for name, value in regular:
        if _NAME.fullmatch(name) is None or _VALUE.fullmatch(value) is None:
            return None
        if name in _CONNECTION_SPECIFIC:
            return None
        if name == b"content-length":
            if declared >= 0 or _DIGITS.fullmatch(value) is None:
                return None
            declared = int(value)
        elif name == b"content-encoding":
            encoded = True
        size += len(name) + len(value) + FIELD_OVERHEAD
    if size > limit:
        return None
    if no_content:
        if body:
            return None
        return Whole(final_head(status, regular, source, encoded=encoded), b"")
    joined = b"".join(body) if len(body) != 1 else body[0]
    if declared >= 0 and len(joined) != declared:
        return None
    length_checked = declared if declared >= 0 else None
    head = final_head(status, regular, source, content_length=length_checked, encoded=encoded)
    return Whole(head, joined)
