"""Frames that arrive on a stream after the client reset it (RFC 9113 §5.1), machine by machine.

The server sent them before our RST_STREAM reached it: h2 alone (``client_machine``, with
``h2_private.ignore_after_reset``) and the fast path must ignore them, not answer each with a
RST_STREAM(STREAM_CLOSED), while a DATA frame still counts against the connection's window and
is credited back (§6.9). h2 holds a closed stream until it next counts its streams and then
remembers only how it closed (two code paths: ``StreamClosedError`` and
``StreamIDTooLowError``); the fast path forgets it at once and hands its record over when it
defers. Each is driven here with the same frames; the scenario table
(``h2_conformance/rows_messages.py``) plays the same over sockets. How long a reset is
remembered is bounded: past the last 65,536 closed streams a late DATA frame is answered as h2
answers it, checked with the bound made small.
"""

from __future__ import annotations

import struct

import h2.connection
import h2.errors
import h2.events
import hpack
import pytest

from tests.support.h2_frames import continuation_frame, data_frame, frame
from tests.wire.test_h2_fast import SERVER_SETTINGS as SERVER_SETTINGS_FAST
from tests.wire.test_h2_fast import Pair, request
from trio_retry._wire.http2 import fast_connection
from trio_retry._wire.http2.connection import client_machine
from trio_retry._wire.http2.fast import FastMachine
from trio_retry._wire.http2.h2_private import connection_window

SERVER_SETTINGS = frame(0x4, 0, 0, b"")
REQUEST = [
    (b":method", b"GET"),
    (b":scheme", b"https"),
    (b":authority", b"example.test"),
    (b":path", b"/"),
]
#: How each machine meets the late frames: h2 still holding the stream, or having counted its
#: streams (it then remembers only how the stream closed); the fast path, or the fast path
#: handed over to h2 (by a PRIORITY frame, which it does not keep) after the reset.
WAYS = ("h2", "h2 counted", "fast", "fast handed over")
RST_STREAM = 0x3
WINDOW_UPDATE = 0x8


def frames_of(data: bytes) -> list[tuple[int, int, int]]:
    """``(type, stream id, first four payload octets as a number)`` of each frame."""
    found = []
    pos = 0
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 3], "big")
        value = int.from_bytes(data[pos + 9 : pos + 13], "big") if length >= 4 else 0
        found.append((data[pos + 3], int.from_bytes(data[pos + 5 : pos + 9], "big"), value))
        pos += 9 + length
    return found


def opened(way: str) -> FastMachine:
    """A client machine after the handshake, with stream 1 open (its request sent)."""
    machine = FastMachine(client_machine(65536))
    machine.initiate_connection()
    machine.receive_data(SERVER_SETTINGS)
    machine.data_to_send()
    if way.startswith("fast"):
        assert machine.engage()
    machine.send_headers(1, REQUEST, end_stream=True)
    machine.data_to_send()
    return machine


def reset(machine: FastMachine, way: str, stream_id: int = 1) -> None:
    machine.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
    assert frames_of(machine.data_to_send()) == [(RST_STREAM, stream_id, 8)]
    if way == "h2 counted":
        assert machine.open_outbound_streams == 0  # (counting moves it to the closed ones)
    elif way == "fast handed over":
        machine.receive_data(frame(0x2, 0, 1, b"\x00\x00\x00\x00\x10"))
        assert machine.handed_over


