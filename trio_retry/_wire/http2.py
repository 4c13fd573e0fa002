"""HTTP/2 over h2: many streams on one connection, one reader task, every stage observed per stream.

Structure. An :class:`HTTP2Connection` owns one h2 state machine and one byte stream. Its single
reader task (started in the client's nursery by :meth:`HTTP2Connection.open`) feeds every
received byte to h2 and hands the resulting events to the streams; it never writes and never
raises, so it cannot stall on a peer that is not reading and cannot cancel the caller. Writes
come from the streams themselves (their request frames) and from short background flushes
(WINDOW_UPDATE, SETTINGS/PING acknowledgements, RST_STREAM of an abandoned stream), one writer
at a time (see :meth:`HTTP2Connection._flush`) around ``data_to_send()`` + ``send_all``: frames
of different streams interleave on the wire only at frame boundaries.

The proof each stream gives (what the client may claim if the attempt breaks there):

- before the HEADERS frame is handed to the transport nothing of this request left
  (``NOT_SENT`` by stage); from then on a break is ``SENT_NO_RESPONSE``;
- ``RST_STREAM(REFUSED_STREAM)`` before any response byte: the server did no processing
  (RFC 9113 §8.7), so ``progress.proven_not_sent`` and category ``REFUSED_STREAM``;
- ``GOAWAY`` whose last-stream-id is below the stream's id: never processed (RFC 9113 §6.8),
  ``proven_not_sent`` and category ``GOAWAY``; the streams at or below it carry on;
- the first response frame moves the stream to ``RESPONSE_HEAD`` (``timings['first_byte']``),
  final headers to ``RESPONSE_BODY`` (a break now is ``PARTIAL_RESPONSE``), the end of the
  body to ``COMPLETE``;
- any other reset or connection failure carries the evidence of the stage reached:
  ``CONNECTION_BROKEN``, or ``REMOTE_PROTOCOL`` when h2 found the peer breaking HTTP/2.

GOAWAY is taken out of the byte stream before h2 sees it (:class:`_GoAwayFilter`): h2 moves
its whole connection to CLOSED on a received GOAWAY and from then on rejects every frame,
including the responses of the streams the GOAWAY promised to finish.

Cancellation. A stream interrupted for any reason (the caller's cancel scope, the call
deadline, a stage timeout, an error) is reset with ``RST_STREAM(CANCEL)``; the connection and
its other streams carry on. A frame is never cut in half: ``send_all`` runs shielded (a partly
written frame would corrupt the connection for every stream, and a cancelled TLS write breaks
the TLS stream), bounded by the caller's deadline plus :data:`SEND_GRACE`. Only when that
bound passes is the connection given up.
"""

from __future__ import annotations

import http
import logging
import math
import re
import struct
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import trio
from h2.errors import ErrorCodes
from hpack import NeverIndexedHeaderTuple

from .._core.evidence import FailureCategory, Stage
from .http11 import WireRequest, WireResponse, closing_body
from .progress import AttemptProgress, WireError, stage_timed_out, stage_timeout
from .transport import Transport

# hpack logs every header it encodes or decodes, values included, at DEBUG ("hpack.hpack"):
# an application that turns DEBUG on for everything would log credentials. Unless that logger
# was configured already, it is held at INFO; `logging.getLogger("hpack").setLevel(
# logging.DEBUG)` turns it back on (docs/reliability.md).
_HPACK_LOG = logging.getLogger("hpack")
if _HPACK_LOG.level == logging.NOTSET:
    _HPACK_LOG.setLevel(logging.INFO)

__all__ = ["HTTP2Connection"]

RECEIVE_SIZE = 65536
#: Our SETTINGS_INITIAL_WINDOW_SIZE: how much of one response may be buffered unread.
STREAM_WINDOW = 256 * 1024
#: The connection-level receive window: enough that a few slow readers do not stall the rest.
CONNECTION_WINDOW = 16 * 1024 * 1024
#: How long a write that has started may outlive the caller's deadline (see the module doc).
SEND_GRACE = 2.0

_GOAWAY_TYPE = 0x7
_FRAME_HEADER = 9
_LENGTH_AND_TYPE = struct.Struct(">I")  # a frame header's first 4 bytes
_GOAWAY_FIELDS = struct.Struct(">III")  # stream id, then a GOAWAY's last-stream-id and code
#: Our SETTINGS_MAX_FRAME_SIZE (h2's default, never raised): the largest frame we accept.
_MAX_FRAME = 16384
_DEFAULT_WINDOW = 65535
#: Connection-specific fields, forbidden in HTTP/2 (RFC 9113 §8.2.2).
_CONNECTION_SPECIFIC = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade"}
)
#: Request fields not forwarded as such: the connection-specific ones, and ``host``, which
#: becomes ``:authority``.
_NOT_FORWARDED = _CONNECTION_SPECIFIC | {b"host"}
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_REASONS = {status.value: status.phrase for status in http.HTTPStatus}
_NEVER_INDEXED = frozenset({b"authorization", b"proxy-authorization"})
#: What a field name may not contain (RFC 9113 §8.2.1): controls, space, upper case, non-ASCII.
_BAD_NAME_BYTE = re.compile(rb"[\x00-\x20\x41-\x5a\x7f-\xff]")
_UPPER_CASE = re.compile(rb"[A-Z]")
_BAD_VALUE_BYTE = re.compile(rb"[\x00\r\n]")


