"""A byte stream over a connected stdlib socket, doing the non-blocking I/O itself.

:class:`RawSocketStream` keeps the contract of :class:`trio.SocketStream` (a
:class:`trio.abc.HalfCloseableStream`) with fewer layers per call: ``trio.SocketStream`` goes
through ``trio.socket.SocketType.send/recv`` and its ``_nonblocking_helper`` (a context-manager
object, a generator-based error translator and a conflict-detector object per call), where this
calls the stdlib socket directly and uses only Trio's public low-level API around it:

- before the system call, ``trio.lowlevel.checkpoint_if_cancelled()`` (the cancellation point:
  a cancelled operation does nothing);
- if the call would block, ``trio.lowlevel.wait_readable``/``wait_writable`` (the schedule point
  and, while nothing was transferred, the cancellation point);
- if it did not block, ``trio.lowlevel.cancel_shielded_checkpoint()`` (the schedule point, after
  the bytes moved, so they are never lost to a cancellation).

So every operation is a checkpoint, blocked or not, exactly as with ``trio.SocketStream``.

The stream shares its socket with a Trio socket object (:attr:`RawSocketStream.socket`, made by
:func:`open_socket`): closing that one (``trio.socket.SocketType.close`` calls
``trio.lowlevel.notify_closing`` first) wakes a blocked operation here with
:exc:`trio.ClosedResourceError`, which is what the connection code relies on when it closes a
connection from another task.

A connect is made the same way, on the stdlib socket, in two parts every connect shares:
:func:`start_connect` (the socket, non-blocking, and ``connect_ex``: no await) and
:func:`finish_connect` (one ``wait_writable`` for the handshake's answer, then the Trio
socket). :func:`connect_socket` is the two back to back; ``connect_backup.py`` does its
bounded wait, and its backup connect, between them.
"""

from __future__ import annotations

import errno
import os
import socket as _stdlib_socket
from collections.abc import Awaitable, Callable

import trio
from trio.lowlevel import (
    cancel_shielded_checkpoint,
    checkpoint,
    checkpoint_if_cancelled,
    wait_readable,
    wait_writable,
)

__all__ = [
    "DEFAULT_RECEIVE_SIZE",
    "RawSocketStream",
    "Sockets",
    "answered",
    "connect_socket",
    "finish_connect",
    "open_socket",
    "raw_stream_of",
    "socket_stream",
    "start_connect",
]

DEFAULT_RECEIVE_SIZE = 65536  # as trio.SocketStream
#: The most a ``receive_some()`` without a size asks for, once reads fill what it asked.
MAX_RECEIVE_SIZE = 256 * 1024

_CLOSED_ERRNOS = frozenset({errno.EBADF, errno.ENOTSOCK})
#: A non-blocking connect under way (``EAGAIN``: a Unix socket's listener's queue was full).
_CONNECTING_ERRNOS = frozenset({errno.EINPROGRESS, errno.EAGAIN, errno.EWOULDBLOCK})
_INET_FAMILIES = frozenset({_stdlib_socket.AF_INET, _stdlib_socket.AF_INET6})


Sockets = tuple[trio.socket.SocketType, _stdlib_socket.socket | None]
"""A Trio socket and the stdlib socket it wraps (``None``: a custom factory's socket)."""


def _factory_installed() -> bool:
    """Whether a custom Trio socket factory is installed (``set_custom_socket_factory``)."""
    # The one public way to read the factory: set returns the previous one (atomic: no await).
    factory = trio.socket.set_custom_socket_factory(None)
    if factory is None:
        return False
    trio.socket.set_custom_socket_factory(factory)
    return True


