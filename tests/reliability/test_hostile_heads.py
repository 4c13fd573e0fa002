"""A hostile server's response head, the same attacks on HTTP/1.1, HTTP/2 and HTTP/3: the client
refuses what is past ``max_header_bytes`` as it arrives, before buffering or decoding it
(SPEC §10, §16; RFC 9113 §10.5.1, RFC 9114 §4.2.2, §7, §10.5, RFC 9204 §2.1).

Each row is one attack: a head far over the limit, a header frame (or a head) announced at a
size it never reaches, a compression bomb (a dynamic-table entry referenced thousands of times),
and the frames HTTP/3 adds (a GOAWAY or SETTINGS longer than their content, a push, a stream
the server opened). Each call must end with a clear error at once (well before its deadline)
and the client must allocate little while it does: the call runs in a process of its own
(``tests/support/measured_call.py``), whose peak RSS and peak of Python's allocations during the
call must stay under :data:`MEMORY_BOUND` (a generous bound: the figures are in the commits).

HTTP/1.1 and HTTP/2 are played by FaultServer's ``Raw`` (the bytes where the response goes);
HTTP/3 by FaultServer with hostile HTTP/3 connections (``tests/support/hostile_h3.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from trio_retry import Evidence
from trio_retry.testing import FaultServer, Raw, Respond, Stall

from ..support.h2_frames import frame
from ..support.hostile_h3 import (
    H3Attack,
    H3Attacks,
    frame_header,
    hostile_h3,
    prefixed_int,
    qpack_literal_section,
)
from ..support.measured_call import Call, measured_call

KIB = 1024
MIB = 1024 * KIB
#: The most the client's process may grow while a call meets an attack (its peak RSS, and the
#: peak of Python's allocations); without the limits, the attacks below cost 16 MiB to 2 GiB.
MEMORY_BOUND = 16 * MIB
#: Every attacked call's deadline; it must end well before it (:data:`PROMPT`).
DEADLINE = 8.0
PROMPT = 3.0
LIMIT = 30  # seconds: the bound on each test

# --- HTTP/1.1 -----------------------------------------------------------------------------


def h1_head(extra: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\n" + extra


# --- HTTP/2 (h2c with prior knowledge: the first request is stream 1) ------------------------

H2_MAX_FRAME = 16_384
END_STREAM, END_HEADERS = 0x1, 0x4


def h2_frame_header(kind: int, flags: int, stream_id: int, length: int) -> bytes:
    """An HTTP/2 frame's header alone (RFC 9113 §4.1): its payload is announced, not given."""
    return length.to_bytes(3, "big") + bytes((kind, flags)) + stream_id.to_bytes(4, "big")


def h2_header_block(block: bytes, *, end_headers: bool = True, end_stream: bool = False) -> bytes:
    """``block`` as a HEADERS frame and as many CONTINUATION frames as it takes."""
    pieces = [block[i : i + H2_MAX_FRAME] for i in range(0, len(block), H2_MAX_FRAME)] or [b""]
    out = bytearray()
    for index, piece in enumerate(pieces):
        last = index == len(pieces) - 1
        flags = END_HEADERS if last and end_headers else 0
        if index == 0 and end_stream:
            flags |= END_STREAM
        out += frame(0x1 if index == 0 else 0x9, flags, 1, piece)
    return bytes(out)


def hpack_literal(name: bytes, value: bytes, *, indexed: bool = False) -> bytes:
    """A literal field with a new name (RFC 7541 §6.2), added to the dynamic table if
    ``indexed``; no Huffman."""
    first = b"\x40" if indexed else b"\x00"
    return first + prefixed_int(len(name), 7) + name + prefixed_int(len(value), 7) + value


STATUS_200_HPACK = b"\x88"  # static index 8
#: An HPACK bomb: a 4,000-byte entry put in the dynamic table, then referenced 16,000 times
#: (one byte each, dynamic index 62): 20 KB on the wire, 64 MB decoded.
HPACK_BOMB = STATUS_200_HPACK + hpack_literal(b"x", b"a" * 4000, indexed=True) + b"\xbe" * 16_000

# --- HTTP/3 -------------------------------------------------------------------------------

