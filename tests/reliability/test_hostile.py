"""Hostile servers, as one scenario table on virtual time: a clear error, true evidence, no hang.

Each row of :data:`HOSTILE` is a server that answers badly (an oversized head, an invalid
``Content-Length``, broken chunked encoding, garbage instead of HTTP, a body without end, an
HTTP/2 peer that breaks the protocol, nothing at all) and what the call must say: the exception
type, its category and evidence, a word of its message, how many attempts it made, and how
long it took in virtual seconds (``trio.testing.MockClock(autojump_threshold=0)``: exactly, so
"refused at once" means 0.0 and "three attempts of 0.3 s" means 0.93, never a real-clock bound
that a busy machine could break). The servers are real `FaultServer` sockets on loopback, in
each protocol mode the row names. Where a row says ``then``, a POST on the same client follows
and must come out as it says: garbage that arrives after the server *executed* a
non-idempotent request is ``HttpAmbiguousExecutionError`` (the server's record says it ran), or,
when the head had arrived, a known failure that is not retried.

The tests after the table are the behaviours a row cannot say: a desync, a violation that
spares its neighbours, a fresh connection after one, an ignored unknown frame. Hostile input
from the *caller* is :mod:`tests.reliability.test_hostile_input`'s.
"""

from __future__ import annotations

import gzip
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import hpack
import pytest
import trio
import trio.testing

import trio_retry
from benchmarks.invariants import sockets_connected_to
from tests.conftest import LIMIT, MODES, client_for, server_for
from tests.support.h2_frames import frame, raw_headers_frame
from trio_retry import (
    ConnectFailed,
    DeadlineExceeded,
    Evidence,
    FailureCategory,
    HttpAmbiguousExecutionError,
    ProtocolFailed,
    StageTimeouts,
    TrioRetryError,
)
from trio_retry.testing import (
    Action,
    EndlessBody,
    FaultServer,
    Raw,
    Respond,
    Stall,
    refused_port,
)

H1 = ("h1", "h1-tls")
H2 = ("h2c", "h2-tls")


def h2_headers(*fields: tuple[bytes, bytes], flags: int = 0x4, stream_id: int = 1) -> bytes:
    """A HEADERS frame (END_HEADERS, plus END_STREAM with ``flags=0x5``), HPACK-encoded."""
    return raw_headers_frame(stream_id, hpack.Encoder().encode(list(fields)), flags=flags)


@dataclass(frozen=True)
class Failure:
    """What a call must raise: its type, category, evidence and a word of its message."""

    kind: type[TrioRetryError]
    category: FailureCategory
    evidence: Evidence
    says: str

    def check(self, result: object) -> Any:
        assert isinstance(result, self.kind), result
        assert getattr(result, "category", None) is self.category, result
        assert getattr(result, "evidence", None) is self.evidence, result
        assert self.says.lower() in str(result).lower(), result
        return result


def protocol(evidence: Evidence, says: str) -> Failure:
    return Failure(ProtocolFailed, FailureCategory.REMOTE_PROTOCOL, evidence, says)


#: The POST after a server answered garbage to a request it executed.
AMBIGUOUS = Failure(
    HttpAmbiguousExecutionError,
    FailureCategory.REMOTE_PROTOCOL,
    Evidence.SENT_NO_RESPONSE,
    "may have executed",
)
#: The POST after a head arrived, then garbage: known to have run, neither retried nor ambiguous.
PARTIAL = protocol(Evidence.PARTIAL_RESPONSE, "")


@dataclass(frozen=True, kw_only=True)
class Hostile:
    """One hostile server and what the call to it must say (see the module's docstring)."""

    modes: tuple[str, ...]
    answer: Action
    raises: Failure
    #: virtual seconds the call took, exactly (``pytest.approx``)
    took: float = 0.0
    #: how many attempts the error lists (``None``: not checked)
    attempts: int | None = 1
    options: Mapping[str, Any] = field(default_factory=dict)
    deadline: float | None = None
    #: how a POST on the same client ends afterwards (the server executed it once), if asked
    then: Failure | None = None
    then_deadline: float | None = None
    then_took: float = 0.0


