"""HTTP/2 over h2: many streams on one connection, one reader task, one writer task.

An :class:`HTTP2Connection` owns one h2 state machine and one byte stream. Its reader task
feeds every received byte to h2, frame by frame (``frames.py``), and hands the resulting events
to the streams (``stream.py``); its writer task (``writer.py``) is the only one that writes.
Neither raises, so neither can cancel the client's nursery, and a caller only ever waits for its
own stream's events or for its own bytes to be written: a caller's deadline cancels that wait
and nothing else.

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
does not answer is closed and the request goes on a fresh one (``reconnect``), instead of
timing out ambiguously on a dead peer (as Go's ``ReadIdleTimeout`` / ``PingTimeout``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import trio
from h2.errors import ErrorCodes

from ..._core.evidence import FailureCategory, Stage
from ..clock import NO_LIMITS, Bound, Clock
from ..exchange import TRANSPORT_ERRORS, WireRequest, WireResponse
from ..progress import AttemptProgress, WireError
from ..transport import Transport
from .frames import InboundFrames
from .headers import head_size, request_headers
from .hpack_memo import MemoDecoder, MemoEncoder
from .inbound import receive
from .outbound import health_check, open_stream, queue_whole, read_head, write_body
from .stream import Failure, Stream
from .writer import STALL_TIMEOUT, Writer

__all__ = ["PING_AFTER_IDLE", "PING_TIMEOUT", "HTTP2Connection"]

RECEIVE_SIZE = 65536
#: Our SETTINGS_INITIAL_WINDOW_SIZE: how much of one response may be buffered unread.
STREAM_WINDOW = 256 * 1024
#: The connection-level receive window: enough that a few slow readers do not stall the rest.
CONNECTION_WINDOW = 16 * 1024 * 1024
#: A connection that received nothing for this long is PINGed before it gets a new stream ...
PING_AFTER_IDLE = 2.0
#: ... and closed if the answer takes longer than this.
PING_TIMEOUT = 1.0
_DEFAULT_WINDOW = 65535


class HTTP2Connection:
    """One HTTP/2 connection carrying many concurrent streams; see the module docstring.

    Create it with :meth:`open`. ``send_request`` may be called from many tasks at once, up to
    the server's ``SETTINGS_MAX_CONCURRENT_STREAMS`` (callers beyond it wait for a stream to
    finish). The pool learns that the connection died or retired (after a GOAWAY, once its
    last stream finished) through ``on_retired``.
    """

    http_version = "HTTP/2"
    multiplexed = True

    __slots__ = (
        "_authority",
        "_awaiting_head",
        "_capacity",
        "_clock",
        "_death",
        "_goaway_last",
        "_h2",
        "_inbound",
        "_last_read",
        "_max_streams",
        "_nursery",
        "_ping_after_idle",
        "_ping_lot",
        "_ping_timeout",
        "_pings_answered",
        "_pings_sent",
        "_scheme",
        "_settings_received",
        "_socket",
        "_stream",
        "_streams",
        "_writer",
        "accepted_streams",
        "clock",
        "closed",
        "expires_at",
        "on_retired",
        "origin_key",
        "request_limit",
        "requests",
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
        stall_timeout: float = STALL_TIMEOUT,
        ping_after_idle: float | None = PING_AFTER_IDLE,
        ping_timeout: float = PING_TIMEOUT,
    ) -> None:
        self._stream = transport.stream
        self._socket = transport.socket
        # Request headers reach h2 already validated and normalised (``headers.py`` and
        # ``_models.check_header``); inbound headers are validated by ``headers.malformed``,
        # so that a malformed response fails its own stream only.
        config = h2.config.H2Configuration(
            client_side=True,
            header_encoding=None,
            validate_outbound_headers=False,
            normalize_outbound_headers=False,
            validate_inbound_headers=False,
        )
        self._h2 = h2.connection.H2Connection(config=config)
        # hpack's coders, keeping the blocks that repeat (``hpack_memo.py``); replaced before
        # the connection codes its first block.
        self._h2.encoder = MemoEncoder()
        self._h2.decoder = MemoDecoder()
        codes = h2.settings.SettingCodes
        # Set before initiate_connection(), so they are our first SETTINGS and apply at once.
        self._h2.local_settings = h2.settings.Settings(
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
        self._h2.decoder.max_header_list_size = max_header_bytes
        self._scheme = scheme.encode("ascii")
        self._authority = authority.encode("ascii")
        self._nursery = nursery
        self._writer = Writer(
            self._stream, self._h2, self._writer_broken, stall_timeout=stall_timeout
        )
        self._awaiting_head: set[int] = set()
        self._inbound = InboundFrames(self._awaiting_head)
        self._streams: dict[int, Stream] = {}
        self._capacity = trio.lowlevel.ParkingLot()
        self._settings_received = False
        self._goaway_last: int | None = None
        self._death: Failure | None = None
        self._clock = trio.lowlevel.current_clock()
        self._last_read = self._clock.current_time()
        #: The server's SETTINGS_MAX_CONCURRENT_STREAMS, refreshed on every SETTINGS frame
        #: (``inbound.py``); h2's own lookup is several calls, made a few times per request.
        self._max_streams = self._h2.remote_settings.max_concurrent_streams
        self._ping_after_idle = ping_after_idle
        self._ping_timeout = ping_timeout
        self._ping_lot = trio.lowlevel.ParkingLot()
        self._pings_sent = 0
        self._pings_answered = 0
        self.origin_key = origin_key
        self.closed = False
        self.expires_at = math.inf
        self.on_retired: Callable[[], None] | None = None
        self.requests = 0
        #: The client's clock (``clock.py``: the limits of this connection's waits), set by
        #: whoever opened the connection; ``None``: its waits are unbounded.
        self.clock: Clock | None = None
        #: Set by the pool: take no more than this many streams (learned from the origin's
        #: earlier GOAWAY rotations), so a burst is spread instead of refused.
        self.request_limit: int | None = None
        #: Set on a rotation GOAWAY that refused streams: how many this connection was allowed.
        self.accepted_streams: int | None = None

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
        clock: Clock | None = None,
        **options: float | None,
    ) -> HTTP2Connection:
        """Handshake over ``transport``, then start the reader and writer tasks in ``nursery``.

        Sends the preface and our SETTINGS and waits for the server's SETTINGS (so its
        ``MAX_CONCURRENT_STREAMS`` is known before the first stream). Raises :class:`WireError`
        (``NOT_SENT``: no request byte exists yet). On cancellation or failure the transport
        is closed and no task is left behind.
        """
        conn = cls(
            transport,
            origin_key,
            scheme=scheme,
            authority=authority,
            max_header_bytes=max_header_bytes,
            nursery=nursery,
            **options,  # type: ignore[arg-type]
        )
        conn.clock = clock
        await conn._handshake(progress, handshake_timeout)
        try:
            nursery.start_soon(conn._read_loop)
            nursery.start_soon(conn._write_loop)
        except RuntimeError as exc:  # the nursery is closing: so is the client
            conn.close()
            raise WireError.at(
                progress, FailureCategory.ADMISSION, "the client closed while connecting"
            ) from exc
        return conn

    # --- pool hooks ------------------------------------------------------------------------

    @property
    def active_streams(self) -> int:
        """Streams the client has not finished with."""
        return len(self._streams)

    @property
    def stream_limit(self) -> int:
        """Streams the pool may lend at once: the server's ``SETTINGS_MAX_CONCURRENT_STREAMS``,
        and, under a learned ``request_limit``, no more than the streams open now plus those
        the connection may still take (a stream lent but not yet opened uses one of those)."""
        limit = self._max_streams
        if self.request_limit is not None:
            limit = min(limit, len(self._streams) + max(0, self.request_limit - self.requests))
        return limit

    def is_available(self) -> bool:
        """Alive, no GOAWAY received, under the learned request limit, and fewer open streams
        than the server allows."""
        return (
            not self.closed
            and self._goaway_last is None
            and (self.request_limit is None or self.requests < self.request_limit)
            and len(self._streams) < self._max_streams
        )

    def is_reusable(self) -> bool:
        """Worth keeping in the pool: not closed. (After a GOAWAY the connection closes itself
        once its last stream finishes, so "not closed" also covers that case.)"""
        return not self.closed

    def peer_closed(self) -> bool:
        """The reader saw the connection end (EOF, reset, GOAWAY with nothing left to finish)."""
        return self.closed

    def close(self) -> None:
        """Close at once (safe to call twice): every open stream fails with the evidence of
        its stage, the socket is closed, and the reader and writer tasks then end."""
        self._die(
            Failure(FailureCategory.CONNECTION_BROKEN, "the connection was closed by the client")
        )

    def attempt_expired(self, progress: AttemptProgress) -> None:
        """The call deadline of the attempt ``progress`` belongs to passed (the client's
        deadline lane): end that attempt's waits, and only its (:meth:`_interrupt`)."""
        self._interrupt(progress, "the call deadline passed")

    def stage_expired(self, which: str, progress: AttemptProgress) -> None:
        """The write bound of the attempt ``progress`` belongs to ran out (``clock.py``): end
        that attempt's waits, and only its (:meth:`_interrupt`)."""
        self._interrupt(progress, f"the {which} timeout ran out")

    def write_bound(self, progress: AttemptProgress) -> Bound:
        """The bound of one wait of ``progress``'s attempt for its frames to be written."""
        clock = self.clock
        limit = (clock.limits if clock is not None else NO_LIMITS).write
        return Bound(clock, "write", limit, self, progress)

    def _interrupt(self, progress: AttemptProgress, why: str) -> None:
        """A bound of ``progress``'s attempt ran out: end that attempt's waits, and only its;
        the connection and the other streams carry on. Its stream, if it has one, fails with
        a timeout (which wakes it, and resets the stream like any failure); an attempt still
        waiting for a free stream slot, for the idle health check or for its frames to be
        written is woken and sees ``progress.interrupted``. What arrived before stays the
        attempt's: a stream that ended already is not failed (the attempt then succeeds, as
        over a scope that expired after the last byte)."""
        progress.interrupted = True
        for stream in self._streams.values():
            if stream.progress is progress:
                stream.fail(Failure(FailureCategory.TIMEOUT, why))
                break
        self._capacity.unpark_all()
        self._ping_lot.unpark_all()
        self._writer.wake_waiters()

    def _in_use(self) -> int:
        """Streams that count against the server's limit: ours. h2 counts no more (each of
        its open streams is one of ours: a stream leaves ``_streams`` only in
        :meth:`stream_done`, which resets it if h2 still has it open), and its count walks
        every stream; ``tests/wire/test_h2_units.py`` checks the two agree."""
        return len(self._streams)

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
        progress.http_version = self.http_version
        if (
            self._ping_after_idle is not None
            and not self._streams
            and self._clock.current_time() - self._last_read >= self._ping_after_idle
        ):
            await health_check(self, progress)
        headers = request_headers(request, scheme=self._scheme, authority=self._authority)
        limit = self._h2.remote_settings.max_header_list_size
        if limit is not None and (size := head_size(headers)) > limit:
            raise WireError.at(
                progress,
                FailureCategory.LOCAL_PROTOCOL,
                f"the request head ({size} bytes) is larger than the server's "
                f"SETTINGS_MAX_HEADER_LIST_SIZE ({limit})",
            )
        body = request.body
        stream = await open_stream(
            self,
            progress,
            headers,
            end_stream=isinstance(body, bytes) and not body,
            head_request=request.method == "HEAD",
        )
        try:
            # A request whose frames fit the windows is queued whole and not waited for
            # (``queue_whole``): its task wakes once, for the response. Its frames are the
            # writer's, whose stall bound (``writer.py``) ends a connection that stops reading.
            if not (isinstance(body, bytes) and queue_whole(self, stream, body, progress)):
                await write_body(self, stream, request, progress)
            return await read_head(self, stream, progress)
        except BaseException:
            stream.abandon()
            raise

    # --- stream bookkeeping (the StreamOwner protocol) ---------------------------------------

    def consumed(self, stream_id: int, flow_controlled: int) -> None:
        """The client read ``flow_controlled`` bytes: hand the credit back to the server."""
        if flow_controlled and not self.closed:
            try:
                self._h2.acknowledge_received_data(flow_controlled, stream_id)
            except h2.exceptions.ProtocolError:
                return
            self._writer.collect()

    def stream_done(self, stream: Stream, unread: int) -> None:
        """The client is done with ``stream``: reset it if h2 still has it open (interrupted,
        or the response ended before our request did), hand back the credit of ``unread``
        bytes, free its slot."""
        if self._streams.get(stream.stream_id) is stream:
            del self._streams[stream.stream_id]
        self._awaiting_head.discard(stream.stream_id)
        if not self.closed:
            h2_stream = self._h2.streams.get(stream.stream_id)
            reset = h2_stream is not None and not h2_stream.closed
            if reset or unread:
                try:
                    if reset:
                        self._h2.reset_stream(stream.stream_id, ErrorCodes.CANCEL)
                    if unread:
                        # Unread DATA still counts against the connection window: give it back.
                        self._h2.acknowledge_received_data(unread, stream.stream_id)
                except h2.exceptions.ProtocolError:
                    pass  # closed meanwhile: nothing to reset
                self._writer.collect()
        if self._capacity:
            self._capacity.unpark_all()
        if self._goaway_last is not None and not self._streams:
            # The server asked us to go; the last stream it promised to finish has finished.
            self._die(Failure(FailureCategory.GOAWAY, "the server sent GOAWAY", not_sent=True))

    def stream_error(self, stream: Stream, problem: str) -> None:
        """A malformed response is a stream error (RFC 9113 §8.1.1): reset that stream with
        PROTOCOL_ERROR and fail it; the connection and its other streams carry on."""
        self._awaiting_head.discard(stream.stream_id)
        try:
            self._h2.reset_stream(stream.stream_id, ErrorCodes.PROTOCOL_ERROR)
        except h2.exceptions.ProtocolError:
            pass  # already closed on h2's side: nothing to reset
        self._writer.collect()
        stream.fail(
            Failure(
                FailureCategory.REMOTE_PROTOCOL,
                f"the server broke HTTP/2 on stream {stream.stream_id}: a malformed response "
                f"with {problem}",
            )
        )

    def _writer_broken(self, message: str) -> None:
        self._die(Failure(FailureCategory.CONNECTION_BROKEN, message))

    def _die(self, failure: Failure) -> None:
        """The connection is over: fail every open stream, close the socket, tell the pool.

        Idempotent; the first cause is kept (a later "closed by the client" does not hide the
        EOF that really ended it). A stream none of whose bytes the writer had handed to the
        transport is proven ``NOT_SENT``; one already proven so keeps its own failure.
        """
        if self._death is None:
            self._death = failure
        if self.closed:
            return
        self.closed = True
        death = self._death
        handed = self._writer.handed
        self._writer.stop()
        self._socket.close()
        # Never handed to the transport: the connection failed, not the request, so the
        # client may send it again on a fresh connection without counting (``reconnect``).
        unsent = Failure(
            death.category,
            f"{death.message} (before the request was sent)",
            not_sent=True,
            reconnect=True,
        )
        for stream in list(self._streams.values()):
            never_left = (
                handed <= stream.first_offset and stream.progress.stage < Stage.RESPONSE_HEAD
            )
            stream.fail(unsent if never_left else death)
        self._capacity.unpark_all()
        self._ping_lot.unpark_all()
        retired, self.on_retired = self.on_retired, None
        if retired is not None:
            retired()

    # --- the reader and the writer -----------------------------------------------------------

    async def _handshake(self, progress: AttemptProgress, limit: float | None) -> None:
        """Preface and SETTINGS, written by the caller itself: no task exists yet, and
        nothing of a request is at stake (the stage is CONNECT/TLS: ``NOT_SENT``)."""
        self._h2.initiate_connection()
        self._h2.increment_flow_control_window(CONNECTION_WINDOW - _DEFAULT_WINDOW)
        try:
            with Bound(None, "handshake", limit, progress=progress):
                await self._handshake_write()
                while not self._settings_received and not self.closed:
                    await self._receive_once()
                await self._handshake_write()  # our SETTINGS ACK
        except BaseException:
            self.close()
            raise
        if self._death is not None:
            hint = "" if self._scheme == b"https" else " (does the server speak h2c?)"
            raise WireError.at(
                progress,
                self._death.category,
                f"the HTTP/2 handshake failed: {self._death.message}{hint}",
            )

    async def _handshake_write(self) -> None:
        data = self._h2.data_to_send()
        if data and not self.closed:
            try:
                await self._stream.send_all(data)
            except TRANSPORT_ERRORS as exc:
                self._die(
                    Failure(
                        FailureCategory.CONNECTION_BROKEN,
                        f"connection broke while sending: {exc.__cause__ or exc}",
                    )
                )

    async def _receive_once(self) -> None:
        """Read once and process what arrived; a broken or closed transport kills the
        connection (``_die``) rather than raising."""
        try:
            data = await self._stream.receive_some(RECEIVE_SIZE)
        except TRANSPORT_ERRORS as exc:
            self._die(
                Failure(
                    FailureCategory.CONNECTION_BROKEN,
                    f"the connection broke: {exc.__cause__ or exc}",
                )
            )
            return
        if not data:
            self._die(
                Failure(FailureCategory.CONNECTION_BROKEN, "the server closed the connection")
            )
            return
        self._last_read = self._clock.current_time()
        receive(self, bytes(data))

    async def _read_loop(self) -> None:
        """The connection's reader task, in the client's nursery, until the connection ends.

        It never raises (an exception would cancel the client's nursery and so the caller):
        whatever ends it — EOF, a reset, a protocol error, a bug, the nursery's cancellation
        when the client closes — fails the open streams with the evidence of their stages and
        closes the connection. Only ``trio.Cancelled`` leaves it, as trio requires.
        """
        try:
            while not self.closed:
                await self._receive_once()
                self._writer.collect()  # acknowledgements, WINDOW_UPDATEs
        except Exception as exc:  # a bug: fail the streams, never the client's nursery
            self._die(
                Failure(
                    FailureCategory.CONNECTION_BROKEN,
                    f"internal error in the HTTP/2 reader: {exc!r}",
                )
            )
        finally:
            self._die(Failure(FailureCategory.CONNECTION_BROKEN, "the client closed"))

    async def _write_loop(self) -> None:
        try:
            await self._writer.run()
        except Exception as exc:  # a bug: fail the streams, never the client's nursery
            self._die(
                Failure(
                    FailureCategory.CONNECTION_BROKEN,
                    f"internal error in the HTTP/2 writer: {exc!r}",
                )
            )
        finally:
            self._die(Failure(FailureCategory.CONNECTION_BROKEN, "the client closed"))

    def __repr__(self) -> str:
        if self.closed:
            state = "closed"
        elif self._goaway_last is not None:
            state = f"goaway({self._goaway_last})"
        else:
            state = "open"
        limit = self._max_streams
        return (
            f"<HTTP2Connection {self.origin_key} {state} streams={len(self._streams)}/{limit} "
            f"requests={self.requests}>"
        )
