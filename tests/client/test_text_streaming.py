"""Text streaming (SPEC §12): aiter_text() and aiter_lines(), on bodies split at every byte
boundary, and end to end from a FaultServer (NDJSON, server-sent events)."""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator, Sequence

import pytest
import trio

import trio_retry
from tests.conftest import FAST
from trio_retry import URL, Headers, Response
from trio_retry.testing import FaultServer, Respond

BODY = "première ligne\r\nzweite Zeile €\nthird\rfourth\r\n\r\nlast without end".encode()
LINES = ["première ligne", "zweite Zeile €", "third", "fourth", "", "last without end"]


class _Source:
    def __init__(self, chunks: Sequence[bytes]) -> None:
        self._chunks = list(chunks)

    def __aiter__(self) -> _Source:
        return self

    async def __anext__(self) -> bytes:
        if not self._chunks:
            raise StopAsyncIteration
        return self._chunks.pop(0)


def _response(chunks: Sequence[bytes], content_type: str | None = None) -> Response:
    headers = Headers([("Content-Type", content_type)] if content_type else [])
    stream: AsyncIterator[bytes] = _Source(chunks)
    return Response(
        status=200,
        reason="OK",
        headers=headers,
        http_version="HTTP/1.1",
        url=URL("http://example.test/"),
        request_method="GET",
        stream=stream,
    )


def _splits(body: bytes) -> list[list[bytes]]:
    """The body cut in two at every byte boundary, and as one-byte chunks."""
    return [[body[:cut], body[cut:]] for cut in range(len(body) + 1)] + [
        [body[i : i + 1] for i in range(len(body))]
    ]


async def test_lines_at_every_split_point() -> None:
    for chunks in _splits(BODY):
        lines = [line async for line in _response(chunks).aiter_lines()]
        assert lines == LINES, chunks


async def test_text_at_every_split_point() -> None:
    for chunks in _splits(BODY):
        text = "".join([t async for t in _response(chunks).aiter_text()])
        assert text == BODY.decode(), chunks


async def test_a_crlf_split_across_chunks_is_one_line_break() -> None:
    lines = [line async for line in _response([b"a\r", b"\nb\r", b"", b"\r\n"]).aiter_lines()]
    assert lines == ["a", "b", ""]
    assert [line async for line in _response([b"x\r"]).aiter_lines()] == ["x"]
    assert [line async for line in _response([b"\n\n"]).aiter_lines()] == ["", ""]
    assert [line async for line in _response([]).aiter_lines()] == []


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [
        ("text/plain; charset=ISO-8859-1", "ISO-8859-1"),
        ('text/plain; charset="utf-16"', "utf-16"),
        ("text/plain; charset=no-such-charset", "utf-8"),
        ("application/json", "utf-8"),
        (None, "utf-8"),
    ],
)
def test_encoding_from_the_charset_with_a_utf8_fallback(
    content_type: str | None, expected: str
) -> None:
    assert _response([], content_type).encoding == expected


async def test_the_charset_decides_and_bad_bytes_are_replaced() -> None:
    latin = "café über".encode("latin-1")
    for chunks in _splits(latin):
        response = _response(chunks, "text/plain; charset=latin-1")
        assert "".join([t async for t in response.aiter_text()]) == "café über"
    utf16 = "ab\nc".encode("utf-16")
    for chunks in _splits(utf16):
        response = _response(chunks, "text/plain; charset=utf-16")
        assert [line async for line in response.aiter_lines()] == ["ab", "c"]
    broken = _response([b"ok \xff\xfe end"])
    assert "".join([t async for t in broken.aiter_text()]) == "ok \ufffd\ufffd end"


async def test_ndjson_and_sse_from_a_real_server(nursery: trio.Nursery) -> None:
    server = FaultServer(http2=False)
    await nursery.start(server.serve)
    records = [{"n": i, "text": "é" * i} for i in range(50)]
    ndjson = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode()
    server.route(
        "GET",
        "/ndjson",
        Respond(
            200,
            headers=[("Content-Type", "application/x-ndjson"), ("Content-Encoding", "gzip")],
            body=gzip.compress(ndjson),
        ),
    )
    events = b"event: a\r\ndata: 1\r\n\r\nevent: b\r\ndata: 2\r\n\r\n"
    server.route("GET", "/sse", Respond(200, headers=[("Content-Type", "text/event-stream")],
                                        body=events))  # fmt: skip
    async with trio_retry.Client(retry=FAST) as client:
        with trio.fail_after(10):
            async with client.stream("GET", server.url + "/ndjson") as response:
                got = [json.loads(line) async for line in response.aiter_lines()]
            async with client.stream("GET", server.url + "/sse") as response:
                sse = [line async for line in response.aiter_lines()]
    assert got == records
    assert sse == ["event: a", "data: 1", "", "event: b", "data: 2", ""]