BAD_HEADS = {
    "Content-Length abc": b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\nabc",
    "Content-Length -1": b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
    "two Content-Lengths": b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
    "Content-Length 1e3": b"HTTP/1.1 200 OK\r\nContent-Length: 1e3\r\n\r\n",
    "Transfer-Encoding gzip": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
    "SSH banner": b"SSH-2.0-OpenSSH_9.6\r\n",
    "TLS ClientHello": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 32,
    "status 999999": b"HTTP/1.1 999999 Nope\r\n\r\n",
    "space in a name": b"HTTP/1.1 200 OK\r\nBad Header Name: x\r\n\r\n",
    "blank lines": b"\r\n\r\n\r\n",
}
BROKEN_CHUNKS = {
    "not a hex size": b"zz\r\nhello\r\n0\r\n\r\n",
    "more than the size": b"5\r\nhello world\r\n0\r\n\r\n",
    "a negative size": b"-5\r\nhello\r\n0\r\n\r\n",
}
H2_VIOLATIONS = {
    "DATA on stream 0": (frame(0x0, 0x1, 0, b"data"), "stream id"),
    "zero WINDOW_UPDATE": (frame(0x8, 0x0, 0, struct.pack(">I", 0)), "non-compliant"),
    "window overflow": (frame(0x8, 0x0, 0, struct.pack(">I", 0x7FFFFFFF)), "flow control"),
    "SETTINGS of a bad size": (frame(0x4, 0x0, 0, b"\x00" * 7), "invalid"),
    "PUSH_PROMISE with push off": (
        frame(0x5, 0x4, 1, struct.pack(">I", 2) + hpack.Encoder().encode([(":status", "200")])),
        "pushed",
    ),
    "frame over the size limit": (frame(0x0, 0x0, 1, b"\x00" * 20_000), "max_frame_size"),
    "upper-case header name": (
        h2_headers((b":status", b"200"), (b"X-Upper", b"v"), flags=0x5),
        "uppercase",
    ),
    "no :status": (h2_headers((b"x", b"v"), flags=0x5), ":status"),
    "connection-specific header": (
        h2_headers((b":status", b"200"), (b"connection", b"close"), flags=0x5),
        "connection-specific",
    ),
    "undecodable HPACK": (frame(0x1, 0x5, 1, b"\xff\xff\xff\xff"), "decod"),
    "RST_STREAM on stream 0": (frame(0x3, 0x0, 0, struct.pack(">I", 1)), "stream id"),
    "GOAWAY too short": (frame(0x7, 0x0, 0, b"\x00" * 4), "goaway"),
    "GOAWAY on a stream": (frame(0x7, 0x0, 1, b"\x00" * 8), "goaway"),
    "HTTP/1.1 instead of frames": (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "frame"),
}
OVER_HEADER_LIMIT = protocol(Evidence.SENT_NO_RESPONSE, "max_header_bytes")
OVER_BODY_LIMIT = protocol(Evidence.PARTIAL_RESPONSE, "max_body_bytes")

