"""The per-stream validation of HTTP/2 response heads (RFC 9113 §8.1.1, §8.2, §8.3).

h2's own inbound validation is off (it would turn every malformed response into a connection
error); ``_malformed`` must refuse what h2 refused, and accept what it accepted.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_retry._wire.http2 import headers as headers_module
from trio_retry._wire.http2.headers import HeadVerdicts, check_head, content_length, explain
from trio_retry._wire.http2.headers import malformed as _malformed

OK = [(b":status", b"200"), (b"content-type", b"text/plain"), (b"x-empty", b"")]


@pytest.mark.parametrize(
    ("headers", "trailers", "says"),
    [
        ([(b"x", b"v")], False, "no :status"),
        ([(b":status", b"200"), (b":status", b"200")], False, "duplicate :status"),
        ([(b":status", b"2000")], False, "invalid :status"),
        ([(b":status", b"abc")], False, "invalid :status"),
        ([(b"x", b"v"), (b":status", b"200")], False, "after a regular header"),
        ([(b":status", b"200"), (b":path", b"/")], False, "in a response"),
        ([(b":status", b"200"), (b":weird", b"1")], False, "in a response"),
        ([(b":status", b"200"), (b"", b"v")], False, "empty header name"),
        ([(b":status", b"200"), (b"X-Upper", b"v")], False, "uppercase header name"),
        ([(b":status", b"200"), (b"a b", b"v")], False, "invalid header name"),
        ([(b":status", b"200"), (b"a:b", b"v")], False, "invalid header name"),
        ([(b":status", b"200"), (b"caf\xc3\xa9", b"v")], False, "invalid header name"),
        ([(b":status", b"200"), (b"x", b"a\r\nb")], False, "invalid value"),
        ([(b":status", b"200"), (b"x", b"a\x00")], False, "invalid value"),
        ([(b":status", b"200"), (b"x", b" padded")], False, "invalid value"),
        ([(b":status", b"200"), (b"x", b"padded\t")], False, "invalid value"),
        ([(b":status", b"200"), (b"connection", b"close")], False, "connection-specific"),
        ([(b":status", b"200"), (b"transfer-encoding", b"chunked")], False, "connection-specific"),
        ([(b":status", b"200"), (b"te", b"gzip")], False, "TE"),
        ([(b":status", b"200")], True, "pseudo-header"),
    ],
)
def test_a_malformed_head_is_named(
    headers: list[tuple[bytes, bytes]], trailers: bool, says: str
) -> None:
    problem = _malformed(headers, trailers=trailers)
    assert problem is not None
    assert says in problem


@pytest.mark.parametrize(
    ("headers", "trailers"),
    [
        (OK, False),
        ([(b":status", b"103"), (b"link", b"</a.css>; rel=preload")], False),
        ([(b":status", b"204")], False),
        ([(b":status", b"200"), (b"te", b"Trailers")], False),
        ([(b":status", b"200"), (b"x", b"inner  spaces\tand tabs")], False),
        ([(b":status", b"200"), (b"x", b"caf\xc3\xa9")], False),  # obs-text values pass
        ([(b"grpc-status", b"0")], True),
        ([], True),
    ],
)
def test_a_valid_head_passes(headers: list[tuple[bytes, bytes]], trailers: bool) -> None:
    assert _malformed(headers, trailers=trailers) is None


_NAME_BYTES = st.sampled_from(list(b"abz09-_!~:A Z\x00\x7f\xc3\t"))
_NAMES = st.one_of(
    st.sampled_from([b"x", b"etag", b"content-type", b"x-a"]),  # mostly valid heads ...
    st.sampled_from(
        [b":status", b":path", b"te", b"connection", b"upgrade", b"content-length", b""]
    ),
    st.lists(_NAME_BYTES, max_size=6).map(bytes),
)
_VALUE_BYTES = st.sampled_from(list(b"av0 \t\r\n\x00\x80"))
_VALUES = st.one_of(
    st.sampled_from([b"ok", b"a b", b"", b"200"]),  # ... with one odd field among them
    st.sampled_from([b"2000", b"abc", b"trailers", b" ", b"\t"]),
    st.tuples(
        st.sampled_from([b"", b"a"]),
        _VALUE_BYTES.map(lambda b: bytes([b])),
        st.sampled_from([b"", b"b"]),
    ).map(b"".join),
    st.lists(_VALUE_BYTES, max_size=6).map(bytes),
)
_HEADS = st.lists(st.tuples(_NAMES, _VALUES), max_size=6)


@settings(max_examples=1000, deadline=None)
@given(_HEADS, st.booleans(), st.booleans())
def test_the_one_pass_check_accepts_exactly_what_the_field_by_field_check_accepts(
    headers: list[tuple[bytes, bytes]], trailers: bool, status_first: bool
) -> None:
    """``malformed``'s one pass over the joined fields is an accelerator only: a head it
    clears is one ``explain`` clears, and everything else is ``explain``'s verdict."""
    if status_first:
        headers = [(b":status", b"204"), *headers]
    assert _malformed(headers, trailers=trailers) == explain(headers, trailers=trailers)


def test_the_one_pass_check_refuses_the_edges_of_joined_values() -> None:
    edges = [b"a ", b"b"], [b"a\t", b"b"], [b"a", b"\tb"], [b"", b" b"], [b"a\x00b"], [b"a\rb"]
    for values in (*edges, [b"a\nb"], [b"b "], [b"\tb"], [b"a", b"b\t"]):
        headers = [(b":status", b"200")] + [(f"x{i}".encode(), v) for i, v in enumerate(values)]
        assert _malformed(headers, trailers=False) is not None
    # A NUL inside a name would read as a separator in the joined names (found by the property).
    assert _malformed([(b":status", b"204"), (b"a\x00a", b"ok")], trailers=False) is not None


def test_a_usual_head_is_cleared_in_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: object, **_kwargs: object) -> str:
        raise AssertionError("the field-by-field check was needed")

    monkeypatch.setattr(headers_module, "explain", refuse)
    nginx = [
        (b":status", b"200"),
        (b"server", b"nginx/1.24.0"),
        (b"date", b"Tue, 01 Dec 2026 13:20:00 GMT"),
        (b"content-type", b"text/plain"),
        (b"content-length", b"13"),
        (b"etag", b'"6740f2a1-d"'),
        (b"x-empty", b""),
    ]
    assert headers_module.malformed(nginx, trailers=False) is None
    assert headers_module.malformed([(b":status", b"304")], trailers=False) is None


@settings(max_examples=300, deadline=None)
@given(st.lists(_HEADS, min_size=1, max_size=6))
def test_check_head_answers_as_the_checks_do(heads: list[list[tuple[bytes, bytes]]]) -> None:
    """``check_head`` with a memo (kept across heads, as a connection keeps it) gives exactly
    ``malformed`` + ``content_length``, for a head seen before too."""
    kept: HeadVerdicts = {}
    for head in heads + heads:
        problem = _malformed(head, trailers=False)
        length = content_length(head) if problem is None else None
        expected = (length, None) if isinstance(length, str) else (problem, length)
        assert check_head(head, kept) == expected
    assert len(kept) <= len(heads)
