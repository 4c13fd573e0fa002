"""Producing request bytes from a body, once per attempt.

:func:`prepare_body` classifies the body once (``_core.replay``) and returns a
:class:`PreparedBody`, whose :meth:`PreparedBody.open` gives the bytes for one attempt: the same
``bytes`` object for replayable bodies, a fresh stream from the factory for reopenable ones, and
the caller's iterator for a one-shot body — exactly once (a second ``open`` is a bug the engine
prevents, and raises rather than silently sending an empty body).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import trio

from ._core.checks import described
from ._core.replay import Multipart, Reopenable, Replayability, StreamFactory, classify_body

if TYPE_CHECKING:
    import uuid

__all__ = ["PreparedBody", "form_body", "new_uuid4", "prepare_body"]

CHUNK = 65536
#: A file body (a ``Path``, or a file object: sync, or async such as ``trio.open_file``'s) is
#: read this much at a time: each read of an async file is a round through a worker thread,
#: which costs more than the read itself below about a megabyte (at 64 KiB, most of a 50 MB
#: upload's CPU); the chunk is then written in the connection's own slices, so no single write
#: grows.
FILE_CHUNK = 1024 * 1024

BodyBytes = bytes | AsyncIterable[bytes]


class PreparedBody:
    """A request body ready to be opened once per attempt."""

    __slots__ = ("_opened", "_source", "content_type", "known_length", "replayability")

    def __init__(
        self, source: object, replayability: Replayability, content_type: str | None
    ) -> None:
        self._source = source
        self.replayability = replayability
        self.content_type = content_type
        self._opened = False
        #: The length when the body is bytes in memory, else ``None``.
        self.known_length = len(source) if isinstance(source, bytes) else None

    @property
    def in_memory(self) -> bytes | None:
        """The body when it is bytes in memory (what a signing auth may read), else ``None``."""
        return self._source if isinstance(self._source, bytes) else None

    async def open(self) -> tuple[BodyBytes, int | None]:
        """The bytes of this attempt and their length (``None``: unknown, send chunked)."""
        if self._opened and self.replayability is Replayability.ONE_SHOT:
            raise RuntimeError("a one-shot request body cannot be sent twice")
        self._opened = True
        return await _open(self._source)

    def opened_in_memory(self) -> tuple[bytes, int] | None:
        """:meth:`open` of a body in memory, without awaiting (``None`` for any other body:
        then await :meth:`open`)."""
        source = self._source
        if isinstance(source, bytes):
            self._opened = True
            return source, len(source)
        return None


def prepare_body(
    content: object = None,
    json: Any = None,
    *,
    json_dumps: Callable[[Any], str | bytes] | None = None,
) -> PreparedBody:
    """Classify and normalise ``content`` or ``json`` (not both). ``TypeError`` names the
    accepted body kinds for anything unsupported."""
    if json is not None:
        if content is not None:
            raise TypeError("pass either content= or json=, not both")
        dumps = json_dumps or _compact_json
        try:
            encoded = dumps(json)
        except (TypeError, ValueError) as exc:  # NaN or infinity, or a value JSON cannot hold
            accepted = (
                ""
                if json_dumps
                else "; json= takes what JSON holds: dict, list, str, int, "
                "float (no NaN or infinities), bool and None"
            )
            raise ValueError(f"json= cannot be encoded as JSON: {exc}{accepted}") from None
        data = encoded.encode("utf-8") if isinstance(encoded, str) else encoded
        return PreparedBody(data, Replayability.REPLAYABLE, "application/json")
    if content is None:  # most calls: no body, nothing to classify
        return PreparedBody(b"", Replayability.REPLAYABLE, None)
    replayability = classify_body(content)
    if isinstance(content, str):
        return PreparedBody(content.encode("utf-8"), replayability, None)
    if isinstance(content, (bytearray, memoryview)):
        return PreparedBody(bytes(content), replayability, None)
    if isinstance(content, Multipart):
        boundary = content.boundary or new_uuid4().hex
        return PreparedBody(
            _MultipartSource(content, boundary),
            replayability,
            f"multipart/form-data; boundary={boundary}",
        )
    return PreparedBody(content, replayability, None)


def form_body(
    content: object, data: Mapping[str, Any] | None, files: Mapping[str, Any] | None, json: Any
) -> object:
    """``data=`` (form fields) and ``files=`` as a body (a form, or a ``Multipart``); at most
    one kind of body. Raises ``TypeError`` naming the option: a file that is not a body kind,
    or a tuple not shaped ``(filename, body[, content_type])``, is refused here, before
    anything is sent (``("a.txt",)`` used to fail in Python's words)."""
    if data is None and files is None:
        return content
    if content is not None or json is not None:
        raise TypeError("pass only one of content=, json= and data=/files=")
    if files is None:
        assert data is not None
        pairs = [
            (str(k), str(item))
            for k, v in data.items()
            for item in (v if isinstance(v, (list, tuple)) else [v])
        ]
        return urlencode(pairs)
    parts: list[tuple[str, Any]] = [(str(k), str(v)) for k, v in (data or {}).items()]
    for name, value in files.items():
        where = f"files[{name!r}]"
        if isinstance(value, tuple):
            if not (
                len(value) in (2, 3)
                and isinstance(value[0], str)
                and (len(value) == 2 or isinstance(value[2], str))
            ):
                raise TypeError(
                    f"{where} must be a file, a path, bytes, or a tuple (filename, body) or "
                    f"(filename, body, content_type) with a str filename and content type, got "
                    f"{described(value)}"
                )
            filename, body, *rest = value
            _check_part(body, where)
            parts.append((name, (filename, body, rest[0] if rest else "application/octet-stream")))
        else:
            _check_part(value, where)
            filename = getattr(value, "name", name)
            parts.append((name, (str(filename).rsplit("/", 1)[-1], value,
                                 "application/octet-stream")))  # fmt: skip
    return Multipart(parts)


def _check_part(body: object, where: str) -> None:
    """A file part's body is one of the body kinds; its error names the field."""
    try:
        classify_body(body)
    except TypeError as exc:
        message = str(exc)
    else:
        return
    raise TypeError(f"{where}: {message}")


def new_uuid4() -> uuid.UUID:
    """A random UUID. uuid (with its C module) is imported on first use, by the calls that
    need one (multipart bodies, ``idempotency_key=True``): most programs never do, and at the
    top it cost every program ~1 ms at start-up. Once loaded, the import statement is a
    ``sys.modules`` look-up (~0.2 us measured), a tenth of ``uuid4()`` itself."""
    import uuid

    return uuid.uuid4()


def _compact_json(value: Any) -> str:
    # Strict JSON: NaN and the infinities are refused, not sent as the bare words ``NaN``.
    import json  # (on the first json= body)

    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


async def _open(source: object) -> tuple[BodyBytes, int | None]:
    if isinstance(source, bytes):
        return source, len(source)
    if isinstance(source, (Reopenable, StreamFactory)):
        stream, length = await _open(source.factory())
        return stream, source.length if source.length is not None else length
    if isinstance(source, _MultipartSource):
        return await source.open()
    if isinstance(source, os.PathLike):
        path = trio.Path(os.fspath(source))
        size = (await path.stat()).st_size
        return _read_path(path), size
    if isinstance(source, str):
        data = source.encode("utf-8")
        return data, len(data)
    if isinstance(source, (bytearray, memoryview)):
        return bytes(source), len(source)
    # A file object before an async iterable: an async file (``trio.open_file``, anyio's
    # ``AsyncFile``) is both, and iterating it gives lines, so a 10 MB file went in thousands of
    # small writes (18 s on loopback, issue #38) where ``read(FILE_CHUNK)`` takes ten.
    if callable(getattr(source, "read", None)):
        return _read_file(source), None
    if isinstance(source, AsyncIterable):
        return _aiter_bytes(source), None
    if isinstance(source, Iterable):
        return _iter_bytes(source), None
    raise TypeError(f"a body factory returned an unsupported object: {type(source).__name__}")


def _as_bytes(chunk: object) -> bytes:
    if isinstance(chunk, bytes):
        return chunk
    if isinstance(chunk, (bytearray, memoryview)):
        return bytes(chunk)
    if isinstance(chunk, str):
        return chunk.encode("utf-8")
    raise TypeError(f"request body chunks must be bytes, got {type(chunk).__name__}")


async def _aiter_bytes(source: AsyncIterable[Any]) -> AsyncIterator[bytes]:
    try:
        async for chunk in source:
            yield _as_bytes(chunk)
    finally:
        # An interrupted upload must not leave the caller's generator to the garbage collector
        # (its finally clauses would run late, outside Trio).
        aclose = getattr(source, "aclose", None)
        if aclose is not None:
            await aclose()


async def _iter_bytes(source: Iterable[Any]) -> AsyncIterator[bytes]:
    for chunk in source:
        yield _as_bytes(chunk)


async def _read_file(file: Any) -> AsyncIterator[bytes]:
    """A file object's bytes, ``FILE_CHUNK`` at a time by its own ``read()`` (awaited when it
    is async); the file is closed after (``aclose()`` or ``close()``)."""
    try:
        while True:
            chunk = file.read(FILE_CHUNK)
            if hasattr(chunk, "__await__"):
                chunk = await chunk
            if not chunk:
                return
            yield _as_bytes(chunk)
    finally:
        close = getattr(file, "aclose", None) or getattr(file, "close", None)
        if close is not None:
            result = close()
            if hasattr(result, "__await__"):
                await result


async def _read_path(path: trio.Path) -> AsyncIterator[bytes]:
    async with await path.open("rb") as file:
        while chunk := await file.read(FILE_CHUNK):
            yield chunk


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\r", "").replace("\n", "")


class _MultipartSource:
    """Streams ``multipart/form-data`` (RFC 7578); the length is known when every part's is."""

    __slots__ = ("boundary", "form")

    def __init__(self, form: Multipart, boundary: str) -> None:
        self.form = form
        self.boundary = boundary

    async def open(self) -> tuple[BodyBytes, int | None]:
        pieces: list[tuple[bytes, BodyBytes, int | None]] = []
        for name, value in self.form.parts:
            if isinstance(value, tuple):
                filename, body, content_type = value
                disposition = f'form-data; name="{_quote(name)}"; filename="{_quote(filename)}"'
                head = f"Content-Disposition: {disposition}\r\nContent-Type: {content_type}\r\n"
            else:
                body = value
                head = f'Content-Disposition: form-data; name="{_quote(name)}"\r\n'
                if isinstance(body, os.PathLike):
                    filename = os.path.basename(os.fspath(body))
                    head = (
                        f'Content-Disposition: form-data; name="{_quote(name)}"; '
                        f'filename="{_quote(filename)}"\r\n'
                        "Content-Type: application/octet-stream\r\n"
                    )
            part_head = f"--{self.boundary}\r\n{head}\r\n".encode()
            data, length = await _open(body if body is not None else b"")
            pieces.append((part_head, data, length))
        tail = f"--{self.boundary}--\r\n".encode()
        if all(isinstance(data, bytes) for _, data, _ in pieces):
            joined = b"".join(
                part_head + data + b"\r\n"
                for part_head, data, _ in pieces
                if isinstance(data, bytes)
            )
            return joined + tail, len(joined) + len(tail)
        total: int | None = len(tail)
        for part_head, _, length in pieces:
            if total is not None and length is not None:
                total += len(part_head) + length + 2
            else:
                total = None
        return _stream_parts(pieces, tail), total


async def _stream_parts(
    pieces: list[tuple[bytes, BodyBytes, int | None]], tail: bytes
) -> AsyncIterator[bytes]:
    for head, data, _ in pieces:
        yield head
        if isinstance(data, bytes):
            yield data
        else:
            async for chunk in data:
                yield chunk
        yield b"\r\n"
    yield tail