HOSTILE: dict[str, Hostile] = {
    # A fresh connection's oversized head is not retried: the same server would answer the
    # same way. It ends on the head itself, never by waiting for a timeout.
    "oversized head": Hostile(
        modes=MODES,
        answer=Respond(200, headers={"X-Big": "a" * 70_000}),
        raises=OVER_HEADER_LIMIT,
        then=AMBIGUOUS,
    ),
    "many small headers": Hostile(
        modes=MODES,
        answer=Respond(200, headers=[(f"X-H{i}", "v" * 30) for i in range(600)]),
        options={"max_header_bytes": 16_384},
        raises=OVER_HEADER_LIMIT,
    ),
    **{
        f"not HTTP: {name}": Hostile(
            modes=H1,
            answer=Raw(data),
            raises=protocol(Evidence.SENT_NO_RESPONSE, "not valid HTTP/1.1"),
            attempts=None,
            then=AMBIGUOUS,
        )
        for name, data in BAD_HEADS.items()
    },
    # The first bytes cannot start an HTTP response: refused at once, not at the deadline.
    "garbage, the connection left open": Hostile(
        modes=H1,
        answer=Raw(b"SSH-2.0-OpenSSH_9.6\r\n", close=False),
        deadline=5,
        raises=protocol(Evidence.SENT_NO_RESPONSE, "SSH-2.0"),
    ),
    **{
        f"broken chunks: {name}": Hostile(
            modes=H1,
            answer=Raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks),
            raises=protocol(Evidence.PARTIAL_RESPONSE, "not valid HTTP/1.1"),
            attempts=None,
            then=PARTIAL,
        )
        for name, chunks in BROKEN_CHUNKS.items()
    },
    "a chunked body cut short": Hostile(
        modes=H1,
        answer=Raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nonly"),
        raises=Failure(
            trio_retry.ConnectionBroken,
            FailureCategory.CONNECTION_BROKEN,
            Evidence.PARTIAL_RESPONSE,
            "closed the connection",
        ),
        # A GET: tried again twice after 0.01 and 0.02 s, cut short each time.
        took=0.03,
        attempts=3,
    ),
    # Header lines without end, the connection held open: the limit, not the deadline, ends it.
    "a head that never ends": Hostile(
        modes=H1,
        answer=Raw(b"HTTP/1.1 200 OK\r\n" + b"X-More: y\r\n" * 10_000, close=False),
        deadline=5,
        raises=OVER_HEADER_LIMIT,
        attempts=None,
    ),
    # Three attempts of first_byte=0.3 s with 0.01 and 0.02 s of backoff; the POST after it,
    # not retried, ends at its first attempt's first_byte.
    "a head that stops halfway": Hostile(
        modes=H1,
        answer=Raw(b"HTTP/1.1 200 OK\r\nX-Half: ", close=False),
        options={"stage_timeouts": StageTimeouts(first_byte=0.3)},
        deadline=5,
        raises=Failure(
            DeadlineExceeded,
            FailureCategory.TIMEOUT,
            Evidence.SENT_NO_RESPONSE,
            "no response head within first_byte=0.3 s",
        ),
        took=0.93,
        attempts=3,
        then=Failure(
            HttpAmbiguousExecutionError,
            FailureCategory.TIMEOUT,
            Evidence.SENT_NO_RESPONSE,
            "may have executed",
        ),
        then_deadline=0.5,
        then_took=0.3,
    ),
    # Fetching it again would fetch the same body.
    "an endless body beyond max_body_bytes": Hostile(
        modes=MODES,
        answer=EndlessBody(),
        options={"max_body_bytes": 1_000_000},
        raises=OVER_BODY_LIMIT,
    ),
    "an endless body, no limit, ends at the deadline": Hostile(
        modes=MODES,
        answer=EndlessBody(chunk=b"e" * 1000, rate=100_000),
        deadline=2.0,
        raises=Failure(
            DeadlineExceeded, FailureCategory.TIMEOUT, Evidence.PARTIAL_RESPONSE, "deadline"
        ),
        took=2.0,
        attempts=None,
    ),
    # 20 MB of zeros in about 20 KB: the whole compressed body arrived.
    "a decompression bomb": Hostile(
        modes=MODES,
        answer=Respond(
            200, headers={"Content-Encoding": "gzip"}, body=gzip.compress(b"\0" * 20_000_000)
        ),
        options={"max_body_bytes": 1_000_000},
        raises=protocol(Evidence.RESPONSE_RECEIVED, "max_body_bytes"),
    ),
    **{
        f"HTTP/2: {name}": Hostile(
            modes=H2,
            answer=Raw(data, close=False),
            raises=protocol(Evidence.SENT_NO_RESPONSE, says),
            attempts=None,
            then=AMBIGUOUS,
        )
        for name, (data, says) in H2_VIOLATIONS.items()
    },
}

ROWS = [
    pytest.param(name, mode, id=f"{name}-{mode}")
    for name, row in HOSTILE.items()
    for mode in row.modes
]


async def call(
    client: trio_retry.Client, method: str, url: str, **options: Any
) -> tuple[BaseException | trio_retry.Response, float]:
    """The call's response or exception, and how long it took; bounded by LIMIT."""
    start = trio.current_time()
    with trio.fail_after(LIMIT):
        try:
            result: BaseException | trio_retry.Response = await client.request(
                method, url, content=b"amount=5" if method == "POST" else None, **options
            )
        except TrioRetryError as exc:
            result = exc
    return result, trio.current_time() - start


