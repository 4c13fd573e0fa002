"""HTTP/1.1 over h11: one connection, one request at a time, every stage observed.

The proof each stage gives (what the client may claim if the attempt breaks there):

- before ``send_all`` of the head: nothing of this request left -> ``NOT_SENT`` is *not* claimed
  here for a reused connection unless :meth:`HTTP11Connection.peer_closed` proved the peer gone
  before writing (the pool checks that; see ``pool.py``);
- from the first ``send_all`` on: a cancelled or failed ``send_all`` may have sent some, all or
  none of its bytes (trio's ``SendStream.send_all`` contract), so ``SENT_NO_RESPONSE``;
- the first response byte moves the stage to ``RESPONSE_HEAD`` (still no response: it may be a
  1xx or garbage); final headers parsed -> ``RESPONSE_BODY`` (a break now is
  ``PARTIAL_RESPONSE``); the end of the body -> ``COMPLETE``.

The connection moves bytes and stages, each way by one path: every request byte through
:meth:`HTTP11Connection._send` (a small request is one buffer, one ``send_all``), every
response byte through :meth:`HTTP11Connection._events`, the one loop over the connection's
:class:`~.http11_reader.ResponseReader`. What the response's bytes mean is the reader's: the
fast parser (``fast11.py``, on unless ``Client(http1_fast_path=False)``) while it has the
exchange, h11 otherwise, the hand-over between them included. The stages, progress, errors
and connection reuse are the same on both parsers.

An exchange's stages follow each other in one order here, so the code below sets each next
stage directly where the previous one is known (``progress.advance`` is a call per stage).

Any exception while a request is on the connection (``trio.Cancelled`` included) leaves the
connection unusable: the parsers' state would no longer match the bytes on the wire. It is
closed, not returned to the pool.
"""

from __future__ import annotations

import enum
import select
from collections.abc import AsyncIterable

import h11
import trio

from .._core.evidence import FailureCategory, Stage
from .clock import NO_LIMITS, Bound, bound
from .exchange import TRANSPORT_ERRORS, WireRequest, WireResponse, closing_body
from .http11_reader import END, NEED, Head, ResponseReader
from .http11_rules import END_OF_MESSAGE, encode, encode_whole, h11_request
from .progress import AttemptProgress, WireError
from .rawsock import raw_stream_of
from .timekeeper import Timekeeper
from .tlsread import reads_of
from .transport import Transport
from .virtual import VirtualSocket

__all__ = ["ConnectionState", "HTTP11Connection"]

#: The most one read takes with the TLS records already received (``tlsread.py``).
MORE_LIMIT = 256 * 1024
#: Request bodies up to this size are written in the same ``send_all`` as the head.
COALESCE_LIMIT = 16384
#: The most one ``send_all`` writes (and the unit ``bytes_sent`` counts in). The write timeout
#: bounds each, counted from its last progress (``Bound.renew``, called by the socket stream),
#: so an upload is cut only when the server read nothing for that long, whatever the link's
#: speed. Why 256 KiB, not 64: each ``send_all`` through ``trio.SSLStream`` is a few scheduler
#: passes; a 50 MB upload over TLS took 0.15 s of CPU in 64 KiB writes, 0.10 s in 256 KiB ones
#: (docs/benchmarks.md, "Bulk transfers").
WRITE_SLICE = 256 * 1024
#: The same over a stream that does not report its progress (a ``transport=`` of the caller's,
#: a test's memory stream): the write bound then counts from each write's start, so it stays
#: small: an upload is cut only when 64 KiB took longer than the limit (about 2 KiB/s at 30 s).
WRITE_SLICE_UNREPORTED = 64 * 1024


class ConnectionState(enum.Enum):
    """Where an :class:`HTTP11Connection` is (as httpcore's ``HTTPConnectionState``).

    The legal moves, and what makes each:

    - ``IDLE -> ACTIVE``: :meth:`~HTTP11Connection.send_request` starts an exchange;
    - ``ACTIVE -> IDLE``: the response ended and the connection may carry the next request
      (keep-alive, nothing buffered past the response: ``ResponseReader.reusable``);
    - ``IDLE -> CLOSED``, ``ACTIVE -> CLOSED``: :meth:`~HTTP11Connection.close` (any
      exception during an exchange, a response that ends the connection, a bound that ran
      out, the pool) or :meth:`~HTTP11Connection.aclose`.

    ``CLOSED`` is final: nothing moves a connection out of it.
    """

    IDLE = "idle"
    ACTIVE = "active"
    CLOSED = "closed"


