"""Rows of RFC 9113 §3.4 (the preface), §4 (frames, their size, header compression) and §5
(stream states, identifiers, error handling, extensions).

The h2spec client suite's cases are here (its section numbers in the ids: ``h2spec 5.1/3``) and
more where RFC 9113 says more. Where the RFC leaves the receiver a choice (§5.4: a stream error
MAY be treated as a connection error; §5.1: a frame on a closed stream MAY be), ``says`` names the
choice the client makes, and the row holds it to it.
"""

from __future__ import annotations

from h2.errors import ErrorCodes
from h2.settings import SettingCodes

from tests.support.h2_frames import (
    END_HEADERS,
    END_STREAM,
    Kind,
    continuation_frame,
    data_frame,
    frame,
    goaway_frame,
    ping_frame,
    priority_frame,
    raw_headers_frame,
    rst_stream_frame,
    settings_frame,
    window_update_frame,
    with_reserved_bit,
)
from trio_retry import ConnectionBroken, Evidence, FailureCategory

from .table import (
    PAYLOAD,
    PING,
    SID,
    Expect,
    Row,
    Wait,
    after_response,
    block,
    broken_stream,
    connection_error,
    head,
    ok,
    ok_response,
    play,
)

E = ErrorCodes
ZERO = bytes(8)
UNKNOWN = frame(0x16, 0, 0, ZERO)  # a frame type no RFC defines
ACKED = Wait(Kind.PING, 0, PAYLOAD)
NOT_SENT = Evidence.NOT_SENT
PARTIAL = Evidence.PARTIAL_RESPONSE


def _preface_error(first: bytes, row_id: str, says: str) -> Row:
    return Row(
        id=row_id,
        clause="§3.4",
        says=says,
        first=first,
        request=False,
        play=play(),
        expect=connection_error(
            E.PROTOCOL_ERROR,
            evidence=NOT_SENT,
            message="preface is not a SETTINGS frame",
            settings_acks=0,
            requests=0,
        ),
    )


