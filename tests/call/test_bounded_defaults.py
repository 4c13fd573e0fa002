"""Bounded by default, in the middle of a transfer (SPEC §11): under ``Client()``'s defaults
(``read=30`` and ``write=30``, idle bounds; no ``stage_timeouts``, no ``deadline``) a body
that stops in the middle, or a server that stops reading the request, ends the call after
30 s of silence, while a transfer that keeps moving, however long, is never cut.

Every test runs on ``trio.testing.MockClock(autojump_threshold=0)`` and asserts exact virtual
times, against real loopback sockets (a FaultServer, or a server that stops reading) or, for
a server that reads slowly, an in-memory connection (see there why). The servers' own bounds
are set far beyond the client's, so what ends a call is the client, never the server. Each
call runs under ``trio.fail_after(LIMIT)`` (virtual): a call the defaults did not bound
fails the test at once instead of hanging it."""

from __future__ import annotations

import itertools
import random
from collections.abc import AsyncIterator

import h2.config
import h2.connection
import h2.events
import pytest
import trio
import trio.testing

import trio_retry
from trio_retry import Evidence, FailureCategory, Stage, StageTimeouts
from trio_retry._call.client_options import DEFAULT_STAGE_TIMEOUTS
from trio_retry._wire.clock import FIXED
from trio_retry._wire.dialer import ConnectTarget
from trio_retry._wire.progress import AttemptProgress
from trio_retry._wire.transport import Transport
from trio_retry.testing import EndlessBody, FaultServer, Respond
from trio_retry.testing._memory import memory_connection
from trio_retry.testing._script import ShutWindow, StopReading

from .conftest import FOREVER, default_client

MiB = 1024 * 1024
ONCE = trio_retry.RetryPolicy(max_attempts=1)
#: Virtual seconds: the bound on every test; a call still waiting then was not bounded.
LIMIT = 1000.0
#: The idle bounds of ``Client()`` (checked against its defaults in the first test).
READ = 30.0
WRITE = 30.0

VERSION = {"h1": "HTTP/1.1", "h2c": "HTTP/2", "h2-tls": "HTTP/2"}
#: Head and part of the body, then silence: one 100-byte chunk of an endless body, then a
#: pause of FOREVER seconds before the next.
STALLED = EndlessBody(chunk=b"s" * 100, rate=100 / FOREVER, seconds=FOREVER)


@pytest.fixture
def server(patient: FaultServer) -> FaultServer:
    return patient


def test_the_defaults_bound_reads_and_writes() -> None:
    assert trio_retry.Client().config.stage_timeouts == DEFAULT_STAGE_TIMEOUTS
    assert (DEFAULT_STAGE_TIMEOUTS.read, DEFAULT_STAGE_TIMEOUTS.write) == (READ, WRITE)


# --- a body that stops in the middle --------------------------------------------------------


async def test_a_stalled_body_ends_a_buffered_get_after_the_read_bound(
    server: FaultServer, mode: str, autojump_clock: trio.testing.MockClock
) -> None:
    server.default = STALLED
    async with default_client(server, mode, retry=ONCE) as client:
        with trio.fail_after(LIMIT), pytest.raises(trio_retry.DeadlineExceeded) as info:
            await client.get(server.url + "/stalled")
        elapsed = trio.current_time()
    (attempt,) = info.value.attempts
    assert attempt.http_version == VERSION[mode]
    assert (attempt.stage, attempt.evidence, attempt.category) == (
        Stage.RESPONSE_BODY,
        Evidence.PARTIAL_RESPONSE,
        FailureCategory.TIMEOUT,
    )
    assert info.value.evidence is Evidence.PARTIAL_RESPONSE
    assert (
        "no body data within read=30 s (Client()'s default; "
        "stage_timeouts=StageTimeouts(read=...) sets it)"
    ) in str(info.value)
    # The head and the first chunk came at once; then 30 s of silence.
    assert elapsed == pytest.approx(READ, abs=1e-6)