@pytest.mark.parametrize(("name", "mode"), ROWS)
async def test_a_hostile_server(
    name: str, mode: str, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    row = HOSTILE[name]
    server = server_for(mode)
    server.default = row.answer
    await nursery.start(server.serve)
    async with client_for(server, **row.options) as client:
        result, took = await call(client, "GET", server.url + "/get", deadline=row.deadline)
        error = row.raises.check(result)
        assert took == pytest.approx(row.took, abs=1e-6)
        if row.attempts is not None:
            assert len(error.attempts) == row.attempts
        assert {a.category for a in error.attempts} <= {row.raises.category}
        if row.then is not None:
            assert server.executed_count("GET", "/get") == len(error.attempts)
            result, took = await call(
                client, "POST", server.url + "/pay", deadline=row.then_deadline
            )
    if row.then is not None:
        error = row.then.check(result)
        assert len(error.attempts) == 1
        assert took == pytest.approx(row.then_took, abs=1e-6)
        assert server.executed_count("POST", "/pay") == 1
    assert sockets_connected_to({server.port}) == []


async def test_a_refused_port_is_not_sent_and_quick(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with trio_retry.Client() as client:
        result, took = await call(client, "POST", f"http://127.0.0.1:{refused_port()}/")
    error = Failure(ConnectFailed, FailureCategory.CONNECT, Evidence.NOT_SENT, "connect").check(
        result
    )
    # NOT_SENT is retried whatever the method: three refusals, the default backoff's full
    # jitter between them (at most 0.1 and 0.2 s), no other wait.
    assert len(error.attempts) == 3
    assert 0.0 < took <= 0.1 + 0.2


async def test_h2c_to_a_server_without_http2_fails_at_once(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    server = server_for("h1")  # answers the HTTP/2 preface with HTTP/1.1
    await nursery.start(server.serve)
    async with trio_retry.Client(http2_prior_knowledge=True) as client:
        result, took = await call(client, "POST", server.url + "/pay", deadline=5)
    # The handshake failed: no request was sent.
    protocol(Evidence.NOT_SENT, "h2c").check(result)
    assert took == 0.0


async def test_an_endless_body_read_from_a_stream_stops_at_max_body_bytes(
    any_server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    any_server.default = EndlessBody()
    async with client_for(any_server, max_body_bytes=1_000_000) as client:
        with trio.fail_after(LIMIT):
            async with client.stream("GET", any_server.url + "/endless") as response:
                with pytest.raises(ProtocolFailed, match="max_body_bytes") as info:
                    await response.aread()
    assert info.value.evidence is Evidence.PARTIAL_RESPONSE
    assert sockets_connected_to({any_server.port}) == []


# --- what a row cannot say ----------------------------------------------------------------------


async def test_bytes_after_a_response_are_never_taken_for_the_next_one(
    h1_server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    # A response with a wrong Content-Length: the rest looks like a second response. It must
    # not be handed to the next request as if the server had answered it (a desync).
    smuggled = b"HTTP/1.1 201 Created\r\nContent-Length: 5\r\n\r\nforgd"
    h1_server.script(Raw(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" + smuggled, close=False))
    h1_server.default = Respond(200, body=b"real")
    async with client_for(h1_server) as client:
        with trio.fail_after(LIMIT):
            first = await client.get(h1_server.url + "/one")
            second = await client.post(h1_server.url + "/two", content=b"pay")
    assert (first.status, first.content) == (200, b"ok")
    assert (second.status, second.content) == (200, b"real")
    assert not second.attempts[0].connection_reused
    assert h1_server.executed_count("POST", "/two") == 1


async def test_a_violation_after_the_head_is_a_partial_response(
    h2_server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    # A head, 80 KiB of body (more than one read, so the head is surely seen first), then
    # DATA on stream 0.
    head = h2_headers((b":status", b"200"))
    body = frame(0x0, 0x0, 1, b"b" * 16_384) * 5
    h2_server.default = Raw(head + body + frame(0x0, 0x1, 0, b"boom"), close=False)
    async with client_for(h2_server) as client:
        result, _ = await call(client, "POST", h2_server.url + "/pay")
    error = protocol(Evidence.PARTIAL_RESPONSE, "stream id").check(result)
    assert len(error.attempts) == 1  # the side effect is known: not retried, not ambiguous
    assert h2_server.executed_count() == 1


async def test_the_next_call_gets_a_fresh_connection(
    h2_server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    h2_server.script(Raw(frame(0x0, 0x1, 0, b"data"), close=False))
    async with client_for(h2_server) as client:
        with trio.fail_after(LIMIT):
            # On a fresh connection: not retried (the same server would answer the same way).
            with pytest.raises(ProtocolFailed) as info:
                await client.get(h2_server.url + "/broken")
            response = await client.get(h2_server.url + "/next")
    (broken,) = info.value.attempts
    assert (broken.category, broken.evidence, broken.connection_reused) == (
        FailureCategory.REMOTE_PROTOCOL,
        Evidence.SENT_NO_RESPONSE,
        False,
    )
    (attempt,) = response.attempts
    assert (attempt.status, attempt.connection_reused) == (200, False)
    assert h2_server.connections_accepted == 2


async def beside_a_stalled_post(server: FaultServer) -> dict[str, object]:
    """A POST to ``/slow`` (stalled by the test's script) on one client, then 0.2 s later a GET
    of ``/bad`` beside it: what each call ended with, under ``"post"`` and ``"get"``."""
    outcomes: dict[str, object] = {}
    async with client_for(server) as client:

        async def post() -> None:
            outcomes["post"], _ = await call(client, "POST", server.url + "/slow")

        with trio.fail_after(LIMIT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(post)
                await trio.sleep(0.2)
                outcomes["get"], _ = await call(client, "GET", server.url + "/bad")
    return outcomes


async def test_neighbours_of_a_violation_keep_true_evidence(
    h2_server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    # Stream 1 has run and is stalled when stream 3 gets a frame that kills the connection:
    # stream 1's POST ran, so it must come out ambiguous, never NOT_SENT.
    h2_server.route("POST", "/slow", Stall(1.0))
    h2_server.route("GET", "/bad", Raw(frame(0x0, 0x1, 0, b"data"), close=False))
    outcomes = await beside_a_stalled_post(h2_server)
    assert isinstance(outcomes["get"], trio_retry.Response)  # retried on a new connection
    AMBIGUOUS.check(outcomes["post"])
    assert h2_server.executed_count("POST", "/slow") == 1


async def test_a_malformed_response_fails_only_its_own_stream(
    h2_server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    # RFC 9113 §8.1.1: a malformed response is a stream error. Stream 1 (a POST) is being
    # served when stream 3 gets a head with an upper-case field name: only stream 3 fails
    # (and is retried on the same connection); the POST is not made ambiguous by it. The
    # fields are sent never-indexed so the client's HPACK table stays in step with the
    # server's own encoder.
    fields = [hpack.NeverIndexedHeaderTuple(b":status", b"200"),
              hpack.NeverIndexedHeaderTuple(b"X-Upper", b"v")]  # fmt: skip
    bad_head = frame(0x1, 0x5, 3, hpack.Encoder().encode(fields))
    h2_server.route("POST", "/slow", Stall(1.0))
    h2_server.route("GET", "/bad", Raw(bad_head, close=False), Respond(200, body=b"good"))
    outcomes = await beside_a_stalled_post(h2_server)
    post, get = outcomes["post"], outcomes["get"]
    assert isinstance(post, trio_retry.Response), post
    assert post.status == 200
    assert isinstance(get, trio_retry.Response), get
    assert get.content == b"good"
    first, second = get.attempts
    assert (first.category, first.evidence) == (
        FailureCategory.REMOTE_PROTOCOL,
        Evidence.SENT_NO_RESPONSE,
    )
    assert "uppercase header name" in str(first.error)
    assert second.connection_reused
    assert h2_server.connections_accepted == 1
    assert h2_server.executed_count("POST", "/slow") == 1


async def test_an_unknown_frame_type_is_ignored_as_the_rfc_requires(
    h2_server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    unknown = frame(0xFA, 0x0, 0, b"extension")
    answer = h2_headers((b":status", b"200")) + frame(0x0, 0x1, 1, b"fine")
    h2_server.default = Raw(unknown + answer, close=False)
    async with client_for(h2_server) as client:
        with trio.fail_after(LIMIT):
            response = await client.get(h2_server.url + "/ext")
    assert (response.status, response.content) == (200, b"fine")


@pytest.mark.parametrize(
    "body",
    [b"<html>not json</html>", b"", b'{"a": ', b"\xff\xfe\x00garbage"],
    ids=["html", "empty", "truncated", "not-utf8"],
)
async def test_a_body_that_is_not_json_is_a_trio_retry_error(
    nursery: trio.Nursery, body: bytes
) -> None:
    server = server_for("h1")
    server.default = Respond(200, body=body, headers={"Content-Type": "application/json"})
    await nursery.start(server.serve)
    async with trio_retry.Client() as client:
        response = await client.get(server.url + "/api")
    with pytest.raises(trio_retry.ResponseNotJSON, match="is not JSON") as info:
        response.json()
    assert isinstance(info.value, trio_retry.TrioRetryError)
    assert isinstance(info.value, ValueError)  # as json.JSONDecodeError is
    assert isinstance(info.value.__cause__, ValueError)
