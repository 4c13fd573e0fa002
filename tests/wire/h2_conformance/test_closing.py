"""RFC 9113's error discipline beyond one call (issue #41), on the scripted raw-frame server:

- a stream error fails that stream only: a stream window pushed past 2^31-1 draws
  RST_STREAM(FLOW_CONTROL_ERROR) on it while a sibling in flight completes (§5.4.2, §6.9.1);
- every connection the client closes is told so with GOAWAY(NO_ERROR) (§6.8): at the client's
  exit (each of its connections), when the pool drops an idle one, and from the command line,
  whose PING acknowledgements still go out first (§6.7);
- a peer that stops reading does not hold the client's exit: the GOAWAY is given up on.
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from h2.errors import ErrorCodes
from h2.settings import SettingCodes

import trio_retry
from tests.support.h2_frames import (
    ACK,
    Frame,
    FrameReader,
    Kind,
    data_frame,
    names,
    ping_frame,
    settings_frame,
    window_update_frame,
)
from tests.support.h2_peer import LIMIT, Peer, ScriptedServer
from trio_retry import Evidence, FailureCategory, ProtocolFailed
from trio_retry.testing._certs import ServerCertificates

from .table import head, ok_response

ONCE = trio_retry.RetryPolicy(max_attempts=1)
TOP = 2**31 - 1
FAST_PATH = [pytest.param(True, id="fast"), pytest.param(False, id="h2")]


def goodbye(peer: Peer) -> list[str]:
    """The client's GOAWAYs, and that the last frame was one: what every close must show."""
    goaways = peer.frames_of(Kind.GOAWAY)
    assert peer.frames[-1:] == goaways[-1:], names(peer.frames)
    assert peer.end == "eof"
    return [str(g) for g in goaways]


NO_ERROR = ["GOAWAY[0] NO_ERROR last=0"]


@pytest.mark.parametrize("fast", FAST_PATH)
async def test_a_stream_window_overflow_resets_that_stream_only(
    nursery: trio.Nursery, fast: bool
) -> None:
    async def play(peer: Peer, first: int) -> None:
        await peer.seen(
            "the sibling's request", lambda f: f.kind == Kind.HEADERS and f.stream_id > first
        )
        sibling = next(s for s in peer.requests if s != first)
        await peer.send(
            head(stream_id=first)
            + head(("content-length", "2"), stream_id=sibling)
            + window_update_frame(first, TOP)
            + window_update_frame(first, TOP)
        )
        await peer.seen("the reset", lambda f: f.kind == Kind.RST_STREAM)
        await peer.send(data_frame(sibling, b"ok", end_stream=True))

    server = ScriptedServer(play)
    await nursery.start(server.serve)
    results: dict[str, Any] = {}

    async def call(name: str) -> None:
        try:
            results[name] = await client.get(server.url(f"/{name}"))
        except trio_retry.RequestFailed as exc:
            results[name] = exc

    async with trio_retry.Client(
        http2_prior_knowledge=True, retry=ONCE, http2_fast_path=fast
    ) as client:
        with trio.fail_after(LIMIT):
            async with trio.open_nursery() as calls:
                calls.start_soon(call, "a")
                await server_saw_request(server)
                calls.start_soon(call, "b")
    [peer] = server.peers
    await peer.closed()
    first, _sibling = peer.requests
    failed = results["a"]
    assert isinstance(failed, ProtocolFailed), failed
    assert (failed.evidence, failed.category) == (
        Evidence.PARTIAL_RESPONSE,
        FailureCategory.REMOTE_PROTOCOL,
    )
    assert "FLOW_CONTROL_ERROR" in str(failed)
    assert (results["b"].status, results["b"].content) == (200, b"ok")
    resets = [(f.stream_id, f.error_code) for f in peer.frames_of(Kind.RST_STREAM)]
    assert resets == [(first, ErrorCodes.FLOW_CONTROL_ERROR)]
    assert goodbye(peer) == NO_ERROR


async def server_saw_request(server: ScriptedServer) -> None:
    while not server.peers or not server.peers[0].requests:
        await trio.sleep(0.005)


async def test_every_connection_says_goaway_at_the_client_exit(nursery: trio.Nursery) -> None:
    servers = [ScriptedServer(lambda peer, _sid: peer.send(ok_response())) for _ in range(3)]
    for server in servers:
        await nursery.start(server.serve)
    async with trio_retry.Client(http2_prior_knowledge=True, retry=ONCE) as client:
        with trio.fail_after(LIMIT):
            for server in servers:
                assert (await client.get(server.url())).status == 200
        for server in servers:
            assert server.peers[0].end is None  # open until the client leaves
    for server in servers:
        [peer] = server.peers
        await peer.closed()
        assert goodbye(peer) == NO_ERROR


