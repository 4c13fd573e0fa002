"""The GOAWAY reader of the server's HTTP/3 control stream (``_wire/http3/control.py``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.hostile_h3 import varint
from trio_retry._wire.http3.codes import H3_ID_ERROR
from trio_retry._wire.http3.control import ControlReader
from trio_retry._wire.http3.frames import FrameRefused
from trio_retry.testing._h3_frames import frame

CONTROL = 3  # the first server-initiated unidirectional stream


SETTINGS = frame(0x04, varint(0x01) + varint(0) + varint(0x07) + varint(0))


def goaway(stream_id: int) -> bytes:
    return frame(0x07, varint(stream_id))


def test_goaway_found_after_settings() -> None:
    reader = ControlReader()
    assert reader.feed(CONTROL, varint(0x00) + SETTINGS) is None
    assert reader.goaway is None
    assert reader.feed(CONTROL, goaway(8)) == 8
    assert reader.goaway == 8


def test_a_server_may_lower_the_id() -> None:
    reader = ControlReader()
    assert reader.feed(CONTROL, varint(0x00) + goaway(400) + goaway(16) + goaway(16)) == 16
    assert reader.goaway == 16


@pytest.mark.parametrize("bad", [1, 2, 3, 5, 4 * 1000 + 2])
def test_an_id_that_is_not_a_client_request_streams_is_an_error(bad: int) -> None:
    """RFC 9114 §5.2: H3_ID_ERROR. The GOAWAYs before it stand; nothing after it is read."""
    reader = ControlReader()
    with pytest.raises(FrameRefused) as refused:
        reader.feed(CONTROL, varint(0x00) + goaway(400) + goaway(bad) + goaway(8))
    assert (refused.value.code, refused.value.stream_error) == (H3_ID_ERROR, False)
    assert f"GOAWAY({bad})" in refused.value.message
    assert reader.goaway == 400
    assert reader.feed(CONTROL, goaway(4)) is None
    assert reader.goaway == 400


def test_an_id_larger_than_before_is_an_error() -> None:
    """RFC 9114 §5.2: a GOAWAY's id may not grow (H3_ID_ERROR), in one event or across two."""
    reader = ControlReader()
    assert reader.feed(CONTROL, varint(0x00) + goaway(16)) == 16
    with pytest.raises(FrameRefused) as refused:
        reader.feed(CONTROL, goaway(400))
    assert reader.goaway == 16
    assert refused.value.code == H3_ID_ERROR
    assert "GOAWAY(400) after GOAWAY(16)" in refused.value.message


def test_other_streams_are_not_read() -> None:
    reader = ControlReader()
    # a QPACK encoder stream (type 0x02) carrying bytes that look like a GOAWAY frame
    assert reader.feed(7, varint(0x02) + goaway(4)) is None
    # a bidirectional request stream
    assert reader.feed(0, varint(0x00) + goaway(4)) is None
    assert reader.goaway is None
    # the control stream is still recognised afterwards
    assert reader.feed(11, varint(0x00) + goaway(4)) == 4


def test_a_long_unknown_frame_is_skipped_without_being_kept() -> None:
    reader = ControlReader()
    reserved = 0x21  # a reserved frame type (0x1f * N + 0x21): ignored by its length
    body = b"x" * 5000
    head = varint(0x00) + varint(reserved) + varint(len(body))
    reader.feed(CONTROL, head + body[:100])
    assert len(reader._buffer) <= 64  # not buffered in full
    reader.feed(CONTROL, body[100:3000])
    reader.feed(CONTROL, body[3000:] + goaway(12))
    assert reader.goaway == 12


@given(
    ids=st.lists(st.integers(min_value=0, max_value=2**40).map(lambda n: n * 4), max_size=4),
    padding=st.integers(min_value=0, max_value=300),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=12),
)
def test_any_split_of_the_stream_gives_the_same_goaway(
    ids: list[int], padding: int, cuts: list[int]
) -> None:
    """However the stream's bytes are cut into events, the GOAWAY kept is the last one before
    an id grows (an error, after which nothing is read)."""
    data = varint(0x00) + SETTINGS + frame(0x21, b"p" * padding)
    for stream_id in ids:
        data += goaway(stream_id)
    valid: list[int] = []
    for stream_id in ids:
        if valid and stream_id > valid[-1]:
            break
        valid.append(stream_id)
    reader = ControlReader()
    at = 0
    refused = False
    # the stream type byte arrives whole with the first event (see ControlReader.feed)
    for cut in [*sorted({c for c in cuts if 1 <= c < len(data)}), len(data)]:
        try:
            reader.feed(CONTROL, data[at:cut])
        except FrameRefused:
            refused = True
        at = cut
    assert reader.goaway == (valid[-1] if valid else None)
    assert refused == (valid != ids)


@pytest.mark.parametrize("value", [0, 60, 64, 16380, 16384, 2**30 - 4, 2**30, 2**62 - 4])
def test_every_varint_length_is_read(value: int) -> None:
    reader = ControlReader()
    reader.feed(CONTROL, varint(0x00) + goaway(value))
    assert reader.goaway == value
