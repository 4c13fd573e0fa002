"""FaultServer's streams on the wire, over HTTP/1.1, HTTP/2 and HTTP/3 (raw clients that report
what arrived and how it ended): `StreamedBody` (parts, pauses, and its four ends), the
`EventSource` (resumption after Last-Event-ID, drops, retry, heartbeats, torn events, 204) and
the `StaticFile` (206 with Content-Range, a cut, a changed representation). The pure rules of
`StaticFile` are in test_static_file.py."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest
import trio

from trio_retry import SSEEvent
from trio_retry._sse import SSEParser
from trio_retry.testing import EventSource, FaultServer, Respond, StaticFile, StreamedBody

from .conftest import StartServer
from .raw import H1Client, H2Client

PROTOCOLS = ["h1", "h2", "h3"]
H2_INTERNAL_ERROR = 2
H3_INTERNAL_ERROR = 0x102


@dataclass
class Fetched:
    status: int | None
    headers: dict[str, str]
    body: bytes
    #: "finish" (the body's proper end), "break" (the stream or connection cut mid-body, the
    #: connection otherwise intact), "reset" (the whole connection reset).
    end: str


class Peer:
    """One connection of a raw client to a FaultServer, over the chosen protocol."""

    def __init__(self, protocol: str, server: FaultServer) -> None:
        self.protocol = protocol
        self.server = server

    @asynccontextmanager
    async def open(self) -> AsyncIterator[Peer]:
        if self.protocol == "h3":
            pytest.importorskip("aioquic")
            from tests.support.h3client import open_h3_client

            async with open_h3_client(self.server.port, ca_pem=self.server.ca_pem) as client:
                self.h3 = client
                yield self
        else:
            yield self

    async def fetch(
        self, path: str, headers: Sequence[tuple[str, str]] = (), method: str = "GET"
    ) -> Fetched:
        """One request on a connection of its own (HTTP/3: on the one QUIC connection)."""
        if self.protocol == "h1":
            h1 = await H1Client.open(self.server)
            got = await h1.request(method, path, headers)
            end = "finish" if got.complete else ("reset" if got.end == "reset" else "break")
            return Fetched(got.status, dict(got.headers), got.body, end)
        if self.protocol == "h2":
            h2 = await H2Client.open(self.server)
            sid = await h2.request(method, path, [(n.lower(), v) for n, v in headers])
            stream = await h2.response(sid)
            if stream.ended:
                end = "finish"
            elif stream.reset_code == H2_INTERNAL_ERROR:
                end = "break"
            else:
                assert h2.end == "reset", (stream.reset_code, h2.end)
                end = "reset"
            return Fetched(stream.status, dict(stream.headers), bytes(stream.body), end)
        response = await self.h3.request(method, path, headers)
        if response.ended:
            end = "finish"
        elif response.reset_code == H3_INTERNAL_ERROR:
            end = "break"
        else:
            closed = await self.h3.wait_terminated()
            assert closed.error_code == H3_INTERNAL_ERROR
            end = "reset"
        return Fetched(response.status, dict(response.headers), bytes(response.body), end)


@pytest.fixture(params=PROTOCOLS)
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def serve(start_server: StartServer, protocol: str) -> FaultServer:
    if protocol == "h3":
        pytest.importorskip("aioquic")
        return await start_server(tls=True, http3=True)
    return await start_server(tls=protocol == "h2")


def events_in(body: bytes) -> list[SSEEvent]:
    return SSEParser().feed(body)


# -- StreamedBody -------------------------------------------------------------------------------


@pytest.mark.parametrize("end", ["finish", "break", "reset"])
async def test_streamed_body_sends_its_parts_and_ends_as_scripted(
    start_server: StartServer, protocol: str, end: str
) -> None:
    server = await serve(start_server, protocol)
    server.script(
        StreamedBody(
            [b"one ", 0.05, b"two ", 0.05, b"three"],
            headers={"Content-Type": "text/plain"},
            end=end,  # type: ignore[arg-type]
        ),
        Respond(200, body=b"next"),
    )
    with trio.fail_after(15):
        async with Peer(protocol, server).open() as peer:
            got = await peer.fetch("/s")
            if end != "reset":
                assert (await peer.fetch("/n")).body == b"next"
    assert (got.status, got.body, got.end) == (200, b"one two three", end)
    assert "content-length" not in got.headers
    assert got.headers["content-type"] == "text/plain"
    assert server.requests[0].executed


async def test_streamed_body_hangs_until_the_client_leaves(
    start_server: StartServer, protocol: str
) -> None:
    server = await serve(start_server, protocol)
    server.script(StreamedBody([b"first"], end="hang"))
    with trio.fail_after(15):
        async with Peer(protocol, server).open() as peer:
            with trio.move_on_after(1.0) as waited:
                await peer.fetch("/s")
    assert waited.cancelled_caught  # nothing ended it: still open after a second
    assert server.requests[0].executed


async def test_streamed_body_bounded_by_seconds_breaks(
    start_server: StartServer, protocol: str
) -> None:
    server = await serve(start_server, protocol)
    server.script(StreamedBody([b"a", 5.0, b"never"], end="finish", seconds=0.3))
    with trio.fail_after(15):
        async with Peer(protocol, server).open() as peer:
            got = await peer.fetch("/s")
    assert (got.body, got.end) == (b"a", "break")


async def test_streamed_body_to_head_is_a_head(start_server: StartServer, protocol: str) -> None:
    server = await serve(start_server, protocol)
    server.script(StreamedBody([b"body"], end="break"))
    with trio.fail_after(15):
        async with Peer(protocol, server).open() as peer:
            got = await peer.fetch("/s", method="HEAD")
    assert (got.status, got.body, got.end) == (200, b"", "finish")


def test_streamed_body_refuses_what_it_cannot_send() -> None:
    with pytest.raises(ValueError, match="framing"):
        StreamedBody([b"x"], headers={"Content-Length": "1"})
    with pytest.raises(TypeError, match="bytes or numbers"):
        StreamedBody(["text"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="pause"):
        StreamedBody([-1.0])
    with pytest.raises(ValueError, match="end must be one of"):
        StreamedBody([], end="later")  # type: ignore[arg-type]


# -- EventSource --------------------------------------------------------------------------------

EVENTS = [SSEEvent(data=f"event {n}\nline two", id=str(n)) for n in range(1, 6)]


async def test_event_source_resumes_after_last_event_id(
    start_server: StartServer, protocol: str
) -> None:
    server = await serve(start_server, protocol)
    source = EventSource(EVENTS, per_connection=2, retry=250, interval=0.05, torn=True)
    server.route("GET", "/events", source)
    seen: list[SSEEvent] = []
    ends: list[str] = []
    statuses: list[int | None] = []
    with trio.fail_after(20):
        async with Peer(protocol, server).open() as peer:
            last: str | None = None
            for _ in range(5):
                headers = [("Last-Event-ID", last)] if last else []
                got = await peer.fetch("/events", headers)
                statuses.append(got.status)
                ends.append(got.end)
                if got.status != 200:
                    break
                assert got.headers["content-type"] == "text/event-stream"
                assert got.body.startswith(b"retry: 250\n\n")
                parser = SSEParser(last or "")
                fresh = parser.feed(got.body)
                seen += fresh
                last = parser.last_event_id
    assert [e.data for e in seen] == [e.data for e in EVENTS]  # each once, in order
    assert [e.id for e in seen] == ["1", "2", "3", "4", "5"]
    assert seen[0].retry == 250
    assert statuses == [200, 200, 200, 204]
    assert ends == ["break", "break", "finish", "finish"]
    assert source.last_event_ids == [None, "2", "4", "5"]


async def test_event_source_heartbeats_between_events(
    start_server: StartServer, protocol: str
) -> None:
    server = await serve(start_server, protocol)
    source = EventSource(EVENTS[:2], interval=0.35, heartbeat=0.1)
    server.route("GET", "/events", source)
    with trio.fail_after(15):
        async with Peer(protocol, server).open() as peer:
            got = await peer.fetch("/events")
    assert got.body.count(b": heartbeat\n\n") == 3
    assert [e.id for e in events_in(got.body)] == ["1", "2"]
    assert got.end == "finish"


async def test_event_source_hang_and_wrong_content_type(
    start_server: StartServer, protocol: str
) -> None:
    server = await serve(start_server, protocol)
    hanging = EventSource(EVENTS, per_connection=1, end="hang")
    wrong = EventSource(EVENTS, content_type="text/plain", status=200)
    server.route("GET", "/hang", hanging)
    server.route("GET", "/wrong", wrong)
    with trio.fail_after(15):
        async with Peer(protocol, server).open() as peer:
            with trio.move_on_after(0.5) as waited:
                await peer.fetch("/hang")
            got = await peer.fetch("/wrong")
    assert waited.cancelled_caught
    assert got.headers["content-type"] == "text/plain"
    assert len(events_in(got.body)) == 5


def test_event_source_encodes_what_the_parser_reads() -> None:
    events = [
        SSEEvent(data=""),
        SSEEvent(event="add", data=" lead\n\ntrail ", id="a b", retry=9),
        SSEEvent(data="x: y", id=""),
    ]
    body = b"".join(EventSource.encode(e) for e in events)
    assert SSEParser().feed(body) == [events[0], events[1], SSEEvent(data="x: y", id=None)]
    for bad in (SSEEvent(data="a\rb"), SSEEvent(data="x", id="a\0b"), SSEEvent(event="a\nb")):
        with pytest.raises(ValueError, match="an event's"):
            EventSource.encode(bad)
    with pytest.raises(TypeError, match="SSEEvent"):
        EventSource(["data: x\n\n"])  # type: ignore[list-item]


# -- StaticFile ---------------------------------------------------------------------------------

BODY = bytes(range(256)) * 64  # 16 KiB


async def test_static_file_ranges_and_a_cut(start_server: StartServer, protocol: str) -> None:
    server = await serve(start_server, protocol)
    static = StaticFile(BODY)
    static.script(cut_after=5000)
    server.route("GET", "/file", static)
    with trio.fail_after(15):
        async with Peer(protocol, server).open() as peer:
            first = await peer.fetch("/file")
            rest = await peer.fetch(
                "/file", [("Range", f"bytes={len(first.body)}-"), ("If-Range", static.etag or "")]
            )
            static.change(b"another representation")
            changed = await peer.fetch(
                "/file",
                [("Range", f"bytes={len(first.body)}-"), ("If-Range", rest.headers["etag"])],
            )
    assert (first.status, first.headers["content-length"], first.end) == (200, "16384", "break")
    assert first.body == BODY[:5000]
    assert first.headers["accept-ranges"] == "bytes"
    assert first.headers["etag"].startswith('"')
    assert (rest.status, rest.end, rest.headers["content-range"]) == (
        206,
        "finish",
        "bytes 5000-16383/16384",
    )
    assert first.body + rest.body == BODY
    assert (changed.status, changed.body) == (200, b"another representation")
    assert changed.headers["etag"] != rest.headers["etag"]
    assert static.ranges == [None, "bytes=5000-", "bytes=5000-"]
