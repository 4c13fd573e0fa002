"""RawSocketStream keeps trio.SocketStream's contract over real loopback TCP sockets.

Trio's own generic Stream checks (``trio.testing.check_half_closeable_stream``) run first;
the rest pins what the connection code depends on: a checkpoint per operation even when
nothing blocks, a cancelled operation moves no bytes, a peer reset is BrokenResourceError,
closing the Trio socket from another task wakes a blocked operation with ClosedResourceError,
large sends to a slow reader arrive whole, and EOF.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import ssl
import struct

import pytest
import trio
import trio.testing
import trustme

from tests.support.loopback import socket_pair
from trio_retry._wire.progress import AttemptProgress
from trio_retry._wire.rawsock import (
    DEFAULT_RECEIVE_SIZE,
    MAX_RECEIVE_SIZE,
    RawSocketStream,
)
from trio_retry._wire.transport import open_transport

SMALL_BUFFER = 16 * 1024


async def _fill(stream: RawSocketStream) -> None:
    """Send until the kernel takes no more, down to single bytes: clogged."""
    raw = stream._sock  # the stdlib socket under it
    for size in (65536, 1024, 1):
        with contextlib.suppress(BlockingIOError):
            while True:
                raw.send(b"x" * size)
    await trio.lowlevel.checkpoint()


async def _clogged_pair() -> tuple[RawSocketStream, RawSocketStream]:
    left, right = await socket_pair(SMALL_BUFFER)
    await _fill(left)
    await _fill(right)
    return left, right


async def test_the_generic_half_closeable_stream_checks() -> None:
    with trio.fail_after(60):
        await trio.testing.check_half_closeable_stream(socket_pair, _clogged_pair)


async def test_tcp_nodelay_is_set_as_trio_sets_it() -> None:
    client, server = await socket_pair()
    async with client, server:
        assert client.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        assert trio.SocketStream(server.socket).getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


async def test_every_operation_is_a_checkpoint_even_when_nothing_blocks() -> None:
    client, server = await socket_pair()
    async with client, server:
        with trio.testing.assert_checkpoints():
            await client.send_all(b"ping")
        await trio.testing.wait_all_tasks_blocked()
        with trio.fail_after(5):
            await trio.lowlevel.wait_readable(server.socket)  # receive_some won't block
        with trio.testing.assert_checkpoints():
            assert await server.receive_some(100) == b"ping"
        with trio.testing.assert_checkpoints():
            await client.send_all(b"")
        with trio.testing.assert_checkpoints():
            await client.wait_send_all_might_not_block()
        with trio.testing.assert_checkpoints():
            await client.send_eof()
        with trio.testing.assert_checkpoints():
            await client.send_eof()  # idempotent, still a checkpoint
        with trio.testing.assert_checkpoints():
            await client.aclose()


async def test_other_tasks_run_during_a_send_that_does_not_block() -> None:
    client, server = await socket_pair()
    ran: list[int] = []
    async with client, server, trio.open_nursery() as nursery:
        nursery.start_soon(lambda: _append(ran))
        # The new task is runnable with us in the next scheduler batch; every task of a batch
        # runs before the next batch, so after two schedule points it must have run.
        await client.send_all(b"x")
        await client.send_all(b"x")
        assert ran == [1]


async def _append(ran: list[int]) -> None:
    ran.append(1)


async def test_a_cancelled_send_sends_nothing() -> None:
    client, server = await socket_pair()
    async with client, server:
        with trio.CancelScope() as scope:
            scope.cancel()
            await client.send_all(b"never")
        assert scope.cancelled_caught
        await client.send_all(b"after")
        got = b""
        with trio.fail_after(5):
            while len(got) < 5:
                got += await server.receive_some(100)
        assert got == b"after"


async def test_a_cancelled_receive_consumes_nothing() -> None:
    client, server = await socket_pair()
    async with client, server:
        await client.send_all(b"kept")
        with trio.fail_after(5):
            await trio.lowlevel.wait_readable(server.socket)
        with trio.CancelScope() as scope:
            scope.cancel()
            await server.receive_some(100)
        assert scope.cancelled_caught
        assert await server.receive_some(100) == b"kept"


async def test_a_blocked_receive_is_cancelled_at_its_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    client, server = await socket_pair()
    async with client, server:
        started = trio.current_time()
        with trio.move_on_after(7) as scope:
            await server.receive_some(100)
        assert scope.cancelled_caught
        assert trio.current_time() - started == pytest.approx(7)
        await client.send_all(b"late")  # the stream is still good after the cancellation
        with trio.fail_after(5):
            assert await server.receive_some(100) == b"late"


async def test_a_peer_reset_is_broken_resource_error() -> None:
    client, server = await socket_pair()
    async with client:
        # SO_LINGER 0: close sends RST instead of FIN.
        server.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await server.aclose()
        with trio.fail_after(5), pytest.raises(trio.BrokenResourceError) as info:
            await client.receive_some(100)
        assert isinstance(info.value.__cause__, OSError)
        assert info.value.__cause__.errno == errno.ECONNRESET


async def test_sending_to_a_reset_peer_is_broken_resource_error() -> None:
    client, server = await socket_pair()
    async with client:
        server.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await server.aclose()
        with trio.fail_after(5):
            await trio.lowlevel.wait_readable(client.socket)  # the RST has arrived
        with pytest.raises(trio.BrokenResourceError) as info:
            await client.send_all(b"x" * 1000)
        assert isinstance(info.value.__cause__, OSError)
        assert info.value.__cause__.errno in (errno.ECONNRESET, errno.EPIPE)


async def test_closing_the_socket_wakes_a_blocked_receive_with_closed_resource_error() -> None:
    client, server = await socket_pair()
    async with server:
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:

                async def close_when_blocked() -> None:
                    await trio.testing.wait_all_tasks_blocked()
                    client.socket.close()  # what HTTP11Connection.close() does

                nursery.start_soon(close_when_blocked)
                with pytest.raises(trio.ClosedResourceError):
                    await client.receive_some(100)


async def test_closing_the_socket_wakes_a_blocked_send_with_closed_resource_error() -> None:
    client, server = await socket_pair(SMALL_BUFFER)
    async with server:
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:

                async def close_when_blocked() -> None:
                    await trio.testing.wait_all_tasks_blocked()
                    await client.aclose()

                nursery.start_soon(close_when_blocked)
                with pytest.raises(trio.ClosedResourceError):
                    await client.send_all(b"x" * (8 * 1024 * 1024))


async def test_every_operation_after_close_is_closed_resource_error() -> None:
    client, server = await socket_pair()
    async with server:
        await client.aclose()
        await client.aclose()  # idempotent
        with pytest.raises(trio.ClosedResourceError):
            await client.send_all(b"x")
        with pytest.raises(trio.ClosedResourceError):
            await client.send_all(b"")
        with pytest.raises(trio.ClosedResourceError):
            await client.receive_some(10)
        with pytest.raises(trio.ClosedResourceError):
            await client.wait_send_all_might_not_block()
        with pytest.raises(trio.ClosedResourceError):
            await client.send_eof()


async def test_a_large_send_to_a_slow_reader_arrives_whole() -> None:
    data = bytes(range(256)) * (4 * 1024 * 4)  # 4 MiB, far more than the small buffers
    client, server = await socket_pair(SMALL_BUFFER)
    received = bytearray()

    async def slow_reader() -> None:
        while len(received) < len(data):
            received.extend(await server.receive_some(7000))
            await trio.sleep(0)

    async with client, server:
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(slow_reader)
                await client.send_all(memoryview(bytearray(data)))  # not bytes: a view
    assert bytes(received) == data


async def test_a_send_cancelled_while_blocked_has_sent_a_prefix() -> None:
    data = bytes(range(256)) * (4 * 1024 * 4)
    client, server = await socket_pair(SMALL_BUFFER)
    async with client, server:
        with trio.move_on_after(0.2) as scope:
            await client.send_all(data)  # nobody reads: it blocks with the buffers full
        assert scope.cancelled_caught
        await client.send_eof()
        received = bytearray()
        with trio.fail_after(30):
            while chunk := await server.receive_some(65536):
                received.extend(chunk)
    assert 0 < len(received) < len(data)
    assert bytes(received) == data[: len(received)]


async def test_eof_in_each_direction() -> None:
    client, server = await socket_pair()
    async with client, server:
        await client.send_all(b"last")
        await client.send_eof()
        with pytest.raises(trio.ClosedResourceError):
            await client.send_all(b"more")
        got = b""
        with trio.fail_after(5):
            while chunk := await server.receive_some(100):
                got += chunk
            assert got == b"last"
            assert await server.receive_some(100) == b""  # EOF stays EOF
            await server.send_all(b"reply")  # half-closed: the other direction still works
            assert await client.receive_some(100) == b"reply"


async def test_bad_arguments() -> None:
    client, server = await socket_pair()
    async with client, server:
        with pytest.raises(ValueError, match="max_bytes"):
            await client.receive_some(0)
        with socket.socket() as other, pytest.raises(ValueError, match="wrapping"):
            RawSocketStream(server.socket, other)
    with socket.socket(type=socket.SOCK_DGRAM) as dgram, pytest.raises(ValueError, match="STREAM"):
        RawSocketStream(trio.socket.from_stdlib_socket(dgram), dgram)


async def test_tcp_transports_use_it(nursery: trio.Nursery) -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]

    async def echo(stream: trio.SocketStream) -> None:
        async with stream:
            while data := await stream.receive_some():
                await stream.send_all(data)

    nursery.start_soon(trio.serve_listeners, echo, listeners)
    transport = await open_transport(
        "127.0.0.1", port, progress=AttemptProgress(trio.current_time()), ssl_context=None
    )
    async with transport.stream:  # closed even when an assertion fails
        assert isinstance(transport.stream, RawSocketStream)
        assert transport.stream.socket is transport.socket
        await transport.stream.send_all(b"echo")
        with trio.fail_after(5):
            assert await transport.stream.receive_some() == b"echo"


async def test_a_second_receiver_is_busy_even_when_data_is_ready() -> None:
    client, server = await socket_pair()
    async with client, server, trio.open_nursery() as nursery:
        nursery.start_soon(server.receive_some, 100)
        await trio.testing.wait_all_tasks_blocked()  # the first receiver waits
        client._sock.send(b"x")  # no schedule point: the first receiver is not woken yet
        with pytest.raises(trio.BusyResourceError):
            await server.receive_some(100)  # not "x": that is the first receiver's


async def test_a_second_sender_is_busy_and_sends_nothing_even_when_there_is_room() -> None:
    client, server = await _clogged_pair()
    async with client, server, trio.open_nursery() as nursery:
        nursery.start_soon(client.send_all, b"A" * 100_000)
        await trio.testing.wait_all_tasks_blocked()  # the first sender waits for room
        with contextlib.suppress(BlockingIOError):
            while True:  # make room without a schedule point
                server._sock.recv(65536)
        with pytest.raises(trio.BusyResourceError):
            await client.send_all(b"B")  # never interleaved into the first sender's bytes
        nursery.cancel_scope.cancel()


async def test_tls_runs_over_it() -> None:
    """trio.SSLStream over RawSocketStream both ways: a handshake, a large echo, close_notify."""
    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    client_raw, server_raw = await socket_pair(SMALL_BUFFER)
    client = trio.SSLStream(client_raw, client_ctx, server_hostname="localhost")
    server = trio.SSLStream(server_raw, server_ctx, server_side=True)
    data = bytes(range(256)) * 4096  # 1 MiB: many records, many partial sends

    async def echo() -> None:
        echoed = 0
        while echoed < len(data):
            chunk = await server.receive_some(65536)
            await server.send_all(chunk)
            echoed += len(chunk)

    received = bytearray()
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(echo)

            async def read_all() -> None:
                while len(received) < len(data):
                    received.extend(await client.receive_some(65536))

            nursery.start_soon(read_all)
            await client.send_all(data)
        await client.aclose()  # close_notify, then the socket
        assert await server.receive_some(10) == b""  # the peer's close_notify is a clean EOF
        await server.aclose()
    assert bytes(received) == data


class _CountingFactory(trio.abc.SocketFactory):
    def __init__(self) -> None:
        self.made = 0

    def socket(
        self, family: int | None = None, type: int | None = None, proto: int | None = None
    ) -> trio.socket.SocketType:
        self.made += 1
        return trio.socket.from_stdlib_socket(
            socket.socket(family or socket.AF_INET, type or socket.SOCK_STREAM, proto or 0)
        )


async def test_a_custom_socket_factory_is_honoured(nursery: trio.Nursery) -> None:
    """With ``trio.socket.set_custom_socket_factory`` in force the client's sockets come from
    it (as with ``trio.socket.socket``), over a plain trio.SocketStream; the factory stays."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    nursery.start_soon(trio.serve_listeners, trio.aclose_forcefully, listeners)
    factory = _CountingFactory()
    trio.socket.set_custom_socket_factory(factory)
    try:
        transport = await open_transport(
            "127.0.0.1", port, progress=AttemptProgress(trio.current_time()), ssl_context=None
        )
        async with transport.stream:
            assert factory.made == 1
            assert isinstance(transport.stream, trio.SocketStream)
        assert trio.socket.set_custom_socket_factory(None) is factory
    finally:
        trio.socket.set_custom_socket_factory(None)