#: The states and stages as module constants: on Python 3.11 an enum class's attribute goes
#: through ``EnumType.__getattr__``'s hook (about 10x a global's cost), and these are used on
#: every request.
_IDLE = ConnectionState.IDLE
_ACTIVE = ConnectionState.ACTIVE
_CLOSED = ConnectionState.CLOSED
_REQUEST_HEAD = Stage.REQUEST_HEAD
_REQUEST_BODY = Stage.REQUEST_BODY
_AWAITING_RESPONSE = Stage.AWAITING_RESPONSE
_RESPONSE_HEAD = Stage.RESPONSE_HEAD
_RESPONSE_BODY = Stage.RESPONSE_BODY
_COMPLETE = Stage.COMPLETE
_READING = "while reading the response"
#: The ``chunks`` of a head's read (:meth:`HTTP11Connection._events`): nothing is appended to
#: it (the head comes before any body data, and ends that read).
_HEAD_ONLY: list[bytes] = []
#: The head's bound when the call's deadline bounds the head instead (``clock.py``): no limit,
#: so nothing of it is per connection or per request (every connection shares it).
_HEAD_IN_DEADLINE = bound("first_byte", None, limit=None)
#: The read bound a body's read is given before the connection's was made (``_events``).
_UNMADE = bound("read", None, limit=None)


