"""The end of a call that did not succeed: which public exception it becomes (SPEC §7).

- the engine said :class:`AmbiguousFailure`, or the last attempt left a request that is not
  safely idempotent ``SENT_NO_RESPONSE`` (:func:`~trio_retry._core.decision.is_ambiguous`, the
  same rule as the engine's rule 8) -> :class:`HttpAmbiguousExecutionError`;
- anything else -> the :class:`RequestFailed` subclass of the last attempt's category.

The underlying OS or protocol error becomes ``__cause__``. Nothing here awaits or does I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._core.attempt import Attempt
from .._core.decision import AmbiguousFailure, Decision, is_ambiguous
from .._core.errors import RejectReason
from .._core.evidence import Evidence, FailureCategory
from .._core.reconcile import ReconcileOutcome
from .._errors import (
    AdmissionRejected,
    ConnectFailed,
    ConnectionBroken,
    DeadlineExceeded,
    HttpAmbiguousExecutionError,
    HTTPStatusError,
    InvalidRequest,
    PoolTimeout,
    ProtocolFailed,
    RequestFailed,
    TLSFailed,
)
from .._models import Response
from .._reconcile import reconciled_of
from .._wire.progress import WireError
from .prepare import PreparedRequest

__all__ = [
    "AMBIGUOUS_ADVICE",
    "CLOSED_IN_FLIGHT",
    "FAILURE_TYPES",
    "ambiguous_status",
    "failure",
    "key_reused",
]

#: The exception of each failure category, when the outcome is not ambiguous.
FAILURE_TYPES: dict[FailureCategory, type[RequestFailed]] = {
    FailureCategory.INVALID_REQUEST: InvalidRequest,
    FailureCategory.DNS: ConnectFailed,
    FailureCategory.CONNECT: ConnectFailed,
    FailureCategory.TLS_HANDSHAKE: TLSFailed,
    FailureCategory.TLS_CERTIFICATE: TLSFailed,
    FailureCategory.POOL_TIMEOUT: PoolTimeout,
    FailureCategory.ADMISSION: AdmissionRejected,
    FailureCategory.REFUSED_STREAM: ConnectionBroken,
    FailureCategory.GOAWAY: ConnectionBroken,
    FailureCategory.CONNECTION_BROKEN: ConnectionBroken,
    FailureCategory.TIMEOUT: DeadlineExceeded,
    FailureCategory.REMOTE_PROTOCOL: ProtocolFailed,
    FailureCategory.LOCAL_PROTOCOL: ProtocolFailed,
}

CLOSED_IN_FLIGHT = "the client was closed while the request was in flight"

_NOT_SENT = Evidence.NOT_SENT

AMBIGUOUS_ADVICE = (
    "It was not retried: reconcile with the upstream (look the operation up), or replay it "
    "with the same Idempotency-Key if the server deduplicates on it."
)


def ambiguous_status(
    request: PreparedRequest,
    response: Response,
    attempts: Sequence[Attempt],
    decision: AmbiguousFailure,
) -> HttpAmbiguousExecutionError:
    """A 502/503/504 on a request that is not safely idempotent: it may have been executed.
    ``.response`` is that response.

    The message says only what is known: the status may come from the origin itself or from
    a gateway in front of it (nothing in a response proves which: ``Via`` is optional), and
    either may have passed the request on before failing. It said "from a gateway", which was
    wrong for an origin's own 503 (issue #38)."""
    last = attempts[-1]
    return HttpAmbiguousExecutionError(
        f"{request.method} {request.url}: status {last.status}, sent by the server or by a "
        "gateway in front of it (which one is not known), either of which may have passed the "
        f"request on first: this {request.idempotency} request may have been executed. "
        + _advice(decision, last),
        evidence=last.evidence,
        attempts=attempts,
        response=response,
        idempotency_key=request.idempotency_key,
        decision=decision,
        reconciled=reconciled_of(last),
    )


def _advice(decision: Decision | None, last: Attempt) -> str:
    """What an ambiguous error's message ends with: why it was not sent again when a key's
    lifetime stopped it, what its reconciler said when it had one, and what to do."""
    text = AMBIGUOUS_ADVICE
    if isinstance(decision, AmbiguousFailure) and decision.key_expired:
        text = (
            "It was not sent again: its Idempotency-Key may have expired at the server by the "
            "next attempt (the upstream's idempotency_key_ttl), which would run it again. "
            "Reconcile with the upstream (look the operation up)."
        )
    if last.reconciled is not None:
        text += f" Its reconciler was asked: {last.reconciled}."
    return text


