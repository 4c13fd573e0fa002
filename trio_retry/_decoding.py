"""Content decoding, streaming and bounded: gzip and deflate always, ``br`` and ``zstd`` with
their extras.

``Accept-Encoding`` lists only what this process can decode (:data:`ACCEPT_ENCODING`):
``gzip, deflate``, then ``br`` when the ``brotli`` extra (the Brotli package, or brotlicffi)
is installed, then ``zstd`` when the standard library has ``compression.zstd`` (3.14+) or the
``zstd`` extra (``backports.zstd``, the same module for older Pythons) is installed.

A body coded several times (``Content-Encoding: gzip, br``) is undone in reverse order, one
step feeding the next. Every step is asked for at most :data:`CHUNK_SIZE` bytes at a time, so
one network read of a decompression bomb never becomes more than one bounded chunk in memory:
:meth:`Decoder.decode` is a generator, and the limit (``max_body_bytes``) is checked on each
chunk it yields. ``zstandard`` was rejected for zstd because its incremental decompressor
cannot bound its output (``decompressobj().decompress`` returns all of it).

A coding the server used that cannot be decoded here (``br`` without the extra) is reported on
the first decoded read, naming the extra; the raw body stays readable with ``aiter_raw()``.
Codings nobody asked for and that we do not know (``compress``...) are passed through.
"""

from __future__ import annotations

import importlib.util
import zlib
from collections.abc import Iterator
from types import ModuleType
from typing import Any, Protocol

__all__ = ["ACCEPT_ENCODING", "CHUNK_SIZE", "DecodeError", "Decoder", "make_decoder"]

#: The most a decoding step returns at once (and so the largest decoded chunk).
CHUNK_SIZE = 65536
#: RFC 9659 §3: a zstd content coding uses a window of at most 8 MiB (2**23).
_ZSTD_WINDOW_LOG_MAX = 23


_BROTLI_MODULES = ("brotli", "brotlicffi")
_ZSTD_MODULES = ("compression.zstd", "backports.zstd")


class _NotLoaded:
    """The decoder modules' value before their first use (``None``: not installed)."""


_NOT_LOADED = _NotLoaded()

# Loaded on the first body that needs them, not at import: backports.zstd and Brotli cost ~2 ms
# of every program's start-up, and most responses are identity or gzip. Until then
# available_encodings() asks the import system whether they are installed (find_spec), which
# imports nothing but a namespace package's parent ("backports").
_brotli: ModuleType | _NotLoaded | None = _NOT_LOADED
_zstd: ModuleType | _NotLoaded | None = _NOT_LOADED


def _load_brotli() -> ModuleType | None:
    for name in _BROTLI_MODULES:
        try:
            module = __import__(name)
        except ImportError:
            continue
        if hasattr(module, "Decompressor"):
            return module
    return None


def _load_zstd() -> ModuleType | None:
    for name in _ZSTD_MODULES:
        try:
            module = __import__(name, fromlist=["ZstdDecompressor"])
        except ImportError:
            continue
        return module
    return None


def _brotli_module() -> ModuleType | None:
    global _brotli
    if isinstance(_brotli, _NotLoaded):
        _brotli = _load_brotli()
    return _brotli


def _zstd_module() -> ModuleType | None:
    global _zstd
    if isinstance(_zstd, _NotLoaded):
        _zstd = _load_zstd()
    return _zstd


def _installed(module: ModuleType | _NotLoaded | None, names: tuple[str, ...]) -> bool:
    """Whether a decoder module is there: known once loaded, else found without importing it.

    A module that is found but fails to import (a broken install) is advertised all the same;
    its first body then fails as a missing extra does, naming the extra.
    """
    if not isinstance(module, _NotLoaded):
        return module is not None
    for name in names:
        try:
            if importlib.util.find_spec(name) is not None:
                return True
        except (ImportError, ValueError):  # no parent package ("compression" before 3.14),
            continue  # or a module in sys.modules without a spec (ValueError)
    return False


#: What each coding needs when it is not built in: (the extra, what it installs).
_EXTRAS = {"br": ("brotli", "Brotli"), "zstd": ("zstd", "backports.zstd")}
_KNOWN = frozenset({"gzip", "x-gzip", "deflate", "br", "zstd"})


