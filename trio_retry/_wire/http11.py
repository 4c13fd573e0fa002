"""HTTP/1.1 over h11: one connection, one request at a time, every stage observed.

The proof each stage gives (what the client may claim if the attempt breaks there):

- before ``send_all`` of the head: nothing of this request left -> ``NOT_SENT`` is *not* claimed
  here for a reused connection unless :meth:`HTTP11Connection.peer_closed` proved the peer gone
  before writing (the pool checks that; see ``pool.py``);
- from the first ``send_all`` on: a cancelled or failed ``send_all`` may have sent some, all or
  none of its bytes (trio's ``SendStream.send_all`` contract), so ``SENT_NO_RESPONSE``;
- the first response byte moves the stage to ``RESPONSE_HEAD`` (still no response: it may be a
  1xx or garbage); final headers parsed -> ``RESPONSE_BODY`` (a break now is
  ``PARTIAL_RESPONSE``); ``EndOfMessage`` -> ``COMPLETE``.

With the fast path on (``Client(http1_fast_path=True)``, the default), a request that
qualifies (see ``fast11.request_head``) has its head written directly and its response parsed
by ``fast11.FastParser``; where that parser defers, :meth:`HTTP11Connection._defer` brings h11
into the state it would be in had it handled the exchange from the start (it is sent the
request's events, their bytes discarded, then fed the bytes received) and the h11 code below
carries on. The stages, progress, errors and connection reuse are the same on both paths: the
reads, the head size check and the end of a cycle are shared code.

An exchange's stages follow each other in one order here, so the code below sets each next
stage directly where the previous one is known (``progress.advance`` is a call per stage).

Any exception while a request is on the connection (``trio.Cancelled`` included) leaves the
connection unusable: h11's state would no longer match the bytes on the wire. It is closed, not
returned to the pool.
"""

from __future__ import annotations

import select

import h11
import trio

from .._core.evidence import FailureCategory, Stage
from .clock import NO_LIMITS, Clock
from .exchange import (
    TRANSPORT_ERRORS,
    WireRequest,
    WireResponse,
    closing_body,
    content_length,
)
from .fast11 import DEFER, END, NEED, FastParser, ResponseHead, request_head
from .http11_rules import (
    check_head_size,
    eof_error,
    framing_conflict,
    invalid_request,
    protocol_message,
    request_event,
    unexpected,
)
from .progress import AttemptProgress, WireError
from .transport import Transport
from .virtual import VirtualSocket

__all__ = ["HTTP11Connection"]

RECEIVE_SIZE = 65536
#: h11's events are immutable: the one end of a request body is sent by every request.
_END = h11.EndOfMessage()
#: Request bodies up to this size are written in the same ``send_all`` as the head.
COALESCE_LIMIT = 16384
#: The most one ``send_all`` writes: the write timeout bounds each (an idle bound, so a long
#: upload is never cut while the server keeps reading).
WRITE_SLICE = 256 * 1024


#: The stages an exchange passes, as module constants: on Python 3.11 an enum class's
#: attribute goes through ``EnumType.__getattr__``'s hook (about 10x a global's cost), and
#: these are set on every request.
_REQUEST_HEAD = Stage.REQUEST_HEAD
_REQUEST_BODY = Stage.REQUEST_BODY
_AWAITING_RESPONSE = Stage.AWAITING_RESPONSE
_RESPONSE_HEAD = Stage.RESPONSE_HEAD
_RESPONSE_BODY = Stage.RESPONSE_BODY
_COMPLETE = Stage.COMPLETE
_READING = "while reading the response"


