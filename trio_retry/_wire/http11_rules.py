"""What the HTTP/1.1 connection (``http11.py``) has h11 write, what it refuses, and the words.

h11's bytes for a request (:func:`h11_request`, built once per ``WireRequest``; :func:`encode`,
:func:`encode_whole`: h11 refusing the request is ``LOCAL_PROTOCOL``, raised before anything
of it was written), and the judgements of what the server sent (``http11_reader.py`` applies
them): a response head past ``max_header_bytes`` (raised here), a head with both framings,
h11's refusals classified (an EOF inside the response, or bytes that are not HTTP/1.1), an
event that cannot come inside a body. The others return the ``WireError`` (or its words) for
the reader to raise.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import h11

from .._core.evidence import FailureCategory
from .exchange import WireRequest, content_length, head_too_large
from .progress import AttemptProgress, WireError

#: h11's events are immutable: the one end of a request body serves every request.
END_OF_MESSAGE = h11.EndOfMessage()

__all__ = [
    "END_OF_MESSAGE",
    "check_head_size",
    "encode",
    "encode_whole",
    "eof_error",
    "framing_conflict",
    "h11_request",
    "invalid_request",
    "protocol_message",
    "request_event",
    "unexpected",
]


def request_event(request: WireRequest, length: bytes | None) -> h11.Request:
    """The request as h11 sends it: framed by ``length`` (else chunked for a stream).

    The header names and values were validated when they entered the client (see
    ``_models._check_header``: h11's rules and stricter), so h11 is told not to run its regexes
    over them again. It still checks the method, the target and the Host header, and a
    rejection is the caller's to classify (nothing was written)."""
    headers = request.headers
    if length is not None:
        headers = [*headers, (b"content-length", length)]
    elif not isinstance(request.body, bytes):
        headers = [*headers, (b"transfer-encoding", b"chunked")]
    return h11.Request(
        method=request.method.encode("ascii"),
        target=request.target.encode("ascii"),
        headers=headers,
        _parsed=True,
    )


def invalid_request(progress: AttemptProgress, exc: Exception) -> WireError:
    """h11 refused the request (nothing of it was written)."""
    return WireError.at(progress, FailureCategory.LOCAL_PROTOCOL, f"invalid request: {exc}")


def h11_request(request: WireRequest, progress: AttemptProgress) -> h11.Request:
    """The request's h11 event (built once per WireRequest, which a template reuses)."""
    event = request.h11_event
    if event is None:
        try:
            event = request.h11_event = request_event(request, content_length(request))
        except (h11.LocalProtocolError, UnicodeEncodeError) as exc:
            raise invalid_request(progress, exc) from exc
    return event


def encode(conn: h11.Connection, event: h11.Event, progress: AttemptProgress) -> bytes:
    """The bytes h11 writes for ``event`` of the request."""
    try:
        return conn.send(event) or b""
    except h11.LocalProtocolError as exc:
        raise invalid_request(progress, exc) from exc


def encode_whole(
    conn: h11.Connection, request: WireRequest, body: bytes, progress: AttemptProgress
) -> tuple[bytes, bytes]:
    """The bytes h11 writes for a request whose body is in memory: the head, and the body
    with its end."""
    event = h11_request(request, progress)
    try:
        head = conn.send(event) or b""
        data = (conn.send(h11.Data(data=body)) or b"") if body else b""
        return head, data + (conn.send(END_OF_MESSAGE) or b"")
    except h11.LocalProtocolError as exc:
        raise invalid_request(progress, exc) from exc


def check_head_size(
    progress: AttemptProgress, headers: Iterable[tuple[bytes, bytes]], limit: int
) -> None:
    """h11 bounds only *incomplete* heads; a large head that arrived in one read is measured
    here (both parsers), so the limit holds however the bytes were chunked."""
    size = sum(len(name) + len(value) + 4 for name, value in headers)
    if size > limit:
        raise WireError.at(
            progress, FailureCategory.REMOTE_PROTOCOL, head_too_large(f"{size} bytes > {limit}")
        )


def framing_conflict(headers: list[tuple[bytes, bytes]]) -> str | None:
    """Why a response head's framing is invalid, or ``None``: ``Transfer-Encoding`` together
    with ``Content-Length``.

    RFC 9112 §6.3 (3): such a message "ought to be handled as an error", and the connection
    must not be reused: the two lengths disagree about where this response ends, which is
    where request smuggling and response desync live. h11 reads the body as chunked and keeps
    the connection; we refuse the response (the wire stage stays ``RESPONSE_HEAD``: no valid
    response was received) and the connection is closed with it.
    """
    chunked = length = False
    for name, _ in headers:  # the names as received (any case): compared by length first
        size = len(name)
        if size == 17 and name.lower() == b"transfer-encoding":
            chunked = True
        elif size == 14 and name.lower() == b"content-length":
            length = True
    if chunked and length:
        return (
            "the server's response is not valid HTTP/1.1: it has both Transfer-Encoding and "
            "Content-Length (RFC 9112 §6.3), so its length is ambiguous; the connection is "
            "closed, not reused"
        )
    return None


def unexpected(progress: AttemptProgress, event: object) -> WireError:
    """An h11 event that cannot come inside a response body (h11 makes none)."""
    return WireError.at(progress, FailureCategory.REMOTE_PROTOCOL, f"unexpected event {event!r}")


def eof_error(exc: h11.RemoteProtocolError) -> bool:
    return "peer closed connection" in str(exc) or "incomplete" in str(exc)


# h11 quotes the offending bytes: `illegal header line: bytearray(b'Set-Cookie sid=...')`.
_QUOTED_BYTES = re.compile(r"""(?:bytearray\()?b(['"])(.*?)\1\)?""")
_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]*")


def _name_only(match: re.Match[str]) -> str:
    name = _NAME.match(match[2])
    return f"{name[0]!r} (value not shown)" if name and name[0] else "(not shown)"


def protocol_message(exc: h11.RemoteProtocolError) -> str:
    """h11's complaint in words; one about a header line or value names the header but never
    quotes its value (it may be a ``Set-Cookie``)."""
    text = str(exc)
    lowered = text.lower()
    if "header value" in lowered:
        text = _QUOTED_BYTES.sub("(not shown)", text)
    elif "header" in lowered:
        text = _QUOTED_BYTES.sub(_name_only, text)
    if "too long" in text.lower() or "exceeds" in text.lower():
        return head_too_large(text)
    return f"the server's response is not valid HTTP/1.1: {text}"
