"""``aiter_bytes/aiter_raw/aiter_text(chunk_size=N)`` (SPEC §17): chunks of exactly ``N``
bytes (characters for text) but the last, which is shorter and never empty.

End to end against a FaultServer on loopback (a ``Content-Length`` body, a paced one, a
chunked one with odd chunk sizes, gzip, HTTP/1.1 and h2c, buffered and streamed), then the
re-chunkers alone: hypothesis properties (the chunks put together are the input, all but the
last are exactly ``N``, the buffer never holds ``N``), cancellation, and the no-copy paths.
"""

from __future__ import annotations

import gzip
import random
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

import trio_retry
from tests.conftest import FAST
from trio_retry import URL, Headers, Response
from trio_retry._rechunk import Rechunked, TextRechunked
from trio_retry.testing import FaultServer, Raw, Respond

LIMIT = 30  # seconds: every test's network part ends well within this

_rng = random.Random(29)
#: 150 KB that shows any reordering (no repeating period) and still compresses (hex text).
BODY = b"".join(
    b"%d:%s\n" % (i, _rng.randbytes(_rng.randrange(1, 40)).hex().encode()) for i in range(3300)
)
SIZES = [1, 3, 1000, 4096, 16384, 65535, 65536, 65537, 100_000]
SIZES += [len(BODY) - 1, len(BODY), len(BODY) + 1]
#: Odd chunk sizes for a chunked body (a hexadecimal size line each), summing to len(BODY).
ODD = [1, 7, 4095, 333, 65537, 2, 17000]
ODD.append(len(BODY) - sum(ODD))


def assert_rechunked(chunks: Sequence[bytes] | Sequence[str], whole: Any, size: int) -> None:
    """``chunks`` are ``whole`` cut into pieces of exactly ``size``, the last shorter."""
    joined = b"".join(chunks) if isinstance(whole, bytes) else "".join(chunks)  # type: ignore[arg-type]
    assert joined == whole
    assert [len(chunk) for chunk in chunks[:-1]] == [size] * (len(chunks) - 1)
    if whole:
        assert 0 < len(chunks[-1]) <= size
    assert len(chunks) == -(-len(whole) // size)  # ceil: an empty body gives no chunk


async def _server(nursery: trio.Nursery, http2: bool, action: Any) -> FaultServer:
    server = FaultServer(http2=http2)
    server.default = action
    await nursery.start(server.serve)
    return server


def _chunked(pieces: Sequence[bytes]) -> Raw:
    """An HTTP/1.1 response whose chunked body has exactly these chunks on the wire."""
    body = b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces)
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    return Raw(head + body + b"0\r\n\r\n")


def _pieces(body: bytes, sizes: Sequence[int]) -> list[bytes]:
    pieces, start = [], 0
    for size in sizes:
        pieces.append(body[start : start + size])
        start += size
    return pieces


SHAPES = {
    "content-length-h1": (False, Respond(200, body=BODY)),
    "content-length-h2c": (True, Respond(200, body=BODY)),
    # 7919-byte writes (the rate allows that much per 50 ms tick), on a virtual clock
    "paced-h1": (False, Respond(200, body=BODY, body_rate=7919 * 20)),
    "paced-h2c": (True, Respond(200, body=BODY, body_rate=7919 * 20)),
    "chunked-odd-sizes": (False, _chunked(_pieces(BODY, ODD))),
}


#: The shapes paced by the server's clock: virtual time (autojump) makes their pauses free.
PACED = [shape for shape in SHAPES if shape.startswith("paced")]


@pytest.mark.parametrize("shape", PACED)
async def test_paced_bodies_come_in_exact_chunks(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock, shape: str
) -> None:
    await streamed_bodies_come_in_exact_chunks(nursery, shape)


@pytest.mark.parametrize("shape", [shape for shape in SHAPES if shape not in PACED])
async def test_streamed_bodies_come_in_exact_chunks(nursery: trio.Nursery, shape: str) -> None:
    """On the real clock: a body sent at once has no pause to skip, and autojump moves
    virtual time whenever every task waits, including for bytes the kernel still holds
    (a 150 KB body through loopback, both ends waiting a moment): then the clock jumped to
    this test's limit, about one run in twelve."""
    await streamed_bodies_come_in_exact_chunks(nursery, shape)


