"""Decoding, redirect rules and auth helpers: pure pieces tested without sockets."""

from __future__ import annotations

import gzip
import zlib

import pytest

from trio_retry._auth import BasicAuth, BearerAuth
from trio_retry._decoding import DecodeError, make_decoder
from trio_retry._redirects import redirect_method


def _decode_all(encoding: str, data: bytes, limit: int | None = None, step: int = 7) -> bytes:
    decoder = make_decoder(encoding, limit)
    assert decoder is not None
    chunks = [c for i in range(0, len(data), step) for c in decoder.decode(data[i : i + step])]
    return b"".join(chunks) + b"".join(decoder.finish())


@pytest.mark.parametrize(
    ("encoding", "encode"),
    [
        ("gzip", gzip.compress),
        ("x-gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", lambda d: zlib.compress(d)[2:-4]),  # raw deflate, as some servers send
        ("gzip, identity", gzip.compress),
    ],
)
def test_decoding_streams_in_small_chunks(encoding: str, encode: object) -> None:
    data = b"trio_retry " * 1000
    assert _decode_all(encoding, encode(data)) == data  # type: ignore[operator]


def test_stacked_encodings_are_undone_in_reverse() -> None:
    data = b"layered " * 100
    assert _decode_all("deflate, gzip", gzip.compress(zlib.compress(data))) == data


def test_decompression_bomb_is_stopped_at_the_limit() -> None:
    bomb = gzip.compress(b"\0" * 10_000_000)
    assert len(bomb) < 20_000
    with pytest.raises(DecodeError, match="max_body_bytes"):
        _decode_all("gzip", bomb, limit=100_000, step=4096)


def test_garbage_is_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="not valid"):
        _decode_all("gzip", b"this is not gzip at all")


def test_unknown_or_absent_encodings_pass_through() -> None:
    assert make_decoder(None, None) is None
    assert make_decoder("identity", None) is None
    assert make_decoder("compress", None) is None  # br and zstd: tests/client/test_decoding.py
    assert make_decoder("gzip, x-custom", None) is None


@pytest.mark.parametrize(
    ("status", "method", "expected"),
    [
        (303, "POST", ("GET", False)),
        (303, "PUT", ("GET", False)),
        (303, "HEAD", ("HEAD", False)),
        (301, "POST", ("GET", False)),
        (302, "POST", ("GET", False)),
        (301, "GET", ("GET", False)),
        (302, "PUT", ("PUT", True)),
        (307, "POST", ("POST", True)),
        (308, "PUT", ("PUT", True)),
        (307, "GET", ("GET", True)),
    ],
)
def test_redirect_methods(status: int, method: str, expected: tuple[str, bool]) -> None:
    assert redirect_method(status, method) == expected


async def test_basic_and_bearer_auth() -> None:
    basic = BasicAuth("ada", "s3cret")
    assert await basic.headers() == {"Authorization": "Basic YWRhOnMzY3JldA=="}
    assert "s3cret" not in repr(basic)
    tokens = iter(["t1", "t2"])

    async def provider() -> str:
        return next(tokens)

    bearer = BearerAuth(provider=provider)
    assert await bearer.headers() == {"Authorization": "Bearer t1"}
    await bearer.refresh()
    assert await bearer.headers() == {"Authorization": "Bearer t2"}
    assert "t2" not in repr(bearer)
    with pytest.raises(ValueError, match="':'"):
        BasicAuth("a:b", "c")
