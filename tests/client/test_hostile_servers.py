"""Hostile peers on real loopback sockets (issue #32): each must fail its call at once, with the
exception, evidence and category its stage proves, never by waiting out the deadline."""

from __future__ import annotations

from functools import partial

import h2.config
import h2.connection
import h2.events
import pytest
import trio

import trio_retry
from tests.conftest import FAST
from tests.support.h2_frames import frame
from trio_retry import Evidence, FailureCategory, HttpAmbiguousExecutionError, ProtocolFailed

PROMPT = 2.0  # seconds: far below every deadline a hung call would wait out

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame_kinds(data: bytes) -> list[int]:
    kinds = []
    while len(data) >= 9:
        length = int.from_bytes(data[:3], "big")
        kinds.append(data[3])
        data = data[9 + length :]
    return kinds


async def listen(nursery: trio.Nursery, serve: object) -> int:
    listeners = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
    return int(listeners[0].socket.getsockname()[1])


# --- the server's connection preface (RFC 9113 §3.4) -------------------------------------------


@pytest.mark.parametrize(
    "first",
    [
        pytest.param(frame(0x6, 0, 0, b"12345678"), id="ping"),
        pytest.param(frame(0x4, 0x1, 0, b""), id="settings-ack"),
        pytest.param(b"hello, this is not HTTP/2 at all\r\n", id="garbage"),
        pytest.param(b"\x00\x00\x05\xfe\x00\x00\x00\x00\x00hello", id="garbage-small-length"),
        pytest.param(b"OK\r\n", id="garbage-short"),
    ],
)
async def test_a_preface_that_is_not_settings_fails_at_once_not_sent(
    nursery: trio.Nursery, first: bytes
) -> None:
    """A server that answers the preface with anything but SETTINGS (and then says nothing)
    used to hold a POST until its deadline; the handshake now fails on the first frame."""
    received = bytearray()

    async def serve(stream: trio.SocketStream) -> None:
        received.extend(await stream.receive_some(65536))
        await stream.send_all(first)
        while data := await stream.receive_some(65536):
            received.extend(data)

    port = await listen(nursery, serve)
    async with trio_retry.Client(http2_prior_knowledge=True, retry=FAST) as client:
        with trio.fail_after(PROMPT), pytest.raises(ProtocolFailed) as info:
            await client.post(f"http://127.0.0.1:{port}/pay", content=b"x")

    error = info.value
    assert error.evidence is Evidence.NOT_SENT
    assert error.category is FailureCategory.REMOTE_PROTOCOL
    assert "preface is not a SETTINGS frame" in str(error)
    assert all(a.evidence is Evidence.NOT_SENT for a in error.attempts)
    assert received.startswith(PREFACE)
    assert 0x1 not in frame_kinds(bytes(received[len(PREFACE) :]))  # no HEADERS ever left


# --- a frame on a stream the client never opened (RFC 9113 §5.1.1) ---------------------------

STRAY = {
    "headers": lambda stream_id: frame(0x1, 0x4, stream_id, b"\x88"),  # :status 200
    "data": lambda stream_id: frame(0x0, 0, stream_id, b"hello"),
}


class StrayServer:
    """Answers every request with a frame on a stream the client never opened, and never on
    the request's own stream."""

    def __init__(self, kind: str, stream_id: int) -> None:
        self.stray = STRAY[kind](stream_id)
        self.connections = 0

    async def serve(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        conn.initiate_connection()
        await stream.send_all(conn.data_to_send())
        while data := await stream.receive_some(65536):
            stray = any(isinstance(e, h2.events.RequestReceived) for e in conn.receive_data(data))
            await stream.send_all(conn.data_to_send() + (self.stray if stray else b""))


STRAYS = [
    pytest.param("headers", 2, id="headers-even"),
    pytest.param("data", 2, id="data-even"),
    pytest.param("headers", 3, id="headers-odd-unopened"),
    pytest.param("data", 5, id="data-odd-unopened"),
]


@pytest.mark.parametrize(("kind", "stream_id"), STRAYS)
async def test_a_frame_on_a_stream_never_opened_breaks_a_post_at_once(
    nursery: trio.Nursery, kind: str, stream_id: int
) -> None:
    """The HEADERS on stream 2 used to be ignored and the POST waited out its deadline: now
    the connection dies at once, and a POST whose bytes left is ambiguous."""
    server = StrayServer(kind, stream_id)
    port = await listen(nursery, server.serve)
    async with trio_retry.Client(http2_prior_knowledge=True, retry=FAST) as client:
        with trio.fail_after(PROMPT), pytest.raises(HttpAmbiguousExecutionError) as info:
            await client.post(f"http://127.0.0.1:{port}/pay", content=b"x")

    error = info.value
    assert error.evidence is Evidence.SENT_NO_RESPONSE
    assert error.category is FailureCategory.REMOTE_PROTOCOL
    assert f"on stream {stream_id}, which the client never opened" in str(error)
    assert len(error.attempts) == 1


@pytest.mark.parametrize(("kind", "stream_id"), STRAYS)
async def test_a_frame_on_a_stream_never_opened_fails_a_get_on_a_fresh_connection_once(
    nursery: trio.Nursery, kind: str, stream_id: int
) -> None:
    server = StrayServer(kind, stream_id)
    port = await listen(nursery, server.serve)
    async with trio_retry.Client(http2_prior_knowledge=True, retry=FAST) as client:
        with trio.fail_after(PROMPT), pytest.raises(ProtocolFailed) as info:
            await client.get(f"http://127.0.0.1:{port}/")

    error = info.value
    assert error.evidence is Evidence.SENT_NO_RESPONSE
    assert error.category is FailureCategory.REMOTE_PROTOCOL
    # Not valid HTTP/2 on a fresh connection: not retried, the same server would answer the
    # same way (issue #38).
    assert [a.evidence for a in error.attempts] == [Evidence.SENT_NO_RESPONSE]
    assert [a.connection_reused for a in error.attempts] == [False]
    assert server.connections == 1


async def test_late_frames_on_a_stream_the_client_reset_keep_the_connection(
    nursery: trio.Nursery,
) -> None:
    """Only ids never opened are refused: a stream we opened and reset may still get frames
    for a while (RFC 9113 §6.4), and the connection carries on."""
    reset = trio.Event()

    async def serve(stream: trio.SocketStream) -> None:
        conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        conn.initiate_connection()
        await stream.send_all(conn.data_to_send())
        while data := await stream.receive_some(65536):
            late = b""
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.StreamReset) and event.stream_id == 1:
                    late = frame(0x1, 0x4, 1, b"\x88") + frame(0x0, 0x1, 1, b"late")
                    reset.set()
                elif isinstance(event, h2.events.RequestReceived) and event.stream_id > 1:
                    conn.send_headers(event.stream_id, [(b":status", b"204")], end_stream=True)
            await stream.send_all(conn.data_to_send() + late)

    port = await listen(nursery, serve)
    url = f"http://127.0.0.1:{port}/"
    async with trio_retry.Client(http2_prior_knowledge=True, retry=FAST) as client:
        with trio.fail_after(PROMPT):
            with pytest.raises(trio_retry.RequestFailed):
                await client.get(url, deadline=0.2)  # stream 1: no answer, reset by the client
            await reset.wait()
            await trio.sleep(0.05)  # the late frames arrive on the open connection
            response = await client.get(url)
    assert response.status == 204
    assert response.attempts[-1].connection_reused is True
