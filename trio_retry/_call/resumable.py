"""Whether a response's body can be continued if it breaks (SPEC §18): the request's side
(``GET``, replay-safe, resuming on) and the head's (``_resume.validator_of``). Asked once per
response answered below 400; the request's side first, then a scan of the head for
``Accept-Ranges`` before anything is decoded, so that a response that promises nothing costs
a loop over its header names."""

from __future__ import annotations

from collections.abc import Sequence

from .._core.idempotency import Idempotency
from .._models import Headers
from .._resume import Validator, validator_of
from .prepare import PreparedRequest
from .upstream import UpstreamState

__all__ = ["resumable"]


def resumable(
    request: PreparedRequest,
    state: UpstreamState,
    status: int,
    wire_headers: Sequence[tuple[bytes, bytes]],
) -> Validator | None:
    """The validator the body of this response can be continued with, or ``None``: not
    a replay-safe request (``SAFE``, or ``IDEMPOTENT`` with an ``Idempotency-Key``), resuming
    off (``resume=False`` for the call, else the upstream's ``Upstream(resume=False)``), not
    a ``GET`` (range requests are defined for ``GET`` alone, RFC 9110 §14.2: a server ignores
    ``Range`` on another method and would run it again), or a head that promises nothing
    (``_resume.validator_of``)."""
    if request.method != "GET" or status != 200:
        return None
    for name, _ in wire_headers:  # (the length first: no call for most names)
        if len(name) == 13 and name.lower() == b"accept-ranges":
            break
    else:
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
    return validator_of(status, Headers.from_wire(wire_headers))