async def test_a_stalled_body_under_the_default_policy_is_tried_three_times(
    server: FaultServer, mode: str, autojump_clock: trio.testing.MockClock
) -> None:
    """A GET is retried (``RetryPolicy()``: 3 attempts), each attempt 30 s of silence, with
    the backoffs of the client's ``rng`` (full jitter) in between."""
    server.default = STALLED
    policy = trio_retry.RetryPolicy()
    assert policy.max_attempts == 3
    seed = 20261202
    twin = random.Random(seed)  # draws what the client's rng will draw
    backoffs = [policy.backoff.delay(1, twin), policy.backoff.delay(2, twin)]
    assert 0 <= backoffs[0] <= 0.1
    assert 0 <= backoffs[1] <= 0.2
    async with default_client(server, mode, rng=random.Random(seed)) as client:
        with trio.fail_after(LIMIT), pytest.raises(trio_retry.DeadlineExceeded) as info:
            await client.get(server.url + "/stalled")
        elapsed = trio.current_time()
    attempts = info.value.attempts
    assert [(a.stage, a.evidence, a.category) for a in attempts] == [
        (Stage.RESPONSE_BODY, Evidence.PARTIAL_RESPONSE, FailureCategory.TIMEOUT)
    ] * 3
    assert [a.timings["total"] for a in attempts] == [pytest.approx(READ, abs=1e-6)] * 3
    assert len(server.requests) == 3
    assert elapsed == pytest.approx(3 * READ + sum(backoffs), abs=1e-6)
    assert 3 * READ <= elapsed <= 3 * READ + 0.3 + 1e-6  # the README's worst case for a GET


async def test_a_stalled_body_ends_a_post_after_the_read_bound_not_retried(
    server: FaultServer, mode: str, autojump_clock: trio.testing.MockClock
) -> None:
    """A POST whose response stalls mid-body: a RequestFailed (PARTIAL_RESPONSE: the server
    answered, so not ambiguous), not retried under the default policy."""
    server.default = STALLED
    async with default_client(server, mode) as client:
        with trio.fail_after(LIMIT), pytest.raises(trio_retry.DeadlineExceeded) as info:
            await client.post(server.url + "/orders", content=b"order")
        elapsed = trio.current_time()
    (attempt,) = info.value.attempts
    assert (attempt.evidence, attempt.category) == (
        Evidence.PARTIAL_RESPONSE,
        FailureCategory.TIMEOUT,
    )
    assert server.executed_count("POST", "/orders") == 1
    assert elapsed == pytest.approx(READ, abs=1e-6)


async def test_a_stalled_body_ends_a_streamed_iteration_after_the_read_bound(
    server: FaultServer, mode: str, autojump_clock: trio.testing.MockClock
) -> None:
    server.default = STALLED
    received: list[bytes] = []
    async with default_client(server, mode) as client:
        with trio.fail_after(LIMIT):
            async with client.stream("GET", server.url + "/stalled") as response:
                assert response.status == 200
                handed_over = trio.current_time()
                with pytest.raises(trio_retry.DeadlineExceeded) as info:  # noqa: PT012
                    async for chunk in response.aiter_bytes():
                        received.append(chunk)
                ended = trio.current_time()
    assert handed_over == 0.0
    assert ended == pytest.approx(READ, abs=1e-6)
    assert b"".join(received) == b"s" * 100  # what came before the silence was handed over
    assert len(server.requests) == 1  # never retried once the response was handed over
    assert info.value.evidence is Evidence.PARTIAL_RESPONSE
    assert info.value.attempts[-1].category is FailureCategory.TIMEOUT


# --- a long body that keeps moving ----------------------------------------------------------


@pytest.mark.parametrize("gap", [20.0, READ - 0.5])
async def test_a_slow_healthy_body_is_not_cut(
    server: FaultServer, mode: str, gap: float, autojump_clock: trio.testing.MockClock
) -> None:
    """Six one-byte chunks, ``gap`` seconds apart: 5 x gap (100 s, or 147.5 s) in all, more
    than the read bound, but no wait for a byte as long as it."""
    body = b"abcdef"
    # paced_chunks: one byte per chunk below 20 B/s, and len(chunk) / rate after each.
    server.default = Respond(body=body, body_rate=1 / gap)
    async with default_client(server, mode) as client:
        with trio.fail_after(LIMIT):
            response = await client.get(server.url + "/slow")
        elapsed = trio.current_time()
    assert response.content == body
    assert len(response.attempts) == 1
    assert response.attempts[0].http_version == VERSION[mode]
    assert elapsed == pytest.approx(5 * gap, abs=1e-6)
    assert elapsed > READ


