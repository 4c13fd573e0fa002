"""Which bodies can be continued and which answers continue them (trio_retry/_resume.py), as a
table, and as a property against `StaticFile`: whatever the two representations, the offset,
the validator and the server's fault, an answer judged to continue the body never splices two
representations, and the same representation always continues."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_retry._resume import Validator, continuation_headers, judge, validator_of
from trio_retry.testing import PartialBody, RecordedRequest, Respond, StaticFile

ETAG = '"v1"'
DATE = "Thu, 01 Jan 2026 00:00:00 GMT"
LATER = "Thu, 01 Jan 2026 00:00:01 GMT"


def headers(**fields: str) -> dict[str, str]:
    base = {"accept-ranges": "bytes", "content-length": "100"}
    base.update({name.replace("_", "-"): value for name, value in fields.items()})
    return {name: value for name, value in base.items() if value != "-"}


@pytest.mark.parametrize(
    ("status", "fields", "expected"),
    [
        (200, {"etag": ETAG}, Validator(ETAG, ETAG, 100, None)),
        (200, {"etag": ETAG, "content_length": "-"}, Validator(ETAG, ETAG, None, None)),
        (200, {"etag": ETAG, "accept_ranges": "none"}, None),
        (200, {"etag": ETAG, "accept_ranges": "-"}, None),
        (200, {"etag": ETAG, "accept_ranges": "Bytes, other"}, Validator(ETAG, ETAG, 100, None)),
        (206, {"etag": ETAG}, None),  # already a range: the caller asked for one
        (200, {"etag": 'W/"v1"', "last_modified": DATE, "date": LATER}, None),
        (200, {"etag": "v1"}, None),  # not an entity-tag
        (200, {"last_modified": DATE, "date": LATER}, Validator(DATE, None, 100, None)),
        (200, {"last_modified": DATE, "date": DATE}, None),  # same second: weak
        (200, {"last_modified": DATE}, None),  # no Date: weak
        (200, {"last_modified": "yesterday", "date": LATER}, None),
        (200, {"etag": ETAG, "content_encoding": "gzip"}, Validator(ETAG, ETAG, 100, "gzip")),
        (200, {"etag": ETAG, "content_encoding": "identity"}, Validator(ETAG, ETAG, 100, None)),
        (200, {"last_modified": DATE, "date": LATER, "content_encoding": "gzip"}, None),
        (200, {}, None),
    ],
)
def test_which_bodies_can_be_continued(
    status: int, fields: dict[str, str], expected: Validator | None
) -> None:
    assert validator_of(status, headers(**fields)) == expected


V = Validator(ETAG, ETAG, 100, None)


@pytest.mark.parametrize(
    ("status", "fields", "reason"),
    [
        (206, {"content_range": "bytes 40-99/100"}, None),
        (206, {"content_range": "bytes 40-99/*"}, None),
        (206, {"content_range": "bytes 40-99/100", "etag": ETAG}, None),
        (200, {}, "representation changed"),
        (416, {"content_range": "bytes */100"}, "416"),
        (503, {}, "answered 503"),
        (206, {}, "no single byte range"),
        (206, {"content_range": "bytes 40-99/200"}, "200 bytes long, not 100"),
        (206, {"content_range": "bytes 0-99/100"}, "starts at byte 0, not at byte 40"),
        (206, {"content_range": "bytes 40-59/100"}, "ends at byte 59"),
        (206, {"content_range": "bytes 40-99/100", "etag": '"v2"'}, 'ETag "v2"'),
        (206, {"content_range": "bytes 40-99/100", "content_encoding": "gzip"}, "Encoding"),
        (206, {"content_range": "garbage"}, "no single byte range"),
    ],
)
def test_which_answers_continue(status: int, fields: dict[str, str], reason: str | None) -> None:
    got = judge(V, 40, status, {n.replace("_", "-"): v for n, v in fields.items()})
    if reason is None:
        assert got is None
    else:
        assert got is not None
        assert reason in got


def test_continuation_headers() -> None:
    assert continuation_headers(V, 40) == (("Range", "bytes=40-"), ("If-Range", ETAG))


# -- the property: no splice of two representations ---------------------------------------------


def _request(extra: tuple[tuple[str, str], ...]) -> RecordedRequest:
    return RecordedRequest(
        method="GET",
        path="/f",
        headers=extra,
        body=b"",
        connection_id=1,
        http_version="HTTP/1.1",
        stream_id=None,
        time=0.0,
        executed=True,
        action=Respond(),
    )


def _answer(static: StaticFile, extra: tuple[tuple[str, str], ...] = ()) -> Respond:
    action = static(_request(tuple((n.lower(), v) for n, v in extra)))
    if isinstance(action, PartialBody):
        raise AssertionError("no cut scripted")
    return action


def _as_client_sees(action: Respond) -> dict[str, str]:
    return {name.lower(): value for name, value in action.headers}


_BODIES = st.binary(min_size=1, max_size=64)
_VALIDATORS = st.sampled_from(["etag", "date", "both"])
_FAULTS = st.sampled_from(["none", "change", "change-same-etag-other-length", "ignore", "416"])


@settings(max_examples=300, deadline=None)
@given(first=_BODIES, second=_BODIES, kind=_VALIDATORS, fault=_FAULTS, data=st.data())
def test_an_answer_judged_to_continue_never_splices_two_representations(
    first: bytes, second: bytes, kind: str, fault: str, data: st.DataObject
) -> None:
    static = StaticFile(
        first,
        etag="auto" if kind != "date" else None,
        last_modified="auto" if kind != "etag" else None,
    )
    whole = _answer(static)
    seen = _as_client_sees(whole)
    seen["date"] = "Fri, 02 Jan 2026 00:00:00 GMT"  # the server's clock, a day on
    validator = validator_of(whole.status, seen)
    assert validator is not None
    offset = data.draw(st.integers(0, len(first) - 1))
    if fault == "change":
        static.change(second)
    elif fault == "change-same-etag-other-length":
        # A server that lies with an unchanged ETag is caught only by the length.
        static.change(second + b"!" * (len(first) + 1 - len(second) % 2), etag=static.etag)
    elif fault == "ignore":
        static.script(ignore_range=True)
    elif fault == "416":
        static.script(status=416)
    answer = _answer(static, continuation_headers(validator, offset))
    verdict = judge(validator, offset, answer.status, _as_client_sees(answer))
    if verdict is None:
        # Continued: the result is the first representation, whole, byte for byte.
        assert first[:offset] + answer.body == first
    else:
        assert fault != "none" or first == static.body  # the unchanged file always continues
        assert fault != "none"
