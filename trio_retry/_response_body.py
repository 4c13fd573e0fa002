"""Reading a response's body: the buffered ``content``, a streamed body's chunks (decoded,
raw, as text, as lines), and the close that ends a streamed one (SPEC §2, §17, §20).

A mixin of :class:`~trio_retry.Response`, which holds the state (``_content``: the buffered or
read body; ``_stream``: a streamed body, the client's ``StreamedBody``; ``_consumed``: whether
it was handed out once). A streamed body closed before its end (its ``stream()`` block
exited, ``aclose()``, a redirect followed) raises :class:`StreamClosed` from every way of
reading it, with one message saying what closed it: never an empty body in its place.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol, cast

from ._core.errors import StreamClosed
from ._rechunk import Rechunked, TextRechunked, check_chunk_size
from ._streams import BodyDecoder, Chunks, Decoded, Lines, Text

__all__ = ["ResponseBody"]


class _Counted(Protocol):
    resumed: int


#: The ``StreamClosed`` message of a body read after ``Response.aclose()``.
_ACLOSED = (
    "this streamed body was closed by `await response.aclose()` before it was read to the end"
)


class ResponseBody:
    """The body-reading half of :class:`~trio_retry.Response` (see the module). No
    ``__slots__``: ``Response`` keeps its state in its ``__dict__``."""

    #: The raw length of a buffered body that was decoded (``num_bytes_downloaded``), set by
    #: the client; ``None``: the raw body is ``content`` itself.
    _downloaded: int | None = None
    #: What counts the continuations of a body broken mid-way (``_call/resume.py``), set by
    #: the client; ``None``: none.
    _continuation: _Counted | None = None

    if TYPE_CHECKING:
        _content: bytes | None
        _stream: AsyncIterator[bytes] | None
        _decoder: BodyDecoder | None
        _consumed: bool

        @property
        def encoding(self) -> str: ...

    @property
    def content(self) -> bytes:
        """The whole body. For a streamed response, only after ``await response.aread()``
        (before: ``RuntimeError``; after the body was closed unread: :class:`StreamClosed`)."""
        if self._content is None:
            closed = self._closed_by()
            if closed is not None:
                raise StreamClosed(closed)
            if self._consumed:
                raise RuntimeError(
                    "the body of this streamed response was iterated, not kept: read it with "
                    "`await response.aread()` (instead of iterating) to have it as .content"
                )
            raise RuntimeError(
                "the body of a streamed response has not been read; call "
                "`await response.aread()` or iterate `response.aiter_bytes()`"
            )
        return self._content

    @property
    def resumed(self) -> int:
        """How many times the body was continued after it broke mid-way (SPEC §18: a range
        request for the rest, spliced only when the server sent the same representation):
        ``0`` for a body that arrived in one piece. A streamed body's grows as it is read.
        Each continuation is an attempt in ``attempts`` (its ``range_start`` set)."""
        continuation = self._continuation
        return 0 if continuation is None else continuation.resumed

    @property
    def num_bytes_downloaded(self) -> int:
        """The body's bytes received so far as they came (before ``Content-Encoding`` is
        undone), as in httpx: a streamed body's grow as it is read."""
        stream = self._stream
        if stream is not None:
            return cast(int, getattr(stream, "received", 0))
        downloaded = self._downloaded
        if downloaded is not None:
            return downloaded
        return len(self._content) if self._content is not None else 0

    def _closed_by(self) -> str | None:
        """Why a streamed body was closed before its end (``None``: it was not)."""
        return cast("str | None", getattr(self._stream, "closed_by", None))

    async def aclose(self) -> None:
        """Close a streamed body now, read or not (httpx's name): its connection goes back
        to the pool if the body was read to its end and is closed otherwise (an HTTP/2 or
        HTTP/3 stream is reset), and its permit is given back; reading on raises
        :class:`StreamClosed`. Nothing to do for a buffered response or a closed body. The
        ``stream()`` block's exit does the same. The closing is done before the checkpoint,
        so a cancelled ``aclose()`` has still closed the body."""
        close = getattr(self._stream, "close", None)
        if close is not None:
            close(_ACLOSED)
        import trio  # (loaded by then: the client runs on it)

        await trio.lowlevel.checkpoint()

    def aiter_text(self, chunk_size: int | None = None) -> AsyncIterator[str]:
        """The decoded body (``aiter_bytes()``) as text, in chunks, decoded incrementally with
        ``encoding`` (the ``Content-Type`` charset, else UTF-8); undecodable bytes become
        U+FFFD. A character split across network reads comes out whole. Same consumption rules
        as ``aiter_bytes()``.

        ``chunk_size=N`` (a positive ``int``): every chunk is exactly ``N`` characters (not
        bytes, as in httpx) but the last, which is shorter and never empty; ``None``: chunks
        as they are decoded. A bad ``chunk_size`` raises ``TypeError``/``ValueError`` here."""
        size = check_chunk_size(chunk_size)
        text = Text(self.aiter_bytes(), self.encoding)
        return text if size is None else TextRechunked(text, size)

    def aiter_lines(self) -> AsyncIterator[str]:
        """The text body line by line, without line endings (``\\n``, ``\\r\\n`` or ``\\r``,
        also when split across chunks): for NDJSON and server-sent events."""
        return Lines(self.aiter_text())

    def aiter_bytes(self, chunk_size: int | None = None) -> AsyncIterator[bytes]:
        """The body, decoded (``Content-Encoding``), in chunks: for streamed calls as they
        arrive (a network read that inflates a lot comes out in chunks of at most 64 KiB), for
        buffered ones the whole ``content`` in one chunk. An empty body gives no chunk.

        ``chunk_size=N`` (a positive ``int``): every chunk is exactly ``N`` bytes but the last,
        which is shorter and never empty, for streamed and buffered calls alike. At most about
        ``N`` bytes are held besides the network read being cut up; the body is never gathered
        whole. ``None``: the chunks as above. A bad ``chunk_size`` raises ``TypeError`` (not an
        ``int``) or ``ValueError`` (not positive) here, not at the first chunk.

        A plain iterator, not an async generator: leaving an ``async for`` early leaves nothing
        to be finalised later; the ``client.stream()`` block closes the connection, and a step
        after it raises :class:`StreamClosed` (a body not read to its end). A cancelled
        step of a streamed body gives its connection up (an HTTP/2 stream is reset): the next
        step raises ``ConnectionBroken`` (``PARTIAL_RESPONSE``), with or without ``chunk_size``.
        """
        size = check_chunk_size(chunk_size)
        content = self._content
        if content is not None:
            chunks = Chunks([content] if content else [])
            # Cut through a memoryview: the content is not copied whole again.
            return chunks if size is None else Rechunked(chunks, size)
        raw = self.aiter_raw()
        decoded = raw if self._decoder is None else Decoded(raw, self._decoder)
        return decoded if size is None else Rechunked(decoded, size)

    def aiter_raw(self, chunk_size: int | None = None) -> AsyncIterator[bytes]:
        """The body as it came off the wire, not decoded (streamed calls only; a buffered
        response, or a streamed body already iterated, raises ``RuntimeError``; one closed
        before its end, :class:`StreamClosed`).

        ``chunk_size=N`` (a positive ``int``): every chunk is exactly ``N`` bytes but the last,
        which is shorter and never empty, holding at most about ``N`` bytes besides the network
        read being cut up; ``None``: chunks as they arrive. A bad ``chunk_size`` raises
        ``TypeError``/``ValueError`` here, before the body is touched."""
        size = check_chunk_size(chunk_size)
        closed = self._closed_by()
        if closed is not None:
            raise StreamClosed(closed)
        if self._stream is None or self._consumed:
            raise RuntimeError(
                "the response body has already been consumed (aiter_raw() is for streamed "
                "responses; a buffered response has .content)"
            )
        self._consumed = True
        return self._stream if size is None else Rechunked(self._stream, size)

    async def aread(self) -> bytes:
        """Read the rest of a streamed body and keep it as ``content`` (:class:`StreamClosed`
        if it was closed before its end). Cancelled, nothing is kept: the cancelled step gave
        the connection up, as in :meth:`aiter_bytes`."""
        if self._content is None:
            chunks = [chunk async for chunk in self.aiter_bytes()]
            self._content = b"".join(chunks)
        return self._content
