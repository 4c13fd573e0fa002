"""What the engine can decide after an attempt: retry, deny (and why), or "ambiguous".

Frozen values with a human ``__str__``; the client records one on every :class:`Attempt` the
engine was consulted on. :func:`is_ambiguous` is the one statement of the ambiguity rule
(SPEC §7): the engine's rule 8 and the client's final-failure mapping both ask it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TypeAlias

from .evidence import Evidence, FailureCategory
from .idempotency import Idempotency

__all__ = [
    "AmbiguousFailure",
    "Decision",
    "DenyReason",
    "RetryAllowed",
    "RetryDenied",
    "is_ambiguous",
]


def is_ambiguous(evidence: Evidence, idempotency: Idempotency) -> bool:
    """True when a request may have been executed and repeating it is not known to be safe:
    a request byte may have left, no response arrived, and the operation is not safely
    idempotent. Whatever stopped the attempts, such an outcome is reported as ambiguous."""
    return evidence is Evidence.SENT_NO_RESPONSE and not idempotency.safely_idempotent


class DenyReason(enum.Enum):
    """Why a retry was denied; one member per denying rule."""

    MAX_ATTEMPTS = "max_attempts"
    BUDGET_EXHAUSTED = "budget_exhausted"
    BODY_NOT_REPLAYABLE = "body_not_replayable"
    RESPONSE_ALREADY_DELIVERED = "response_already_delivered"
    RUNTIME_DRAINING = "runtime_draining"
    DEADLINE = "deadline"
    PERMANENT_FAILURE = "permanent_failure"
    RETRY_AFTER_TOO_LONG = "retry_after_too_long"
    NOT_RETRYABLE = "not_retryable"

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class RetryAllowed:
    """Try again after ``delay`` seconds."""

    delay: float

    def __str__(self) -> str:
        return f"retry allowed after {self.delay:.3f}s"


_DENY_TEXT = {
    DenyReason.MAX_ATTEMPTS: "attempts exhausted",
    DenyReason.BUDGET_EXHAUSTED: "the upstream's retry budget is empty",
    DenyReason.BODY_NOT_REPLAYABLE: "the request body cannot be sent again (one-shot)",
    DenyReason.RESPONSE_ALREADY_DELIVERED: "part of the response already reached the caller",
    DenyReason.RUNTIME_DRAINING: "the client is draining",
    DenyReason.DEADLINE: "the remaining deadline is too short for another attempt",
    DenyReason.PERMANENT_FAILURE: "the failure is permanent",
    DenyReason.RETRY_AFTER_TOO_LONG: "the server's Retry-After exceeds the backoff maximum",
    DenyReason.NOT_RETRYABLE: "this status or failure is not retried",
}


@dataclass(frozen=True, slots=True)
class RetryDenied:
    """Do not try again, because of ``reason``.

    ``category`` is set for permanent failures; ``retry_after`` carries the delay the server
    asked for, when it asked (informational: it does not take part in equality).
    """

    reason: DenyReason
    category: FailureCategory | None = None
    retry_after: float | None = field(default=None, compare=False)

    @classmethod
    def _of(cls, reason: DenyReason, retry_after: float | None) -> RetryDenied:
        """A denial without a category; the plain ones (no ``retry_after``) are built once
        per reason and shared (they are immutable, and a denial is on every failure path)."""
        if retry_after is not None or cls is not RetryDenied:
            return cls(reason, retry_after=retry_after)
        # Keyed by the member's value: hashing an Enum member is a Python-level call.
        denied = _PLAIN_DENIALS.get(reason._value_)
        if denied is None:
            denied = _PLAIN_DENIALS[reason._value_] = cls(reason)
        return denied

    @classmethod
    def max_attempts(cls, *, retry_after: float | None = None) -> RetryDenied:
        return cls._of(DenyReason.MAX_ATTEMPTS, retry_after)

    @classmethod
    def budget_exhausted(cls, *, retry_after: float | None = None) -> RetryDenied:
        return cls._of(DenyReason.BUDGET_EXHAUSTED, retry_after)

    @classmethod
    def body_not_replayable(cls, *, retry_after: float | None = None) -> RetryDenied:
        return cls._of(DenyReason.BODY_NOT_REPLAYABLE, retry_after)

    @classmethod
    def response_already_delivered(cls, *, retry_after: float | None = None) -> RetryDenied:
        return cls._of(DenyReason.RESPONSE_ALREADY_DELIVERED, retry_after)

    @classmethod
    def runtime_draining(cls, *, retry_after: float | None = None) -> RetryDenied:
        return cls._of(DenyReason.RUNTIME_DRAINING, retry_after)

    @classmethod
    def deadline(cls, *, retry_after: float | None = None) -> RetryDenied:
        return cls._of(DenyReason.DEADLINE, retry_after)

    @classmethod
    def permanent_failure(
        cls, category: FailureCategory, *, retry_after: float | None = None
    ) -> RetryDenied:
        return cls(DenyReason.PERMANENT_FAILURE, category=category, retry_after=retry_after)

    @classmethod
    def retry_after_too_long(cls, retry_after: float) -> RetryDenied:
        return cls(DenyReason.RETRY_AFTER_TOO_LONG, retry_after=retry_after)

    @classmethod
    def not_retryable(cls, *, retry_after: float | None = None) -> RetryDenied:
        return cls._of(DenyReason.NOT_RETRYABLE, retry_after)

    def __str__(self) -> str:
        text = f"retry denied ({self.reason}): {_DENY_TEXT[self.reason]}"
        if self.category is not None:
            text += f" [{self.category}]"
        if self.retry_after is not None:
            text += f"; server asked to retry after {self.retry_after:g}s"
        return text


_PLAIN_DENIALS: dict[str, RetryDenied] = {}


@dataclass(frozen=True, slots=True)
class AmbiguousFailure:
    """The request may have been executed and cannot safely be sent again.

    ``evidence`` is what the wire proved (``SENT_NO_RESPONSE``, or ``RESPONSE_RECEIVED`` for a
    502/503/504 on an operation that is not safely idempotent: a gateway may have forwarded it).
    """

    evidence: Evidence
    status: int | None = None
    #: The request was keyed, and the next attempt would go after its key may have expired
    #: (``Upstream(idempotency_key_ttl=...)``): the server would run it again.
    key_expired: bool = False

    def __str__(self) -> str:
        seen = f"status {self.status}" if self.status is not None else str(self.evidence)
        if self.key_expired:
            return (
                f"ambiguous ({seen}): the server may have executed this request, and its "
                "Idempotency-Key may have expired before the next attempt (the upstream's "
                "idempotency_key_ttl): not sent again; reconcile with the upstream"
            )
        return (
            f"ambiguous ({seen}): the server may have executed this non-idempotent request; "
            "reconcile with the upstream or replay with the same Idempotency-Key"
        )


Decision: TypeAlias = RetryAllowed | RetryDenied | AmbiguousFailure
