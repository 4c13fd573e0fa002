"""One HTTP/3 connection: a QUIC connection (aioquic, sans-IO) driven by one Trio task.

The driver task (:meth:`HTTP3Connection._drive`, in the client's nursery) owns the UDP
socket: it sends what QUIC has to send, waits for a datagram or QUIC's timer (whichever comes
first; the timer is the bound of every wait of QUIC's own), feeds what arrived to QUIC and
HTTP/3, and hands each stream what is its own (``stream.py``). A caller's task never touches
the socket: it writes into the QUIC state machine synchronously and kicks the driver, which
then sends. The obvious alternative, each caller sending its own datagrams, lets two tasks wait
on one socket at once (trio refuses that) and sends QUIC's packets out of order.

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

import enum
import math
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from ..._core.evidence import FailureCategory, Stage
from ..clock import Bound, Clock
from ..exchange import WireRequest, WireResponse, closing_body, head_too_large
from ..progress import AttemptProgress, WireError
from .control import H3_REQUEST_CANCELLED, H3_REQUEST_REJECTED, ControlReader
from .stream import HTTP_VERSION, H3Stream

if TYPE_CHECKING:
    from aioquic.h3.connection import H3Connection
    from aioquic.quic.connection import QuicConnection

__all__ = ["H3State", "HTTP3Connection"]

#: Bytes a streamed upload may have handed to QUIC and not yet seen acknowledged before the
#: caller waits (QUIC itself buffers without limit).
SEND_HIGH_WATER = 1024 * 1024
#: How long a QUIC handshake may take before the attempt goes over TCP instead, when the
#: ``tls`` stage timeout is longer (or unset): UDP that is blocked drops silently, and a
#: caller should not wait the whole TLS timeout to find out.
HANDSHAKE_FALLBACK = 3.0
#: The largest datagram read (QUIC's are at most 1500 bytes on an Ethernet path; 64 KiB covers
#: loopback and GSO-coalesced ones).
_DATAGRAM = 65536
#: An idle connection (nothing received for this long, no stream open) is checked with a QUIC
#: PING before a request goes on it; an answer must come within PING_TIMEOUT, else the request
#: goes on a new connection, uncounted (as over HTTP/2: a server that silently dropped the
#: connection would otherwise cost the request a first-byte timeout and its evidence).
PING_AFTER_IDLE = 2.0
PING_TIMEOUT = 1.0
#: Response body bytes received and not yet read by their callers, across the connection, above
#: which the driver stops reading datagrams until the callers have read half of them. aioquic
#: grants flow-control credit as soon as data is received, not as it is read, so without this a
#: caller reading slower than the network would buffer a whole response. Datagrams then wait in
#: the kernel's socket buffer, and past it are dropped: QUIC's loss recovery and congestion
#: control slow the server down (a pause of the whole connection, which a fast reader of
#: another stream shares).
BUFFER_LIMIT = 16 * 1024 * 1024
#: Datagrams taken from the socket per round of the driver, at most.
_BATCH = 64
#: Streams lent at once when the server's limit is not known yet (before the handshake).
_DEFAULT_STREAMS = 100
#: TLS alerts that mean the certificate was refused (RFC 8446 §6.2): QUIC carries an alert as
#: CRYPTO_ERROR 0x0100 + alert (RFC 9001 §4.8).
_CERTIFICATE_ALERTS = frozenset({42, 43, 44, 45, 46, 48})


class H3State(enum.Enum):
    """The connection's one state (moves: HANDSHAKING -> OPEN -> DRAINING -> CLOSED, or to
    CLOSED from any)."""

    HANDSHAKING = "handshaking"
    OPEN = "open"
    DRAINING = "draining"  # GOAWAY received: no new streams; closed when the last ends
    CLOSED = "closed"


class HTTP3Connection:
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
        self._early_accepted: bool | None = None
        self._death: tuple[FailureCategory, str] | None = None
        self._wait_scope: trio.CancelScope | None = None
        self._progressed = trio.Event()  # set by the driver after each round; renewed
        self._max_streams = _DEFAULT_STREAMS
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
        from aioquic.h3.connection import H3Connection

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
            H3Connection(quic),
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
            raise WireError.at(
                progress, FailureCategory.ADMISSION, "the client closed while connecting"
            ) from exc
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

    def _handshake_failed(self, category: FailureCategory, message: str) -> None:
        if self._handshake_failure is None:
            self._handshake_failure = (category, message)
            callback, self.on_handshake_failed = self.on_handshake_failed, None
            if callback is not None:
                callback(message)
        self._handshake.set()
        self.close()

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

    def close(self) -> None:
        """Close at once (safe twice): open streams fail with the evidence of their stages,
        QUIC's CONNECTION_CLOSE is sent by the driver, which then ends."""
        if self.state is H3State.CLOSED:
            return
        self._die(FailureCategory.CONNECTION_BROKEN, "the connection was closed by the client")
        try:
            self._quic.close(error_code=0x100)  # H3_NO_ERROR
        except Exception:
            pass
        self._kick()

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
        from ..http2.headers import request_headers

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
            clock = self.clock
            # A 425 to a request sent early is the engine file's (NotConsulted.TOO_EARLY).
            return await stream.receive_head(
                progress, None if clock is None else clock.limits.first_byte
            )
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
        raise WireError.at(
            progress,
            FailureCategory.CONNECTION_BROKEN,
            f"the idle HTTP/3 connection did not answer a PING within {PING_TIMEOUT}s; "
            "nothing of the request was sent",
            reconnect=True,
        )

    async def _stream_body(self, stream: H3Stream, body: object, progress: AttemptProgress) -> None:
        """Hand a streamed body to QUIC, waiting (within the write bound) while more than
        :data:`SEND_HIGH_WATER` bytes of it are unacknowledged."""
        from collections.abc import AsyncIterable

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

    def received(self, size: int) -> None:
        """Body bytes arrived for a caller (``BUFFER_LIMIT``)."""
        self.buffered += size
        if self.buffered > BUFFER_LIMIT and self._room.is_set():
            self._room = trio.Event()

    def consumed(self, size: int) -> None:
        """A caller took (or dropped) ``size`` buffered body bytes."""
        self.buffered -= size
        if self.buffered <= BUFFER_LIMIT // 2:
            self._room.set()

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

    # --- the driver task ----------------------------------------------------------------------

    def _kick(self) -> None:
        """Wake the driver so it sends what the state machine has queued."""
        scope = self._wait_scope
        if scope is not None:
            scope.cancel()

    async def _drive(self) -> None:
        """The connection's task: send, wait for datagrams or the timer, process; until the
        connection ends. Never raises but ``Cancelled``: whatever ends it fails the open
        streams with the evidence of their stages and closes the socket.

        The socket is a non-blocking stdlib socket read and written directly after trio says
        it is ready (``wait_readable``/``wait_writable``): every datagram already received is
        taken in one round (up to :data:`_BATCH`) and QUIC's events handled once for all of
        them. Through ``trio.socket``, each datagram cost a checkpoint and a round of the loop:
        a 10 MB download ran at a twentieth of HTTP/2's speed, mostly in that loop."""
        sock = self._sock
        quic = self._quic
        address = self._address
        try:
            while True:
                await self._send_pending()
                if self.state is H3State.CLOSED:
                    return  # (its CONNECTION_CLOSE, if any, has just been sent)
                timer = quic.get_timer()
                with trio.CancelScope(deadline=math.inf if timer is None else timer) as scope:
                    self._wait_scope = scope
                    if self.buffered > BUFFER_LIMIT:
                        await self._room.wait()  # (sends, and QUIC's timer, still go on)
                    else:
                        await trio.lowlevel.wait_readable(sock)
                self._wait_scope = None
                now = trio.current_time()
                for _ in range(_BATCH):
                    try:
                        data = sock.recv(_DATAGRAM)
                    except BlockingIOError:
                        break
                    except OSError as exc:
                        self._lost(exc)
                        break
                    quic.receive_datagram(data, address, now=now)
                    self._last_received = now
                if timer is not None and now >= timer:
                    quic.handle_timer(now=now)
                self._process()
                progressed, self._progressed = self._progressed, trio.Event()
                progressed.set()
        except Exception as exc:  # a bug: fail the streams, never the client's nursery
            self._die(FailureCategory.CONNECTION_BROKEN, f"internal error in HTTP/3: {exc!r}")
        finally:
            self._wait_scope = None
            self._die(FailureCategory.CONNECTION_BROKEN, "the client closed")
            sock.close()

    async def _send_pending(self) -> None:
        """Send every datagram QUIC has ready, waiting for the socket only when it is full."""
        sock = self._sock
        for data, _ in self._quic.datagrams_to_send(now=trio.current_time()):
            while True:
                try:
                    sock.send(data)
                    break
                except BlockingIOError:
                    await trio.lowlevel.wait_writable(sock)
                except OSError as exc:
                    self._lost(exc)
                    return

    def _lost(self, exc: OSError) -> None:
        """The socket failed (an ICMP unreachable on a connected UDP socket, typically)."""
        if self.state is H3State.HANDSHAKING and not self._sent_early:
            self._handshake_failed(FailureCategory.CONNECT, f"UDP: {exc}")
        self._die(FailureCategory.CONNECTION_BROKEN, f"the QUIC connection's socket failed: {exc}")

    def _process(self) -> None:
        """Hand every event QUIC produced to HTTP/3 and to the streams."""
        from aioquic.h3.events import DataReceived, HeadersReceived
        from aioquic.quic.events import (
            ConnectionTerminated,
            HandshakeCompleted,
            PingAcknowledged,
            StopSendingReceived,
            StreamDataReceived,
            StreamReset,
        )

        quic = self._quic
        while (event := quic.next_event()) is not None:
            if isinstance(event, HandshakeCompleted):
                self._handshake_completed(bool(event.early_data_accepted))
            elif isinstance(event, ConnectionTerminated):
                self._terminated(event.error_code, event.reason_phrase)
                continue
            elif isinstance(event, StreamDataReceived) and event.stream_id % 4 == 3:
                goaway = self._control.feed(event.stream_id, event.data)
                if goaway is not None:
                    self._goaway(goaway)
            elif isinstance(event, StreamReset):
                self._reset(event.stream_id, event.error_code)
            elif isinstance(event, PingAcknowledged):
                self._pings_answered = max(self._pings_answered, event.uid)
            elif isinstance(event, StopSendingReceived):
                stopped = self.streams.get(event.stream_id)
                if stopped is not None:
                    stopped.send_stopped = True
            for h3_event in self._h3.handle_event(event):
                stream = self.streams.get(getattr(h3_event, "stream_id", -1))
                if stream is None:
                    continue
                if isinstance(h3_event, HeadersReceived):
                    self._headers(stream, h3_event.headers, h3_event.stream_ended)
                elif isinstance(h3_event, DataReceived):
                    stream.data(h3_event.data, h3_event.stream_ended)

    def _handshake_completed(self, early_accepted: bool) -> None:
        if self.state is H3State.HANDSHAKING:
            self.state = H3State.OPEN
        self._early_accepted = early_accepted
        limit = getattr(self._quic, "_remote_max_streams_bidi", None)
        if isinstance(limit, int) and limit > 0:
            self._max_streams = min(limit, 1000)
        word = "accepted" if early_accepted else "rejected"
        for progress in self._sent_early.values():
            progress.early_data = word
        self._sent_early.clear()
        self._handshake.set()
        self.on_handshake_failed = None
        done, self.on_handshake_done = self.on_handshake_done, None
        if done is not None:
            done()

    def _headers(self, stream: H3Stream, headers: list[tuple[bytes, bytes]], ended: bool) -> None:
        """A HEADERS frame for ``stream``: a final head, an interim one (skipped), or trailers
        (dropped: the head's fields are what a response carries)."""
        if stream.response is not None:
            if ended:
                stream.data(b"", True)
            return
        status: int | None = None
        fields: list[tuple[bytes, bytes]] = []
        size = 0
        for name, value in headers:
            size += len(name) + len(value) + 32
            if name == b":status":
                status = int(value) if value.isdigit() and len(value) == 3 else -1
            elif not name.startswith(b":"):
                fields.append((name, value))
        if size > self._max_header_bytes:
            stream.fail(FailureCategory.REMOTE_PROTOCOL, head_too_large(f"{size} bytes"))
            return
        if status is None or status < 100:
            stream.fail(
                FailureCategory.REMOTE_PROTOCOL,
                "the server sent a response head with no valid :status",
            )
            return
        if status < 200:
            return  # 1xx: the final head follows
        stream.head(WireResponse(status, "", fields, HTTP_VERSION, stream), ended)

    def _reset(self, stream_id: int, code: int) -> None:
        stream = self.streams.get(stream_id)
        if stream is None:
            return
        if code == H3_REQUEST_REJECTED:
            stream.fail(
                FailureCategory.REFUSED_STREAM,
                "the server refused the stream (H3_REQUEST_REJECTED): the request was not "
                "processed",
                not_sent=True,
            )
        else:
            stream.fail(
                FailureCategory.CONNECTION_BROKEN,
                f"the server reset the stream (HTTP/3 error 0x{code:x})",
            )

    def _goaway(self, first_unprocessed: int) -> None:
        """GOAWAY: streams at or above its id were not processed (RFC 9114 §5.2)."""
        if self.state in (H3State.OPEN, H3State.HANDSHAKING):
            self.state = H3State.DRAINING
        for stream_id, stream in list(self.streams.items()):
            if stream_id >= first_unprocessed:
                stream.fail(
                    FailureCategory.GOAWAY,
                    f"the server sent GOAWAY({first_unprocessed}): stream {stream_id} was not "
                    "processed",
                    not_sent=True,
                    reconnect=True,
                )
        # The pool sees it unavailable from now on (DRAINING); it learns that it is gone when
        # the last stream ends and the connection closes (``_die``).
        if not self.streams:
            self.close()

    def _terminated(self, code: int, reason: str) -> None:
        """QUIC's CONNECTION_CLOSE (the peer's, or an idle timeout, or ours)."""
        detail = f"the QUIC connection closed (error 0x{code:x}{': ' + reason if reason else ''})"
        if self.state is H3State.HANDSHAKING:
            alert = code - 0x100
            category = (
                FailureCategory.TLS_CERTIFICATE
                if 0 <= alert < 0x100 and alert in _CERTIFICATE_ALERTS
                else FailureCategory.TLS_HANDSHAKE
            )
            self._handshake_failed(category, detail)
        self._die(FailureCategory.CONNECTION_BROKEN, detail)

    def _die(self, category: FailureCategory, message: str) -> None:
        """The connection is over: fail every open stream, tell the pool once."""
        if self.state is H3State.CLOSED:
            return
        self.state = H3State.CLOSED
        self._death = (category, message)
        if not self._handshake.is_set():
            self._handshake_failure = self._handshake_failure or (
                FailureCategory.TLS_HANDSHAKE,
                message,
            )
            self._handshake.set()
        for stream in list(self.streams.values()):
            stream.fail(category, message)
        self._kick()
        retired, self.on_retired = self.on_retired, None
        if retired is not None:
            retired()

    def __repr__(self) -> str:
        return (
            f"<HTTP3Connection {self._authority.decode()} {self.state.value}, "
            f"{len(self.streams)} streams>"
        )