async def test_receive_without_a_size_grows_while_reads_fill_it() -> None:
    """``receive_some()`` asks for 64 KiB, then twice as much after each read that filled it,
    up to 256 KiB: a large body arrives in large reads. A stream of small messages keeps 64 KiB,
    and an explicit size is always what is asked."""
    client, server = await socket_pair()
    small_client, small_server = await socket_pair()
    async with client, server, small_client, small_server:
        await _grow(client, server)
        await _keep(small_client, small_server)


async def _grow(client: RawSocketStream, server: RawSocketStream) -> None:
    data = bytes(range(256)) * (12 * 1024)  # 3 MiB
    sizes: list[int] = []
    received = bytearray()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.send_all, data)
            while len(received) < len(data):
                await trio.sleep(0.01)  # let the kernel's buffer fill between reads
                chunk = await client.receive_some()
                sizes.append(len(chunk))
                received += chunk
    assert bytes(received) == data
    assert max(sizes) > DEFAULT_RECEIVE_SIZE  # it grew
    assert max(sizes) <= MAX_RECEIVE_SIZE


async def _keep(small_client: RawSocketStream, small_server: RawSocketStream) -> None:
    for _ in range(5):
        await small_server.send_all(b"x" * 100)
        assert await small_client.receive_some() == b"x" * 100
    assert small_client._receive_size == DEFAULT_RECEIVE_SIZE
    await small_server.send_all(b"y" * 20_000)
    await trio.sleep(0.05)
    assert len(await small_client.receive_some(1000)) == 1000  # a size given is a size kept