async def streamed_bodies_come_in_exact_chunks(nursery: trio.Nursery, shape: str) -> None:
    http2, action = SHAPES[shape]
    server = await _server(nursery, http2, action)
    async with trio_retry.Client(retry=FAST, http2_prior_knowledge=http2) as client:
        with trio.fail_after(LIMIT):
            for size in SIZES:
                async with client.stream("GET", server.url + "/") as response:
                    chunks = [chunk async for chunk in response.aiter_bytes(chunk_size=size)]
                assert_rechunked(chunks, BODY, size)
                async with client.stream("GET", server.url + "/") as response:
                    chunks = [chunk async for chunk in response.aiter_raw(chunk_size=size)]
                assert_rechunked(chunks, BODY, size)
            # Without chunk_size the chunks are as they arrived: not all of one size.
            async with client.stream("GET", server.url + "/") as response:
                arrived = [len(chunk) async for chunk in response.aiter_bytes()]
            assert sum(arrived) == len(BODY)
            if shape == "chunked-odd-sizes":
                assert len(set(arrived)) > 2


@pytest.mark.parametrize("http2", [False, True], ids=["h1", "h2c"])
async def test_gzip_decoded_in_exact_chunks_and_raw_in_exact_chunks(
    nursery: trio.Nursery, http2: bool
) -> None:
    packed = gzip.compress(BODY)
    action = Respond(200, headers=[("Content-Encoding", "gzip")], body=packed)
    server = await _server(nursery, http2, action)
    async with trio_retry.Client(retry=FAST, http2_prior_knowledge=http2) as client:
        with trio.fail_after(LIMIT):
            for size in [1, 1000, 65536, 65537, 100_000, len(BODY)]:
                async with client.stream("GET", server.url + "/") as response:
                    chunks = [chunk async for chunk in response.aiter_bytes(chunk_size=size)]
                assert_rechunked(chunks, BODY, size)
                async with client.stream("GET", server.url + "/") as response:
                    raw = [chunk async for chunk in response.aiter_raw(chunk_size=size)]
                assert_rechunked(raw, packed, size)
                buffered = await client.get(server.url + "/")
                chunks = [chunk async for chunk in buffered.aiter_bytes(chunk_size=size)]
                assert_rechunked(chunks, BODY, size)


async def test_a_bomb_joined_across_decoded_chunks(server: FaultServer) -> None:
    """1 MiB of zeros inflates in 64 KiB steps; 100 000-byte chunks join across them."""
    whole = b"\0" * (1 << 20)
    server.default = Respond(200, headers=[("Content-Encoding", "gzip")], body=gzip.compress(whole))
    async with trio_retry.Client(retry=FAST) as client:
        with trio.fail_after(LIMIT):
            async with client.stream("GET", server.url + "/") as response:
                chunks = [chunk async for chunk in response.aiter_bytes(chunk_size=100_000)]
    assert_rechunked(chunks, whole, 100_000)


async def test_buffered_content_in_exact_chunks(server: FaultServer) -> None:
    server.default = Respond(200, body=BODY)
    async with trio_retry.Client(retry=FAST) as client:
        with trio.fail_after(LIMIT):
            response = await client.get(server.url + "/")
    for size in SIZES:
        chunks = [chunk async for chunk in response.aiter_bytes(chunk_size=size)]
        assert_rechunked(chunks, BODY, size)
    # The content is handed out as it is when one chunk holds it all: not copied.
    (whole,) = [chunk async for chunk in response.aiter_bytes(chunk_size=len(BODY))]
    assert whole is response.content
    text = BODY.decode()
    for size in (1, 999, len(text)):
        assert_rechunked([t async for t in response.aiter_text(chunk_size=size)], text, size)


