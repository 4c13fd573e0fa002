"""Content decoding (SPEC §10, §12): br and zstd from real encoders, codings stacked in order,
bounded chunks for a decompression bomb (HTTP/1.1 and h2c), max_body_bytes on the decoded size,
and a clear error for a coding whose extra is missing."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable

import brotli
import pytest
import trio
from backports import zstd

import trio_retry
from tests.conftest import FAST
from trio_retry import _decoding
from trio_retry._decoding import CHUNK_SIZE, DecodeError, make_decoder
from trio_retry.testing import FaultServer, Respond

LIMIT = 20
TEXT = b"the quick brown fox jumps over the lazy dog " * 2000

ENCODERS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress,
    "deflate": zlib.compress,
    "br": brotli.compress,
    "zstd": zstd.compress,
}


def test_accept_encoding_lists_what_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _decoding.ACCEPT_ENCODING == "gzip, deflate, br, zstd"
    monkeypatch.setattr(_decoding, "_brotli", None)
    assert _decoding.available_encodings() == ["gzip", "deflate", "zstd"]
    monkeypatch.setattr(_decoding, "_zstd", None)
    assert _decoding.available_encodings() == ["gzip", "deflate"]


@pytest.mark.parametrize("encoding", sorted(ENCODERS))
def test_every_split_point_decodes_the_same(encoding: str) -> None:
    body = bytes(range(256)) * 8
    packed = ENCODERS[encoding](body)
    for cut in range(len(packed) + 1):
        decoder = make_decoder(encoding, None)
        assert decoder is not None
        out = [*decoder.decode(packed[:cut]), *decoder.decode(packed[cut:]), *decoder.finish()]
        assert b"".join(out) == body, cut


def test_stacked_codings_are_undone_in_reverse_order() -> None:
    packed = zstd.compress(brotli.compress(gzip.compress(TEXT)))
    decoder = make_decoder("gzip, br, zstd", None)
    assert decoder is not None
    assert decoder.decode_all(packed) == TEXT
    wrong_order = make_decoder("zstd, br, gzip", None)
    assert wrong_order is not None
    with pytest.raises(DecodeError, match="not valid gzip"):
        wrong_order.decode_all(packed)


def test_several_zstd_frames_and_gzip_members() -> None:
    for encoding, packed in [
        ("zstd", zstd.compress(b"one ") + zstd.compress(b"two")),
        ("gzip", gzip.compress(b"one ") + gzip.compress(b"two")),
    ]:
        decoder = make_decoder(encoding, None)
        assert decoder is not None
        assert decoder.decode_all(packed) == b"one two"


@pytest.mark.parametrize("encoding", sorted(ENCODERS))
def test_a_truncated_or_corrupt_body_is_an_error(encoding: str) -> None:
    packed = ENCODERS[encoding](TEXT)
    decoder = make_decoder(encoding, None)
    assert decoder is not None
    with pytest.raises(DecodeError, match="ended before"):
        decoder.decode_all(packed[: len(packed) // 2])
    decoder = make_decoder(encoding, None)
    assert decoder is not None
    with pytest.raises(DecodeError, match="not valid"):
        decoder.decode_all(b"\xff" * 64)


def test_a_bomb_in_one_read_comes_out_in_bounded_chunks() -> None:
    for encoding in ("gzip", "br", "zstd"):
        bomb = ENCODERS[encoding](b"\0" * (64 << 20))
        assert len(bomb) < 70_000  # one network read's worth
        decoder = make_decoder(encoding, None)
        assert decoder is not None
        sizes = [len(chunk) for chunk in decoder.decode(bomb)]
        sizes += [len(chunk) for chunk in decoder.finish()]
        assert max(sizes) <= CHUNK_SIZE, encoding
        assert sum(sizes) == 64 << 20


def test_the_limit_counts_decoded_bytes_as_they_come() -> None:
    decoder = make_decoder("zstd", 1_000_000)
    assert decoder is not None
    produced: list[int] = []

    def consume() -> None:
        for chunk in decoder.decode(zstd.compress(b"\0" * (64 << 20))):
            produced.append(len(chunk))

    with pytest.raises(DecodeError, match=r"max_body_bytes \(1000000 bytes\)"):
        consume()
    assert sum(produced) <= 1_000_000


async def _server(nursery: trio.Nursery, http2: bool) -> FaultServer:
    server = FaultServer(http2=http2)
    await nursery.start(server.serve)
    return server


@pytest.mark.parametrize("encoding", ["br", "zstd", "gzip, br"])
@pytest.mark.parametrize("http2", [False, True], ids=["h1", "h2c"])
async def test_real_encoded_bodies_buffered_and_streamed(
    nursery: trio.Nursery, encoding: str, http2: bool
) -> None:
    server = await _server(nursery, http2)
    packed = TEXT
    for coding in (c.strip() for c in encoding.split(",")):
        packed = ENCODERS[coding](packed)
    server.default = Respond(200, headers=[("Content-Encoding", encoding)], body=packed)
    async with trio_retry.Client(retry=FAST, http2_prior_knowledge=http2) as client:
        with trio.fail_after(LIMIT):
            response = await client.get(server.url + "/")
            async with client.stream("GET", server.url + "/") as streamed:
                chunks = [chunk async for chunk in streamed.aiter_bytes()]
    assert response.content == TEXT
    assert response.text == TEXT.decode()
    assert b"".join(chunks) == TEXT
    accept = dict(server.requests[0].headers)["accept-encoding"]
    assert accept == "gzip, deflate, br, zstd"


@pytest.mark.parametrize("http2", [False, True], ids=["h1", "h2c"])
async def test_a_streamed_bomb_never_yields_a_huge_chunk(
    nursery: trio.Nursery, http2: bool
) -> None:
    server = await _server(nursery, http2)
    bomb = gzip.compress(b"\0" * (32 << 20))
    server.default = Respond(200, headers=[("Content-Encoding", "gzip")], body=bomb)
    async with trio_retry.Client(retry=FAST, http2_prior_knowledge=http2) as client:
        with trio.fail_after(LIMIT):
            async with client.stream("GET", server.url + "/") as response:
                sizes = [len(chunk) async for chunk in response.aiter_bytes()]
    assert max(sizes) <= CHUNK_SIZE
    assert sum(sizes) == 32 << 20


@pytest.mark.parametrize("encoding", ["gzip", "br", "zstd"])
@pytest.mark.parametrize("http2", [False, True], ids=["h1", "h2c"])
async def test_max_body_bytes_applies_to_the_decoded_size_on_every_path(
    nursery: trio.Nursery, encoding: str, http2: bool
) -> None:
    server = await _server(nursery, http2)
    bomb = ENCODERS[encoding](b"\0" * (8 << 20))
    server.default = Respond(200, headers=[("Content-Encoding", encoding)], body=bomb)
    options = {"retry": FAST, "http2_prior_knowledge": http2, "max_body_bytes": 500_000}
    async with trio_retry.Client(**options) as client:  # type: ignore[arg-type]
        with trio.fail_after(LIMIT):
            with pytest.raises(trio_retry.ProtocolFailed, match="max_body_bytes") as info:
                await client.get(server.url + "/")
            assert len(info.value.attempts) == 1  # the same body again would not help
            received: list[int] = []

            async def consume(response: trio_retry.Response) -> None:
                async for chunk in response.aiter_bytes():
                    received.append(len(chunk))

            async with client.stream("GET", server.url + "/") as response:
                with pytest.raises(trio_retry.ProtocolFailed, match="max_body_bytes"):
                    await consume(response)
            assert sum(received) <= 500_000


async def test_a_missing_extra_is_named_and_the_raw_body_stays_readable(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_decoding, "_brotli", None)
    server = await _server(nursery, False)
    packed = brotli.compress(TEXT)
    server.default = Respond(200, headers=[("Content-Encoding", "br")], body=packed)
    async with trio_retry.Client(retry=FAST) as client:
        with trio.fail_after(LIMIT):
            with pytest.raises(trio_retry.ProtocolFailed, match=r"trio_retry\[brotli\]"):
                await client.get(server.url + "/")
            async with client.stream("GET", server.url + "/") as response:
                with pytest.raises(trio_retry.ProtocolFailed, match="'brotli' extra"):
                    await response.aread()
            async with client.stream("GET", server.url + "/") as response:
                raw = b"".join([chunk async for chunk in response.aiter_raw()])
    assert raw == packed


async def test_an_unknown_coding_is_passed_through(nursery: trio.Nursery) -> None:
    server = await _server(nursery, False)
    server.default = Respond(200, headers=[("Content-Encoding", "x-custom")], body=b"opaque")
    async with trio_retry.Client(retry=FAST) as client:
        with trio.fail_after(LIMIT):
            assert (await client.get(server.url + "/")).content == b"opaque"
