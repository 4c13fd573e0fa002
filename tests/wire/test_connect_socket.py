"""rawsock.connect_socket: the connect every TCP connection starts with, made on the stdlib
socket (issue #41: no Trio socket and no coroutine of trio's while it waits), over real
loopback sockets: it connects, is a checkpoint, reports a refusal as the reason alone, and
leaves no socket open when it fails or is cancelled, holds one coroutine of the library's
while it waits; a custom socket factory's socket connects itself."""

from __future__ import annotations

import errno
import os
import socket
import types
from pathlib import Path

import pytest
import trio
import trio.testing

import trio_retry
from tests.support.loopback import connects_waiting
from trio_retry._wire.rawsock import connect_socket


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_it_connects_and_is_a_checkpoint() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        with trio.testing.assert_checkpoints(), trio.fail_after(10):
            sock, raw = await connect_socket(
                socket.AF_INET, socket.SOCK_STREAM, 0, listener.getsockname()
            )
        assert raw is not None
        assert raw.fileno() == sock.fileno()  # one socket, two handles
        assert raw.getpeername() == listener.getsockname()
        sock.close()
        assert raw.fileno() == -1


async def test_a_refusal_is_the_reason_alone_and_leaves_nothing_open() -> None:
    before = _open_fds()
    with socket.socket() as bound_only:  # bound, never listening: connects are refused
        bound_only.bind(("127.0.0.1", 0))
        with pytest.raises(ConnectionRefusedError) as caught, trio.fail_after(10):
            await connect_socket(socket.AF_INET, socket.SOCK_STREAM, 0, bound_only.getsockname())
    assert caught.value.errno == errno.ECONNREFUSED
    assert caught.value.strerror == os.strerror(errno.ECONNREFUSED)  # no address repeated
    assert _open_fds() == before


async def test_a_cancelled_connect_leaves_nothing_open() -> None:
    with connects_waiting() as port:
        before = _open_fds()
        with trio.move_on_after(0.2) as waited:
            await connect_socket(socket.AF_INET, socket.SOCK_STREAM, 0, ("127.0.0.1", port))
        assert waited.cancelled_caught  # it was waiting for the handshake
        assert _open_fds() == before


async def test_a_waiting_connect_holds_one_coroutine_of_the_library() -> None:
    """Issue #41: thousands of connects waiting at once each hold their frames, so the wait is
    one coroutine of the library's (``rawsock.finish_connect``), not a layer around it."""
    library = Path(trio_retry.__file__).parent
    held: list[str] = []
    with connects_waiting() as port:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                connect_socket, socket.AF_INET, socket.SOCK_STREAM, 0, ("127.0.0.1", port)
            )
            await trio.testing.wait_all_tasks_blocked()
            (task,) = nursery.child_tasks
            coro: object = task.coro
            for _ in range(16):  # the task's chain of awaits, down to trio's wait
                if not isinstance(coro, types.CoroutineType):
                    break
                if Path(coro.cr_code.co_filename).is_relative_to(library):
                    held.append(coro.cr_code.co_name)
                coro = coro.cr_await
            nursery.cancel_scope.cancel()
    assert held == ["finish_connect"]


class _Factory(trio.abc.SocketFactory):
    def __init__(self) -> None:
        self.made = 0

    def socket(
        self,
        family: socket.AddressFamily | int = socket.AF_INET,
        type: socket.SocketKind | int = socket.SOCK_STREAM,
        proto: int = 0,
    ) -> trio.socket.SocketType:
        self.made += 1
        return trio.socket.from_stdlib_socket(socket.socket(family, type, proto))


async def test_a_custom_factory_s_socket_connects_itself() -> None:
    factory = _Factory()
    previous = trio.socket.set_custom_socket_factory(factory)
    try:
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            with trio.fail_after(10):
                sock, raw = await connect_socket(
                    socket.AF_INET, socket.SOCK_STREAM, 0, listener.getsockname()
                )
            assert raw is None  # (socket_stream then gives a trio.SocketStream)
            assert factory.made == 1
            assert sock.getpeername() == listener.getsockname()
            sock.close()
    finally:
        trio.socket.set_custom_socket_factory(previous)
