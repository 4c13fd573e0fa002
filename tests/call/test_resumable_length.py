"""A buffered body's resumability, asked for on every buffered ``GET`` answered ``200``
(``_call/resumable.py``), decides with its cheap refusals first: the ``Content-Length`` the wire
framed the body by (``WireResponse.content_length``), else a pass over the field names that
lowers nothing but a name as long as ``content-length``. Differential: whatever the head, the
answer is the full reading's (the unbuffered one, kept only from ``BUFFERED_FROM`` bytes on),
and the HTTP/1.1 reader hands the length it framed the body by (``None`` where it did not)."""

from __future__ import annotations

from dataclasses import dataclass, field

import h11
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_retry import Upstream
from trio_retry._call.resumable import BUFFERED_FROM, resumable
from trio_retry._call.upstream import UpstreamState
from trio_retry._core.idempotency import Idempotency
from trio_retry._core.replay import Replayability
from trio_retry._resume import Validator
from trio_retry._wire.exchange import WireRequest
from trio_retry._wire.http11_reader import NEED, ResponseReader
from trio_retry._wire.progress import AttemptProgress


@dataclass(frozen=True)
class _Body:
    replayability: Replayability = Replayability.REPLAYABLE


@dataclass
class _Request:
    """The fields of a ``PreparedRequest`` that ``resumable`` reads."""

    method: str = "GET"
    resume: bool | None = None
    idempotency: Idempotency = Idempotency.SAFE
    idempotency_key: str | None = None
    body: _Body = field(default_factory=_Body)


STATE = UpstreamState(Upstream())
ETAG = b'"v1"'

#: Names as servers spell them, and names of content-length's length that are not it.
NAMES = [
    b"Content-Length",
    b"content-length",
    b"CONTENT-LENGTH",
    b"Content-Lengtx",
    b"X-Content-Leng",
    b"Accept-Ranges",
    b"accept-ranges",
    b"ETag",
    b"Date",
    b"Last-Modified",
    b"Content-Encoding",
    b"Server",
]


@st.composite
def lengths(draw: st.DrawFn) -> bytes:
    """A Content-Length value: near the threshold, small or large, perhaps zero-padded or
    with the blanks a server may leave, or not a number at all."""
    number = draw(
        st.one_of(
            st.integers(BUFFERED_FROM - 3, BUFFERED_FROM + 3),
            st.integers(0, 99_999),
            st.integers(0, 10 * BUFFERED_FROM),
        )
    )
    text = b"%d" % number
    text = b"0" * draw(st.integers(0, 3)) + text
    text = draw(st.sampled_from([b"", b" ", b"\t"])) + text + draw(st.sampled_from([b"", b" "]))
    return draw(st.sampled_from([text, text, text, b"x" * len(text), b"1e6", b""]))


@st.composite
def heads(draw: st.DrawFn) -> list[tuple[bytes, bytes]]:
    fields = []
    for name in draw(st.lists(st.sampled_from(NAMES), max_size=9)):
        lowered = name.lower()
        if lowered == b"content-length" or len(name) == 14:
            value = draw(lengths())
        elif lowered == b"accept-ranges":
            value = draw(st.sampled_from([b"bytes", b"none"]))
        elif lowered == b"etag":
            value = draw(st.sampled_from([ETAG, b'W/"v1"']))
        elif lowered in (b"date", b"last-modified"):
            value = b"Thu, 01 Jan 2026 00:00:0%d GMT" % draw(st.integers(0, 1))
        else:
            value = draw(st.sampled_from([b"nginx", b"gzip", b"identity"]))
        fields.append((name, value))
    return fields


def _full(request: _Request, headers: list[tuple[bytes, bytes]]) -> Validator | None:
    """What the buffered answer must be: the full reading, kept from BUFFERED_FROM on."""
    validator = resumable(request, STATE, 200, headers)  # type: ignore[arg-type]
    if validator is None or validator.length is None or validator.length < BUFFERED_FROM:
        return None
    return validator


def _framed(headers: list[tuple[bytes, bytes]]) -> int | None:
    """The length a wire would frame the body by (one field, digits only), else ``None``."""
    values = [value for name, value in headers if name.lower() == b"content-length"]
    if len(values) != 1 or not values[0].strip().isdigit():
        return None
    return int(values[0])


@settings(max_examples=400, deadline=None)
@given(
    heads(),
    st.sampled_from([Idempotency.SAFE, Idempotency.IDEMPOTENT]),
    st.sampled_from([None, True, False]),
)
def test_a_buffered_body_is_judged_as_the_full_reading_judges_it(
    headers: list[tuple[bytes, bytes]], idempotency: Idempotency, resume: bool | None
) -> None:
    request = _Request(idempotency=idempotency, resume=resume)
    expected = _full(request, headers)
    assert resumable(request, STATE, 200, headers, True) == expected  # type: ignore[arg-type]
    framed = _framed(headers)
    if framed is not None:  # the wire said the length: the same answer
        got = resumable(request, STATE, 200, headers, True, framed)  # type: ignore[arg-type]
        assert got == expected


def test_a_long_body_with_a_validator_is_continued_and_a_short_one_is_not() -> None:
    long = [(b"Accept-Ranges", b"bytes"), (b"ETag", ETAG), (b"Content-Length", b"%d" % (1 << 20))]
    short = [*long[:2], (b"Content-Length", b"%d" % ((1 << 20) - 1))]
    validator = Validator(ETAG.decode(), ETAG.decode(), 1 << 20, None)
    request = _Request()
    assert resumable(request, STATE, 200, long, True) == validator  # type: ignore[arg-type]
    assert resumable(request, STATE, 200, long, True, 1 << 20) == validator  # type: ignore[arg-type]
    assert resumable(request, STATE, 200, short, True) is None  # type: ignore[arg-type]
    assert resumable(request, STATE, 200, short, True, (1 << 20) - 1) is None  # type: ignore[arg-type]


def _head(data: bytes, *, fast: bool) -> tuple[int, bytes, list[tuple[bytes, bytes]], int | None]:
    reader = ResponseReader(65536, fast=fast)
    request = WireRequest("GET", "/", [(b"Host", b"h")], b"", None)
    head = reader.begin(request)
    if head is None:  # h11 has the exchange: it writes the request
        reader.machine().send(h11.Request(method="GET", target="/", headers=[("Host", "h")]))
        reader.machine().send(h11.EndOfMessage())
    event = reader.next_event(AttemptProgress(0.0), data)
    assert event is not NEED
    assert isinstance(event, tuple)
    return event


def test_the_http11_reader_hands_the_length_it_framed_the_body_by() -> None:
    sized = b"HTTP/1.1 200 OK\r\nContent-Length: 0012\r\n\r\nhello world!"
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    assert _head(sized, fast=True)[3] == 12
    assert _head(chunked, fast=True)[3] is None  # no Content-Length to give
    assert _head(sized, fast=False)[3] is None  # h11 does not say: the head is read