def _malformed(headers: list[tuple[bytes, bytes]], *, trailers: bool) -> str | None:
    """Why a response's header block is malformed (RFC 9113 §8.1.1, §8.2, §8.3), or ``None``.

    Checked here rather than by h2 so that a malformed response is a stream error, as the RFC
    requires: h2 treats it as a connection error, which fails every other stream too.
    """
    regular = False
    status = False
    for name, value in headers:
        if not name:
            return "an empty header name"
        if name[0] == 0x3A:  # ":": a pseudo-header
            if trailers:
                return f"the pseudo-header {name!r} in trailers"
            if regular:
                return f"the pseudo-header {name!r} after a regular header"
            if name != b":status":
                return f"the pseudo-header {name!r} in a response"
            if status:
                return "a duplicate :status pseudo-header"
            if len(value) != 3 or not value.isdigit():
                return f"an invalid :status {value!r}"
            status = True
            continue
        regular = True
        if _BAD_NAME_BYTE.search(name) or b":" in name:
            kind = "an uppercase" if _UPPER_CASE.search(name) else "an invalid"
            return f"{kind} header name {name!r}"
        if value and (
            _BAD_VALUE_BYTE.search(value) or value[0] in (0x20, 0x09) or value[-1] in (0x20, 0x09)
        ):
            return f"an invalid value for header {name!r}"
        if name in _CONNECTION_SPECIFIC:
            return f"the connection-specific header field {name!r}"
        if name == b"te" and value.lower() != b"trailers":
            return f"TE: {value!r} (only 'trailers' is allowed)"
    if not trailers and not status:
        return "no :status pseudo-header"
    return None


@dataclass(frozen=True, slots=True)
class _Failure:
    """Why a stream (or the whole connection) cannot go on; turned into a :class:`WireError`
    by the stream's own task, with the stage *that* task's progress reached."""

    category: FailureCategory
    message: str
    not_sent: bool = False

    def raise_at(self, progress: AttemptProgress) -> None:
        if self.not_sent:
            progress.proven_not_sent = True
        raise WireError.at(progress, self.category, self.message)


class _ConnectionDead(Exception):
    """Internal: a write found (or left) the connection unusable; ``_death`` says why."""


@dataclass(frozen=True, slots=True)
class _GoAway:
    last_stream_id: int
    error_code: int


class _FrameError(Exception):
    """A malformed GOAWAY frame, or a frame larger than we allow (a connection error of the
    peer)."""


class _GoAwayFilter:
    """Splits the inbound bytes at frame boundaries and takes the GOAWAY frames out.

    Every other frame is passed on to h2 as soon as its 9-byte header is known (h2 buffers and
    validates it); only a GOAWAY is held until complete. The order of frames is kept: ``feed``
    returns byte runs and :class:`_GoAway` values in the order they arrived.

    The frame size is checked here, on the header: h2 checks it only once the whole frame has
    arrived, so a peer that is not speaking HTTP/2 at all (an HTTP/1.1 answer reads as a
    4.7 MB frame header) would otherwise hold the connection until a deadline fired.
    """

    __slots__ = ("_buffer", "_passthrough")

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._passthrough = 0  # bytes of the current (non-GOAWAY) frame still to pass on

    def feed(self, data: bytes) -> list[bytes | _GoAway]:
        if not self._buffer and self._passthrough >= len(data):
            # The common case on a download: the middle of a large DATA frame.
            self._passthrough -= len(data)
            return [data]
        if self._buffer:  # an incomplete frame header or GOAWAY from the last read
            self._buffer += data
            data = bytes(self._buffer)
            self._buffer.clear()
        out: list[bytes | _GoAway] = []
        start = pos = 0
        end = len(data)
        while True:
            if self._passthrough:
                take = min(self._passthrough, end - pos)
                pos += take
                self._passthrough -= take
                if self._passthrough:
                    break
            if end - pos < _FRAME_HEADER:
                break
            head = _LENGTH_AND_TYPE.unpack_from(data, pos)[0]  # 24-bit length, 8-bit type
            length = head >> 8
            if length > _MAX_FRAME:
                raise _FrameError(
                    f"the server sent a frame of {length} bytes, more than our "
                    f"SETTINGS_MAX_FRAME_SIZE ({_MAX_FRAME})"
                )
            if head & 0xFF != _GOAWAY_TYPE:
                self._passthrough = _FRAME_HEADER + length
                continue
            if length < 8:
                raise _FrameError(f"the server sent a GOAWAY frame of invalid size {length}")
            if end - pos < _FRAME_HEADER + length:
                break
            stream_id, last, code = _GOAWAY_FIELDS.unpack_from(data, pos + 5)
            if stream_id & 0x7FFFFFFF:
                raise _FrameError("the server sent a GOAWAY frame on a stream")
            if pos > start:
                out.append(data[start:pos])
            out.append(_GoAway(last & 0x7FFFFFFF, code))
            pos = start = pos + _FRAME_HEADER + length
        if pos > start:
            out.append(data if start == 0 and pos == end else data[start:pos])
        if pos < end:
            self._buffer += data[pos:]  # kept until the rest of it arrives
        return out


