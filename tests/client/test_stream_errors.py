"""A stream's error stays on its stream (SPEC §3 and §16; issue #39), on HTTP/2 (cleartext and
over TLS) and HTTP/3 alike, against FaultServer on loopback, counting what the server saw:

- a malformed response (RFC 9113 §8.1.1, RFC 9114 §4.1.2) is a stream error: that stream
  alone is reset (HTTP/2: RST_STREAM with PROTOCOL_ERROR; HTTP/3: RESET_STREAM and
  STOP_SENDING with H3_MESSAGE_ERROR), its call fails ``ProtocolFailed`` with the evidence of
  the stage it reached, and the five POSTs beside it complete on the same connection;
- a response that has no content (to a HEAD, a 204, a 304: RFC 9110 §6.4.1) may carry a
  ``content-length``: it is valid, and answered in one attempt, on HTTP/1.1 too;
- HTTP/3: a GOAWAY whose id is not a client request stream's, or is larger than an earlier
  one's (RFC 9114 §5.2), is a connection error H3_ID_ERROR and proves nothing: a POST in
  flight is not sent again, the server runs it once.

(HEAD to caddy's file server over HTTP/3: ``tests/interop/test_h3_client.py``.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import h2.events
import pytest
import trio

import trio_retry
from tests.conftest import FAST
from tests.support.fault_quic import QuicWatch, watch_fault_quic
from trio_retry import Evidence, FailureCategory, ProtocolFailed
from trio_retry.testing import FaultServer, Respond, Stall
from trio_retry.testing import _h2_frames as h2f
from trio_retry.testing import _h3_frames as h3f
from trio_retry.testing._h2 import H2Handler
from trio_retry.testing._script import StreamFrames

LIMIT = 20  # seconds: the bound of each test's network activity
ONCE = trio_retry.RetryPolicy(max_attempts=1)
SIBLINGS = 5
H2_PROTOCOL_ERROR = 0x1
H3_MESSAGE_ERROR = 0x10E
H3_ID_ERROR = 0x108
HTTP_VERSIONS = {"h1": "HTTP/1.1", "h2c": "HTTP/2", "h2": "HTTP/2", "h3": "HTTP/3"}


# --- the servers, the clients, and what the server saw ------------------------------------------


@dataclass
class Resets:
    """What the server saw the client end, by stream id: RST_STREAM (HTTP/2), RESET_STREAM
    and STOP_SENDING (HTTP/3), each with its error code."""

    h2: dict[int, int]
    quic: QuicWatch | None

    def resets(self) -> dict[int, int]:
        if self.quic is None:
            return self.h2
        return {k: v for c in self.quic.connections for k, v in c.resets.items()}

    def stops(self) -> dict[int, int]:
        assert self.quic is not None
        return {k: v for c in self.quic.connections for k, v in c.stops.items()}


def watch_resets(monkeypatch: pytest.MonkeyPatch, protocol: str) -> Resets:
    """Watch the client's stream resets at FaultServer, from before it starts."""
    if protocol == "h3":
        return Resets({}, watch_fault_quic(monkeypatch))
    seen: dict[int, int] = {}
    on_event = H2Handler._on_event

    def spy(self: H2Handler, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.StreamReset):
            seen.setdefault(event.stream_id, event.error_code)
        on_event(self, event)

    monkeypatch.setattr(H2Handler, "_on_event", spy)
    return Resets(seen, None)


async def start(nursery: trio.Nursery, protocol: str) -> FaultServer:
    """FaultServer for ``protocol``: ``h1`` (cleartext), ``h2c``, ``h2`` (TLS) or ``h3``."""
    tls = protocol in ("h2", "h3")
    server = FaultServer(tls=tls, http2=protocol != "h1", http3=protocol == "h3")
    await nursery.start(server.serve)
    return server


def client_for(server: FaultServer, protocol: str, **options: Any) -> trio_retry.Client:
    """A client that reaches ``server`` over ``protocol`` from its first request."""
    options.setdefault("retry", FAST)
    if protocol == "h3":
        options["upstreams"] = {server.url: trio_retry.Upstream(http3=True)}
    if protocol == "h2c":
        options["http2_prior_knowledge"] = True
    if server.tls:
        options["ssl_context"] = server.client_ssl_context()
    return trio_retry.Client(**options)


# --- one table of malformed responses, written in each protocol's frames -------------------------

Fields = list[tuple[str, str]]


