"""Where the command line's bytes come from and go to: request bodies, output sinks, progress.

The response body is written as it arrives, chunk by chunk, so memory stays bounded whatever
its size: as bytes to a file (``-o``) or to stdout, and as text only when stdout is a terminal
and the content type is textual. Writes are plain blocking writes: the command runs one call,
and nothing else in its Trio run needs the thread while a chunk is written.
"""

from __future__ import annotations

import codecs
import os
import re
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import BinaryIO, TextIO

import trio

from .. import Reopenable, Response
from .._models import redact_headers
from .progress import ProgressBar

__all__ = [
    "CHUNK",
    "Streams",
    "Sink",
    "file_body",
    "is_textual",
    "response_head",
    "stdin_body",
]

CHUNK = 65536
_TEXTUAL = re.compile(
    r"^(text/|application/(json|xml|javascript|ecmascript|x-www-form-urlencoded|x-ndjson)\b"
    r"|application/[\w.+-]*\+(json|xml)\b)",
    re.IGNORECASE,
)


def is_textual(content_type: str | None) -> bool:
    """Whether a Content-Type names text (``text/*``, JSON, XML, JavaScript, forms)."""
    return bool(content_type and _TEXTUAL.match(content_type.strip()))


@dataclass(frozen=True, slots=True)
class Streams:
    """The command's stdout and stderr, and whether each is a terminal."""

    out: TextIO
    err: TextIO

    @property
    def out_bytes(self) -> BinaryIO | None:
        """stdout's binary layer (``None`` for a text-only stream such as ``io.StringIO``)."""
        buffer = getattr(self.out, "buffer", None)
        return buffer if buffer is not None else None

    @staticmethod
    def _tty(stream: TextIO) -> bool:
        try:
            return stream.isatty()
        except (AttributeError, ValueError, OSError):
            return False

    @property
    def out_tty(self) -> bool:
        return self._tty(self.out)

    @property
    def err_tty(self) -> bool:
        return self._tty(self.err)

    def err_width(self) -> int:
        try:
            return os.get_terminal_size(self.err.fileno()).columns
        except (AttributeError, ValueError, OSError):
            return 80

    def progress(self, label: str, total: int | None) -> ProgressBar:
        return ProgressBar(self.err, label, total, time.monotonic(), width=self.err_width())


def response_head(response: Response, *, redact: bool = False) -> bytes:
    """The status line and headers as curl's ``-i`` writes them (CRLF, a blank line after).
    ``redact`` (``-v``, on stderr, the place of logs): ``Set-Cookie`` and the other credential
    values as ``[redacted]``, a ``Location`` as any URL shown (no userinfo nor query value);
    ``-i`` writes the head as received, as the response's data."""
    status = f"{response.http_version} {response.status} {response.reason}".rstrip()
    items = list(response.headers.multi_items())
    if redact:
        items = redact_headers(items)
    lines = [status] + [f"{name}: {value}" for name, value in items]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", errors="replace")


class Sink:
    """The body's destination: a file, stdout as bytes, or stdout as text on a terminal.

    ``write`` takes bytes as they arrive; ``close`` ends text output with a newline when the
    body lacked one (only on a terminal, where the prompt would otherwise follow the text).
    A binary body for a terminal is refused (``refused`` says so) and nothing is written.
    """

    def __init__(
        self,
        *,
        file: BinaryIO | None = None,
        binary: BinaryIO | None = None,
        text: TextIO | None = None,
        encoding: str = "utf-8",
        refused: bool = False,
    ) -> None:
        self._file = file
        self._binary = binary
        self._text = text
        self.refused = refused
        self._decoder: codecs.IncrementalDecoder | None = None
        if text is not None:
            try:
                self._decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
            except LookupError:
                self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._last = ""
        self.written = 0

    @classmethod
    def for_response(
        cls, response: Response, streams: Streams, output: str | None, *, append: bool = False
    ) -> Sink:
        """The sink ``-o`` and the terminal call for; opening ``-o FILE`` may raise OSError.
        ``append``: write after what ``-o FILE`` holds (``-C -``)."""
        if output is not None and output != "-":
            return cls(file=open(output, "ab" if append else "wb"))  # closed by close()
        binary = streams.out_bytes
        if output == "-" or not streams.out_tty:
            if binary is not None:
                return cls(binary=binary)
            return cls(text=streams.out, encoding="latin-1")  # a StringIO: bytes as latin-1
        content_type = response.headers.get("content-type")
        if not is_textual(content_type):
            return cls(text=streams.out, refused=True)
        return cls(text=streams.out, encoding=response.encoding)

    def write_head(self, head: bytes) -> None:
        if self.refused:
            assert self._text is not None
            self._text.write(head.decode("latin-1"))
            return
        self._put(head, decode=False)

    def write(self, chunk: bytes) -> None:
        if not self.refused:
            self.written += len(chunk)
            self._put(chunk, decode=True)

    def _put(self, data: bytes, *, decode: bool) -> None:
        if self._file is not None:
            self._file.write(data)
        elif self._binary is not None:
            self._binary.write(data)
        else:
            assert self._text is not None
            if decode and self._decoder is not None:
                text = self._decoder.decode(data)
            else:
                text = data.decode("latin-1")
            if text:
                self._text.write(text)
                self._last = text[-1]

    def close(self) -> None:
        """Flush, end a terminal's text with a newline, close a file; idempotent."""
        if self._file is not None:
            self._file.close()
            return
        if self._binary is not None:
            self._binary.flush()
            return
        assert self._text is not None
        if self._decoder is not None and not self.refused:
            rest = self._decoder.decode(b"", final=True)
            if rest:
                self._text.write(rest)
                self._last = rest[-1]
            self._decoder = None
            if self._last not in ("", "\n"):
                self._text.write("\n")
        self._text.flush()


def file_body(path: str, size: int, on_progress: Callable[[int, bool], None] | None) -> Reopenable:
    """The file as a body, read afresh in chunks for every attempt, with its length known (so
    it is sent with Content-Length). ``on_progress(bytes_so_far, finished)`` after each chunk."""

    async def chunks() -> AsyncIterator[bytes]:
        done = 0
        async with await trio.open_file(path, "rb") as file:
            while chunk := await file.read(CHUNK):
                done += len(chunk)
                if on_progress is not None:
                    on_progress(done, False)
                yield chunk
        if on_progress is not None:
            on_progress(done, True)

    return Reopenable(chunks, length=size)


async def stdin_body() -> AsyncIterator[bytes]:
    """stdin, chunk by chunk as it can be read (a one-shot body: never retried)."""
    read = getattr(sys.stdin.buffer, "read1", sys.stdin.buffer.read)  # what is there, now
    while chunk := await trio.to_thread.run_sync(read, CHUNK):
        yield chunk
