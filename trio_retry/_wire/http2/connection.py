"""HTTP/2 over h2: many streams on one connection, one reader task, one writer task.

An :class:`HTTP2Connection` owns one byte stream and one :class:`~.session.Session` (the h2
state machine, the streams, the writer, GOAWAY and death: ``session.py``). Its reader task
feeds every received byte to h2, frame by frame (``frames.py``), and hands the resulting events
to the streams (``inbound.py``); a request goes by ``outbound.py``; its writer task
(``writer.py``) is the only one that writes. Neither task raises, so neither can cancel the
client's nursery, and a caller only ever waits for its own stream's events or for its own
bytes to be written: a caller's deadline cancels that wait and nothing else.

The proof each stream gives (what the client may claim if the attempt breaks there):

- before the HEADERS frame is handed to the transport nothing of this request left
  (``NOT_SENT``: by stage, or, when the connection dies with our frames still queued, because
  the writer never handed them over); from then on a break is ``SENT_NO_RESPONSE``;
- ``RST_STREAM(REFUSED_STREAM)`` before any response byte: the server did no processing
  (RFC 9113 §8.7), so ``NOT_SENT`` and category ``REFUSED_STREAM``;
- ``GOAWAY`` whose last-stream-id is below the stream's id: never processed (RFC 9113 §6.8),
  ``NOT_SENT`` and category ``GOAWAY``; the streams at or below it carry on. The connection
  takes no new stream from the moment the frame is parsed. When the GOAWAY is a rotation (the
  connection served streams), the failure is marked ``reconnect``: the client sends the
  request again on a fresh connection without counting an attempt;
- the first response frame moves the stream to ``RESPONSE_HEAD``, final headers to
  ``RESPONSE_BODY`` (a break now is ``PARTIAL_RESPONSE``), the end of the body to ``COMPLETE``;
- a malformed response (``headers.py``, Content-Length mismatches, DATA before the head) is a
  stream error: that stream is reset with PROTOCOL_ERROR, the others carry on;
- any other reset or connection failure carries the evidence of the stage reached.
  A stream's own proof wins: once proven ``NOT_SENT`` it stays so (``stream.py``).

Idle health: before a new stream goes on a connection that has received nothing for
``ping_after_idle`` seconds, a PING must be answered within ``ping_timeout``; a connection that
does not answer is closed and the request goes on a fresh one (``reconnect``): the idle check
every multiplexed protocol shares (``contract.IdlePing``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import h2.config
import h2.connection
import h2.settings
import trio
from h2.errors import ErrorCodes
from hpack import NeverIndexedHeaderTuple

from ..._core.evidence import FailureCategory
from ..clock import FIXED, bound
from ..contract import (
    Failure,
    IdlePing,
    MultiplexedConnection,
    closed_while_connecting,
    gave_up,
    request_headers,
)
from ..exchange import TRANSPORT_ERRORS, WireRequest, WireResponse
from ..progress import AttemptProgress, WireError
from ..timekeeper import Timekeeper
from ..tlsread import reads_of
from ..transport import Transport
from .fast import FastMachine
from .h2_private import ignore_after_reset
from .headers import head_size
from .hpack_memo import ConnectionDecoder, MemoEncoder
from .inbound import receive
from .outbound import HTTP_VERSION, open_stream, queue_whole, response_head, write_body
from .session import Session

__all__ = ["HTTP2Connection", "client_machine"]

#: The most one read takes with the TLS records already received (``tlsread.py``).
MORE_LIMIT = 256 * 1024
#: Our SETTINGS_INITIAL_WINDOW_SIZE: how much of one response may be buffered unread. Sized
#: for throughput: with h2's algorithm the credit goes back in WINDOW_UPDATEs of half the
#: window, each a write that costs the reader a good part of a millisecond on loopback (at
#: 256 KiB a 50 MB download sent 400 of them; at 1 MiB, 100).
STREAM_WINDOW = 1024 * 1024
#: The connection-level receive window: the bound of what all the streams of a connection
#: buffer unread, together. h2 gives its credit back once half of it was read, so responses
#: left unread on other streams starve the one being read once they hold half of it: the
#: ratio to :data:`STREAM_WINDOW` (64, as it was with 256 KiB and 16 MiB) is how many may
#: (``tests/interop/test_nginx_h2_fast.py``: 12 large responses read one after the other).
#: Go's transport opens 4 MiB streams in a 1 GiB connection window.
CONNECTION_WINDOW = 64 * STREAM_WINDOW
_DEFAULT_WINDOW = 65535


def client_machine(max_header_bytes: int) -> h2.connection.H2Connection:
    """The h2 state machine of a client connection, configured as every connection (and the
    fast path's differential test, ``tests/wire/test_h2_fast.py``) uses it."""
    # Request headers reach h2 already validated and normalised (``headers.py`` and
    # ``_models.check_header``); inbound headers are validated by ``headers.malformed``,
    # so that a malformed response fails its own stream only.
    config = h2.config.H2Configuration(
        client_side=True,
        header_encoding=None,
        validate_outbound_headers=False,
        normalize_outbound_headers=False,
        # A response's ``cookie`` fields are left as they came (h2 would join them, as
        # for a request: meaningless in a response, and one pass per head saved).
        normalize_inbound_headers=False,
        validate_inbound_headers=False,
    )
    machine = h2.connection.H2Connection(config=config)
    # hpack's coders, keeping the blocks that repeat (``hpack_memo.py``); replaced before
    # the connection codes its first block.
    machine.encoder = MemoEncoder()
    machine.decoder = ConnectionDecoder()
    codes = h2.settings.SettingCodes
    # Set before initiate_connection(), so they are our first SETTINGS and apply at once.
    machine.local_settings = h2.settings.Settings(
        client=True,
        initial_values={
            codes.ENABLE_PUSH: 0,
            codes.MAX_CONCURRENT_STREAMS: 100,
            codes.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
            codes.MAX_HEADER_LIST_SIZE: max_header_bytes,
        },
    )
    # h2 applies MAX_HEADER_LIST_SIZE to its HPACK decoder only when the server ACKs a
    # *change*; ours is the initial value, so the decoder is told directly.
    machine.decoder.max_header_list_size = max_header_bytes
    # Frames the server sent before it saw our RST_STREAM are ignored, not reset again (RFC
    # 9113 §5.1; the fast path does the same while it is engaged).
    ignore_after_reset(machine)
    return machine


class HTTP2Connection:
    """One HTTP/2 connection carrying many concurrent streams; see the module docstring.

    Create it with :meth:`open`. ``send_request`` may be called from many tasks at once, up to
    the server's ``SETTINGS_MAX_CONCURRENT_STREAMS`` (callers beyond it wait for a stream to
    finish). The pool learns that the connection died or retired (after a GOAWAY, once its
    last stream finished) through ``on_retired``. What the reader and the request path share
    is :attr:`session`.
    """

    http_version = HTTP_VERSION
    multiplexed = True

    __slots__ = (
        "_authority",
        "_clock",
        "_fast_path",
        "_idle",
        "_more",
        "_nursery",
        "_scheme",
        "_stream",
        "expires_at",
        "on_retired",
        "origin_key",
        "request_limit",
        "session",
    )

    def __init__(
        self,
        transport: Transport,
        origin_key: object,
        *,
        scheme: str,
        authority: str,
        max_header_bytes: int,
        nursery: trio.Nursery,
        stall_timeout: float = FIXED.http2_stall,
        ping_after_idle: float | None = FIXED.ping_after_idle,
        ping_timeout: float = FIXED.ping_timeout,
        fast_path: bool = True,
    ) -> None:
        self._stream = transport.stream
        #: Its reads, taking every TLS record already received (``tlsread.py``).
        self._more = reads_of(self._stream, MORE_LIMIT)
        #: Whether the common frames take the fast path after the handshake (``fast.py``).
        self._fast_path = fast_path
        machine = client_machine(max_header_bytes)
        self._scheme = scheme.encode("ascii")
        self._authority = authority.encode("ascii")
        self._nursery = nursery
        run_clock = trio.lowlevel.current_clock()
        #: The idle check; the reader notes each read there.
        self._idle = IdlePing(run_clock.current_time(), after=ping_after_idle, timeout=ping_timeout)
        #: The state the reader (``inbound.py``) and the request path (``outbound.py``)
        #: share; it tells :meth:`_dead` when the connection is over.
        self.session = Session(
            FastMachine(machine),  # h2 itself until the handshake is done (``fast.py``)
            transport,
            stall_timeout=stall_timeout,
            idle=self._idle,
            on_dead=self._dead,
        )
        self._clock = self.session.run_clock
        self.origin_key = origin_key
        self.expires_at = math.inf
        self.on_retired: Callable[[], None] | None = None
        #: Set by the pool: take no more than this many streams (learned from the origin's
        #: earlier GOAWAY rotations), so a burst is spread instead of refused.
        self.request_limit: int | None = None

    @classmethod
    async def open(
        cls,
        transport: Transport,
        origin_key: object,
        *,
        scheme: str,
        authority: str,
        max_header_bytes: int,
        nursery: trio.Nursery,
        progress: AttemptProgress,
        handshake_timeout: float | None = None,
        timekeeper: Timekeeper | None = None,
        fast_path: bool = True,
        **options: float | None,
    ) -> HTTP2Connection:
        """Handshake over ``transport``, then start the reader and writer tasks in ``nursery``.

        Sends the preface and our SETTINGS and waits for the server's SETTINGS (so its
        ``MAX_CONCURRENT_STREAMS`` is known before the first stream). Raises :class:`WireError`
        (``NOT_SENT``: no request byte exists yet). On cancellation or failure the transport
        is closed and no task is left behind.
        """
        if (
            timekeeper is not None
            and timekeeper.limits.write is not None
            and "stall_timeout" not in options
        ):
            # The writer's stall bound is the client's write limit (``writer.py``): the one
            # owner of time says how long, the writer's task keeps it. Without a write limit it
            # stays ``FIXED.http2_stall``: a connection-level safety bound, as it always was.
            options["stall_timeout"] = timekeeper.limits.write
        conn = cls(
            transport,
            origin_key,
            scheme=scheme,
            authority=authority,
            max_header_bytes=max_header_bytes,
            nursery=nursery,
            fast_path=fast_path,
            **options,  # type: ignore[arg-type]
        )
        conn.timekeeper = timekeeper
        await conn._handshake(progress, handshake_timeout)
        try:
            nursery.start_soon(conn._read_loop)
            nursery.start_soon(conn._write_loop)
        except RuntimeError as exc:  # the nursery is closing: so is the client
            conn.session.abort()
            raise closed_while_connecting(progress) from exc
        return conn

    # --- pool hooks ------------------------------------------------------------------------

    @property
    def on_available(self) -> Callable[[], None] | None:
        """Told when the connection takes streams again after a silence made it suspect
        (``contract.DarkWatch``); the pool sets it."""
        return self.session.dark.on_lifted

    @on_available.setter
    def on_available(self, hook: Callable[[], None] | None) -> None:
        self.session.dark.on_lifted = hook

    @property
    def closed(self) -> bool:
        """The connection is over (closed by the client, or died: ``Session.die``)."""
        return self.session.closed

    @property
    def requests(self) -> int:
        """Streams opened on this connection, in all."""
        return self.session.requests

    @property
    def accepted_streams(self) -> int | None:
        """Set on a rotation GOAWAY that refused streams: how many this connection was
        allowed (``Session.goaway``)."""
        return self.session.accepted_streams

    @accepted_streams.setter
    def accepted_streams(self, value: int | None) -> None:
        self.session.accepted_streams = value

    @property
    def timekeeper(self) -> Timekeeper | None:
        """The client's timekeeper (``timekeeper.py``: the limits of this connection's waits),
        set by whoever opened the connection; ``None``: its waits are unbounded."""
        return self.session.timekeeper

    @timekeeper.setter
    def timekeeper(self, timekeeper: Timekeeper | None) -> None:
        self.session.timekeeper = timekeeper

    @property
    def active_streams(self) -> int:
        """Streams the client has not finished with."""
        return len(self.session.streams)

    @property
    def stream_limit(self) -> int:
        """Streams the pool may lend at once: the server's ``SETTINGS_MAX_CONCURRENT_STREAMS``,
        and, under a learned ``request_limit``, no more than the streams open now plus those
        the connection may still take (a stream lent but not yet opened uses one of those)."""
        session = self.session
        limit = session.max_streams
        if self.request_limit is not None:
            limit = min(limit, len(session.streams) + max(0, self.request_limit - session.requests))
        return limit

    def is_available(self) -> bool:
        """Alive, no GOAWAY received, under the learned request limit, and fewer open streams
        than the server allows."""
        session = self.session
        return (
            not session.closed
            and session.goaway_last is None
            and not session.dark.suspect
            and (self.request_limit is None or session.requests < self.request_limit)
            and len(session.streams) < session.max_streams
        )

    def is_reusable(self) -> bool:
        """Worth keeping in the pool: not closed. (After a GOAWAY the connection closes itself
        once its last stream finishes, so "not closed" also covers that case.)"""
        return not self.session.closed

    def peer_closed(self) -> bool:
        """The reader saw the connection end (EOF, reset, GOAWAY with nothing left to finish)."""
        return self.session.closed

    def close(self) -> None:
        """Close (safe to call twice): every open stream fails at once with the evidence of
        its stage; the connection says GOAWAY(NO_ERROR) after the acknowledgements it still
        owes (RFC 9113 §6.8), within ``FIXED.closing`` seconds, then the socket is closed
        and the reader and writer tasks end. No frame of a request not yet handed to the
        transport is sent (those requests are ``NOT_SENT``)."""
        self.session.close()

    def attempt_expired(self, progress: AttemptProgress) -> None:
        """The call deadline of the attempt ``progress`` belongs to passed (the client's
        deadline lane): end that attempt's waits, and only its (``Session.interrupt``)."""
        self.session.interrupt(progress, "the call deadline passed")

    def _dead(self) -> None:
        """The session is over (``Session.die``): the pool forgets the connection."""
        retired, self.on_retired = self.on_retired, None
        if retired is not None:
            retired()

    # --- the request -------------------------------------------------------------------------

    async def send_request(self, request: WireRequest, progress: AttemptProgress) -> WireResponse:
        """Open a stream, write the request, and read up to the final response head (each
        wait for the frames to be written within the write bound, the head within the
        first-byte bound: ``clock.py``).

        Raises :class:`WireError` classified by the stage reached; ``REFUSED_STREAM`` and a
        stream above a GOAWAY's last-stream-id are ``NOT_SENT`` (``progress.proven_not_sent``).
        On cancellation, or any failure, this stream is reset with ``RST_STREAM(CANCEL)`` (its
        frames already queued still leave whole) while the connection and its other streams
        carry on; ``progress`` says what may have been sent.
        """
        progress.http_version = HTTP_VERSION
        session = self.session
        if not session.streams and self._idle.due(self._clock.current_time()):
            await self._idle.check(session, progress, HTTP_VERSION)
        headers = request_headers(
            request,
            scheme=self._scheme,
            authority=self._authority,
            sensitive=NeverIndexedHeaderTuple,
        )
        limit = session.header_limit
        if limit is not None and (size := head_size(headers)) > limit:
            raise WireError.at(
                progress,
                FailureCategory.LOCAL_PROTOCOL,
                f"the request head ({size} bytes) is larger than the server's "
                f"SETTINGS_MAX_HEADER_LIST_SIZE ({limit})",
            )
        body = request.body
        stream = await open_stream(
            session,
            progress,
            headers,
            end_stream=isinstance(body, bytes) and not body,
            head_request=request.method == "HEAD",
        )
        heard = self._idle.last_received  # (the last read before this request)
        try:
            # A request whose frames fit the windows is queued whole and not waited for
            # (``queue_whole``): its task wakes once, for the response. Its frames are the
            # writer's, whose stall bound (``writer.py``) ends a connection that stops reading.
            if not (isinstance(body, bytes) and queue_whole(session, stream, body, progress)):
                await write_body(session, stream, request, progress)
            # The final response head, within the first-byte bound, whose expiry fails the
            # stream. Waited for here, and the bound entered and left by hand, rather than in
            # a coroutine of its own and a `with` statement: those held a frame and the
            # bound's __exit__ method more for each of thousands of streams waiting at once,
            # each visited by every full pass of the garbage collector (issue #41).
            first_byte = stream.bound("first_byte", progress)
            first_byte.__enter__()
            try:
                while stream.head is None:
                    stream.check(progress)
                    await stream.wait()
            except BaseException as exc:
                first_byte.__exit__(type(exc), exc, exc.__traceback__)
                raise
            first_byte.__exit__(None, None, None)
            return response_head(stream)
        except BaseException as exc:
            stream.abandon()
            if self._idle.last_received == heard and gave_up(exc):
                # It waited for its answer and gave up with nothing at all received since it
                # was sent: the connection may have gone dark, and the next request (its
                # retry, a reconciler's look-up) must not wait on it too (``DarkWatch.doubt``).
                session.dark.doubt()
            raise

    # --- the reader and the writer -----------------------------------------------------------

    async def _handshake(self, progress: AttemptProgress, limit: float | None) -> None:
        """Preface and SETTINGS, written by the caller itself: no task exists yet, and
        nothing of a request is at stake (the stage is CONNECT/TLS: ``NOT_SENT``)."""
        session = self.session
        session.h2.initiate_connection()
        session.h2.increment_flow_control_window(CONNECTION_WINDOW - _DEFAULT_WINDOW)
        try:
            # (its limit is tls=, or connect= for h2c: the message names the one that fired)
            which = "handshake" if self._scheme == b"https" else "handshake_h2c"
            with bound(which, None, progress=progress, limit=limit):
                await self._handshake_write()
                while not session.settings_received and not session.closed:
                    await self._receive_once()
                if session.closed:
                    # A connection error's GOAWAY (RFC 9113 §5.4.1), then the close: written
                    # here, as no writer task runs yet (``Writer.farewell``).
                    await session.writer.farewell()
                else:
                    await self._handshake_write()  # our SETTINGS ACK
        except BaseException:
            session.abort()
            raise
        if session.death is None and self._fast_path:
            session.h2.engage()
        if session.death is not None:
            hint = "" if self._scheme == b"https" else " (does the server speak h2c?)"
            raise WireError.at(
                progress,
                session.death.category,
                f"the HTTP/2 handshake failed: {session.death.message}{hint}",
            )

    async def _handshake_write(self) -> None:
        session = self.session
        data = session.h2.data_to_send()
        if data and not session.closed:
            try:
                await self._stream.send_all(data)
            except TRANSPORT_ERRORS as exc:
                session.die(
                    Failure(
                        FailureCategory.CONNECTION_BROKEN,
                        f"connection broke while sending: {exc.__cause__ or exc}",
                    )
                )

    async def _receive_once(self) -> None:
        """Read once and process what arrived; a broken or closed transport kills the
        connection (``Session.die``) rather than raising. The dark-connection watch is armed
        while it waits (``contract.DarkWatch``)."""
        dark = self.session.dark
        dark.waiting()
        try:
            data = self._more(await self._stream.receive_some())
        except TRANSPORT_ERRORS as exc:
            self.session.die(
                Failure(
                    FailureCategory.CONNECTION_BROKEN,
                    f"the connection broke: {exc.__cause__ or exc}",
                )
            )
            return
        if not data:
            self.session.die(
                Failure(FailureCategory.CONNECTION_BROKEN, "the server closed the connection")
            )
            return
        self._idle.last_received = self._clock.current_time()
        dark.received()
        receive(self.session, bytes(data))

    async def _read_loop(self) -> None:
        """The connection's reader task, in the client's nursery, until the connection ends.

        It never raises (an exception would cancel the client's nursery and so the caller):
        whatever ends it — EOF, a reset, a protocol error, a bug, the nursery's cancellation
        when the client closes — fails the open streams with the evidence of their stages and
        closes the connection. Only ``trio.Cancelled`` leaves it, as trio requires.
        """
        session = self.session
        try:
            while not session.closed:
                await self._receive_once()
                session.writer.collect()  # acknowledgements, WINDOW_UPDATEs
        except Exception as exc:  # a bug: fail the streams, never the client's nursery
            session.die(
                Failure(
                    FailureCategory.CONNECTION_BROKEN,
                    f"internal error in the HTTP/2 reader: {exc!r}",
                ),
                ErrorCodes.INTERNAL_ERROR,
            )
        finally:
            session.die(
                Failure(FailureCategory.CONNECTION_BROKEN, "the client closed"),
                ErrorCodes.NO_ERROR,
            )

    async def _write_loop(self) -> None:
        session = self.session
        try:
            await session.writer.run()
        except Exception as exc:  # a bug: fail the streams, never the client's nursery
            session.die(
                Failure(
                    FailureCategory.CONNECTION_BROKEN,
                    f"internal error in the HTTP/2 writer: {exc!r}",
                )
            )
        finally:
            session.die(Failure(FailureCategory.CONNECTION_BROKEN, "the client closed"))

    def __repr__(self) -> str:
        session = self.session
        if session.closed:
            state = "closed"
        elif session.goaway_last is not None:
            state = f"goaway({session.goaway_last})"
        else:
            state = "open"
        return (
            f"<HTTP2Connection {self.origin_key} {state} "
            f"streams={len(session.streams)}/{session.max_streams} requests={session.requests}>"
        )


if TYPE_CHECKING:

    def _keeps_the_contract(conn: HTTP2Connection) -> MultiplexedConnection:
        return conn  # (mypy checks that HTTP2Connection is what the pool needs)