ROWS: list[Row] = [
    # --- §3.4 the connection preface ----------------------------------------------------------
    Row(
        id="h2spec 3.4/1 client preface",
        clause="§3.4",
        says="the client sends the 24-octet preface, then SETTINGS, and acknowledges ours",
        play=play(ok_response()),
        expect=ok(),
    ),
    _preface_error(
        PING,
        "3.4 server preface is a PING",
        "a server preface that is not a SETTINGS frame is a connection error PROTOCOL_ERROR",
    ),
    _preface_error(
        settings_frame(ack=True),
        "3.4 server preface is a SETTINGS ACK",
        "the server's preface is a SETTINGS frame without ACK",
    ),
    _preface_error(
        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
        "3.4 server answers in HTTP/1.1",
        "an invalid preface is a connection error; the client still says GOAWAY (a MAY omit)",
    ),
    Row(
        id="3.4 server preface with settings",
        clause="§3.4, §6.5.3",
        says="the server's SETTINGS, whatever they hold, are acknowledged and applied",
        first=settings_frame(
            (SettingCodes.MAX_CONCURRENT_STREAMS, 10),
            (SettingCodes.INITIAL_WINDOW_SIZE, 1 << 20),
            (SettingCodes.MAX_FRAME_SIZE, 1 << 15),
            (SettingCodes.HEADER_TABLE_SIZE, 0),
        ),
        play=play(ok_response()),
        expect=ok(again=True),
    ),
    # --- §4.1 frame format --------------------------------------------------------------------
    Row(
        id="h2spec 4.1/1 unknown frame type",
        clause="§4.1",
        says="a frame of an unknown type is ignored and discarded",
        play=play(UNKNOWN + PING, ACKED, ok_response()),
        expect=ok(ping_acks=(PAYLOAD,)),
    ),
    Row(
        id="h2spec 4.1/2 undefined flags",
        clause="§4.1",
        says="flags a frame type does not define are ignored (a PING with 0x16 is answered)",
        play=play(frame(Kind.PING, 0x16, 0, ZERO), Wait(Kind.PING, 0, ZERO), ok_response()),
        expect=ok(ping_acks=(ZERO,)),
    ),
    Row(
        id="h2spec 4.1/3 reserved bit",
        clause="§4.1",
        says="the reserved bit of the stream identifier is ignored",
        play=play(
            with_reserved_bit(frame(Kind.PING, 0x16, 0, ZERO)),
            Wait(Kind.PING, 0, ZERO),
            ok_response(),
        ),
        expect=ok(ping_acks=(ZERO,)),
    ),
    Row(
        id="4.1 undefined flags and reserved bit on a response",
        clause="§4.1",
        says="a response whose HEADERS and DATA carry undefined flags and the R bit is read",
        play=play(
            raw_headers_frame(SID, block("200", ("content-length", "2")), flags=0xD6)
            + with_reserved_bit(frame(Kind.DATA, 0xF6 | END_STREAM, SID, b"ok"))
        ),
        expect=ok(),
    ),
    # --- §4.2 frame size ----------------------------------------------------------------------
    Row(
        id="h2spec 4.2/1 DATA of 2^14 octets",
        clause="§4.2, §6.7",
        says="a 16,384-octet DATA frame is read, and a PING after it is acknowledged",
        play=play(
            head(("content-length", "16384")) + data_frame(SID, b"x" * 16384, end_stream=True),
            PING,
            ACKED,
        ),
        expect=ok(body=b"x" * 16384, ping_acks=(PAYLOAD,)),
    ),
    Row(
        id="4.2 DATA of 2^14 octets, the caller leaves at once",
        clause="§4.2, §6.7, §6.8",
        says="a PING that arrived with the response is acknowledged before the client's GOAWAY",
        play=play(
            head(("content-length", "16384"))
            + PING
            + data_frame(SID, b"x" * 16384, end_stream=True)
        ),
        expect=ok(body=b"x" * 16384, ping_acks=(PAYLOAD,), leaves_at_once=True),
    ),
    Row(
        id="h2spec 4.2/2 DATA above SETTINGS_MAX_FRAME_SIZE",
        clause="§4.2",
        says="a DATA frame above 16,384 octets: FRAME_SIZE_ERROR (as a connection error, §5.4)",
        play=play(head(("content-length", "16385")) + data_frame(SID, b"x" * 16385)),
        expect=connection_error(E.FRAME_SIZE_ERROR, evidence=PARTIAL),
    ),
    Row(
        id="h2spec 4.2/3 HEADERS above SETTINGS_MAX_FRAME_SIZE",
        clause="§4.2",
        says="a HEADERS frame above 16,384 octets is a connection error FRAME_SIZE_ERROR",
        play=play(
            raw_headers_frame(
                SID,
                block("200", *[(f"x-dummy{i}", "y" * 4096) for i in range(5)]),
                flags=END_HEADERS | END_STREAM,
            )
        ),
        expect=connection_error(E.FRAME_SIZE_ERROR),
    ),
    Row(
        id="4.2 PING above SETTINGS_MAX_FRAME_SIZE",
        clause="§4.2",
        says="a frame on stream 0 above the limit is a connection error FRAME_SIZE_ERROR",
        play=play(frame(Kind.PING, 0, 0, bytes(16385))),
        expect=connection_error(E.FRAME_SIZE_ERROR),
    ),
    # --- §4.3 field section compression -------------------------------------------------------
    Row(
        id="h2spec 4.3/1 invalid header block",
        clause="§4.3",
        says="a field block that does not decode is a connection error COMPRESSION_ERROR",
        play=play(raw_headers_frame(SID, b"\x40", flags=END_HEADERS)),
        expect=connection_error(E.COMPRESSION_ERROR),
    ),
    Row(
        id="4.3 index beyond the tables",
        clause="§4.3 (RFC 7541 §2.3.3)",
        says="an indexed field beyond both tables is a decoding error: COMPRESSION_ERROR",
        play=play(raw_headers_frame(SID, b"\xff\x49", flags=END_HEADERS)),
        expect=connection_error(E.COMPRESSION_ERROR),
    ),
    Row(
        id="4.3 table size update above SETTINGS_HEADER_TABLE_SIZE",
        clause="§4.3 (RFC 7541 §6.3)",
        says="a dynamic table size update above our limit (4,096) is COMPRESSION_ERROR",
        play=play(raw_headers_frame(SID, b"\x3f\xe1\x3f\x88", flags=END_HEADERS | END_STREAM)),
        expect=connection_error(E.COMPRESSION_ERROR),
    ),
    Row(
        id="4.3 dynamic table shared by the blocks of a connection",
        clause="§4.3",
        says="a field indexed by one block (a 103) is found by the next (the final head)",
        play=play(
            # 103 with "x-shared: one" added to the dynamic table (literal with indexing)
            raw_headers_frame(SID, b"\x48\x03103" + b"\x40\x08x-shared\x03one", flags=END_HEADERS)
            + raw_headers_frame(SID, b"\x88\xbe\x0f\x0d\x012", flags=END_HEADERS)
            + data_frame(SID, b"ok", end_stream=True)
        ),
        expect=ok(headers=(("x-shared", "one"),)),
    ),
    # --- §5.1 stream states -------------------------------------------------------------------
    Row(
        id="h2spec 5.1/1 idle: DATA",
        clause="§5.1",
        says="a DATA frame on an idle stream is a connection error PROTOCOL_ERROR",
        play=play(data_frame(2, b"test", end_stream=True)),
        expect=connection_error(E.PROTOCOL_ERROR),
    ),
    Row(
        id="h2spec 5.1/2 idle: RST_STREAM",
        clause="§5.1",
        says="a RST_STREAM on an idle stream is a connection error PROTOCOL_ERROR",
        play=play(rst_stream_frame(2, E.CANCEL)),
        expect=connection_error(E.PROTOCOL_ERROR),
    ),
    Row(
        id="h2spec 5.1/3 idle: WINDOW_UPDATE",
        clause="§5.1",
        says="a WINDOW_UPDATE on an idle stream is a connection error PROTOCOL_ERROR",
        play=play(window_update_frame(2, 100)),
        expect=connection_error(E.PROTOCOL_ERROR),
    ),
    Row(
        id="h2spec 5.1/4 idle: CONTINUATION",
        clause="§5.1",
        says="a CONTINUATION on an idle stream is a connection error PROTOCOL_ERROR",
        play=play(continuation_frame(2, block(), end_headers=True)),
        expect=connection_error(E.PROTOCOL_ERROR),
    ),
    Row(
        id="h2spec 5.1/5 closed: DATA after RST_STREAM",
        clause="§5.1, §6.1",
        says="DATA on a stream the server reset: a stream error STREAM_CLOSED (§6.1)",
        play=play(head() + rst_stream_frame(SID, E.CANCEL) + data_frame(SID, b"test")),
        expect=broken_stream(PARTIAL, resets=((SID, E.STREAM_CLOSED),)),
    ),
    Row(
        id="h2spec 5.1/6 closed: HEADERS after RST_STREAM",
        clause="§5.1",
        says="HEADERS on a stream the server reset: a stream error STREAM_CLOSED",
        play=play(head() + rst_stream_frame(SID, E.CANCEL) + head(end_stream=True)),
        expect=broken_stream(PARTIAL, resets=((SID, E.STREAM_CLOSED),)),
    ),
    Row(
        id="h2spec 5.1/7 closed: CONTINUATION after RST_STREAM",
        clause="§5.1, §6.10",
        says="a CONTINUATION no open field block precedes: a connection error PROTOCOL_ERROR",
        play=play(
            head()
            + rst_stream_frame(SID, E.CANCEL)
            + continuation_frame(SID, block(), end_headers=True)
        ),
        expect=Expect(
            goaway=E.PROTOCOL_ERROR,
            closes=True,
            status=None,
            body=None,
            error=ConnectionBroken,
            evidence=PARTIAL,
            category=FailureCategory.CONNECTION_BROKEN,
        ),
    ),
    Row(
        id="h2spec 5.1/8 closed: DATA after END_STREAM",
        clause="§5.1, §6.1",
        says="DATA after the response's END_STREAM: a stream error STREAM_CLOSED (§6.1)",
        play=play(ok_response() + data_frame(SID, b"test", end_stream=True), PING, ACKED),
        expect=ok(resets=((SID, E.STREAM_CLOSED),), ping_acks=(PAYLOAD,)),
    ),
    Row(
        id="h2spec 5.1/9 closed: HEADERS after END_STREAM",
        clause="§5.1",
        says="HEADERS after END_STREAM: the connection error STREAM_CLOSED §5.1 allows",
        play=play(head(end_stream=True) + head(end_stream=True)),
        expect=after_response(E.STREAM_CLOSED, body=b""),
    ),
    Row(
        id="h2spec 5.1/10 closed: CONTINUATION after END_STREAM",
        clause="§5.1, §6.10",
        says="a CONTINUATION after a complete field block: a connection error PROTOCOL_ERROR",
        play=play(head(end_stream=True) + continuation_frame(SID, block(), end_headers=True)),
        expect=after_response(E.PROTOCOL_ERROR, body=b""),
    ),
    Row(
        id="h2spec 5.1.1/1 unexpected stream identifier",
        clause="§5.1.1",
        says="HEADERS on a stream the client never opened is a connection error PROTOCOL_ERROR",
        play=play(head(end_stream=True, stream_id=101)),
        expect=connection_error(E.PROTOCOL_ERROR, message="never opened"),
    ),
    Row(
        id="5.1.1 server-initiated stream without push",
        clause="§5.1.1, §8.4",
        says="HEADERS on an even stream (push is off) is a connection error PROTOCOL_ERROR",
        play=play(head(end_stream=True, stream_id=2)),
        expect=connection_error(E.PROTOCOL_ERROR, message="never opened"),
    ),
    # --- §5.4 error handling ------------------------------------------------------------------
    Row(
        id="h2spec 5.4.1/1 invalid PING: the client closes",
        clause="§5.4.1",
        says="after a connection error (a PING on stream 3) the client closes the connection",
        play=play(ping_frame(ZERO, stream_id=3)),
        expect=connection_error(E.PROTOCOL_ERROR),
    ),
    Row(
        id="h2spec 5.4.1/2 invalid PING: GOAWAY first",
        clause="§5.4.1, §6.7",
        says="a PING on an open stream: GOAWAY(PROTOCOL_ERROR) before the close",
        play=play(head(), ping_frame(ZERO, stream_id=SID)),
        expect=connection_error(E.PROTOCOL_ERROR, evidence=PARTIAL),
    ),
    Row(
        id="5.4.1 a GOAWAY for each connection error, none after",
        clause="§5.4.1, §6.8",
        says="two bad frames in a row: one GOAWAY, nothing after it",
        play=play(ping_frame(ZERO, stream_id=3) + window_update_frame(0, 0) + PING),
        expect=connection_error(E.PROTOCOL_ERROR),
    ),
    # --- §5.5 extending HTTP/2 ----------------------------------------------------------------
    Row(
        id="h2spec 5.5/1 unknown extension frame",
        clause="§5.5",
        says="an unknown extension frame is ignored",
        play=play(UNKNOWN + PING, ACKED, ok_response()),
        expect=ok(ping_acks=(PAYLOAD,)),
    ),
    Row(
        id="5.5 unknown frame on an open stream",
        clause="§5.5",
        says="an unknown frame type on the request's stream changes nothing",
        play=play(
            head(("content-length", "2"))
            + frame(0x2A, 0xFF, SID, b"ext")
            + data_frame(SID, b"ok", end_stream=True)
        ),
        expect=ok(),
    ),
    Row(
        id="5.5 unknown frame inside a field block",
        clause="§5.5, §6.10",
        says="an extension frame in the middle of a field block is a connection error",
        play=play(
            raw_headers_frame(SID, block()[:1], flags=0)
            + frame(0x2A, 0, SID, b"ext")
            + continuation_frame(SID, block()[1:], end_headers=True)
        ),
        expect=connection_error(E.PROTOCOL_ERROR),
    ),
    Row(
        id="5.5 unknown SETTINGS and error codes",
        clause="§5.5, §7",
        says="an unknown error code in RST_STREAM triggers nothing special: the stream ends",
        play=play(rst_stream_frame(SID, 0xBEEF)),
        expect=broken_stream(Evidence.SENT_NO_RESPONSE, message="error code 0xbeef"),
    ),
    # --- §5.3 priority (deprecated, but the frames must still be parsed) ----------------------
    Row(
        id="5.3 PRIORITY frames are read and ignored",
        clause="§5.3.2, §6.3",
        says="a PRIORITY on the request's stream, and on an idle stream, changes nothing",
        play=play(priority_frame(SID, 0, 256) + priority_frame(7, 3, 1) + ok_response()),
        expect=ok(),
    ),
    Row(
        id="5.3 HEADERS with the PRIORITY flag",
        clause="§5.3.2, §6.2",
        says="a response head carrying priority fields is read",
        play=play(
            raw_headers_frame(
                SID,
                b"\x00\x00\x00\x00\x0f" + block("200", ("content-length", "2")),
                flags=END_HEADERS | 0x20,
            )
            + data_frame(SID, b"ok", end_stream=True)
        ),
        expect=ok(),
    ),
    Row(
        id="5.4.1 GOAWAY from the server then a connection error",
        clause="§5.4.1, §6.8",
        says="after the server's GOAWAY, a bad frame still draws the client's GOAWAY",
        play=play(head(), goaway_frame(SID, E.NO_ERROR) + window_update_frame(0, 0)),
        expect=connection_error(E.PROTOCOL_ERROR, evidence=PARTIAL),
    ),
]
