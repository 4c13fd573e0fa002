"""Rows of RFC 9113 §6: each frame type, the flow-control window limits, CONTINUATION sequences.

The h2spec client suite's cases carry its section numbers in their ids; the others are what
RFC 9113 says besides. Where the RFC leaves the receiver a choice, ``says`` names the one the
client makes.
"""

from __future__ import annotations

from h2.errors import ErrorCodes
from h2.settings import SettingCodes

from tests.support.h2_frames import (
    DATA_MAX,
    END_HEADERS,
    END_STREAM,
    Kind,
    continuation_frame,
    data_frame,
    frame,
    goaway_frame,
    header_block,
    padded,
    ping_frame,
    priority_frame,
    raw_headers_frame,
    rst_stream_frame,
    settings_frame,
    window_update_frame,
)
from trio_retry import ConnectionBroken, Evidence, FailureCategory

from .table import (
    PAYLOAD,
    PING,
    SID,
    Expect,
    Row,
    Wait,
    WaitData,
    after_response,
    block,
    broken_stream,
    connection_error,
    head,
    ok,
    ok_response,
    play,
    stream_error,
)

E = ErrorCodes
S = SettingCodes
ZERO = bytes(8)
ACKED = Wait(Kind.PING, 0, PAYLOAD)
PARTIAL = Evidence.PARTIAL_RESPONSE
TOP = 2**31 - 1
DUMMY = header_block([("x-dummy", "dummy")])


def _continued(*fragments: tuple[bytes, bool], end_stream: bool = True) -> bytes:
    """HEADERS then CONTINUATIONs: each fragment with whether its frame ends the block."""
    (first, first_end), *rest = fragments
    flags = (END_HEADERS if first_end else 0) | (END_STREAM if end_stream else 0)
    out = raw_headers_frame(SID, first, flags=flags)
    for fragment, end in rest:
        out += continuation_frame(SID, fragment, end_headers=end)
    return out


