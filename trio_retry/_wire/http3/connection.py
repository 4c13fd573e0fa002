"""One HTTP/3 connection, as the pool and a request see it: opening, the pool's hooks, the
request path (head, body, the response head), the idle check.

It is a :class:`~.driver.QuicDriver`: the other half of the class, in ``driver.py``, is the
connection's task (the UDP socket, QUIC's timer, what QUIC's events mean). A request writes
into the QUIC state machine synchronously and kicks that task, which sends.

Wire stages, as SPEC §16 maps them: ``DNS``; the UDP socket's connect is ``CONNECT``; the QUIC
handshake is ``TLS``; handing the request's HEADERS to QUIC is ``REQUEST_HEAD`` (from then on a
failure is at least ``SENT_NO_RESPONSE``), its body ``REQUEST_BODY``; the response head
``RESPONSE_HEAD``. Proofs of "not processed": a stream reset with ``H3_REQUEST_REJECTED``, and
a stream at or above a GOAWAY's id (RFC 9114 §5.2, read by ``control.py``); a stream keeps its
own proof whatever happens to the connection afterwards.

Early data (0-RTT): with a ticket that allows it, :meth:`open` returns before the handshake
ends, and a request the attempt marked early-safe (``AttemptProgress.early_ok``, decided by
the call layer from SPEC §16's rule) is handed to QUIC at once; any other request waits for
the handshake. When the handshake ends, each early request learns whether the server accepted
its early data (``AttemptProgress.early_data``). Rejected early data is lost data to QUIC,
which sends it again after the handshake on the same stream (RFC 9001 §4.6.2), so the server
processes the request at most once either way.
"""

from __future__ import annotations

import math
import socket
from collections.abc import AsyncIterable, Callable
from typing import TYPE_CHECKING

import trio

from ..._core.evidence import FailureCategory, Stage
from ..clock import Bound, Clock, limit_of
from ..contract import closed_while_connecting, request_headers, unanswered_ping
from ..exchange import WireRequest, WireResponse, closing_body
from ..progress import AttemptProgress, WireError
from .control import H3_REQUEST_CANCELLED, ControlReader
from .driver import DEFAULT_STREAMS, H3State, QuicDriver
from .stream import HTTP_VERSION, H3Stream

if TYPE_CHECKING:
    from aioquic.h3.connection import H3Connection
    from aioquic.quic.connection import QuicConnection

__all__ = ["HTTP3Connection"]

#: Bytes a streamed upload may have handed to QUIC and not yet seen acknowledged before the
#: caller waits (QUIC itself buffers without limit).
SEND_HIGH_WATER = 1024 * 1024
#: How long a QUIC handshake may take before the attempt goes over TCP instead, when the
#: ``tls`` stage timeout is longer (or unset): UDP that is blocked drops silently, and a
#: caller should not wait the whole TLS timeout to find out.
HANDSHAKE_FALLBACK = 3.0


#: An idle connection (nothing received for this long, no stream open) is checked with a QUIC
#: PING before a request goes on it; an answer must come within PING_TIMEOUT, else the request
#: goes on a new connection, uncounted (as over HTTP/2: a server that silently dropped the
#: connection would otherwise cost the request a first-byte timeout and its evidence).
PING_AFTER_IDLE = 2.0
PING_TIMEOUT = 1.0


