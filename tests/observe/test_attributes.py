"""The pure half: attribute values computed from attempts, URLs and decisions (no SDK)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trio_retry import (
    AmbiguousFailure,
    Attempt,
    Evidence,
    FailureCategory,
    Idempotency,
    RetryAllowed,
    RetryDenied,
    Stage,
)
from trio_retry._observe.attributes import (
    METRIC_NAMES,
    SPAN_ATTRIBUTES,
    attempt_end_attributes,
    attempt_start_attributes,
    decision_attributes,
    error_type,
    method_attribute,
    protocol_version,
    redact_url,
    span_name,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "observability.md"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://api.example/a", "https://api.example/a"),
        ("https://api.example/a?b=1", "https://api.example/a?b=REDACTED"),
        ("https://u:p@api.example/a", "https://REDACTED:REDACTED@api.example/a"),
        ("https://u:p@ss@api.example/a", "https://REDACTED:REDACTED@api.example/a"),
        ("https://s3.example/o?AWSAccessKeyId=AK&Signature=zz&x=1",
         "https://s3.example/o?AWSAccessKeyId=REDACTED&Signature=REDACTED&x=REDACTED"),
        ("https://b.example/?sig=abc&sv=2020", "https://b.example/?sig=REDACTED&sv=REDACTED"),
        # Only paging and ordering values are kept, their names in any case.
        ("https://e.example/?q=x&Page=2&per_page=5&limit=1&offset=0&sort=a&order=d&page_size=9",
         "https://e.example/?q=REDACTED&Page=2&per_page=5&limit=1&offset=0&sort=a&order=d"
         "&page_size=9"),
        ("https://e.example/?p%61ge=2&a=", "https://e.example/?p%61ge=2&a="),  # nothing to hide
        ("https://e.example/p#frag?token=x", "https://e.example/p#REDACTED"),
        ("https://e.example/?T0K3N&&", "https://e.example/?REDACTED&&"),  # a bare value
    ],
)  # fmt: skip
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_redact_url_takes_extra_names() -> None:
    assert redact_url("https://e.example/?page=acme&limit=1", ["page"]) == (
        "https://e.example/?page=REDACTED&limit=1"
    )


@pytest.mark.parametrize(
    ("method", "attr", "name"),
    [("GET", "GET", "GET"), ("PATCH", "PATCH", "PATCH"), ("PURGE", "_OTHER", "HTTP")],
)
def test_unknown_methods_are_other(method: str, attr: str, name: str) -> None:
    assert method_attribute(method) == attr
    assert span_name(method) == name


def test_start_attributes_of_an_unknown_method_keep_the_original() -> None:
    attrs = attempt_start_attributes(
        method="PURGE",
        url="http://cache.example/x",
        scheme="http",
        host="cache.example",
        port=80,
        resend_count=0,
        attempt_number=1,
        idempotency=Idempotency.NON_IDEMPOTENT,
        idempotency_key_present=False,
    )
    assert attrs["http.request.method"] == "_OTHER"
    assert attrs["http.request.method_original"] == "PURGE"
    assert "http.request.resend_count" not in attrs


def test_protocol_version() -> None:
    assert protocol_version("HTTP/1.1") == "1.1"
    assert protocol_version("HTTP/2") == "2"
    assert protocol_version(None) is None


def _attempt(**fields: object) -> Attempt:
    base: dict[str, object] = {"number": 1, "stage": Stage.COMPLETE,
                               "evidence": Evidence.RESPONSE_RECEIVED}  # fmt: skip
    base.update(fields)
    return Attempt(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [
        (_attempt(status=200), None),
        (_attempt(status=302), None),
        (_attempt(status=404), "404"),
        (_attempt(status=503), "503"),
        (_attempt(stage=Stage.CONNECT, evidence=Evidence.NOT_SENT,
                  category=FailureCategory.CONNECT, error=OSError()), "connect"),
        (_attempt(stage=Stage.RESPONSE_BODY, evidence=Evidence.PARTIAL_RESPONSE, status=200,
                  category=FailureCategory.CONNECTION_BROKEN, error=OSError()),
         "connection_broken"),
        (_attempt(error=RuntimeError()), "_OTHER"),
    ],
)  # fmt: skip
def test_error_type(attempt: Attempt, expected: str | None) -> None:
    assert error_type(attempt) == expected


def test_a_partial_response_keeps_its_status_and_says_why_it_broke() -> None:
    attrs = attempt_end_attributes(
        _attempt(
            stage=Stage.RESPONSE_BODY,
            evidence=Evidence.PARTIAL_RESPONSE,
            status=200,
            http_version="HTTP/2",
            category=FailureCategory.CONNECTION_BROKEN,
            error=OSError(),
            decision=RetryDenied.response_already_delivered(),
        )
    )
    assert attrs["http.response.status_code"] == 200
    assert attrs["trio_retry.evidence"] == "PARTIAL_RESPONSE"
    assert attrs["trio_retry.stage"] == "RESPONSE_BODY"
    assert attrs["network.protocol.version"] == "2"
    assert attrs["trio_retry.deny_reason"] == "response_already_delivered"


def test_decision_attributes() -> None:
    assert decision_attributes(None) == {}
    assert decision_attributes(RetryAllowed(0.25)) == {
        "trio_retry.decision": "retry",
        "trio_retry.backoff_delay": 0.25,
    }
    assert decision_attributes(RetryDenied.budget_exhausted()) == {
        "trio_retry.decision": "deny",
        "trio_retry.deny_reason": "budget_exhausted",
    }
    assert decision_attributes(AmbiguousFailure(Evidence.SENT_NO_RESPONSE)) == {
        "trio_retry.decision": "ambiguous"
    }


def test_the_docs_page_lists_every_attribute_and_metric() -> None:
    text = DOC.read_text(encoding="utf-8")
    missing = [name for name in [*SPAN_ATTRIBUTES, *METRIC_NAMES] if f"`{name}`" not in text]
    assert missing == []
