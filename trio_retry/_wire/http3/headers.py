"""An HTTP/3 response's field section: checked, and made the response head a caller reads.

One job, with no state: given the fields of a HEADERS frame that QPACK decoded for a stream
that has no final head yet, say what they are (:func:`response_head`): the final head, an
interim (1xx) head to skip, or why the stream fails. A request's field section is built by
``contract.request_headers``, the same for HTTP/2.
"""

from __future__ import annotations

from ..._core.evidence import FailureCategory
from ..contract import Failure
from ..exchange import BodySource, WireResponse, head_too_large

__all__ = ["HTTP_VERSION", "response_head"]

HTTP_VERSION = "HTTP/3"


def response_head(
    fields: list[tuple[bytes, bytes]], max_header_bytes: int, source: BodySource
) -> WireResponse | Failure | None:
    """The response head the ``fields`` make, its body read from ``source``; ``None`` for an
    interim (1xx) head (the final one follows); or the stream's :class:`~..contract.Failure`
    when the head is larger than ``max_header_bytes`` (counted as HTTP/2's
    SETTINGS_MAX_HEADER_LIST_SIZE is: name, value and 32 bytes per field) or has no valid
    ``:status``. HTTP/3 has no reason phrase: the head's is empty."""
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
        return Failure(FailureCategory.REMOTE_PROTOCOL, head_too_large(f"{size} bytes"))
    if status is None or status < 100:
        return Failure(
            FailureCategory.REMOTE_PROTOCOL,
            "the server sent a response head with no valid :status",
        )
    if status < 200:
        return None  # 1xx: the final head follows
    return WireResponse(status, "", regular, HTTP_VERSION, source)
