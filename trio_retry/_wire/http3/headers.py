"""An HTTP/3 response's field section: checked, and made the response head a caller reads.

One job, with no state: given the fields of a HEADERS frame that QPACK decoded for a stream
that has no final head yet, say what they are (:func:`response_head`): the final head, an
interim (1xx) head to skip, or why the stream fails (a stream error, raised as
:class:`~.frames.FrameRefused`); and whether trailers are within the limit
(:func:`check_trailers`). A request's field section is built by ``contract.request_headers``,
the same for HTTP/2. Sizes are counted as HTTP/2's SETTINGS_MAX_HEADER_LIST_SIZE counts them
(RFC 9114 §4.2.2): name, value and 32 bytes per field.
"""

from __future__ import annotations

from ..exchange import BodySource, WireResponse, head_too_large
from .codes import H3_EXCESSIVE_LOAD, H3_MESSAGE_ERROR
from .frames import FrameRefused

__all__ = ["HTTP_VERSION", "check_trailers", "final_head", "response_head"]

HTTP_VERSION = "HTTP/3"


def response_head(
    fields: list[tuple[bytes, bytes]], max_header_bytes: int, source: BodySource
) -> WireResponse | None:
    """The response head the ``fields`` make, its body read from ``source``; ``None`` for an
    interim (1xx) head (the final one follows). Raises :class:`~.frames.FrameRefused` (a
    stream error) when the head is larger than ``max_header_bytes`` (H3_EXCESSIVE_LOAD) or has
    no valid ``:status`` (H3_MESSAGE_ERROR). HTTP/3 has no reason phrase: the head's is
    empty."""
    status: int | None = None
    regular: list[tuple[bytes, bytes]] = []
    size = 0
    for name, value in fields:
        size += len(name) + len(value) + 32
        if name == b":status":
            status = int(value) if value.isdigit() and len(value) == 3 else -1
        elif not name.startswith(b":"):
            regular.append((name, value))
    if size > max_header_bytes:
        raise FrameRefused(H3_EXCESSIVE_LOAD, head_too_large(f"{size} bytes"), stream_error=True)
    if status is None or status < 100:
        raise FrameRefused(
            H3_MESSAGE_ERROR,
            "the server sent a response head with no valid :status",
            stream_error=True,
        )
    if status < 200:
        return None  # 1xx: the final head follows
    return final_head(status, regular, source)


def final_head(
    status: int,
    regular: list[tuple[bytes, bytes]],
    source: BodySource,
    *,
    content_length: int | None = None,
    encoded: bool | None = None,
) -> WireResponse:
    """The final head a caller reads: ``status`` (200-999) and the ``regular`` fields (no
    pseudo-header), checked already; ``content_length`` and ``encoded`` as
    ``WireResponse`` has them, when the reader of the fields learnt them (``whole.py``)."""
    return WireResponse(status, "", regular, HTTP_VERSION, source, content_length, encoded)


def check_trailers(fields: list[tuple[bytes, bytes]], max_header_bytes: int) -> None:
    """Raises :class:`~.frames.FrameRefused` (a stream error, H3_EXCESSIVE_LOAD) when the
    trailers ``fields`` are larger than ``max_header_bytes``, as a head would be."""
    size = sum(len(name) + len(value) + 32 for name, value in fields)
    if size > max_header_bytes:
        raise FrameRefused(
            H3_EXCESSIVE_LOAD, head_too_large(f"trailers of {size} bytes"), stream_error=True
        )
