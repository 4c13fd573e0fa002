"""HTTP/2 header blocks: the request's size checked; the response's validated. (A request's
block is built by ``contract.request_headers``, the same for HTTP/3.)

Validation is ours, not h2's (h2 runs with ``validate_inbound_headers=False``): a malformed
response is a stream error (RFC 9113 §8.1.1) that resets that stream only, while h2 would treat
it as a connection error and fail every sibling. The same holds for ``Content-Length``, which
h2 checks inside its stream and turns into a connection error too: :func:`content_length`
parses it here and the stream tracks the body against it (``stream.py``).
"""

from __future__ import annotations

import http
import re

from ..contract import CONNECTION_SPECIFIC

__all__ = [
    "HEADS_KEPT",
    "REASONS",
    "HeadVerdicts",
    "check_head",
    "content_length",
    "explain",
    "head_size",
    "malformed",
]

#: HTTP/2 has no reason phrase: the standard one for the status.
REASONS = {status.value: status.phrase for status in http.HTTPStatus}
#: What a field name may not contain (RFC 9113 §8.2.1): controls, space, upper case, non-ASCII.
_BAD_NAME_BYTE = re.compile(rb"[\x00-\x20\x41-\x5a\x7f-\xff]")
_UPPER_CASE = re.compile(rb"[A-Z]")
_BAD_VALUE_BYTE = re.compile(rb"[\x00\r\n]")


def head_size(headers: list[tuple[bytes, bytes]]) -> int:
    """The size SETTINGS_MAX_HEADER_LIST_SIZE limits (RFC 9113 §6.5.2)."""
    return sum(len(name) + len(value) + 32 for name, value in headers)


#: Regular field names that pass :func:`explain` byte by byte (no control, space, upper case,
#: non-ASCII or ":"), NUL-separated: one match for a whole head (no backtracking: linear).
_GOOD_NAMES = re.compile(rb"[\x21-\x39\x3b-\x40\x5b-\x7e]+(?:\x00[\x21-\x39\x3b-\x40\x5b-\x7e]+)*")
_EDGE_SPACE = (b" ", b"\t")


def malformed(headers: list[tuple[bytes, bytes]], *, trailers: bool) -> str | None:
    """Why a response's header block is malformed (RFC 9113 §8.1.1, §8.2, §8.3), or ``None``.

    A head that passes starts with its one ``:status`` and has no other pseudo-header.
    The usual head is accepted in one pass over its joined names and values (a few C-level
    scans instead of two regex searches per field); anything the pass does not clear goes to
    :func:`explain`, which decides. Both accept exactly the same heads (a differential
    property test in ``tests/wire/test_h2_malformed.py``).
    """
    if not trailers and headers:
        first = headers[0]
        status = first[1]
        if first[0] == b":status" and len(status) == 3 and status.isdigit():
            if len(headers) == 1:
                return None
            names, values = zip(*headers[1:], strict=True)
            separators = len(names) - 1  # NULs in each join; a NUL inside a field makes one more
            joined_names = b"\x00".join(names)
            joined = b"\x00".join(values)
            if (
                _GOOD_NAMES.fullmatch(joined_names)
                and joined_names.count(b"\x00") == separators
                and CONNECTION_SPECIFIC.isdisjoint(names)
                and b"te" not in names
                and joined.count(b"\x00") == separators
                and b"\r" not in joined
                and b"\n" not in joined
                and b"\x00 " not in joined
                and b" \x00" not in joined
                and b"\x00\t" not in joined
                and b"\t\x00" not in joined
                and joined[:1] not in _EDGE_SPACE
                and joined[-1:] not in _EDGE_SPACE
            ):
                return None
    return explain(headers, trailers=trailers)


def explain(headers: list[tuple[bytes, bytes]], *, trailers: bool) -> str | None:
    """:func:`malformed` field by field: the reference check, and the reason it gives."""
    regular = False
    status = False
    for name, value in headers:
        if not name:
            return "an empty header name"
        if name[0] == 0x3A:  # ":": a pseudo-header
            if trailers:
                return f"the pseudo-header {name!r} in trailers"
            if regular:
                return f"the pseudo-header {name!r} after a regular header"
            if name != b":status":
                return f"the pseudo-header {name!r} in a response"
            if status:
                return "a duplicate :status pseudo-header"
            if len(value) != 3 or not value.isdigit():
                return f"an invalid :status {value!r}"
            status = True
            continue
        regular = True
        if _BAD_NAME_BYTE.search(name) or b":" in name:
            kind = "an uppercase" if _UPPER_CASE.search(name) else "an invalid"
            return f"{kind} header name {name!r}"
        if value and (
            _BAD_VALUE_BYTE.search(value) or value[0] in (0x20, 0x09) or value[-1] in (0x20, 0x09)
        ):
            return f"an invalid value for header {name!r}"
        if name in CONNECTION_SPECIFIC:
            return f"the connection-specific header field {name!r}"
        if name == b"te" and value.lower() != b"trailers":
            return f"TE: {value!r} (only 'trailers' is allowed)"
    if not trailers and not status:
        return "no :status pseudo-header"
    return None


def content_length(headers: list[tuple[bytes, bytes]]) -> int | str | None:
    """The response's declared body length: an ``int``, ``None`` when it declares none, or a
    ``str`` saying why the declaration is malformed (not digits, or two that differ)."""
    found: int | None = None
    for name, value in headers:
        if name != b"content-length":
            continue
        # RFC 9110 §8.6: 1*DIGIT. A list of equal values ("5, 5") is tolerated by some; here
        # each field must be a single number, and all must agree.
        if not value.isdigit():
            return f"an invalid content-length {value!r}"
        number = int(value)
        if found is not None and number != found:
            return f"conflicting content-length values {found} and {number}"
        found = number
    return found


#: How many heads a :func:`check_head` memo keeps before it forgets them all.
HEADS_KEPT = 64
#: A :func:`check_head` memo: a verdict by header list.
HeadVerdicts = dict[tuple[tuple[bytes, bytes], ...], tuple[str | None, int | None]]


def check_head(
    headers: list[tuple[bytes, bytes]], kept: HeadVerdicts
) -> tuple[str | None, int | None]:
    """A final response head's verdict: why it is malformed (:func:`malformed`, or its
    Content-Length's problem, :func:`content_length`) or ``None``, and its declared body
    length. The same answer as calling the two; a head seen before on the same connection is
    answered from ``kept`` (the connection's: response heads, cookies included, are never
    shared between connections). A head repeats field for field while the resource and the
    second of its ``date`` do, and hashing its fields, whose ``bytes`` keep their hashes,
    costs a fraction of the checks."""
    key = tuple(headers)
    verdict = kept.get(key)
    if verdict is None:
        problem = malformed(headers, trailers=False)
        length = content_length(headers) if problem is None else None
        if isinstance(length, str):
            problem, length = length, None
        verdict = (problem, length)
        if len(kept) >= HEADS_KEPT:
            kept.clear()
        kept[key] = verdict
    return verdict
