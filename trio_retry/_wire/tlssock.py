"""TLS on the connection's own socket: OpenSSL reads and writes it, no memory buffers between.

``trio.SSLStream`` drives an ``ssl.SSLObject`` over two ``ssl.MemoryBIO`` buffers: every record
is copied from the socket into one, decrypted out of it, encrypted into the other and copied
from there to the socket, each step a Python call and each socket operation a round through
Trio's stream layers. :class:`TLSSocketStream` gives OpenSSL the socket itself (a non-blocking
socket BIO, what ``ssl.SSLSocket`` uses): a read is one call that decrypts straight from the
kernel, a write one call that encrypts straight into it. A small request over TLS then
executes 38 % fewer instructions (a prototype, issue #42; docs/benchmarks.md has today's
figures).

What it keeps of ``trio.SSLStream(..., https_compatible=True)`` (``tests/wire/test_tlssock.py``
plays each against both, on real sockets):

- the same bytes, whatever the records' sizes and however the kernel splits them;
- the same ends: a peer's close_notify is ``b""``, and so is a TCP end without one, between
  records or inside one (``suppress_ragged_eofs``: HTTP's own framing tells a cut body from a
  whole one), after which the stream is broken; a reset is ``trio.BrokenResourceError`` whose
  ``__cause__`` is the ``OSError``; a TLS error (an alert, a forged record, a failed
  handshake, the certificate) is ``trio.BrokenResourceError`` whose ``__cause__`` is the
  ``ssl.SSLError``; using a stream closed here or whose socket was closed under it is
  ``trio.ClosedResourceError``; a second task sending (or receiving) at once is
  ``trio.BusyResourceError``;
- the same TLS: the caller's ``ssl.SSLContext`` is used as it is (verification, host name
  check, SNI, ALPN, client certificates, versions, ciphers, renegotiation as the context
  allows it), through the same OpenSSL calls trio makes, on another kind of BIO;
- ``aclose()`` closes the socket without a close_notify, as ``https_compatible=True`` does;
- every method is a checkpoint, as with trio's streams.

Cancellation. A cancelled ``receive_some`` consumed nothing the next one will not return
(OpenSSL keeps a partly received record). A cancelled ``send_all`` may have sent some, all or
none of its bytes, and OpenSSL may hold a record it started to write: the stream is broken from
then on (``trio.BrokenResourceError``), as ``trio.SSLStream`` is after a cancelled send. A
cancelled ``do_handshake`` breaks it too. The connection code discards a connection after any
exception during an exchange, so neither is ever reused.

A read that needs to write (a renegotiation, a TLS 1.3 KeyUpdate asking for ours) or a write
that needs to read waits for the socket in the other direction; when the connection's other
task already waits there (HTTP/2 has a reader and a writer), it waits for that one to wake and
tries again, since Trio allows one waiter per direction and socket. OpenSSL keeps one unfinished
record per connection: a handshake message it had to write while a record of ours waits for
room could only follow that record. A renegotiation asked for during an upload is answered at
the next read, after it, on either stream (``tests/wire/test_tlssock_context.py``); HTTP/2
forbids renegotiation; a TLS 1.3 KeyUpdate request read by HTTP/2's reader while its writer
waits is the one case no test here can stage (Python's ``ssl`` cannot send one), and where a
difference would show (``TRIO_RETRY_TLS_FAST_PATH=0``, ``tlschoice.py``, is the way back).

The write-progress reports of the socket (``RawSocketStream.on_progress``, which the write
bounds count from) keep working: each 16 KiB piece of a ``send_all`` that had to wait reports
through the socket stream's hook, since the bytes leave through its socket.

A ``send_all`` of more than a record corks the socket (``TCP_CORK``, where the platform has it)
until it returns, however it returns: OpenSSL writes each record with a system call of its own,
and the records then leave in full segments, as ``trio.SSLStream``'s one write of them all does
(:meth:`TLSSocketStream._send_pieces` says why that matters).

When it is used, and when ``trio.SSLStream`` is: ``tlschoice.py``. It reaches the TLS object
through the ``ssl`` module's private ``SSLContext._wrap_socket`` (what ``SSLContext.wrap_socket``
calls), so that the socket stays the one Trio polls and closes: ``wrap_socket`` would move the
file descriptor into an ``ssl.SSLSocket`` of its own, and a second owner of the descriptor would
close it again after Trio did (possibly another connection's by then). :data:`AVAILABLE` is the
probe.
"""

from __future__ import annotations

import enum
import select
import socket
import ssl
from collections.abc import Callable
from typing import Any