async def test_an_expired_idle_connection_is_closed_with_goaway(nursery: trio.Nursery) -> None:
    server = ScriptedServer(lambda peer, _sid: peer.send(ok_response()))
    await nursery.start(server.serve)
    async with trio_retry.Client(
        http2_prior_knowledge=True, retry=ONCE, keepalive_expiry=0.05
    ) as client:
        with trio.fail_after(LIMIT):
            await client.get(server.url())
            await trio.sleep(0.2)
            await client.get(server.url())  # the pool drops the expired one, opens another
            old = server.peers[0]
            await old.closed()
            assert goodbye(old) == NO_ERROR
            assert len(server.peers) == 2


@pytest.mark.parametrize("tls", [pytest.param(False, id="h2c"), pytest.param(True, id="tls")])
async def test_the_command_line_acks_and_says_goaway(
    nursery: trio.Nursery, tmp_path: Path, tls: bool
) -> None:
    """The issue's CLI finding: a 16,384-octet body with the server's PING among its frames;
    the command exits as soon as it has the body, yet the PING is acknowledged and the
    connection ends with GOAWAY(NO_ERROR)."""
    certificates = ServerCertificates(http2=True) if tls else None
    body = b"x" * 16384
    server = ScriptedServer(
        lambda peer, _sid: peer.send(
            head(("content-length", "16384"))
            + ping_frame(b"cli-ping")
            + data_frame(1, body, end_stream=True)
        ),
        tls=certificates,
    )
    await nursery.start(server.serve)
    args = [sys.executable, "-m", "trio_retry", "get", server.url("/"), "--max-time", "5"]
    if certificates is not None:
        (tmp_path / "ca.pem").write_bytes(certificates.ca_pem)
        args += ["--http2", "--cacert", str(tmp_path / "ca.pem")]
    else:
        args.append("--http2-prior-knowledge")
    with trio.fail_after(30):
        done = await trio.run_process(args, capture_stdout=True, capture_stderr=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == body
    [peer] = server.peers
    await peer.closed()
    acks = [f.payload for f in peer.frames_of(Kind.PING) if f.flags & ACK]
    assert acks == [b"cli-ping"]
    assert goodbye(peer) == NO_ERROR


async def test_a_peer_that_reads_nothing_does_not_hold_the_exit(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """The GOAWAY of a closing connection is written within a short bound (0.25 virtual
    seconds, the clock's ``closing``), or not at all."""
    stalled = trio.Event()

    async def serve(stream: trio.SocketStream) -> None:
        await stream.send_all(
            settings_frame((SettingCodes.INITIAL_WINDOW_SIZE, TOP))
            + window_update_frame(0, TOP - 65535)
        )
        stalled.set()
        await trio.sleep_forever()  # and never read

    listeners = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
    port = listeners[0].socket.getsockname()[1]
    client = trio_retry.Client(http2_prior_knowledge=True, retry=ONCE)
    with trio.fail_after(LIMIT):
        async with client:
            with trio.move_on_after(0.5):
                await client.post(f"http://127.0.0.1:{port}/", content=b"x" * (64 << 20))
            start = trio.current_time()
        assert trio.current_time() - start == pytest.approx(0.25)
    assert stalled.is_set()


__all__ = ["Frame"]


async def test_a_request_never_handed_over_stays_unsent_when_the_connection_says_goaway(
    nursery: trio.Nursery,
) -> None:
    """The client closes while a GET's HEADERS wait behind an upload the server is not
    reading: the GET is NOT_SENT, and its HEADERS do not go out with the GOAWAY after it."""
    received = FrameReader()
    frames: list[Frame] = []
    done = trio.Event()

    async def serve(stream: trio.SocketStream) -> None:
        await stream.send_all(
            settings_frame((SettingCodes.INITIAL_WINDOW_SIZE, TOP))
            + window_update_frame(0, TOP - 65535)
        )
        # Reading nothing while the client fills its socket, then everything: from within the
        # time the client's last words are given (FIXED.farewell after its close, at 0.4 s).
        await trio.sleep(0.5)
        with trio.move_on_after(LIMIT):
            while data := await stream.receive_some(1 << 20):
                frames.extend(received.feed(data))
        done.set()

    listeners = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
    url = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}/"
    outcomes: dict[str, BaseException] = {}

    async def call(name: str, **options: Any) -> None:
        try:
            await client.request("POST" if name == "upload" else "GET", url, **options)
        except trio_retry.TrioRetryError as exc:
            outcomes[name] = exc

    async with trio_retry.Client(http2_prior_knowledge=True, retry=ONCE) as client:
        with trio.fail_after(LIMIT):
            async with trio.open_nursery() as calls:
                calls.start_soon(partial(call, "upload", content=b"u" * (256 << 20)))
                await trio.sleep(0.3)  # the upload fills the socket's buffers
                calls.start_soon(call, "get")
                await trio.sleep(0.1)
                await client.aclose()
    with trio.fail_after(LIMIT):
        await done.wait()
    get = outcomes["get"]
    assert isinstance(get, trio_retry.RequestFailed)
    assert get.evidence is Evidence.NOT_SENT, get
    assert [f.stream_id for f in frames if f.kind == Kind.HEADERS] == [1]
