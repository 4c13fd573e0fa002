"""One HTTP/3 connection, as the pool and a request see it: opening, the pool's hooks, the
request path (head, body, the response head), the idle check.

An :class:`HTTP3Connection` holds one :class:`~.driver.QuicDriver` (the UDP socket, QUIC's and
HTTP/3's state, the streams, the connection's one task and timer), as ``HTTP2Connection`` holds
its session. A request writes into the driver's HTTP/3 state machine synchronously, through its
stream's sender (``sending.py``), and the driver sends; it then waits on its own stream
(``stream.py``).

Wire stages, as SPEC §16 maps them: ``DNS``; the UDP socket's connect is ``CONNECT``; the QUIC
handshake is ``TLS``; handing the request's HEADERS to QUIC is ``REQUEST_HEAD`` (from then on a
failure is at least ``SENT_NO_RESPONSE``), its body ``REQUEST_BODY``; the response head
``RESPONSE_HEAD``. Proofs of "not processed": a stream reset with ``H3_REQUEST_REJECTED``, and
a stream at or above a GOAWAY's id (RFC 9114 §5.2, read by ``control.py``); a stream keeps its
own proof whatever happens to the connection afterwards (``contract.Failure``).

Early data (0-RTT): with a ticket that allows it, :meth:`open` returns before the handshake
ends, and a request the attempt marked early-safe (``AttemptProgress.early_ok``, decided by
the call layer from SPEC §16's rule) is handed to QUIC at once; any other request waits for
the handshake. The driver's task starts once the first request is handed over (or waits for
the handshake), so that the first flight carries it in 0-RTT: started at once, it could send
the ClientHello alone, and on a fast path the handshake could be over before the request is
handed (it would then go in 1-RTT; on loopback, in about half the connections). A request is
early data only if QUIC wrote its bytes into 0-RTT packets (``handshake.py``); when the
handshake ends, each such request learns whether the server accepted its early data
(``AttemptProgress.early_data``). Rejected early data is lost data to QUIC, which sends it
again after the handshake on the same stream (RFC 9001 §4.6.2), so the server processes the
request at most once either way.

The handshake's limit (``min(tls, 3 s)``, ``clock.FIXED.quic_handshake``) is the connection's,
kept by the driver's task from its start (``handshake.py``): every request waiting on the
handshake, early or not, whenever it joined, goes over TCP within the same attempt when it
runs out, and the connection takes no new request until its handshake completes (it goes on
in the background: ``on_slow``). A handshake that fails (ICMP unreachable, a refused
certificate) marks the origin (``on_handshake_failed``), and its requests go over TCP as well.
A request that waited is ``NOT_SENT``; one whose bytes went in 0-RTT is ``SENT_NO_RESPONSE``
with ``"unconfirmed"`` early data.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from ..._core.evidence import FailureCategory, Stage
from ..clock import FIXED, bound, limit_of, quic_handshake_limit
from ..contract import (
    Failure,
    MultiplexedConnection,
    closed_while_connecting,
    gave_up,
    request_headers,
)
from ..exchange import WireRequest, WireResponse
from ..progress import AttemptProgress, WireError
from ..timekeeper import Timekeeper
from .driver import H3State, QuicDriver
from .headers import HTTP_VERSION
from .sending import StreamSender
from .stream import H3Stream
from .udp import UdpPaths

if TYPE_CHECKING:
    from .shims import CheckedQuicConnection, PushlessH3Connection

__all__ = ["HTTP3Connection"]


class HTTP3Connection:
    """One QUIC connection carrying many concurrent request streams; see the module
    docstring. Create it with :meth:`open`. What its task and the request path share is
    :attr:`driver`."""

    http_version = HTTP_VERSION
    multiplexed = True
    #: One HTTP/3 connection per origin (RFC 9114 §3.3: clients SHOULD NOT open more than one
    #: to an address and port): the pool queues a burst past the server's stream limit for its
    #: streams instead of opening another, and is told at its GOAWAY (:attr:`on_draining`).
    per_origin = 1

    __slots__ = (
        "_authority",
        "_nursery",
        "accepted_streams",
        "driver",
        "early_possible",
        "expires_at",
        "on_draining",
        "on_retired",
        "origin_key",
        "request_limit",
        "requests",
        "timekeeper",
    )

    def __init__(
        self,
        paths: UdpPaths,
        quic: CheckedQuicConnection,
        h3: PushlessH3Connection,
        origin_key: object,
        *,
        authority: str,
        max_header_bytes: int,
        timekeeper: Timekeeper | None,
        handshake_limit: float = FIXED.quic_handshake,
        on_handshake_failed: Callable[[str], None] | None = None,
        on_handshake_done: Callable[[], None] | None = None,
        on_slow: Callable[[HTTP3Connection], None] | None = None,
    ) -> None:
        self._authority = authority.encode("ascii")
        #: The client's timekeeper (``timekeeper.py``: the limits of this connection's waits).
        self.timekeeper = timekeeper
        #: The connection's state and its task (``driver.py``); it tells :meth:`_dead` when
        #: the connection is over. ``on_handshake_failed`` is told once if the handshake fails
        #: (the connector stops trying HTTP/3 there), ``on_handshake_done`` once it completes,
        #: ``on_slow`` if its limit runs out first (the connector keeps it going; without it,
        #: it is given up).
        self.driver = QuicDriver(
            paths,
            quic,
            h3,
            timekeeper=timekeeper,
            max_header_bytes=max_header_bytes,
            handshake_limit=handshake_limit,
            on_dead=self._dead,
            on_handshake_failed=on_handshake_failed,
            on_handshake_done=on_handshake_done,
            on_draining=self._draining,
            on_slow=None if on_slow is None else lambda: on_slow(self),
        )
        self.origin_key = origin_key
        self.expires_at = math.inf
        self.on_retired: Callable[[], None] | None = None
        #: Set by the pool: told once when a GOAWAY makes the connection drain.
        self.on_draining: Callable[[], None] | None = None
        #: Set by the pool: take no more than this many streams (``MultiplexedConnection``).
        self.request_limit: int | None = None
        self.accepted_streams: int | None = None
        #: Streams opened on this connection, in all.
        self.requests = 0
        #: Whether requests may go in early data before the handshake ends (a ticket allows it).
        self.early_possible = False
        #: Where the driver's task is to run, until it is started (:meth:`_start`).
        self._nursery: trio.Nursery | None = None

    # --- opening ----------------------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        quic: CheckedQuicConnection,
        host: str,
        port: int,
        origin_key: object,
        *,
        authority: str,
        max_header_bytes: int,
        nursery: trio.Nursery,
        progress: AttemptProgress,
        timekeeper: Timekeeper | None,
        connect_timeout: float | None,
        handshake_timeout: float | None,
        early: bool,
        on_handshake_failed: Callable[[str], None] | None = None,
        on_handshake_done: Callable[[], None] | None = None,
        on_slow: Callable[[HTTP3Connection], None] | None = None,
    ) -> HTTP3Connection:
        """Resolve ``host``, open a UDP socket (``udp.py``), start the QUIC handshake and the
        driver task. Returns once the handshake completed, or at once when ``early`` (a ticket
        allows 0-RTT: requests then decide whether to wait for it). Raises ``WireError``
        (``NOT_SENT``: no request byte exists yet); on cancellation or failure nothing is
        left open or running, with one exception: a handshake still going on when the
        fallback limit (:meth:`wait_handshake`) ends the wait is handed to ``on_slow``, if
        given, and keeps going in the background (its outcome reaches
        ``on_handshake_done``/``on_handshake_failed`` as any handshake's), as a browser's
        QUIC attempt races TCP. The rejected alternative, closing it, as before, made a
        handshake that needed 3.5 s under loss mark the origin broken for 5 minutes though
        QUIC works there."""
        from .shims import LimitsUnsupported, client_h3

        progress.http_version = HTTP_VERSION
        try:
            h3 = client_h3(quic, max_header_bytes=max_header_bytes)
        except LimitsUnsupported as exc:  # (before anything is opened or sent)
            if on_handshake_failed is not None:
                on_handshake_failed(str(exc))
            raise WireError.at(
                progress,
                FailureCategory.TLS_HANDSHAKE,
                f"HTTP/3 is not used: {exc}",
                reconnect=True,
            ) from None
        started = trio.current_time()
        progress.advance(Stage.DNS)
        with bound("connect", timekeeper, progress=progress, limit=connect_timeout):
            try:
                infos = await trio.socket.getaddrinfo(host, port, type=trio.socket.SOCK_DGRAM)
            except OSError as exc:
                raise WireError.at(
                    progress, FailureCategory.DNS, f"could not resolve {host!r}: {exc}"
                ) from None
            if not infos:
                raise WireError.at(progress, FailureCategory.DNS, f"no address for {host!r}")
            family, _, _, _, address = infos[0]
            progress.advance(Stage.CONNECT)
            try:
                paths = UdpPaths(family, address)
            except OSError as exc:
                raise WireError.at(
                    progress, FailureCategory.CONNECT, f"UDP socket for {host}:{port}: {exc}"
                ) from None
        progress.timings["connect"] = trio.current_time() - started
        conn = cls(
            paths,
            quic,
            h3,
            origin_key,
            authority=authority,
            max_header_bytes=max_header_bytes,
            timekeeper=timekeeper,
            handshake_limit=quic_handshake_limit(handshake_timeout),
            on_handshake_failed=on_handshake_failed,
            on_handshake_done=on_handshake_done,
            on_slow=on_slow,
        )
        progress.advance(Stage.TLS)
        quic.connect(address, now=trio.current_time())
        conn._nursery = nursery
        conn.early_possible = early
        if early:
            return conn  # (the task starts with the first request: the module docstring)
        started = trio.current_time()
        try:
            conn._start(progress)
            await conn.wait_handshake(progress)
        except WireError:
            if not conn.driver.pending.ran_out:  # (slow, not failed: it goes on, on_slow's)
                conn.close()
            raise
        except BaseException:
            conn.close()
            raise
        progress.timings["tls"] = trio.current_time() - started
        ended_by = conn.driver.ended_by
        if ended_by is not None:  # (the server broke HTTP/3 at once, before any request)
            raise WireError.at(progress, *ended_by)
        return conn

    def _start(self, progress: AttemptProgress) -> None:
        """Start the driver's task, once: the handshake's first flight goes out, and its limit
        counts from now. Raises ``WireError`` (``NOT_SENT``) if the client is closing."""
        nursery, self._nursery = self._nursery, None
        if nursery is None:
            return
        try:
            nursery.start_soon(self.driver.run)
        except RuntimeError as exc:  # the nursery is closing: so is the client
            self.driver.close()
            raise closed_while_connecting(progress) from exc

    async def wait_handshake(self, progress: AttemptProgress) -> None:
        """Wait for the QUIC handshake to end: by its limit at the latest, which the driver's
        task keeps (``min(tls, 3 s)`` from its start, whoever waits and since when). Raises
        ``WireError`` (``NOT_SENT`` by its stage, ``reconnect``: the attempt goes over TCP,
        uncounted) if it failed, or ran out (it then goes on in the background: ``on_slow``)."""
        driver = self.driver
        pending = driver.pending
        await pending.settled.wait()
        if pending.ran_out and driver.handshake_failure is None:
            raise WireError.at(
                progress,
                FailureCategory.TIMEOUT,
                f"the QUIC handshake did not complete: {pending.overdue()} (it goes on "
                "meanwhile; the request goes over TCP)",
                reconnect=True,
            )
        failure = driver.handshake_failure
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
    def on_available(self) -> Callable[[], None] | None:
        """Told when the connection takes streams again after a silence made it suspect
        (``contract.DarkWatch``); the pool sets it."""
        return self.driver.dark.on_lifted

    @on_available.setter
    def on_available(self, hook: Callable[[], None] | None) -> None:
        self.driver.dark.on_lifted = hook

    @property
    def closed(self) -> bool:
        return self.driver.state is H3State.CLOSED

    @property
    def ready(self) -> bool:
        """The handshake completed and the connection takes new streams."""
        return self.driver.state is H3State.OPEN

    @property
    def stream_limit(self) -> int:
        """Streams the pool may lend at once: the server's initial limit on request streams,
        and, under a learned ``request_limit``, no more than the streams open now plus those
        the connection may still take."""
        driver = self.driver
        limit = driver.max_streams
        if self.request_limit is not None:
            limit = min(limit, len(driver.streams) + max(0, self.request_limit - self.requests))
        return limit

    @property
    def active_streams(self) -> int:
        return len(self.driver.streams)

    def is_available(self) -> bool:
        """Not closed, no GOAWAY, fewer streams than the server allows; a handshake still
        going on within its limit (past it, the connection takes no new request)."""
        driver = self.driver
        state = driver.state
        pending = driver.pending
        return (
            (
                state is H3State.OPEN
                or (
                    state is H3State.HANDSHAKING
                    and not pending.ran_out
                    and trio.current_time() < pending.due
                )
            )
            and not driver.dark.suspect
            and (self.request_limit is None or self.requests < self.request_limit)
            and len(driver.streams) < driver.max_streams
        )

    def is_reusable(self) -> bool:
        return self.driver.state is not H3State.CLOSED

    def peer_closed(self) -> bool:
        return self.driver.state is H3State.CLOSED

    def close(self) -> None:
        """Close at once (safe twice): open streams fail with the evidence of their stages,
        QUIC's CONNECTION_CLOSE is sent by the driver's task, which then ends."""
        self.driver.close()

    def attempt_expired(self, progress: AttemptProgress) -> None:
        """The call deadline of ``progress``'s attempt passed: fail its stream (only)."""
        stream = self.driver.attempts.get(progress)
        if stream is not None:
            stream.fail(Failure(FailureCategory.TIMEOUT, "the call deadline passed"))

    def _draining(self) -> None:
        """A GOAWAY made the connection drain (``QuicDriver.goaway``): the pool is told."""
        draining, self.on_draining = self.on_draining, None
        if draining is not None:
            draining()

    def _dead(self) -> None:
        """The driver is over (``QuicDriver.die``): the pool forgets the connection."""
        retired, self.on_retired = self.on_retired, None
        if retired is not None:
            retired()

    # --- the request ------------------------------------------------------------------------

    async def send_request(self, request: WireRequest, progress: AttemptProgress) -> WireResponse:
        """Open a request stream, write the request, read up to the final response head.

        Before the handshake ends, the request goes in early data only if the attempt marked
        it early-safe; otherwise it waits for the handshake. Raises ``WireError`` classified by
        the stage reached (``H3_REQUEST_REJECTED`` and a stream above a GOAWAY's id are
        ``NOT_SENT``). On cancellation or failure the stream is reset (H3_REQUEST_CANCELLED);
        the connection and its other streams carry on."""
        progress.http_version = HTTP_VERSION
        driver = self.driver
        if (
            driver.state is H3State.OPEN
            and not driver.streams
            and driver.idle.due(trio.current_time())
        ):
            await driver.idle.check(driver, progress, HTTP_VERSION)
        if driver.state is H3State.HANDSHAKING and not (self.early_possible and progress.early_ok):
            self._start(progress)
            await self.wait_handshake(progress)
        if driver.pending.ran_out and driver.state is H3State.HANDSHAKING:
            raise WireError.at(  # (taken just as its limit ran out: TCP, as its others)
                progress,
                FailureCategory.TIMEOUT,
                f"the QUIC handshake did not complete: {driver.pending.overdue()}",
                reconnect=True,
            )
        if driver.dark.suspect and driver.state is H3State.OPEN:
            # Silent with requests waiting, PINGed (``contract.DarkWatch``): nothing of this
            # request exists yet; it goes on another connection, uncounted.
            raise WireError.at(
                progress,
                FailureCategory.CONNECTION_BROKEN,
                "the HTTP/3 connection received nothing for a while and takes no new stream "
                "until it answers a PING",
                reconnect=True,
            )
        if driver.state is not H3State.OPEN and driver.state is not H3State.HANDSHAKING:
            raise WireError.at(
                progress,
                FailureCategory.GOAWAY
                if driver.state is H3State.DRAINING
                else FailureCategory.CONNECTION_BROKEN,
                "the HTTP/3 connection no longer accepts new streams",
                reconnect=True,
            )
        headers = request_headers(request, scheme=b"https", authority=self._authority)
        stream = driver.open_stream(progress)
        self.requests += 1
        body = request.body
        early = driver.state is H3State.HANDSHAKING  # (it may go in 0-RTT)
        heard = driver.idle.last_received  # (the last datagram before this request)
        try:
            progress.advance(Stage.REQUEST_HEAD)
            sender = StreamSender(driver, stream, progress)
            sender.send(headers, isinstance(body, bytes) and not body)
            if isinstance(body, bytes):
                if body:
                    progress.advance(Stage.REQUEST_BODY)
                    sender.send(body, True)
            else:
                if early:  # a streamed body waits for the handshake (its head may go early)
                    await self._early_handshake(stream, progress)
                await sender.upload(body)
            progress.advance(Stage.AWAITING_RESPONSE)
            if early:
                await self._early_handshake(stream, progress)
            # A 425 to a request sent early is the engine file's (NotConsulted.TOO_EARLY).
            return await stream.receive_head(
                progress, limit_of(self.timekeeper, "first_byte", progress)
            )
        except BaseException as exc:
            stream.abandon()
            if driver.idle.last_received == heard and driver.state is H3State.OPEN and gave_up(exc):
                # It gave up waiting with not a datagram received since it was sent (not even
                # QUIC's acknowledgement of its bytes): the next request (its retry, a
                # reconciler's look-up) must not wait on it too (``DarkWatch.doubt``).
                driver.dark.doubt()
            raise

    async def _early_handshake(self, stream: H3Stream, progress: AttemptProgress) -> None:
        """A request handed over during the handshake (starting the driver's task, if it is
        the first) waits for the handshake, within the same limit as any other, on its own
        stream: the handshake's end wakes it (``handshake.py``), and so does the stream's
        failure (the call deadline's, too). If the handshake fails or runs out, the stream's
        own failure is raised: ``SENT_NO_RESPONSE`` if its bytes went in 0-RTT, else
        ``NOT_SENT``."""
        self._start(progress)
        handshake = self.driver.handshake
        while not handshake.is_set() and not stream.failed:
            await stream.changed()
        if stream.failed:
            raise stream.error(progress)
        await self.wait_handshake(progress)  # (over: raises the handshake's failure, if any)

    def __repr__(self) -> str:
        driver = self.driver
        return (
            f"<HTTP3Connection {self._authority.decode()} {driver.state.value}, "
            f"{len(driver.streams)} streams>"
        )


if TYPE_CHECKING:

    def _keeps_the_contract(conn: HTTP3Connection) -> MultiplexedConnection:
        return conn  # (mypy checks that HTTP3Connection is what the pool needs)