@dataclass(frozen=True)
class Malformed:
    """A response the client must refuse: its fields as sent (no normalisation), its body,
    whether the server then ends the stream (if not, it waits: only the client's stream error
    ends it), and what the refused call proves (no head: ``SENT_NO_RESPONSE``; a valid head,
    then a body that breaks its framing: ``PARTIAL_RESPONSE`` with its status).
    ``data_first``: a DATA frame comes before the head (HTTP/2 only: on HTTP/3 a frame out of
    order is a connection error, RFC 9114 §4.1)."""

    fields: Fields
    body: bytes
    ends: bool
    evidence: Evidence
    status: int | None = None
    data_first: bool = False

    def action(self, protocol: str) -> StreamFrames:
        """The response in ``protocol``'s frames."""
        if protocol == "h3":
            frames = h3f.headers_frame(self.fields)
            if self.body:
                frames += h3f.data_frame(self.body)
            return StreamFrames(lambda _: frames, fin=self.ends)
        return StreamFrames(
            lambda sid: (
                (h2f.data_frame(sid, b"early") if self.data_first else b"")
                + h2f.headers_frame(sid, self.fields)
                + h2f.data_frame(sid, self.body, end_stream=self.ends)
            )
        )


NO_HEAD = Evidence.SENT_NO_RESPONSE
PARTIAL = Evidence.PARTIAL_RESPONSE
OK_HEAD: Fields = [(":status", "200")]
MALFORMED = {
    "uppercase name": Malformed([*OK_HEAD, ("X-Bad", "1")], b"ok", False, NO_HEAD),
    "connection-specific field": Malformed(
        [*OK_HEAD, ("connection", "keep-alive")], b"ok", False, NO_HEAD
    ),
    "transfer-encoding": Malformed(
        [*OK_HEAD, ("transfer-encoding", "chunked")], b"ok", False, NO_HEAD
    ),
    "no :status": Malformed([("content-type", "text/plain")], b"ok", False, NO_HEAD),
    "invalid content-length": Malformed([*OK_HEAD, ("content-length", "1x")], b"a", False, NO_HEAD),
    "conflicting content-lengths": Malformed(
        [*OK_HEAD, ("content-length", "1"), ("content-length", "2")], b"ab", False, NO_HEAD
    ),
    "request pseudo-header": Malformed([*OK_HEAD, (":path", "/")], b"", True, NO_HEAD),
    "body shorter than content-length": Malformed(
        [*OK_HEAD, ("content-length", "10")], b"abc", True, PARTIAL, 200
    ),
    "body longer than content-length": Malformed(
        [*OK_HEAD, ("content-length", "2")], b"abcdef", True, PARTIAL, 200
    ),
    "no body for content-length": Malformed(
        [*OK_HEAD, ("content-length", "5")], b"", True, PARTIAL, 200
    ),
    "DATA before the head": Malformed(OK_HEAD, b"", True, NO_HEAD, data_first=True),
}
MALFORMED_CASES = [
    pytest.param(protocol, case, id=f"{protocol}-{case}")
    for case, malformed in MALFORMED.items()
    for protocol in ("h2c", "h2", "h3")
    if not (malformed.data_first and protocol == "h3")
]


@pytest.mark.parametrize(("protocol", "case"), MALFORMED_CASES)
async def test_a_malformed_response_fails_its_own_stream_only(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch, protocol: str, case: str
) -> None:
    """Five POSTs are being answered (slowly) when a GET gets a malformed response: that GET
    alone fails, ProtocolFailed with its evidence, its stream reset with the protocol's code;
    the POSTs complete (one attempt each, not ambiguous), and a GET after them goes on the
    same connection."""
    malformed = MALFORMED[case]
    watch = watch_resets(monkeypatch, protocol)
    server = await start(nursery, protocol)
    server.route("POST", "/sibling", *[Stall(0.4, then=Respond(200, body=b"fine"))] * SIBLINGS)
    server.route("GET", "/bad", malformed.action(protocol))
    siblings: list[trio_retry.Response] = []
    errors: list[BaseException] = []
    async with client_for(server, protocol) as client:

        async def sibling() -> None:
            siblings.append(await client.post(server.url + "/sibling", content=b"s"))

        async def bad() -> None:
            try:
                await client.get(server.url + "/bad", retry=ONCE)
            except trio_retry.TrioRetryError as exc:
                errors.append(exc)

        with trio.fail_after(LIMIT):
            async with trio.open_nursery() as calls:
                for _ in range(SIBLINGS):
                    calls.start_soon(sibling)
                await trio.sleep(0.1)
                calls.start_soon(bad)
            after = await client.get(server.url + "/after")
    (error,) = errors
    assert isinstance(error, ProtocolFailed), repr(error)
    (attempt,) = error.attempts
    assert (attempt.category, attempt.evidence, attempt.status) == (
        FailureCategory.REMOTE_PROTOCOL,
        malformed.evidence,
        malformed.status,
    )
    assert attempt.http_version == HTTP_VERSIONS[protocol]
    assert [(r.status, r.content, len(r.attempts)) for r in siblings] == [
        (200, b"fine", 1)
    ] * SIBLINGS
    assert {r.http_version for r in [*siblings, after]} == {HTTP_VERSIONS[protocol]}
    assert after.status == 200
    assert server.connections_accepted == 1
    assert server.executed_count("POST", "/sibling") == SIBLINGS
    # What the server saw: the malformed stream, when it was still open, ended by the client
    # with the protocol's code (HTTP/3: STOP_SENDING; its RESET_STREAM too unless the request
    # was all acknowledged); a stream the server had ended has nothing left to end. No other
    # stream was ended.
    [bad_stream] = [r.stream_id for r in server.requests if r.path == "/bad"]
    code = H3_MESSAGE_ERROR if protocol == "h3" else H2_PROTOCOL_ERROR
    ended = watch.stops() if protocol == "h3" else watch.resets()
    if not malformed.ends:
        assert ended == {bad_stream: code}
    assert set(ended.items()) | set(watch.resets().items()) <= {(bad_stream, code)}


