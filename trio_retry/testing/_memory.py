"""An in-memory duplex byte stream that ends the way a TCP connection ends.

`memory_connection()` returns two connected `MemoryEnd` streams. Unlike
``trio.testing.memory_stream_pair``, whose ends only ever close cleanly, these reproduce the
three endings a test server needs, with the semantics of a TCP socket on Linux, so that the
client's wire layer classifies them exactly as it classifies a real socket:

* `MemoryEnd.send_eof` / a clean `close`: a FIN. The peer reads what was sent, then ``b""``.
* `MemoryEnd.reset`: a RST. The peer reads what was sent before it, then every read and write
  raises ``trio.BrokenResourceError`` (its ``__cause__`` a ``ConnectionResetError``).
* `close` while received bytes are still unread: the kernel answers with a RST, and so does
  this stream. A write to an end whose peer has closed is accepted once (the bytes are lost),
  and answered with a RST, as TCP does.

Each direction buffers at most `limit` bytes (a socket's buffers): `send_all` returns once its
bytes fit, so a writer whose reader stopped reading blocks, as it would on a socket. Nothing
here reads a clock: under ``trio.testing.MockClock`` everything is deterministic.
"""

from __future__ import annotations

import operator

import trio

from .._wire.virtual import VirtualSocket

__all__ = ["DEFAULT_LIMIT", "MemoryEnd", "memory_connection"]

#: Bytes buffered per direction before `send_all` waits (about a loopback socket's buffers).
DEFAULT_LIMIT = 256 * 1024
_RECEIVE_SIZE = 65536


class _Direction:
    """The bytes travelling one way, and how that way ended."""

    __slots__ = ("buffer", "changed", "eof", "reader_gone", "reset")

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.eof = False  # the writer sent a FIN: after the buffer, reads return b""
        self.reset = False  # the writer sent a RST: after the buffer, reads fail
        self.reader_gone = False  # the reader closed: writes are answered with a RST
        self.changed = trio.lowlevel.ParkingLot()

    def wake(self) -> None:
        self.changed.unpark_all()


def _reset_error(what: str) -> trio.BrokenResourceError:
    error = trio.BrokenResourceError(f"connection reset by peer ({what})")
    error.__cause__ = ConnectionResetError(104, "Connection reset by peer")
    return error


class MemoryEnd(trio.abc.HalfCloseableStream, VirtualSocket):
    """One end of a `memory_connection`: a Trio stream, and the client's `VirtualSocket`."""

    def __init__(self, outgoing: _Direction, incoming: _Direction, limit: int) -> None:
        self._out = outgoing
        self._in = incoming
        self._limit = limit
        self._closed = False
        self._sending = False
        self._receiving = False

    # -- sending ------------------------------------------------------------------------------

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Queue `data` for the peer, then wait until the buffer is below the limit.

        Cancelled while waiting, the bytes have been sent (all of them, as a socket may have).
        """
        if self._sending:
            raise trio.BusyResourceError("another task is sending on this stream")
        self._sending = True
        try:
            await trio.lowlevel.checkpoint_if_cancelled()
            self._check_can_send()
            if self._out.reader_gone:
                # The peer closed: TCP accepts this write, loses it, and the peer answers RST.
                self._in.reset = True
                self._in.wake()
            else:
                self._out.buffer += data
                self._out.wake()
            await self._wait_room()
        finally:
            self._sending = False

    def _check_can_send(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError("this stream was closed")
        if self._out.eof:
            raise trio.ClosedResourceError("cannot send after send_eof")
        if self._in.reset:
            raise _reset_error("while sending")

    async def _wait_room(self) -> None:
        while len(self._out.buffer) > self._limit and not self._out.reader_gone:
            await self._out.changed.park()
            if self._closed:
                raise trio.ClosedResourceError("this stream was closed")
        await trio.lowlevel.cancel_shielded_checkpoint()

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._closed:
            raise trio.ClosedResourceError("this stream was closed")
        await self._wait_room()

    async def send_eof(self) -> None:
        """Send a FIN: the peer reads what was sent, then ``b""``. Idempotent."""
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._closed:
            raise trio.ClosedResourceError("this stream was closed")
        self._out.eof = True
        self._out.wake()
        await trio.lowlevel.cancel_shielded_checkpoint()

    # -- receiving ----------------------------------------------------------------------------

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """The next bytes (at most `max_bytes`), ``b""`` after a FIN; raises after a RST."""
        if max_bytes is not None:
            max_bytes = operator.index(max_bytes)  # TypeError for a float, as trio's streams
            if max_bytes < 1:
                raise ValueError("max_bytes must be >= 1")
        if self._receiving:
            raise trio.BusyResourceError("another task is receiving on this stream")
        self._receiving = True
        try:
            await trio.lowlevel.checkpoint_if_cancelled()
            while True:
                if self._closed:
                    raise trio.ClosedResourceError("this stream was closed")
                incoming = self._in
                if incoming.buffer:
                    size = max_bytes or _RECEIVE_SIZE
                    data = bytes(incoming.buffer[:size])
                    del incoming.buffer[:size]
                    incoming.wake()  # a writer may be waiting for room
                    await trio.lowlevel.cancel_shielded_checkpoint()
                    return data
                if incoming.reset:
                    raise _reset_error("while receiving")
                if incoming.eof:
                    await trio.lowlevel.cancel_shielded_checkpoint()
                    return b""
                await incoming.changed.park()
        finally:
            self._receiving = False

    # -- ending -------------------------------------------------------------------------------

    def readable(self) -> bool:
        """True when a read would not block (bytes, a FIN or a RST are waiting)."""
        return self._closed or bool(self._in.buffer) or self._in.eof or self._in.reset

    def close(self) -> None:
        """Close now. A FIN for the peer, or a RST when received bytes are still unread."""
        if self._closed:
            return
        unread = bool(self._in.buffer)
        self._finish()
        if unread:
            self._out.reset = True
        else:
            self._out.eof = True
        self._out.wake()

    def reset(self) -> None:
        """Abort with a RST: the peer reads what was already sent, then fails."""
        if self._closed:
            return
        self._finish()
        self._out.reset = True
        self._out.wake()

    def _finish(self) -> None:
        self._closed = True
        self._in.reader_gone = True
        self._in.buffer.clear()
        self._in.wake()
        self._out.wake()

    async def aclose(self) -> None:
        self.close()
        await trio.lowlevel.checkpoint()


def memory_connection(limit: int = DEFAULT_LIMIT) -> tuple[MemoryEnd, MemoryEnd]:
    """Two connected ends: (client side, server side). Symmetric apart from the names."""
    up, down = _Direction(), _Direction()
    return MemoryEnd(up, down, limit), MemoryEnd(down, up, limit)
