"""The fast path of a whole small response (``_wire/http3/whole.py``) against the generic path
(aioquic's HTTP/3 under ``shims.StreamErrorsH3Connection``). Differential: the same bytes of
a request stream, whole or cut at every offset, are dispatched (``events.dispatch``) by a real
``QuicDriver`` once with the fast path and once without it, and everything a caller or the
server could tell apart is the same: the head, the body, the stream's end, its failure (its
category, words and evidence), the H3 error codes it was reset and stopped with, the
connection's close, and what aioquic still keeps of the stream. Plain responses must be read
by the fast path (else the comparison would prove nothing); everything else must decline.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pylsqpack
import pytest
import trio
from aioquic.h3.connection import H3Connection
from aioquic.quic.events import QuicEvent, StreamDataReceived
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_retry._core.evidence import Stage
from trio_retry._wire.http3.driver import QuicDriver
from trio_retry._wire.http3.events import dispatch
from trio_retry._wire.http3.frames import SCAN_FROM
from trio_retry._wire.http3.shims import StreamErrorsH3Connection, client_h3
from trio_retry._wire.http3.udp import UdpPaths
from trio_retry._wire.http3.whole import read_whole
from trio_retry._wire.progress import AttemptProgress
from trio_retry.testing._h3_frames import frame

from ..support.hostile_h3 import frame_header, prefixed_int, qpack_literal_section

LIMIT = 1024  # max_header_bytes: small, so that heads past it are cheap to write
DATA, HEADERS, PUSH_PROMISE = 0x00, 0x01, 0x05


class ScriptedQuic:
    """The QUIC connection as HTTP/3 and the driver use it, scripted: the events it hands on,
    and what it was asked to send, reset, stop and close."""

    def __init__(self) -> None:
        self.configuration = type("Configuration", (), {"is_client": True})()
        self._quic_logger = None
        self._next = {False: 0, True: 2}
        self.events: list[QuicEvent] = []
        self.sent: list[tuple[int, bytes, bool]] = []
        self.ended: list[tuple[str, int, int]] = []
        self.close_asked: tuple[int, int | None, str] | None = None

    def get_next_available_stream_id(self, is_unidirectional: bool = False) -> int:
        stream_id = self._next[is_unidirectional]
        self._next[is_unidirectional] += 4
        return stream_id

    def send_stream_data(self, stream_id: int, data: bytes, end_stream: bool = False) -> None:
        self.sent.append((stream_id, bytes(data), end_stream))

    def reset_stream(self, stream_id: int, error_code: int) -> None:
        self.ended.append(("reset", stream_id, error_code))

    def stop_stream(self, stream_id: int, error_code: int) -> None:
        self.ended.append(("stop", stream_id, error_code))

    def close(
        self, error_code: int = 0, frame_type: int | None = None, reason_phrase: str = ""
    ) -> None:
        if self.close_asked is None:
            self.close_asked = (error_code, frame_type, reason_phrase)

    def forget_stream(self, stream_id: int) -> None:
        pass

    def peer_max_streams(self) -> int | None:
        return None

    def next_event(self) -> QuicEvent | None:
        return self.events.pop(0) if self.events else None


@dataclass
class Outcome:
    """Everything of one response's dispatch a caller or the server could tell apart."""

    status: int | None = None
    fields: list[tuple[bytes, bytes]] | None = None
    body: bytes = b""
    ended: bool = False
    failure: tuple[Any, ...] | None = None
    ended_with: list[tuple[str, int, int]] = field(default_factory=list)
    sent_after: list[tuple[int, bytes, bool]] = field(default_factory=list)
    close_asked: tuple[int, int | None, str] | None = None
    kept_by_aioquic: bool = False


