"""The fault server's TCP connection (or in-memory one, for `MockTransport`), with the three
ways a script can end it: a lingering close, a TCP reset, or an abort."""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable

import trio

from ._memory import MemoryEnd

__all__ = ["Transport"]


class Transport(trio.abc.HalfCloseableStream):
    """The accepted connection, with the three ways a connection can end.

    `aclose` is a lingering close: FIN first, then read and discard until the client closes
    (or the linger time passes), then close. Closing a socket whose receive buffer still holds
    unread bytes makes the kernel send a RST instead of a FIN; a script that says "close"
    must look like a close on the client's side, so the server drains first.

    `inner` is a TCP socket stream (`from_socket`) or one end of an in-memory connection
    (`MemoryEnd`, for `MockTransport`); `reset` and `close_now` end it abruptly.
    """

    def __init__(
        self,
        inner: trio.abc.HalfCloseableStream,
        linger: float,
        *,
        reset: Callable[[], None],
        close_now: Callable[[], None],
    ) -> None:
        self._inner = inner
        self._linger = linger
        self._reset = reset
        self._close_now = close_now

    @classmethod
    def from_socket(cls, inner: trio.SocketStream, linger: float) -> Transport:
        def reset() -> None:
            """Abort with a TCP RST: SO_LINGER (on, 0 seconds), then close."""
            try:
                inner.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass  # already closed by the peer's reset
            inner.socket.close()

        return cls(inner, linger, reset=reset, close_now=inner.socket.close)

    @classmethod
    def from_memory(cls, inner: MemoryEnd, linger: float) -> Transport:
        return cls(inner, linger, reset=inner.reset, close_now=inner.close)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._inner.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        await self._inner.send_eof()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        return bytes(await self._inner.receive_some(max_bytes))

    async def aclose(self) -> None:
        try:
            with trio.move_on_after(self._linger):
                await self._inner.send_eof()
                while await self._inner.receive_some(65536):
                    pass
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            self.close_now()
        await trio.lowlevel.checkpoint()

    def reset(self) -> None:
        """Abort with a RST."""
        self._reset()

    def close_now(self) -> None:
        self._close_now()