H3_DATA, H3_HEADERS, H3_SETTINGS, H3_PUSH_PROMISE, H3_GOAWAY = 0x0, 0x1, 0x4, 0x5, 0x7
STATUS_200_QPACK = b"\xd9"  # static index 25, ":status: 200"


def h3_frame(kind: int, payload: bytes) -> bytes:
    return frame_header(kind, len(payload)) + payload


def h3_head(fields: list[tuple[bytes, bytes]]) -> bytes:
    return h3_frame(H3_HEADERS, qpack_literal_section([(b":status", b"200"), *fields]))


#: A QPACK bomb: the encoder stream sets the table's capacity to 4,096 and inserts a 4,000-byte
#: entry (RFC 9204 §4.3); a field section then references it 16,000 times (one byte each:
#: Required Insert Count 1, Base 1, relative index 0): 16 KB on the wire, 64 MB decoded.
QPACK_BOMB_ENCODER = b"\x3f\xe1\x1f" + b"\x41x" + prefixed_int(4000, 7) + b"a" * 4000
QPACK_BOMB_SECTION = b"\x02\x00" + STATUS_200_QPACK + b"\x80" * 16_000

#: The static table's longest entry (index 58, "strict-transport-security: max-age=31536000;
#: includesubdomains; preload", 69 bytes), referenced in one byte: a field section made of
#: these decodes to 101 times its length (RFC 9114 §4.2.2's count) and built ~190 bytes of
#: Python objects per byte.
LONGEST_STATIC_QPACK = b"\xfa"
#: 384 fields of 1 KiB (decoders refuse a single string of 64 KiB or more on their own).
BIG_FIELDS = [(b"x-field-%d" % i, b"a" * KIB) for i in range(384)]

# --- the table ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Attack:
    protocol: str  # "HTTP/1.1", "HTTP/2" or "HTTP/3"
    #: HTTP/1.1 and HTTP/2: what the server writes where the response goes (made when the
    #: test runs: some are tens of MiB).
    raw: Callable[[], bytes] = bytes
    #: HTTP/3: what the hostile connection writes.
    h3: H3Attack | None = None
    #: What the error says (in lower case), or None when the call must succeed.
    says: str | None = "max_header_bytes"
    #: The evidence of the call's one attempt, and the requests the server saw.
    evidence: Evidence = Evidence.SENT_NO_RESPONSE
    executed: int = 1
    #: HTTP/3: a stream error (the connection carries the next call), the stream reset or
    #: stopped with one of ``reset_with`` (unless it had ended both ways); or a connection
    #: error, the connection closed with one of ``closed_with``.
    stream_error: bool = False
    reset_with: frozenset[int] = frozenset()
    closed_with: frozenset[int] = frozenset()
    #: The client's ``max_header_bytes``.
    max_header_bytes: int = 65536
    #: The bound on the client's memory during the call (:data:`MEMORY_BOUND`).
    memory: int = MEMORY_BOUND


H3_EXCESSIVE_LOAD, H3_FRAME_ERROR, H3_ID_ERROR = 0x107, 0x106, 0x108
H3_STREAM_CREATION_ERROR, H3_MESSAGE_ERROR = 0x103, 0x10E
QPACK_ENCODER_STREAM_ERROR, QPACK_DECOMPRESSION_FAILED = 0x201, 0x200
STREAM_ERROR = frozenset({H3_EXCESSIVE_LOAD, H3_MESSAGE_ERROR})

