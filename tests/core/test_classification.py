"""Idempotency precedence and body replayability (the weakest-part rule)."""

from __future__ import annotations

import io
import pathlib
from collections.abc import AsyncIterator, Iterator

import pytest
import trio

from trio_retry import Idempotency, Multipart, Reopenable, Replayability, StreamFactory
from trio_retry._core.idempotency import classify_idempotency, method_default
from trio_retry._core.replay import classify_body


@pytest.mark.parametrize(
    ("method", "expected"),
    [
        ("GET", Idempotency.SAFE),
        ("head", Idempotency.SAFE),
        ("OPTIONS", Idempotency.SAFE),
        ("TRACE", Idempotency.SAFE),
        ("PUT", Idempotency.IDEMPOTENT),
        ("DELETE", Idempotency.IDEMPOTENT),
        ("POST", Idempotency.NON_IDEMPOTENT),
        ("PATCH", Idempotency.NON_IDEMPOTENT),
        ("PURGE", Idempotency.NON_IDEMPOTENT),
    ],
)
def test_method_defaults(method: str, expected: Idempotency) -> None:
    assert method_default(method) is expected


def test_idempotency_precedence() -> None:
    key = ["Content-Type", "Idempotency-Key"]
    assert classify_idempotency("POST", key) is Idempotency.IDEMPOTENT
    assert classify_idempotency("POST", ["idempotency-key"]) is Idempotency.IDEMPOTENT
    # The caller's explicit choice wins, in either direction.
    assert classify_idempotency("PUT", key, Idempotency.NON_IDEMPOTENT) is (
        Idempotency.NON_IDEMPOTENT
    )
    assert classify_idempotency("POST", [], Idempotency.IDEMPOTENT) is Idempotency.IDEMPOTENT
    # A key on a GET does not weaken it.
    assert classify_idempotency("GET", key) is Idempotency.IDEMPOTENT
    assert Idempotency.SAFE.safely_idempotent
    assert not Idempotency.NON_IDEMPOTENT.safely_idempotent


def _gen() -> Iterator[bytes]:
    yield b"x"


async def _agen() -> AsyncIterator[bytes]:
    yield b"x"


R, RO, S = Replayability.REPLAYABLE, Replayability.REOPENABLE, Replayability.ONE_SHOT


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (None, R),
        (b"abc", R),
        (bytearray(b"abc"), R),
        (memoryview(b"abc"), R),
        ("text", R),
        (Reopenable(lambda: io.BytesIO(b"x")), RO),
        (pathlib.Path("/tmp/x"), RO),
        (trio.Path("/tmp/x"), RO),
        (_gen(), S),
        (_agen(), S),
        (io.BytesIO(b"x"), S),
        (StreamFactory(lambda: [b"x"], replayability=R), R),
        (StreamFactory(lambda: [b"x"], replayability=S), S),
        (Multipart([("a", b"1"), ("b", "2")]), R),
        (Multipart([("a", b"1"), ("f", ("f.txt", pathlib.Path("/tmp/f"), "text/plain"))]), RO),
        (Multipart([("a", b"1"), ("f", pathlib.Path("/x")), ("g", _gen())]), S),
        (Multipart([]), R),
    ],
)
def test_body_replayability(body: object, expected: Replayability) -> None:
    assert classify_body(body) is expected


@pytest.mark.parametrize("body", [[b"a", b"b"], {"a": 1}, 42, 1.5, object()])
def test_unsupported_body_names_accepted_kinds(body: object) -> None:
    with pytest.raises(TypeError, match=r"unsupported request body.*accepted kinds: bytes"):
        classify_body(body)


def test_multipart_validates_parts() -> None:
    with pytest.raises(TypeError, match="name, value"):
        Multipart([b"oops"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="filename, body, content_type"):
        classify_body(Multipart([("f", ("only-name", b"x"))]))  # type: ignore[list-item]
