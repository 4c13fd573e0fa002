"""A write's limit counts from its last progress, not from its start.

The socket stream reports each time the kernel took more of a write that had to wait
(``RawSocketStream.on_progress``); the write bound (``Bound.renew``) and the HTTP/2 writer's
stall bound count again from then. So one write can be large (256 KiB, for speed) and still be
cut only when the server read nothing for the whole limit. Real loopback sockets with small
buffers and a server task that reads slowly; every loop bounded in count and time.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest
import trio
import trio.testing

import trio_retry
from tests.support.loopback import QueuedOutput, socket_pair
from trio_retry import FailureCategory, Stage, StageTimeouts
from trio_retry._wire.clock import Bound
from trio_retry._wire.clock import bound as clock_bound
from trio_retry._wire.http2.writer import Writer
from trio_retry._wire.progress import AttemptProgress, WireError
from trio_retry._wire.rawsock import RawSocketStream, open_socket, raw_stream_of
from trio_retry._wire.timekeeper import Timekeeper

BUFFER = 16 * 1024
ONCE = trio_retry.RetryPolicy(max_attempts=1)


async def _read_slowly(stream: RawSocketStream, total: int, piece: int, pause: float) -> int:
    """Read ``total`` bytes, at most ``piece`` per ``pause`` seconds; returns what came."""
    got = 0
    for _ in range(total // piece + 64):  # bounded: more rounds than the bytes need
        if got >= total:
            break
        data = await stream.receive_some(piece)
        if not data:
            break
        got += len(data)
        await trio.sleep(pause)
    return got


async def test_a_send_that_waits_reports_each_progress_and_one_that_does_not_none() -> None:
    client, server = await socket_pair(BUFFER)
    calls: list[float] = []
    client.on_progress = lambda: calls.append(trio.current_time())
    with trio.fail_after(20):
        await client.send_all(b"x" * 100)  # fits the buffer: no wait, no report
        assert calls == []
        assert await server.receive_some(100) == b"x" * 100
        size = 512 * 1024
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.send_all, b"y" * size)
            got = await _read_slowly(server, size, 8192, 0.001)
    assert got == size
    assert len(calls) >= 4  # the kernel took the rest in many steps, each reported
    await client.aclose()
    await server.aclose()


async def test_the_stream_under_tls_is_found() -> None:
    class Tls(trio.abc.Stream):  # the shape of trio.SSLStream: a transport_stream attribute
        def __init__(self, inner: trio.abc.Stream) -> None:
            self.transport_stream = inner

        async def send_all(self, data: bytes | bytearray | memoryview) -> None: ...
        async def wait_send_all_might_not_block(self) -> None: ...
        async def receive_some(self, max_bytes: int | None = None) -> bytes: ...
        async def aclose(self) -> None: ...

    sock, raw = open_socket()
    assert raw is not None
    raw.connect_ex(("127.0.0.1", 9))  # (non-blocking: a stream needs only a SOCK_STREAM socket)
    stream = RawSocketStream(sock, raw)
    assert raw_stream_of(stream) is stream
    assert raw_stream_of(Tls(Tls(stream))) is stream
    assert raw_stream_of(trio.testing.MemorySendStream()) is None
    sock.close()


class _Target:
    """A wait's target: records the lane's interruption and ends the wait (as a connection
    closes its socket)."""

    def __init__(self) -> None:
        self.expired: list[float] = []
        self.event = trio.Event()

    def stage_expired(self, which: str, progress: AttemptProgress) -> None:
        self.expired.append(trio.current_time())
        self.event.set()


async def _bounded(bound: Bound, target: _Target, renew_every: float | None, busy: float) -> None:
    """Wait ``busy`` seconds inside ``bound`` (ended early by ``target``'s interruption),
    renewing it every ``renew_every`` seconds."""
    bound.progress = AttemptProgress(0.0)
    bound.progress.stage = Stage.REQUEST_BODY
    step = busy if renew_every is None else renew_every
    with bound:
        for _ in range(int(busy / step)):
            with trio.move_on_after(step):
                await target.event.wait()
            if target.event.is_set():
                raise trio.ClosedResourceError("closed under the wait")
            if renew_every is not None:
                bound.renew()


@pytest.mark.parametrize("running", [True, False], ids=["lane", "scope"])
async def test_renew_counts_the_limit_again_from_now(
    autojump_clock: trio.testing.MockClock, running: bool
) -> None:
    timekeeper = Timekeeper(StageTimeouts(write=1.0))
    target = _Target()
    async with trio.open_nursery() as nursery:
        if running:
            timekeeper.start(nursery)
        start = trio.current_time()
        # 5 s busy, progress every 0.8 s: never 1 s without progress, never cut.
        await _bounded(clock_bound("write", timekeeper, target=target), target, 0.8, 5.0)
        assert trio.current_time() - start == pytest.approx(4.8, abs=1e-6)
        # The same wait without progress is cut at 1 s.
        start = trio.current_time()
        with pytest.raises(WireError) as info:
            await _bounded(clock_bound("write", timekeeper, target=target), target, None, 5.0)
        assert trio.current_time() - start == pytest.approx(1.0, abs=1e-6)
        assert info.value.category is FailureCategory.TIMEOUT
        nursery.cancel_scope.cancel()
    assert len(target.expired) == (1 if running else 0)  # a lane interrupts its target


class _SlowServer:
    """HTTP/1.1 on loopback that reads each request body slowly (or not at all) and then
    answers 200 with the number of body bytes it read."""

    def __init__(self, piece: int, pause: float, stop_after: int | None = None) -> None:
        self.piece, self.pause, self.stop_after = piece, pause, stop_after
        self.received: list[int] = []

    async def serve(self, listener: trio.SocketListener) -> None:
        stream = await listener.accept()
        async with stream:
            head = b""
            for _ in range(100):
                if b"\r\n\r\n" in head:
                    break
                head += await stream.receive_some(4096)
            head, _, body = head.partition(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            got = len(body)
            for _ in range(length // self.piece + 64):
                if got >= length:
                    break
                if self.stop_after is not None and got >= self.stop_after:
                    await trio.sleep(60)  # stops reading: the client's bound must end this
                data = await stream.receive_some(self.piece)
                if not data:
                    return
                got += len(data)
                await trio.sleep(self.pause)
            self.received.append(got)
            answer = str(got).encode()
            await stream.send_all(
                b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(answer), answer)
            )


BODY = b"u" * (768 * 1024)
WRITE_TEXT = "the server read none of the request within write=0.3 s"


async def _upload(
    serve: Callable[[trio.SocketListener], Awaitable[None]], *, http2: bool
) -> tuple[trio_retry.Response | trio_retry.TrioRetryError, float]:
    """PUT :data:`BODY` to a loopback listener (small receive buffer) that ``serve`` serves, in
    one attempt under a 0.3 s write limit; returns the response or the call's error, and how
    long the call took."""
    sock = trio.socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUFFER)
    await sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    listener = trio.SocketListener(sock)
    port = sock.getsockname()[1]
    outcome: trio_retry.Response | trio_retry.TrioRetryError
    with trio.fail_after(30):
        async with listener, trio.open_nursery() as nursery:
            nursery.start_soon(serve, listener)
            async with trio_retry.Client(
                http2_prior_knowledge=http2, stage_timeouts=StageTimeouts(write=0.3), retry=ONCE
            ) as client:
                start = trio.current_time()
                try:
                    outcome = await client.request(
                        "PUT", f"http://127.0.0.1:{port}/up", content=BODY
                    )
                except trio_retry.TrioRetryError as exc:
                    outcome = exc
                took = trio.current_time() - start
            nursery.cancel_scope.cancel()
    return outcome, took


def _cut_at_the_write_limit(outcome: object, took: float) -> None:
    assert isinstance(outcome, trio_retry.DeadlineExceeded), outcome
    (attempt,) = outcome.attempts
    assert (attempt.stage, attempt.category) == (Stage.REQUEST_BODY, FailureCategory.TIMEOUT)
    assert WRITE_TEXT in str(outcome)  # clock.py's words, whichever protocol
    assert 0.3 <= took < 5.0


async def test_an_http11_upload_slower_than_a_write_per_limit_is_not_cut() -> None:
    """768 KiB at about 400 KB/s: each 256 KiB write takes about 0.6 s, twice the 0.3 s write
    limit, yet the server reads something every 20 ms, so nothing is cut."""
    server = _SlowServer(piece=8192, pause=0.02)
    response, _ = await _upload(server.serve, http2=False)
    assert isinstance(response, trio_retry.Response), response
    assert response.status_code == 200
    assert response.content == str(len(BODY)).encode()
    assert server.received == [len(BODY)]


async def test_an_http11_upload_the_server_stops_reading_is_cut_at_the_write_limit() -> None:
    server = _SlowServer(piece=8192, pause=0.01, stop_after=100 * 1024)
    _cut_at_the_write_limit(*await _upload(server.serve, http2=False))


async def _write_through(reader_pause: float, stop_after: int | None) -> tuple[int, list[str]]:
    """1 MiB through a Writer with a 0.3 s stall bound to a peer reading 8 KiB per
    ``reader_pause`` (stopping for good after ``stop_after`` bytes); returns what the peer got
    and the writer's breaks."""
    client, server = await socket_pair(BUFFER)
    queue, broken = QueuedOutput(), []
    writer = Writer(
        client,
        queue,  # type: ignore[arg-type]
        lambda _category, message: broken.append(message),
        stall_timeout=0.3,
    )
    size = 1024 * 1024
    got = 0
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.run)
            queue.data = b"w" * size
            writer.collect()
            for _ in range(size // 8192 + 64):
                if got >= size or broken:
                    break
                if stop_after is not None and got >= stop_after:
                    await trio.sleep(1.0)  # stops reading: the writer must give up
                    continue
                got += len(await server.receive_some(8192))
                await trio.sleep(reader_pause)
            writer.stop()
            nursery.cancel_scope.cancel()
    await client.aclose()
    await server.aclose()
    return got, broken


async def test_the_http2_writer_keeps_a_slow_reader_and_gives_up_a_silent_one() -> None:
    # About 0.8 s per 256 KiB write, far over the 0.3 s bound, but bytes move every 30 ms.
    got, broken = await _write_through(0.03, None)
    assert (got, broken) == (1024 * 1024, [])
    got, broken = await _write_through(0.001, 300 * 1024)
    assert got < 1024 * 1024
    assert len(broken) == 1
    assert "read nothing for 0.3s" in broken[0]


class _SlowH2Server:
    """HTTP/2 without TLS (prior knowledge) on loopback: opens 4 MiB windows, so the client may
    queue a whole upload, then reads its socket 8 KiB per ``pause`` and answers 200 with the
    number of body bytes once the request ends."""

    def __init__(self, pause: float, stop_after: int | None = None) -> None:
        self.pause, self.stop_after = pause, stop_after
        self.received = 0

    async def serve(self, listener: trio.SocketListener) -> None:
        stream = await listener.accept()
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        conn.local_settings = h2.settings.Settings(
            client=False, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 4 << 20}
        )
        conn.initiate_connection()
        conn.increment_flow_control_window(4 << 20)
        async with stream:
            await stream.send_all(conn.data_to_send())
            for _ in range(10_000):  # bounded: far more reads than 768 KiB in 8 KiB needs
                if self.stop_after is not None and self.received >= self.stop_after:
                    await trio.sleep(60)  # stops reading: the client's bound must end this
                data = await stream.receive_some(8192)
                if not data:
                    return
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.DataReceived):
                        self.received += len(event.data)
                        conn.acknowledge_received_data(
                            event.flow_controlled_length, event.stream_id
                        )
                    elif isinstance(event, h2.events.StreamEnded):
                        answer = str(self.received).encode()
                        conn.send_headers(event.stream_id, [(":status", "200")])
                        conn.send_data(event.stream_id, answer, end_stream=True)
                await stream.send_all(conn.data_to_send())
                await trio.sleep(self.pause)


async def test_an_http2_upload_slower_than_a_write_per_limit_is_not_cut() -> None:
    """The stream's own wait for its queued frames (up to 256 KiB at a time, written as one
    write) counts from the writer's last progress too: 768 KiB at about 400 KB/s under a 0.3 s
    write limit, with windows wide enough to queue it all."""
    response, _ = await _upload(_SlowH2Server(pause=0.02).serve, http2=True)
    assert isinstance(response, trio_retry.Response), response
    assert response.http_version == "HTTP/2"
    assert response.content == str(len(BODY)).encode()


async def test_an_http2_upload_the_server_stops_reading_is_cut_at_the_write_limit() -> None:
    server = _SlowH2Server(pause=0.001, stop_after=100 * 1024)
    _cut_at_the_write_limit(*await _upload(server.serve, http2=True))


async def test_an_http2_write_timeout_mid_write_says_what_http11_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without renewal, the slow upload above times out while its frames are being written
    (the stream fails from the timekeeper's lane): the words are clock.py's, as over HTTP/1.1."""
    monkeypatch.setattr(Bound, "renew", lambda self: None)
    outcome, _ = await _upload(_SlowH2Server(pause=0.02).serve, http2=True)
    assert WRITE_TEXT in str(outcome)