ATTACKS: dict[str, Attack] = {
    # A head of 384 KiB, whole.
    "h1 oversized head": Attack(
        "HTTP/1.1",
        raw=lambda: h1_head(b"".join(n + b": " + v + b"\r\n" for n, v in BIG_FIELDS) + b"\r\n"),
    ),
    "h2 oversized head": Attack(
        "HTTP/2",
        raw=lambda: h2_header_block(
            STATUS_200_HPACK + b"".join(hpack_literal(n, v) for n, v in BIG_FIELDS)
        ),
    ),
    "h3 oversized head": Attack(
        "HTTP/3",
        h3=H3Attack(request=h3_head(BIG_FIELDS)),
        says="(a headers frame of",  # refused at its frame header, by its announced length
        memory=2 * MIB,  # (issue #39: "a 384 KiB HEADERS frame costs < 2 MiB")
        stream_error=True,
        reset_with=STREAM_ERROR,
    ),
    # A head that announces (or takes) far more than ever arrives: refused at the limit.
    "h1 endless head": Attack("HTTP/1.1", raw=lambda: h1_head(b"X-Big: " + b"a" * 32 * MIB)),
    "h2 HEADERS announced at 16 MiB": Attack(
        "HTTP/2",
        raw=lambda: h2_frame_header(0x1, END_HEADERS, 1, 0xFFFFFF) + b"\x00" * 8 * MIB,
        says="frame",
    ),
    "h2 endless CONTINUATION run": Attack(
        "HTTP/2",
        raw=lambda: h2_header_block(
            STATUS_200_HPACK + hpack_literal(b"x-big", b"a" * 32 * MIB), end_headers=False
        ),
        says="continuation",
    ),
    "h3 HEADERS announced at 1 GiB": Attack(
        "HTTP/3",
        h3=H3Attack(request=frame_header(H3_HEADERS, 1 << 30), trickle=32 * MIB),
        stream_error=True,
        reset_with=STREAM_ERROR,
    ),
    # Compression bombs.
    "h2 HPACK bomb": Attack("HTTP/2", raw=lambda: h2_header_block(HPACK_BOMB)),
    "h3 QPACK bomb": Attack(
        "HTTP/3",
        h3=H3Attack(encoder=QPACK_BOMB_ENCODER, request=h3_frame(H3_HEADERS, QPACK_BOMB_SECTION)),
        says="qpack",
        closed_with=frozenset({QPACK_ENCODER_STREAM_ERROR, QPACK_DECOMPRESSION_FAILED}),
    ),
    # A section the static table makes large: refused before decoding (scanned), whatever
    # the limit (here 256 KiB: 26 MB decoded, 50 MiB of Python objects without the scan), and
    # below the size scanned, by the decoded size.
    "h3 static-table bomb": Attack(
        "HTTP/3",
        h3=H3Attack(
            request=h3_frame(
                H3_HEADERS, b"\x00\x00" + STATUS_200_QPACK + LONGEST_STATIC_QPACK * 256 * KIB
            )
        ),
        max_header_bytes=256 * KIB + 64,
        stream_error=True,
        reset_with=STREAM_ERROR,
    ),
    "h3 small section decoded past the limit": Attack(
        "HTTP/3",
        h3=H3Attack(
            request=h3_frame(
                H3_HEADERS, b"\x00\x00" + STATUS_200_QPACK + LONGEST_STATIC_QPACK * 1000
            )
        ),
        stream_error=True,
        reset_with=STREAM_ERROR,
    ),
    "h3 small trailers decoded past the limit": Attack(
        "HTTP/3",
        h3=H3Attack(
            end_stream=True,
            request=h3_head([(b"content-length", b"2")])
            + h3_frame(H3_DATA, b"ok")
            + h3_frame(H3_HEADERS, b"\x00\x00" + LONGEST_STATIC_QPACK * 1000),
        ),
        evidence=Evidence.PARTIAL_RESPONSE,
        stream_error=True,  # (not reset: it had ended both ways)
    ),
    # Trailers past the limit, after a whole body.
    "h1 oversized trailers": Attack(
        "HTTP/1.1",
        raw=lambda: (
            h1_head(b"Transfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n")
            + b"".join(n + b": " + v + b"\r\n" for n, v in BIG_FIELDS)
            + b"\r\n"
        ),
        evidence=Evidence.PARTIAL_RESPONSE,
    ),
    "h2 oversized trailers": Attack(
        "HTTP/2",
        raw=lambda: (
            h2_header_block(STATUS_200_HPACK + hpack_literal(b"content-length", b"2"))
            + frame(0x0, 0, 1, b"ok")
            + h2_header_block(b"".join(hpack_literal(n, v) for n, v in BIG_FIELDS), end_stream=True)
        ),
        evidence=Evidence.PARTIAL_RESPONSE,
    ),
    "h3 oversized trailers": Attack(
        "HTTP/3",
        h3=H3Attack(
            end_stream=True,
            request=h3_head([(b"content-length", b"2")])
            + h3_frame(H3_DATA, b"ok")
            + h3_frame(H3_HEADERS, qpack_literal_section(BIG_FIELDS)),
        ),
        evidence=Evidence.PARTIAL_RESPONSE,
        stream_error=True,
        reset_with=STREAM_ERROR,
    ),
    # HTTP/3's frames past their content, and what a client never accepts.
    "h3 GOAWAY longer than its id": Attack(
        "HTTP/3",
        h3=H3Attack(
            control=frame_header(H3_GOAWAY, 1 << 30) + b"\x00",
            trickle=32 * MIB,
            trickle_on="control",
        ),
        says="goaway",
        closed_with=frozenset({H3_FRAME_ERROR}),
    ),
    "h3 SETTINGS announced at 1 GiB": Attack(
        "HTTP/3",
        h3=H3Attack(
            settings=frame_header(H3_SETTINGS, 1 << 30), trickle=32 * MIB, trickle_on="control"
        ),
        says="settings",
        evidence=Evidence.NOT_SENT,  # (it comes before the first request can go)
        executed=0,
        # (or QUIC's APPLICATION_ERROR: a close before the handshake is confirmed hides the
        # HTTP/3 code, RFC 9000 §10.2.3)
        closed_with=frozenset({H3_EXCESSIVE_LOAD, 0x0C}),
    ),
    "h3 unknown control frame of 1 GiB, skipped": Attack(
        "HTTP/3",
        h3=H3Attack(control=frame_header(0x21, 1 << 30), trickle=32 * MIB, trickle_on="control"),
        says=None,
    ),
    "h3 PUSH_PROMISE announced at 1 GiB": Attack(
        "HTTP/3",
        h3=H3Attack(request=frame_header(H3_PUSH_PROMISE, 1 << 30), trickle=32 * MIB),
        says="push",
        closed_with=frozenset({H3_ID_ERROR}),
    ),
    "h3 a stream the server opened": Attack(
        "HTTP/3",
        h3=H3Attack(
            server_stream=frame_header(H3_HEADERS, 1 << 30),
            trickle=32 * MIB,
            trickle_on="server_stream",
        ),
        says="stream",
        closed_with=frozenset({H3_STREAM_CREATION_ERROR}),
    ),
}