def _not_executed(attempt: Attempt) -> bool:
    """The call's reconciler said the attempt was not executed."""
    reconciled = attempt.reconciled
    return reconciled is not None and reconciled.outcome is ReconcileOutcome.NOT_EXECUTED


def key_reused(request: PreparedRequest, response: Response) -> RequestFailed:
    """A 422 to a request carrying an Idempotency-Key: the server says the key was used
    before with another payload (draft-ietf-httpapi-idempotency-key-header §2.7). The
    response is the ``HTTPStatusError`` that is ``__cause__`` (a 422 may also be a server's
    word on the body itself: its body says which). The key is not shown."""
    error = RequestFailed(
        f"{request.method} {request.url}: status 422 to a request carrying an "
        "Idempotency-Key: the server says the key was reused with another payload (method, "
        "target or body), and did not execute this request. Use a new key "
        "(idempotency_key=True) for a different request; the response is __cause__.response",
        evidence=Evidence.RESPONSE_RECEIVED,
        attempts=response.attempts,
        decision=response.retry_decision,
        idempotency_key=request.idempotency_key,
    )
    error.__cause__ = HTTPStatusError(
        f"client error 422 {response.reason} for {request.method} {request.url}",
        response=response,
    )
    return error


def call_evidence(attempts: Sequence[Attempt]) -> Evidence:
    """What the trail proves about the call: the last attempt's evidence, unless it is
    ``NOT_SENT`` while an earlier attempt was not: then that latest earlier attempt's.

    The obvious way, the last attempt's evidence alone, told a caller ``NOT_SENT`` ("the server
    never received it") after a first attempt whose response was lost and a retry that could
    not connect; the exactly-once lab (issue #31) found a keyed payment reported so although the
    server had executed it. An attempt its reconciler said was not executed counts as
    ``NOT_SENT`` here."""
    for attempt in reversed(attempts):
        if attempt.evidence is not _NOT_SENT and not _not_executed(attempt):
            return attempt.evidence
    return _NOT_SENT


def failure(
    request: PreparedRequest,
    attempts: Sequence[Attempt],
    error: BaseException,
    decision: Decision | None,
) -> Exception:
    """The exception a call ending on ``error`` raises (its ``__cause__`` set).

    Its ``.evidence`` is the call's (:func:`call_evidence`): ``NOT_SENT`` only when no attempt
    reached the server, so a retry that could not connect never hides an earlier attempt
    that may have run."""
    last = attempts[-1]
    evidence = call_evidence(attempts)
    if isinstance(decision, AmbiguousFailure) or is_ambiguous(evidence, request.idempotency):
        exc: Exception = HttpAmbiguousExecutionError(
            f"{request.method} {request.url}: the server may have executed this request "
            f"({evidence} at {last.stage}: {error}). " + _advice(decision, last),
            evidence=evidence,
            attempts=attempts,
            idempotency_key=request.idempotency_key,
            decision=decision,
            reconciled=reconciled_of(last),
        )
    else:
        category = last.category or FailureCategory.CONNECTION_BROKEN
        kind = FAILURE_TYPES[category]
        count = len(attempts)
        message = (
            f"{request.method} {request.url} failed after {count} attempt"
            f"{'s' if count != 1 else ''}: {error}"
        )
        if last.reconciled is not None:
            message += f" ({last.reconciled})"
        if kind is AdmissionRejected:
            # Where the refusal happened says why; an ADMISSION error that does not (HTTP/2's
            # "closed while connecting") is the client closing.
            reason = error.reason if isinstance(error, WireError) else None
            exc = AdmissionRejected(
                message,
                reason=reason or RejectReason.CLOSED,
                evidence=evidence,
                attempts=attempts,
                decision=decision,
                category=category,
                idempotency_key=request.idempotency_key,
            )
        else:
            exc = kind(
                message,
                evidence=evidence,
                attempts=attempts,
                decision=decision,
                category=category,
                idempotency_key=request.idempotency_key,
            )
    # The underlying OS / protocol error when there is one; the wire's own error otherwise.
    cause = error.__cause__ if isinstance(error, WireError) else None
    exc.__cause__ = cause if cause is not None else error
    return exc