async def test_a_slow_healthy_upload_is_not_cut(
    server: FaultServer, mode: str, autojump_clock: trio.testing.MockClock
) -> None:
    """The caller's body yields a 64 KiB chunk every 20 s, five times (100 s); the server
    reads as fast as it comes."""
    chunk = b"u" * 65536

    async def trickle() -> AsyncIterator[bytes]:
        for _ in range(5):
            await trio.sleep(20)
            yield chunk

    server.default = Respond(body=b"stored")
    async with default_client(server, mode) as client:
        with trio.fail_after(LIMIT):
            response = await client.put(server.url + "/up", content=trickle())
        elapsed = trio.current_time()
    assert response.content == b"stored"
    assert len(response.attempts) == 1
    assert elapsed == pytest.approx(100.0, abs=1e-6)
    (record,) = server.requests
    assert record.executed
    assert record.body == chunk * 5


# --- a server that stops reading the request ------------------------------------------------


class DeafServer:
    """HTTP/1.1: reads a request head, then never reads again (and never answers); the
    client's body piles up in the kernel's buffers. Closes everything when cancelled."""

    def __init__(self) -> None:
        self.heads: list[bytes] = []
        self.port = 0

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listener.socket.getsockname()[1]
        async with listener, trio.open_nursery() as nursery:
            task_status.started()
            while True:
                stream = await listener.accept()
                nursery.start_soon(self._deaf, stream)

    async def _deaf(self, stream: trio.SocketStream) -> None:
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data and len(data) < 65536:
                data += await stream.receive_some(1)  # no byte of the body taken with it
            self.heads.append(data)
            await trio.sleep(FOREVER)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
async def deaf(nursery: trio.Nursery) -> DeafServer:
    deaf_server = DeafServer()
    await nursery.start(deaf_server.serve)
    return deaf_server


BIG = b"w" * (32 * MiB)  # more than the kernel's buffers take


async def test_h1_an_undrained_put_ends_at_the_write_bound(
    deaf: DeafServer, autojump_clock: trio.testing.MockClock
) -> None:
    """The body fills the kernel's buffers at once (virtual time 0); then no byte moves and
    the write bound ends the call 30 s later."""
    async with trio_retry.Client(retry=ONCE) as client:
        with trio.fail_after(LIMIT), pytest.raises(trio_retry.DeadlineExceeded) as info:
            await client.put(deaf.url + "/up", content=BIG)
        elapsed = trio.current_time()
    (attempt,) = info.value.attempts
    assert (attempt.stage, attempt.evidence, attempt.category) == (
        Stage.REQUEST_BODY,
        Evidence.SENT_NO_RESPONSE,
        FailureCategory.TIMEOUT,
    )
    assert "the server read none of the request within write=30 s" in str(info.value)
    assert len(deaf.heads) == 1
    assert WRITE <= elapsed < WRITE + 1


async def test_h1_an_undrained_post_is_ambiguous_at_the_write_bound(
    deaf: DeafServer, autojump_clock: trio.testing.MockClock
) -> None:
    """The same under the default policy, for a POST: not retried, ambiguous."""
    async with trio_retry.Client() as client:
        with (
            trio.fail_after(LIMIT),
            pytest.raises(trio_retry.HttpAmbiguousExecutionError) as info,
        ):
            await client.post(deaf.url + "/orders", content=BIG)
        elapsed = trio.current_time()
    (attempt,) = info.value.attempts
    assert info.value.evidence is Evidence.SENT_NO_RESPONSE
    assert (attempt.stage, attempt.category) == (Stage.REQUEST_BODY, FailureCategory.TIMEOUT)
    assert len(deaf.heads) == 1
    assert WRITE <= elapsed < WRITE + 1


@pytest.mark.parametrize("mode", ["h2c", "h2-tls"])
async def test_h2_an_undrained_put_ends_at_the_write_bound(
    server: FaultServer, mode: str, autojump_clock: trio.testing.MockClock
) -> None:
    """HTTP/2, the server opens the windows wide and stops reading the socket: the
    connection's writer makes no progress; the attempt's wait for its frames and the writer's
    stall bound are both the client's write limit (30 s): the call ends then, ``TIMEOUT``,
    ``SENT_NO_RESPONSE``."""
    server.route("PUT", "/up", StopReading(seconds=FOREVER))
    async with default_client(server, mode, retry=ONCE) as client:
        with trio.fail_after(LIMIT), pytest.raises(trio_retry.DeadlineExceeded) as info:
            await client.put(server.url + "/up", content=BIG)
        elapsed = trio.current_time()
    (attempt,) = info.value.attempts
    assert attempt.http_version == "HTTP/2"
    assert (attempt.stage, attempt.evidence, attempt.category) == (
        Stage.REQUEST_BODY,
        Evidence.SENT_NO_RESPONSE,
        FailureCategory.TIMEOUT,
    )
    assert "write=30 s" in str(info.value)
    assert WRITE <= elapsed < WRITE + 1
    (record,) = server.requests
    assert not record.executed


