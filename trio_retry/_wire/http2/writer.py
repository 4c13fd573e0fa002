"""The one task that writes to an HTTP/2 connection's socket.

Everything that sends — a stream's HEADERS and DATA, the reader's WINDOW_UPDATE, SETTINGS and
PING acknowledgements, a RST_STREAM — only asks h2 to queue frames and then asks the writer to
flush (:meth:`Writer.collect` returns the *mark*: how many bytes will have been written once
those frames are out). The writer task, in the client's nursery, takes what h2 queued and
writes it, at most :data:`WRITE_CHUNK` per ``send_all``, so frames leave whole and in order.

Why one writer rather than each caller writing its own frames: a caller's deadline (or its
cancel scope) must cancel only *its* wait (:meth:`Writer.wait_written`), never a ``send_all``
in the middle of a frame (a cut frame corrupts the connection for every stream; a cancelled TLS
write breaks the TLS stream). So no write is shielded and no write runs in a caller's scope:
a call whose deadline fires leaves at once, its frames still queued, and its stream is reset
behind them.

A peer that stops reading stalls the writer, not the callers. When one ``send_all`` makes no
progress for ``stall_timeout`` seconds (the socket stream reports each time the kernel took
more of a write that had to wait: ``RawSocketStream.on_progress``), the writer gives the
connection up (``on_broken``): every stream fails with the evidence of the stage it reached,
and a stream none of whose bytes had been handed to the transport (:attr:`Writer.handed`) is
proven ``NOT_SENT``.

Waking costs no allocation: the writer and the callers park in two :class:`trio.lowlevel.
ParkingLot` objects made once per connection (no ``trio.Event`` per wake), and a lot nobody
waits in is not touched.

A caller whose request is queued whole need not wait at all (:meth:`Writer.notify`): it goes
on to wait for its response, and the writer itself reports to the stream (``on_written``) once
the bytes are written, so a request costs its task one wake (the response), not two.

**The last words** (:meth:`Writer.finish`). A connection the client ends says so with a GOAWAY
(RFC 9113 §5.4.1, §6.8), written after the frames the server is still owed — a PING's ACK, a
SETTINGS ACK, a RST_STREAM — and before the socket closes. Callers see the connection broken at
once; the writer task (or, during the handshake, :meth:`Writer.farewell` in the caller) writes
those last frames within ``FIXED.closing`` seconds (``clock.closing``), shielded from the
nursery's cancellation at the client's exit, then closes the socket. What is *not* written: a
request's frames that were queued but never handed to the transport (the session has just
declared those streams ``NOT_SENT``: sending them now would make that a lie), which is why the
queue knows which of its bytes are requests' (:meth:`Writer.collect` ``request=True``). What is
written even so: the rest of a request's frames whose first bytes already left, since a frame cut
short would turn the GOAWAY after it into garbage. After a write that was itself cut (cancelled
or failed) nothing more is written.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import Protocol

import trio

from ..._core.evidence import FailureCategory
from ..clock import FIXED, Bound, StallBound, closing
from ..exchange import TRANSPORT_ERRORS
from ..progress import AttemptProgress
from ..rawsock import raw_stream_of
from .fast import FastMachine

__all__ = ["WRITE_CHUNK", "Written", "Writer", "WriterBroken"]

#: The most one ``send_all`` writes. Why 256 KiB, not 64: each ``send_all`` through
#: ``trio.SSLStream`` is a few scheduler passes; a 50 MB upload took 0.14 s of CPU in 64 KiB
#: writes and 0.09 s in 256 KiB ones (docs/benchmarks.md, "Bulk transfers"). The stall bound is
#: not measured in writes but from the last progress (:meth:`Writer._renew`).
WRITE_CHUNK = 256 * 1024
#: The same over a stream that does not report its progress (a ``transport=`` of the caller's,
#: a test's memory stream): there the stall bound counts from each write's start.
WRITE_CHUNK_UNREPORTED = 64 * 1024
#: A piece this much larger than the room left in a write goes whole rather than cut: a large
#: DATA payload is not cut from its frame head, leaving a few bytes for a write of their own.
CUT_SLACK = 1024
#: At most this many scheduler passes the writer lets go by, while frames of several callers
#: keep arriving, before it writes them (see :meth:`Writer._write`).
GATHER_PASSES = 3


class WriterBroken(Exception):
    """The connection can no longer write; the connection's own failure says why."""


class Written(Protocol):
    """What :meth:`Writer.notify` reports to."""

    def on_written(self, sent: int) -> None:
        """``sent`` bytes queued for it were written (called by the writer task)."""


