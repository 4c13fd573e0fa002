"""Chunks of a size the caller chose, cut from a body stream's chunks of whatever size they
arrive in: ``aiter_bytes(chunk_size=N)`` and ``aiter_raw(chunk_size=N)`` (:class:`Rechunked`,
``N`` bytes) and ``aiter_text(chunk_size=N)`` (:class:`TextRechunked`, ``N`` characters, as in
httpx). Every chunk has exactly ``N`` units but the last, which is shorter and never empty.

Both are plain async iterators, not async generators (see ``_streams.py``), and both keep what
they hold when a step is cancelled. The body is never gathered whole: at most ``N - 1`` units
wait in a buffer, besides the one arriving chunk being cut up.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

__all__ = ["Rechunked", "TextRechunked", "check_chunk_size"]


def check_chunk_size(chunk_size: object) -> int | None:
    """``chunk_size`` itself when it is ``None`` or a positive ``int``; otherwise the error
    naming it (``TypeError`` for another type, ``bool`` included; ``ValueError`` for 0 or
    less). Called by ``aiter_*()`` itself, so a bad value fails at the call, not at the first
    chunk."""
    if chunk_size is None:
        return None
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool):
        raise TypeError(
            f"chunk_size must be a positive int or None, got {chunk_size!r} "
            f"({type(chunk_size).__name__})"
        )
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be a positive int or None, got {chunk_size}")
    return chunk_size


class Rechunked:
    """Chunks of exactly ``size`` bytes from a stream of byte chunks of any sizes; the last
    is shorter (never empty), and an empty stream gives no chunk.

    Memory: at most ``size - 1`` bytes are buffered (one ``bytearray``), besides the arriving
    chunk being cut up. Copies: an arriving chunk of exactly ``size`` bytes with nothing
    buffered is handed through as it is; a longer one is cut through a ``memoryview``, each
    ``size``-byte piece copied once into its own ``bytes``, only the remainder (fewer than
    ``size`` bytes) going to the buffer. The obvious way, appending every arriving chunk to one
    buffer and cutting chunks off its front, lost: it copies every byte twice, and a large
    read made the buffer as large as the read.

    Cancellation: a cancelled step loses nothing held here (the buffer and the chunk being cut
    stay as they were). Whether the stream underneath can go on after its own read was
    cancelled is that stream's rule: a streamed response's connection is given up, and the
    next step raises its error.
    """

    __slots__ = ("_buffer", "_done", "_offset", "_pending", "_size", "_source")

    def __init__(self, source: AsyncIterator[bytes], size: int) -> None:
        self._source = source
        self._size = size
        self._buffer = bytearray()  # a chunk being filled: always fewer than size bytes
        self._pending: memoryview | None = None  # an arriving chunk being cut, from _offset
        self._offset = 0
        self._done = False

    def __aiter__(self) -> Rechunked:
        return self

    async def __anext__(self) -> bytes:
        size, buffer = self._size, self._buffer
        while True:
            pending = self._pending
            if pending is not None:
                start = self._offset
                if len(pending) - start >= size:
                    self._offset = start + size
                    return bytes(pending[start : start + size])
                buffer += pending[start:]  # the remainder: fewer than size bytes
                self._pending = None
            if self._done:
                if not buffer:
                    raise StopAsyncIteration
                chunk = bytes(buffer)
                buffer.clear()
                return chunk
            try:
                data = await self._source.__anext__()
            except StopAsyncIteration:
                self._done = True
                continue
            if not buffer:
                if len(data) == size:
                    return data  # nothing to join or cut: handed through, not copied
                if len(data) < size:
                    buffer += data
                else:
                    self._pending, self._offset = memoryview(data), 0
                continue
            # Fill the buffer up to size; the rest of data is cut up by the next steps.
            missing = size - len(buffer)
            if len(data) < missing:
                buffer += data
                continue
            view = memoryview(data)
            buffer += view[:missing]
            chunk = bytes(buffer)
            buffer.clear()
            if len(data) > missing:
                self._pending, self._offset = view, missing
            return chunk


class TextRechunked:
    """Text chunks of exactly ``size`` characters from a stream of text chunks (decoded
    incrementally, so no character is ever split), the last shorter (never empty).

    At most ``size - 1`` characters are buffered, as a list of pieces joined once per chunk
    (``+=`` on a ``str`` would copy the buffer for every piece); a piece of ``size``
    characters or more is cut into chunks directly, from an offset (slicing off its front
    instead would copy the rest of a large piece for every chunk). A cancelled step loses
    nothing held here.
    """

    __slots__ = ("_buffered", "_done", "_offset", "_parts", "_pending", "_size", "_source")

    def __init__(self, source: AsyncIterator[str], size: int) -> None:
        self._source = source
        self._size = size
        self._parts: list[str] = []  # a chunk being filled: fewer than size characters
        self._buffered = 0  # their length
        self._pending = ""  # an arriving piece being cut, from _offset
        self._offset = 0
        self._done = False

    def __aiter__(self) -> TextRechunked:
        return self

    async def __anext__(self) -> str:
        size, parts = self._size, self._parts
        while True:
            pending = self._pending
            if pending:
                start = self._offset
                if len(pending) - start >= size:
                    self._offset = start + size
                    return pending[start : start + size]
                if start < len(pending):
                    parts.append(pending[start:])
                    self._buffered += len(pending) - start
                self._pending = ""
            if self._done:
                if not parts:
                    raise StopAsyncIteration
                chunk = "".join(parts)
                parts.clear()
                self._buffered = 0
                return chunk
            try:
                text = await self._source.__anext__()
            except StopAsyncIteration:
                self._done = True
                continue
            missing = size - self._buffered
            if len(text) < missing:
                if text:
                    parts.append(text)
                    self._buffered += len(text)
                continue
            if not parts:
                # Nothing buffered: a piece of exactly size goes through as it is.
                self._pending, self._offset = text, 0
                continue
            parts.append(text[:missing])
            chunk = "".join(parts)
            parts.clear()
            self._buffered = 0
            self._pending, self._offset = text, missing
            return chunk