@pytest.mark.parametrize("http2", [False, True], ids=["h1", "h2c"])
async def test_an_empty_body_gives_no_chunk(nursery: trio.Nursery, http2: bool) -> None:
    server = await _server(nursery, http2, Respond(200, body=b""))
    async with trio_retry.Client(retry=FAST, http2_prior_knowledge=http2) as client:
        with trio.fail_after(LIMIT):
            for size in (1, 10):
                async with client.stream("GET", server.url + "/") as response:
                    assert [c async for c in response.aiter_bytes(chunk_size=size)] == []
                async with client.stream("GET", server.url + "/") as response:
                    assert [c async for c in response.aiter_raw(chunk_size=size)] == []
                async with client.stream("GET", server.url + "/") as response:
                    assert [t async for t in response.aiter_text(chunk_size=size)] == []
                buffered = await client.get(server.url + "/")
                assert [c async for c in buffered.aiter_bytes(chunk_size=size)] == []
                assert [t async for t in buffered.aiter_text(chunk_size=size)] == []


# -- text: N characters, multibyte characters never split ---------------------------------------

TEXT = "ab€𝄞é\r\nÿ" * 50 + "z"  # 1, 3, 4 and 2 bytes a character in UTF-8
TEXT_BYTES = TEXT.encode()


class _Source:
    """Byte chunks as if they had arrived so, for a Response built by hand."""

    def __init__(self, chunks: Sequence[bytes]) -> None:
        self._chunks = list(chunks)
        self.reads = 0

    def __aiter__(self) -> _Source:
        return self

    async def __anext__(self) -> bytes:
        await trio.lowlevel.checkpoint()  # where a cancelled read is cancelled
        if not self._chunks:
            raise StopAsyncIteration
        self.reads += 1
        return self._chunks.pop(0)


def _response(chunks: Sequence[bytes], content_type: str = "text/plain") -> Response:
    stream: AsyncIterator[bytes] = _Source(chunks)
    return Response(
        status=200,
        reason="OK",
        headers=Headers([("Content-Type", content_type)]),
        http_version="HTTP/1.1",
        url=URL("http://example.test/"),
        request_method="GET",
        stream=stream,
    )


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, len(TEXT) - 1, len(TEXT), 10_000])
async def test_text_chunks_are_characters_never_split_bytes(size: int) -> None:
    splits = {
        "one byte a read": [TEXT_BYTES[i : i + 1] for i in range(len(TEXT_BYTES))],
        "odd reads": _pieces(TEXT_BYTES, [5, 1, 2, 1000, 13, len(TEXT_BYTES)]),
        "one read": [TEXT_BYTES],
    }
    for name, chunks in splits.items():
        texts = [t async for t in _response(chunks).aiter_text(chunk_size=size)]
        assert_rechunked(texts, TEXT, size)
        assert "\ufffd" not in "".join(texts), name  # no character was cut in two


async def test_text_in_another_charset_counts_characters(server: FaultServer) -> None:
    text = "Grüße, naïve café " * 300
    headers = [("Content-Type", "text/plain; charset=ISO-8859-1")]
    server.default = Respond(200, headers=headers, body=text.encode("latin-1"), body_rate=20 * 333)
    async with trio_retry.Client(retry=FAST) as client:
        with trio.fail_after(LIMIT):
            async with client.stream("GET", server.url + "/") as response:
                texts = [t async for t in response.aiter_text(chunk_size=100)]
    assert_rechunked(texts, text, 100)


async def test_streamed_utf8_text_from_the_server_in_exact_chunks(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    # 7-byte writes cut most multibyte characters in two on the wire.
    server.default = Respond(200, body=TEXT_BYTES, body_rate=7 * 20)
    async with trio_retry.Client(retry=FAST) as client:
        with trio.fail_after(LIMIT):
            async with client.stream("GET", server.url + "/") as response:
                texts = [t async for t in response.aiter_text(chunk_size=5)]
    assert_rechunked(texts, TEXT, 5)


# -- bad chunk_size: a clear error at the call ---------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "error"),
    [(0, ValueError), (-1, ValueError), (1.5, TypeError), ("10", TypeError), (True, TypeError)],
)
async def test_a_bad_chunk_size_is_refused_at_the_call(bad: Any, error: type[Exception]) -> None:
    response = _response([b"abc"])
    for method in (response.aiter_bytes, response.aiter_raw, response.aiter_text):
        with pytest.raises(error, match=r"chunk_size must be a positive int or None, got"):
            method(chunk_size=bad)
    # Refused before the body was touched: it can still be read.
    assert [c async for c in response.aiter_bytes(chunk_size=2)] == [b"ab", b"c"]