async def dispatched(pieces: list[bytes], *, method: bytes = b"GET", fast: bool) -> Outcome:
    """``pieces`` of one request stream's bytes (the FIN with the last) dispatched by a real
    driver, each piece in a round of its own; with the fast path or without it."""
    quic = ScriptedQuic()
    h3 = client_h3(quic, max_header_bytes=LIMIT)  # type: ignore[arg-type]
    assert isinstance(h3, StreamErrorsH3Connection)
    if not fast:
        h3.untouched = lambda stream_id: None  # type: ignore[method-assign]
    paths = UdpPaths(socket.AF_INET, ("127.0.0.1", 9))
    try:
        driver = QuicDriver(
            paths,
            quic,  # type: ignore[arg-type]
            h3,
            timekeeper=None,
            max_header_bytes=LIMIT,
            on_dead=lambda: None,
        )
        driver.handshake_completed(False)
        progress = AttemptProgress(trio.current_time())
        stream = driver.open_stream(progress)
        progress.advance(Stage.REQUEST_HEAD)
        request = [
            (b":method", method),
            (b":scheme", b"https"),
            (b":authority", b"a"),
            (b":path", b"/"),
        ]
        h3.send_headers(stream.stream_id, request, end_stream=True)
        progress.advance(Stage.AWAITING_RESPONSE)
        before = len(quic.sent)
        for index, piece in enumerate(pieces):
            last = index == len(pieces) - 1
            quic.events.append(StreamDataReceived(piece, last, stream.stream_id))
            dispatch(driver)
        outcome = Outcome(
            ended_with=quic.ended,
            # (an empty write without an end writes nothing: aioquic makes one per head)
            sent_after=[sent for sent in quic.sent[before:] if sent[1] or sent[2]],
            close_asked=quic.close_asked,
            kept_by_aioquic=stream.stream_id in h3._stream,
        )
        response = stream.response
        if response is not None:
            outcome.status, outcome.fields = response.status, list(response.headers)
            # What the head says of its fields, if it says it (the fast path does), is true.
            if response.encoded is not None:
                names = {name for name, _ in response.headers}
                assert response.encoded is (b"content-encoding" in names)
            if response.content_length is not None:
                lengths = [value for name, value in response.headers if name == CL]
                assert lengths == [b"%d" % response.content_length]
            progress.advance(Stage.RESPONSE_BODY)  # (as the caller does, reading the head)
        outcome.body = b"".join(stream._chunks)
        outcome.ended = stream._ended
        failure = stream._failure
        if failure is not None:
            error = failure.error(progress)
            outcome.failure = (error.category, error.evidence, str(error), failure.not_sent)
        return outcome
    finally:
        paths.close()


def head(fields: list[tuple[bytes, bytes]], status: bytes = b"200") -> bytes:
    return frame(HEADERS, qpack_literal_section([(b":status", status), *fields]))


def data(payload: bytes) -> bytes:
    return frame(DATA, payload)


CL = b"content-length"
#: Responses the fast path must read (and read as the generic path does).
PLAIN = {
    "head and body": head([(CL, b"5"), (b"content-type", b"text/plain")]) + data(b"hello"),
    "no content-length": head([(b"server", b"x")]) + data(b"abc"),
    "head only": head([(b"date", b"today")]),
    "head only, length 0": head([(CL, b"0")]),
    "several data frames": head([(CL, b"6")]) + data(b"ab") + data(b"") + data(b"cdef"),
    "a body in an empty frame": head([]) + data(b""),
    "204 declaring a length": head([(CL, b"10")], b"204"),
    "304 declaring a length": head([(CL, b"1234")], b"304"),
    "content-encoding": head([(b"content-encoding", b"gzip"), (CL, b"2")]) + data(b"\x1f\x8b"),
    "odd but valid field bytes": head([(b"x-a!#$%&'*+-.^_`|~0", b"v\x80\xff \t v"), (b"x-e", b"")]),
    "status 599": head([], b"599") + data(b"x"),
    "a long data frame": head([(CL, b"70000")]) + data(b"z" * 70_000),
    "a head that reaches the limit exactly": head([(b"x", b"y" * (LIMIT - 32 - 42 - 1))]),
    "static table references (pylsqpack's encoding)": frame(
        HEADERS, bytes.fromhex("0000d9540231335f4d84bc3924f523782d61889cb450753c1eca24")
    )
    + data(b"0123456789abc"),
}
#: Responses the fast path must leave to the generic path (which refuses or reads them).
DECLINED = {
    "trailers": head([]) + data(b"body") + frame(HEADERS, qpack_literal_section([(b"x", b"t")])),
    "an unknown frame type first": frame(0x21, b"grease") + head([]) + data(b"x"),
    "an unknown frame type after the body": head([]) + data(b"x") + frame(0x1F * 0x1F + 0x21, b""),
    "a reserved frame type (HTTP/2's PRIORITY)": head([]) + frame(0x02, b"x") + data(b"x"),
    "a SETTINGS frame on a request stream": head([]) + frame(0x04, b""),
    "a push promise": frame(PUSH_PROMISE, b"\x00" + qpack_literal_section([])),
    "data before the head": data(b"x") + head([]),
    "a head only past the limit once decoded": frame(HEADERS, b"\x00\x00\xd9" + b"\xfa" * 10),
    "a head announced within the limit, past it once decoded": head([(b"x", b"y" * 960)]),
    "a head announced past the limit": frame_header(HEADERS, LIMIT + 1) + b"\x00" * (LIMIT + 1),
    "a section that needs the dynamic table": frame(HEADERS, b"\x02\x00\x80"),
    "a section the decoder refuses (bad Huffman)": frame(
        HEADERS, b"\x00\x00" + bytes([0x20 | 0x08 | 3]) + b"\xff\xff\xff" + b"\x01a"
    ),
    "an empty section": frame(HEADERS, b""),
    "a frame cut by the stream's end": head([]) + frame_header(DATA, 10) + b"abc",
    "a frame header cut by the stream's end": head([]) + b"\x00",
    "an interim head first": head([], b"103") + head([]) + data(b"x"),
    "an interim head alone": head([], b"100"),
    "nothing": b"",
    "an unknown frame only": frame(0x21, b"grease"),
    "101": head([], b"101"),
    "a status of letters": head([], b"2xx"),
    "a status of two digits": head([], b"20"),
    "no :status": frame(HEADERS, qpack_literal_section([(b"server", b"x")])),
    "a request pseudo-header": head([(b":path", b"/")]),
    "two :status": head([(b":status", b"200")]),
    "an upper-case name": head([(b"X-Upper", b"v")]),
    "a name with a colon inside": head([(b"x:y", b"v")]),
    "a name with a space": head([(b"x y", b"v")]),
    "an empty name": head([(b"", b"v")]),
    "a value with a line feed": head([(b"x", b"a\nb")]),
    "a value with a NUL": head([(b"x", b"a\x00b")]),
    "a value with a leading space": head([(b"x", b" a")]),
    "a value with a trailing tab": head([(b"x", b"a\t")]),
    "a connection-specific field": head([(b"connection", b"close")]),
    "transfer-encoding": head([(b"transfer-encoding", b"chunked")]),
    "te": head([(b"te", b"trailers")]),
    "a content-length of letters": head([(CL, b"1x")]) + data(b"a"),
    "a signed content-length": head([(CL, b"+1")]) + data(b"a"),
    "two equal content-lengths": head([(CL, b"1"), (CL, b"1")]) + data(b"a"),
    "two content-lengths that differ": head([(CL, b"1"), (CL, b"2")]) + data(b"a"),
    "a body longer than its content-length": head([(CL, b"2")]) + data(b"abc"),
    "a body shorter than its content-length": head([(CL, b"5")]) + data(b"abc"),
    "no body for a content-length": head([(CL, b"5")]),
    "a body on a 204": head([], b"204") + data(b"x"),
    "an empty data frame on a 304": head([], b"304") + data(b""),
    "a type written in two bytes": b"\x40\x01" + head([])[1:],
    "a hostile length varint": bytes([HEADERS]) + b"\xff" * 8,
}


