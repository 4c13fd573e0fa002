"""Reading response bodies, for buffered calls and for streamed ones.

A streamed body is read through a :class:`BodyReader`, chunk by chunk; a buffered one by
:func:`whole_body`, from one ``BodySource.receive_all`` call. Both raise the same error from the
same place (``_too_large``), so the same two rules hold for both:

- **one limit rule**: ``max_body_bytes`` (when set) bounds the raw bytes received *and* the
  decoded bytes produced (the decoder stops a decompression bomb at the limit); beyond either,
  the body fails with ``REMOTE_PROTOCOL``;
- **one decode rule**: a ``Content-Encoding`` the client offered is decoded (never for a
  response to HEAD); a decoding error is a ``REMOTE_PROTOCOL`` failure of the body.

A buffered call reads the whole body inside its attempt (:func:`whole_body`), so a failure there
is an ordinary attempt failure the loop judges. A streamed call hands the response over first;
a failure after that (:class:`StreamedBody`) is reported through ``on_break``, which turns it
into the public exception (``PARTIAL_RESPONSE``, never retried).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterator, Sequence

from .._core.errors import StreamClosed
from .._core.evidence import FailureCategory
from .._decoding import DecodeError, Decoder, make_decoder
from .._wire.clock import DeadlineBound, deadline_message
from .._wire.exchange import BodySource
from .._wire.progress import AttemptProgress, WireError

__all__ = [
    "BLOCK_CLOSED",
    "REDIRECT_CLOSED",
    "BodyReader",
    "CheckedDecoder",
    "StreamedBody",
    "decoder_for",
    "whole_body",
]


def decoder_for(
    method: str,
    headers: Sequence[tuple[bytes, bytes]],
    limit: int | None,
    encoded: bool | None = None,
) -> Decoder | None:
    """The decoder of a response's ``Content-Encoding`` (``None``: nothing to decode).
    ``encoded``: whether the head has such a field, when the wire looked
    (``WireResponse.encoded``; ``False`` spares the pass over the fields)."""
    if method == "HEAD" or encoded is False:
        return None
    # Every Content-Encoding field, in order (a coding list may span several fields).
    codings: list[str] = []
    for name, value in headers:  # (a loop, not a comprehension: one call fewer per response)
        if len(name) == 16 and name.lower() == b"content-encoding":  # (the length first: no call)
            codings.append(value.decode("latin-1"))
    return make_decoder(", ".join(codings), limit) if codings else None


class BodyReader:
    """Reads the raw chunks of one response body, enforcing ``max_body_bytes`` on them."""

    __slots__ = ("_hint", "_limit", "_received", "progress", "source")

    def __init__(
        self,
        source: BodySource,
        progress: AttemptProgress,
        limit: int | None,
        hint: str = "",
    ) -> None:
        self.source = source
        self.progress = progress
        self._limit = limit
        self._received = 0
        self._hint = hint

    async def next_chunk(self) -> bytes:
        """The next raw chunk (``b""`` at the end). Raises ``WireError`` when the body breaks,
        a read times out, or the body grows past the limit (the connection is then abandoned).
        """
        chunk = await self.source.receive_body(self.progress)
        limit = self._limit
        if limit is not None:
            self._received += len(chunk)
            if self._received > limit:
                raise _too_large(self.source, self.progress, limit, self._hint)
        return chunk


def _too_large(source: BodySource, progress: AttemptProgress, limit: int, hint: str) -> WireError:
    """The body grew past ``max_body_bytes``: the source is abandoned, and this is the error."""
    source.abandon()
    return WireError.at(
        progress,
        FailureCategory.REMOTE_PROTOCOL,
        f"the response body exceeds max_body_bytes ({limit} bytes)" + hint,
        ends_call=True,
    )


def whole_body(
    chunks: list[bytes],
    source: BodySource,
    progress: AttemptProgress,
    limit: int | None,
    decoder: Decoder | None,
    hint: str = "",
) -> bytes:
    """The whole body of a buffered call from ``source.receive_all(progress, limit)``'s
    chunks (awaited by the caller, in its own frame), decoded, under the rules of
    :class:`BodyReader` (the same limit, the same error). Raises ``WireError``."""
    raw = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    if limit is not None and len(raw) > limit:
        raise _too_large(source, progress, limit, hint)
    if decoder is None:
        return raw
    try:
        return decoder.decode_all(raw)
    except DecodeError as exc:
        raise WireError.at(progress, FailureCategory.REMOTE_PROTOCOL, str(exc),
                           ends_call=True) from exc  # fmt: skip


#: The ``StreamClosed`` messages: what closed a streamed body before its end.
BLOCK_CLOSED = (
    "this streamed body was closed when its `async with client.stream(...)` block exited, "
    "before it was read to the end: read it inside the block (`await response.aread()`, or "
    "`async for chunk in response.aiter_bytes()`)"
)
REDIRECT_CLOSED = (
    "the body of this redirect was closed when the client followed it: a followed redirect "
    "keeps only its head in response.history"
)

#: Turns a failure of a handed-over body into the exception the caller gets (and closes up).
OnBreak = Callable[[WireError], Exception]
#: Continues a handed-over body that broke (the error, the raw bytes received so far): the
#: reader of the rest and the offset of its first byte in the body (``0``: the body started
#: again), or it raises the exception the caller gets (``_call/resume.py``).
Resume = Callable[[WireError, int], Awaitable[tuple[BodyReader, int]]]


class StreamedBody:
    """The body of a streamed response: each chunk read inside the call deadline.

    ``on_end`` runs once the body was read to the end (the connection can be reused); a break
    raises what ``on_break`` returns; :meth:`close` stops it early. After any of them,
    iteration stops: with ``StopAsyncIteration`` after the end or a break, with
    :class:`StreamClosed` after an early :meth:`close` (the obvious way, stopping quietly,
    handed a caller who iterated after the ``stream()`` block an empty body as if it were the
    whole one, issue #38).
    ``limit``: the call's ``deadline=`` in seconds, for the message when it runs out.
    ``resume``: a break (other than one that ends the call, such as ``max_body_bytes``) is
    continued by it, and the iteration goes on with the reader it returns: one body to the
    caller, no byte repeated or missing; if it raises, the iteration ends with its exception.
    """

    __slots__ = (
        "_deadline",
        "_done",
        "_limit",
        "_on_break",
        "_on_close",
        "_on_end",
        "_reader",
        "_resume",
        "closed_by",
        "received",
    )

    def __init__(
        self,
        reader: BodyReader,
        deadline: float,
        on_end: Callable[[], None],
        on_break: OnBreak,
        on_close: Callable[[], None],
        *,
        limit: float = math.inf,
        resume: Resume | None = None,
    ) -> None:
        self._reader = reader
        self._resume = resume
        self._deadline = deadline
        self._limit = limit
        self._on_end = on_end
        self._on_break = on_break
        self._on_close = on_close
        self._done = False
        #: Why the body was closed before its end (the :class:`StreamClosed` message), or
        #: ``None``: open, read to its end, or broken.
        self.closed_by: str | None = None
        #: Raw body bytes received so far (``Response.num_bytes_downloaded``).
        self.received = 0

    def close(self, by: str | None = None) -> None:
        """Stop the body here and give its connection and permit back (``on_close``; the
        connection is closed unless the body was read to its end). ``by``: what closed it (a
        message saying so), for the :class:`StreamClosed` a later step raises if the body had
        not ended; ``None`` after its end or a break. Idempotent: the first reason stays."""
        if not self._done:
            self._done = True
            self.closed_by = by
        self._on_close()

    def __aiter__(self) -> StreamedBody:
        return self

    async def __anext__(self) -> bytes:
        if self._done:
            if self.closed_by is not None:
                raise StreamClosed(self.closed_by)
            raise StopAsyncIteration
        while True:
            reader = self._reader
            try:
                with DeadlineBound(None, self._deadline, reader.progress, None) as bound:
                    chunk = await reader.next_chunk()
                if bound.expired:
                    raise WireError.at(
                        reader.progress,
                        FailureCategory.TIMEOUT,
                        deadline_message(self._limit, reader.progress.stage),
                    )
            except WireError as exc:
                resume = self._resume
                if resume is None or exc.ends_call:
                    self._done = True
                    raise self._on_break(exc) from exc
                try:
                    self._reader, self.received = await resume(exc, self.received)
                except BaseException:
                    self._done = True
                    raise
                continue
            if not chunk:
                self._done = True
                self._on_end()
                raise StopAsyncIteration
            self.received += len(chunk)
            return chunk


class CheckedDecoder:
    """A streamed body's decoder, its errors reported like any other broken body. Both
    methods are generators of bounded chunks, like the decoder's own."""

    __slots__ = ("_decoder", "_on_break", "_progress")

    def __init__(self, decoder: Decoder, progress: AttemptProgress, on_break: OnBreak) -> None:
        self._decoder = decoder
        self._progress = progress
        self._on_break = on_break

    def _checked(self, chunks: Iterator[bytes]) -> Iterator[bytes]:
        try:
            yield from chunks
        except DecodeError as exc:
            error = WireError.at(self._progress, FailureCategory.REMOTE_PROTOCOL, str(exc))
            raise self._on_break(error) from exc

    def decode(self, chunk: bytes) -> Iterator[bytes]:
        return self._checked(self._decoder.decode(chunk))

    def finish(self) -> Iterator[bytes]:
        return self._checked(self._decoder.finish())