import trio
from trio.lowlevel import (
    cancel_shielded_checkpoint,
    checkpoint,
    checkpoint_if_cancelled,
    wait_readable,
    wait_writable,
)

from .rawsock import DEFAULT_RECEIVE_SIZE, MAX_RECEIVE_SIZE, RawSocketStream, _stream_error
from .tlserrors import closed_error, is_eof, is_reset, reset_error, tls_error

__all__ = ["AVAILABLE", "OPENSSL_3", "PIECE", "TLSSocketStream"]

#: The ``ssl`` module's private names this relies on (see the module's docstring).
AVAILABLE = all(
    callable(getattr(ssl.SSLContext, name, None)) for name in ("_wrap_socket", "_encode_hostname")
)
#: OpenSSL 3 names a true end (``tlserrors.is_reset``); 1.1.1 reports it as it reports a reset.
OPENSSL_3 = ssl.OPENSSL_VERSION_INFO >= (3,)

#: The most one write hands OpenSSL: a record's worth, so that a write that waits reports its
#: progress per record (and OpenSSL's retry rule, "the same data again", covers 16 KiB).
PIECE = 16384
#: Outside HTTP/2, a read looks for more records after a record of at least this many bytes
#: (a ``poll``): a server answering one request at a time sends a small response in one
#: record, after which nothing is there; a large one in full records, which are joined.
LOOK_AFTER = 8192
#: ``TCP_CORK`` where the platform has it (Linux): held during a write of more than a record,
#: so that the records leave in full segments (see :meth:`TLSSocketStream._send_pieces`).
_CORK: int | None = getattr(socket, "TCP_CORK", None)
_INET = frozenset({socket.AF_INET, socket.AF_INET6})


class _SharedWait:
    """One waiter per direction and socket (Trio's rule): the first task waits on the socket,
    a second one waits for the first to wake and then tries its call again."""

    __slots__ = ("_wait", "_waiting", "_wake")

    def __init__(self, wait: Callable[[Any], Any]) -> None:
        self._wait = wait  # (trio's wait_readable or wait_writable)
        self._waiting = False
        self._wake: trio.Event | None = None

    async def on(self, sock: Any) -> None:
        """Wait until ``sock`` is ready this way, or until the task already waiting wakes.
        A close of the socket raises ``trio.ClosedResourceError`` (``notify_closing``)."""
        if self._waiting:
            wake = self._wake
            if wake is None:
                wake = self._wake = trio.Event()
            await wake.wait()
            return
        self._waiting = True
        try:
            await self._wait(sock)
        finally:
            self._waiting = False
            wake = self._wake
            if wake is not None:
                self._wake = None
                wake.set()


class _State(enum.Enum):
    """``OK -> BROKEN`` (a TLS or socket error, a ragged end, a cancelled send or handshake),
    ``OK | BROKEN -> CLOSED`` (``aclose``). ``CLOSED`` is final."""

    OK = "ok"
    BROKEN = "broken"
    CLOSED = "closed"


_OK = _State.OK
_BROKEN = _State.BROKEN
_CLOSED = _State.CLOSED
_WANT_READ = ssl.SSLWantReadError
_WANT_WRITE = ssl.SSLWantWriteError
_WANT = (ssl.SSLWantReadError, ssl.SSLWantWriteError)