@pytest.mark.parametrize("name", list(ATTACKS))
async def test_a_hostile_head_is_refused_as_it_arrives(
    name: str, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    attack = ATTACKS[name]
    record: H3Attacks | None = None
    if attack.protocol == "HTTP/3":
        assert attack.h3 is not None
        record = hostile_h3(monkeypatch, {"/attack": attack.h3})
        server = FaultServer(tls=True, http3=True)
        server.route("GET", "/attack", Stall(60) if attack.says else Respond(200))
        (tmp_path / "ca.pem").write_bytes(server.ca_pem)
    else:
        server = FaultServer(http2=attack.protocol == "HTTP/2")
        server.route("GET", "/attack", Raw(attack.raw(), close=False))
    server.default = Respond(200)
    await nursery.start(server.serve)
    with trio.fail_after(LIMIT):
        got = await measured_call(
            Call(
                url=f"{server.url}/attack",
                warm_url=f"{server.url}/warm",
                protocol=attack.protocol,
                deadline=DEADLINE,
                ca_file=str(tmp_path / "ca.pem") if record is not None else None,
                after=f"{server.url}/after" if attack.stream_error else None,
                max_header_bytes=attack.max_header_bytes,
            )
        )
    if attack.says is None:
        assert got.outcome == "200", got
    else:
        assert got.outcome == "ProtocolFailed", got
        assert (got.category, got.evidence) == ("REMOTE_PROTOCOL", attack.evidence.name), got
        assert attack.says in got.message.lower(), got
        # On a fresh connection: one attempt, not retried.
        assert [(version, category) for version, _, category in got.attempts] == [
            (attack.protocol, "REMOTE_PROTOCOL")
        ], got
        assert server.executed_count("GET", "/attack") == attack.executed
    assert got.elapsed < PROMPT, got
    assert got.rss_growth < attack.memory, f"RSS +{got.rss_growth / MIB:.1f} MiB"
    assert got.traced_peak < attack.memory, f"Python allocations +{got.traced_peak / MIB:.1f} MiB"
    if attack.stream_error:
        assert got.after == ("200", True), got
    if record is not None:
        codes = set().union(*record.resets.values())
        if attack.reset_with:
            assert codes & attack.reset_with, record
        if attack.closed_with:  # (the server reports a close once its draining ends)
            with trio.move_on_after(LIMIT / 3):
                while not set(record.closes) & attack.closed_with:
                    await trio.sleep(0.02)
            assert set(record.closes) & attack.closed_with, record


async def test_a_stream_given_up_is_read_no_more(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """HTTP/3: a server that goes on writing on a stream the client gave up (its call's deadline
    passed: the stream reset and stopped) is not read there, whatever it writes (here a HEADERS
    frame announced at 1 GiB and 32 MiB of it, the server ignoring STOP_SENDING), while the
    connection carries the next call."""
    attack = H3Attack(
        request=frame_header(H3_HEADERS, 1 << 30), trickle=32 * MIB, ahead=8 * MIB, after_reset=True
    )
    record = hostile_h3(monkeypatch, {"/attack": attack})
    server = FaultServer(tls=True, http3=True)
    server.route("GET", "/attack", Stall(60))
    server.route("GET", "/after", Stall(4.0))  # (while MiB of it arrive)
    server.default = Respond(200)
    (tmp_path / "ca.pem").write_bytes(server.ca_pem)
    await nursery.start(server.serve)
    with trio.fail_after(LIMIT):
        got = await measured_call(
            Call(
                url=f"{server.url}/attack",
                warm_url=f"{server.url}/warm",
                protocol="HTTP/3",
                deadline=DEADLINE,
                first_deadline=0.5,
                ca_file=str(tmp_path / "ca.pem"),
                after=f"{server.url}/after",
                max_attempts=1,
            )
        )
    assert (got.outcome, got.evidence) == ("DeadlineExceeded", "SENT_NO_RESPONSE"), got
    assert got.after == ("200", True), got
    [trickled] = record.trickled
    assert trickled > 4 * MIB, trickled  # (what the client's flow control let through)
    # What the client kept of it: nothing (aioquic kept it all: 3 to 6 MiB in these seconds,
    # its copying slowing the client down).
    assert got.rss_growth < 2 * MIB, f"RSS +{got.rss_growth / MIB:.1f} MiB"
    assert got.traced_peak < 2 * MIB, f"Python allocations +{got.traced_peak / MIB:.1f} MiB"


async def test_refused_streams_leave_nothing_behind(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """HTTP/3: a stream refused on a frame aioquic had begun to keep (a section scanned when
    whole, its first bytes already handed on) leaves nothing of it in aioquic: 100 calls
    refused so on one connection cost what one does (aioquic kept ~60 KiB of each, 5.7 MiB)."""
    section = b"\x00\x00" + STATUS_200_QPACK + LONGEST_STATIC_QPACK * 60_000
    hostile_h3(monkeypatch, {"/attack": H3Attack(request=h3_frame(H3_HEADERS, section))})
    server = FaultServer(tls=True, http3=True)
    server.route("GET", "/attack", Stall(60))
    server.default = Respond(200)
    (tmp_path / "ca.pem").write_bytes(server.ca_pem)
    await nursery.start(server.serve)
    with trio.fail_after(LIMIT * 2):
        got = await measured_call(
            Call(
                url=f"{server.url}/attack",
                warm_url=f"{server.url}/warm",
                protocol="HTTP/3",
                deadline=DEADLINE,
                ca_file=str(tmp_path / "ca.pem"),
                after=f"{server.url}/after",
                max_attempts=1,  # (each on the one connection: not retried on a fresh one)
                repeat=100,
            )
        )
    assert (got.outcome, got.category) == ("ProtocolFailed", "REMOTE_PROTOCOL"), got
    assert "field section of at least" in got.message, got
    assert got.after == ("200", True), got
    assert server.executed_count("GET", "/attack") == 100
    assert got.traced_peak < 2 * MIB, f"Python allocations +{got.traced_peak / MIB:.1f} MiB"
