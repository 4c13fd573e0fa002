"""Invariant 5 in detail: when the client closes, calls in flight end at once with true
evidence, and no socket, task or half-read request body survives it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator

import pytest
import trio
import trio.testing

import trio_retry
from benchmarks.invariants import client_tasks, open_fds, sockets_connected_to
from tests.conftest import LIMIT, client_for
from trio_retry import Evidence, HttpAmbiguousExecutionError, RequestFailed
from trio_retry.testing import CloseAfterHead, EndlessBody, FaultServer, Respond, Stall

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


async def test_closing_ends_calls_in_flight_at_once(
    any_server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    any_server.default = Stall(30)
    any_server.route("GET", "/body", EndlessBody(chunk=b"e" * 1000, rate=10_000))
    outcomes: dict[str, BaseException] = {}
    ended: dict[str, float] = {}

    async def run(name: str, client: trio_retry.Client, method: str, path: str) -> None:
        try:
            if path == "/body":
                async with client.stream(method, any_server.url + path) as response:
                    await response.aread()
            else:
                await client.request(method, any_server.url + path, content=b"x")
        except Exception as exc:
            outcomes[name] = exc
        ended[name] = trio.current_time()

    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            async with client_for(any_server) as client:
                nursery.start_soon(run, "post", client, "POST", "/pay")
                nursery.start_soon(run, "put", client, "PUT", "/put")
                nursery.start_soon(run, "stream", client, "GET", "/body")
                await trio.sleep(1.0)
            closed = trio.current_time()
    assert all(t == closed for t in ended.values()), (closed, ended)  # not a moment later
    post, put, stream = outcomes["post"], outcomes["put"], outcomes["stream"]
    # The POST was executed (Stall reads the body first): ambiguous, never NOT_SENT.
    assert isinstance(post, HttpAmbiguousExecutionError)
    assert post.evidence is Evidence.SENT_NO_RESPONSE
    assert isinstance(put, RequestFailed)
    assert put.evidence is Evidence.SENT_NO_RESPONSE
    # The streamed body was being read: the response had been delivered.
    assert isinstance(stream, RequestFailed)
    assert stream.evidence is Evidence.PARTIAL_RESPONSE
    assert "closed" in str(stream)
    assert sockets_connected_to({any_server.port}) == []
    assert client_tasks() == []


async def _warm_up(client: trio_retry.Client, server: FaultServer) -> None:
    """Leave pooled connections ready for the stalled calls: three idle HTTP/1.1 ones, or the
    one shared HTTP/2 connection."""
    if server.http2:
        warm = await client.get(server.url + "/warm")
        assert warm.http_version == "HTTP/2"
        return
    async with trio.open_nursery() as warm:
        for _ in range(3):
            warm.start_soon(client.get, server.url + "/warm")
    assert client.pool.idle_count == 3


async def test_closing_ends_calls_on_ready_pooled_connections_at_once(
    any_server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    """Calls without a deadline on pooled connections ready at once (idle HTTP/1.1 ones, free
    streams of a shared HTTP/2 one) run without a cancel scope of their own (the hot path);
    closing the client must still end them at once, unretried, with true evidence."""
    any_server.route("GET", "/warm", *[Respond(200, delay=0.5)] * 3)
    any_server.default = Stall(30)
    outcomes: dict[str, BaseException] = {}
    ended: dict[str, float] = {}

    async def run(name: str, client: trio_retry.Client, method: str) -> None:
        try:
            await client.request(method, any_server.url + "/" + name, content=b"x")
        except Exception as exc:
            outcomes[name] = exc
        ended[name] = trio.current_time()

    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            async with client_for(any_server) as client:
                await _warm_up(client, any_server)
                accepted = any_server.connections_accepted
                nursery.start_soon(run, "post", client, "POST")
                nursery.start_soon(run, "put", client, "PUT")
                nursery.start_soon(run, "get", client, "GET")
                await trio.sleep(1.0)
            closed = trio.current_time()
    assert all(t == closed for t in ended.values()), (closed, ended)
    assert isinstance(outcomes["post"], HttpAmbiguousExecutionError)
    for name in ("post", "put", "get"):
        error = outcomes[name]
        assert isinstance(error, (RequestFailed, HttpAmbiguousExecutionError)), error
        assert error.evidence is Evidence.SENT_NO_RESPONSE
        assert [a.connection_reused for a in error.attempts] == [True]  # not retried
        assert "closed" in str(error)
    assert any_server.connections_accepted == accepted  # no new connection for them
    assert sockets_connected_to({any_server.port}) == []
    assert client_tasks() == []


async def test_a_closed_client_leaves_no_file_descriptor(nursery: trio.Nursery) -> None:
    before = open_fds()
    servers = [FaultServer(http2=False), FaultServer(), FaultServer(tls=True)]
    for server in servers:
        await nursery.start(server.serve)
    with_servers = open_fds()
    for server in servers:
        async with client_for(server) as client:
            with trio.fail_after(LIMIT):
                async with trio.open_nursery() as calls:
                    for _ in range(20):
                        calls.start_soon(client.get, server.url + "/")
        assert sockets_connected_to({server.port}) == []
    nursery.cancel_scope.cancel()
    await trio.sleep(0.5)  # the servers let go of their side
    assert open_fds() - with_servers <= set()
    assert before <= with_servers


class FinallyFlag:
    """Body streams that record when they were finalised."""

    def __init__(self) -> None:
        self.closed_at: float | None = None
        self.opened: list[AsyncIterator[bytes]] = []

    def _closed(self) -> None:
        self.closed_at = trio.current_time()

    def sync_chunks(self) -> Iterator[bytes]:
        try:
            for _ in range(200):
                yield b"x" * 65536
        finally:
            self._closed()

    async def _async_chunks(self) -> AsyncIterator[bytes]:
        try:
            for _ in range(200):
                yield b"x" * 65536
                await trio.sleep(0)
        finally:
            self._closed()

    def async_chunks(self) -> AsyncIterator[bytes]:
        stream = self._async_chunks()
        self.opened.append(stream)
        return stream

    async def aclose_all(self) -> None:
        for stream in self.opened:
            await stream.aclose()  # type: ignore[attr-defined]


async def upload_into_a_reset(mode: str, nursery: trio.Nursery, content: object) -> float:
    """PUT `content` to a server that resets after the head; returns when the call failed."""
    server = FaultServer(http2=mode == "h2c")
    await nursery.start(server.serve)
    server.default = CloseAfterHead(reset=True)
    async with client_for(server, retry=trio_retry.RetryPolicy(max_attempts=1)) as client:
        with trio.fail_after(LIMIT), pytest.raises(RequestFailed):
            await client.put(server.url + "/up", content=content)
        return trio.current_time()


@pytest.mark.parametrize("mode", ["h1", "h2c"])
async def test_an_interrupted_upload_finalises_its_body_stream(
    nursery: trio.Nursery, mode: str
) -> None:
    flag = FinallyFlag()
    failed_at = await upload_into_a_reset(mode, nursery, trio_retry.Reopenable(flag.sync_chunks))
    # Finalised by the client when the write failed, not by the garbage collector later (and
    # without a ResourceWarning about the client's own wrapper generator).
    assert flag.closed_at is not None
    assert flag.closed_at <= failed_at


@pytest.mark.parametrize("kind", ["one-shot", "reopenable"])
@pytest.mark.parametrize("mode", ["h1", "h2c"])
async def test_an_interrupted_upload_finalises_an_async_generator_body(
    nursery: trio.Nursery, mode: str, kind: str
) -> None:
    flag = FinallyFlag()
    content = (
        flag.async_chunks() if kind == "one-shot" else trio_retry.Reopenable(flag.async_chunks)
    )
    try:
        failed_at = await upload_into_a_reset(mode, nursery, content)
        assert flag.closed_at is not None
        assert flag.closed_at <= failed_at
    finally:
        await flag.aclose_all()  # no ResourceWarning from the test itself


# Run in a subprocess: the bug corrupts trio's cancel-scope stack, which would otherwise leak
# into the tests that follow.
ACLOSE_FROM_INSIDE = textwrap.dedent(
    """
    import trio, trio_retry
    from trio_retry.testing import FaultServer, Stall

    async def main():
        server = FaultServer(http2=False)
        async with trio.open_nursery() as outer:
            await outer.start(server.serve)
            server.default = Stall(30)
            result = {}
            async def call(client):
                try:
                    await client.post(server.url + "/pay", content=b"x")
                except trio_retry.HttpAmbiguousExecutionError as exc:
                    result["error"] = exc
            with trio.fail_after(10):
                async with trio_retry.Client() as client:
                    async with trio.open_nursery() as calls:
                        calls.start_soon(call, client)
                        await trio.sleep(0.3)
                        await client.aclose()  # a shutdown path closing the client early
            assert result["error"].evidence is trio_retry.Evidence.SENT_NO_RESPONSE
            outer.cancel_scope.cancel()
        print("OK")

    trio.run(main)
    """
)


def test_aclose_inside_the_block_ends_calls_with_evidence() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", ACLOSE_FROM_INSIDE],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "OK"
