"""How the fault server shapes a scripted response on the wire: the headers a script may give
(checked when the script is written), whether it has a body, its HTTP/1.1 and HTTP/2 header
blocks, and the pacing of a rate-limited body."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TypeAlias

__all__ = [
    "HeadersInput",
    "body_allowed",
    "h2_response_headers",
    "h11_headers",
    "normalize_headers",
    "paced_chunks",
    "response_headers",
]

HeaderPairs: TypeAlias = tuple[tuple[str, str], ...]
HeadersInput: TypeAlias = Mapping[str, str] | Iterable[tuple[str, str]]

# Connection-specific header fields are forbidden in HTTP/2 (RFC 9113 §8.2.2); the HTTP/2
# side drops them from scripted responses instead of failing, so one script serves both
# protocols.
_H2_FORBIDDEN = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"}
)

# How often a paced (body_rate) body is written: small enough that a client sees many chunks,
# large enough that a 1 KiB/s body is not thousands of one-byte writes.
_PACE_TICK = 0.05


#: A header name is a token (RFC 9110 §5.6.2): h11 refuses any other, and the server would
#: answer 500 instead of the scripted response.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def _check_token(name: str) -> None:
    if not _TOKEN.fullmatch(name):
        raise ValueError(
            f"invalid header name {name!r}: expected a token (letters, digits and "
            "!#$%&'*+-.^_`|~), such as X-Trace"
        )


def normalize_headers(headers: HeadersInput) -> HeaderPairs:
    """Return `headers` (a mapping or (name, value) pairs) as a tuple of str pairs.

    Names keep their case (HTTP/1.1 sends them as given; HTTP/2 lowercases them). Raises
    `ValueError` for names that are not tokens, values containing CR, LF or NUL, values
    that are not Latin-1 (every protocol sends a value's characters as one byte each), and
    values with leading or trailing whitespace (HTTP/1.1 sent another response, HTTP/2 a
    malformed one), so a bad script fails where it is written rather than in
    `FaultServer.serve` when it is sent.
    """
    items = headers.items() if isinstance(headers, Mapping) else headers
    out: list[tuple[str, str]] = []
    for name, value in items:
        if not isinstance(name, str) or not isinstance(value, str):
            raise TypeError(f"header names and values must be str, got {name!r}: {value!r}")
        _check_token(name)
        if any(c in value for c in "\r\n\0"):
            raise ValueError(f"invalid header value for {name!r}: {value!r}")
        wide = next((i for i, c in enumerate(value) if ord(c) > 0xFF), None)
        if wide is not None:
            raise ValueError(
                f"header {name!r}: its value must be Latin-1 text (U+0000 to U+00FF, one byte "
                f"each), but character {wide} is {value[wide]!r} (U+{ord(value[wide]):04X}); "
                "for UTF-8 bytes give value.encode('utf-8').decode('latin-1')"
            )
        if value != value.strip(" \t"):
            # No protocol sends it as given: a field value has no leading or trailing
            # whitespace (RFC 9110 §5.5), h11 refuses it, and in HTTP/2 and HTTP/3 it makes
            # the response malformed. Refused, not stripped: a script says what is sent.
            raise ValueError(
                f"header {name!r}: its value {value!r} starts or ends with a space or tab, "
                "which no protocol sends (RFC 9110 §5.5): give it without them, or use "
                "Raw(...) to send such bytes on purpose"
            )
        out.append((name, value))
    return tuple(out)


def body_allowed(status: int, method: str) -> bool:
    """Whether a response with `status` to `method` may carry a body (RFC 9110 §6.4.1)."""
    return method.upper() != "HEAD" and status not in (204, 304) and status >= 200


def response_headers(status: int, headers: HeaderPairs, content_length: int) -> HeaderPairs:
    """HTTP/1.1 final response headers: `headers`, plus ``Content-Length: content_length``
    unless `headers` give a length or a transfer coding, or the status forbids one (204)."""
    names = {name.lower() for name, _ in headers}
    if status == 204 or names & {"content-length", "transfer-encoding"}:
        return headers
    return (*headers, ("Content-Length", str(content_length)))


def h11_headers(headers: HeaderPairs) -> list[tuple[bytes, bytes]]:
    """`headers` as the bytes h11 is given: each character one byte (Latin-1), as the HTTP/2
    and HTTP/3 sides send them. (Given ``str``, h11 encodes as ASCII, and a value such as
    ``café`` would fail in the server instead of being sent.)"""
    return [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers]


def h2_response_headers(status: int, headers: HeaderPairs, content_length: int) -> HeaderPairs:
    """HTTP/2 response header block: ``:status`` first, names lowercased, connection-specific
    fields dropped, ``content-length`` added as for `response_headers`."""
    kept = tuple((n.lower(), v) for n, v in headers if n.lower() not in _H2_FORBIDDEN)
    names = {name for name, _ in kept}
    if status != 204 and "content-length" not in names:
        kept = (*kept, ("content-length", str(content_length)))
    return ((":status", str(status)), *kept)


def paced_chunks(body: bytes, rate: float | None) -> list[tuple[bytes, float]]:
    """Split `body` into (chunk, pause after it) pairs sending about `rate` bytes/second.

    With no rate the body is one chunk with no pause. With a rate, chunks hold what the rate
    allows in one 50 ms tick (at least one byte); every chunk but the last is followed by a
    pause of ``len(chunk) / rate``, so the whole body takes about ``len(body) / rate`` seconds.
    """
    if rate is None or not body:
        return [(body, 0.0)] if body else []
    size = max(1, int(rate * _PACE_TICK))
    chunks = [body[i : i + size] for i in range(0, len(body), size)]
    return [(c, len(c) / rate if i < len(chunks) - 1 else 0.0) for i, c in enumerate(chunks)]