# --- responses that have no content may declare a length -----------------------------------------

BODILESS = {
    "HEAD": ("HEAD", Respond(200, body=b"x" * 1234), 200, "1234"),
    "204": ("GET", Respond(204, headers={"content-length": "10"}), 204, "10"),
    "304": ("GET", Respond(304, headers={"content-length": "1234"}), 304, "1234"),
}


@pytest.mark.parametrize("case", list(BODILESS))
@pytest.mark.parametrize("protocol", ["h1", "h2", "h3"])
async def test_a_response_with_no_content_may_declare_a_length(
    nursery: trio.Nursery, protocol: str, case: str
) -> None:
    """A HEAD response carries the length of the body it does not send (RFC 9110 §9.3.2), and
    a 204 or a 304 may carry one: valid, one attempt, and the connection carries on."""
    method, action, status, length = BODILESS[case]
    server = await start(nursery, protocol)
    server.route(method, "/file", action)
    async with client_for(server, protocol, retry=ONCE) as client:
        with trio.fail_after(LIMIT):
            response = await client.request(method, server.url + "/file")
            after = await client.get(server.url + "/after")
    assert (response.status, response.content) == (status, b"")
    assert response.headers.get("content-length") == length
    assert response.http_version == HTTP_VERSIONS[protocol]
    assert len(response.attempts) == 1
    assert after.status == 200
    assert server.connections_accepted == 1


# --- HTTP/3: an invalid GOAWAY proves nothing ----------------------------------------------------


@pytest.mark.parametrize(
    "goaways",
    [[1], [2], [3], [8, 12]],
    ids=["server-bidi-id", "client-uni-id", "server-uni-id", "larger-than-before"],
)
async def test_an_invalid_goaway_does_not_send_a_post_again(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch, goaways: list[int]
) -> None:
    """A POST is in flight on stream 4 when the server sends GOAWAY frames RFC 9114 §5.2 makes
    a connection error H3_ID_ERROR: an id that is not a client-initiated bidirectional stream
    id (taken as proof, it said stream 4 was not processed, and the POST ran twice), or an id
    larger than the previous GOAWAY's. The client closes the connection with H3_ID_ERROR; the
    POST, which the server did run, is ambiguous and not sent again."""
    watch = watch_fault_quic(monkeypatch)
    server = await start(nursery, "h3")
    # Answered only after the lie: the stall ends with the connection the lie closes (its
    # 0.5 s before was outrun by a loaded machine: the 201 came first, the POST succeeded).
    server.route("POST", "/pay", Stall(LIMIT, then=Respond(201)))
    lie = b"".join(h3f.goaway_frame(goaway) for goaway in goaways)
    answer = h3f.headers_frame([(":status", "200"), ("content-length", "0")])
    server.route("GET", "/lie", StreamFrames(lambda _: answer, control=lie))
    outcome: dict[str, BaseException] = {}
    async with client_for(server, "h3") as client:
        with trio.fail_after(LIMIT):
            warm = await client.get(server.url + "/warm")  # stream 0

            async def pay() -> None:  # stream 4
                try:
                    await client.post(server.url + "/pay", content=b"100 EUR")
                except trio_retry.TrioRetryError as exc:
                    outcome["pay"] = exc

            async with trio.open_nursery() as calls:
                calls.start_soon(pay)
                await trio.sleep(0.1)
                calls.start_soon(client.get, server.url + "/lie")  # stream 8
    assert warm.status == 200
    assert server.executed_count("POST", "/pay") == 1
    error = outcome["pay"]
    assert isinstance(error, trio_retry.HttpAmbiguousExecutionError), repr(error)
    (attempt,) = error.attempts
    assert (attempt.evidence, attempt.category) == (
        Evidence.SENT_NO_RESPONSE,
        FailureCategory.REMOTE_PROTOCOL,
    )
    assert "H3_ID_ERROR" in str(error)
    assert watch.connections[0].close_codes == [H3_ID_ERROR]
