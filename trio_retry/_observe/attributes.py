"""What an attempt looks like to OpenTelemetry: attribute names and values, computed purely.

Nothing here imports OpenTelemetry, Trio or a clock: the functions turn the client's own values
(an :class:`~trio_retry.Attempt`, a URL, a decision) into the attribute dictionaries that
:mod:`._otel` puts on spans and metric points, so they are tested as plain functions.

Conventional names follow OpenTelemetry's stable HTTP client conventions (span and metric);
ours live under ``trio_retry.*``. The full list, with meanings, is in docs/observability.md;
:data:`SPAN_ATTRIBUTES` and :data:`METRIC_NAMES` are the same list as data (a test checks the
page against them).

Decisions recorded here, with the alternatives rejected:

- ``error.type`` for a failed attempt is our :class:`~trio_retry.FailureCategory` value
  (``connect``, ``timeout``, ``refused_stream``...): low-cardinality and documented, which the
  convention asks for, where an exception class name would be our private ``WireError`` for
  every failure. A status >= 400 with no failure gives the status as a string (``"503"``); a
  cancelled attempt gives ``cancelled``; anything else ``_OTHER``.
- ``url.full`` never carries credentials (``REDACTED:REDACTED@``) nor query values
  (``sig=REDACTED``) but those of the few paging and ordering parameters the client's one rule
  for shown URLs keeps (:func:`trio_retry._models.shown_url`, the rule of every message and log
  line too): an allow-list rather than the convention's list of sensitive names, which a
  signed or keyed URL with a name nobody listed would get past. The convention allows more
  redaction than its list.
- The idempotency key's *presence* is recorded, never its value: it is an opaque token that
  can let anyone replay the operation.
"""

from __future__ import annotations

from collections.abc import Iterable

from .._core.attempt import Attempt
from .._core.decision import AmbiguousFailure, Decision, RetryAllowed, RetryDenied
from .._core.evidence import FailureCategory, Stage
from .._core.idempotency import Idempotency
from .._models import shown_url

__all__ = [
    "DURATION_BUCKETS",
    "METRIC_NAMES",
    "SPAN_ATTRIBUTES",
    "attempt_end_attributes",
    "attempt_start_attributes",
    "decision_attributes",
    "duration_attributes",
    "error_type",
    "interrupted_attributes",
    "is_bulkhead_rejection",
    "method_attribute",
    "protocol_version",
    "redact_url",
    "span_name",
]

#: The bucket boundaries (seconds) the HTTP conventions advise for request durations.
DURATION_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
)  # fmt: skip

_KNOWN_METHODS = frozenset(
    {"CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE"}
)

#: Every span attribute trio_retry sets: name -> meaning (docs/observability.md lists them).
SPAN_ATTRIBUTES: dict[str, str] = {
    "http.request.method": "the method (GET, POST, ...; _OTHER for a method outside RFC 9110)",
    "http.request.method_original": "the method as sent, when http.request.method is _OTHER",
    "url.full": "the URL, credentials and query values (but paging ones) replaced by REDACTED",
    "server.address": "the host of the URL",
    "server.port": "the port of the URL (443/80 when not written)",
    "url.scheme": "http or https",
    "network.protocol.version": "1.1 or 2, when a connection was reached",
    "http.response.status_code": "the status, when a response head arrived",
    "http.request.resend_count": "the resends before this attempt in the call (set from 1: "
    "retries and redirect hops both count)",
    "error.type": "why the attempt failed: a FailureCategory value (connect, timeout, ...), "
    "the status for >= 400, or cancelled",
    "trio_retry.attempt": "the attempt's number within its request (1-based)",
    "trio_retry.evidence": "NOT_SENT, SENT_NO_RESPONSE, RESPONSE_RECEIVED or PARTIAL_RESPONSE",
    "trio_retry.stage": "the furthest wire stage reached (ADMISSION ... COMPLETE)",
    "trio_retry.failure_category": "the FailureCategory of the failure (absent on success)",
    "trio_retry.decision": "what the engine decided after it: retry, deny or ambiguous "
    "(absent when the engine was not consulted: statuses below 400)",
    "trio_retry.deny_reason": "the DenyReason when the decision is deny",
    "trio_retry.backoff_delay": "seconds the client waits before the next attempt (retry only)",
    "trio_retry.connection_reused": "whether the attempt went on a connection another attempt "
    "opened (pooled, or a shared HTTP/2 or HTTP/3 one)",
    "trio_retry.idempotency": "SAFE, IDEMPOTENT or NON_IDEMPOTENT",
    "trio_retry.idempotency_key_present": "whether an Idempotency-Key header was sent (never "
    "its value)",
    "trio_retry.bytes_sent": "request bytes handed to the transport",
    "trio_retry.bytes_received": "response bytes received",
    "trio_retry.cancelled": "true when the attempt was interrupted by cancellation",
}

