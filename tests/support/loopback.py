"""Wire-test helpers shared by several test files: a connected pair of our socket streams over
127.0.0.1, a port whose connects never complete, and a stand-in for the HTTP/2 machine the
writer takes its bytes from."""

from __future__ import annotations

import socket
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

import trio

from trio_retry._wire.rawsock import RawSocketStream, open_socket


async def socket_pair(buffer: int | None = None) -> tuple[RawSocketStream, RawSocketStream]:
    """(client, server) over 127.0.0.1, both RawSocketStreams on their own Trio sockets;
    ``buffer``: both kernel buffers of both sides, so that a large send must wait."""
    with socket.socket() as listener:
        if buffer is not None:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer)
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        sock, raw = open_socket()
        assert raw is not None  # no custom socket factory here
        if buffer is not None:
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer)
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer)
        with trio.fail_after(10):
            await sock.connect(listener.getsockname())
        listener.settimeout(10)
        accepted, _ = listener.accept()  # queued already: connect() returned
    server = trio.socket.from_stdlib_socket(accepted)
    return RawSocketStream(sock, raw), RawSocketStream(server, accepted)


@contextmanager
def connects_waiting() -> Iterator[int]:
    """A port on 127.0.0.1 whose connects wait for their handshake until the block ends: a
    listener whose backlog's one place is taken (and never accepted)."""
    with socket.socket() as listener, socket.socket() as filler:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port: int = listener.getsockname()[1]
        filler.connect(("127.0.0.1", port))  # the backlog's one place, taken
        yield port


class QueuedOutput:
    """Stands in for the HTTP/2 machine: what the test puts in ``data`` is what
    ``take_output`` gives the writer."""

    def __init__(self) -> None:
        self.data = b""

    def take_output(self, into: deque[bytes | memoryview]) -> int:
        data, self.data = self.data, b""
        if data:
            into.append(data)
        return len(data)