def available_encodings() -> list[str]:
    """The codings this process can decode, in the order they are advertised."""
    names = ["gzip", "deflate"]
    if _installed(_brotli, _BROTLI_MODULES):
        names.append("br")
    if _installed(_zstd, _ZSTD_MODULES):
        names.append("zstd")
    return names


ACCEPT_ENCODING = ", ".join(available_encodings())


class DecodeError(Exception):
    """The body does not decode as its Content-Encoding says, exceeds the size limit, or uses
    a coding whose extra is not installed."""


class _Step(Protocol):
    def feed(self, data: bytes) -> Iterator[bytes]: ...

    def finish(self) -> Iterator[bytes]: ...


class _Zlib:
    """gzip (any number of members) or deflate (zlib-wrapped, or raw as some servers send)."""

    __slots__ = ("_d", "_gzip", "_probe", "_seen")

    def __init__(self, gzip: bool) -> None:
        self._gzip = gzip
        self._probe = not gzip  # deflate: zlib-wrapped per RFC 9110, raw tolerated
        self._seen = False
        self._d = zlib.decompressobj(16 + zlib.MAX_WBITS if gzip else zlib.MAX_WBITS)

    def feed(self, data: bytes) -> Iterator[bytes]:
        while True:
            try:
                out = self._d.decompress(data, CHUNK_SIZE)
            except zlib.error as exc:
                if self._probe and not self._seen:
                    self._probe = False
                    self._d = zlib.decompressobj(-zlib.MAX_WBITS)
                    continue
                raise DecodeError(f"the body is not valid {self._name}: {exc}") from exc
            self._seen = self._seen or bool(data or out)
            if out:
                yield out
            data = self._d.unconsumed_tail
            if self._gzip and self._d.eof and self._d.unused_data:
                # Another gzip member follows (RFC 1952 allows several).
                data = self._d.unused_data
                self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                continue
            if not data and len(out) < CHUNK_SIZE:
                return

    def finish(self) -> Iterator[bytes]:
        yield from self.feed(b"")
        if self._seen and not self._d.eof:
            raise DecodeError(f"the {self._name} body ended before its end marker")

    @property
    def _name(self) -> str:
        return "gzip" if self._gzip else "deflate"


class _Brotli:
    __slots__ = ("_d",)

    def __init__(self, module: Any) -> None:
        self._d = module.Decompressor()

    def _process(self, data: bytes) -> bytes:
        try:
            # The output buffer stops growing once it reaches the limit (so it may pass it by
            # one growth step: _pieces() cuts that to size).
            out: bytes = self._d.process(data, output_buffer_limit=CHUNK_SIZE)
        except Exception as exc:  # brotli.error / brotlicffi.error: no common base to name
            raise DecodeError(f"the body is not valid br (brotli): {exc}") from exc
        return out

    def feed(self, data: bytes) -> Iterator[bytes]:
        if data:
            if self._d.is_finished():
                raise DecodeError("the br (brotli) body has data after its end")
            yield from _pieces(self._process(data))
        while not self._d.can_accept_more_data():
            yield from _pieces(self._process(b""))

    def finish(self) -> Iterator[bytes]:
        while not self._d.is_finished():
            out = self._process(b"")
            if not out:
                break
            yield from _pieces(out)
        if not self._d.is_finished():
            raise DecodeError("the br (brotli) body ended before its end marker")


def _pieces(out: bytes) -> Iterator[bytes]:
    for start in range(0, len(out), CHUNK_SIZE):
        yield out[start : start + CHUNK_SIZE]