class Writer:
    """Owns the socket's send side; see the module docstring."""

    __slots__ = (
        "_bounds",
        "_chunk",
        "_close",
        "_collects",
        "_cut",
        "_exited",
        "_farewell_by",
        "_h2",
        "_on_broken",
        "_outbox",
        "_outbox_size",
        "_own_socket",
        "_pending",
        "_requests",
        "_stall",
        "_stream",
        "_wake_callers",
        "_wake_writer",
        "broken",
        "handed",
        "queued",
        "stall_timeout",
        "written",
    )

    def __init__(
        self,
        stream: trio.abc.SendStream,
        conn: FastMachine,
        on_broken: Callable[[FailureCategory, str], None],
        *,
        stall_timeout: float = FIXED.http2_stall,
    ) -> None:
        self._stream = stream
        self._h2 = conn
        self._on_broken = on_broken
        #: What h2 queued, not yet handed to the transport: pieces (``FastMachine.take_output``:
        #: a large DATA payload as the caller gave it), joined once per write.
        self._outbox: deque[bytes | memoryview] = deque()
        self._outbox_size = 0
        #: (mark, bytes, whom to tell) for callers that did not wait (:meth:`notify`).
        self._pending: deque[tuple[int, int, Written]] = deque()
        self._wake_writer = trio.lowlevel.ParkingLot()
        self._wake_callers = trio.lowlevel.ParkingLot()
        self.stall_timeout = stall_timeout
        #: Bytes taken from h2 so far / handed to ``send_all`` so far / written so far.
        self.queued = 0
        self.handed = 0
        self.written = 0
        self.broken = False
        #: Collections that queued bytes since the last write (:meth:`_write` gathers).
        self._collects = 0
        #: The write bounds of the callers in :meth:`wait_written`, renewed on progress.
        self._bounds: set[Bound] = set()
        #: The bound on each write (``clock.StallBound``; armed while a write is under way).
        self._stall = StallBound(stall_timeout)
        #: (start, end) of each batch of a request's frames (``collect(request=True)``), in
        #: :attr:`queued` offsets, until written: what :meth:`finish` must not send.
        self._requests: deque[tuple[int, int]] = deque()
        #: What :meth:`finish` will call once the last frames are written (the socket's close).
        self._close: Callable[[], None] | None = None
        #: A write was cut (cancelled or failed): nothing after it can be sent.
        self._cut = False
        #: When the last frames are given up on (set by :meth:`finish`).
        self._farewell_by = math.inf
        #: The writer task ran and ended: nobody is left to write last words.
        self._exited = False
        raw = raw_stream_of(stream)
        if raw is not None:
            raw.on_progress = self._renew
        #: The socket stream itself, when the writer writes to it directly (cleartext): last
        #: words can then be handed to the kernel at once (:meth:`finish`).
        self._own_socket = raw if raw is stream else None
        #: The most one write takes (:data:`WRITE_CHUNK`, or less where progress is unseen).
        self._chunk = WRITE_CHUNK if raw is not None else WRITE_CHUNK_UNREPORTED

    def _renew(self) -> None:
        """The transport handed more of the current write to a peer that reads: the stall
        bound, and the write bound of every caller waiting, count again from now."""
        self._stall.renew()
        for bound in self._bounds:
            bound.renew()

    def collect(self, request: bool = False) -> int:
        """Take what h2 queued (in order) and wake the writer; returns the mark at which all
        of it will have been written. ``request``: these are a request's frames (HEADERS,
        DATA), which :meth:`finish` drops if none of their bytes left yet; every other
        collection (acknowledgements, WINDOW_UPDATE, RST_STREAM, PING, GOAWAY) is the
        connection's own and is written even by a closing connection."""
        if self.broken:
            self._h2.take_output(deque())  # the connection is over: nothing more is sent
            return self.queued
        outbox = self._outbox
        size = self._h2.take_output(outbox)
        if size:
            if request:
                self._requests.append((self.queued, self.queued + size))
            self._outbox_size += size
            self.queued += size
            self._collects += 1
            if self._wake_writer:
                self._wake_writer.unpark_all()
        return self.queued

    def notify(self, mark: int, sent: int, whom: Written) -> None:
        """Instead of :meth:`wait_written`: call ``whom.on_written(sent)`` from the writer
        task once ``mark`` bytes were written (never, if the connection breaks first)."""
        if self.written >= mark:
            whom.on_written(sent)
        else:
            self._pending.append((mark, sent, whom))

    async def wait_written(
        self, mark: int, progress: AttemptProgress | None = None, bound: Bound | None = None
    ) -> None:
        """Wait until ``mark`` bytes were written, or until a bound of ``progress``'s attempt
        ran out (:meth:`wake_waiters`; the caller sees ``written < mark``). Raises
        :class:`WriterBroken` if the connection failed first. Cancellation cancels this wait
        only: the bytes stay queued and are written (the frames are never cut).

        ``bound``, the caller's write bound around this wait, counts again from each progress
        of the writer (a write completed, or the kernel took more of one): the caller's
        frames may be behind others, or in a large write to a slow reader, and the bound is
        how long the server may read nothing, not how long a batch of frames may take."""
        bounds = self._bounds
        if bound is not None:
            bounds.add(bound)
        try:
            while self.written < mark:
                if self.broken:
                    raise WriterBroken
                if progress is not None and progress.interrupted:
                    return
                await self._wake_callers.park()
        finally:
            if bound is not None:
                bounds.discard(bound)

    def wake_waiters(self) -> None:
        """Wake every :meth:`wait_written` to look again (a bound of an attempt ran out)."""
        self._wake_callers.unpark_all()

    @property
    def can_finish(self) -> bool:
        """Last words (:meth:`finish`) can still be written: nothing broke the connection's
        writes, and the writer task, if it ran, is still there."""
        return not self.broken and not self._exited

    def stop(self) -> None:
        """The connection is over: drop what is queued, release every waiter (and close at
        once a connection :meth:`finish` was still to close)."""
        self.broken = True
        self._outbox.clear()
        self._outbox_size = 0
        self._pending.clear()
        self._wake_callers.unpark_all()
        self._wake_writer.unpark_all()
        close, self._close = self._close, None
        if close is not None:
            close()

    def finish(self, close: Callable[[], None]) -> None:
        """The connection is over, with last words: what h2 queued last (the session's GOAWAY,
        after the reader's acknowledgements) is written after the connection's own frames
        still queued, within ``FIXED.closing`` seconds, and then ``close()`` is called (see the
        module docstring: a request's frames none of whose bytes left are dropped). Callers
        see the connection broken at once, as after :meth:`stop`. The writer task does the
        writing; before it runs (a handshake), :meth:`farewell` does."""
        self.collect()
        handed = self.handed
        data = b"".join(self._outbox)  # queued[handed:queued]
        kept: list[bytes] = []
        start = handed
        for first, end in self._requests:
            if end <= handed:
                continue  # left whole already
            if first >= handed:  # never began to leave: dropped
                kept.append(data[start - handed : first - handed])
                start = end
        kept.append(data[start - handed :])
        self._outbox.clear()
        self._outbox_size = 0
        last = b"".join(kept)
        own = self._own_socket
        if last and own is not None and not self._stall.armed and not self._cut:
            # Nothing is being written (the writer sleeps): a cleartext socket takes its last
            # words now, so the connection is closed now, as a closed connection's socket
            # is (a pool's count of open sockets holds); a TLS stream needs the writer task.
            sent = own.send_now(last)
            self.handed += sent
            self.written += sent
            last = last[sent:]
        if last:
            self._outbox.append(last)
            self._outbox_size = len(last)
        self._requests.clear()
        self.broken = True
        if last:
            self._close = close
        else:
            close()
        self._farewell_by = trio.current_time() + FIXED.closing
        self._stall.close_by(self._farewell_by)  # a write under way: no longer than these
        self._pending.clear()
        self._wake_callers.unpark_all()
        self._wake_writer.unpark_all()

    async def farewell(self) -> None:
        """Write what :meth:`finish` left queued (in ``clock.closing``'s scope, shielded from
        cancellation, until ``FIXED.closing`` seconds after :meth:`finish`), then close;
        nothing if :meth:`finish` was not called, or was already seen to. Never raises but
        ``trio.Cancelled`` from outside (after the close)."""
        close, self._close = self._close, None
        if close is None:
            return
        try:
            if not self._cut:
                # (one bound from finish(), for a write under way then and for these)
                with closing(self._farewell_by):
                    while self._outbox:
                        chunk = self._next_chunk()
                        self.handed += len(chunk)
                        await self._stream.send_all(chunk)
                        self.written += len(chunk)
        except TRANSPORT_ERRORS:
            pass  # the peer is gone: nothing more to say
        finally:
            self._outbox.clear()
            self._outbox_size = 0
            close()

    async def run(self) -> None:
        """The writer task: until :meth:`stop` (or a failed write, reported to ``on_broken``).
        Never raises but ``trio.Cancelled`` (when the client's nursery closes). Once the
        connection is over it writes the last words :meth:`finish` left (:meth:`farewell`).

        The stall bound (``clock.StallBound``) is one cancel scope for many writes, armed
        before each and disarmed before the writer sleeps; it shields each write from the
        nursery's cancellation (the writer is cancelled between writes, never inside one).
        Its Cancelled can only be raised inside a ``send_all`` (a real stall: the connection
        is given up); a limit that passes just after a write completed spends the scope
        without raising, and a fresh one takes over.
        """
        stall = self._stall
        try:
            while not self.broken:
                with stall:
                    stop = await self._write(stall)
                if stall.cut:
                    if not self.broken:
                        # CONNECTION_BROKEN, not TIMEOUT: the connection failed every stream
                        # on it (the attempt whose own write waited reports its write bound's
                        # TIMEOUT).
                        self._on_broken(
                            FailureCategory.CONNECTION_BROKEN,
                            f"the server read nothing for {self.stall_timeout}s while we "
                            "wrote; the connection was given up",
                        )
                    return
                if stop:
                    return
        finally:
            await self.farewell()
            self._exited = True

    async def _write(self, stall: StallBound) -> bool:
        """Write what is queued, in ``stall``, until the connection breaks (``True``) or
        ``stall`` is spent (``False``). No checkpoint runs in a spent scope: it is looked at
        right before each ``send_all`` and each sleep."""
        clock = trio.lowlevel.current_clock()
        outbox = self._outbox
        gathered = 0
        while not self.broken:
            if stall.spent:
                return False
            if not outbox:
                self.collect()
                if not outbox:
                    if stall.disarm():
                        continue  # it may have passed meanwhile: look again first
                    await self._wake_writer.park()
                    continue
            if self._collects > 1 and gathered < GATHER_PASSES and self._outbox_size < self._chunk:
                # Frames of several callers arrived since the last write: others, woken in
                # the same scheduler pass, are likely about to queue theirs. Letting the pass
                # go by first writes them all at once: with 32 streams busy a TLS record and
                # a send per ~15 requests rather than per ~2 (each a good part of a small
                # request's cost). A lone caller (one collect) is written at once.
                gathered += 1
                self._collects = 1
                await trio.lowlevel.cancel_shielded_checkpoint()
                continue
            gathered = 0
            self._collects = 0
            chunk = self._next_chunk()
            self.handed += len(chunk)
            # Only the stall bound may cut a write: the client's closing nursery waits for it
            # (bounded, as the connection it closes gets FIXED.closing), so the frames of a
            # write under way, a PING's ACK say, still leave whole, and the GOAWAY after them.
            stall.arm(clock.current_time())
            try:
                await self._stream.send_all(chunk)
            except TRANSPORT_ERRORS as exc:
                self._cut = True  # some, all or none of it left: nothing can follow it
                if not self.broken:
                    self._on_broken(
                        FailureCategory.CONNECTION_BROKEN,
                        f"connection broke while sending: {exc.__cause__ or exc}",
                    )
                return True
            except BaseException:  # cancelled by the stall bound: as above
                self._cut = True
                raise
            finally:
                stall.written()
            written = self.written = self.written + len(chunk)
            requests = self._requests
            while requests and requests[0][1] <= written:
                requests.popleft()
            # Progress for every caller still waiting, and each woken below: O(waiting callers)
            # per write. They are the requests whose body the windows did not take whole (a
            # small request is queued whole and told through ``notify``, O(1)): uploads.
            for bound in self._bounds:
                bound.renew()
            pending = self._pending
            while pending and pending[0][0] <= written:
                _, sent, whom = pending.popleft()
                whom.on_written(sent)
            if self._wake_callers:
                self._wake_callers.unpark_all()
        return True

    def _next_chunk(self) -> bytes | memoryview:
        """The next write: what is queued, up to ``_chunk`` bytes, in one buffer (a
        lone piece as it is; a piece that does not fit is cut, its rest left first)."""
        outbox = self._outbox
        limit = self._chunk
        if self._outbox_size <= limit:
            chunk = outbox[0] if len(outbox) == 1 else b"".join(outbox)
            outbox.clear()
            self._outbox_size = 0
            return chunk
        parts: list[bytes | memoryview] = []
        size = 0
        while size < limit:
            piece = outbox[0]
            room = limit - size
            if len(piece) <= room + CUT_SLACK:
                parts.append(outbox.popleft())
                size += len(piece)
            else:
                view = piece if type(piece) is memoryview else memoryview(piece)
                parts.append(view[:room])
                outbox[0] = view[room:]
                size = limit
        self._outbox_size -= size
        return b"".join(parts)