class HTTP3Connection(QuicDriver):
    """One QUIC connection carrying many concurrent request streams; see the module
    docstring. Create it with :meth:`open`."""

    http_version = HTTP_VERSION
    multiplexed = True

    def __init__(
        self,
        sock: socket.socket,
        quic: QuicConnection,
        h3: H3Connection,
        origin_key: object,
        *,
        authority: str,
        max_header_bytes: int,
        clock: Clock | None,
    ) -> None:
        self._sock = sock
        self._address = sock.getpeername()
        self._quic = quic
        self._h3 = h3
        self._authority = authority.encode("ascii")
        self._max_header_bytes = max_header_bytes
        self.clock = clock
        self.origin_key = origin_key
        self.expires_at = math.inf
        self.on_retired: Callable[[], None] | None = None
        self.request_limit: int | None = None
        self.accepted_streams: int | None = None
        self.state = H3State.HANDSHAKING
        self.streams: dict[int, H3Stream] = {}
        self.requests = 0
        self._control = ControlReader()
        self._handshake = trio.Event()
        self._handshake_failure: tuple[FailureCategory, str] | None = None
        self._wait_scope: trio.CancelScope | None = None
        self._progressed = trio.Event()  # set by the driver after each round; renewed
        self._max_streams = DEFAULT_STREAMS
        self._last_received = trio.current_time()
        #: Body bytes received and not yet read by their callers (``BUFFER_LIMIT``).
        self.buffered = 0
        self._room = trio.Event()  # set when callers read the buffer down to half the limit
        self._pings_sent = 0
        self._pings_answered = 0
        self._sent_early: dict[int, AttemptProgress] = {}
        #: Called once if the handshake fails (the connector stops trying HTTP/3 there).
        self.on_handshake_failed: Callable[[str], None] | None = None
        #: Called once when the handshake completes.
        self.on_handshake_done: Callable[[], None] | None = None
        #: Whether requests may go in early data before the handshake ends (a ticket allows it).
        self.early_possible = False

    # --- opening ----------------------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        quic: QuicConnection,
        host: str,
        port: int,
        origin_key: object,
        *,
        authority: str,
        max_header_bytes: int,
        nursery: trio.Nursery,
        progress: AttemptProgress,
        clock: Clock | None,
        connect_timeout: float | None,
        handshake_timeout: float | None,
        early: bool,
        on_handshake_failed: Callable[[str], None] | None = None,
        on_handshake_done: Callable[[], None] | None = None,
    ) -> HTTP3Connection:
        """Resolve ``host``, connect a UDP socket, start the QUIC handshake and the driver
        task. Returns once the handshake completed, or at once when ``early`` (a ticket
        allows 0-RTT: requests then decide whether to wait for it). Raises ``WireError``
        (``NOT_SENT``: no request byte exists yet); on cancellation or failure nothing is
        left open or running."""
        from .shims import PushlessH3Connection

        progress.http_version = HTTP_VERSION
        started = trio.current_time()
        progress.advance(Stage.DNS)
        with Bound(clock, "connect", connect_timeout, progress=progress):
            try:
                infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
            except OSError as exc:
                raise WireError.at(
                    progress, FailureCategory.DNS, f"could not resolve {host!r}: {exc}"
                ) from None
            if not infos:
                raise WireError.at(progress, FailureCategory.DNS, f"no address for {host!r}")
            family, _, _, _, address = infos[0]
            progress.advance(Stage.CONNECT)
            sock = socket.socket(family, socket.SOCK_DGRAM)
            sock.setblocking(False)
            try:
                sock.connect(address)  # (UDP: sets the peer, sends nothing, never blocks)
            except OSError as exc:
                sock.close()
                raise WireError.at(
                    progress, FailureCategory.CONNECT, f"UDP connect to {host}:{port}: {exc}"
                ) from None
        progress.timings["connect"] = trio.current_time() - started
        conn = cls(
            sock,
            quic,
            PushlessH3Connection(quic),
            origin_key,
            authority=authority,
            max_header_bytes=max_header_bytes,
            clock=clock,
        )
        conn.on_handshake_failed = on_handshake_failed
        conn.on_handshake_done = on_handshake_done
        progress.advance(Stage.TLS)
        quic.connect(address, now=trio.current_time())
        try:
            nursery.start_soon(conn._drive)
        except RuntimeError as exc:  # the nursery is closing: so is the client
            sock.close()
            raise closed_while_connecting(progress) from exc
        conn.early_possible = early
        if early:
            return conn
        started = trio.current_time()
        try:
            await conn.wait_handshake(progress, handshake_timeout)
        except BaseException:
            conn.close()
            raise
        progress.timings["tls"] = trio.current_time() - started
        return conn

    async def wait_handshake(self, progress: AttemptProgress, limit: float | None) -> None:
        """Wait for the QUIC handshake (within ``limit``, at most :data:`HANDSHAKE_FALLBACK`).
        Raises ``WireError`` (``NOT_SENT`` unless the request went in early data) if it
        failed or took too long; the connection is then closed."""
        if not self._handshake.is_set():
            limit = HANDSHAKE_FALLBACK if limit is None else min(limit, HANDSHAKE_FALLBACK)
            try:
                with Bound(self.clock, "tls", limit, progress=progress):
                    await self._handshake.wait()
            except WireError as exc:
                self._handshake_failed(FailureCategory.TIMEOUT, f"no answer within {limit}s")
                raise WireError.at(
                    progress,
                    FailureCategory.TIMEOUT,
                    f"the QUIC handshake did not complete: {exc}",
                    reconnect=True,
                ) from None
        failure = self._handshake_failure
        if failure is not None:
            # NOT_SENT by its stage (the request waited for the handshake); sent again at once,
            # uncounted, over TCP: the connector stopped trying HTTP/3 at this origin.
            raise WireError.at(
                progress,
                failure[0],
                f"the QUIC handshake failed: {failure[1]}",
                reconnect=True,
            )

    # --- pool hooks -------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self.state is H3State.CLOSED

    @property
    def stream_limit(self) -> int:
        """Streams the pool may lend at once: the server's initial limit on request streams."""
        limit = self._max_streams
        if self.request_limit is not None:
            limit = min(limit, len(self.streams) + max(0, self.request_limit - self.requests))
        return limit

    @property
    def active_streams(self) -> int:
        return len(self.streams)

    def is_available(self) -> bool:
        """Not closed, no GOAWAY, fewer streams than the server allows."""
        return (
            self.state in (H3State.OPEN, H3State.HANDSHAKING)
            and (self.request_limit is None or self.requests < self.request_limit)
            and len(self.streams) < self._max_streams
        )

    def is_reusable(self) -> bool:
        return self.state is not H3State.CLOSED

    def peer_closed(self) -> bool:
        return self.state is H3State.CLOSED

    def attempt_expired(self, progress: AttemptProgress) -> None:
        """The call deadline of ``progress``'s attempt passed: fail its stream (only)."""
        for stream in self.streams.values():
            if stream.progress is progress:
                stream.fail(FailureCategory.TIMEOUT, "the call deadline passed")

    # --- the request ------------------------------------------------------------------------

    async def send_request(self, request: WireRequest, progress: AttemptProgress) -> WireResponse:
        """Open a request stream, write the request, read up to the final response head.

        Before the handshake ends, the request goes in early data only if the attempt marked
        it early-safe; otherwise it waits for the handshake. Raises ``WireError`` classified by
        the stage reached (``H3_REQUEST_REJECTED`` and a stream above a GOAWAY's id are
        ``NOT_SENT``). On cancellation or failure the stream is reset (H3_REQUEST_CANCELLED);
        the connection and its other streams carry on."""
        progress.http_version = HTTP_VERSION
        if (
            self.state is H3State.OPEN
            and not self.streams
            and trio.current_time() - self._last_received >= PING_AFTER_IDLE
        ):
            await self._health_check(progress)
        if self.state is H3State.HANDSHAKING and not (self.early_possible and progress.early_ok):
            clock = self.clock
            await self.wait_handshake(progress, None if clock is None else clock.limits.tls)
        if self.state is not H3State.OPEN and self.state is not H3State.HANDSHAKING:
            raise WireError.at(
                progress,
                FailureCategory.GOAWAY
                if self.state is H3State.DRAINING
                else FailureCategory.CONNECTION_BROKEN,
                "the HTTP/3 connection no longer accepts new streams",
                reconnect=True,
            )
        headers = request_headers(request, scheme=b"https", authority=self._authority)
        quic = self._quic
        stream_id = quic.get_next_available_stream_id()
        stream = H3Stream(self, stream_id, progress)
        self.streams[stream_id] = stream
        self.requests += 1
        body = request.body
        try:
            progress.advance(Stage.REQUEST_HEAD)
            early = self.state is H3State.HANDSHAKING
            if early:
                progress.early_data = "unconfirmed"
                self._sent_early[stream_id] = progress
            self._send(stream, progress, headers, isinstance(body, bytes) and not body)
            if isinstance(body, bytes):
                if body:
                    progress.advance(Stage.REQUEST_BODY)
                    self._send(stream, progress, body, True)
            else:
                await self._stream_body(stream, body, progress)
            progress.advance(Stage.AWAITING_RESPONSE)
            # A 425 to a request sent early is the engine file's (NotConsulted.TOO_EARLY).
            return await stream.receive_head(progress, limit_of(self.clock, "first_byte", progress))
        except BaseException:
            stream.abandon()
            raise

    async def _health_check(self, progress: AttemptProgress) -> None:
        """PING the idle connection; close it if no answer comes within
        :data:`PING_TIMEOUT` (the request was not sent: ``NOT_SENT``, ``reconnect``).
        Concurrent callers share one PING."""
        if self._pings_sent == self._pings_answered:
            self._pings_sent += 1
            self._quic.send_ping(self._pings_sent)
            self._kick()
        wanted = self._pings_sent
        bound = Bound(None, "ping", PING_TIMEOUT, progress=progress)
        try:
            with bound:
                while self._pings_answered < wanted and self.state is not H3State.CLOSED:
                    await self._progressed.wait()
        except WireError:
            if not bound.expired:
                raise
        if self._pings_answered >= wanted:
            return
        self.close()
        raise unanswered_ping(progress, "HTTP/3", PING_TIMEOUT)

    async def _stream_body(self, stream: H3Stream, body: object, progress: AttemptProgress) -> None:
        """Hand a streamed body to QUIC, waiting (within the write bound) while more than
        :data:`SEND_HIGH_WATER` bytes of it are unacknowledged."""
        assert isinstance(body, AsyncIterable)
        clock = self.clock
        limit = None if clock is None else clock.limits.write
        stream_id = stream.stream_id
        async with closing_body(body):
            async for chunk in body:
                if stream.failed:
                    raise stream.error(progress)
                if stream.send_stopped:
                    return  # the server wants no more of it (its response says why)
                if not chunk:
                    continue
                progress.advance(Stage.REQUEST_BODY)
                self._send(stream, progress, bytes(chunk), False)
                while self._unacknowledged(stream_id) > SEND_HIGH_WATER:
                    if stream.failed:
                        raise stream.error(progress)
                    if stream.send_stopped:
                        return
                    # Every waiting upload shares the driver's current event; the driver sets
                    # it after each round and puts a fresh one in its place.
                    with Bound(clock, "write", limit, progress=progress):
                        await self._progressed.wait()
        self._send(stream, progress, b"", True)

    def _send(
        self,
        stream: H3Stream,
        progress: AttemptProgress,
        what: bytes | list[tuple[bytes, bytes]],
        end: bool,
    ) -> None:
        """Hand ``what`` (the head's fields, or body bytes) to HTTP/3 and QUIC, and kick the
        driver. Nothing is handed once the server stopped the stream's sending side (its
        response, or its reset, tells the caller the rest). aioquic refusing it (the stream
        or the connection is over) is this stream's ``WireError``, with the evidence of the
        stage reached: no aioquic exception leaves the connection."""
        if stream.send_stopped:
            return
        try:
            if isinstance(what, bytes):
                self._h3.send_data(stream.stream_id, what, end_stream=end)
            else:
                self._h3.send_headers(stream.stream_id, what, end_stream=end)
        except Exception as exc:
            if stream.failed:
                raise stream.error(progress) from None
            raise WireError.at(
                progress,
                FailureCategory.CONNECTION_BROKEN,
                f"the HTTP/3 stream no longer takes data: {exc!r}",
            ) from None
        progress.bytes_sent = self._handed(stream.stream_id)
        self._kick()

    def _offsets(self, stream_id: int) -> tuple[int, int]:
        """``(acknowledged, handed)``: the offsets in ``stream_id`` up to which the server
        acknowledged what QUIC sent, and up to which we handed bytes (HTTP/3 frames) to QUIC.

        Read from aioquic's stream sender (``_buffer_start``/``_buffer_stop``, the bounds of
        its unacknowledged buffer): aioquic has no public measure of either. A change there
        shows as ``(0, 0)``: no waiting and no byte count, never a hang."""
        stream = getattr(self._quic, "_streams", {}).get(stream_id)
        sender = getattr(stream, "sender", None)
        start = getattr(sender, "_buffer_start", None)
        stop = getattr(sender, "_buffer_stop", None)
        if isinstance(start, int) and isinstance(stop, int):
            return start, stop
        return 0, 0

    def _unacknowledged(self, stream_id: int) -> int:
        """Bytes of ``stream_id`` handed to QUIC and not yet acknowledged by the server."""
        acknowledged, handed = self._offsets(stream_id)
        return handed - acknowledged

    def _handed(self, stream_id: int) -> int:
        """Bytes of ``stream_id`` handed to QUIC so far (``Attempt.bytes_sent``)."""
        return self._offsets(stream_id)[1]

    def finish_stream(self, stream: H3Stream, *, reset: bool) -> None:
        """The caller is done with ``stream``: forget it, resetting it first if ``reset``."""
        if self.streams.pop(stream.stream_id, None) is None:
            return
        self._sent_early.pop(stream.stream_id, None)
        if reset and self.state is not H3State.CLOSED:
            try:
                self._quic.reset_stream(stream.stream_id, H3_REQUEST_CANCELLED)
                self._quic.stop_stream(stream.stream_id, H3_REQUEST_CANCELLED)
            except Exception:
                pass
            self._kick()
        if self.state is H3State.DRAINING and not self.streams:
            self.close()

    def __repr__(self) -> str:
        return (
            f"<HTTP3Connection {self._authority.decode()} {self.state.value}, "
            f"{len(self.streams)} streams>"
        )