def open_socket(
    family: int = _stdlib_socket.AF_INET,
    type_: int = _stdlib_socket.SOCK_STREAM,
    proto: int = 0,
) -> Sockets:
    """A new non-blocking socket, as a Trio socket (to connect, poll and close) and the stdlib
    socket it wraps (for :class:`RawSocketStream`). They are one socket: closing either closes
    both; close it through the Trio one, which notifies blocked waiters first.

    When a custom socket factory is installed (``trio.socket.set_custom_socket_factory``) the
    socket comes from it, as ``trio.socket.socket`` would make it, and the stdlib socket is
    ``None``: :func:`socket_stream` then gives a plain ``trio.SocketStream``.
    """
    if _factory_installed():
        return trio.socket.socket(family, type_, proto), None
    raw = _stdlib_socket.socket(family, type_, proto)
    try:
        return trio.socket.from_stdlib_socket(raw), raw
    except BaseException:
        raw.close()
        raise


def start_connect(
    family: int, type_: int, proto: int, sockaddr: object
) -> tuple[_stdlib_socket.socket | None, bool]:
    """A new non-blocking stdlib socket, its connect to ``sockaddr`` started, and whether
    that connect is still under way (``False``: connected within the call, as on loopback);
    hand both to :func:`finish_connect`, which closes the socket on every way out but its
    success. The socket is ``None`` when a custom socket factory is installed: nothing was
    made, its socket connects itself (``trio.socket.SocketType.connect``). A connect refused
    (or otherwise failed) within the call raises ``OSError`` (its ``strerror`` the reason
    alone), the socket closed. Not a checkpoint: no await. (Two values, unpacked by the
    caller at once: no object of its own held while the connect waits, issue #41.)"""
    if _factory_installed():
        return None, False
    raw = _stdlib_socket.socket(family, type_, proto)
    try:
        raw.setblocking(False)
        # connect_ex: the errno as a value. A BlockingIOError caught around the wait would be
        # held by the frame, with its traceback, for as long as the connect waits.
        error = raw.connect_ex(sockaddr)  # type: ignore[arg-type]
        if error and error not in _CONNECTING_ERRNOS:
            raise OSError(error, os.strerror(error))
    except BaseException:
        raw.close()
        raise
    return raw, bool(error)


async def finish_connect(raw: _stdlib_socket.socket, pending: bool) -> Sockets:
    """``raw`` connected, its connect started by :func:`start_connect` (``pending``: still
    under way), as :func:`open_socket` gives a socket; raises ``OSError`` (its ``strerror``
    the reason alone) if the connect fails. On any exception, cancellation included, ``raw``
    is closed: nothing is left open.

    A pending connect is waited for with one ``trio.lowlevel.wait_writable`` (the schedule
    point, and the cancellation point while it waits), its answer read from ``SO_ERROR``
    (once: reading it clears it); a connect done within the call still passes a schedule
    point. The Trio socket is made once connected."""
    try:
        if not pending:
            await cancel_shielded_checkpoint()
            return trio.socket.from_stdlib_socket(raw), raw
        await wait_writable(raw)
    except BaseException:
        raw.close()
        raise
    return answered(raw)


def answered(raw: _stdlib_socket.socket) -> Sockets:
    """``raw``, whose connect the kernel has answered (writable, or connected), as
    :func:`open_socket` gives a socket; raises ``OSError`` (its ``strerror`` the reason alone)
    if the connect failed, ``raw`` then closed. The answer is read from ``SO_ERROR`` (once:
    reading it clears it). Not a checkpoint: the wait for the answer was the caller's."""
    try:
        error = raw.getsockopt(_stdlib_socket.SOL_SOCKET, _stdlib_socket.SO_ERROR)
        if error:
            raise OSError(error, os.strerror(error))
        return trio.socket.from_stdlib_socket(raw), raw
    except BaseException:
        raw.close()
        raise


