"""The engine against SPEC §6, row by row, plus the rule-order property."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_retry import (
    AmbiguousFailure,
    DefaultRetryEligibilityEngine,
    DenyReason,
    Evidence,
    FailureCategory,
    Idempotency,
    Replayability,
    RetryAllowed,
    RetryContext,
    RetryDenied,
)
from trio_retry._core.engine import RULES

ENGINE = DefaultRetryEligibilityEngine()
SAFE, IDEM, NON = Idempotency.SAFE, Idempotency.IDEMPOTENT, Idempotency.NON_IDEMPOTENT


def ctx(**overrides: Any) -> RetryContext:
    """A context in which nothing forbids a retry; tests change one thing."""
    base: dict[str, Any] = {
        "attempt": 1,
        "max_attempts": 3,
        "budget_available": True,
        "replayability": Replayability.REPLAYABLE,
        "response_delivered": False,
        "draining": False,
        "remaining_deadline": None,
        "min_attempt_budget": 0.05,
        "failure": None,
        "evidence": Evidence.RESPONSE_RECEIVED,
        "idempotency": SAFE,
        "status": 503,
        "retry_after": None,
        "transient_500": False,
        "proposed_delay": 0.25,
        "max_backoff": 10.0,
        "auth_refreshed": False,
        "retried_425": False,
    }
    base.update(overrides)
    return RetryContext(**base)


def transport(evidence: Evidence, category: FailureCategory, **kw: Any) -> RetryContext:
    return ctx(status=None, failure=category, evidence=evidence, **kw)


ALLOW = RetryAllowed(0.25)
DENY = RetryDenied.not_retryable()

# (status, idempotency, extra context, expected decision)
STATUS_TABLE = [
    (408, SAFE, {}, ALLOW),
    (408, NON, {}, ALLOW),
    (429, NON, {}, ALLOW),
    (429, SAFE, {"retry_after": 2.0}, RetryAllowed(2.0)),
    (429, SAFE, {"retry_after": 0.1}, RetryAllowed(0.25)),
    (429, SAFE, {"retry_after": 60.0}, RetryDenied.retry_after_too_long(60.0)),
    (429, SAFE, {"retry_after": 60.0, "remaining_deadline": 30.0}, RetryDenied.deadline()),
    (425, NON, {}, ALLOW),
    (425, SAFE, {"attempt": 2}, DENY),
    (425, SAFE, {"retried_425": True}, DENY),
    (401, SAFE, {}, ALLOW),
    (401, SAFE, {"replayability": Replayability.REOPENABLE}, ALLOW),
    (401, SAFE, {"auth_refreshed": True}, DENY),
    (401, SAFE, {"auth_refreshable": False}, DENY),
    (401, IDEM, {}, DENY),
    (401, NON, {}, DENY),
    (500, SAFE, {}, DENY),
    (500, SAFE, {"transient_500": True}, ALLOW),
    (500, IDEM, {"transient_500": True}, ALLOW),
    (500, NON, {"transient_500": True}, DENY),
    (502, SAFE, {}, ALLOW),
    (503, IDEM, {}, ALLOW),
    (504, SAFE, {}, ALLOW),
    (502, NON, {}, AmbiguousFailure(Evidence.RESPONSE_RECEIVED, 502)),
    (503, NON, {}, AmbiguousFailure(Evidence.RESPONSE_RECEIVED, 503)),
    (504, NON, {}, AmbiguousFailure(Evidence.RESPONSE_RECEIVED, 504)),
    (503, SAFE, {"retry_after": 3.0}, RetryAllowed(3.0)),
    (400, SAFE, {}, DENY),
    (403, SAFE, {}, DENY),
    (404, IDEM, {}, DENY),
    (409, NON, {}, DENY),
    (200, SAFE, {}, DENY),
    (302, SAFE, {}, DENY),
    (501, SAFE, {}, DENY),
]


@pytest.mark.parametrize(("status", "idem", "extra", "expected"), STATUS_TABLE)
def test_status_rules(
    status: int, idem: Idempotency, extra: dict[str, Any], expected: object
) -> None:
    decision = ENGINE.decide(ctx(status=status, idempotency=idem, **extra))
    assert decision == expected
    assert str(decision)


E = Evidence
C = FailureCategory
TRANSPORT_TABLE = [
    # NOT_SENT: retried whatever the idempotency
    (E.NOT_SENT, C.CONNECT, NON, ALLOW),
    (E.NOT_SENT, C.DNS, NON, ALLOW),
    (E.NOT_SENT, C.TLS_HANDSHAKE, NON, ALLOW),
    (E.NOT_SENT, C.POOL_TIMEOUT, NON, ALLOW),
    (E.NOT_SENT, C.REFUSED_STREAM, NON, ALLOW),
    (E.NOT_SENT, C.GOAWAY, NON, ALLOW),
    (E.NOT_SENT, C.ADMISSION, SAFE, ALLOW),
    # SENT_NO_RESPONSE / PARTIAL_RESPONSE: safely idempotent only
    (E.SENT_NO_RESPONSE, C.CONNECTION_BROKEN, SAFE, ALLOW),
    (E.SENT_NO_RESPONSE, C.TIMEOUT, IDEM, ALLOW),
    (E.PARTIAL_RESPONSE, C.CONNECTION_BROKEN, SAFE, ALLOW),
    (E.PARTIAL_RESPONSE, C.REMOTE_PROTOCOL, IDEM, ALLOW),
    (E.SENT_NO_RESPONSE, C.CONNECTION_BROKEN, NON, AmbiguousFailure(E.SENT_NO_RESPONSE)),
    (E.SENT_NO_RESPONSE, C.TIMEOUT, NON, AmbiguousFailure(E.SENT_NO_RESPONSE)),
    (E.SENT_NO_RESPONSE, C.REMOTE_PROTOCOL, NON, AmbiguousFailure(E.SENT_NO_RESPONSE)),
    (E.PARTIAL_RESPONSE, C.CONNECTION_BROKEN, NON, DENY),
    (E.RESPONSE_RECEIVED, C.REMOTE_PROTOCOL, SAFE, DENY),
    # permanent categories: rule 7, before ambiguity
    (E.NOT_SENT, C.INVALID_REQUEST, SAFE, RetryDenied.permanent_failure(C.INVALID_REQUEST)),
    (E.NOT_SENT, C.TLS_CERTIFICATE, NON, RetryDenied.permanent_failure(C.TLS_CERTIFICATE)),
    (
        E.SENT_NO_RESPONSE,
        C.LOCAL_PROTOCOL,
        NON,
        RetryDenied.permanent_failure(C.LOCAL_PROTOCOL),
    ),
]


@pytest.mark.parametrize(("evidence", "category", "idem", "expected"), TRANSPORT_TABLE)
def test_transport_rules(
    evidence: Evidence, category: FailureCategory, idem: Idempotency, expected: object
) -> None:
    decision = ENGINE.decide(transport(evidence, category, idempotency=idem))
    assert decision == expected
    assert str(decision)


# A response that is not valid HTTP (REMOTE_PROTOCOL): on a fresh connection the same server
# would answer the same way (not retried); on a reused one the connection may be at fault (one
# more try, on the connection the pool gives). (evidence, idempotency, fresh, expected)
PROTOCOL_TABLE = [
    (E.SENT_NO_RESPONSE, SAFE, True, DENY),
    (E.SENT_NO_RESPONSE, IDEM, True, DENY),
    (E.PARTIAL_RESPONSE, SAFE, True, DENY),
    (E.NOT_SENT, NON, True, DENY),  # (an HTTP/2 handshake the server broke)
    (E.SENT_NO_RESPONSE, SAFE, False, ALLOW),
    (E.SENT_NO_RESPONSE, IDEM, False, ALLOW),
    (E.PARTIAL_RESPONSE, SAFE, False, ALLOW),
    (E.NOT_SENT, NON, False, ALLOW),
    # Ambiguity (rule 8) comes first, fresh or not: a POST that may have run is reported so.
    (E.SENT_NO_RESPONSE, NON, True, AmbiguousFailure(E.SENT_NO_RESPONSE)),
    (E.SENT_NO_RESPONSE, NON, False, AmbiguousFailure(E.SENT_NO_RESPONSE)),
    (E.PARTIAL_RESPONSE, NON, False, DENY),
]


@pytest.mark.parametrize(("evidence", "idem", "fresh", "expected"), PROTOCOL_TABLE)
def test_a_response_that_is_not_valid_http_is_retried_only_from_a_reused_connection(
    evidence: Evidence, idem: Idempotency, fresh: bool, expected: object
) -> None:
    context = transport(evidence, C.REMOTE_PROTOCOL, idempotency=idem, fresh_connection=fresh)
    decision = ENGINE.decide(context)
    assert decision == expected
    # The limits (rules 1-7) still come first.
    assert ENGINE.decide(replace(context, attempt=3)) == RetryDenied.max_attempts()


@pytest.mark.parametrize("category", [c for c in C if c is not C.REMOTE_PROTOCOL])
def test_only_a_protocol_failure_looks_at_the_connection(category: FailureCategory) -> None:
    for evidence in (E.NOT_SENT, E.SENT_NO_RESPONSE, E.PARTIAL_RESPONSE):
        fresh = transport(evidence, category, fresh_connection=True)
        assert ENGINE.decide(fresh) == ENGINE.decide(replace(fresh, fresh_connection=False))


def test_a_context_without_the_connection_s_freshness_keeps_the_old_rule() -> None:
    """``fresh_connection`` defaults to False (unknown): a context built without it (a
    caller's own engine tests) is judged as before."""
    assert RetryContext(attempt=1, max_attempts=3).fresh_connection is False
    assert ENGINE.decide(transport(E.SENT_NO_RESPONSE, C.REMOTE_PROTOCOL)) == ALLOW


def test_transport_rules_ignore_status_rules_and_vice_versa() -> None:
    # A status *and* a failure: neither table applies -> not retryable.
    both = ctx(status=503, failure=C.CONNECTION_BROKEN, evidence=E.PARTIAL_RESPONSE)
    assert ENGINE.decide(both) == DENY
    # No status and no failure: nothing to retry.
    assert ENGINE.decide(ctx(status=None)) == DENY


DENIALS = [
    ({"attempt": 3}, DenyReason.MAX_ATTEMPTS),
    ({"budget_available": False}, DenyReason.BUDGET_EXHAUSTED),
    ({"replayability": Replayability.ONE_SHOT}, DenyReason.BODY_NOT_REPLAYABLE),
    ({"response_delivered": True}, DenyReason.RESPONSE_ALREADY_DELIVERED),
    ({"draining": True}, DenyReason.RUNTIME_DRAINING),
    ({"remaining_deadline": 0.29}, DenyReason.DEADLINE),
    (
        {"status": None, "failure": C.TLS_CERTIFICATE, "evidence": E.NOT_SENT},
        DenyReason.PERMANENT_FAILURE,
    ),
    ({"status": 429, "retry_after": 11.0}, DenyReason.RETRY_AFTER_TOO_LONG),
    ({"status": 404}, DenyReason.NOT_RETRYABLE),
]


@pytest.mark.parametrize(("extra", "reason"), DENIALS)
def test_every_denial_reason(extra: dict[str, Any], reason: DenyReason) -> None:
    decision = ENGINE.decide(ctx(**extra))
    assert isinstance(decision, RetryDenied)
    assert decision.reason is reason
    assert reason.name in str(decision)


def test_every_deny_reason_is_covered() -> None:
    assert {reason for _, reason in DENIALS} == set(DenyReason)


def test_deadline_rule_counts_the_delay_and_the_minimum_attempt_budget() -> None:
    # 0.25 s delay + 0.05 s minimum = 0.30 s needed.
    assert ENGINE.decide(ctx(remaining_deadline=0.301)) == RetryAllowed(0.25)
    assert ENGINE.decide(ctx(remaining_deadline=0.299)) == RetryDenied.deadline()


def test_retry_after_beyond_deadline_is_deadline_with_the_delay_visible() -> None:
    decision = ENGINE.decide(ctx(status=503, retry_after=5.0, remaining_deadline=2.0))
    assert isinstance(decision, RetryDenied)
    assert decision.reason is DenyReason.DEADLINE
    assert decision.retry_after == 5.0
    assert "5s" in str(decision)


def test_retry_after_too_long_carries_the_requested_delay() -> None:
    decision = ENGINE.decide(ctx(status=429, retry_after=30.0, max_backoff=10.0))
    assert decision == RetryDenied.retry_after_too_long(30.0)
    assert isinstance(decision, RetryDenied)
    assert decision.retry_after == 30.0
    assert "30s" in str(decision)


def test_ambiguity_outranks_the_status_table_but_not_the_limits() -> None:
    sent = transport(E.SENT_NO_RESPONSE, C.CONNECTION_BROKEN, idempotency=NON)
    assert isinstance(ENGINE.decide(sent), AmbiguousFailure)
    assert ENGINE.decide(replace(sent, attempt=3)) == RetryDenied.max_attempts()
    assert ENGINE.decide(replace(sent, budget_available=False)) == RetryDenied.budget_exhausted()


def test_decisions_have_readable_strings() -> None:
    assert str(RetryAllowed(0.5)) == "retry allowed after 0.500s"
    text = str(RetryDenied.permanent_failure(C.TLS_CERTIFICATE))
    assert "PERMANENT_FAILURE" in text
    assert "TLS_CERTIFICATE" in text
    assert "Idempotency-Key" in str(AmbiguousFailure(E.SENT_NO_RESPONSE))


def test_the_rule_order_is_data() -> None:
    from trio_retry._core import engine

    names = [rule.__name__ for rule in engine.RULES]
    assert names[:8] == [
        "_rule_max_attempts",
        "_rule_budget",
        "_rule_body",
        "_rule_delivered",
        "_rule_draining",
        "_rule_deadline",
        "_rule_permanent",
        "_rule_ambiguous",
    ]


# --- property: making an earlier rule's condition true yields exactly that rule's decision ---

contexts = st.builds(
    RetryContext,
    attempt=st.integers(1, 6),
    max_attempts=st.integers(1, 6),
    budget_available=st.booleans(),
    replayability=st.sampled_from(Replayability),
    response_delivered=st.booleans(),
    draining=st.booleans(),
    remaining_deadline=st.none() | st.floats(0, 100, allow_nan=False),
    min_attempt_budget=st.floats(0, 1, allow_nan=False),
    failure=st.none() | st.sampled_from(FailureCategory),
    evidence=st.sampled_from(Evidence),
    idempotency=st.sampled_from(Idempotency),
    status=st.none() | st.sampled_from([200, 301, 400, 401, 404, 408, 425, 429, 500, 502, 503]),
    retry_after=st.none() | st.floats(0, 100, allow_nan=False),
    transient_500=st.booleans(),
    proposed_delay=st.floats(0, 20, allow_nan=False),
    max_backoff=st.floats(0, 50, allow_nan=False) | st.just(math.inf),
    auth_refreshed=st.booleans(),
    retried_425=st.booleans(),
    auth_refreshable=st.booleans(),
)

# Each rule as (a change that makes its condition true, the decision it must produce).
FORCING = [
    (lambda c: replace(c, attempt=c.max_attempts), lambda c: RetryDenied.max_attempts()),
    (lambda c: replace(c, budget_available=False), lambda c: RetryDenied.budget_exhausted()),
    (
        lambda c: replace(c, replayability=Replayability.ONE_SHOT),
        lambda c: RetryDenied.body_not_replayable(),
    ),
    (
        lambda c: replace(c, response_delivered=True),
        lambda c: RetryDenied.response_already_delivered(),
    ),
    (lambda c: replace(c, draining=True), lambda c: RetryDenied.runtime_draining()),
    (
        lambda c: replace(c, remaining_deadline=c.delay + c.min_attempt_budget - 0.001),
        lambda c: RetryDenied.deadline(),
    ),
    (
        lambda c: replace(c, failure=C.TLS_CERTIFICATE),
        lambda c: RetryDenied.permanent_failure(C.TLS_CERTIFICATE),
    ),
    (
        lambda c: replace(c, evidence=E.SENT_NO_RESPONSE, idempotency=NON),
        lambda c: AmbiguousFailure(E.SENT_NO_RESPONSE, c.status),
    ),
]


def _clear_earlier(c: RetryContext, upto: int) -> RetryContext:
    """Make every rule before index ``upto`` pass."""
    clears = [
        lambda c: replace(c, attempt=1, max_attempts=max(2, c.max_attempts)),
        lambda c: replace(c, budget_available=True),
        lambda c: (
            replace(c, replayability=Replayability.REPLAYABLE)
            if c.replayability is Replayability.ONE_SHOT
            else c
        ),
        lambda c: replace(c, response_delivered=False),
        lambda c: replace(c, draining=False),
        lambda c: replace(c, remaining_deadline=None),
        lambda c: replace(c, failure=None) if c.failure and c.failure.permanent else c,
    ]
    for clear in clears[:upto]:
        c = clear(c)
    return c


@given(contexts, st.integers(0, len(FORCING) - 1))
def test_an_earlier_rule_always_wins(c: RetryContext, index: int) -> None:
    force, expected = FORCING[index]
    c = force(_clear_earlier(c, index))
    assert ENGINE.decide(c) == expected(c)


@given(contexts)
def test_decide_is_total_pure_and_readable(c: RetryContext) -> None:
    first = ENGINE.decide(c)
    assert ENGINE.decide(c) == first
    assert str(first)


@given(contexts)
def test_an_allowed_delay_respects_deadline_and_maximum(c: RetryContext) -> None:
    decision = ENGINE.decide(c)
    if isinstance(decision, RetryAllowed):
        assert decision.delay >= 0
        if c.retry_after is not None:
            assert decision.delay >= c.retry_after
            assert c.retry_after <= c.max_backoff
        if c.remaining_deadline is not None:
            assert decision.delay <= c.remaining_deadline - c.min_attempt_budget


def test_the_default_engine_runs_its_rules_as_data() -> None:
    # No inline copy of the order: the default engine walks RULES, so a rule placed first in
    # an engine's own tuple decides, and the default engine's tuple is RULES itself.
    assert DefaultRetryEligibilityEngine().rules is RULES
    sentinel = RetryDenied.not_retryable(retry_after=7.0)
    first = DefaultRetryEligibilityEngine((lambda c: sentinel, *RULES))
    context = RetryContext(attempt=1, max_attempts=3, failure=C.CONNECT, evidence=E.NOT_SENT)
    assert first.decide(context) is sentinel
    assert isinstance(ENGINE.decide(context), RetryAllowed)


@given(contexts)
def test_rule_8_is_the_one_ambiguity_rule(c: RetryContext) -> None:
    # The engine's rule 8 and the client's final-failure mapping ask the same function.
    from trio_retry._core.decision import is_ambiguous

    c = _clear_earlier(c, 7)
    if is_ambiguous(c.evidence, c.idempotency):
        assert ENGINE.decide(c) == AmbiguousFailure(c.evidence, c.status)
    else:
        assert not isinstance(ENGINE.decide(c), AmbiguousFailure) or c.status in (502, 503, 504)