class TLSSocketStream(trio.abc.Stream):
    """TLS (client side) over the socket of a connected :class:`~.rawsock.RawSocketStream`,
    OpenSSL doing the socket I/O. See the module's docstring for its guarantees."""

    __slots__ = (
        "_cork",
        "_decrypt",
        "_encrypt",
        "_end",
        "_handshaken",
        "_look_after",
        "_notified",
        "_pending",
        "_poll",
        "_readable",
        "_ready",
        "_receive_size",
        "_receiving",
        "_sending",
        "_sock",
        "_state",
        "_writable",
        "ssl_object",
        "transport_stream",
    )

    def __init__(
        self,
        transport: RawSocketStream,
        context: ssl.SSLContext,
        server_hostname: str | None,
        *,
        session: ssl.SSLSession | None = None,
    ) -> None:
        """``transport`` must be connected; it stays the socket's owner (closing it, or its
        Trio socket, closes this stream's connection). ``session`` resumes an earlier one."""
        if not AVAILABLE:
            raise RuntimeError("this Python's ssl module lacks SSLContext._wrap_socket")
        self.transport_stream = transport
        sock = self._sock = transport.raw_socket
        # An ssl.SSLObject over the socket, made as SSLContext.wrap_bio makes one over memory
        # buffers (SSLObject._create): the object the context's callbacks see as the owner.
        obj: Any = ssl.SSLObject.__new__(ssl.SSLObject)
        wrap: Callable[..., Any] = context._wrap_socket  # type: ignore[attr-defined]
        encode: Callable[[str | None], str | None] = context._encode_hostname  # type: ignore[attr-defined]
        tls = obj._sslobj = wrap(
            sock, False, server_hostname=encode(server_hostname), owner=obj, session=session
        )
        # The TLS object's own calls, without SSLObject's Python layer around each (a frame
        # per read and write).
        self._decrypt: Callable[[int], bytes] = tls.read
        self._encrypt: Callable[[bytes | memoryview], int] = tls.write
        self._pending: Callable[[], int] = tls.pending
        #: Whether the socket has bytes (``poll``): asked before a read that would otherwise
        #: fail with ``SSLWantReadError`` (about twice a failed ``recv``'s cost: the
        #: exception's attributes and message are built each time).
        self._poll = select.poll()
        self._poll.register(sock, select.POLLIN)
        #: The TLS object (``ssl.SSLObject``'s interface: ``version()``, ``cipher()``,
        #: ``getpeercert()``, ``session``, ``session_reused``...).
        self.ssl_object: ssl.SSLObject = obj
        self._state = _OK
        self._handshaken = False
        self._sending = False
        self._receiving = False
        #: What the next ``receive_some`` reports without reading: an end or an error met
        #: after the bytes the previous one returned (OpenSSL reports either once).
        self._end: BaseException | bytes | None = None
        #: The peer's close_notify was read: every read from then on is ``b""`` at once,
        #: whether or not the socket has bytes (the peer may keep TCP open).
        self._notified = False
        self._receive_size = DEFAULT_RECEIVE_SIZE
        #: The previous read found bytes without waiting and nothing was sent since (outside
        #: HTTP/2): the next read reads at once (a read that finds nothing costs an exception,
        #: about five times a ``poll``); else it asks the socket first (``poll``). A send
        #: clears it (:meth:`send_all`): the answer to what was just sent is, as a rule, not
        #: there yet when its read comes.
        self._ready = False
        #: A read looks for more records after one of at least this many bytes: any (``0``)
        #: over HTTP/2, :data:`LOOK_AFTER` otherwise (set by the handshake, from ALPN).
        self._look_after = LOOK_AFTER
        #: ``TCP_CORK`` for this socket (a TCP one), or ``None`` (none here, or it was refused).
        self._cork = _CORK if sock.family in _INET else None
        # One waiter per direction and socket (Trio's rule): a second task of ours that
        # needs the same direction waits for the first to wake (``_wait``).
        self._readable = _SharedWait(wait_readable)
        self._writable = _SharedWait(wait_writable)

    # --- what trio.SSLStream forwards ---------------------------------------------------------

    def selected_alpn_protocol(self) -> str | None:
        """The protocol the server picked by ALPN, or ``None``."""
        return self.ssl_object.selected_alpn_protocol()

    # --- waiting ------------------------------------------------------------------------------

    async def _wait(self, want: type[ssl.SSLError]) -> None:
        """Wait until the socket is readable (``want`` is ``SSLWantReadError``) or writable;
        if another of this stream's tasks waits for that already, wait for it to wake
        instead (the caller then tries its call again). A close of the socket raises
        ``trio.ClosedResourceError`` (Trio's ``notify_closing``)."""
        shared = self._readable if want is _WANT_READ else self._writable
        await shared.on(self._sock)

    def _check(self) -> None:
        state = self._state
        if state is _OK:
            return
        if state is _BROKEN:
            raise trio.BrokenResourceError("this TLS stream is broken")
        raise trio.ClosedResourceError("this TLS stream was closed")

    # --- the handshake ------------------------------------------------------------------------

    async def do_handshake(self) -> None:
        """Make the TLS handshake (once; later calls only checkpoint). A failure raises
        ``trio.BrokenResourceError`` from the ``ssl.SSLError`` (a certificate's is an
        ``ssl.SSLCertVerificationError``) or the ``OSError``; any exception, a cancellation
        included, leaves the stream broken."""
        self._check()
        if self._handshaken:
            await checkpoint()
            return
        if self._sending or self._receiving:
            raise trio.BusyResourceError("another task is using this TLS stream")
        self._sending = self._receiving = True
        waited = False
        try:
            await checkpoint_if_cancelled()
            handshake = self.ssl_object.do_handshake
            sock = self._sock
            while True:
                if sock.fileno() == -1:
                    raise closed_error()
                try:
                    handshake()
                    break
                except _WANT as want:
                    await self._wait(type(want))
                    waited = True
        except ssl.SSLError as exc:
            self._state = _BROKEN
            raise tls_error(exc) from exc
        except OSError as exc:
            self._state = _BROKEN
            raise _stream_error(exc) from exc
        except BaseException:
            self._state = _BROKEN
            raise
        finally:
            self._sending = self._receiving = False
        self._handshaken = True
        if self.ssl_object.selected_alpn_protocol() == "h2":
            self._look_after = 0
        if not waited:
            await cancel_shielded_checkpoint()

    # --- sending ------------------------------------------------------------------------------

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Encrypt and send all of ``data`` (see the module's docstring for what a
        cancellation or a failure leaves: the stream broken)."""
        if self._sending:
            raise trio.BusyResourceError("another task is currently sending on this stream")
        if self._state is not _OK:
            self._check()
        if not self._handshaken:
            await self.do_handshake()
        self._sending = True
        started = False
        try:
            await checkpoint_if_cancelled()
            if type(data) is not bytes:
                data = memoryview(data).cast("B")
            length = len(data)
            if not length:  # (SSL_write of nothing is refused; trio sends nothing either)
                if self._sock.fileno() == -1:
                    raise closed_error()
                await cancel_shielded_checkpoint()
                return
            started = True
            if self._look_after:  # (not over HTTP/2: its reads answer no one send)
                self._ready = False  # what answers this is not there yet, as a rule
            if length <= PIECE:
                if self._sock.fileno() == -1:
                    raise closed_error()
                try:  # (the common case, a record the socket has room for: no coroutine)
                    self._encrypt(data)
                    waited = False
                except _WANT as want:
                    await self._wait(type(want))
                    await self._write(data)
                    waited = True
            else:
                waited = await self._send_pieces(data, length)
        except ssl.SSLError as exc:
            self._state = _BROKEN
            raise tls_error(exc) from exc
        except OSError as exc:
            self._state = _BROKEN
            raise _stream_error(exc) from exc
        except BaseException:
            if started:  # OpenSSL may hold part of a record: no later write may follow
                self._state = _BROKEN
            raise
        finally:
            self._sending = False
        if not waited:
            await cancel_shielded_checkpoint()

    async def _write(self, piece: bytes | memoryview) -> bool:
        """Hand OpenSSL ``piece`` (at most a record) until it took it; whether it waited. A
        write that could not finish is retried with the same bytes, as OpenSSL requires."""
        write = self._encrypt
        sock = self._sock
        waited = False
        while True:
            if sock.fileno() == -1:
                raise closed_error()
            try:
                write(piece)
                return waited
            except _WANT as want:
                await self._wait(type(want))
                waited = True

    async def _send_pieces(self, data: bytes | memoryview, length: int) -> bool:
        """``data``, longer than a record, a record at a time; whether it waited. Once a
        piece had to wait, each piece written is reported as progress through the socket
        stream's hook (``RawSocketStream.on_progress``: the bytes leave by its socket).

        The socket is corked meanwhile (``TCP_CORK``) and uncorked on the way out, whatever
        the way (the last partial segment leaves then): OpenSSL writes each record with a
        system call of its own, and with ``TCP_NODELAY`` each would leave as a segment of its
        own, 16 KiB on loopback where ``trio.SSLStream``'s one write of many records leaves in
        64 KiB ones. A peer then wakes per record (nginx reads one, finds no more, sleeps),
        and over HTTP/2 answers with more WINDOW_UPDATE frames: a 50 MB upload to nginx made
        2.3 times the client's and 4.5 times nginx's context switches, each a wait for a CPU
        on a busy machine (the upload stall of docs/benchmarks.md, "TLS on the socket")."""
        corked = self._set_cork(1)
        try:
            return await self._pieces(data, length)
        finally:
            if corked:
                self._set_cork(0)

    def _set_cork(self, value: int) -> bool:
        """Set ``TCP_CORK`` to ``value``; whether it was set. A socket that refuses it (or is
        closed) is left as it is, and a refusal turns corking off for this stream."""
        cork = self._cork
        sock = self._sock
        if cork is None or sock.fileno() == -1:
            return False
        try:
            sock.setsockopt(socket.IPPROTO_TCP, cork, value)
        except OSError:
            self._cork = None
            return False
        return True

    async def _pieces(self, data: bytes | memoryview, length: int) -> bool:
        """:meth:`_send_pieces`' loop: a record's worth at a time, progress reported."""
        transport = self.transport_stream
        waited = False
        sent = 0
        with memoryview(data) as view:
            while sent < length:
                end = min(sent + PIECE, length)
                with view[sent:end] as piece:
                    if await self._write(piece):
                        waited = True
                sent = end
                if waited and sent < length:
                    report = transport.on_progress
                    if report is not None:
                        report()
        return waited

    async def wait_send_all_might_not_block(self) -> None:
        """Return when the socket has room to send (always a checkpoint)."""
        if self._sending:
            raise trio.BusyResourceError("another task is currently sending on this stream")
        self._check()
        if self._sock.fileno() == -1:
            raise closed_error()
        self._sending = True
        try:
            await self._wait(_WANT_WRITE)
        finally:
            self._sending = False

    # --- receiving ----------------------------------------------------------------------------

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        """At least one decrypted byte, at most ``max_bytes``; ``b""`` at the peer's
        close_notify or at a TCP end without one (then the stream is broken). Without
        ``max_bytes``, 64 KiB at first and twice as much (up to 256 KiB) after each read
        that filled it, as :class:`~.rawsock.RawSocketStream`."""
        if max_bytes is None:
            size = self._receive_size
            grow = size < MAX_RECEIVE_SIZE
        elif max_bytes < 1:
            raise ValueError("max_bytes must be >= 1")
        else:
            size = max_bytes
            grow = False
        if self._receiving:
            raise trio.BusyResourceError("another task is currently receiving on this stream")
        end = self._end
        if end is not None:  # met after the previous read's bytes (the state says what then)
            self._end = None
            await checkpoint()
            if isinstance(end, BaseException):
                raise end
            return b""
        if self._state is not _OK:
            self._check()
        if not self._handshaken:
            await self.do_handshake()
        self._receiving = True
        waited = False
        try:
            await checkpoint_if_cancelled()
            read = self._decrypt
            sock = self._sock
            # (A socket closed under us makes ``poll`` report it: the loop's check says so.)
            if self._ready or self._notified or self._pending() or self._poll.poll(0):
                self._ready = True
            else:
                if sock.fileno() == -1:
                    raise closed_error()
                await self._wait(_WANT_READ)  # nothing received yet: no read to fail first
                waited = True
            while True:
                if sock.fileno() == -1:
                    raise closed_error()
                try:
                    data = read(size)
                    break
                except _WANT as want:
                    self._ready = False
                    await self._wait(type(want))
                    waited = True
            got = len(data)
            if not got:
                self._notified = True  # close_notify
            elif got < size and got >= self._look_after and self._poll.poll(0):
                data = self._more(data, size)
                got = len(data)
            if grow and got >= size:
                self._receive_size = size * 2
        except ssl.SSLError as exc:
            if not is_eof(exc):
                self._state = _BROKEN
                raise tls_error(exc) from exc
            if is_reset(exc):  # (the state stays: the next read finds the end, as trio's)
                raise reset_error()  # noqa: B904 (its cause is the reset)
            self._state = _BROKEN
            if not waited:
                await cancel_shielded_checkpoint()
            return b""
        except OSError as exc:  # (a Python that reports the reset itself)
            raise _stream_error(exc) from exc
        finally:
            self._receiving = False
        if not waited:
            await cancel_shielded_checkpoint()
        return data

    def _more(self, data: bytes, size: int) -> bytes:
        """``data`` and the records that can be read now without waiting, up to ``size``
        bytes in all, while the socket has bytes (OpenSSL reads a record at a time: with 32
        HTTP/2 streams nginx writes each response in a record of its own, and a read per
        record would be a round through the reader per response). An end or an error met
        here is kept for the next read (``_end``)."""
        read = self._decrypt
        sock = self._sock
        poll = self._poll.poll
        parts = [data]
        got = len(data)
        while got < size and sock.fileno() != -1:
            try:
                more = read(size - got)
            except _WANT:
                break
            except ssl.SSLError as exc:
                if not is_eof(exc):
                    self._end = tls_error(exc)
                    self._state = _BROKEN
                elif is_reset(exc):
                    self._end = reset_error()
                else:
                    self._end = b""
                    self._state = _BROKEN
                break
            except OSError as exc:
                self._end = _stream_error(exc)
                break
            if not more:  # close_notify: the next read returns b"" again
                self._notified = True
                break
            parts.append(more)
            got += len(more)
            if not self._pending() and not poll(0):
                break  # nothing more received: no read to fail
        return data if len(parts) == 1 else b"".join(parts)

    # --- closing ------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the socket at once, without a close_notify (``https_compatible=True``'s
        close); operations waiting in other tasks get ``trio.ClosedResourceError``.
        Idempotent; always a checkpoint."""
        self._state = _CLOSED
        await self.transport_stream.aclose()