class HTTP11Connection:
    """One HTTP/1.1 connection. Not safe for concurrent requests (the pool guarantees that)."""

    http_version = "HTTP/1.1"
    multiplexed = False

    __slots__ = (
        "_fast",
        "_first_byte",
        "_h11",
        "_max_header_bytes",
        "_now",
        "_parser",
        "_poller",
        "_read",
        "_request",
        "_socket",
        "_stream",
        "_virtual",
        "_write_bound",
        "busy",
        "closed",
        "expires_at",
        "origin_key",
        "requests",
    )

    def __init__(
        self,
        transport: Transport,
        origin_key: object,
        max_header_bytes: int,
        *,
        fast_path: bool = True,
        clock: Clock | None = None,
    ) -> None:
        self._stream = transport.stream
        self._socket = transport.socket
        sock = transport.socket  # (VirtualSocket is an ABC: an isinstance is a call, made once)
        self._virtual = sock if isinstance(sock, VirtualSocket) else None
        self._now = trio.lowlevel.current_clock().current_time
        self._h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=max_header_bytes)
        self._max_header_bytes = max_header_bytes
        self._fast = fast_path
        #: The fast path's parser and request while it has the exchange (else ``None``).
        self._parser: FastParser | None = None
        self._request: WireRequest | None = None
        self._poller: select.poll | None = None  # made on the first reuse (peer_closed)
        #: The bounds of this connection's waits (``clock.py``), one per kind: one request at
        #: a time, so each is reused, its ``progress`` set per request.
        if clock is None:
            clock = Clock(NO_LIMITS)
        self._write_bound = clock.bound("write", self)
        self._first_byte = clock.bound("first_byte", self)
        self._read = clock.bound("read", self)
        self.origin_key = origin_key
        self.busy = False
        self.closed = False
        self.expires_at = float("inf")
        self.requests = 0

    # --- pool hooks ------------------------------------------------------------------------

    def is_available(self) -> bool:
        return not self.busy and not self.closed

    def is_reusable(self) -> bool:
        """True after a complete request/response cycle that allows keep-alive."""
        # (``busy``: a fast-path exchange leaves h11 IDLE while it runs.)
        return not self.closed and not self.busy and self._h11.our_state is h11.IDLE

    def peer_closed(self) -> bool:
        """One non-blocking ``poll()``: is anything readable on this idle connection?

        An idle HTTP/1.1 connection must have nothing to read. EOF means the peer closed it; a
        TLS close_notify or stray bytes mean it is about to be, or is confused. Either way the
        connection is not used, and since not one byte of the next request was written, that
        is proof for ``NOT_SENT``.
        """
        if self.closed:
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
        if not self.closed:
            self.closed = True
            self._socket.close()

    async def aclose(self) -> None:
        self.closed = True
        await trio.aclose_forcefully(self._stream)

    # --- the request ---------------------------------------------------------------------------

    async def _send(self, data: bytes, progress: AttemptProgress, stage: Stage) -> None:
        """The one path for request bytes: advance the stage, then await ``send_all``."""
        if stage > progress.stage:  # (progress.advance, inlined: this runs per chunk)
            progress.stage = stage
        await self._send_all(data, progress)

    async def _send_all(self, data: bytes, progress: AttemptProgress) -> None:
        """``send_all`` in slices of at most :data:`WRITE_SLICE`, each within the write bound;
        ``bytes_sent`` counts what was written."""
        if len(data) <= WRITE_SLICE:
            try:
                with self._write_bound:
                    await self._stream.send_all(data)
            except TRANSPORT_ERRORS as exc:
                raise self._transport_failure(progress, "while sending", exc) from exc
            progress.bytes_sent += len(data)
            return
        view = memoryview(data)
        for start in range(0, len(data), WRITE_SLICE):
            piece = view[start : start + WRITE_SLICE]
            try:
                with self._write_bound:
                    await self._stream.send_all(piece)
            except TRANSPORT_ERRORS as exc:
                raise self._transport_failure(progress, "while sending", exc) from exc
            progress.bytes_sent += len(piece)

    def _transport_failure(
        self, progress: AttemptProgress, when: str, exc: BaseException
    ) -> WireError:
        """What a failed read or write (``when``: "while sending"...) means:
        ``CONNECTION_BROKEN`` (a bound that closed the connection reports its own timeout)."""
        if self.closed:  # closed under us: the client is closing (the pool closes lent ones)
            message = f"the connection was closed by the client {when}"
        else:
            message = f"connection broke {when}: {exc.__cause__ or exc}"
        return WireError.at(progress, FailureCategory.CONNECTION_BROKEN, message)

    def _encode(self, event: h11.Event, progress: AttemptProgress) -> bytes:
        try:
            return self._h11.send(event) or b""
        except h11.LocalProtocolError as exc:
            raise invalid_request(progress, exc) from exc

    async def send_request(self, request: WireRequest, progress: AttemptProgress) -> WireResponse:
        """Write the request and read up to the final response head, each write within the
        write bound and the head within the first-byte bound (``clock.py``).

        Raises :class:`WireError` classified by the stage reached. On cancellation the
        connection is closed (never reused) and ``progress`` says what may have been sent.
        """
        self.busy = True
        self.requests += 1
        progress.http_version = self.http_version
        self._write_bound.progress = self._first_byte.progress = self._read.progress = progress
        try:
            await self._write(request, progress)
            with self._first_byte:
                return await self._head(progress)
        except BaseException:
            self.close()
            raise

    async def _write(self, request: WireRequest, progress: AttemptProgress) -> None:
        body = request.body
        if isinstance(body, bytes) and len(body) <= COALESCE_LIMIT:
            # One syscall for small requests: the body leaves with the head (the write of
            # :meth:`_send`, in this frame).
            head = self._fast_head(request) if self._fast else None
            if head is not None:
                data = head + body if body else head
            else:
                data = self._encode_whole(request, progress, body)
            progress.stage = _REQUEST_BODY if body else _REQUEST_HEAD
            try:
                with self._write_bound:
                    await self._stream.send_all(data)
            except TRANSPORT_ERRORS as exc:
                raise self._transport_failure(progress, "while sending", exc) from exc
            progress.bytes_sent += len(data)
            progress.stage = _AWAITING_RESPONSE  # (after the request's bytes)
            return
        head = self._fast_head(request) if self._fast and isinstance(body, bytes) else None
        if head is not None:
            assert isinstance(body, bytes)
            await self._send(head, progress, _REQUEST_HEAD)
            await self._send(body, progress, _REQUEST_BODY)
            progress.stage = _AWAITING_RESPONSE
            return
        await self._send(
            self._encode(self._event(request, progress), progress), progress, _REQUEST_HEAD
        )
        chunks = (body,) if isinstance(body, bytes) else body
        if isinstance(chunks, tuple):
            for chunk in chunks:
                await self._send(
                    self._encode(h11.Data(data=chunk), progress), progress, _REQUEST_BODY
                )
        else:
            async with closing_body(chunks):
                async for chunk in chunks:
                    if chunk:
                        data = self._encode(h11.Data(data=chunk), progress)
                        await self._send(data, progress, _REQUEST_BODY)
        end = self._encode(_END, progress)
        if end:
            await self._send(end, progress, _REQUEST_BODY)
        progress.stage = _AWAITING_RESPONSE  # (after the request's bytes)

    def _fast_head(self, request: WireRequest) -> bytes | None:
        """The head the fast path writes for ``request`` (a body in memory), with the fast
        parser made ready for its response; ``None`` when the request does not qualify
        (``fast11.request_head``) and h11 has the exchange."""
        head = request.fast_head  # (built once per WireRequest, which a template reuses)
        if head is None:
            head = request.fast_head = request_head(
                request.method, request.target, request.headers, content_length(request)
            )
        if head is not None:  # the exact bytes h11 would write (fast11, tested against h11)
            self._parser = FastParser(self._max_header_bytes)
            self._request = request
        return head

    def _event(self, request: WireRequest, progress: AttemptProgress) -> h11.Request:
        """The request's h11 event (built once per WireRequest); h11 refusing it is
        ``LOCAL_PROTOCOL`` (nothing was written)."""
        event = request.h11_event
        if event is None:
            try:
                event = request.h11_event = request_event(request, content_length(request))
            except (h11.LocalProtocolError, UnicodeEncodeError) as exc:
                raise invalid_request(progress, exc) from exc
        return event

    def _encode_whole(self, request: WireRequest, progress: AttemptProgress, body: bytes) -> bytes:
        """The bytes of a whole request with its body in memory, from h11."""
        conn = self._h11
        event = self._event(request, progress)
        try:
            data = conn.send(event) or b""
            if body:
                data += conn.send(h11.Data(data=body)) or b""
            return data + (conn.send(_END) or b"")
        except h11.LocalProtocolError as exc:
            raise invalid_request(progress, exc) from exc

    async def _next_event(self, progress: AttemptProgress) -> object:
        """The next h11 event, reading from the socket as needed; errors classified.

        (:meth:`_head` and :meth:`receive_all` run this loop in their own frame: one
        coroutine fewer per event on the common path.)"""
        conn = self._h11
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                raise self._refused(progress, exc) from exc
            if event is not h11.NEED_DATA:
                return event
            conn.receive_data(bytes(await self._receive(progress)))

    def _refused(self, progress: AttemptProgress, exc: h11.RemoteProtocolError) -> WireError:
        """What h11 refusing the server's bytes means: an EOF inside the response is
        ``CONNECTION_BROKEN``, anything else ``REMOTE_PROTOCOL``."""
        if self._h11.their_state is h11.ERROR and eof_error(exc):
            return WireError.at(
                progress,
                FailureCategory.CONNECTION_BROKEN,
                "the server closed the connection before the response was complete",
            )
        return WireError.at(progress, FailureCategory.REMOTE_PROTOCOL, protocol_message(exc))

    async def _receive(self, progress: AttemptProgress) -> bytes | bytearray:
        """One read of body bytes (for either parser) within the read bound, judged by
        :meth:`_took`."""
        bound = self._read
        bound.progress = progress
        try:
            with bound:
                data = await self._stream.receive_some(RECEIVE_SIZE)
        except TRANSPORT_ERRORS as exc:
            raise self._transport_failure(progress, _READING, exc) from exc
        return self._took(progress, data)

    def _took(self, progress: AttemptProgress, data: bytes | bytearray) -> bytes | bytearray:
        """What a read of response bytes means: the first byte moves the stage to
        ``RESPONSE_HEAD``; an EOF before the head is complete is ``CONNECTION_BROKEN``; a
        later EOF is returned (``b""``) for the parser to judge. (:meth:`_head` reads in its
        own frame and calls this; everything else reads through :meth:`_receive`.)"""
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

    async def _head(self, progress: AttemptProgress) -> WireResponse:
        """Read up to the final response head (1xx skipped), checked: the fast parser's when
        it has the exchange, else (or from where it deferred) h11's."""
        parser = self._parser
        if parser is not None:
            while True:  # (a head needs bytes: read before the first look)
                try:  # (the read of _receive, in this frame)
                    data = await self._stream.receive_some(RECEIVE_SIZE)
                except TRANSPORT_ERRORS as exc:
                    raise self._transport_failure(progress, _READING, exc) from exc
                parser.buf += self._took(progress, data)  # an EOF raises there
                got = parser.next_event()
                if got is NEED:
                    continue
                if got is DEFER:
                    self._defer()
                    break
                assert isinstance(got, ResponseHead)
                if progress.bytes_received > self._max_header_bytes:
                    check_head_size(progress, got.headers, self._max_header_bytes)
                progress.stage = _RESPONSE_BODY  # (from RESPONSE_HEAD)
                return WireResponse(
                    got.status,
                    got.reason.decode("latin-1"),
                    got.headers,
                    self.http_version,
                    self,
                )
        conn = self._h11
        while True:
            try:  # (the loop of _next_event, in this frame)
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                raise self._refused(progress, exc) from exc
            if event is h11.NEED_DATA:
                try:  # (the read of _receive, in this frame)
                    data = await self._stream.receive_some(RECEIVE_SIZE)
                except TRANSPORT_ERRORS as exc:
                    raise self._transport_failure(progress, _READING, exc) from exc
                conn.receive_data(bytes(self._took(progress, data)))
                continue
            # (h11's events are ABCs, so an isinstance costs a Python call; h11 makes exactly
            # these types)
            if type(event) is h11.InformationalResponse:
                continue
            if type(event) is h11.Response:
                # h11 bounds only *incomplete* heads; a large head that arrived in one read
                # is measured here, so the limit holds however the bytes were chunked.
                headers = event.headers.raw_items()
                if progress.bytes_received > self._max_header_bytes:  # cheap bound first
                    check_head_size(progress, headers, self._max_header_bytes)
                framing = framing_conflict(headers)
                if framing is not None:
                    raise WireError.at(progress, FailureCategory.REMOTE_PROTOCOL, framing)
                progress.stage = _RESPONSE_BODY  # (from RESPONSE_HEAD)
                return WireResponse(
                    event.status_code,
                    event.reason.decode("latin-1"),
                    headers,
                    self.http_version,
                    self,
                )
            raise WireError.at(  # pragma: no cover - h11 only yields the above here
                progress, FailureCategory.REMOTE_PROTOCOL, f"unexpected event {event!r}"
            )

    def _defer(self) -> None:
        """The fast parser stopped: bring h11 to where it stands and let h11 go on.

        h11 is sent the request's events (their bytes were written already and are dropped),
        then fed what :meth:`FastParser.handover` says (nothing before a head; a synthetic
        head with the same framing and keep-alive inside a body), then the unconsumed bytes,
        and the synthetic events are consumed. From here h11 sees exactly what it would have
        seen had it parsed everything (tests/wire/test_fast11_differential.py)."""
        parser, request = self._parser, self._request
        assert parser is not None
        assert request is not None
        self._parser = self._request = None
        conn = self._h11
        conn.send(request.h11_event or request_event(request, content_length(request)))
        assert isinstance(request.body, bytes)
        if request.body:
            conn.send(h11.Data(data=request.body))
        conn.send(_END)
        prefix, synthetic = parser.handover()
        if prefix or parser.buf:
            conn.receive_data(prefix + parser.buf)
        for _ in range(synthetic):
            conn.next_event()

    async def receive_body(self, progress: AttemptProgress) -> bytes:
        """The next body chunk, ``b""`` at the end (then the connection is idle or closed);
        each read within the read bound."""
        try:
            return await self._body_chunk(progress)
        except BaseException:
            self.close()
            raise

    async def receive_all(self, progress: AttemptProgress, limit: int | None) -> list[bytes]:
        """The body's chunks to its end, or past ``limit`` bytes (see ``BodySource``): the
        loop of :meth:`receive_body`, without a coroutine per chunk around each read."""
        chunks: list[bytes] = []
        total = 0
        try:
            while (parser := self._parser) is not None:  # the fast parser's, in this frame
                got = self._fast_next(parser, progress)
                if got is None:
                    if self._parser is not None:
                        await self._fast_fill(parser, progress)
                    continue
                if not got:
                    return chunks
                chunks.append(got)
                if limit is not None:
                    total += len(got)
                    if total > limit:
                        return chunks
            conn = self._h11
            while True:
                try:
                    event = conn.next_event()
                except h11.RemoteProtocolError as exc:
                    raise self._refused(progress, exc) from exc
                if type(event) is h11.Data:
                    chunk = event.data
                    if chunk:
                        chunks.append(bytes(chunk))
                        if limit is not None:
                            total += len(chunk)
                            if total > limit:
                                return chunks
                elif type(event) is h11.EndOfMessage:
                    progress.stage = _COMPLETE
                    self._finish_cycle()
                    return chunks
                elif event is h11.NEED_DATA:
                    conn.receive_data(bytes(await self._receive(progress)))
                else:
                    raise unexpected(progress, event)
        except BaseException:
            self.close()
            raise

    async def _body_chunk(self, progress: AttemptProgress) -> bytes:
        """The next chunk of the body (``b""`` at its end), from the fast parser while it has
        the exchange, else (or from where it deferred) h11."""
        while (parser := self._parser) is not None:
            got = self._fast_next(parser, progress)
            if got is not None:
                return got
            if self._parser is not None:
                await self._fast_fill(parser, progress)
        while True:
            event = await self._next_event(progress)
            if type(event) is h11.Data:
                if event.data:
                    return bytes(event.data)
                continue
            if type(event) is h11.EndOfMessage:
                progress.stage = _COMPLETE
                self._finish_cycle()
                return b""
            raise unexpected(progress, event)

    def _fast_next(self, parser: FastParser, progress: AttemptProgress) -> bytes | None:
        """The fast parser's next step in a body, without I/O: a chunk; ``b""`` at the end
        (the cycle is over, as :meth:`_finish_cycle` ends it); ``None`` when it needs more
        bytes (:meth:`_fast_fill`), or when it deferred (then h11 has the exchange and
        ``self._parser`` is ``None``)."""
        got = parser.next_event()
        if got is NEED:
            return None
        if got is END:
            progress.stage = _COMPLETE
            self._parser = self._request = None
            self.busy = False
            if not parser.keep_alive or parser.buf:
                self.close()  # as _finish_cycle: h11 would not be IDLE
            return b""
        if got is DEFER:
            self._defer()
            return None
        assert isinstance(got, bytes)
        return got

    async def _fast_fill(self, parser: FastParser, progress: AttemptProgress) -> None:
        """More body bytes for the fast parser; an EOF mid-body hands the exchange to h11,
        which says what it means."""
        data = await self._receive(progress)
        if data:
            parser.buf += data
        else:
            self._defer()
            self._h11.receive_data(b"")

    def abandon(self) -> None:
        """The caller stopped reading mid-body: the connection cannot be reused."""
        self.close()

    def _finish_cycle(self) -> None:
        self.busy = False
        # Bytes already buffered past the end of this response were sent before the next
        # request existed: they cannot be its response. Reusing the connection would hand them
        # to the next request as if the server had answered it (a response desync), so the
        # connection is closed instead. (Bytes arriving later are caught by ``peer_closed``.)
        if (
            self._h11.our_state is h11.DONE
            and self._h11.their_state is h11.DONE
            and not self._h11.trailing_data[0]
        ):
            self._h11.start_next_cycle()
        else:
            self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else ("busy" if self.busy else "idle")
        return f"<HTTP11Connection {self.origin_key} {state} requests={self.requests}>"