@pytest.mark.parametrize("way", WAYS)
def test_frames_after_the_clients_reset_are_ignored_and_credited(way: str) -> None:
    machine = opened(way)
    reset(machine, way)
    # The server's encoder: each late head adds its field to the HPACK table.
    encoder = hpack.Encoder()
    first = encoder.encode([(b":status", b"200"), (b"x-late", b"one")])
    second = encoder.encode([(b":status", b"200"), (b"x-late", b"two")])
    late = [
        frame(0x1, 0x4, 1, first),
        frame(0x1, 0, 1, second[:3]) + continuation_frame(1, second[3:], end_headers=True),
        frame(0x0, 0x8, 1, b"\x03late\x00\x00\x00"),  # padded
        data_frame(1, b"x" * 16384) * 3,
        data_frame(1, b"end", end_stream=True),
        frame(WINDOW_UPDATE, 0, 1, struct.pack(">I", 100)),
        frame(RST_STREAM, 0, 1, struct.pack(">I", 0)),
    ]
    window = connection_window(machine._h2)
    before = window.current_window_size
    sent = []
    for one in late:
        assert machine.receive_data(one) == []
        sent += frames_of(machine.data_to_send())
    # Nothing but the connection's credit, due past half its 65,535 octets: the padded
    # frame's 8 octets (padding included) and two full frames.
    assert sent == [(WINDOW_UPDATE, 0, 8 + 2 * 16384)]
    received = 8 + 3 * 16384 + 3
    # Counted against the window, and credited: sent, or owed in the next WINDOW_UPDATE.
    assert window.current_window_size == before - received + 8 + 2 * 16384
    assert window.current_window_size + window._bytes_processed == before
    # The HPACK table followed the server's (the late heads were decoded): a response on the
    # next stream, its fields indexed in that table, reads as sent.
    machine.send_headers(3, REQUEST, end_stream=True)
    machine.data_to_send()
    fields = [(b":status", b"200"), (b"x-late", b"one"), (b"x-late", b"two")]
    events = machine.receive_data(frame(0x1, 0x5, 3, encoder.encode(fields)))
    [response] = [e for e in events if isinstance(e, h2.events.ResponseReceived)]
    assert list(response.headers) == fields


@pytest.mark.parametrize("way", WAYS)
def test_the_connection_window_is_credited_back_when_due(way: str) -> None:
    """Late DATA alone brings the connection's WINDOW_UPDATE once half the window is due (the
    client's window left at its initial 65,535 octets here), and no RST_STREAM."""
    machine = opened(way)
    reset(machine, way)
    sent = b""
    for _ in range(2):
        machine.receive_data(data_frame(1, b"x" * 16384))
        sent += machine.data_to_send()
    assert frames_of(sent) == [(WINDOW_UPDATE, 0, 32768)]


@pytest.mark.parametrize("way", WAYS)
def test_a_reset_is_remembered_for_a_bounded_number_of_streams(
    way: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the last ``MAX_CLOSED_STREAMS`` closed streams (4 here, 65,536 in use) a stream
    reset long ago is forgotten: a late DATA frame on it is answered with
    RST_STREAM(STREAM_CLOSED), as h2 answers DATA on a stream it knows nothing of."""
    monkeypatch.setattr(h2.connection.H2Connection, "MAX_CLOSED_STREAMS", 4)
    monkeypatch.setattr(fast_connection, "_CLOSED_KEPT", 4)
    machine = opened(way)
    reset(machine, way)
    for stream_id in range(3, 3 + 2 * 5, 2):  # five more streams, each closed by its reset
        machine.send_headers(stream_id, REQUEST, end_stream=True)
        machine.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
        machine.data_to_send()
    assert machine.open_outbound_streams == 0  # (h2 counts: its closed ones are moved on)
    machine.receive_data(data_frame(11, b"late"))  # remembered: ignored
    assert machine.data_to_send() == b""
    machine.receive_data(data_frame(1, b"late"))  # forgotten
    assert frames_of(machine.data_to_send()) == [(RST_STREAM, 1, 5)]


def test_a_head_after_the_servers_reset_once_handed_over_is_compared_as_h2_gives_it() -> None:
    """The differential test's reference (``test_h2_fast.Pair``) counts h2's streams before each
    frame, as the fast path forgets a closed stream at once; once the fast machine has handed
    over it is h2 itself, uncounted, and is compared so. A hypothesis example: with the hand-
    over made (by DATA on a stream not open), the server resets stream 3 and sends it a 1xx
    head in the same run: h2 still holding the stream refuses it (a connection error), h2
    counted would have answered RST_STREAM(STREAM_CLOSED)."""
    pair = Pair(SERVER_SETTINGS_FAST)
    pair.same("send_data", 1, b"x", end_stream=False)  # refused: hands over
    assert pair.fast.handed_over
    for stream_id in (1, 3):
        pair.same("send_headers", stream_id, request(stream_id, 0), end_stream=False)
    informational = hpack.Encoder().encode([(b":status", b"103")])
    pair.same_frames([frame(RST_STREAM, 0, 3, bytes(4)), frame(0x1, 0x4, 3, informational)])
    assert pair.dead  # (h2's connection error, on both sides)