class HTTP11Connection:
    """One HTTP/1.1 connection. Not safe for concurrent requests (the pool guarantees that)."""

    http_version = "HTTP/1.1"
    multiplexed = False

    __slots__ = (
        "_first_byte",
        "_more",
        "_now",
        "_poller",
        "_read",
        "_reader",
        "_slice",
        "_socket",
        "_stream",
        "_timekeeper",
        "_virtual",
        "_write_bound",
        "expires_at",
        "origin_key",
        "requests",
        "state",
    )

    def __init__(
        self,
        transport: Transport,
        origin_key: object,
        max_header_bytes: int,
        *,
        fast_path: bool = True,
        timekeeper: Timekeeper | None = None,
    ) -> None:
        self._stream = transport.stream
        #: Its reads, taking every TLS record already received (``tlsread.py``).
        self._more = reads_of(self._stream, MORE_LIMIT)
        self._socket = transport.socket
        sock = transport.socket  # (VirtualSocket is an ABC: an isinstance is a call, made once)
        self._virtual = sock if isinstance(sock, VirtualSocket) else None
        if timekeeper is None:
            timekeeper = Timekeeper(NO_LIMITS)
        self._timekeeper = timekeeper
        self._now = timekeeper.now  # (the client's: no bound method of the clock's each)
        #: The reader reads every response, and has h11 (made when first needed: the requests
        #: the fast path does not write are written with it, ``ResponseReader.machine``).
        self._reader = ResponseReader(max_header_bytes, fast=fast_path)
        self._poller: select.poll | None = None  # made on the first reuse (peer_closed)
        #: The bounds of this connection's waits (``clock.py``), one per kind: one request at
        #: a time, so each is reused, its ``progress`` set per request. The write and read
        #: bounds are made when a write or a body's read first needs one (:meth:`_writes`,
        #: :meth:`_reads`): a small exchange bounds its write with the head's, and its body
        #: comes with its head; at 10,000 connections at once, each object a connection keeps
        #: is one more for every full pass of the garbage collector to visit (issue #41).
        self._write_bound: Bound | None = None
        self._read: Bound | None = None
        self._slice = (
            WRITE_SLICE if raw_stream_of(self._stream) is not None else WRITE_SLICE_UNREPORTED
        )
        self._first_byte = bound("first_byte", timekeeper, target=self)
        self.origin_key = origin_key
        self.state = _IDLE
        self.expires_at = float("inf")
        self.requests = 0

    # --- pool hooks ------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self.state is _CLOSED

    def is_available(self) -> bool:
        return self.state is _IDLE

    def is_reusable(self) -> bool:
        """True while idle: new, or after a complete request/response cycle that allows
        keep-alive."""
        return self.state is _IDLE

    def peer_closed(self) -> bool:
        """One non-blocking ``poll()``: is anything readable on this idle connection?

        An idle HTTP/1.1 connection must have nothing to read. EOF means the peer closed it; a
        TLS close_notify or stray bytes mean it is about to be, or is confused. Either way the
        connection is not used, and since not one byte of the next request was written, that
        is proof for ``NOT_SENT``.
        """
        if self.state is _CLOSED:
            return True
        virtual = self._virtual
        if virtual is not None:  # an in-memory connection (MockTransport)
            return virtual.readable()
        try:
            poller = self._poller
            if poller is None:
                sock = self._socket
                assert not isinstance(sock, VirtualSocket)
                poller = self._poller = select.poll()
                poller.register(sock.fileno(), select.POLLIN | select.POLLPRI)
            return bool(poller.poll(0))
        except (OSError, ValueError):
            return True

    def stage_expired(self, which: str, progress: AttemptProgress) -> None:
        """A wait's bound ran out (``clock.py``): close now, so the wait ends at once (the
        bound reports it as that wait's timeout)."""
        self.close()

    def attempt_expired(self, progress: AttemptProgress) -> None:
        """The call deadline of the attempt on this connection passed: the attempt holds the
        connection alone, so closing it ends the attempt's wait at once."""
        self.close()

    def close(self) -> None:
        """Close at once, without a TLS close_notify (safe to call twice)."""
        if self.state is not _CLOSED:
            self.state = _CLOSED
            self._socket.close()

    async def aclose(self) -> None:
        """Close, the stream's way (forcefully: a cancelled close still closes)."""
        self.state = _CLOSED
        await trio.aclose_forcefully(self._stream)

    # --- the request ---------------------------------------------------------------------------

    async def send_request(self, request: WireRequest, progress: AttemptProgress) -> WireResponse:
        """Write the request and read up to the final response head (1xx skipped), each write
        within the write bound and the whole head within the first-byte bound (``clock.py``).

        Raises :class:`WireError` classified by the stage reached. On any exception,
        cancellation included, the connection is closed (never reused) and ``progress`` says
        what may have been sent.
        """
        if self.state is _IDLE:  # (a connection closed under the caller stays closed)
            self.state = _ACTIVE
        self.requests += 1
        progress.http_version = self.http_version
        # The head's bound: first_byte's, unless the call's deadline bounds the head.
        if progress.deadline_bounds_head:
            first_byte = _HEAD_IN_DEADLINE  # (no limit: it never reads its progress)
        else:
            first_byte = self._first_byte
            first_byte.progress = progress  # (the write and read bounds: where used)
        try:
            body = request.body
            if isinstance(body, bytes):
                head = self._reader.begin(request)  # the fast path's head, or None: h11's
                if head is None:
                    head, body = encode_whole(self._reader.machine(), request, body, progress)
                if len(body) <= COALESCE_LIMIT:
                    # One send_all (the body leaves with the head), counted in the first-byte
                    # bound, as an HTTP/2 request queued whole is: so few bytes wait for the
                    # socket only behind a server that stopped reading, which that bound ends.
                    # (Without a first-byte limit, the write bound keeps the write.)
                    # (The bound entered and left by hand: a `with` statement's frame would
                    # hold its bound __exit__ method while the head is awaited, one object
                    # more for each of thousands of calls waiting at once, issue #41.)
                    write = None if first_byte.limit is not None else self._writes()
                    first_byte.__enter__()
                    try:
                        if body:
                            await self._send(head + body, progress, _REQUEST_BODY, write)
                        else:
                            await self._send(head, progress, _REQUEST_HEAD, write)
                        progress.stage = _AWAITING_RESPONSE  # (after the request's bytes)
                        got = await self._events(progress, None, _HEAD_ONLY, None)
                    except BaseException as exc:
                        first_byte.__exit__(type(exc), exc, exc.__traceback__)
                        raise
                    first_byte.__exit__(None, None, None)
                else:
                    write = self._writes()
                    await self._send(head, progress, _REQUEST_HEAD, write)
                    await self._send(body, progress, _REQUEST_BODY, write)
                    got = await self._head(progress, first_byte)
            else:
                await self._send_streamed(request, body, progress)
                got = await self._head(progress, first_byte)
            assert got is not None  # (the reader gives the head before anything else)
            status, reason, headers, length, encoded = got
            progress.stage = _RESPONSE_BODY  # (from RESPONSE_HEAD)
            # The version set above, or the one the head gave ("HTTP/1.0": ResponseReader).
            version: str = progress.http_version
            return WireResponse(
                status, reason.decode("latin-1"), headers, version, self, length, encoded
            )
        except BaseException:
            self.close()
            raise

    async def _head(self, progress: AttemptProgress, first_byte: Bound) -> Head:
        """The final response head, after the request's last byte, within the first-byte
        bound ``first_byte``."""
        progress.stage = _AWAITING_RESPONSE  # (after the request's bytes)
        with first_byte:
            got = await self._events(progress, None, _HEAD_ONLY, None)
        assert got is not None  # (the reader gives the head before anything else)
        return got

    async def _send(
        self, data: bytes, progress: AttemptProgress, stage: Stage, bound: Bound | None
    ) -> None:
        """The one path for request bytes: move to ``stage``, then ``send_all`` in slices of at
        most :data:`WRITE_SLICE`, each within ``bound`` (the write bound; ``None`` when the
        caller bounds the write as a whole); ``bytes_sent`` counts each slice written. A
        failed or cancelled slice may have sent some, all or none of its bytes (trio's
        ``send_all``): the caller closes the connection."""
        if stage > progress.stage:  # (progress.advance, inlined: this runs per chunk)
            progress.stage = stage
        step = self._slice
        if len(data) <= step:
            pieces: tuple[bytes, ...] | list[memoryview] = (data,)
        else:
            view = memoryview(data)
            pieces = [view[i : i + step] for i in range(0, len(data), step)]
        if bound is not None:
            bound.progress = progress
        for piece in pieces:
            try:
                # (as in _events: a branch, not a Bound without a limit, whose `with` costs)
                if bound is None:
                    await self._stream.send_all(piece)
                else:
                    with bound:
                        await self._stream.send_all(piece)
            except TRANSPORT_ERRORS as exc:
                raise self._transport_failure(progress, "while sending", exc) from exc
            progress.bytes_sent += len(piece)

    async def _send_streamed(
        self, request: WireRequest, body: AsyncIterable[bytes], progress: AttemptProgress
    ) -> None:
        """The head, then each chunk of a streamed body as it comes, then the body's end
        (chunked framing unless the caller gave a length), all encoded by h11."""
        conn = self._reader.machine()
        bound = self._writes()
        head = encode(conn, h11_request(request, progress), progress)
        await self._send(head, progress, _REQUEST_HEAD, bound)
        async with closing_body(body):
            async for chunk in body:
                if chunk:
                    data = encode(conn, h11.Data(data=chunk), progress)
                    await self._send(data, progress, _REQUEST_BODY, bound)
        end = encode(conn, END_OF_MESSAGE, progress)
        if end:
            await self._send(end, progress, _REQUEST_BODY, bound)

    def _writes(self) -> Bound:
        """The write bound, made on first use: from then on, a write that waits for a reading
        server renews it (``RawSocketStream.on_progress``; unmade, there was nothing to
        renew)."""
        write = self._write_bound
        if write is None:
            write = self._write_bound = bound("write", self._timekeeper, target=self)
            raw = raw_stream_of(self._stream)
            if raw is not None:
                raw.on_progress = write.renew
        return write

    def _reads(self, progress: AttemptProgress) -> Bound:
        """The read bound, made the first time a body's read must wait for bytes."""
        read = self._read = bound("read", self._timekeeper, target=self, progress=progress)
        return read

    def _transport_failure(
        self, progress: AttemptProgress, when: str, exc: BaseException
    ) -> WireError:
        """What a failed read or write (``when``: "while sending"...) means:
        ``CONNECTION_BROKEN`` (a bound that closed the connection reports its own timeout)."""
        if self.state is _CLOSED:  # closed under us: the client is closing (the pool closes
            message = f"the connection was closed by the client {when}"  # lent ones)
        else:
            message = f"connection broke {when}: {exc.__cause__ or exc}"
        return WireError.at(progress, FailureCategory.CONNECTION_BROKEN, message)

    # --- the response --------------------------------------------------------------------------

    async def receive_body(self, progress: AttemptProgress) -> bytes:
        """The next non-empty body chunk, ``b""`` at the end (then the connection is idle or
        closed); each read within the read bound. On any exception, cancellation included,
        the connection is closed (never reused)."""
        chunks: list[bytes] = []
        read = self._read
        if read is None:
            read = _UNMADE
        else:
            read.progress = progress
        try:
            await self._events(progress, read, chunks, 0)  # (past 0 bytes: one chunk)
        except BaseException:
            self.close()
            raise
        return chunks[0] if chunks else b""

    async def receive_all(self, progress: AttemptProgress, limit: int | None) -> list[bytes]:
        """The body's chunks to its end, or as soon as they add up to more than ``limit``
        bytes (see ``BodySource``); each read within the read bound. On any exception,
        cancellation included, the connection is closed (never reused)."""
        chunks: list[bytes] = []
        read = self._read
        if read is None:
            read = _UNMADE
        else:
            read.progress = progress
        try:
            await self._events(progress, read, chunks, limit)
        except BaseException:
            self.close()
            raise
        return chunks

    async def _events(
        self,
        progress: AttemptProgress,
        bound: Bound | None,
        chunks: list[bytes],
        limit: int | None,
    ) -> Head | None:
        """The one receive loop: the reader's events, reading from the socket whenever it
        needs bytes (judged by :meth:`_took`), until

        - the final response head, returned (the reader gives it before anything else);
        - body data past ``limit`` bytes in all (``None``: no limit), appended to ``chunks``;
        - the end of the body: the stage is ``COMPLETE`` and the connection idle again, or
          closed when it may not carry another request.

        Each read is within ``bound``, the read bound (:data:`_UNMADE`: made by the first read
        that waits, :meth:`_reads`); ``None`` for the reads of the head, which the caller
        bounds as a whole (the first-byte bound). The head's loop reads
        before its first look: an exchange starts with nothing buffered (a connection with
        bytes left over is not reused). Raises :class:`WireError`; the caller closes the
        connection on any exception."""
        reader = self._reader
        total = 0
        event = NEED if bound is None else reader.next_event(progress)
        while True:
            if event is NEED:
                # (The head's reads could go through a Bound without a limit instead of the
                # branch; its `with` costs about as much as the rest of a read's bookkeeping.)
                try:
                    if bound is None:
                        data = self._more(await self._stream.receive_some())
                    else:
                        if bound is _UNMADE:
                            bound = self._reads(progress)
                        with bound:
                            data = self._more(await self._stream.receive_some())
                except TRANSPORT_ERRORS as exc:
                    raise self._transport_failure(progress, _READING, exc) from exc
                event = reader.next_event(progress, self._took(progress, data))
                continue
            if type(event) is bytes:
                chunks.append(event)
                if limit is not None:
                    total += len(event)
                    if total > limit:
                        return None
            elif event is END:
                progress.stage = _COMPLETE
                # An idle connection keeps nothing of the exchange that ended: its bounds
                # let go of the attempt's record (issue #41: one object less per connection
                # held idle, visited by every full pass of the garbage collector).
                self._first_byte.progress = None
                if self._read is not None:
                    self._read.progress = None
                if self._write_bound is not None:
                    self._write_bound.progress = None
                if reader.reusable and self.state is _ACTIVE:
                    self.state = _IDLE
                else:
                    self.close()
                return None
            else:  # the head: the reader gives it first, once (chunks is None then)
                return event  # type: ignore[return-value]
            event = reader.next_event(progress)

    def _took(self, progress: AttemptProgress, data: bytes | bytearray) -> bytes | bytearray:
        """What a read of response bytes means: the first byte moves the stage to
        ``RESPONSE_HEAD``; an EOF before the head is complete is ``CONNECTION_BROKEN``; a
        later EOF is returned (``b""``) for the reader to judge."""
        if data:
            if progress.stage == _AWAITING_RESPONSE:
                progress.stage = _RESPONSE_HEAD
                progress.timings["first_byte"] = self._now() - progress.started
                # h11 judges a head only once all of it is there; bytes that cannot start
                # one (an SSH banner, TLS, a stray protocol) are refused at once instead of
                # waiting for the rest of a head that will never come.
                if not data.startswith(b"HTTP/"):  # (the common case: one call)
                    start = bytes(data[:16]).lstrip(b"\r\n")[:5]
                    if start and not b"HTTP/".startswith(start):
                        raise WireError.at(
                            progress,
                            FailureCategory.REMOTE_PROTOCOL,
                            "the server's response is not valid HTTP/1.1: it starts with "
                            f"{bytes(data[:32])!r}",
                        )
            progress.bytes_received += len(data)
        elif progress.stage < _RESPONSE_BODY:
            raise WireError.at(
                progress,
                FailureCategory.CONNECTION_BROKEN,
                "the server closed the connection in the middle of the response head"
                if progress.stage == _RESPONSE_HEAD
                else "the server closed the connection without sending a response",
            )
        return data

    def abandon(self) -> None:
        """The caller stopped reading mid-body: the connection cannot be reused."""
        self.close()

    def __repr__(self) -> str:
        return f"<HTTP11Connection {self.origin_key} {self.state.value} requests={self.requests}>"