def _cuts(payload: bytes) -> Iterator[list[bytes]]:
    """``payload`` whole, cut once at every offset, and its bytes then an empty FIN."""
    yield [payload]
    for at in range(1, len(payload)):
        yield [payload[:at], payload[at:]]
    yield [payload, b""]


def _few_cuts(payload: bytes) -> Iterator[list[bytes]]:
    """For a long payload: whole, and cut near each frame boundary only."""
    yield [payload]
    for at in (1, 2, 3, 40, len(payload) // 2, len(payload) - 1):
        yield [payload[:at], payload[at:]]


@pytest.mark.parametrize(
    ("name", "payload"), [*PLAIN.items(), *DECLINED.items()], ids=[*PLAIN, *DECLINED]
)
async def test_the_fast_path_yields_what_the_generic_path_yields(
    name: str, payload: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken: list[bool] = []

    def spy(*args: Any) -> Any:
        result = read_whole(*args)
        taken.append(result is not None)
        return result

    monkeypatch.setattr("trio_retry._wire.http3.events.read_whole", spy)
    cuts = _few_cuts(payload) if len(payload) > 2000 else _cuts(payload)
    for method in (b"GET", b"HEAD"):
        for pieces in cuts if method == b"GET" else [[payload]]:
            taken.clear()
            fast = await dispatched(pieces, method=method, fast=True)
            generic = await dispatched(pieces, method=method, fast=False)
            assert fast == generic, (name, method, [len(p) for p in pieces])
            if len(pieces) == 1 and method == b"GET":
                # (a plain response must be read by the fast path, else this compares nothing;
                # some refused never reach it: ``frames.py`` refuses them first. A cut response
                # may be read by it, once the generic path took a first piece of no frame)
                assert (taken == [True]) is (name in PLAIN), f"{name}: the fast path read {taken}"


#: Pieces a hostile or odd server could put on a request stream, for random responses.
BLOCKS = [
    head([(CL, b"3")]),
    head([]),
    head([(b"X-Upper", b"v")]),
    head([], b"204"),
    head([], b"103"),
    head([(CL, b"1"), (CL, b"1")]),
    frame(HEADERS, qpack_literal_section([(b"x-trailer", b"t")])),
    frame(HEADERS, b"\x01\x00\x81"),
    data(b"abc"),
    data(b""),
    data(b"x" * 300),
    frame(0x21, b"grease"),
    frame(0x02, b""),
    frame(PUSH_PROMISE, b"\x00\x00\x00"),
    frame_header(DATA, 4) + b"ab",
    b"\x01",
    prefixed_int(300, 6, 0x40),
]


@given(
    picks=st.lists(st.integers(min_value=0, max_value=len(BLOCKS) - 1), max_size=6),
    head_request=st.booleans(),
)
@settings(max_examples=300, deadline=None)
async def test_random_responses_read_alike(picks: list[int], head_request: bool) -> None:
    """Responses made of random pieces, whole: the same outcome either way."""
    payload = b"".join(BLOCKS[pick] for pick in picks) or head([])
    method = b"HEAD" if head_request else b"GET"
    fast = await dispatched([payload], method=method, fast=True)
    assert fast == await dispatched([payload], method=method, fast=False), payload


@given(data=st.binary(max_size=200), no_content=st.booleans())
@settings(max_examples=500)
def test_any_bytes_are_read_or_declined_never_raised(data: bytes, no_content: bool) -> None:
    """Whatever the bytes, ``read_whole`` returns (a response or ``None``) and decodes at most
    one section."""
    decoded: list[bytes] = []

    def decode(stream_id: int, section: bytes) -> list[tuple[bytes, bytes]] | None:
        decoded.append(section)
        return _decode(stream_id, section)

    result = read_whole(bytes([HEADERS]) + data, 0, decode, no_content, LIMIT, NOWHERE)
    assert len(decoded) <= 1
    if result is not None:
        assert 200 <= result.head.status <= 999
        assert not (no_content and result.body)


def _decode(stream_id: int, section: bytes) -> list[tuple[bytes, bytes]] | None:
    try:
        return pylsqpack.Decoder(0, 0).feed_header(stream_id, section)[1]
    except (pylsqpack.DecompressionFailed, pylsqpack.StreamBlocked):
        return None


#: A body source never read (the heads below are only looked at).
NOWHERE: Any = object()


def test_a_plain_response_is_read_as_its_head_and_body() -> None:
    fields = [(b":status", b"200"), (CL, b"5"), (b"content-encoding", b"gzip")]
    payload = frame(HEADERS, qpack_literal_section(fields)) + data(b"he") + data(b"llo")
    result = read_whole(payload, 0, _decode, False, LIMIT, NOWHERE)
    assert result is not None
    head = result.head
    assert (head.status, head.headers, head.http_version) == (200, fields[1:], "HTTP/3")
    assert (head.content_length, head.encoded, head.source, result.body) == (
        5,
        True,
        NOWHERE,
        b"hello",
    )
    plain = read_whole(
        head_only := frame(HEADERS, qpack_literal_section(fields[:1])),
        0,
        _decode,
        False,
        LIMIT,
        NOWHERE,
    )
    assert plain is not None
    assert (plain.head.content_length, plain.head.encoded, plain.body) == (None, False, b"")
    assert read_whole(head_only, 0, _decode, True, LIMIT, NOWHERE) is not None
    assert read_whole(payload, 0, lambda i, s: None, False, LIMIT, NOWHERE) is None  # refused
    assert read_whole(payload[:-1], 0, _decode, False, LIMIT, NOWHERE) is None  # cut short
    assert read_whole(payload, 0, _decode, True, LIMIT, NOWHERE) is None  # a body on a HEAD


def test_no_section_past_what_frames_lets_through_unscanned_is_decoded() -> None:
    """A section longer than ``SCAN_FROM`` (or ``max_header_bytes``) is declined before it is
    decoded: ``frames.py`` then scans or refuses it, as it does any."""
    decoded: list[bytes] = []

    def decode(stream_id: int, section: bytes) -> list[tuple[bytes, bytes]] | None:
        decoded.append(section)
        return _decode(stream_id, section)

    big = frame(HEADERS, qpack_literal_section([(b":status", b"200"), (b"x", b"v" * SCAN_FROM)]))
    assert read_whole(big, 0, decode, False, 1 << 20, NOWHERE) is None
    small = frame(HEADERS, qpack_literal_section([(b":status", b"200"), (b"x", b"v" * 100)]))
    assert read_whole(small, 0, decode, False, 100, NOWHERE) is None
    assert decoded == []


# --- the request's head, written without aioquic's generic send_headers ----------------------

REQUEST = [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", b"a:1"), (b":path", b"/")]
HEADS = {
    "GET": REQUEST,
    "HEAD": [(b":method", b"HEAD"), *REQUEST[1:]],
    "fields": [*REQUEST, (b"user-agent", b"t"), (b"accept", b"*/*"), (b"x-long", b"v" * 300)],
    "POST": [(b":method", b"POST"), *REQUEST[1:], (b"content-length", b"4")],
}


def _written(
    fields: list[tuple[bytes, bytes]], end: bool, table: bool, *, fast: bool
) -> tuple[Any, ...]:
    """What QUIC is handed, and what aioquic keeps, for a request head (then, unless ended, a
    body and trailers), written by ``send_headers`` (``fast``) or by aioquic's own."""
    quic = ScriptedQuic()
    h3 = client_h3(quic, max_header_bytes=LIMIT)  # type: ignore[arg-type]
    assert isinstance(h3, StreamErrorsH3Connection)
    if table:  # a server that allows a dynamic table: the encoder writes instructions
        h3._encoder.apply_settings(max_table_capacity=4096, blocked_streams=16)
    quic.sent.clear()
    kept = []
    for stream_id in (0, 4):  # (two requests: the encoder's state carries over)
        if fast:
            h3.send_headers(stream_id, fields, end)
        else:
            _generic(h3, stream_id, fields, end)
        stream = h3._stream.get(stream_id)
        kept.append(None if stream is None else (stream.headers_send_state, stream.sending_ended))
        if not end:
            h3.send_data(stream_id, b"body", end_stream=False)
            h3.send_headers(stream_id, [(b"x-trailer", b"t")], end_stream=True)
    sent = [item for item in quic.sent if item[1] or item[2]]
    return sent, kept, sorted(h3._no_content), h3._encoder_bytes_sent, sorted(h3._stream)


def _generic(h3: StreamErrorsH3Connection, stream_id: int, fields: Any, end: bool) -> None:
    """aioquic's own ``send_headers``, then what the client's adds (a HEAD's no content)."""
    H3Connection.send_headers(h3, stream_id, fields, end)
    if (b":method", b"HEAD") in fields:
        h3._no_content.add(stream_id)


@pytest.mark.parametrize("table", [False, True], ids=["no table", "dynamic table"])
@pytest.mark.parametrize("end", [True, False], ids=["ended", "body follows"])
@pytest.mark.parametrize("name", list(HEADS))
def test_a_request_head_is_written_as_aioquic_writes_it(name: str, end: bool, table: bool) -> None:
    fields = HEADS[name]
    assert _written(fields, end, table, fast=True) == _written(fields, end, table, fast=False)


def test_a_request_head_skips_aioquics_send_headers_unless_it_logs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """(What the comparison above compares is this path, not aioquic's twice.)"""
    called: list[int] = []
    native = H3Connection.send_headers

    def spied(self: H3Connection, stream_id: int, *args: Any) -> None:
        called.append(stream_id)
        native(self, stream_id, *args)

    monkeypatch.setattr(H3Connection, "send_headers", spied)
    h3 = client_h3(ScriptedQuic(), max_header_bytes=LIMIT)  # type: ignore[arg-type]
    h3.send_headers(0, REQUEST, end_stream=False)
    h3.send_headers(0, [(b"x-trailer", b"t")], end_stream=True)  # (a stream aioquic has)
    assert called == [0]
    h3._quic_logger = object()  # type: ignore[assignment]  # (qlog on: aioquic's own, logged)
    with pytest.raises(AttributeError):
        h3.send_headers(4, REQUEST, end_stream=True)
    assert called == [0, 4]


@pytest.mark.parametrize("payload", [b"", frame(0x21, b"grease")], ids=["nothing", "unknown"])
async def test_a_stream_ended_with_no_head_is_a_stream_error(payload: bytes) -> None:
    """No final head before the stream's end: malformed (RFC 9114 §4.1.2), a stream error
    H3_MESSAGE_ERROR at once, not an ended body with no head to wait for."""
    outcome = await dispatched([payload], fast=True)
    assert outcome.status is None
    assert outcome.failure is not None
    category, evidence, words, not_sent = outcome.failure
    assert (category.name, evidence.name, not_sent) == (
        "REMOTE_PROTOCOL",
        "SENT_NO_RESPONSE",
        False,
    )
    assert "the stream ended with no response head" in words
    assert outcome.ended_with == [("reset", 0, 0x10E), ("stop", 0, 0x10E)]
    assert outcome.close_asked is None  # (its stream's alone)
