"""Rows of RFC 9113 §8 (message framing, field validity) and §8.7 (what a reset proves), where the
client sees them: a response the server frames wrongly is a stream error that fails that
request alone, and a reset proves ``NOT_SENT`` only where the RFC says the server did nothing.
"""

from __future__ import annotations

from h2.errors import ErrorCodes

from tests.support.h2_frames import (
    DATA_MAX,
    Kind,
    continuation_frame,
    data_frame,
    headers_frame,
    padded,
    raw_headers_frame,
    rst_stream_frame,
    settings_frame,
)
from trio_retry import DeadlineExceeded, Evidence, FailureCategory

from .table import (
    SID,
    Expect,
    Row,
    Wait,
    WaitData,
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
SENT = Evidence.SENT_NO_RESPONSE
PARTIAL = Evidence.PARTIAL_RESPONSE
SPLIT_HEAD = block("200", ("content-length", "10"))


def _malformed_head(row_id: str, says: str, *fields: tuple[str, str]) -> Row:
    """A response head that breaks §8.2 or §8.3: a stream error PROTOCOL_ERROR (§8.1.1)."""
    return Row(
        id=row_id,
        clause="§8.1.1, §8.2, §8.3",
        says=says,
        play=play(headers_frame(SID, list(fields))),
        expect=stream_error(E.PROTOCOL_ERROR, evidence=SENT, message="malformed"),
    )


def _late_after_reset(row_id: str, clause: str, says: str, late: bytes) -> Row:
    """The caller's deadline resets the stream (CANCEL); the server, which had not seen the
    reset yet, then sends ``late`` on it: nothing answers it, the connection's window is kept
    (``Expect.window_kept``, as on every row whose connection stays up), the connection carries
    on."""
    return Row(
        id=row_id,
        clause=clause,
        says=says,
        play=play(Wait(Kind.RST_STREAM, SID), late),
        deadline=0.3,
        expect=_cancelled(),
    )


def _cancelled(**changes: object) -> Expect:
    """The caller's deadline (0.3 s) ended the call: its stream reset with CANCEL (§8.7), the
    connection carries on."""
    return broken_stream(
        SENT,
        category=FailureCategory.TIMEOUT,
        error=DeadlineExceeded,
        resets=((SID, E.CANCEL),),
        **changes,
    )


ROWS: list[Row] = [
    # --- §8.1 message framing -----------------------------------------------------------------
    Row(
        id="8.1 informational responses before the final one",
        clause="§8.1",
        says="any number of 1xx heads may precede the final head",
        play=play(head(status="100") + head(status="103") + ok_response()),
        expect=ok(),
    ),
    Row(
        id="8.1 trailers",
        clause="§8.1",
        says="a field block after the DATA, with END_STREAM, is the trailers",
        play=play(
            head()
            + data_frame(SID, b"ok")
            + headers_frame(SID, [("x-checksum", "1")], end_stream=True)
        ),
        expect=ok(),
    ),
    Row(
        id="8.1 informational response with END_STREAM",
        clause="§8.1",
        says="a 1xx head that ends the stream is malformed: PROTOCOL_ERROR (h2 makes it a "
        "connection error, which §5.4 allows)",
        play=play(head(status="100", end_stream=True)),
        expect=connection_error(E.PROTOCOL_ERROR, evidence=SENT),
    ),
    Row(
        id="8.1 trailers without END_STREAM",
        clause="§8.1",
        says="a second field block that does not end the stream is malformed (h2 makes it a "
        "connection error, which §5.4 allows)",
        play=play(head() + data_frame(SID, b"ok") + headers_frame(SID, [("x-checksum", "1")])),
        expect=connection_error(E.PROTOCOL_ERROR, evidence=PARTIAL),
    ),
    Row(
        id="8.1 trailers with a pseudo-header",
        clause="§8.1, §8.3",
        says="trailers carrying a pseudo-header are malformed: a stream error PROTOCOL_ERROR",
        play=play(
            head()
            + data_frame(SID, b"ok")
            + headers_frame(SID, [(":status", "200")], end_stream=True)
        ),
        expect=stream_error(E.PROTOCOL_ERROR, evidence=PARTIAL, resets=()),
    ),
    Row(
        id="8.1 DATA before the response head",
        clause="§8.1, §8.1.1, §6.9",
        says="DATA before any head is malformed: a stream error PROTOCOL_ERROR; its octets "
        "still count against the connection's window, and are credited back",
        play=play(data_frame(SID, b"early")),
        expect=stream_error(E.PROTOCOL_ERROR, evidence=SENT),
    ),
    Row(
        id="8.1 padded DATA before the response head",
        clause="§8.1, §8.1.1, §6.1, §6.9",
        says="as above, the padding counted too (DATA's whole payload is flow-controlled)",
        play=play(padded(Kind.DATA, 0, SID, b"early", 200)),
        expect=stream_error(E.PROTOCOL_ERROR, evidence=SENT),
    ),
    Row(
        id="8.1 the stream ends without a final head",
        clause="§8.1",
        says="a 1xx head, then END_STREAM, is malformed: a stream error PROTOCOL_ERROR",
        play=play(head(status="103") + data_frame(SID, b"", end_stream=True)),
        expect=stream_error(E.PROTOCOL_ERROR, evidence=SENT),
    ),
    Row(
        id="8.1.1 more DATA than content-length",
        clause="§8.1.1",
        says="DATA beyond content-length is malformed: a stream error PROTOCOL_ERROR",
        play=play(head(("content-length", "1")) + data_frame(SID, b"ok")),
        expect=stream_error(E.PROTOCOL_ERROR, evidence=PARTIAL),
    ),
    Row(
        id="8.1.1 less DATA than content-length",
        clause="§8.1.1",
        says="END_STREAM before content-length is reached: malformed (the stream is already "
        "closed: nothing to reset)",
        play=play(head(("content-length", "10")) + data_frame(SID, b"ok", end_stream=True)),
        expect=stream_error(E.PROTOCOL_ERROR, evidence=PARTIAL, resets=()),
    ),
    # --- §8.2, §8.3 fields --------------------------------------------------------------------
    Row(
        id="8.1.1 a malformed head that ends the stream",
        clause="§8.1.1, §5.1",
        says="malformed, but the stream is closed: nothing to reset (no frame on a closed stream)",
        play=play(headers_frame(SID, [(":status", "200"), ("X-Upper", "1")], end_stream=True)),
        expect=stream_error(E.PROTOCOL_ERROR, evidence=SENT, message="malformed", resets=()),
    ),
    _malformed_head(
        "8.2 uppercase field name",
        "a field name with an uppercase letter is malformed",
        (":status", "200"),
        ("X-Upper", "1"),
    ),
    _malformed_head(
        "8.2.1 field value with CR LF",
        "a field value with CR or LF is malformed",
        (":status", "200"),
        ("x-bad", "a\r\nb"),
    ),
    _malformed_head(
        "8.2.1 field value with NUL",
        "a field value with NUL is malformed",
        (":status", "200"),
        ("x-bad", "a\x00b"),
    ),
    _malformed_head(
        "8.2.1 field value with leading space",
        "a field value that starts with a space is malformed",
        (":status", "200"),
        ("x-bad", " a"),
    ),
    _malformed_head(
        "8.2.2 connection-specific field",
        "a connection-specific field (connection) is malformed",
        (":status", "200"),
        ("connection", "keep-alive"),
    ),
    _malformed_head(
        "8.2.2 transfer-encoding",
        "transfer-encoding is connection-specific in HTTP/2: malformed",
        (":status", "200"),
        ("transfer-encoding", "chunked"),
    ),
    _malformed_head(
        "8.3 no :status",
        "a response without :status is malformed",
        ("content-length", "0"),
    ),
    _malformed_head(
        "8.3 two :status",
        "a response with :status twice is malformed",
        (":status", "200"),
        (":status", "204"),
    ),
    _malformed_head(
        "8.3.2 :status not three digits",
        "a :status that is not three digits is malformed",
        (":status", "2000"),
    ),
    _malformed_head(
        "8.3 pseudo-header after a regular field",
        "a pseudo-header after a regular field is malformed",
        ("x-first", "1"),
        (":status", "200"),
    ),
    _malformed_head(
        "8.3 request pseudo-header in a response",
        "a request pseudo-header (:path) in a response is malformed",
        (":status", "200"),
        (":path", "/"),
    ),
    # --- §8.7 what a reset proves, and cancellation -------------------------------------------
    Row(
        id="8.7 REFUSED_STREAM before any response: not processed",
        clause="§8.7",
        says="REFUSED_STREAM proves the request was not processed: NOT_SENT",
        play=play(rst_stream_frame(SID, E.REFUSED_STREAM)),
        expect=broken_stream(Evidence.NOT_SENT, category=FailureCategory.REFUSED_STREAM),
    ),
    Row(
        id="8.7 REFUSED_STREAM after the head proves nothing",
        clause="§8.7",
        says="a server that answered, then 'refused', did process: PARTIAL_RESPONSE",
        play=play(head() + rst_stream_frame(SID, E.REFUSED_STREAM)),
        expect=broken_stream(PARTIAL),
    ),
    Row(
        id="8.7 CANCEL before any response: may have run",
        clause="§8.7",
        says="any reset but REFUSED_STREAM leaves the request's fate open: SENT_NO_RESPONSE",
        play=play(rst_stream_frame(SID, E.CANCEL)),
        expect=broken_stream(SENT),
    ),
    Row(
        id="8.1 a whole response before the whole request",
        clause="§8.1",
        says="a response, then RST_STREAM(NO_ERROR), before the body was sent: the client "
        "stops sending and keeps the response",
        first=settings_frame((0x4, 100)),
        body=b"e" * 1000,
        play=play(WaitData(SID, 100), ok_response() + rst_stream_frame(SID, E.NO_ERROR)),
        expect=ok(again=True),
    ),
    Row(
        id="8.1 NO_ERROR reset after a whole response",
        clause="§8.1",
        says="a RST_STREAM(NO_ERROR) after a complete response leaves the response whole",
        play=play(ok_response() + rst_stream_frame(SID, E.NO_ERROR)),
        expect=ok(again=True),
    ),
    Row(
        id="8.7 the caller's deadline resets the stream with CANCEL",
        clause="§8.7, §5.4.2",
        says="a request the client gives up is reset with CANCEL; the connection carries on",
        play=play(),
        deadline=0.3,
        expect=_cancelled(),
    ),
    _late_after_reset(
        "5.1 frames after the client's RST_STREAM are ignored",
        "§5.1, §6.9",
        "frames the server sent before it saw the client's reset are ignored, not answered; "
        "their DATA is credited back to the connection's window",
        head() + data_frame(SID, b"x" * DATA_MAX) * 3 + data_frame(SID, b"late", end_stream=True),
    ),
    _late_after_reset(
        "5.1 frames after the client's RST_STREAM are ignored: CONTINUATION, padding",
        "§5.1, §6.9, §6.10",
        "a late head in HEADERS and CONTINUATION, and padded DATA, are ignored alike (the fast "
        "path hands them to h2)",
        raw_headers_frame(SID, SPLIT_HEAD[:2], flags=0)
        + continuation_frame(SID, SPLIT_HEAD[2:], end_headers=True)
        + padded(Kind.DATA, 0, SID, b"x" * 1000, 200)
        + data_frame(SID, b"late", end_stream=True),
    ),
    Row(
        id="8.1 a response split over many frames",
        clause="§8.1, §6.10",
        says="a head in a HEADERS and CONTINUATION, the body in many DATA frames, is read",
        play=play(
            raw_headers_frame(SID, SPLIT_HEAD[:2], flags=0),
            continuation_frame(SID, SPLIT_HEAD[2:], end_headers=True)
            + b"".join(data_frame(SID, b"%d" % i) for i in range(9))
            + data_frame(SID, b"9", end_stream=True),
        ),
        expect=ok(body=b"0123456789"),
    ),
]

__all__ = ["ROWS"]
