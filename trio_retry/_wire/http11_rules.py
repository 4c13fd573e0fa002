"""What the HTTP/1.1 connection (``http11.py``) refuses, and how it words it.

The h11 request event of a request (built once per ``WireRequest``), and the judgements of
what the server sent: a response head past ``max_header_bytes`` (raised here), a head with
both framings, h11's refusals classified (an EOF inside the response, or bytes that are not
HTTP/1.1), an event that cannot come inside a body. The others return the ``WireError`` (or
its words) for the connection to raise.
"""

from __future__ import annotations

from collections.abc import Iterable

import h11

from .._core.evidence import FailureCategory
from .exchange import WireRequest, head_too_large
from .progress import AttemptProgress, WireError

__all__ = [
    "check_head_size",
    "eof_error",
    "framing_conflict",
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


def protocol_message(exc: h11.RemoteProtocolError) -> str:
    text = str(exc)
    if "too long" in text.lower() or "exceeds" in text.lower():
        return head_too_large(text)
    return f"the server's response is not valid HTTP/1.1: {text}"
