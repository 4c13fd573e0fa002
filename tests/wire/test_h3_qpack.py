"""The size a QPACK field section decodes to, read before decoding (``_wire/http3/qpack.py``),
checked against what ``pylsqpack`` (aioquic's decoder) decodes the same section to."""

from __future__ import annotations

import pylsqpack
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_retry._wire.http3.qpack import FIELD_OVERHEAD, decoded_size_at_least

from ..support.hostile_h3 import qpack_literal_section

NAMES = st.one_of(
    st.sampled_from([b":status", b"content-type", b"server", b"set-cookie", b"vary", b"age"]),
    st.binary(min_size=1, max_size=40).map(lambda b: bytes(c % 26 + 97 for c in b)),
)
VALUES = st.one_of(
    st.sampled_from([b"200", b"404", b"text/html", b"", b"gzip", b"0"]),
    st.binary(max_size=400),
    st.text("abcdef0123456789=;- ", max_size=600).map(str.encode),
)
FIELDS = st.lists(st.tuples(NAMES, VALUES), min_size=1, max_size=30)


def decoded_size(section: bytes) -> int:
    _, fields = pylsqpack.Decoder(0, 0).feed_header(0, section)
    return sum(len(name) + len(value) + FIELD_OVERHEAD for name, value in fields)


@settings(max_examples=300)
@given(fields=FIELDS)
def test_never_more_than_the_decoder_makes_of_it(fields: list[tuple[bytes, bytes]]) -> None:
    """pylsqpack's own encoding (static table references, Huffman where shorter)."""
    encoder_stream, section = pylsqpack.Encoder().encode(0, fields)
    assert encoder_stream == b""  # (no dynamic table: the client allows none)
    exact = decoded_size(section)
    assert exact == sum(len(n) + len(v) + FIELD_OVERHEAD for n, v in fields)
    bound = decoded_size_at_least(section, 1 << 40)
    assert bound is not None
    assert bound <= exact


@given(fields=FIELDS)
def test_exact_without_huffman(fields: list[tuple[bytes, bytes]]) -> None:
    section = qpack_literal_section(fields)
    assert decoded_size_at_least(section, 1 << 40) == decoded_size(section)


@given(indices=st.lists(st.integers(min_value=0, max_value=98), min_size=1, max_size=200))
def test_exact_for_static_references(indices: list[int]) -> None:
    section = b"\x00\x00" + b"".join(
        bytes([0xC0 | i]) if i < 63 else bytes([0xFF, i - 63]) for i in indices
    )
    assert decoded_size_at_least(section, 1 << 40) == decoded_size(section)


@given(stop=st.integers(min_value=0, max_value=5000))
def test_it_stops_once_past_the_limit(stop: int) -> None:
    section = b"\x00\x00" + b"\xd9" * 1000  # ":status: 200", 42 bytes each
    size = decoded_size_at_least(section, stop)
    assert size == (42 * (stop // 42 + 1) if stop < 42_000 else 42_000)


def test_what_needs_a_dynamic_table_or_is_cut_short_is_left_to_the_decoder() -> None:
    for section in [
        b"\x02\x00\x80",  # Required Insert Count 1
        b"\x00\x00\x80",  # an indexed line naming the dynamic table
        b"\x00\x00\x10",  # post-base index
        b"\x00\x00\x50\x03ab",  # a literal value cut short
        b"\x00\x00\xff\x7f",  # static index 126: no such entry
        b"\x00",  # no Base
    ]:
        assert decoded_size_at_least(section, 1 << 40) is None, section