class _Stream:
    """One request/response exchange on an :class:`HTTP2Connection`; the response's body source.

    The reader task fills it (``on_*``); the attempt's task consumes it and is woken through
    ``changed``. ``progress`` is the attempt's progress while the response head is awaited:
    the reader records the first byte and the final head there as they arrive.
    """

    __slots__ = (
        "_changed",
        "_chunks",
        "_conn",
        "ended",
        "failure",
        "finished",
        "head",
        "progress",
        "stream_id",
    )

    def __init__(self, conn: HTTP2Connection, stream_id: int, progress: AttemptProgress) -> None:
        self._conn = conn
        self.stream_id = stream_id
        self.progress = progress
        self.head: list[tuple[bytes, bytes]] | None = None
        self._chunks: deque[tuple[bytes, int]] = deque()
        self.ended = False
        self.failure: _Failure | None = None
        self.finished = False  # the client is done with it; it no longer counts as open
        self._changed = trio.Event()

    # --- reader side ---------------------------------------------------------------------

    def wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def on_first_byte(self) -> None:
        progress = self.progress
        if "first_byte" not in progress.timings:
            progress.advance(Stage.RESPONSE_HEAD)
            progress.timings["first_byte"] = trio.current_time() - progress.started
        self.wake()

    def on_head(self, headers: list[tuple[bytes, bytes]]) -> None:
        self.on_first_byte()
        self.head = headers
        self.progress.advance(Stage.RESPONSE_BODY)

    def on_data(self, data: bytes, flow_controlled: int) -> None:
        self._chunks.append((data, flow_controlled))
        self.wake()

    def on_end(self) -> None:
        self.ended = True
        self.wake()

    def on_reset(self, code: int, remote: bool) -> None:
        name = _code_name(code)
        if not remote:
            self.fail(
                _Failure(
                    FailureCategory.REMOTE_PROTOCOL,
                    f"the server broke HTTP/2 on stream {self.stream_id} (reset with {name})",
                )
            )
        elif code == ErrorCodes.REFUSED_STREAM and self.progress.stage < Stage.RESPONSE_HEAD:
            # RFC 9113 §8.7: REFUSED_STREAM means no application processing happened. Claimed
            # only before any response byte: a server that answered and then "refused" lied.
            self.fail(
                _Failure(
                    FailureCategory.REFUSED_STREAM,
                    f"the server refused stream {self.stream_id} (RST_STREAM REFUSED_STREAM) "
                    "before processing it",
                    not_sent=True,
                )
            )
        else:
            self.fail(
                _Failure(
                    FailureCategory.CONNECTION_BROKEN,
                    f"the server reset stream {self.stream_id} ({name})",
                )
            )

    def fail(self, failure: _Failure) -> None:
        # A stream whose response already ended keeps it: the whole body is buffered here.
        if self.failure is None and not self.ended:
            self.failure = failure
            self.wake()

    # --- attempt side ----------------------------------------------------------------------

    async def wait(self) -> None:
        await self._changed.wait()

    async def receive_body(self, progress: AttemptProgress, read_limit: float | None) -> bytes:
        """The next body chunk; ``b""`` once the body is complete (stage ``COMPLETE``).

        Reading hands the bytes' flow-control credit back to the server, so an unread body
        holds at most one stream window. Raises :class:`WireError` (``PARTIAL_RESPONSE`` by
        stage) when the stream breaks. On cancellation or any error the stream is reset
        (``CANCEL``) and the connection carries on.
        """
        try:
            with stage_timeout(read_limit) as scope:
                while True:
                    if self._chunks:
                        data, flow_controlled = self._chunks.popleft()
                        self._conn._consumed(self.stream_id, flow_controlled)
                        progress.bytes_received += len(data)
                        if data:
                            return data
                        continue
                    if self.ended:
                        progress.advance(Stage.COMPLETE)
                        self._finish()
                        return b""
                    if self.failure is not None:
                        self.failure.raise_at(progress)
                    if self.finished:
                        raise WireError.at(
                            progress,
                            FailureCategory.CONNECTION_BROKEN,
                            "the response body was abandoned",
                        )
                    await self._changed.wait()
            assert scope.cancelled_caught
            raise stage_timed_out(progress, "read", read_limit)
        except BaseException:
            self.abandon()
            raise

    def abandon(self) -> None:
        """Stop the exchange: reset the stream (``CANCEL``) unless it already ended, give its
        unread bytes' credit back, and free its slot. The connection carries on."""
        if not self.finished:
            self.finished = True
            unread = sum(flow for _, flow in self._chunks)
            self._chunks.clear()
            self._conn._stream_done(self, unread)

    def _finish(self) -> None:
        if not self.finished:
            self.finished = True
            self._conn._stream_done(self, 0)


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
        "_capacity",
        "_death",
        "_filter",
        "_flush_pending",
        "_goaway_last",
        "_h2",
        "_nursery",
        "_outbox",
        "_scheme",
        "_settings_received",
        "_socket",
        "_stream",
        "_streams",
        "_writer_done",
        "_writing",
        "closed",
        "expires_at",
        "on_retired",
        "origin_key",
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
    ) -> None:
        self._stream = transport.stream
        self._socket = transport.socket
        # Request headers reach h2 already validated and normalised (``_request_headers`` and
        # ``_models.check_header``): lower-case names, no surrounding whitespace, no
        # connection-specific fields, pseudo-headers first, credentials never indexed. h2's
        # own outbound passes would do all of that again on every request. Inbound headers are
        # validated by _malformed, so that a malformed response fails its own stream only.
        config = h2.config.H2Configuration(
            client_side=True,
            header_encoding=None,
            validate_outbound_headers=False,
            normalize_outbound_headers=False,
            validate_inbound_headers=False,  # by _malformed, per stream
        )
        self._h2 = h2.connection.H2Connection(config=config)
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
        self._writing = False
        self._writer_done: trio.Event | None = None
        self._outbox = bytearray()
        self._filter = _GoAwayFilter()
        self._streams: dict[int, _Stream] = {}
        self._capacity = trio.Event()
        self._settings_received = False
        self._goaway_last: int | None = None
        self._death: _Failure | None = None
        self._flush_pending = False
        self.origin_key = origin_key
        self.closed = False
        self.expires_at = math.inf
        self.on_retired: Callable[[], None] | None = None
        self.requests = 0

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
    ) -> HTTP2Connection:
        """Handshake over ``transport`` and start the reader task in ``nursery``.

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
        )
        await conn._handshake(progress, handshake_timeout)
        try:
            nursery.start_soon(conn._read_loop)
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
        """The server's ``SETTINGS_MAX_CONCURRENT_STREAMS``: streams the pool lends at once."""
        return self._h2.remote_settings.max_concurrent_streams

    def is_available(self) -> bool:
        """Alive, no GOAWAY received, and fewer open streams than the server allows."""
        return (
            not self.closed
            and self._goaway_last is None
            and self._in_use() < self._h2.remote_settings.max_concurrent_streams
        )

    def is_reusable(self) -> bool:
        """Worth keeping in the pool: not closed. (After a GOAWAY the connection closes itself
        once its last stream finishes, so "not closed" also covers that case.)"""
        return not self.closed

    def peer_closed(self) -> bool:
        """The reader saw the connection end (EOF, reset, GOAWAY with nothing left to finish).

        The reader runs whenever bytes arrive, so this is current up to the last scheduling
        point; no ``poll()`` is needed as for HTTP/1.1, where nobody reads an idle socket.
        """
        return self.closed

    def close(self) -> None:
        """Close at once (safe to call twice): every open stream fails with the evidence of
        its stage, the socket is closed, and the reader task then ends."""
        self._die(
            _Failure(FailureCategory.CONNECTION_BROKEN, "the connection was closed by the client")
        )

    def _in_use(self) -> int:
        # h2 may still count a stream we are done with (e.g. its response ended before our
        # END_STREAM left); h2 refuses new streams above the limit by its own count.
        return max(len(self._streams), self._h2.open_outbound_streams)

    # --- the request -------------------------------------------------------------------------

    async def send_request(
        self,
        request: WireRequest,
        progress: AttemptProgress,
        *,
        write_timeout: float | None = None,
        first_byte_timeout: float | None = None,
    ) -> WireResponse:
        """Open a stream, write the request, and read up to the final response head.

        Raises :class:`WireError` classified by the stage reached; ``REFUSED_STREAM`` and a
        stream above a GOAWAY's last-stream-id are ``NOT_SENT`` (``progress.proven_not_sent``).
        On cancellation, or any failure, this stream is reset with ``RST_STREAM(CANCEL)`` while
        the connection and its other streams carry on; ``progress`` says what may have been
        sent.
        """
        progress.http_version = self.http_version
        headers = self._request_headers(request, progress)
        body = request.body
        stream = await self._open_stream(
            progress, headers, end_stream=isinstance(body, bytes) and not body
        )
        try:
            with stage_timeout(write_timeout) as scope:
                await self._write_body(stream, request, progress)
            if scope.cancelled_caught:
                raise stage_timed_out(progress, "write", write_timeout)
            return await self._read_head(stream, progress, first_byte_timeout)
        except BaseException:
            stream.abandon()
            raise

    def _request_headers(
        self, request: WireRequest, progress: AttemptProgress
    ) -> list[tuple[bytes, bytes]]:
        authority = self._authority
        fields: list[tuple[bytes, bytes]] = []
        has_length = False
        for name, value in request.headers:
            lower = name.lower()
            if lower in _NOT_FORWARDED:
                if lower == b"host" and authority is self._authority:
                    authority = value
                continue
            if lower == b"te" and value.strip().lower() != b"trailers":
                continue  # RFC 9113 §8.2.2: TE may only say "trailers"
            has_length = has_length or lower == b"content-length"
            if lower in _NEVER_INDEXED or (lower == b"cookie" and len(value) < 20):
                # Kept out of HPACK's tables (RFC 7541 §7.1.3), as h2's own normalisation does:
                # a compression oracle could otherwise guess a credential byte by byte.
                fields.append(NeverIndexedHeaderTuple(lower, value))
            else:
                fields.append((lower, value))
        body = request.body
        if not has_length:
            if isinstance(body, bytes):
                if body or request.method in _BODY_METHODS:
                    fields.append((b"content-length", str(len(body)).encode()))
            elif request.content_length is not None:
                fields.append((b"content-length", str(request.content_length).encode()))
        headers = [
            (b":method", request.method.encode("ascii")),
            (b":scheme", self._scheme),
            (b":authority", authority),
            (b":path", request.target.encode("ascii")),
            *fields,
        ]
        limit = self._h2.remote_settings.max_header_list_size
        if limit is not None:
            size = sum(len(name) + len(value) + 32 for name, value in headers)
            if size > limit:
                raise WireError.at(
                    progress,
                    FailureCategory.LOCAL_PROTOCOL,
                    f"the request head ({size} bytes) is larger than the server's "
                    f"SETTINGS_MAX_HEADER_LIST_SIZE ({limit})",
                )
        return headers

    async def _open_stream(
        self, progress: AttemptProgress, headers: list[tuple[bytes, bytes]], *, end_stream: bool
    ) -> _Stream:
        """Wait for a free stream slot, then queue the HEADERS frame (not yet written).

        Allocating the id and queueing HEADERS happen with no await in between: h2 hands out
        the same id until HEADERS are sent, and ids must reach the wire in increasing order.
        """
        while True:
            if self.closed or self._goaway_last is not None:
                # Nothing of this request was written: the stage (POOL) says NOT_SENT.
                category = (
                    FailureCategory.GOAWAY
                    if self._goaway_last is not None
                    else FailureCategory.CONNECTION_BROKEN
                )
                raise WireError.at(
                    progress, category, "the HTTP/2 connection no longer accepts new streams"
                )
            if self._in_use() < self._h2.remote_settings.max_concurrent_streams:
                break
            # The pool hands out a connection with a free slot, but another task may have
            # taken it meanwhile: wait for a stream to finish (bounded by the call deadline).
            await self._capacity.wait()
        try:
            stream_id = self._h2.get_next_available_stream_id()
        except h2.exceptions.NoAvailableStreamIDError as exc:
            # 2**30 streams used: like a GOAWAY from ourselves, finish the others, then retire.
            self._goaway_last = self._h2.highest_outbound_stream_id
            if not self._streams:
                self.close()
            raise WireError.at(
                progress, FailureCategory.GOAWAY, "the HTTP/2 connection ran out of stream ids"
            ) from exc
        self._collect()  # other streams' frames go first and are not counted as ours
        try:
            self._h2.send_headers(stream_id, headers, end_stream=end_stream)
        except h2.exceptions.ProtocolError as exc:
            raise WireError.at(
                progress, FailureCategory.LOCAL_PROTOCOL, f"invalid HTTP/2 request: {exc}"
            ) from exc
        stream = _Stream(self, stream_id, progress)
        self._streams[stream_id] = stream
        self.requests += 1
        return stream

    async def _write_body(
        self, stream: _Stream, request: WireRequest, progress: AttemptProgress
    ) -> None:
        body = request.body
        stream_id = stream.stream_id
        if isinstance(body, bytes):
            if body and len(body) <= self._send_window(stream_id):
                # One write for small requests: the body leaves with the head.
                self._h2.send_data(stream_id, body, end_stream=True)
                await self._send(stream, progress, Stage.REQUEST_BODY)
            else:
                await self._send(stream, progress, Stage.REQUEST_HEAD)
                if body:
                    await self._send_data(stream, progress, body)
                    await self._end_stream(stream, progress)
        else:
            await self._send(stream, progress, Stage.REQUEST_HEAD)
            async with closing_body(body):
                async for chunk in body:
                    if chunk:
                        await self._send_data(stream, progress, bytes(chunk))
            await self._end_stream(stream, progress)
        progress.advance(Stage.AWAITING_RESPONSE)

    def _send_window(self, stream_id: int) -> int:
        try:
            window = self._h2.local_flow_control_window(stream_id)
        except h2.exceptions.ProtocolError:
            return 0
        return min(window, self._h2.max_outbound_frame_size)

    async def _send_data(self, stream: _Stream, progress: AttemptProgress, data: bytes) -> None:
        """Send ``data`` as the server's flow-control windows allow, one frame per write."""
        offset = 0
        while offset < len(data):
            if stream.ended:
                return  # the server already sent its whole response: it wants no more
            size = await self._wait_send_window(stream, progress)
            if not size:
                return
            self._collect()
            try:
                self._h2.send_data(stream.stream_id, data[offset : offset + size])
            except h2.exceptions.ProtocolError as exc:
                self._stream_unusable(stream, progress, exc)
            await self._send(stream, progress, Stage.REQUEST_BODY)
            offset += size

    async def _end_stream(self, stream: _Stream, progress: AttemptProgress) -> None:
        if stream.ended:
            return
        self._collect()
        try:
            self._h2.end_stream(stream.stream_id)
        except h2.exceptions.ProtocolError as exc:
            self._stream_unusable(stream, progress, exc)
        await self._send(stream, progress, Stage.REQUEST_BODY)

    def _stream_unusable(self, stream: _Stream, progress: AttemptProgress, exc: Exception) -> None:
        """h2 refused to send on the stream: it was reset or the connection failed."""
        if stream.failure is not None:
            stream.failure.raise_at(progress)
        if self._death is not None:
            self._death.raise_at(progress)
        raise WireError.at(
            progress, FailureCategory.CONNECTION_BROKEN, f"the stream was closed: {exc}"
        ) from exc

    async def _wait_send_window(self, stream: _Stream, progress: AttemptProgress) -> int:
        """The bytes that may be sent now (``0``: the response ended, stop sending)."""
        while True:
            if stream.failure is not None:
                stream.failure.raise_at(progress)
            if self._death is not None:
                self._death.raise_at(progress)
            if stream.ended:
                return 0
            size = self._send_window(stream.stream_id)
            if size > 0:
                return size
            # Woken by WINDOW_UPDATE (stream or connection), a SETTINGS change, or a failure.
            await stream.wait()

    async def _send(self, stream: _Stream, progress: AttemptProgress, stage: Stage) -> None:
        """The one path for request bytes: advance the stage, then write what h2 queued."""
        size = self._collect()
        progress.advance(stage)
        try:
            await self._flush()
        except _ConnectionDead:
            assert self._death is not None
            self._death.raise_at(progress)
        progress.bytes_sent += size
        if stream.failure is not None:
            stream.failure.raise_at(progress)

    async def _read_head(
        self, stream: _Stream, progress: AttemptProgress, limit: float | None
    ) -> WireResponse:
        with stage_timeout(limit) as scope:
            while stream.head is None:
                if stream.failure is not None:
                    stream.failure.raise_at(progress)
                if stream.ended:
                    raise WireError.at(
                        progress,
                        FailureCategory.REMOTE_PROTOCOL,
                        "the server ended the stream without a response",
                    )
                await stream.wait()
        if scope.cancelled_caught:
            raise stage_timed_out(progress, "first_byte", limit)
        # _malformed let through only heads that start with their one :status, then no other
        # pseudo-header.
        head = stream.head
        status = int(head[0][1])
        headers = head[1:]
        reason = _REASONS.get(status, "")  # HTTP/2 has no reason phrase: the standard one
        return WireResponse(status, reason, headers, self.http_version, stream)

    # --- writing -------------------------------------------------------------------------------

    def _collect(self) -> int:
        """Move what h2 queued into the outbox (in order); return its size."""
        data = self._h2.data_to_send()
        if data:
            self._outbox += data
        return len(data)

    async def _flush(self) -> None:
        """Write the outbox. Raises :class:`_ConnectionDead` if the connection is unusable.

        One task writes at a time, and the writer writes everything queued by anyone (in the
        outbox or still in h2) before it stops: a task that finds a writer busy only waits for
        that run to end, since its own frames, queued before, leave in it. Frames leave in the
        order they were queued. Uncontended, this adds no checkpoint to the write's own.
        """
        if self._writing:
            if self._writer_done is None:
                self._writer_done = trio.Event()
            await self._writer_done.wait()
            if self._death is not None:
                raise _ConnectionDead
            return
        self._writing = True
        try:
            while True:
                if self._death is not None:
                    raise _ConnectionDead
                self._collect()
                if not self._outbox:
                    return
                data = bytes(self._outbox)
                self._outbox.clear()
                await self._write(data)
        finally:
            self._writing = False
            done, self._writer_done = self._writer_done, None
            if done is not None:
                done.set()

    async def _write(self, data: bytes) -> None:
        # Shielded: a frame cut in half would corrupt the connection for every stream, and a
        # cancelled TLS write breaks the TLS stream. Bounded by the caller's own deadline plus
        # SEND_GRACE, so a peer that stops reading cannot hold a cancelled call for long.
        outer = trio.current_effective_deadline()
        if outer == math.inf:  # nothing to bound by: the usual case, and no timer to arm
            scope = trio.CancelScope(shield=True)
        else:
            scope = trio.CancelScope(
                shield=True, deadline=max(outer, trio.current_time()) + SEND_GRACE
            )
        with scope:
            try:
                await self._stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                self._die(
                    _Failure(
                        FailureCategory.CONNECTION_BROKEN,
                        f"connection broke while sending: {exc.__cause__ or exc}",
                    )
                )
                raise _ConnectionDead from exc
        if scope.cancelled_caught:
            self._die(
                _Failure(
                    FailureCategory.CONNECTION_BROKEN,
                    "a write to the server did not finish; the connection was given up",
                )
            )
            raise _ConnectionDead

    def _schedule_flush(self) -> None:
        """Write what h2 queued without waiting here (the reader and sync callers use this)."""
        if self.closed or self._flush_pending:
            return
        self._collect()
        if not self._outbox or self._writing:
            return  # nothing to write, or the lock holder writes it before letting go
        self._flush_pending = True
        try:
            self._nursery.start_soon(self._background_flush)
        except RuntimeError:  # the client's nursery is closing: so is this connection
            self._flush_pending = False

    async def _background_flush(self) -> None:
        try:
            await self._flush()
        except _ConnectionDead:
            pass  # _die() recorded why; the streams have been told
        except Exception as exc:  # never let a bug reach the client's nursery
            self._die(_Failure(FailureCategory.CONNECTION_BROKEN, f"internal error: {exc!r}"))
        finally:
            self._flush_pending = False

    # --- stream bookkeeping ---------------------------------------------------------------------

    def _consumed(self, stream_id: int, flow_controlled: int) -> None:
        """The client read ``flow_controlled`` bytes: hand the credit back to the server."""
        if flow_controlled and not self.closed:
            try:
                self._h2.acknowledge_received_data(flow_controlled, stream_id)
            except h2.exceptions.ProtocolError:
                return
            self._schedule_flush()

    def _stream_done(self, stream: _Stream, unread: int) -> None:
        """The client is done with ``stream``: reset it if h2 still has it open (interrupted,
        or the response ended before our request did), hand back the credit of ``unread``
        bytes, free its slot."""
        if self._streams.get(stream.stream_id) is stream:
            del self._streams[stream.stream_id]
        if not self.closed:
            h2_stream = self._h2.streams.get(stream.stream_id)
            try:
                if h2_stream is not None and not h2_stream.closed:
                    self._h2.reset_stream(stream.stream_id, ErrorCodes.CANCEL)
                if unread:
                    # Unread DATA still counts against the connection window: give it back.
                    self._h2.acknowledge_received_data(unread, stream.stream_id)
            except h2.exceptions.ProtocolError:
                pass  # closed meanwhile: nothing to reset
            self._schedule_flush()
        self._wake_capacity()
        if self._goaway_last is not None and not self._streams:
            # The server asked us to go; the last stream it promised to finish has finished.
            self._die(_Failure(FailureCategory.GOAWAY, "the server sent GOAWAY", not_sent=True))

    def _wake_capacity(self) -> None:
        self._capacity.set()
        self._capacity = trio.Event()

    def _die(self, failure: _Failure) -> None:
        """The connection is over: fail every open stream, close the socket, tell the pool.

        Idempotent; the first cause is kept (a later "closed by the client" does not hide the
        EOF that really ended it).
        """
        if self._death is None:
            self._death = failure
        if self.closed:
            return
        self.closed = True
        self._outbox.clear()
        self._socket.close()
        for stream in list(self._streams.values()):
            stream.fail(self._death)
        self._wake_capacity()
        retired, self.on_retired = self.on_retired, None
        if retired is not None:
            retired()

    # --- reading -------------------------------------------------------------------------------

    async def _handshake(self, progress: AttemptProgress, limit: float | None) -> None:
        self._h2.initiate_connection()
        self._h2.increment_flow_control_window(CONNECTION_WINDOW - _DEFAULT_WINDOW)
        try:
            with stage_timeout(limit) as scope:
                try:
                    await self._flush()
                    while not self._settings_received and not self.closed:
                        await self._receive_once()
                    await self._flush()  # our SETTINGS ACK
                except _ConnectionDead:
                    pass
        except BaseException:
            self.close()
            raise
        if scope.cancelled_caught:
            self.close()
            raise WireError.at(
                progress,
                FailureCategory.TIMEOUT,
                f"the HTTP/2 handshake took longer than {limit}s (the server sent no SETTINGS)",
            )
        if self._death is not None:
            hint = "" if self._scheme == b"https" else " (does the server speak h2c?)"
            raise WireError.at(
                progress,
                self._death.category,
                f"the HTTP/2 handshake failed: {self._death.message}{hint}",
            )

    async def _receive_once(self) -> None:
        """Read once and process what arrived; a broken or closed transport kills the
        connection (``_die``) rather than raising."""
        try:
            data = await self._stream.receive_some(RECEIVE_SIZE)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._die(
                _Failure(
                    FailureCategory.CONNECTION_BROKEN,
                    f"the connection broke: {exc.__cause__ or exc}",
                )
            )
            return
        if not data:
            self._die(
                _Failure(FailureCategory.CONNECTION_BROKEN, "the server closed the connection")
            )
            return
        self._receive(bytes(data))

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
                self._schedule_flush()
        except Exception as exc:  # a bug: fail the streams, never the client's nursery
            self._die(
                _Failure(
                    FailureCategory.CONNECTION_BROKEN,
                    f"internal error in the HTTP/2 reader: {exc!r}",
                )
            )
        finally:
            self._die(_Failure(FailureCategory.CONNECTION_BROKEN, "the client closed"))

    def _receive(self, data: bytes) -> None:
        try:
            parts = self._filter.feed(data)
        except _FrameError as exc:
            self._die(_Failure(FailureCategory.REMOTE_PROTOCOL, str(exc)))
            return
        for part in parts:
            if self.closed:
                return
            if isinstance(part, _GoAway):
                self._on_goaway(part)
                continue
            try:
                events = self._h2.receive_data(part)
            except h2.exceptions.ProtocolError as exc:
                self._die(_Failure(FailureCategory.REMOTE_PROTOCOL, _protocol_message(exc)))
                return
            for event in events:
                self._on_event(event)

    def _on_event(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.DataReceived):
            stream = self._streams.get(event.stream_id or 0)
            data = bytes(event.data or b"")
            flow = event.flow_controlled_length or 0
            if stream is not None:
                stream.on_data(data, flow)
            elif flow:
                self._consumed(event.stream_id or 0, flow)
        elif isinstance(event, h2.events.ResponseReceived):
            headers = [(bytes(n), bytes(v)) for n, v in event.headers or ()]
            problem = _malformed(headers, trailers=False)
            stream = self._streams.get(event.stream_id or 0)
            if problem is not None:
                self._malformed_stream(event.stream_id or 0, problem)
            elif stream is not None:
                stream.on_head(headers)
        elif isinstance(event, h2.events.InformationalResponseReceived):
            headers = [(bytes(n), bytes(v)) for n, v in event.headers or ()]
            problem = _malformed(headers, trailers=False)
            stream = self._streams.get(event.stream_id or 0)
            if problem is not None:
                self._malformed_stream(event.stream_id or 0, problem)
            elif stream is not None:
                stream.on_first_byte()
        elif isinstance(event, h2.events.TrailersReceived):
            headers = [(bytes(n), bytes(v)) for n, v in event.headers or ()]
            problem = _malformed(headers, trailers=True)
            if problem is not None:
                self._malformed_stream(event.stream_id or 0, problem)
        elif isinstance(event, h2.events.StreamEnded):
            stream = self._streams.get(event.stream_id or 0)
            if stream is not None:
                stream.on_end()
        elif isinstance(event, h2.events.StreamReset):
            stream = self._streams.get(event.stream_id or 0)
            if stream is not None:
                stream.on_reset(int(event.error_code or 0), event.remote_reset)
            self._wake_capacity()
        elif isinstance(event, h2.events.WindowUpdated):
            if event.stream_id:
                stream = self._streams.get(event.stream_id)
                if stream is not None:
                    stream.wake()
            else:
                for stream in self._streams.values():
                    stream.wake()
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            # MAX_CONCURRENT_STREAMS and INITIAL_WINDOW_SIZE may have changed.
            self._settings_received = True
            for stream in self._streams.values():
                stream.wake()
            self._wake_capacity()
        elif isinstance(event, h2.events.ConnectionTerminated):  # pragma: no cover - filtered
            self._on_goaway(_GoAway(event.last_stream_id or 0, int(event.error_code or 0)))
        # Pings are answered by h2 itself; priorities, (valid) trailers, ALTSVC and unknown
        # frames change nothing for a client.

    def _malformed_stream(self, stream_id: int, problem: str) -> None:
        """A malformed response is a stream error (RFC 9113 §8.1.1): reset that stream with
        PROTOCOL_ERROR and fail it; the connection and its other streams carry on."""
        try:
            self._h2.reset_stream(stream_id, ErrorCodes.PROTOCOL_ERROR)
        except h2.exceptions.ProtocolError:
            pass  # already closed on h2's side: nothing to reset
        stream = self._streams.get(stream_id)
        if stream is not None:
            stream.fail(
                _Failure(
                    FailureCategory.REMOTE_PROTOCOL,
                    f"the server broke HTTP/2 on stream {stream_id}: a malformed response "
                    f"with {problem}",
                )
            )

    def _on_goaway(self, goaway: _GoAway) -> None:
        last = goaway.last_stream_id
        if self._goaway_last is not None:
            last = min(last, self._goaway_last)  # it may only go down (RFC 9113 §6.8)
        self._goaway_last = last
        code = _code_name(goaway.error_code)
        for stream_id, stream in list(self._streams.items()):
            if stream_id > last:
                stream.fail(
                    _Failure(
                        FailureCategory.GOAWAY,
                        f"the server sent GOAWAY ({code}, last stream {last}): stream "
                        f"{stream_id} was not processed",
                        # Above the last-stream-id the server promises it did nothing; a stream
                        # that already got response bytes proves otherwise, and keeps its stage.
                        not_sent=stream.progress.stage < Stage.RESPONSE_HEAD,
                    )
                )
        self._wake_capacity()
        if not self._streams:
            self._die(_Failure(FailureCategory.GOAWAY, f"the server sent GOAWAY ({code})", True))

    def __repr__(self) -> str:
        if self.closed:
            state = "closed"
        elif self._goaway_last is not None:
            state = f"goaway({self._goaway_last})"
        else:
            state = "open"
        limit = self._h2.remote_settings.max_concurrent_streams
        return (
            f"<HTTP2Connection {self.origin_key} {state} streams={len(self._streams)}/{limit} "
            f"requests={self.requests}>"
        )


def _code_name(code: int) -> str:
    try:
        return ErrorCodes(code).name
    except ValueError:
        return f"error code {code:#x}"


def _protocol_message(exc: h2.exceptions.ProtocolError) -> str:
    if isinstance(exc, h2.exceptions.DenialOfServiceError) and "header" in str(exc).lower():
        return (
            f"the response head is larger than max_header_bytes ({exc}); raise "
            "Client(max_header_bytes=...) if the server legitimately sends large headers"
        )
    return f"the server broke HTTP/2: {exc}"
