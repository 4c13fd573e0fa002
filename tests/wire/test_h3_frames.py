"""The limits read from a request stream's frames before aioquic keeps them
(``_wire/http3/frames.py``), and from the control stream's (``control.py``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_retry._wire.http3.codes import H3_EXCESSIVE_LOAD, H3_FRAME_ERROR, H3_ID_ERROR
from trio_retry._wire.http3.control import SETTINGS_LIMIT, ControlReader
from trio_retry._wire.http3.frames import SCAN_FROM, FrameRefused, RequestFrames
from trio_retry.testing._h3_frames import frame

from ..support.hostile_h3 import frame_header, qpack_literal_section, varint

LIMIT = 65536
CONTROL = 3


def head(fields: list[tuple[bytes, bytes]]) -> bytes:
    return frame(0x01, qpack_literal_section([(b":status", b"200"), *fields]))


def fed(data: bytes, cuts: list[int], limit: int = LIMIT) -> FrameRefused | None:
    """Feed ``data`` cut at ``cuts``; the refusal raised, if any."""
    frames = RequestFrames()
    at = 0
    try:
        for cut in [*sorted({c for c in cuts if 0 < c < len(data)}), len(data)]:
            frames.feed(data[at:cut], limit)
            at = cut
    except FrameRefused as refused:
        return refused
    return None


# Tens of KiB of body in DATA frames, a head of many fields (scanned, under the limit),
# trailers, and frame types a client skips: taken whole.
GOOD = (
    head([(b"x-%d" % i, b"v" * 100) for i in range(60)])
    + frame(0x00, b"d" * 40_000)
    + frame(0x21, b"reserved")
    + frame(0x00, b"")
    + frame(0x01, qpack_literal_section([(b"x-trailer", b"t")]))
)


@given(cuts=st.lists(st.integers(min_value=0, max_value=len(GOOD)), max_size=20))
def test_a_well_formed_response_passes_however_it_is_cut(cuts: list[int]) -> None:
    assert len(GOOD) > SCAN_FROM
    assert fed(GOOD, cuts) is None


@given(cuts=st.lists(st.integers(min_value=0, max_value=40), max_size=8))
def test_a_headers_frame_announced_past_the_limit_is_refused_at_its_header(
    cuts: list[int],
) -> None:
    data = head([]) + frame(0x00, b"body") + frame_header(0x01, 1 << 30) + b"\x00" * 16
    refused = fed(data, cuts)
    assert refused is not None
    assert (refused.code, refused.stream_error) == (H3_EXCESSIVE_LOAD, True)
    assert "a HEADERS frame of 1073741824 bytes" in refused.message
    assert "max_header_bytes" in refused.message


def test_the_announced_length_is_compared_with_the_limit_given() -> None:
    data = frame(0x01, b"\x00" * 2000)
    assert fed(data, [], limit=2000) is None
    refused = fed(data, [], limit=1999)
    assert refused is not None
    assert refused.code == H3_EXCESSIVE_LOAD


def test_refused_before_a_payload_byte_is_taken() -> None:
    """The refusal comes with the frame header's last byte: nothing of the payload needed."""
    header = frame_header(0x01, 1 << 30)
    frames = RequestFrames()
    frames.feed(header[:-1], LIMIT)
    with pytest.raises(FrameRefused):
        frames.feed(header[-1:], LIMIT)


#: 6,000 one-byte references to the static table's entry 25 (":status: 200", 42 bytes counted
#: each): a 6 KB section that decodes to 252,000 bytes.
STATIC_BOMB = b"\x00\x00" + b"\xd9" * 6000


@given(cuts=st.lists(st.integers(min_value=0, max_value=6010), max_size=8))
def test_a_long_section_that_decodes_past_the_limit_is_refused_before_decoding(
    cuts: list[int],
) -> None:
    refused = fed(frame(0x01, STATIC_BOMB), cuts)
    assert refused is not None
    assert (refused.code, refused.stream_error) == (H3_EXCESSIVE_LOAD, True)
    assert "field section of at least" in refused.message


def test_a_short_section_is_left_to_the_decoded_check() -> None:
    """At most SCAN_FROM bytes: not scanned (the driver checks the decoded head)."""
    assert fed(frame(0x01, b"\x00\x00" + b"\xd9" * (SCAN_FROM - 2)), []) is None


def test_a_push_promise_is_a_connection_error_at_its_header() -> None:
    refused = fed(head([]) + frame_header(0x05, 1 << 30), [])
    assert refused is not None
    assert (refused.code, refused.stream_error) == (H3_ID_ERROR, False)
    assert "push" in refused.message


# --- the control stream ---------------------------------------------------------------------


def control(reader: ControlReader, data: bytes) -> FrameRefused | int | None:
    try:
        return reader.feed(CONTROL, data)
    except FrameRefused as refused:
        return refused


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        (b"", "of 0 bytes"),
        (b"\x00" * 9, "of 9 bytes"),
        (varint(4) + b"\x00", "does not fill it"),  # an integer, then a byte more
        (b"\x40", "does not fill it"),  # a two-byte integer cut to one
    ],
)
def test_a_goaway_whose_length_is_not_its_integers_is_a_frame_error(
    payload: bytes, words: str
) -> None:
    refused = control(ControlReader(), varint(0x00) + frame(0x07, payload))
    assert isinstance(refused, FrameRefused)
    assert (refused.code, refused.stream_error) == (H3_FRAME_ERROR, False)
    assert words in refused.message


def test_a_long_goaway_is_refused_at_its_header() -> None:
    refused = control(ControlReader(), varint(0x00) + frame_header(0x07, 1 << 30) + b"\x00")
    assert isinstance(refused, FrameRefused)
    assert refused.code == H3_FRAME_ERROR


def test_a_settings_frame_past_the_limit_is_refused_at_its_header() -> None:
    reader = ControlReader()
    refused = control(reader, varint(0x00) + frame_header(0x04, SETTINGS_LIMIT + 1))
    assert isinstance(refused, FrameRefused)
    assert (refused.code, refused.stream_error) == (H3_EXCESSIVE_LOAD, False)
    assert control(ControlReader(), varint(0x00) + frame(0x04, b"\x21\x00" * 100)) is None
