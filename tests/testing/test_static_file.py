"""`StaticFile`'s rules, without a socket: the action it returns for each request (RFC 9110
§13.1.5 If-Range, §14 ranges) and for each scripted fault. What those actions do on the wire is
in test_fault_streams.py."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from trio_retry.testing import PartialBody, RecordedRequest, Respond, StaticFile

BODY = b"0123456789" * 10  # 100 bytes


def request(headers: Sequence[tuple[str, str]] = (), method: str = "GET") -> RecordedRequest:
    return RecordedRequest(
        method=method,
        path="/file",
        headers=tuple((n.lower(), v) for n, v in headers),
        body=b"",
        connection_id=1,
        http_version="HTTP/1.1",
        stream_id=None,
        time=0.0,
        executed=True,
        action=Respond(),
    )


def answer(static: StaticFile, *headers: tuple[str, str], method: str = "GET") -> Respond:
    action = static(request(headers, method))
    assert isinstance(action, Respond)
    return action


def header(action: Respond | PartialBody, name: str) -> str | None:
    return next((v for n, v in action.headers if n.lower() == name.lower()), None)


def test_validators_and_the_whole_body() -> None:
    static = StaticFile(BODY, content_type="text/plain", content_encoding="gzip")
    got = answer(static)
    assert (got.status, got.body) == (200, BODY)
    assert header(got, "ETag") == static.etag
    assert (static.etag or "").startswith('"')
    assert header(got, "Last-Modified") == "Thu, 01 Jan 2026 00:00:00 GMT"
    assert header(got, "Accept-Ranges") == "bytes"
    assert header(got, "Content-Length") == "100"
    assert header(got, "Content-Encoding") == "gzip"
    head = answer(static, method="HEAD")
    assert (head.status, header(head, "Content-Length")) == (200, "100")
    assert answer(static, method="POST").status == 405


@pytest.mark.parametrize(
    ("range_", "status", "content_range", "body"),
    [
        ("bytes=10-", 206, "bytes 10-99/100", BODY[10:]),
        ("bytes=10-19", 206, "bytes 10-19/100", BODY[10:20]),
        ("bytes=90-500", 206, "bytes 90-99/100", BODY[90:]),
        ("bytes=-5", 206, "bytes 95-99/100", BODY[95:]),
        ("bytes=-500", 206, "bytes 0-99/100", BODY),
        ("BYTES=0-0", 206, "bytes 0-0/100", BODY[:1]),
        ("bytes=100-", 416, "bytes */100", b""),
        ("bytes=-0", 416, "bytes */100", b""),
        ("bytes=5-2", 200, None, BODY),  # invalid: ignored
        ("bytes=0-1,5-6", 200, None, BODY),  # several ranges: the whole body
        ("items=0-5", 200, None, BODY),
        ("bytes=-", 200, None, BODY),
    ],
)
def test_ranges(range_: str, status: int, content_range: str | None, body: bytes) -> None:
    got = answer(StaticFile(BODY), ("Range", range_))
    assert (got.status, header(got, "Content-Range"), got.body) == (status, content_range, body)
    if status != 416:
        assert header(got, "Content-Length") == str(len(body))


def test_if_range_compares_strongly_and_dates_exactly() -> None:
    static = StaticFile(BODY)
    etag, date = static.etag or "", static.last_modified or ""
    assert answer(static, ("Range", "bytes=50-"), ("If-Range", etag)).status == 206
    assert answer(static, ("Range", "bytes=50-"), ("If-Range", date)).status == 206
    assert answer(static, ("Range", "bytes=50-"), ("If-Range", '"other"')).status == 200
    assert answer(static, ("Range", "bytes=50-"), ("If-Range", "W/" + etag)).status == 200
    assert answer(static, ("Range", "bytes=50-"), ("If-Range", date + " ")).status == 200
    weak = StaticFile(BODY, etag='W/"v1"')
    assert answer(weak, ("Range", "bytes=50-"), ("If-Range", 'W/"v1"')).status == 200
    assert answer(weak, ("Range", "bytes=50-")).status == 206  # no If-Range: the range


def test_no_accept_ranges_no_ranges_and_missing_validators() -> None:
    static = StaticFile(BODY, accept_ranges=False, etag=None, last_modified=None)
    got = answer(static, ("Range", "bytes=50-"))
    assert (got.status, got.body) == (200, BODY)
    assert [header(got, n) for n in ("Accept-Ranges", "ETag", "Last-Modified")] == [None] * 3
    assert answer(static, method="HEAD").status == 200
    assert answer(StaticFile(BODY), ("Range", "bytes=50-"), method="HEAD").status == 200


def test_change_makes_a_new_representation() -> None:
    static = StaticFile(BODY)
    old_etag, old_date = static.etag, static.last_modified
    static.change(b"new")
    assert static.body == b"new"
    assert static.etag != old_etag
    assert static.last_modified == "Thu, 01 Jan 2026 01:00:00 GMT" != old_date
    assert answer(static, ("Range", "bytes=1-"), ("If-Range", old_etag or "")).body == b"new"
    static.change(b"newer", etag='"fixed"', last_modified=None)
    got = answer(static)
    assert (header(got, "ETag"), header(got, "Last-Modified")) == ('"fixed"', None)


def test_scripted_faults_one_response_each() -> None:
    static = StaticFile(BODY)
    etag = static.etag or ""
    static.script(cut_after=30)
    static.script(cut_after=10, reset=True)
    static.script(change=b"changed body")
    static.script(ignore_range=True)
    static.script(content_range="bytes 0-49/100")
    static.script(status=416)
    static.script(status=503)
    assert static.scripted == 7

    cut = static(request())
    assert isinstance(cut, PartialBody)
    assert (cut.status, cut.declared_length, cut.body, cut.reset) == (200, 100, BODY[:30], False)
    resumed = static(request([("Range", "bytes=30-"), ("If-Range", etag)]))
    assert isinstance(resumed, PartialBody)
    assert (resumed.status, resumed.declared_length, resumed.body) == (206, 70, BODY[30:40])
    assert resumed.reset
    assert header(resumed, "Content-Range") == "bytes 30-99/100"
    changed = answer(static, ("Range", "bytes=40-"), ("If-Range", etag))
    assert (changed.status, changed.body) == (200, b"changed body")
    new_etag = static.etag or ""
    ignored = answer(static, ("Range", "bytes=5-"), ("If-Range", new_etag))
    assert (ignored.status, ignored.body) == (200, b"changed body")
    lying = answer(static, ("Range", "bytes=5-"), ("If-Range", new_etag))
    assert (lying.status, header(lying, "Content-Range"), lying.body) == (
        206,
        "bytes 0-49/100",
        b"changed body"[5:],
    )
    refused = answer(static, ("Range", "bytes=5-"))
    assert (refused.status, header(refused, "Content-Range"), refused.body) == (
        416,
        "bytes */12",
        b"",
    )
    assert answer(static).status == 503
    assert static.scripted == 0
    assert answer(static).status == 200
    assert static.ranges[:3] == [None, "bytes=30-", "bytes=40-"]


def test_a_cut_outside_the_body_is_a_script_error() -> None:
    static = StaticFile(BODY)
    static.script(cut_after=100)
    with pytest.raises(Exception, match="cut_after=100 is not inside"):
        static(request())
    with pytest.raises(ValueError, match="cut_after"):
        static.script(cut_after=-1)
    with pytest.raises(ValueError, match="status"):
        static.script(status=99)