@pytest.mark.parametrize("mode", ["h2c"])
async def test_h2_an_undrained_post_is_ambiguous_at_the_write_bound(
    server: FaultServer, mode: str, autojump_clock: trio.testing.MockClock
) -> None:
    server.route("POST", "/orders", StopReading(seconds=FOREVER))
    async with default_client(server, mode) as client:
        with (
            trio.fail_after(LIMIT),
            pytest.raises(trio_retry.HttpAmbiguousExecutionError) as info,
        ):
            await client.post(server.url + "/orders", content=BIG)
        elapsed = trio.current_time()
    (attempt,) = info.value.attempts  # not retried
    assert info.value.evidence is Evidence.SENT_NO_RESPONSE
    assert attempt.stage is Stage.REQUEST_BODY
    assert WRITE <= elapsed < WRITE + 1


@pytest.mark.parametrize("mode", ["h2c"])
async def test_h2_the_writers_stall_bound_is_the_write_limit(
    server: FaultServer, mode: str, autojump_clock: trio.testing.MockClock
) -> None:
    """The writer's stall bound follows ``StageTimeouts.write`` (here 5 s); with no write
    limit it stays ``FIXED.http2_stall`` (10 s), a connection-level safety bound, so a partial
    ``StageTimeouts`` never leaves an HTTP/2 upload to a deaf server waiting forever."""
    for write, ends in ((5.0, 5.0), (None, FIXED.http2_stall)):
        server.route("PUT", "/up", StopReading(seconds=FOREVER))
        limits = StageTimeouts(connect=10, tls=10, write=write, first_byte=30, read=30)
        async with trio_retry.Client(
            http2_prior_knowledge=True, retry=ONCE, stage_timeouts=limits
        ) as client:
            start = trio.current_time()
            with trio.fail_after(LIMIT), pytest.raises(trio_retry.RequestFailed) as info:
                await client.put(server.url + "/up", content=BIG)
            elapsed = trio.current_time() - start
        assert ends <= elapsed < ends + 1, write
        (attempt,) = info.value.attempts
        assert attempt.evidence is Evidence.SENT_NO_RESPONSE
    assert FIXED.http2_stall == 10.0


@pytest.mark.parametrize("mode", ["h2c", "h2-tls"])
async def test_h2_a_window_never_reopened_ends_at_the_write_bound(
    server: FaultServer, mode: str, autojump_clock: trio.testing.MockClock
) -> None:
    """HTTP/2, the server reads the socket but never reopens the stream's flow-control
    window (``ShutWindow``; its own give-up set to FOREVER): the upload stops after the
    initial window (64 KiB) and no byte moves. That is a server that stops reading the
    request (SPEC §11): the call ends 30 s later (the write bound on the wait for window),
    SENT_NO_RESPONSE."""
    server.route("PUT", "/up", ShutWindow())
    async with default_client(server, mode, retry=ONCE) as client:
        with trio.fail_after(LIMIT), pytest.raises(trio_retry.DeadlineExceeded) as info:
            await client.put(server.url + "/up", content=b"w" * MiB)
        elapsed = trio.current_time()
    (attempt,) = info.value.attempts
    assert (attempt.stage, attempt.evidence, attempt.category) == (
        Stage.REQUEST_BODY,
        Evidence.SENT_NO_RESPONSE,
        FailureCategory.TIMEOUT,
    )
    assert elapsed == pytest.approx(WRITE, abs=1e-6)


# --- a server that reads the request slowly, but steadily -----------------------------------
#
# In memory (``Client(transport=...)``), not on loopback: how many bytes a loopback socket
# buffers, and when the kernel wakes a blocked writer, change with the kernel's autotuning,
# which runs on real time, not on the MockClock; a slow reader's outcome would then depend
# on the machine. ``memory_connection`` buffers a fixed ``BUFFER`` bytes each way.

BUFFER = 64 * 1024


