"""HPACK coders that remember the header blocks which left their tables as they were.

An HPACK block is a pure function of the header list and the dynamic table (RFC 7541 §2.3), and
decoding is a pure function of the block and the table. A block that neither adds a table entry
nor resizes the table leaves the table as it found it, so while the table stays unchanged the
same input gives the same output again. On a keep-alive connection that is the usual case:

- a request's fields are indexed once (the first request adds ``:authority``, ``:path``,
  ``user-agent`` and the rest to the table); from the second request to the same URL on, every
  field is an index into an unchanged table and the block's bytes repeat;
- nginx keeps its table empty (it sets the size to 0), so every response field is a literal
  and the responses to one resource repeat byte for byte until the ``date`` changes.

:class:`MemoEncoder` and :class:`MemoDecoder` are hpack's own coders (they subclass
``hpack.Encoder`` and ``hpack.Decoder``, and a block not seen before is coded by hpack itself).
They keep each result with the state of the table it was coded against, and give a kept result
again only while the table is unchanged. Each table counts the calls that changed it
(:class:`CountedTable`: an added entry, a resize, an eviction; hpack changes a table through
nothing else), and the first call after a change forgets everything kept, so a result kept by a
block that itself changed the table is never used. A decoder's limits
(``max_header_list_size``, ``max_allowed_table_size``) decide whether a block is refused, so
changing one forgets everything too. A refused block is never kept. What a kept result saves is
the work, never a check: the same bytes are sent and the same header list is delivered as hpack
would have produced (differential property tests in ``tests/wire/test_hpack_memo.py``).

Memory is bounded: at most :data:`MAX_KEPT` results per coder, each of a block of at most
:data:`MAX_BLOCK` bytes; when full, the coder forgets them all and starts again.

The connection decodes with :class:`ConnectionDecoder`, which refuses what :class:`MemoDecoder`
refuses, as the connection error RFC 9113 §4.3 names: ``COMPRESSION_ERROR``. (h2 wraps hpack's
refusal in a ``ProtocolError`` of code PROTOCOL_ERROR, and the connection's GOAWAY said so; an
h2 ``ProtocolError`` raised by the decoder passes through h2 as it is, with its code.)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import hpack
from h2.errors import ErrorCodes
from h2.exceptions import ProtocolError
from hpack.hpack import DEFAULT_MAX_HEADER_LIST_SIZE
from hpack.table import HeaderTable, table_entry_size

__all__ = [
    "MAX_BLOCK",
    "MAX_KEPT",
    "CompressionError",
    "ConnectionDecoder",
    "CountedTable",
    "MemoDecoder",
    "MemoEncoder",
]

#: Results kept per coder before it forgets them all.
MAX_KEPT = 32
#: The largest block (encoded bytes) whose result is kept.
MAX_BLOCK = 4096


class CountedTable(HeaderTable):
    """hpack's header table, counting in :attr:`changes` the calls that changed it.

    hpack changes a table only through ``add`` and the ``maxsize`` setter. An ``add`` changes
    it unless the entry is larger than the table and the table is empty already (hpack then
    clears an empty table: nginx, whose table size is 0, indexes its ``server`` field so on
    every response). The setter changes it when the size, the ``resized`` flag (a size update
    the encoder still owes) or the entries (evictions) change.
    """

    def __init__(self) -> None:
        super().__init__()
        self.changes = 0

    def add(self, name: bytes, value: bytes) -> None:
        if self.dynamic_entries or table_entry_size(name, value) <= self._maxsize:
            self.changes += 1
        super().add(name, value)

    @property
    def maxsize(self) -> int:
        return self._maxsize

    @maxsize.setter
    def maxsize(self, newmax: int) -> None:
        before = (self._maxsize, self.resized, len(self.dynamic_entries))
        HeaderTable.maxsize.fset(self, newmax)  # type: ignore[attr-defined]
        if (self._maxsize, self.resized, len(self.dynamic_entries)) != before:
            self.changes += 1


class MemoEncoder(hpack.Encoder):
    """``hpack.Encoder`` that returns a block's bytes again, without encoding, for the same
    header list (same fields, same tuple types, same ``huffman``) while its table is unchanged
    since the block was encoded and the encoding changed nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.header_table: CountedTable = CountedTable()
        self._kept: dict[tuple[Any, ...], bytes] = {}
        self._kept_at = 0

    def encode(self, headers: Any, huffman: bool = True) -> bytes:
        """As ``hpack.Encoder.encode``; a list of tuples may be answered from what is kept."""
        table = self.header_table
        if type(headers) is not list or table.resized:
            return super().encode(headers, huffman)
        kept = self._kept
        if self._kept_at != table.changes:
            kept.clear()
            self._kept_at = table.changes
        # Tuple equality ignores the tuple's type, and a NeverIndexedHeaderTuple encodes
        # differently from a plain tuple with the same fields: the types are part of the key.
        key = (huffman, tuple(headers), tuple(map(type, headers)))
        block = kept.get(key)
        if block is not None:
            return block
        block = super().encode(headers, huffman)
        # Kept even if this encoding changed the table: the next call then forgets it.
        if len(block) <= MAX_BLOCK:
            if len(kept) >= MAX_KEPT:
                kept.clear()
            kept[key] = block
        return block


