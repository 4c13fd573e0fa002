"""Hostile peers on real loopback sockets (issue #32): each must fail its call at once, with the
exception, evidence and category its stage proves, never by waiting out the deadline."""

from __future__ import annotations

import struct
from functools import partial

import pytest
import trio

import trio_retry
from trio_retry import Evidence, FailureCategory, ProtocolFailed

from .conftest import FAST

PROMPT = 2.0  # seconds: far below every deadline a hung call would wait out

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(kind: int, stream_id: int, payload: bytes, flags: int = 0) -> bytes:
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes((kind, flags))
        + struct.pack(">I", stream_id)
        + payload
    )


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
        pytest.param(frame(0x6, 0, b"12345678"), id="ping"),
        pytest.param(frame(0x4, 0, b"", flags=0x1), id="settings-ack"),
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
