"""Whether a response's body can be continued if it breaks (SPEC §18): the request's side
(``GET``, replay-safe, resuming on) and the head's (``_resume.validator_of``). Asked for every
response of a ``GET`` answered ``200``, so it is cheap: the request's side first, then one pass
over the head's fields, keeping only the six ``validator_of`` reads (a plain dict, no
:class:`~trio_retry.Headers`). A buffered call's body is continued only from
:data:`BUFFERED_FROM` bytes on, and most buffered bodies are shorter: for it the length is asked
first, before both, and costs least: the ``Content-Length`` the wire framed the body by, when it
says (``WireResponse.content_length``), else a pass over the names that lowers and decodes
nothing (:func:`_may_be_long`).

A buffered call reads a body that can be continued through the same path as a streamed one
(``_call/resume.py``), which costs more per response than reading it whole in one go
(measured against nginx: about 80 µs of CPU for a 1 KiB file, 165 µs instead of 86 µs). A
buffered body is therefore continued only from :data:`BUFFERED_FROM` bytes on (its
``Content-Length``); a shorter one that breaks is sent again whole, as any broken buffered
body of a safe request (nothing of it had reached the caller), which costs less than the
machinery would on every such response that does not break.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._core.idempotency import Idempotency
from .._resume import Validator, validator_of
from .prepare import PreparedRequest
from .upstream import UpstreamState

__all__ = ["BUFFERED_FROM", "resumable"]

#: A buffered body is continued when it breaks only if its ``Content-Length`` is at least this
#: (the module docstring); a streamed body whatever its length.
BUFFERED_FROM = 1 << 20

#: The head's fields ``validator_of`` reads.
_FIELDS = frozenset(
    (b"accept-ranges", b"content-length", b"content-encoding", b"etag", b"last-modified", b"date")
)
#: The fewest characters a ``Content-Length`` of :data:`BUFFERED_FROM` or more can have.
_LONG_DIGITS = len(str(BUFFERED_FROM))


def resumable(
    request: PreparedRequest,
    state: UpstreamState,
    status: int,
    wire_headers: Sequence[tuple[bytes, bytes]],
    buffered: bool = False,
    content_length: int | None = None,
) -> Validator | None:
    """The validator the body of this response can be continued with, or ``None``: not
    a replay-safe request (``SAFE``, or ``IDEMPOTENT`` with an ``Idempotency-Key``), resuming
    off (``resume=False`` for the call, else the upstream's ``Upstream(resume=False)``), not
    a ``GET`` (range requests are defined for ``GET`` alone, RFC 9110 §14.2: a server ignores
    ``Range`` on another method and would run it again), a head that promises nothing
    (``_resume.validator_of``), or, ``buffered``, a body shorter than :data:`BUFFERED_FROM`.
    ``content_length``: the ``Content-Length`` the wire framed the body by, when it says
    (``WireResponse.content_length``; the same field the head holds)."""
    if buffered and (
        content_length < BUFFERED_FROM
        if content_length is not None
        else not _may_be_long(wire_headers)
    ):
        return None  # (the length refuses most buffered bodies: asked first, it costs least)
    if request.method != "GET" or status != 200:
        return None
    resume = request.resume if request.resume is not None else state.upstream.resume
    if not resume:
        return None
    idempotency = request.idempotency
    if not (
        idempotency is Idempotency.SAFE
        or (idempotency is Idempotency.IDEMPOTENT and request.idempotency_key is not None)
    ):
        return None
    if not request.body.replayability.replayable:
        return None
    fields: dict[str, str] = {}
    for name, value in wire_headers:
        lowered = name.lower()
        if lowered in _FIELDS:
            fields[lowered.decode("latin-1")] = value.decode("latin-1")
    if "accept-ranges" not in fields:
        return None
    validator = validator_of(status, fields)
    if validator is None or not buffered:
        return validator
    length = validator.length
    return validator if length is not None and length >= BUFFERED_FROM else None


def _may_be_long(wire_headers: Sequence[tuple[bytes, bytes]]) -> bool:
    """Whether the head may declare a body of :data:`BUFFERED_FROM` bytes or more: it has a
    ``Content-Length`` field (any case) whose value has at least :data:`_LONG_DIGITS`
    characters. ``False`` is certain (``validator_of`` reads the same field: a shorter value,
    stripped or not, is a smaller number or none); ``True`` is only a maybe, which the full
    read then settles. Only a name of that length is lowered: a usual head costs a ``len``
    or two a field, and nothing else."""
    for name, value in wire_headers:
        if len(name) == 14 and len(value) >= _LONG_DIGITS and name.lower() == b"content-length":
            return True
    return False
