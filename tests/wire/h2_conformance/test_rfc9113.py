"""RFC 9113 as one scenario table (issue #41): every row played by a scripted raw-frame server,
over h2c and over TLS, with the HTTP/2 fast path and without it (h2 the reference); each asserts
the frames the client sent (its one GOAWAY and its code, its RST_STREAMs, its PING and SETTINGS
ACKs) and what the caller got (response, or exception, evidence and category).

The rows are ``rows_streams.py`` (§3.4, §4, §5), ``rows_frames.py`` (§6) and ``rows_messages.py``
(§8); ``table.py`` says what a row holds. What every row checks besides its own expectations, as
RFC 9113 asks of any sender: the client's preface (§3.4) and first SETTINGS (push off, §8.4);
no reserved bit and no undefined flag set (§4.1); no frame larger than 16,384 octets (§4.2); no
frame on a stream after the client reset it (§5.1), none at all after its GOAWAY (§6.8); a
GOAWAY's last-stream-id of 0 (the server opened no stream); the TCP connection closed after it
(§5.4.1); and, unless the client closed on a connection error, the connection's receive window
as the client keeps it equal to the server's, no octet leaked (§6.9, ``Expect.window_kept``).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import outcome
import pytest
import trio

import trio_retry
from tests.support.h2_fast_path import machines_made as machines_made
from tests.support.h2_frames import (
    ACK,
    DATA_MAX,
    DEFINED_FLAGS,
    PREFACE,
    Frame,
    Kind,
    names,
)
from tests.support.h2_peer import LIMIT, Peer, ScriptedServer
from trio_retry import HttpAmbiguousExecutionError
from trio_retry._wire.http2.fast import FastMachine
from trio_retry._wire.http2.h2_private import connection_window
from trio_retry.testing._certs import ServerCertificates

from . import rows_frames, rows_messages, rows_streams
from .table import SID, Expect, Row, run_play

ROWS: list[Row] = [*rows_streams.ROWS, *rows_frames.ROWS, *rows_messages.ROWS]
VARIANTS = ("h2c-fast", "h2c-h2", "tls-fast", "tls-h2")
ONCE = trio_retry.RetryPolicy(max_attempts=1)
#: How long a row waits for a frame the client owes (acknowledgement, reset, its close).
SETTLE = 2.0
ENABLE_PUSH = 0x2


def _cases() -> Iterator[Any]:
    """Every row over every variant: none is marked to fail (issue #41: the table passes)."""
    for row in ROWS:
        for variant in VARIANTS:
            yield pytest.param(row, variant, id=f"{variant}: {row.id}")


@pytest.fixture(scope="module")
def certificates() -> ServerCertificates:
    return ServerCertificates(http2=True)


def test_the_table_holds_each_row_once() -> None:
    ids = [row.id for row in ROWS]
    assert len(ids) == len(set(ids))
    assert sum(row.id.startswith("h2spec ") for row in ROWS) == 57


@pytest.mark.parametrize(("row", "variant"), list(_cases()))
async def test_rfc9113(
    row: Row,
    variant: str,
    certificates: ServerCertificates,
    nursery: trio.Nursery,
    machines_made: list[FastMachine],
) -> None:
    tls = variant.startswith("tls")
    server = ScriptedServer(
        lambda peer, _stream_id: run_play(row.play, peer),
        tls=certificates if tls else None,
        first=row.first,
        request=row.request,
    )
    await nursery.start(server.serve)
    options: dict[str, Any] = {"retry": ONCE, "http2_fast_path": variant.endswith("fast")}
    if tls:
        options |= {"http2": True, "ssl_context": certificates.client_context(offer_h2=True)}
    else:
        options["http2_prior_knowledge"] = True
    expect = row.expect
    again: outcome.Outcome[trio_retry.Response] | None = None
    async with trio_retry.Client(**options) as client:
        with trio.fail_after(LIMIT):
            if row.body is None:
                call = partial(client.get, server.url("/"), deadline=row.deadline)
            else:
                call = partial(
                    client.post, server.url("/"), content=row.body, deadline=row.deadline
                )
            first = await outcome.acapture(call)
        if not expect.leaves_at_once:
            await _settle(server, expect)
            if expect.again:
                with trio.fail_after(LIMIT):
                    again = await outcome.acapture(client.get, server.url("/again"))
    assert server.peers, "the client never connected"
    peer = server.peers[0]
    await peer.closed()
    _check_sender_rules(peer)
    _check_requests(peer, "https" if tls else "http", server.table_size)
    _check_flow_control(peer)
    _check_frames(peer, expect)
    _check_caller(first, expect)
    if expect.window_kept:
        _check_window_kept(peer, machines_made[0])
    if expect.again:
        assert again is not None
        response = again.unwrap()
        assert (response.status, response.content) == (200, b"ok")
        assert response.attempts[-1].connection_reused is True


async def _settle(server: ScriptedServer, expect: Expect) -> None:
    """Wait until the client sent what it owes (bounded by :data:`SETTLE` each): a test that
    closed the client at once would see only what it had sent by then."""
    if not server.peers:
        return
    peer = server.peers[0]
    waits = [
        *(
            lambda f, p=payload: f.kind == Kind.PING and bool(f.flags & ACK) and f.payload == p
            for payload in expect.ping_acks
        ),
        *(
            lambda f, s=stream_id, c=code: (
                f.kind == Kind.RST_STREAM and (f.stream_id, f.error_code) == (s, c)
            )
            for stream_id, code in expect.resets
        ),
        *(lambda f, start=start: str(f).startswith(start) for start in expect.sends),
    ]
    for predicate in waits:
        await peer.seen("a frame the client owes", predicate, timeout=SETTLE)
    if expect.closes:
        with trio.move_on_after(SETTLE):
            await peer.ended.wait()


def _check_sender_rules(peer: Peer) -> None:
    frames = peer.frames
    assert peer.preface == PREFACE
    assert frames, "the client sent nothing after its preface"
    settings = frames[0]
    assert (settings.kind, settings.flags, settings.stream_id) == (Kind.SETTINGS, 0, 0)
    assert settings.settings.get(ENABLE_PUSH) == 0
    reset: set[int] = set()
    for sent in frames:
        assert not sent.reserved, f"{sent}: the reserved bit is set"
        defined = DEFINED_FLAGS.get(Kind(sent.kind), 0) if sent.kind <= Kind.CONTINUATION else 0
        assert not sent.flags & ~defined, f"{sent}: undefined flags {sent.flags:#x}"
        assert sent.stream_id not in reset, f"{sent}: on a stream the client reset"
        if sent.kind == Kind.RST_STREAM:
            reset.add(sent.stream_id)
    assert peer.end == "eof", f"the client's side ended by {peer.end}: {names(frames)}"


#: Fields a request must not carry (RFC 9113 §8.2.2).
CONNECTION_SPECIFIC = {b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding"}


def _check_requests(peer: Peer, scheme: str, table_size: int) -> None:
    """Every request's field block decodes (§4.3) and is a valid request (§8.2, §8.3.1)."""
    for stream_id in peer.requests:
        fields = peer.fields.get(stream_id)
        assert isinstance(fields, list), f"stream {stream_id}'s request: {fields}"
        names = [name for name, _ in fields]
        pseudo = [name for name in names if name.startswith(b":")]
        assert names[: len(pseudo)] == pseudo, f"a pseudo-header after a field: {names}"
        assert sorted(pseudo) == [b":authority", b":method", b":path", b":scheme"], names
        assert dict(fields)[b":scheme"] == scheme.encode()
        assert all(name == name.lower() for name in names), names
        assert not CONNECTION_SPECIFIC & set(names), names
        assert dict(fields).get(b"te", b"trailers") == b"trailers"
    if table_size != 4096 and peer.block_starts:
        # RFC 7541 §4.2: the first block after a smaller SETTINGS_HEADER_TABLE_SIZE starts
        # with a dynamic table size update.
        assert peer.block_starts[0] & 0xE0 == 0x20, hex(peer.block_starts[0])


def _check_flow_control(peer: Peer) -> None:
    """The client never sent more DATA than the server's windows allowed (§6.9.1), nor a frame
    larger than its SETTINGS_MAX_FRAME_SIZE (§4.2), judged generously: a window counts every
    credit the server gave before the DATA arrived, at the largest initial size it announced."""
    connection = 65535
    initial = 65535
    max_frame = DATA_MAX
    credit: dict[int, int] = {}
    sent: dict[int, int] = {}
    total = 0
    for side, f in peer.events:
        if side == "server" and f.kind == Kind.WINDOW_UPDATE and len(f.payload) == 4:
            if f.stream_id:
                credit[f.stream_id] = credit.get(f.stream_id, 0) + f.increment
            else:
                connection += f.increment
        elif side == "server" and f.kind == Kind.SETTINGS and not f.flags & ACK:
            initial = max(initial, f.settings.get(0x4, initial))
            max_frame = max(max_frame, f.settings.get(0x5, max_frame))
        elif side == "client" and f.kind == Kind.DATA:
            assert len(f.payload) <= max_frame, f"{f}: larger than SETTINGS_MAX_FRAME_SIZE"
            total += len(f.payload)
            sent[f.stream_id] = sent.get(f.stream_id, 0) + len(f.payload)
            assert total <= connection, f"{total} octets over a connection window of {connection}"
            window = initial + credit.get(f.stream_id, 0)
            assert sent[f.stream_id] <= window, f"stream {f.stream_id}: {sent} over {window}"


def _check_window_kept(peer: Peer, machine: FastMachine) -> None:
    """The connection's receive window, as the client keeps it, is the server's: the
    initial 65,535 octets, plus each WINDOW_UPDATE[0] the client sent, less every DATA octet
    (padding included) the server sent; and every octet counted is credited back or owed
    (``Expect.window_kept``)."""
    server = 65535
    for side, f in peer.events:
        if side == "client" and f.kind == Kind.WINDOW_UPDATE and f.stream_id == 0:
            server += f.increment
        elif side == "server" and f.kind == Kind.DATA:
            server -= len(f.payload)
    window = connection_window(machine._h2)
    assert window.current_window_size == server, "the client counted other DATA octets"
    owed = window._bytes_processed
    assert window.current_window_size + owed == window.max_window_size, "octets leaked"


def _check_frames(peer: Peer, expect: Expect) -> None:
    frames = peer.frames
    seen = names(frames)
    goaways = peer.frames_of(Kind.GOAWAY)
    assert [(g.error_code, g.last_stream_id) for g in goaways] == [(expect.goaway, 0)], seen
    assert frames[-1] is goaways[0], f"frames after the GOAWAY: {seen}"
    resets = [(f.stream_id, f.error_code) for f in peer.frames_of(Kind.RST_STREAM)]
    assert resets == list(expect.resets), seen
    acks = [f.payload for f in peer.frames_of(Kind.PING) if f.flags & ACK]
    assert acks == list(expect.ping_acks), seen
    assert all(f.stream_id == 0 for f in peer.frames_of(Kind.PING)), seen
    settings_acks = [f for f in peer.frames_of(Kind.SETTINGS) if f.flags & ACK]
    assert len(settings_acks) == expect.settings_acks, seen
    assert all(not f.payload for f in settings_acks), seen
    requests = expect.requests if expect.requests is not None else 1 + expect.again
    assert len(peer.requests) == requests, seen
    if requests:
        assert peer.requests[0] == SID
    for start in expect.sends:
        assert any(name.startswith(start) for name in seen), f"no {start}: {seen}"


def _check_caller(result: outcome.Outcome[trio_retry.Response], expect: Expect) -> None:
    if expect.error is None:
        response = result.unwrap()
        assert response.status == expect.status
        if expect.body is not None:
            assert response.content == expect.body
        for name, value in expect.headers:
            assert response.headers.get(name) == value
        return
    assert isinstance(result, outcome.Error), f"the call succeeded: {result}"
    error = result.error
    assert not isinstance(error, HttpAmbiguousExecutionError)
    assert isinstance(error, expect.error), repr(error)
    assert error.evidence is expect.evidence, str(error)
    assert error.category is expect.category, str(error)
    if expect.message is not None:
        assert expect.message in str(error)


__all__ = ["Frame"]