# -- the re-chunkers alone -----------------------------------------------------------------------


async def _drain(chunker: AsyncIterator[Any], cancels: Sequence[bool]) -> list[Any]:
    """Every chunk, each step cancelled at once first when the next of ``cancels`` says so."""
    chunks: list[Any] = []
    cancels_left = list(cancels)
    for _ in range(100_000):  # bounded: far more steps than any input here has
        if cancels_left and cancels_left.pop(0):
            # A step that needs no read returns without a checkpoint: it is kept.
            with trio.CancelScope() as scope:
                scope.cancel()
                try:
                    chunks.append(await chunker.__anext__())
                except StopAsyncIteration:
                    return chunks
            continue
        try:
            chunks.append(await chunker.__anext__())
        except StopAsyncIteration:
            return chunks
        if isinstance(chunker, Rechunked):
            assert len(chunker._buffer) < chunker._size  # never a whole chunk held
    raise AssertionError("the re-chunker never ended")


@settings(max_examples=300, deadline=None)
@given(
    pieces=st.lists(st.binary(max_size=64), max_size=20),
    size=st.integers(min_value=1, max_value=70),
    cancels=st.lists(st.booleans(), max_size=30),
)
def test_rechunked_property(pieces: list[bytes], size: int, cancels: list[bool]) -> None:
    chunks = trio.run(_drain, Rechunked(_Source(pieces), size), cancels)
    assert_rechunked(chunks, b"".join(pieces), size)
    assert all(type(chunk) is bytes for chunk in chunks)


class _TextSource:
    def __init__(self, pieces: Sequence[str]) -> None:
        self._pieces = list(pieces)

    def __aiter__(self) -> _TextSource:
        return self

    async def __anext__(self) -> str:
        await trio.lowlevel.checkpoint()
        if not self._pieces:
            raise StopAsyncIteration
        return self._pieces.pop(0)


@settings(max_examples=300, deadline=None)
@given(
    pieces=st.lists(st.text(max_size=40), max_size=20),
    size=st.integers(min_value=1, max_value=50),
    cancels=st.lists(st.booleans(), max_size=30),
)
def test_text_rechunked_property(pieces: list[str], size: int, cancels: list[bool]) -> None:
    chunks = trio.run(_drain, TextRechunked(_TextSource(pieces), size), cancels)
    assert_rechunked(chunks, "".join(pieces), size)


async def test_an_arriving_chunk_of_exactly_n_is_handed_through() -> None:
    exact = b"x" * 8
    source = _Source([exact, b"abc", b"defgh", b"y" * 8 + b"z"])
    chunker = Rechunked(source, 8)
    assert await chunker.__anext__() is exact  # nothing buffered: not copied
    # A chunk is handed out as soon as it is full, without waiting for the next read.
    assert (await chunker.__anext__(), source.reads) == (b"abcdefgh", 3)
    assert [chunk async for chunk in chunker] == [b"y" * 8, b"z"]


async def test_a_text_chunk_is_handed_out_as_soon_as_it_is_full() -> None:
    source = _TextSource(["ab", "c€", "defg"])
    chunker = TextRechunked(source, 4)
    assert await chunker.__anext__() == "abc€"
    assert source._pieces == ["defg"]  # not read yet
    exact = await chunker.__anext__()
    assert exact == "defg"
    assert [chunk async for chunk in chunker] == []


async def test_a_read_of_many_chunks_is_cut_without_more_reads() -> None:
    """A read of several chunks' worth is cut up before the next read is asked for: the
    chunker holds one read, never the whole body."""
    source = _Source([b"0123456789" * 3, b"tail"])
    chunker = Rechunked(source, 10)
    for expected in (b"0123456789", b"0123456789", b"0123456789"):
        assert await chunker.__anext__() == expected
        assert source.reads == 1
    assert [chunk async for chunk in chunker] == [b"tail"]