def connect_socket(family: int, type_: int, proto: int, sockaddr: object) -> Awaitable[Sockets]:
    """A new socket connected to ``sockaddr`` (an address from ``getaddrinfo``, given as its
    parts rather than its address-info tuple), as :func:`open_socket` gives it, to be awaited
    at once; raises ``OSError`` (its ``strerror`` the reason alone) if the connect fails. On
    any exception, cancellation included, the socket is closed: nothing is left open.

    The non-blocking connect is made on the stdlib socket (:func:`start_connect`, within this
    call), and waited for by :func:`finish_connect`: one ``trio.lowlevel.wait_writable`` for
    the handshake (the schedule point, and the cancellation point while it waits; a connect
    done at once still passes a schedule point); the Trio socket is made once it is
    connected. ``trio.socket.SocketType.connect`` would hold a coroutine and a Trio socket
    more for each of thousands of calls connecting at once, each visited by every full pass
    of the garbage collector (issue #41). With a custom socket factory installed, its socket
    connects itself.

    (A plain function returning the awaitable, ``finish_connect``'s coroutine, rather than an
    ``async def`` awaiting it: no frame of its own held while the connect waits, issue #41.
    So the connect starts when this is called, not when it is awaited: await it at once; a
    coroutine never awaited would leave the socket to the garbage collector.)"""
    raw, pending = start_connect(family, type_, proto, sockaddr)
    if raw is None:
        return _factory_connect(family, type_, proto, sockaddr)
    return finish_connect(raw, pending)


async def _factory_connect(family: int, type_: int, proto: int, sockaddr: object) -> Sockets:
    """:func:`connect_socket` with a custom socket factory: its socket connects itself."""
    sock = trio.socket.socket(family, type_, proto)
    try:
        await sock.connect(sockaddr)
    except BaseException:
        sock.close()
        raise
    return sock, None


def socket_stream(
    sock: trio.socket.SocketType, raw: _stdlib_socket.socket | None
) -> trio.abc.HalfCloseableStream:
    """The stream over a connected pair from :func:`open_socket`."""
    if raw is None:
        return trio.SocketStream(sock)
    return RawSocketStream(sock, raw)


def _stream_error(exc: OSError) -> trio.BrokenResourceError | trio.ClosedResourceError:
    """``OSError`` -> Trio's stream errors, as ``trio.SocketStream`` translates them."""
    if exc.errno in _CLOSED_ERRNOS:
        closed = trio.ClosedResourceError("this socket was already closed")
        closed.__suppress_context__ = True
        return closed
    broken = trio.BrokenResourceError(f"socket connection broken: {exc}")
    broken.__cause__ = exc
    return broken