class _Zstd:
    """One or more zstd frames (RFC 8878), window bounded as RFC 9659 asks."""

    __slots__ = ("_d", "_module", "_seen")

    def __init__(self, module: Any) -> None:
        self._module = module
        self._seen = False
        self._d = self._new()

    def _new(self) -> Any:
        param = self._module.DecompressionParameter.window_log_max
        return self._module.ZstdDecompressor(options={param: _ZSTD_WINDOW_LOG_MAX})

    def feed(self, data: bytes) -> Iterator[bytes]:
        while True:
            if self._d.eof:  # a frame ended: what follows starts the next one
                data = self._d.unused_data + data
                if not data:
                    return
                self._d = self._new()
            if not data and self._d.needs_input:
                return
            self._seen = self._seen or bool(data)
            try:
                out: bytes = self._d.decompress(data, CHUNK_SIZE)
            except self._module.ZstdError as exc:
                raise DecodeError(f"the body is not valid zstd: {exc}") from exc
            data = b""
            if out:
                yield out

    def finish(self) -> Iterator[bytes]:
        yield from self.feed(b"")
        if self._seen and not self._d.eof:
            raise DecodeError("the zstd body ended before the end of its frame")


class _Missing:
    """A coding whose extra is not installed: fails on first use, naming the extra."""

    __slots__ = ("_encoding",)

    def __init__(self, encoding: str) -> None:
        self._encoding = encoding

    def _fail(self) -> DecodeError:
        extra, package = _EXTRAS[self._encoding]
        return DecodeError(
            f"the response is encoded with {self._encoding!r}, which needs the {extra!r} extra "
            f"({package}): pip install 'trio_retry[{extra}]'; the undecoded body is available "
            "with client.stream(...) and aiter_raw()"
        )

    def feed(self, data: bytes) -> Iterator[bytes]:
        raise self._fail()
        yield b""  # pragma: no cover - makes this a generator

    def finish(self) -> Iterator[bytes]:
        raise self._fail()
        yield b""  # pragma: no cover - makes this a generator


def _step(encoding: str) -> _Step:
    if encoding in ("gzip", "x-gzip"):
        return _Zlib(gzip=True)
    if encoding == "deflate":
        return _Zlib(gzip=False)
    if encoding == "br":
        brotli = _brotli_module()
        return _Brotli(brotli) if brotli is not None else _Missing(encoding)
    zstd = _zstd_module()
    return _Zstd(zstd) if zstd is not None else _Missing(encoding)


class Decoder:
    """Decodes one body incrementally; ``limit`` bounds the decoded total (None: unbounded).

    Both methods are generators of chunks of at most :data:`CHUNK_SIZE` bytes; one raising
    :class:`DecodeError` leaves the decoder unusable.
    """

    __slots__ = ("_limit", "_steps", "_total", "encodings")

    def __init__(self, encodings: list[str], limit: int | None) -> None:
        self.encodings = encodings
        self._limit = limit
        self._total = 0
        # The coding applied last is undone first.
        self._steps = [_step(encoding) for encoding in reversed(encodings)]

    def _through(self, index: int, chunks: Iterator[bytes]) -> Iterator[bytes]:
        if index == len(self._steps):
            for chunk in chunks:
                self._total += len(chunk)
                if self._limit is not None and self._total > self._limit:
                    raise DecodeError(
                        f"the decoded response body exceeds max_body_bytes ({self._limit} "
                        "bytes): possibly a decompression bomb"
                    )
                yield chunk
            return
        step = self._steps[index]
        for chunk in chunks:
            yield from self._through(index + 1, step.feed(chunk))

    def decode(self, data: bytes) -> Iterator[bytes]:
        """The decoded chunks for one received chunk (possibly none while a step buffers)."""
        return self._through(0, iter((data,)))

    def finish(self) -> Iterator[bytes]:
        """Whatever is left at the end of the body; raises if the body was cut short."""
        for index, step in enumerate(self._steps):
            yield from self._through(index + 1, step.finish())

    def decode_all(self, data: bytes) -> bytes:
        """A whole body at once (buffered calls): bounded by the limit, not by chunks."""
        return b"".join([*self.decode(data), *self.finish()])


def make_decoder(content_encoding: str | None, limit: int | None) -> Decoder | None:
    """A decoder for a ``Content-Encoding`` value, or ``None`` when the body is not encoded
    (or uses a coding we do not know, which is then passed through undecoded)."""
    if not content_encoding:
        return None
    encodings = [e.strip().lower() for e in content_encoding.split(",") if e.strip()]
    encodings = [e for e in encodings if e != "identity"]
    if not encodings or any(e not in _KNOWN for e in encodings):
        return None
    return Decoder(encodings, limit)