class SlowReader:
    """Reads a request's body ``per_tick`` bytes a second (one read a second), then answers
    ``200 ok``: bytes of the upload move every second, however long it takes. HTTP/1.1
    (``Content-Length`` bodies) or h2c (prior knowledge; the credit of each DATA frame is
    given back as soon as the frame is read)."""

    def __init__(self, per_tick: int) -> None:
        self.per_tick = per_tick
        #: (virtual time, bytes read off the connection), one entry per read of the body.
        self.reads: list[tuple[float, int]] = []
        #: Request body bytes received so far.
        self.body = 0
        self.answered = False

    def _read(self, data: bytes | bytearray) -> None:
        self.reads.append((trio.current_time(), len(data)))

    async def h1(self, stream: trio.abc.Stream) -> None:
        data = b""
        while b"\r\n\r\n" not in data and len(data) < 65536:
            data += await stream.receive_some(1)  # the head only, not a byte of the body
        head = data.decode("latin-1").lower()
        length = int(head.split("content-length:")[1].split("\r\n")[0])
        while self.body < length:
            await trio.sleep(1)
            chunk = await stream.receive_some(min(self.per_tick, length - self.body))
            if not chunk:
                return
            self._read(chunk)
            self.body += len(chunk)
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        self.answered = True
        await trio.sleep(FOREVER)

    async def h2c(self, stream: trio.abc.Stream) -> None:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        conn.initiate_connection()
        await stream.send_all(conn.data_to_send())
        while True:
            await trio.sleep(1)
            data = await stream.receive_some(self.per_tick)
            if not data:
                return
            self._read(data)
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.DataReceived):
                    self.body += len(event.data)
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    head = [(":status", "200"), ("content-length", "2")]
                    conn.send_headers(event.stream_id, head)
                    conn.send_data(event.stream_id, b"ok", end_stream=True)
                    self.answered = True
            await stream.send_all(conn.data_to_send())


class SlowReaderTransport:
    """``Client(transport=...)``: every connection is an in-memory one to ``reader``."""

    def __init__(self, reader: SlowReader) -> None:
        self.reader = reader

    async def connect(
        self, target: ConnectTarget, *, progress: AttemptProgress, nursery: trio.Nursery
    ) -> Transport:
        await trio.lowlevel.checkpoint()
        progress.advance(Stage.CONNECT)
        client_end, server_end = memory_connection(BUFFER)
        serve = self.reader.h2c if target.h2c else self.reader.h1
        nursery.start_soon(serve, server_end)
        return Transport(client_end, client_end, None)


async def upload_to_slow_reader(
    per_tick: int, size: int, *, http2: bool
) -> tuple[SlowReader, trio_retry.Response]:
    """A ``size`` bytes PUT to a server reading ``per_tick`` bytes a second, under the
    default stage timeouts (one attempt)."""
    reader = SlowReader(per_tick)
    async with trio_retry.Client(
        retry=ONCE, http2_prior_knowledge=http2, transport=SlowReaderTransport(reader)
    ) as client:
        with trio.fail_after(10 * size / per_tick):
            response = await client.put("http://slow.test/up", content=b"w" * size)
    return reader, response


def assert_steady(reader: SlowReader, size: int) -> None:
    """The server read the whole body, some bytes every second."""
    assert reader.answered
    assert reader.body == size
    assert all(n > 0 for _, n in reader.reads)
    times = [0.0] + [at for at, _ in reader.reads]
    assert max(b - a for a, b in itertools.pairwise(times)) == pytest.approx(1.0)


@pytest.mark.parametrize("http2", [False, True], ids=["h1", "h2c"])
async def test_a_long_upload_to_a_server_reading_steadily_is_not_cut(
    http2: bool, autojump_clock: trio.testing.MockClock
) -> None:
    """64 KiB a second: 8 MiB take 128 s or more, four times the write bound."""
    size = 8 * MiB
    reader, response = await upload_to_slow_reader(65536, size, http2=http2)
    assert response.content == b"ok"
    assert response.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
    assert_steady(reader, size)
    assert trio.current_time() >= size / 65536 > 4 * WRITE


async def test_h2_a_slow_upload_at_4_kib_per_second_is_not_cut(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """HTTP/2's flow-control windows keep what is in flight small (the server gives the
    credit back as it reads), so no write waits long even at 4 KiB a second."""
    size = 256 * 1024
    reader, response = await upload_to_slow_reader(4096, size, http2=True)
    assert response.content == b"ok"
    assert_steady(reader, size)
    assert trio.current_time() >= size / 4096 > 2 * WRITE


async def test_h1_a_slow_upload_at_4_kib_per_second_is_not_cut(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Bytes move every second; the write bound covers each write of at most 64 KiB
    (``http11.WRITE_SLICE``), which at 4 KiB/s takes 16 s, so it never runs out; 1 MiB takes
    256 s."""
    size = MiB
    reader, response = await upload_to_slow_reader(4096, size, http2=False)
    assert response.content == b"ok"
    assert_steady(reader, size)
