"""A TCP relay that kills each connection after a number of bytes from the server: a real
server's download broken mid-body, without touching the server (the resume benchmark and the
nginx resume tests put it between a client and nginx).

Each connection the relay accepts is joined to a fresh connection to ``target``; bytes go both
ways unchanged, and the server's are counted (``downstream``: the bytes a client received,
what "bytes on the wire" means in the benchmark). Once a connection has passed ``cut_every``
bytes from the server, the relay sends no more of them, calls ``on_cut`` (a test changes the
file there) and resets both sides (``SO_LINGER`` 0: the client sees a reset, the server a
broken pipe). ``cut_every=None``: nothing is cut. Every wait is bounded by the caller's scope;
``serve`` runs until cancelled.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable

import trio

__all__ = ["CutRelay"]

_CHUNK = 65536


class CutRelay:
    """Relay 127.0.0.1:``port`` to 127.0.0.1:``target``, cutting each connection after
    ``cut_every`` server bytes (see the module)."""

    def __init__(
        self,
        target: int,
        cut_every: int | None,
        on_cut: Callable[[], None] | None = None,
        *,
        host: str = "127.0.0.1",
    ) -> None:
        self.target = target
        self.cut_every = cut_every
        self.on_cut = on_cut
        self.host = host
        self.port = 0
        #: Bytes from the server relayed to clients, over every connection.
        self.downstream = 0
        #: Connections reset by the relay.
        self.cuts = 0
        #: Connections accepted.
        self.connections = 0

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Accept and relay until cancelled; ``nursery.start`` gives the port."""
        listeners = await trio.open_tcp_listeners(0, host=self.host)
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            task_status.started(self.port)
            await trio.serve_listeners(self._relay, listeners, handler_nursery=nursery)

    async def _relay(self, client: trio.SocketStream) -> None:
        self.connections += 1
        try:
            server = await trio.open_tcp_stream(self.host, self.target)
        except BaseException:
            await _close(client)
            raise
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._up, client, server, nursery.cancel_scope)
                nursery.start_soon(self._down, server, client, nursery.cancel_scope)
        finally:
            await _close(client, server)

    @staticmethod
    async def _up(
        client: trio.SocketStream, server: trio.SocketStream, scope: trio.CancelScope
    ) -> None:
        try:
            while data := await client.receive_some(_CHUNK):
                await server.send_all(data)
            await server.send_eof()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            scope.cancel()

    async def _down(
        self, server: trio.SocketStream, client: trio.SocketStream, scope: trio.CancelScope
    ) -> None:
        left = self.cut_every
        try:
            while data := await server.receive_some(_CHUNK):
                if left is not None and len(data) >= left:
                    await client.send_all(data[:left])
                    self.downstream += left
                    self.cuts += 1
                    if self.on_cut is not None:
                        self.on_cut()
                    _reset(client)
                    _reset(server)
                    break
                await client.send_all(data)
                self.downstream += len(data)
                if left is not None:
                    left -= len(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        scope.cancel()


def _reset(stream: trio.SocketStream) -> None:
    """Make the close of ``stream`` a reset (RST), not a FIN."""
    try:
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass


async def _close(*streams: trio.SocketStream) -> None:
    for stream in streams:
        with trio.CancelScope(shield=True):
            await stream.aclose()
