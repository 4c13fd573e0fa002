"""The memoising HPACK coders give exactly what hpack's own give (``_wire/http2/hpack_memo.py``).

Each property runs one script of steps against a plain ``hpack`` coder and a memoising one side
by side, and compares every output (bytes, header lists, or the exception raised) and the
tables after every step. The scripts draw from a small pool of header lists, so blocks repeat
and the memos are hit, and they change what invalidates a kept result: table sizes, the
encoder's owed size update, the decoder's limits, never-indexed fields.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import h2.exceptions
import hpack
import pytest
from h2.errors import ErrorCodes
from hpack.table import HeaderTable
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_retry._wire.http2 import hpack_memo
from trio_retry._wire.http2.hpack_memo import (
    CompressionError,
    ConnectionDecoder,
    MemoDecoder,
    MemoEncoder,
)

_FIELDS = [
    (b":method", b"GET"),
    (b":path", b"/small"),
    (b":path", b"/other"),
    (b":authority", b"127.0.0.1:8443"),
    (b"user-agent", b"trio_retry/0.1"),
    (b"accept", b"*/*"),
    (b"authorization", b"Bearer s3cret"),
    (b"x-long", b"v" * 300),
    (b"x-huge", b"w" * 5000),  # larger than a 4096-byte table: hpack clears the table
]
_SIZES = [0, 64, 256, 1024, 4096]


def _table(table: HeaderTable) -> tuple[Any, ...]:
    return (table.maxsize, table.resized, list(table.dynamic_entries))


_header_list = st.lists(st.sampled_from(_FIELDS), min_size=1, max_size=5)
_encoder_step = st.one_of(
    # A list from the pool, its fields never-indexed where the mask's bit says so (the same
    # fields with other tuple types: a different block).
    st.tuples(
        st.just("encode"),
        st.sampled_from([0, 1, 2, 3]),
        st.sampled_from([0, 0, 1, 5]),
        st.sampled_from([True, True, False]),
    ),
    st.tuples(st.just("size"), st.sampled_from(_SIZES), st.just(0), st.just(True)),
)


def _masked(headers: list[tuple[bytes, bytes]], mask: int) -> list[tuple[bytes, bytes]]:
    return [
        hpack.NeverIndexedHeaderTuple(*field) if mask >> i & 1 else field
        for i, field in enumerate(headers)
    ]


@settings(max_examples=300, deadline=None)
@given(pool=st.lists(_header_list, min_size=4, max_size=4), steps=st.lists(_encoder_step))
def test_the_encoder_sends_what_hpack_sends(
    pool: list[list[tuple[bytes, bytes]]], steps: list[tuple[str, int, int, bool]]
) -> None:
    plain, memo = hpack.Encoder(), MemoEncoder()
    for kind, arg, mask, huffman in [*steps, *steps]:  # twice over: the second run repeats blocks
        if kind == "size":
            plain.header_table_size = arg
            memo.header_table_size = arg
        else:
            headers = _masked(pool[arg], mask)
            assert memo.encode(list(headers), huffman) == plain.encode(list(headers), huffman)
        assert _table(memo.header_table) == _table(plain.header_table)
        assert memo.table_size_changes == plain.table_size_changes


_decoder_step = st.one_of(
    # A block from the server's encoder, from the pool (blocks repeat: memo hits).
    st.tuples(st.just("block"), st.sampled_from([0, 1, 2, 3])),
    # The same bytes again (for a table that changed, a different meaning).
    st.tuples(st.just("again"), st.just(0)),
    # The server's encoder resizes its table (the next block says so).
    st.tuples(st.just("server-size"), st.sampled_from(_SIZES)),
    # Our limits change (as h2 does on a SETTINGS ACK).
    st.tuples(st.just("max-list"), st.sampled_from([64, 200, 65536])),
    st.tuples(st.just("max-table"), st.sampled_from(_SIZES)),
    # Bytes a broken server could send.
    st.tuples(st.just("garbage"), st.integers(0, 2**32)),
)


def _decode(decoder: hpack.Decoder, data: bytes) -> Any:
    try:
        return list(decoder.decode(data, raw=True))
    except hpack.HPACKError as exc:  # hpack refuses: both must refuse alike
        return type(exc)


@settings(max_examples=300, deadline=None)
@given(
    pool=st.lists(_header_list, min_size=4, max_size=4),
    steps=st.lists(_decoder_step),
    garbage=st.lists(st.binary(min_size=1, max_size=12), min_size=1, max_size=3),
)
def test_the_decoder_delivers_what_hpack_delivers(
    pool: list[list[tuple[bytes, bytes]]],
    steps: list[tuple[str, int]],
    garbage: list[bytes],
) -> None:
    server = hpack.Encoder()
    plain, memo = hpack.Decoder(), MemoDecoder()
    last = b"\x88"
    for kind, arg in [*steps, *steps]:
        if kind == "server-size":
            server.header_table_size = arg
            continue
        if kind == "max-list":
            plain.max_header_list_size = arg
            memo.max_header_list_size = arg
            continue
        if kind == "max-table":
            plain.max_allowed_table_size = arg
            memo.max_allowed_table_size = arg
            continue
        if kind == "block":
            last = server.encode(_masked(pool[arg], arg))
        elif kind == "garbage":
            last = garbage[arg % len(garbage)]
        got, want = _decode(memo, last), _decode(plain, last)
        assert got == want
        if isinstance(got, list):  # tuple equality ignores the type: never-indexed must stay so
            assert [type(h) for h in got] == [type(h) for h in want]
        assert _table(memo.header_table) == _table(plain.header_table)


def test_a_block_that_repeats_is_coded_once() -> None:
    """What the memo is for: the second identical request and response cost no coding."""
    headers = [(b":method", b"GET"), (b":path", b"/small"), (b"user-agent", b"trio_retry/0.1")]
    encoder = MemoEncoder()
    first = encoder.encode(list(headers))  # adds :path and user-agent to the table
    second = encoder.encode(list(headers))  # indexed now: the table is left unchanged
    with mock.patch.object(hpack.Encoder, "encode", side_effect=AssertionError):
        assert encoder.encode(list(headers)) == second != first
    # nginx: a table of size 0, the server field a literal "with incremental indexing".
    server = hpack.Encoder()
    server.header_table_size = 0
    response = [(b":status", b"200"), (b"server", b"nginx"), (b"date", b"Tue, 01 Dec 2026")]
    decoder = MemoDecoder()
    decoder.header_table_size = 0
    server.encode(list(response))  # the first block carries the size update
    block = server.encode(list(response))
    assert block[0] == 0x88  # :status 200, indexed
    assert block[1] & 0x40  # server: a literal "with incremental indexing"
    expected = list(hpack.Decoder().decode(block, raw=True))
    assert decoder.decode(block, raw=True) == expected
    with mock.patch.object(hpack.Decoder, "decode", side_effect=AssertionError):
        again = decoder.decode(block, raw=True)
    assert again == expected
    assert again is not decoder.decode(block, raw=True)  # a new list each time


def test_what_is_kept_is_bounded() -> None:
    encoder = MemoEncoder()
    for i in range(3 * hpack_memo.MAX_KEPT):
        headers = [(b":method", b"GET"), (b"x-n", str(i).encode())]
        encoder.encode(list(headers))  # first: adds x-n to the table
        encoder.encode(list(headers))  # second: kept
        assert len(encoder._kept) <= hpack_memo.MAX_KEPT
    big = [(b"x-big", b"~" * hpack_memo.MAX_BLOCK)]  # "~": 13 bits in Huffman
    encoder.header_table_size = 0  # nothing indexed: the block repeats, but is too large
    encoder.encode(list(big))
    encoder.encode(list(big))
    assert not encoder._kept


def test_a_never_indexed_field_is_not_sent_as_a_kept_indexed_one() -> None:
    plain, memo = hpack.Encoder(), MemoEncoder()
    for headers in (
        [(b":method", b"GET"), (b"authorization", b"Bearer x")],
        [(b":method", b"GET"), (b"authorization", b"Bearer x")],  # indexed: kept
        [(b":method", b"GET"), hpack.NeverIndexedHeaderTuple(b"authorization", b"Bearer x")],
    ):
        assert memo.encode(list(headers)) == plain.encode(list(headers))


def _kept_block(decoder: MemoDecoder) -> bytes:
    """A block the decoder has kept: the second of two identical ones (the first indexes)."""
    server = hpack.Encoder()
    headers = [(b":status", b"200"), (b"content-type", b"text/plain"), (b"x-a", b"b" * 40)]
    decoder.decode(server.encode(list(headers)), raw=True)
    block = server.encode(list(headers))
    decoder.decode(block, raw=True)
    assert decoder._kept
    return block


def test_a_lower_header_list_limit_refuses_a_kept_block() -> None:
    decoder = MemoDecoder()
    block = _kept_block(decoder)
    decoder.max_header_list_size = 64
    with pytest.raises(hpack.OversizedHeaderListError):
        decoder.decode(block, raw=True)


def test_a_lower_table_limit_refuses_a_kept_block() -> None:
    decoder = MemoDecoder()
    block = _kept_block(decoder)
    decoder.max_allowed_table_size = 1024  # below the table's 4096: the server must shrink it
    with pytest.raises(hpack.InvalidTableSizeError):
        decoder.decode(block, raw=True)


def test_an_entry_larger_than_the_table_forgets_what_was_kept() -> None:
    """hpack clears the whole table for an entry larger than it: kept indices are void."""
    plain, memo = hpack.Encoder(), MemoEncoder()
    small = [(b":method", b"GET"), (b"x-a", b"b")]
    for headers in (small, small, [(b"x-huge", b"w" * 5000)], small):
        assert memo.encode(list(headers)) == plain.encode(list(headers))


@pytest.mark.parametrize(
    "block",
    [
        pytest.param(b"\x40", id="literal-cut-short"),
        pytest.param(b"\xff\x49", id="index-beyond-the-tables"),
        pytest.param(b"\x3f\xe1\x3f\x88", id="table-size-above-the-limit"),
    ],
)
def test_the_connection_decoder_refuses_as_compression_error(block: bytes) -> None:
    """RFC 9113 §4.3: a block that does not decode is COMPRESSION_ERROR; raised as an h2
    ``ProtocolError`` so that h2 ends the connection with that code."""
    with pytest.raises(CompressionError) as info:
        ConnectionDecoder().decode(block, raw=True)
    assert isinstance(info.value, h2.exceptions.ProtocolError)
    assert info.value.error_code == ErrorCodes.COMPRESSION_ERROR
    assert isinstance(info.value.__cause__, hpack.HPACKError)


def test_the_connection_decoder_leaves_a_head_too_large_to_h2() -> None:
    decoder = ConnectionDecoder()
    decoder.max_header_list_size = 64
    with pytest.raises(hpack.OversizedHeaderListError):
        decoder.decode(hpack.Encoder().encode([(b"x-a", b"b" * 100)]), raw=True)
