"""Body replayability: can the exact same request body be sent again?

| body                                                        | replayability |
|-------------------------------------------------------------|---------------|
| ``bytes``, ``bytearray``, ``memoryview``, ``str``, ``json=`` | REPLAYABLE    |
| ``Reopenable(factory)``, ``pathlib.Path``, ``trio.Path``     | REOPENABLE    |
| an async iterator / iterator / generator / file object       | ONE_SHOT      |
| ``StreamFactory(factory, replayability=...)``                | as declared   |
| ``Multipart([...])``                                         | weakest part  |

A ``ONE_SHOT`` body is consumed by the first attempt, so it is never retried (rule 3). This
module classifies bodies and defines the body wrappers; producing bytes from them is the client's
job (``trio_retry._body``). ``trio.Path`` is recognised through ``os.PathLike`` so that this core
never imports trio.
"""

from __future__ import annotations

import enum
import os
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias, Union

from .checks import check_instance, check_whole
from .secrecy import withheld

__all__ = [
    "Body",
    "Multipart",
    "MultipartValue",
    "Reopenable",
    "Replayability",
    "StreamFactory",
    "classify_body",
]


class Replayability(enum.IntEnum):
    """How often a body can be produced again, weakest first (so ``min()`` is "the weakest")."""

    ONE_SHOT = 0
    REOPENABLE = 1
    REPLAYABLE = 2

    @property
    def replayable(self) -> bool:
        """``REPLAYABLE`` or ``REOPENABLE``: a second attempt can send the same bytes."""
        return self is not Replayability.ONE_SHOT

    def __str__(self) -> str:
        return self.name


#: What a body factory may return each time it is called.
FactoryResult: TypeAlias = Any


@dataclass(frozen=True, slots=True)
class Reopenable:
    """A body produced afresh by calling ``factory()`` for every attempt.

    ``factory`` returns a new iterable of bytes, async iterable of bytes, or binary file object
    on each call (the file is closed after the attempt). ``length``, when given, is sent as
    Content-Length; otherwise HTTP/1.1 uses chunked transfer.
    """

    factory: Callable[[], FactoryResult]
    length: int | None = None

    def __post_init__(self) -> None:
        _check_factory(self.factory, self.length, "Reopenable")


@dataclass(frozen=True, slots=True)
class StreamFactory:
    """Like :class:`Reopenable`, with the replayability declared by the caller.

    Use it when the factory is only good for one call (``Replayability.ONE_SHOT``), or always
    yields identical content (``Replayability.REPLAYABLE``).
    """

    factory: Callable[[], FactoryResult]
    replayability: Replayability = Replayability.REOPENABLE
    length: int | None = None

    def __post_init__(self) -> None:
        _check_factory(self.factory, self.length, "StreamFactory")
        check_instance(
            self.replayability,
            Replayability,
            "StreamFactory.replayability",
            "a Replayability (Replayability.ONE_SHOT, REOPENABLE or REPLAYABLE)",
        )


def _check_factory(factory: object, length: object, owner: str) -> None:
    """A factory is called for each attempt: a body itself given in its place (bytes, an open
    file) used to fail only when the first attempt called it."""
    if not callable(factory):
        hint = (
            "; bytes or str need no wrapper: pass them as content= directly"
            if isinstance(factory, (bytes, bytearray, memoryview, str))
            else ""
        )
        raise TypeError(
            f"{owner}'s factory must be a function returning a fresh body each time it is "
            f"called (lambda: open(path, 'rb')), got {withheld(factory)}{hint}"
        )
    check_whole(length, f"{owner}.length", "a number of bytes >= 0, or None", optional=True)
    if isinstance(length, int) and length < 0:
        raise ValueError(f"{owner}.length must be a number of bytes >= 0, or None, got {length}")


#: A multipart value: a body, or ``(filename, body, content_type)``.
MultipartValue: TypeAlias = Union["Body", tuple[str, "Body", str]]


@dataclass(frozen=True, slots=True)
class Multipart:
    """A ``multipart/form-data`` body from ``(name, value)`` pairs.

    A value is a body of any supported kind, or a ``(filename, body, content_type)`` tuple for a
    file part. The whole is as replayable as its weakest part.
    """

    parts: Sequence[tuple[str, MultipartValue]]
    boundary: str | None = None

    def __post_init__(self) -> None:
        for index, part in enumerate(self.parts):
            if not (isinstance(part, tuple) and len(part) == 2 and isinstance(part[0], str)):
                raise TypeError(
                    f"Multipart part {index} must be a (name, value) pair with a str name, "
                    f"got {part!r}"
                )


class BinaryReader(Protocol):
    """A binary file object opened for reading (``open(path, "rb")``, ``io.BytesIO``)."""

    def read(self, size: int = ..., /) -> bytes: ...


#: Anything accepted as a request body.
Body: TypeAlias = Union[
    bytes,
    bytearray,
    memoryview,
    str,
    Reopenable,
    StreamFactory,
    Multipart,
    "os.PathLike[str]",
    AsyncIterable[bytes],
    Iterator[bytes],
    BinaryReader,
]

ACCEPTED_BODY_KINDS = (
    "bytes, bytearray, memoryview, str, Reopenable(factory), StreamFactory(factory, "
    "replayability=...), Multipart([...]), pathlib.Path or trio.Path, an async iterator or "
    "async generator of bytes, an iterator or generator of bytes, or a binary file object"
)


def _is_file_object(body: object) -> bool:
    return callable(getattr(body, "read", None))


def classify_body(body: object) -> Replayability:
    """The replayability of ``body`` (``None`` — no body — is ``REPLAYABLE``).

    Raises ``TypeError`` naming the accepted kinds for anything else (a list, a dict, an int...):
    guessing would risk sending something the caller did not mean.
    """
    if body is None or isinstance(body, (bytes, bytearray, memoryview, str)):
        return Replayability.REPLAYABLE
    if isinstance(body, Reopenable):
        return Replayability.REOPENABLE
    if isinstance(body, StreamFactory):
        return body.replayability
    if isinstance(body, Multipart):
        return min(
            (classify_body(_part_body(value)) for _, value in body.parts),
            default=Replayability.REPLAYABLE,
        )
    if isinstance(body, os.PathLike):
        return Replayability.REOPENABLE
    if isinstance(body, (AsyncIterator, AsyncIterable, Iterator)) or _is_file_object(body):
        return Replayability.ONE_SHOT
    # A generator function given uncalled is the commonest of these: say so.
    hint = (
        " (a function: pass what it returns, content=gen(), or Reopenable(gen) to call it "
        "again for each attempt)"
        if callable(body) and not isinstance(body, type)
        else ""
    )
    raise TypeError(
        f"unsupported request body of type {type(body).__name__}{hint}; accepted kinds: "
        f"{ACCEPTED_BODY_KINDS}"
    )


def _part_body(value: MultipartValue) -> object:
    if isinstance(value, tuple):
        if len(value) != 3:
            raise TypeError(
                f"a Multipart file part must be (filename, body, content_type), got {value!r}"
            )
        return value[1]
    return value
