"""Continuing a broken body with a range request (RFC 9110 §13.1.5 If-Range, §14 ranges): which
responses can be continued, what the continuation asks for, and whether its answer continues
the same representation. Pure: header values in, a decision out, no I/O and no clock.

A body can be continued when its response was a ``200`` that carried ``Accept-Ranges: bytes``
and a strong validator: a strong ``ETag``, or else a ``Last-Modified`` date the response itself
shows strong (its ``Date`` at least one second later, §8.8.2.2; with an ETag that is weak, a
date may not be used, §13.1.5). A body with a content coding other than identity needs the
strong ETag: only it promises the same encoded bytes (a date says nothing about how the body
was compressed), and the continuation feeds the encoded bytes to the decoder that decoded the
beginning. The continuation sends ``Range: bytes=N-`` (``N`` the encoded bytes received) and
``If-Range`` with that validator, so a server whose representation changed answers ``200``
with the whole new one instead of a range of it.

Its answer continues the body only when it is a ``206`` whose ``Content-Range`` starts at ``N``
and runs to the end of the same complete length, with the same ETag (when it sends one) and the
same content coding. Anything else (a ``200``, a ``416``, another range, a multipart answer, a
changed ETag, length or coding) is never spliced: :func:`judge` says why, in words fit for the
caller's error message.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Validator", "continuation_headers", "judge", "validator_of"]

_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


@dataclass(frozen=True, slots=True)
class Validator:
    """What the first response of a body promised, kept to continue it."""

    #: The ``If-Range`` value: the strong ETag, or the Last-Modified date.
    if_range: str
    #: The strong ETag, when the response had one.
    etag: str | None
    #: The representation's complete length (the ``200``'s ``Content-Length``), when known.
    length: int | None
    #: The ``Content-Encoding`` as sent (``None``: identity).
    encoding: str | None


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    return None if value is None else value.strip()


def _coding(headers: Mapping[str, str]) -> str | None:
    value = _header(headers, "content-encoding")
    if value is None or value.lower() in ("", "identity"):
        return None
    return value


def _strong_date(last_modified: str, date: str | None) -> bool:
    """RFC 9110 §8.8.2.2: a Last-Modified date the client may use as a strong validator is one
    at least a second before the response's own Date (the same server's clock)."""
    if date is None:
        return False
    import email.utils  # (with calendar and email's parts: only for a response without ETag)

    try:
        modified = email.utils.parsedate_to_datetime(last_modified)
        sent = email.utils.parsedate_to_datetime(date)
    except (TypeError, ValueError):
        return False
    if modified.tzinfo is None or sent.tzinfo is None:
        return False
    return (sent - modified).total_seconds() >= 1.0


def validator_of(status: int, headers: Mapping[str, str]) -> Validator | None:
    """The validator a broken body of this response can be continued with, or ``None`` when
    it cannot be: not a ``200``, no ``Accept-Ranges: bytes``, no strong validator, or a content
    coding without a strong ETag."""
    if status != 200:
        return None
    accept = _header(headers, "accept-ranges") or ""
    if "bytes" not in (token.strip().lower() for token in accept.split(",")):
        return None
    length_text = _header(headers, "content-length")
    length = int(length_text) if length_text is not None and length_text.isdigit() else None
    encoding = _coding(headers)
    etag = _header(headers, "etag")
    if etag is not None:
        if etag.startswith("W/") or not (len(etag) >= 2 and etag[0] == etag[-1] == '"'):
            return None  # weak (or not an entity-tag): no date may stand in for it (§13.1.5)
        return Validator(if_range=etag, etag=etag, length=length, encoding=encoding)
    last_modified = _header(headers, "last-modified")
    if encoding is not None or last_modified is None:
        return None
    if not _strong_date(last_modified, _header(headers, "date")):
        return None
    return Validator(if_range=last_modified, etag=None, length=length, encoding=None)


def continuation_headers(validator: Validator, offset: int) -> tuple[tuple[str, str], ...]:
    """The headers that ask for the body from byte `offset` on, if it is still the same."""
    return (("Range", f"bytes={offset}-"), ("If-Range", validator.if_range))


def judge(validator: Validator, offset: int, status: int, headers: Mapping[str, str]) -> str | None:
    """``None`` when this answer to a continuation from `offset` continues the same body;
    otherwise why it does not (the representation changed, or the server did not send the
    range asked for)."""
    if status == 200:
        return (
            "the server answered 200 with a whole body to a request for the rest of it: the "
            "representation changed (If-Range did not match) or the server no longer serves "
            "ranges"
        )
    if status == 416:
        return (
            f"the server answered 416 to a request from byte {offset}: the representation "
            "changed (it is no longer that long)"
        )
    if status != 206:
        return f"the server answered {status} to a request for the rest of the body"
    content_range = _header(headers, "content-range")
    match = None if content_range is None else _CONTENT_RANGE.fullmatch(content_range)
    if match is None:
        return f"its 206 carried no single byte range (Content-Range {content_range!r})"
    first, last, complete = int(match[1]), int(match[2]), match[3]
    length = validator.length
    if complete != "*" and length is not None and int(complete) != length:
        return (
            f"its 206 says the representation is {complete} bytes long, not {length}: the "
            "representation changed"
        )
    if first != offset:
        return f"its 206 starts at byte {first}, not at byte {offset} where the body broke"
    end = int(complete) if complete != "*" else length
    if end is not None and last != end - 1:
        return f"its 206 ends at byte {last}, not at the end of the representation ({end - 1})"
    etag = _header(headers, "etag")
    if validator.etag is not None and etag is not None and etag != validator.etag:
        return f"its 206 has ETag {etag}, not {validator.etag}: the representation changed"
    if _coding(headers) != validator.encoding:
        return "its 206 has another Content-Encoding than the body it continues"
    return None