ROWS: list[Row] = [
    # --- §6.1 DATA ----------------------------------------------------------------------------
    Row(
        id="h2spec 6.1/1 DATA on stream 0",
        clause="§6.1",
        says="a DATA frame on stream 0 is a connection error PROTOCOL_ERROR",
        play=play(data_frame(0, b"test", end_stream=True)),
        expect=connection_error(E.PROTOCOL_ERROR),
    ),
    Row(
        id="h2spec 6.1/2 DATA on a closed stream",
        clause="§6.1",
        says="DATA on a stream not open: a stream error STREAM_CLOSED",
        play=play(head(end_stream=True) + data_frame(SID, b"test", end_stream=True), PING, ACKED),
        expect=ok(body=b"", resets=((SID, E.STREAM_CLOSED),), ping_acks=(PAYLOAD,)),
    ),
    Row(
        id="h2spec 6.1/3 DATA with invalid pad length",
        clause="§6.1",
        says="padding as long as the payload or longer is a connection error PROTOCOL_ERROR",
        play=play(
            head(("content-length", "4")) + frame(Kind.DATA, 0x08 | END_STREAM, SID, b"\x06Test")
        ),
        expect=connection_error(E.PROTOCOL_ERROR, evidence=PARTIAL),
    ),
    Row(
        id="6.1 padded DATA",
        clause="§6.1",
        says="a padded DATA frame's padding is not data (but counts against the window)",
        play=play(head(("content-length", "2")) + padded(Kind.DATA, END_STREAM, SID, b"ok", 200)),
        expect=ok(),
    ),
    Row(
        id="6.1 empty DATA frames",
        clause="§6.1",
        says="DATA frames with no payload are read (one ends the stream)",
        play=play(
            head(("content-length", "2"))
            + data_frame(SID, b"")
            + data_frame(SID, b"ok")
            + data_frame(SID, b"", end_stream=True)
        ),
        expect=ok(),
    ),
    # --- §6.2 HEADERS -------------------------------------------------------------------------
    Row(
        id="h2spec 6.2/1 HEADERS then PRIORITY before the block ends",
        clause="§6.2, §6.10",
        says="any frame but CONTINUATION inside a field block is a connection error",
        play=play(
            raw_headers_frame(SID, block(), flags=0)
            + priority_frame(SID, 0, 256)
            + continuation_frame(SID, DUMMY, end_headers=True)
        ),
        expect=connection_error(E.PROTOCOL_ERROR),
    ),
    Row(
        id="h2spec 6.2/2 HEADERS on stream 0",
        clause="§6.2",
        says="a HEADERS frame on stream 0 is a connection error PROTOCOL_ERROR",
        play=play(raw_headers_frame(0, block(), flags=END_HEADERS | END_STREAM)),
        expect=connection_error(E.PROTOCOL_ERROR),
    ),
    Row(
        id="h2spec 6.2/3 HEADERS with invalid pad length",
        clause="§6.2",
        says="padding beyond the field block fragment is a connection error PROTOCOL_ERROR",
        play=play(frame(Kind.HEADERS, 0x08 | END_HEADERS, SID, b"\x11" + block())),
        expect=connection_error(E.PROTOCOL_ERROR),
    ),
    Row(
        id="6.2 padded HEADERS",
        clause="§6.2",
        says="a padded response head is read",
        play=play(
            padded(Kind.HEADERS, END_HEADERS, SID, block("200", ("content-length", "2")), 30)
            + data_frame(SID, b"ok", end_stream=True)
        ),
        expect=ok(),
    ),
    # --- §6.3 PRIORITY ------------------------------------------------------------------------
    Row(
        id="h2spec 6.3/1 PRIORITY on stream 0",
        clause="§6.3",
        says="a PRIORITY frame on stream 0 is a connection error PROTOCOL_ERROR",
        play=play(priority_frame(0, 0, 256)),
        expect=connection_error(E.PROTOCOL_ERROR),
    ),
    Row(
        id="h2spec 6.3/2 PRIORITY of 4 octets",
        clause="§6.3",
        says="a PRIORITY frame not of 5 octets: FRAME_SIZE_ERROR (as a connection error, §5.4)",
        play=play(head(end_stream=True) + frame(Kind.PRIORITY, 0, SID, b"\x80\x00\x00\x01")),
        expect=after_response(E.FRAME_SIZE_ERROR, body=b""),
    ),
    # --- §6.4 RST_STREAM ----------------------------------------------------------------------
    Row(
        id="h2spec 6.4/1 RST_STREAM on stream 0",
        clause="§6.4",
        says="a RST_STREAM on stream 0 is a connection error PROTOCOL_ERROR",
        play=play(rst_stream_frame(0, E.CANCEL)),
        expect=connection_error(E.PROTOCOL_ERROR),
    ),
    Row(
        id="h2spec 6.4/2 RST_STREAM on an idle stream",
        clause="§6.4",
        says="a RST_STREAM on an idle stream is a connection error PROTOCOL_ERROR",
        play=play(rst_stream_frame(2, E.CANCEL)),
        expect=connection_error(E.PROTOCOL_ERROR),
    ),
    Row(
        id="h2spec 6.4/3 RST_STREAM of 3 octets",
        clause="§6.4",
        says="a RST_STREAM not of 4 octets is a connection error FRAME_SIZE_ERROR",
        play=play(head(end_stream=True) + frame(Kind.RST_STREAM, 0, SID, b"\x00\x00\x00")),
        expect=after_response(E.FRAME_SIZE_ERROR, body=b""),
    ),
    # --- §6.5 SETTINGS ------------------------------------------------------------------------
    Row(
        id="h2spec 6.5/1 SETTINGS ACK with a payload",
        clause="§6.5",
        says="a SETTINGS ACK with a payload is a connection error FRAME_SIZE_ERROR",
        play=play(frame(Kind.SETTINGS, 0x1, 0, b"\x00")),
        expect=connection_error(E.FRAME_SIZE_ERROR),
    ),
    Row(
        id="h2spec 6.5/2 SETTINGS on a stream",
        clause="§6.5",
        says="a SETTINGS frame on a stream is a connection error PROTOCOL_ERROR",
        play=play(settings_frame((S.MAX_CONCURRENT_STREAMS, 100), stream_id=SID)),
        expect=connection_error(E.PROTOCOL_ERROR),
    ),
    Row(
        id="h2spec 6.5/3 SETTINGS of 3 octets",
        clause="§6.5",
        says="a SETTINGS frame not a multiple of 6 octets is a connection error FRAME_SIZE_ERROR",
        play=play(frame(Kind.SETTINGS, 0, 0, b"\x00\x03\x00")),
        expect=connection_error(E.FRAME_SIZE_ERROR),
    ),
    Row(
        id="h2spec 6.5.2/1 SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1",
        clause="§6.5.2",
        says="an initial window above 2^31-1 is a connection error FLOW_CONTROL_ERROR",
        play=play(settings_frame((S.INITIAL_WINDOW_SIZE, 2**31))),
        expect=connection_error(E.FLOW_CONTROL_ERROR),
    ),
    Row(
        id="h2spec 6.5.2/2 SETTINGS_MAX_FRAME_SIZE below 2^14",
        clause="§6.5.2",
        says="a maximum frame size below 16,384 is a connection error PROTOCOL_ERROR",
        play=play(settings_frame((S.MAX_FRAME_SIZE, 16383))),
        expect=connection_error(E.PROTOCOL_ERROR),
    ),
    Row(
        id="h2spec 6.5.2/3 SETTINGS_MAX_FRAME_SIZE above 2^24-1",
        clause="§6.5.2",
        says="a maximum frame size above 2^24-1 is a connection error PROTOCOL_ERROR",
        play=play(settings_frame((S.MAX_FRAME_SIZE, 2**24))),
        expect=connection_error(E.PROTOCOL_ERROR),
    ),
    Row(
        id="h2spec 6.5.2/4 unknown SETTINGS identifier",
        clause="§6.5.2",
        says="a setting of an unknown identifier is ignored (and the frame acknowledged)",
        play=play(settings_frame((0xFF, 1)) + PING, ACKED, ok_response()),
        expect=ok(ping_acks=(PAYLOAD,), settings_acks=2),
    ),
    Row(
        id="6.5.2 SETTINGS_ENABLE_PUSH of 2",
        clause="§6.5.2",
        says="ENABLE_PUSH other than 0 or 1 is a connection error PROTOCOL_ERROR",
        play=play(settings_frame((S.ENABLE_PUSH, 2))),
        expect=connection_error(E.PROTOCOL_ERROR),
    ),
    Row(
        id="6.5.2 SETTINGS_ENABLE_PUSH of 1 from a server",
        clause="§6.5.2",
        says="a client receiving ENABLE_PUSH=1 treats it as a connection error PROTOCOL_ERROR",
        play=play(settings_frame((S.ENABLE_PUSH, 1))),
        expect=connection_error(E.PROTOCOL_ERROR),
    ),
    Row(
        id="h2spec 6.5.3/1 SETTINGS acknowledged",
        clause="§6.5.3",
        says="a SETTINGS frame is acknowledged at once",
        play=play(settings_frame((S.ENABLE_PUSH, 0)), Wait(Kind.SETTINGS), ok_response()),
        expect=ok(settings_acks=2),
    ),
    # --- §6.6 PUSH_PROMISE --------------------------------------------------------------------
    Row(
        id="6.6 PUSH_PROMISE with push disabled",
        clause="§6.6, §8.4",
        says="a PUSH_PROMISE to a client that disabled push is a connection error PROTOCOL_ERROR",
        play=play(
            head(), frame(Kind.PUSH_PROMISE, END_HEADERS, SID, b"\x00\x00\x00\x02" + block())
        ),
        expect=connection_error(E.PROTOCOL_ERROR, evidence=PARTIAL),
    ),
    # --- §6.7 PING ----------------------------------------------------------------------------
    Row(
        id="h2spec 6.7/1 PING",
        clause="§6.7",
        says="a PING is answered with an ACK carrying the same payload",
        play=play(PING, ACKED, ok_response()),
        expect=ok(ping_acks=(PAYLOAD,)),
    ),
    Row(
        id="h2spec 6.7/2 PING ACK is not answered",
        clause="§6.7",
        says="a PING with ACK draws no answer",
        play=play(ping_frame(b"invalid\x00", ack=True) + PING, ACKED, ok_response()),
        expect=ok(ping_acks=(PAYLOAD,)),
    ),
    Row(
        id="h2spec 6.7/3 PING on a stream",
        clause="§6.7",
        says="a PING on a stream is a connection error PROTOCOL_ERROR",
        play=play(ping_frame(ZERO, stream_id=SID)),
        expect=connection_error(E.PROTOCOL_ERROR),
    ),
    Row(
        id="h2spec 6.7/4 PING of 6 octets",
        clause="§6.7",
        says="a PING not of 8 octets is a connection error FRAME_SIZE_ERROR",
        play=play(ping_frame(bytes(6))),
        expect=connection_error(E.FRAME_SIZE_ERROR),
    ),
    Row(
        id="6.7 PINGs answered while a response streams",
        clause="§6.7",
        says="PINGs between DATA frames are each acknowledged, in order",
        play=play(
            head(("content-length", "4"))
            + ping_frame(b"first!!!")
            + data_frame(SID, b"ab")
            + ping_frame(b"second!!")
            + data_frame(SID, b"cd", end_stream=True),
            Wait(Kind.PING, 0, b"second!!"),
        ),
        expect=ok(body=b"abcd", ping_acks=(b"first!!!", b"second!!")),
    ),
    # --- §6.8 GOAWAY --------------------------------------------------------------------------
    Row(
        id="h2spec 6.8/1 GOAWAY on a stream",
        clause="§6.8",
        says="a GOAWAY on a stream is a connection error PROTOCOL_ERROR",
        play=play(frame(Kind.GOAWAY, 0, SID, ZERO)),
        expect=connection_error(E.PROTOCOL_ERROR),
    ),
    Row(
        id="6.8 GOAWAY of 4 octets",
        clause="§6.8",
        says="a GOAWAY shorter than 8 octets is a connection error FRAME_SIZE_ERROR",
        play=play(frame(Kind.GOAWAY, 0, 0, bytes(4))),
        expect=connection_error(E.FRAME_SIZE_ERROR),
    ),
    Row(
        id="6.8 GOAWAY above the stream: not processed",
        clause="§6.8",
        says="a stream above the last-stream-id was not processed: NOT_SENT; the client says "
        "GOAWAY(NO_ERROR) as it closes",
        play=play(goaway_frame(0, E.NO_ERROR)),
        expect=broken_stream(
            Evidence.NOT_SENT, category=FailureCategory.GOAWAY, again=False, closes=True
        ),
    ),
    Row(
        id="6.8 GOAWAY at the stream: finished",
        clause="§6.8",
        says="a stream at the last-stream-id is finished; then the client closes with GOAWAY",
        play=play(goaway_frame(SID, E.NO_ERROR) + ok_response()),
        expect=ok(closes=True),
    ),
    Row(
        id="6.8 GOAWAY with an error, then a reset",
        clause="§6.8, §8.7",
        says="a stream the server reset after its GOAWAY may have run: SENT_NO_RESPONSE",
        play=play(goaway_frame(SID, E.INTERNAL_ERROR) + rst_stream_frame(SID, E.INTERNAL_ERROR)),
        expect=broken_stream(Evidence.SENT_NO_RESPONSE, again=False, closes=True),
    ),
    # --- §6.9 WINDOW_UPDATE -------------------------------------------------------------------
    Row(
        id="h2spec 6.9/1 WINDOW_UPDATE of 0 on the connection",
        clause="§6.9",
        says="an increment of 0 on the connection is a connection error PROTOCOL_ERROR",
        play=play(window_update_frame(0, 0)),
        expect=connection_error(E.PROTOCOL_ERROR),
    ),
    Row(
        id="h2spec 6.9/2 WINDOW_UPDATE of 0 on a stream",
        clause="§6.9",
        says="an increment of 0 on a stream: PROTOCOL_ERROR (as a connection error, §5.4)",
        play=play(head(), window_update_frame(SID, 0)),
        expect=connection_error(E.PROTOCOL_ERROR, evidence=PARTIAL),
    ),
    Row(
        id="h2spec 6.9/3 WINDOW_UPDATE of 3 octets",
        clause="§6.9",
        says="a WINDOW_UPDATE not of 4 octets is a connection error FRAME_SIZE_ERROR",
        play=play(frame(Kind.WINDOW_UPDATE, 0, 0, b"\x00\x00\x01")),
        expect=connection_error(E.FRAME_SIZE_ERROR),
    ),
    Row(
        id="h2spec 6.9.1/1 connection window above 2^31-1",
        clause="§6.9.1",
        says="a connection window pushed past 2^31-1: GOAWAY(FLOW_CONTROL_ERROR)",
        play=play(window_update_frame(0, TOP) + window_update_frame(0, TOP)),
        expect=connection_error(E.FLOW_CONTROL_ERROR),
    ),
    Row(
        id="h2spec 6.9.1/2 stream window above 2^31-1",
        clause="§6.9.1",
        says="a stream window pushed past 2^31-1: RST_STREAM(FLOW_CONTROL_ERROR), that stream only",
        play=play(head(), window_update_frame(SID, TOP) + window_update_frame(SID, TOP)),
        expect=stream_error(E.FLOW_CONTROL_ERROR, evidence=PARTIAL),
    ),
    Row(
        id="6.9.2 SETTINGS_INITIAL_WINDOW_SIZE overflows an open stream",
        clause="§6.9.2",
        says="a new initial window that takes a stream's window past 2^31-1 is a connection "
        "error FLOW_CONTROL_ERROR",
        play=play(
            head(),
            window_update_frame(SID, TOP - 65535),
            settings_frame((S.INITIAL_WINDOW_SIZE, 65536)),
        ),
        expect=connection_error(E.FLOW_CONTROL_ERROR, evidence=PARTIAL, settings_acks=1),
    ),
    Row(
        id="6.9 the client gives credit back",
        clause="§6.9, §6.9.1",
        says="the client sends WINDOW_UPDATE for the data it consumed",
        play=play(
            head(("content-length", str(40 * DATA_MAX + 2)))
            + b"".join(data_frame(SID, b"x" * DATA_MAX) for _ in range(40)),
            Wait(Kind.WINDOW_UPDATE, SID),
            data_frame(SID, b"ok", end_stream=True),
        ),
        expect=ok(body=b"x" * 40 * DATA_MAX + b"ok", sends=(f"WINDOW_UPDATE[{SID}]",)),
    ),
    Row(
        id="6.9.1 the client waits for stream credit",
        clause="§6.9.1, §6.5.2",
        says="a request body goes no further than the stream window the server gave",
        first=settings_frame((S.INITIAL_WINDOW_SIZE, 100)),
        body=b"b" * 1000,
        play=play(
            WaitData(SID, 100),
            window_update_frame(SID, 900),
            WaitData(SID, 1000),
            ok_response(),
        ),
        expect=ok(),
    ),
    Row(
        id="6.9.1 the client waits for connection credit",
        clause="§6.9.1",
        says="a request body goes no further than the connection window (65,535 octets)",
        first=settings_frame((S.INITIAL_WINDOW_SIZE, 1 << 20)),
        body=b"c" * 100_000,
        play=play(
            WaitData(SID, 65535),
            window_update_frame(0, 100_000 - 65535),
            WaitData(SID, 100_000),
            ok_response(),
        ),
        expect=ok(),
    ),
    Row(
        id="6.9.2 the initial window shrinks while a body is sent",
        clause="§6.9.2",
        says="a smaller SETTINGS_INITIAL_WINDOW_SIZE takes effect on an open stream (its "
        "window may go negative); the body waits for credit",
        first=settings_frame((S.INITIAL_WINDOW_SIZE, 100)),
        body=b"d" * 300,
        play=play(
            WaitData(SID, 100),
            settings_frame((S.INITIAL_WINDOW_SIZE, 50)),
            Wait(Kind.SETTINGS, 0),
            window_update_frame(SID, 250),
            WaitData(SID, 300),
            ok_response(),
        ),
        expect=ok(settings_acks=2),
    ),
    # --- §6.10 CONTINUATION -------------------------------------------------------------------
    Row(
        id="h2spec 6.10/1 HEADERS and two CONTINUATIONs",
        clause="§6.10",
        says="a field block in three frames is read; a PING after it is acknowledged",
        play=play(
            _continued((block(), False), (DUMMY, False), (DUMMY, True)),
            PING,
            ACKED,
        ),
        expect=ok(body=b"", ping_acks=(PAYLOAD,)),
    ),
    Row(
        id="6.10 HEADERS and CONTINUATION, the caller leaves at once",
        clause="§6.10, §6.7, §6.8",
        says="a PING that came with a continued head is acknowledged before the client's GOAWAY",
        play=play(PING + _continued((block(), False), (DUMMY, True))),
        expect=ok(body=b"", ping_acks=(PAYLOAD,), leaves_at_once=True),
    ),
    Row(
        id="h2spec 6.10/2 CONTINUATION then DATA",
        clause="§6.10",
        says="a block not ended, followed by DATA, is a connection error PROTOCOL_ERROR",
        play=play(
            _continued((block(), False), (DUMMY, False), end_stream=False)
            + data_frame(SID, b"test", end_stream=True)
        ),
        expect=connection_error(E.PROTOCOL_ERROR),
    ),
    Row(
        id="h2spec 6.10/3 CONTINUATION on stream 0",
        clause="§6.10",
        says="a CONTINUATION on stream 0 is a connection error PROTOCOL_ERROR",
        play=play(
            raw_headers_frame(SID, block(), flags=END_STREAM)
            + continuation_frame(0, DUMMY, end_headers=True)
        ),
        expect=connection_error(E.PROTOCOL_ERROR),
    ),
    Row(
        id="h2spec 6.10/4 CONTINUATION after END_HEADERS",
        clause="§6.10",
        says="a CONTINUATION after a HEADERS with END_HEADERS is a connection error",
        play=play(head(end_stream=True) + continuation_frame(SID, DUMMY, end_headers=True)),
        expect=after_response(E.PROTOCOL_ERROR, body=b""),
    ),
    Row(
        id="h2spec 6.10/5 CONTINUATION after a CONTINUATION with END_HEADERS",
        clause="§6.10",
        says="a CONTINUATION after the block ended is a connection error PROTOCOL_ERROR",
        play=play(_continued((block(), False), (DUMMY, True), (DUMMY, True))),
        expect=after_response(E.PROTOCOL_ERROR, body=b""),
    ),
    Row(
        id="h2spec 6.10/6 CONTINUATION after DATA",
        clause="§6.10",
        says="DATA inside a field block, then CONTINUATION: a connection error PROTOCOL_ERROR",
        play=play(
            raw_headers_frame(SID, block(), flags=0)
            + data_frame(SID, b"test", end_stream=True)
            + continuation_frame(SID, DUMMY, end_headers=False)
            + continuation_frame(0, DUMMY, end_headers=True)
        ),
        expect=connection_error(E.PROTOCOL_ERROR),
    ),
    Row(
        id="6.10 CONTINUATION on another stream",
        clause="§6.10",
        says="a CONTINUATION on a different stream than its HEADERS is a connection error",
        play=play(
            raw_headers_frame(SID, block(), flags=0)
            + continuation_frame(3, DUMMY, end_headers=True)
        ),
        expect=connection_error(E.PROTOCOL_ERROR),
    ),
]

__all__ = ["ROWS", "ConnectionBroken", "Expect", "broken_stream"]
