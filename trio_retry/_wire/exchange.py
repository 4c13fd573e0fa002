"""The exchange contract HTTP/1.1 (``http11.py``), HTTP/2 (``http2/``) and HTTP/3 (``http3/``)
share.

One place for what does not depend on the protocol: the request as the wire sees it
(:class:`WireRequest`), the response head and where its body comes from (:class:`WireResponse`,
:class:`BodySource`), how a request body is framed (:func:`content_length`), how a failed Trio
stream operation becomes a :class:`~.progress.WireError` (:data:`TRANSPORT_ERRORS`,
:func:`broken`), and the words of a response's failures every protocol shares
(:func:`head_too_large`). What the connections carrying exchanges share is ``contract.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Protocol

import trio

from .._core.evidence import FailureCategory
from .progress import AttemptProgress, WireError

if TYPE_CHECKING:
    import h11

__all__ = [
    "BODY_METHODS",
    "TRANSPORT_ERRORS",
    "BodySource",
    "WireRequest",
    "WireResponse",
    "broken",
    "closing_body",
    "content_length",
    "head_too_large",
]

#: Methods that carry a body by convention: an empty one is sent as ``Content-Length: 0``.
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})

#: What a Trio byte stream raises when the connection under it is gone; :func:`broken` turns
#: each into ``CONNECTION_BROKEN`` with the evidence of the stage reached.
TRANSPORT_ERRORS: tuple[type[Exception], ...] = (
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    OSError,
)


class WireRequest:
    """A request ready for the wire: validated, headers encoded, body as bytes or a stream.

    Not changed once built: a call without options reuses its template's (see
    ``_call/prepare.WireMemo``), so the HTTP/1.1 connection keeps what it encoded from it
    here (``h11_event``, ``fast_head``) for the next call on any connection, and HTTP/2 and
    HTTP/3 their field section (``fields``)."""

    __slots__ = (
        "body",
        "content_length",
        "fast_head",
        "fields",
        "h11_event",
        "headers",
        "method",
        "target",
    )

    def __init__(
        self,
        method: str,
        target: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes | AsyncIterable[bytes],
        content_length: int | None,
    ) -> None:
        self.method = method
        self.target = target
        self.headers = headers
        self.body = body
        self.content_length = content_length
        #: The ``h11.Request`` event of this request (an immutable h11 event), once built.
        self.h11_event: h11.Request | None = None
        #: The head the HTTP/1.1 fast path writes for it (``fast11.request_head``), once built.
        self.fast_head: bytes | None = None
        #: The HTTP/2 or HTTP/3 field section (``contract.request_headers``) once made, with
        #: the scheme, authority and credential form it was made for.
        self.fields: tuple[bytes, bytes, object, list[tuple[bytes, bytes]]] | None = None


class BodySource(Protocol):
    """What a response body is read from: a connection (HTTP/1.1) or a stream (HTTP/2)."""

    async def receive_body(self, progress: AttemptProgress) -> bytes:
        """The next body chunk; ``b""`` once the body is complete (stage ``COMPLETE``). Each
        wait for it is within the read bound (an idle bound: ``clock.py``)."""
        ...

    async def receive_all(self, progress: AttemptProgress, limit: int | None) -> list[bytes]:
        """Every chunk to the end of the body (stage ``COMPLETE``), each read as by
        :meth:`receive_body`; or, as soon as they add up to more
        than ``limit`` bytes, the chunks so far (the caller refuses the body and abandons the
        source). Errors and cancellation as :meth:`receive_body`."""
        ...

    def abandon(self) -> None:
        """Stop reading: the rest of the body is not wanted (closes or resets as needed)."""
        ...


class WireResponse:
    """Response head plus the source its body is read from.

    ``content_length``: the ``Content-Length`` the body is framed (or, HTTP/2, checked) by, when
    the wire parsed it to read the body (HTTP/1.1's fast parser, HTTP/2's head check); ``None``
    when the body has none, or the parser did not say (the head's fields still hold whatever
    the server sent). ``encoded``: whether the head has a ``Content-Encoding`` field, when the
    wire looked (HTTP/1.1's fast parser); ``None`` when it did not. A reader of the head that
    only needs these is spared a pass over the fields."""

    __slots__ = (
        "content_length",
        "encoded",
        "headers",
        "http_version",
        "reason",
        "source",
        "status",
    )

    def __init__(
        self,
        status: int,
        reason: str,
        headers: list[tuple[bytes, bytes]],
        http_version: str,
        source: BodySource,
        content_length: int | None = None,
        encoded: bool | None = None,
    ) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.http_version = http_version
        self.source = source
        self.content_length = content_length
        self.encoded = encoded


def content_length(request: WireRequest) -> bytes | None:
    """The ``Content-Length`` value the request is framed with, or ``None`` when its length is
    unknown (HTTP/1.1 then sends it chunked, HTTP/2 ends it with END_STREAM). A body in memory
    always has one, except an empty body of a method that carries none (a GET)."""
    body = request.body
    if isinstance(body, bytes):
        if body or request.method in BODY_METHODS:
            return str(len(body)).encode()
        return None
    if request.content_length is not None:
        return str(request.content_length).encode()
    return None


def broken(progress: AttemptProgress, when: str, exc: BaseException) -> WireError:
    """The failure of a transport operation (one of :data:`TRANSPORT_ERRORS`) ``when`` (e.g.
    ``"while sending"``): ``CONNECTION_BROKEN``, with the evidence of the stage reached."""
    return WireError.at(
        progress,
        FailureCategory.CONNECTION_BROKEN,
        f"connection broke {when}: {exc.__cause__ or exc}",
    )


def head_too_large(detail: str) -> str:
    """The message for a response head over ``max_header_bytes``, the same for both protocols;
    ``detail`` says what was measured (``"12345 bytes"`` or the parser's own words)."""
    return (
        f"the response head ({detail}) is larger than max_header_bytes; raise "
        "Client(max_header_bytes=...) if the server legitimately sends large headers"
    )


@asynccontextmanager
async def closing_body(body: AsyncIterable[bytes]) -> AsyncIterator[None]:
    """Finalise a streamed request body however its upload ends.

    Each attempt opens a fresh body stream and nothing reads it after the attempt, so the
    writer closes it: an async generator abandoned half-way (a failed or cancelled write) would
    otherwise be finalised by the garbage collector, with a ``ResourceWarning``, and whatever
    its ``finally`` releases (an open file) would stay held until then.
    """
    try:
        yield
    finally:
        aclose = getattr(body, "aclose", None)
        if aclose is not None:
            await aclose()
