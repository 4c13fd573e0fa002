"""The body streams behind a :class:`~trio_retry.Response`: chunks already in memory, bytes
decoded from their ``Content-Encoding`` in bounded chunks, text decoded incrementally, and
lines split on any of ``\n``, ``\r\n`` and ``\r`` (also across chunks)."""

from __future__ import annotations

import codecs
import re
from collections.abc import AsyncIterator, Iterator
from typing import Protocol

__all__ = ["BodyDecoder", "Chunks", "Decoded", "Lines", "Text"]

_LINE_BREAKS = re.compile(r"\r\n|\r|\n")


class Chunks:
    """An async iterator over chunks already in memory."""

    __slots__ = ("_chunks",)

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    def __aiter__(self) -> Chunks:
        return self

    async def __anext__(self) -> bytes:
        if not self._chunks:
            raise StopAsyncIteration
        return self._chunks.pop(0)


class BodyDecoder(Protocol):
    """What :class:`Decoded` needs of a decoder (``trio_retry._decoding.Decoder``, or the
    client's wrapper that reports its errors as broken bodies): bounded chunks per step."""

    def decode(self, data: bytes) -> Iterator[bytes]: ...

    def finish(self) -> Iterator[bytes]: ...


class Decoded:
    """Decodes a raw chunk stream on the fly (see ``trio_retry._decoding``), one bounded
    chunk per step: a network read that inflates a lot is handed out over several steps."""

    __slots__ = ("_decoder", "_done", "_pending", "_raw")

    def __init__(self, raw: AsyncIterator[bytes], decoder: BodyDecoder) -> None:
        self._raw = raw
        self._decoder = decoder
        self._pending: Iterator[bytes] | None = None
        self._done = False

    def __aiter__(self) -> Decoded:
        return self

    async def __anext__(self) -> bytes:
        while True:
            if self._pending is not None:
                try:
                    chunk = next(self._pending, None)
                except BaseException:
                    self._pending, self._done = None, True
                    raise
                if chunk is not None:
                    return chunk
                self._pending = None
            if self._done:
                raise StopAsyncIteration
            try:
                raw = await self._raw.__anext__()
            except StopAsyncIteration:
                self._done = True
                self._pending = self._decoder.finish()
                continue
            self._pending = self._decoder.decode(raw)


class Text:
    """Decoded text chunks from byte chunks: one incremental decoder, so a character split
    across two chunks comes out whole."""

    __slots__ = ("_bytes", "_decoder", "_done")

    def __init__(self, chunks: AsyncIterator[bytes], encoding: str) -> None:
        self._bytes = chunks
        self._decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
        self._done = False

    def __aiter__(self) -> Text:
        return self

    async def __anext__(self) -> str:
        while not self._done:
            try:
                chunk = await self._bytes.__anext__()
            except StopAsyncIteration:
                self._done = True
                tail: str = self._decoder.decode(b"", final=True)
                if tail:
                    return tail
                break
            text: str = self._decoder.decode(chunk)
            if text:
                return text
        raise StopAsyncIteration


class Lines:
    """Lines (without their ending) from text chunks. ``\n``, ``\r\n`` and ``\r`` each end a
    line; a ``\r`` at the end of a chunk is held until the next chunk shows whether a ``\n``
    follows, so a ``\r\n`` split across chunks is one line break."""

    __slots__ = ("_buffer", "_done", "_ready", "_text")

    def __init__(self, text: AsyncIterator[str]) -> None:
        self._text = text
        self._buffer = ""
        self._ready: list[str] = []
        self._done = False

    def __aiter__(self) -> Lines:
        return self

    async def __anext__(self) -> str:
        while not self._ready:
            if self._done:
                raise StopAsyncIteration
            try:
                chunk = await self._text.__anext__()
            except StopAsyncIteration:
                self._done = True
                if self._buffer:
                    # A final "\r" ends the last line; anything else is an unterminated line.
                    self._ready.append(self._buffer.removesuffix("\r"))
                    self._buffer = ""
                continue
            buffer = self._buffer + chunk
            # Hold a trailing "\r": it may be the first half of "\r\n".
            held = buffer.endswith("\r")
            if held:
                buffer = buffer[:-1]
            lines = _LINE_BREAKS.split(buffer)
            self._buffer = lines.pop() + ("\r" if held else "")
            self._ready.extend(lines)
        return self._ready.pop(0)