#: Every metric trio_retry records: name -> (instrument, unit, meaning).
METRIC_NAMES: dict[str, tuple[str, str, str]] = {
    "http.client.request.duration": (
        "histogram",
        "s",
        "duration of each attempt (each physical request), conventional buckets",
    ),
    "trio_retry.client.attempts": ("counter", "{attempt}", "attempts, by trio_retry.evidence"),
    "trio_retry.client.retry_decisions": (
        "counter",
        "{decision}",
        "engine decisions after an attempt, by trio_retry.decision and trio_retry.deny_reason",
    ),
    "trio_retry.client.budget_exhausted": (
        "counter",
        "{decision}",
        "retries denied because the upstream's retry budget was empty",
    ),
    "trio_retry.client.ambiguous_outcomes": (
        "counter",
        "{call}",
        "calls that ended with HttpAmbiguousExecutionError",
    ),
    "trio_retry.client.bulkhead_rejections": (
        "counter",
        "{attempt}",
        "attempts rejected at admission (bulkhead queue full: Upstream(max_queue=...))",
    ),
    "trio_retry.client.pool.active": (
        "observable gauge",
        "{connection}",
        "pooled connections in use or connecting, per origin",
    ),
    "trio_retry.client.pool.idle": (
        "observable gauge",
        "{connection}",
        "idle pooled connections, per origin",
    ),
    "trio_retry.client.pool.waiting": (
        "observable gauge",
        "{request}",
        "attempts waiting for a pooled connection, per origin",
    ),
}

Attributes = dict[str, "str | int | float | bool"]


def method_attribute(method: str) -> str:
    """``http.request.method``: the method if RFC 9110/5789 knows it, else ``_OTHER``."""
    return method if method in _KNOWN_METHODS else "_OTHER"


def span_name(method: str) -> str:
    """The conventional span name: the method, or ``HTTP`` for an unknown one (no target: the
    conventions forbid the path, and clients have no low-cardinality route)."""
    return method if method in _KNOWN_METHODS else "HTTP"


def redact_url(url: str, extra_sensitive: Iterable[str] = ()) -> str:
    """``url`` fit for ``url.full``: :func:`~trio_retry._models.shown_url` with the convention's
    ``REDACTED``: userinfo -> ``REDACTED:REDACTED@``, each query value -> ``REDACTED`` (its
    name kept) unless the name is on the rule's short allow-list (paging, ordering).

    ``extra_sensitive`` adds exact (case-sensitive) parameter names to hide even when allowed.
    """
    return shown_url(
        url,
        userinfo="REDACTED:REDACTED@",
        hidden="REDACTED",
        also_hidden=frozenset(extra_sensitive),
    )


def protocol_version(http_version: str | None) -> str | None:
    """``network.protocol.version`` from ``"HTTP/1.1"``/``"HTTP/2"`` (``None`` if unknown)."""
    if not http_version:
        return None
    return http_version.removeprefix("HTTP/")


def error_type(attempt: Attempt) -> str | None:
    """``error.type`` of a finished attempt, or ``None`` when it succeeded (status < 400)."""
    if attempt.category is not None:
        return attempt.category.value
    if attempt.error is not None:
        return "_OTHER"
    if attempt.status is not None and attempt.status >= 400:
        return str(attempt.status)
    return None