class RawSocketStream(trio.abc.HalfCloseableStream):
    """A :class:`trio.abc.HalfCloseableStream` over a connected ``SOCK_STREAM`` socket.

    Guarantees (those of ``trio.SocketStream``):

    - every method is a checkpoint, whether or not it had to wait;
    - ``send_all`` returns only once every byte was handed to the kernel, or raises; if it is
      cancelled before anything was sent nothing was, but a cancellation while it waits for
      buffer space (a slow reader, a large body) can leave a prefix of ``data`` sent: the
      stream is then unusable for a framed protocol and the caller must close it (the
      connection code does, and classifies the request as possibly sent);
    - ``receive_some`` returns at least one byte, or ``b""`` once the peer sent EOF; a
      cancelled ``receive_some`` consumed nothing;
    - an ``OSError`` from the kernel is :exc:`trio.BrokenResourceError` (``__cause__`` is the
      ``OSError``); using the stream after it (or :attr:`socket`) was closed, or closing it while
      an operation waits, is :exc:`trio.ClosedResourceError`; sending after ``send_eof`` too;
    - two tasks sending (``send_all``, ``wait_send_all_might_not_block``, ``send_eof``) or two
      receiving at once is :exc:`trio.BusyResourceError` (two flag checks per call; the pool
      already gives a connection one user at a time, this keeps the contract for everyone
      else).

    ``TCP_NODELAY`` and ``TCP_NOTSENT_LOWAT`` are set as ``trio.SocketStream`` sets them.

    :attr:`on_progress`, when set, is called each time a ``send_all`` that had to wait for
    buffer space has handed more bytes to the kernel, before it waits again: the peer is
    reading. The write bounds count their limit from the last such call (``Bound.renew``), so
    a large write to a slow but live reader is never cut, and one ``send_all`` can be large.
    """

    __slots__ = (
        "_eof_sent",
        "_receive_size",
        "_receiving",
        "_sending",
        "_sock",
        "on_progress",
        "socket",
    )

    def __init__(self, sock: trio.socket.SocketType, raw: _stdlib_socket.socket) -> None:
        """``sock`` is the Trio socket wrapping ``raw`` (see :func:`open_socket`), connected."""
        if raw.type != _stdlib_socket.SOCK_STREAM:
            raise ValueError("RawSocketStream requires a SOCK_STREAM socket")
        if sock.fileno() != raw.fileno():
            raise ValueError("sock must be the Trio socket wrapping raw")
        raw.setblocking(False)
        self.socket = sock
        self._sock = raw
        self._sending = False
        self._receiving = False
        self._eof_sent = False
        self.on_progress: Callable[[], None] | None = None
        #: What ``receive_some()`` asks for without a size: 64 KiB, doubled (up to
        #: :data:`MAX_RECEIVE_SIZE`) each time a read fills it.
        self._receive_size = DEFAULT_RECEIVE_SIZE
        if raw.family in _INET_FAMILIES:
            try:
                raw.setsockopt(_stdlib_socket.IPPROTO_TCP, _stdlib_socket.TCP_NODELAY, True)
            except OSError:
                pass
            lowat = getattr(_stdlib_socket, "TCP_NOTSENT_LOWAT", None)
            if lowat is not None:
                try:
                    raw.setsockopt(_stdlib_socket.IPPROTO_TCP, lowat, 2**14)
                except OSError:
                    pass

    @property
    def raw_socket(self) -> _stdlib_socket.socket:
        """The stdlib socket under :attr:`socket` (the same file descriptor): what TLS over
        this socket hands OpenSSL (``tlssock.py``), which reports its writes' progress through
        :attr:`on_progress`."""
        return self._sock

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Send all of ``data`` (see the class for what a cancellation leaves sent)."""
        if self._sending:
            raise trio.BusyResourceError("another task is currently sending on this stream")
        if self._eof_sent:
            raise trio.ClosedResourceError("can't send data after sending EOF")
        self._sending = True
        try:
            await checkpoint_if_cancelled()
            sock = self._sock
            if type(data) is not bytes:
                data = memoryview(data).cast("B")
            length = len(data)
            if not length:
                if sock.fileno() == -1:
                    raise trio.ClosedResourceError("socket was already closed")
                await cancel_shielded_checkpoint()
                return
            try:
                sent = sock.send(data)
            except BlockingIOError:
                sent = 0
            except OSError as exc:
                await cancel_shielded_checkpoint()
                raise _stream_error(exc)  # noqa: B904 (the cause is set there)
            if sent >= length:
                await cancel_shielded_checkpoint()
                return
            # The kernel's buffer is full: wait for room, each wait a schedule point.
            try:
                with memoryview(data) as view:
                    while sent < length:
                        await wait_writable(sock)
                        try:
                            with view[sent:] as rest:
                                moved = sock.send(rest)
                        except BlockingIOError:
                            continue
                        sent += moved
                        if moved and sent < length and self.on_progress is not None:
                            self.on_progress()
            except OSError as exc:
                raise _stream_error(exc)  # noqa: B904 (the cause is set there)
        finally:
            self._sending = False

    def send_now(self, data: bytes) -> int:
        """Hand the kernel as much of ``data`` as it takes at once; return how much: ``0``
        when its buffer is full, or when the stream is sending, shut or closed (nothing is
        raised, as nothing could be done about it). Not a checkpoint: for a closing
        connection's last bytes, written where no task may wait (``http2/writer.py``)."""
        sock = self._sock
        if self._sending or self._eof_sent or sock.fileno() == -1:
            return 0
        try:
            return sock.send(data)
        except OSError:  # BlockingIOError (a full buffer) included
            return 0

    async def wait_send_all_might_not_block(self) -> None:
        """Return when the socket has room to send (always a checkpoint)."""
        if self._sending:
            raise trio.BusyResourceError("another task is currently sending on this stream")
        if self._sock.fileno() == -1:
            raise trio.ClosedResourceError("socket was already closed")
        self._sending = True
        try:
            await wait_writable(self._sock)
        except OSError as exc:
            raise _stream_error(exc)  # noqa: B904 (the cause is set there)
        finally:
            self._sending = False

    async def send_eof(self) -> None:
        """Shut down the sending side (idempotent); receiving keeps working."""
        if self._sending:
            raise trio.BusyResourceError("another task is currently sending on this stream")
        self._sending = True
        try:
            await checkpoint()
            if self._eof_sent:
                return
            try:
                self._sock.shutdown(_stdlib_socket.SHUT_WR)
            except OSError as exc:
                raise _stream_error(exc)  # noqa: B904 (the cause is set there)
            self._eof_sent = True
        finally:
            self._sending = False

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """At most ``max_bytes`` bytes, at least one; ``b""`` at EOF.

        Without ``max_bytes``, 64 KiB at first, and twice as much (up to 256 KiB) after each
        read that filled what it asked for: a large body then arrives in fewer, larger reads
        (each a round through the reader and the body's consumer), while a stream of small
        messages keeps reading 64 KiB. (trio's ``SSLStream`` reads its transport without a
        size: TLS gets the same.) 1 MiB reads were slower again: a 50 MB download over
        HTTP/1.1 ran at 0.59x curl's speed with them, 0.99x with 256 KiB."""
        if max_bytes is None:
            max_bytes = self._receive_size
            grow = max_bytes < MAX_RECEIVE_SIZE
        elif max_bytes < 1:
            raise ValueError("max_bytes must be >= 1")
        else:
            grow = False
        if self._receiving:
            raise trio.BusyResourceError("another task is currently receiving on this stream")
        self._receiving = True
        try:
            await checkpoint_if_cancelled()
            sock = self._sock
            try:
                data = sock.recv(max_bytes)
            except BlockingIOError:
                pass
            except OSError as exc:
                await cancel_shielded_checkpoint()
                raise _stream_error(exc)  # noqa: B904 (the cause is set there)
            else:
                await cancel_shielded_checkpoint()
                if grow and len(data) == max_bytes:
                    self._receive_size = max_bytes * 2
                return data
            try:
                while True:
                    await wait_readable(sock)
                    try:
                        data = sock.recv(max_bytes)
                    except BlockingIOError:
                        continue
                    if grow and len(data) == max_bytes:
                        self._receive_size = max_bytes * 2
                    return data
            except OSError as exc:
                raise _stream_error(exc)  # noqa: B904 (the cause is set there)
        finally:
            self._receiving = False

    async def aclose(self) -> None:
        """Close the socket at once (no lingering); blocked operations get
        :exc:`trio.ClosedResourceError`. Idempotent; always a checkpoint."""
        self.socket.close()
        await checkpoint()


def raw_stream_of(stream: trio.abc.SendStream) -> RawSocketStream | None:
    """The :class:`RawSocketStream` under ``stream`` (itself, or under its TLS layers:
    ``trio.SSLStream.transport_stream``), or ``None`` (a test's memory stream, a virtual
    socket)."""
    for _ in range(4):  # TLS to the origin, inside TLS to a proxy: two layers at most
        if isinstance(stream, RawSocketStream):
            return stream
        inner = getattr(stream, "transport_stream", None)
        if not isinstance(inner, trio.abc.SendStream):
            return None
        stream = inner
    return None