class MemoDecoder(hpack.Decoder):
    """``hpack.Decoder`` that returns a block's header list again, without decoding, for the
    same bytes while its table and limits are unchanged since the block was decoded and the
    decoding changed nothing. A block hpack refused is never kept: it is refused again."""

    def __init__(self, max_header_list_size: int = DEFAULT_MAX_HEADER_LIST_SIZE) -> None:
        self._kept: dict[tuple[bytes, bool], list[Any]] = {}
        self._limits = 0
        self._kept_at = (0, 0)
        super().__init__(max_header_list_size)
        self.header_table: CountedTable = CountedTable()

    @property
    def max_header_list_size(self) -> int:
        return self._max_header_list_size

    @max_header_list_size.setter
    def max_header_list_size(self, value: int) -> None:
        self._limits += 1
        self._max_header_list_size = value

    @property
    def max_allowed_table_size(self) -> int:
        return self._max_allowed_table_size

    @max_allowed_table_size.setter
    def max_allowed_table_size(self, value: int) -> None:
        self._limits += 1
        self._max_allowed_table_size = value

    def decode(self, data: bytes, raw: bool = False) -> Iterable[hpack.HeaderTuple]:
        """As ``hpack.Decoder.decode``; a block seen before may be answered from what is kept
        (a new list of the same header tuples)."""
        kept = self._kept
        state = (self.header_table.changes, self._limits)
        if self._kept_at != state:
            kept.clear()
            self._kept_at = state
        if type(data) is not bytes:
            data = bytes(data)
        key = (data, raw)
        headers = kept.get(key)
        if headers is not None:
            return list(headers)
        decoded = self._decode_new(data, raw)
        # Kept even if this decoding changed the table: the next call then forgets it.
        if len(data) <= MAX_BLOCK:
            if len(kept) >= MAX_KEPT:
                kept.clear()
            kept[key] = decoded
            return list(decoded)
        return decoded

    def _decode_new(self, data: bytes, raw: bool) -> list[hpack.HeaderTuple]:
        """A block not kept, decoded by hpack (a block answered from what is kept was decoded
        so once, and raises nothing)."""
        return list(super().decode(data, raw))


class CompressionError(ProtocolError):
    """A field block that does not decode: a connection error COMPRESSION_ERROR (RFC 9113
    §4.3)."""

    error_code = ErrorCodes.COMPRESSION_ERROR


class ConnectionDecoder(MemoDecoder):
    """The connection's decoder: :class:`MemoDecoder`, whose refusal of a block is a
    :class:`CompressionError` (see the module docstring). A head over the header list limit
    stays hpack's ``OversizedHeaderListError``, which h2 reports as a head too large."""

    def _decode_new(self, data: bytes, raw: bool) -> list[hpack.HeaderTuple]:
        try:
            return super()._decode_new(data, raw)
        except hpack.OversizedHeaderListError:
            raise
        except (hpack.HPACKError, IndexError, TypeError, UnicodeDecodeError) as exc:
            raise CompressionError(f"Error decoding header block: {exc}") from exc