def attempt_start_attributes(
    *,
    method: str,
    url: str,
    scheme: str,
    host: str,
    port: int,
    resend_count: int,
    attempt_number: int,
    idempotency: Idempotency,
    idempotency_key_present: bool,
    extra_sensitive: frozenset[str] = frozenset(),
) -> Attributes:
    """The attributes known when an attempt starts (the ones samplers may look at)."""
    attrs: Attributes = {
        "http.request.method": method_attribute(method),
        "url.full": redact_url(url, extra_sensitive),
        "server.address": host,
        "server.port": port,
        "url.scheme": scheme,
        "trio_retry.attempt": attempt_number,
        "trio_retry.idempotency": idempotency.name,
        "trio_retry.idempotency_key_present": idempotency_key_present,
    }
    if attrs["http.request.method"] == "_OTHER":
        attrs["http.request.method_original"] = method
    if resend_count:
        attrs["http.request.resend_count"] = resend_count
    return attrs


def decision_attributes(decision: Decision | None) -> Attributes:
    """``trio_retry.decision`` (retry / deny / ambiguous), the deny reason, the delay."""
    if decision is None:
        return {}
    if isinstance(decision, RetryAllowed):
        return {"trio_retry.decision": "retry", "trio_retry.backoff_delay": decision.delay}
    if isinstance(decision, RetryDenied):
        return {"trio_retry.decision": "deny", "trio_retry.deny_reason": decision.reason.value}
    assert isinstance(decision, AmbiguousFailure)
    return {"trio_retry.decision": "ambiguous"}


def attempt_end_attributes(attempt: Attempt) -> Attributes:
    """The attributes known when an attempt has ended and been judged."""
    attrs: Attributes = {
        "trio_retry.evidence": attempt.evidence.name,
        "trio_retry.stage": attempt.stage.name,
        "trio_retry.connection_reused": attempt.connection_reused,
        "trio_retry.bytes_sent": attempt.bytes_sent,
        "trio_retry.bytes_received": attempt.bytes_received,
    }
    version = protocol_version(attempt.http_version)
    if version is not None:
        attrs["network.protocol.version"] = version
    if attempt.status is not None:
        attrs["http.response.status_code"] = attempt.status
    if attempt.category is not None:
        attrs["trio_retry.failure_category"] = attempt.category.value
    kind = error_type(attempt)
    if kind is not None:
        attrs["error.type"] = kind
    attrs.update(decision_attributes(attempt.decision))
    return attrs


def interrupted_attributes(stage: Stage, evidence_name: str) -> Attributes:
    """The attributes of an attempt ended by cancellation (no :class:`Attempt` was recorded)."""
    return {
        "trio_retry.stage": stage.name,
        "trio_retry.evidence": evidence_name,
        "trio_retry.cancelled": True,
        "error.type": "cancelled",
    }


def duration_attributes(
    *, method: str, scheme: str, host: str, port: int, attempt: Attempt | None
) -> Attributes:
    """The attributes of an ``http.client.request.duration`` point (the conventional set:
    method, server, scheme, protocol version, status, error.type; nothing high-cardinality)."""
    attrs: Attributes = {
        "http.request.method": method_attribute(method),
        "server.address": host,
        "server.port": port,
        "url.scheme": scheme,
    }
    if attempt is None:
        attrs["error.type"] = "cancelled"
        return attrs
    version = protocol_version(attempt.http_version)
    if version is not None:
        attrs["network.protocol.version"] = version
    if attempt.status is not None:
        attrs["http.response.status_code"] = attempt.status
    kind = error_type(attempt)
    if kind is not None:
        attrs["error.type"] = kind
    return attrs


def is_bulkhead_rejection(attempt: Attempt) -> bool:
    """An attempt turned away at admission (nothing sent, no connection asked for)."""
    return attempt.category is FailureCategory.ADMISSION
