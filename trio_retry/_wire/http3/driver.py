"""One QUIC connection's state, its moves, and the one task that drives it.

A :class:`QuicDriver` owns, from its constructor on, everything of one QUIC connection: the
UDP socket, aioquic's QUIC and HTTP/3 state machines, the GOAWAY reader (``control.py``), the
request streams (``stream.py``), the count of body bytes waiting for their callers, the
handshake's outcome, the idle check's PINGs (``contract.IdlePing``) and the one timer. The
connection the pool sees (``connection.py``) holds a driver, as ``HTTP2Connection`` holds its
session: it reads the driver's fields (and writes a request into its HTTP/3 state machine, as
HTTP/2's request side writes into h2's) and changes the connection's state only through the
driver's moves, each with a name (a stream opened, a stream finished, the handshake completed
or failed, a GOAWAY, a stream error, a connection error, the connection's end).

The task (:meth:`QuicDriver.run`, in the client's nursery) owns the socket: it sends what QUIC
has to send, waits for datagrams or QUIC's timer (whichever comes first; the timer is the bound
of every wait of QUIC's own, re-armed after each round), feeds what arrived to QUIC, and
dispatches QUIC's events, then HTTP/3's, in one place (:meth:`QuicDriver._process`): each kind
of event has one function in this module's tables (:data:`_QUIC_EVENTS`, :data:`_H3_EVENTS`),
which works through the driver's fields and moves. A new meaning is a new entry. A caller's
task never touches the socket: it writes into the state machine synchronously and kicks the
task (:meth:`QuicDriver.kick`), which then sends. The obvious alternative, each caller sending
its own datagrams, lets two tasks wait on one socket at once (trio refuses that) and sends
QUIC's packets out of order.

What the connection's end proves: every open stream fails with the evidence of its own stage,
unless it holds a proof of its own already (``contract.Failure``: the first one wins). A
stream error (a malformed response, RFC 9114 §4.1.2) ends its stream alone.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio
from aioquic.h3.events import DataReceived, H3Event, HeadersReceived
from aioquic.quic.events import (
    ConnectionTerminated,
    HandshakeCompleted,
    PingAcknowledged,
    QuicEvent,
    StopSendingReceived,
    StreamDataReceived,
    StreamReset,
)

from ..._core.evidence import FailureCategory
from ..clock import FIXED, closing
from ..contract import DarkWatch, Failure, IdlePing
from ..progress import AttemptProgress
from .codes import (
    CERTIFICATE_ALERTS,
    H3_INTERNAL_ERROR,
    H3_MESSAGE_ERROR,
    H3_NO_ERROR,
    H3_REQUEST_CANCELLED,
    H3_REQUEST_REJECTED,
    H3_STREAM_CREATION_ERROR,
    application_error,
    closed_words,
    tls_alert,
)
from .control import ControlReader
from .frames import FrameRefused
from .handshake import PendingHandshake
from .headers import check_trailers, response_head
from .shims import HandshakeRefused, MalformedResponse
from .stream import H3Stream
from .udp import UdpPaths

if TYPE_CHECKING:
    from aioquic.h3.connection import H3Connection

    from ..clock import Clock
    from .shims import CheckedQuicConnection

__all__ = ["BUFFER_LIMIT", "DEFAULT_STREAMS", "H3State", "QuicDriver"]

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
DEFAULT_STREAMS = 100


class H3State(enum.Enum):
    """The connection's one state (moves: HANDSHAKING -> OPEN -> DRAINING -> CLOSED, or to
    CLOSED from any)."""

    HANDSHAKING = "handshaking"
    OPEN = "open"
    DRAINING = "draining"  # GOAWAY received: no new streams; closed when the last ends
    CLOSED = "closed"


_CLOSED: H3State = H3State.CLOSED  # (typed H3State: compared after moves that change it)


class QuicDriver:
    """One QUIC connection's state and its task; see the module docstring.

    Implements ``stream.StreamOwner`` (its streams report bytes received and read, and their
    end, here) and ``contract.PingPeer`` (the idle check PINGs through it). Read its fields
    freely; change them through its methods.
    """

    __slots__ = (
        "_on_dead",
        "_on_draining",
        "_on_handshake_done",
        "_on_handshake_failed",
        "_room",
        "_wait_scope",
        "attempts",
        "buffered",
        "clock",
        "control",
        "dark",
        "ended_by",
        "h3",
        "handshake",
        "handshake_failure",
        "idle",
        "max_header_bytes",
        "max_streams",
        "paths",
        "pending",
        "progressed",
        "quic",
        "state",
        "streams",
    )

    def __init__(
        self,
        paths: UdpPaths,
        quic: CheckedQuicConnection,
        h3: H3Connection,
        *,
        clock: Clock | None,
        max_header_bytes: int,
        on_dead: Callable[[], None],
        handshake_limit: float = FIXED.quic_handshake,
        on_handshake_failed: Callable[[str], None] | None = None,
        on_handshake_done: Callable[[], None] | None = None,
        on_draining: Callable[[], None] | None = None,
        on_slow: Callable[[], None] | None = None,
    ) -> None:
        #: The UDP socket (``udp.py``: each datagram on the path QUIC chose): only :meth:`run`
        #: reads or writes it.
        self.paths = paths
        self.quic = quic
        self.h3 = h3
        #: The server's GOAWAY, read from its control stream (``control.py``).
        self.control = ControlReader()
        #: The client's clock (``clock.py``): the limits of the waits on this connection's
        #: streams; ``None``: unbounded.
        self.clock = clock
        self.max_header_bytes = max_header_bytes
        self.state = H3State.HANDSHAKING
        #: Why the connection ended (its first cause), once it has.
        self.ended_by: tuple[FailureCategory, str] | None = None
        #: Our request streams by id, until the caller is done with each (:meth:`finish_stream`).
        self.streams: dict[int, H3Stream] = {}
        #: The same streams by the attempt each carries (``attempt_expired`` finds its stream
        #: at once, not by a scan of every stream).
        self.attempts: dict[AttemptProgress, H3Stream] = {}
        #: The server's initial limit on request streams, once the handshake says it.
        self.max_streams = DEFAULT_STREAMS
        #: While the handshake goes on: its limit, the requests handed over (``handshake.py``).
        self.pending = PendingHandshake(handshake_limit, on_slow)
        #: Set once the handshake completed or failed (:attr:`handshake_failure` says which).
        self.handshake = trio.Event()
        self.handshake_failure: tuple[FailureCategory, str] | None = None
        #: Body bytes received and not yet read by their callers (:data:`BUFFER_LIMIT`).
        self.buffered = 0
        self._room = trio.Event()  # set when callers read the buffer down to half the limit
        #: Set by the task after each round, and replaced: what an upload or an idle check
        #: waiting for QUIC's progress waits on.
        self.progressed = trio.Event()
        #: The idle check; the task notes each round that received something there.
        self.idle = IdlePing(trio.current_time())
        #: The dark-connection watch (``contract.DarkWatch``): armed while the task waits,
        #: disarmed by each datagram received.
        self.dark = DarkWatch(self)
        #: The task's one wait (datagrams, or QUIC's timer as its deadline), while it waits.
        self._wait_scope: trio.CancelScope | None = None
        self._on_dead = on_dead
        self._on_handshake_failed = on_handshake_failed
        self._on_handshake_done = on_handshake_done
        self._on_draining = on_draining

    # --- the pool's view ----------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self.state is H3State.CLOSED

    # --- streams ------------------------------------------------------------------------------

    def open_stream(self, progress: AttemptProgress) -> H3Stream:
        """A new request stream for ``progress``'s attempt (nothing of it handed to QUIC yet);
        during the handshake, its request may go in 0-RTT (``handshake.py``)."""
        stream_id = self.quic.get_next_available_stream_id()
        stream = H3Stream(self, stream_id, progress)
        self.streams[stream_id] = stream
        self.attempts[progress] = stream
        if self.state is H3State.HANDSHAKING:
            self.pending.opened(stream)
        return stream

    def received(self, size: int) -> None:
        """Body bytes arrived for a caller (:data:`BUFFER_LIMIT`)."""
        self.buffered += size
        if self.buffered > BUFFER_LIMIT and self._room.is_set():
            self._room = trio.Event()

    def consumed(self, size: int) -> None:
        """A caller took (or dropped) ``size`` buffered body bytes."""
        self.buffered -= size
        if self.buffered <= BUFFER_LIMIT // 2:
            self._room.set()

    def finish_stream(self, stream: H3Stream, *, reset: bool) -> None:
        """The caller is done with ``stream``: forget it, resetting it first if ``reset``
        (H3_REQUEST_CANCELLED); a draining connection closes with its last stream."""
        if self.streams.pop(stream.stream_id, None) is None:
            return
        if self.attempts.get(stream.progress) is stream:
            del self.attempts[stream.progress]
        self.pending.forget(stream.stream_id)
        if reset and self.state is not H3State.CLOSED:
            try:
                self.quic.reset_stream(stream.stream_id, H3_REQUEST_CANCELLED)
                self.quic.stop_stream(stream.stream_id, H3_REQUEST_CANCELLED)
            except Exception:
                pass
            self.kick()
        if self.state is H3State.DRAINING and not self.streams:
            self.close()

    # --- the idle check's PING (``contract.PingPeer``) ------------------------------------------

    def send_ping(self, uid: int) -> None:
        self.quic.send_ping(uid)
        self.kick()

    async def ping_wait(self) -> None:
        """Until the task's next round (an answer is reported then, as the connection's end)."""
        await self.progressed.wait()

    def ping_unanswered(self, message: str) -> None:
        self.close()

    # --- the dark-connection watch (``contract.DarkPeer``) --------------------------------------

    def busy(self) -> bool:
        """A request waits for the server. (QUIC acknowledges every packet it takes, so a
        peer that reads our data slowly is not silent: any datagram counts.)"""
        return bool(self.streams)

    def gone_dark(self, message: str) -> None:
        """Nothing arrived, not even the answer to a PING: close the connection; its streams
        fail with the evidence of their stages."""
        self.die(FailureCategory.CONNECTION_BROKEN, message)
        try:
            self.quic.close(error_code=H3_NO_ERROR)
        except Exception:
            pass
        self.kick()

    # --- the handshake, GOAWAY and the end --------------------------------------------------------

    def handshake_completed(self, early_accepted: bool) -> None:
        """The handshake is done: the connection is open, the server's stream limit known,
        and each request sent in early data learns whether the server accepted it."""
        if self.state is H3State.HANDSHAKING:
            self.state = H3State.OPEN
        # The server's initial MAX_STREAMS for request streams: aioquic keeps it in a private
        # attribute and has no getter; if it is gone, DEFAULT_STREAMS stays the limit (aioquic
        # holds back a stream beyond the server's limit itself, so nothing breaks).
        limit = getattr(self.quic, "_remote_max_streams_bidi", None)
        if isinstance(limit, int) and limit > 0:
            self.max_streams = min(limit, 1000)
        self.pending.completed(early_accepted)
        self.handshake.set()
        self._on_handshake_failed = None
        done, self._on_handshake_done = self._on_handshake_done, None
        if done is not None:
            done()

    def handshake_failed(self, category: FailureCategory, message: str) -> None:
        """The handshake failed (the first cause is kept, and the connector told once): every
        request waiting for it fails (``handshake.py``), and the connection closes."""
        if self.handshake_failure is None:
            self.handshake_failure = (category, message)
            callback, self._on_handshake_failed = self._on_handshake_failed, None
            if callback is not None:
                callback(message)
        self.pending.failed(category, f"the QUIC handshake failed: {message}")
        self.handshake.set()
        self.close()

    def goaway(self, first_unprocessed: int) -> None:
        """GOAWAY: the connection takes no new stream, and the streams at or above its id were
        not processed (RFC 9114 §5.2): ``NOT_SENT``, sent again on a fresh connection."""
        if self.state in (H3State.OPEN, H3State.HANDSHAKING):
            self.state = H3State.DRAINING
            draining, self._on_draining = self._on_draining, None
            if draining is not None:
                draining()  # (the pool: its successor may open now)
        for stream_id, stream in list(self.streams.items()):
            if stream_id >= first_unprocessed:
                stream.fail(
                    Failure(
                        FailureCategory.GOAWAY,
                        f"the server sent GOAWAY({first_unprocessed}): stream {stream_id} was "
                        "not processed",
                        not_sent=True,
                        reconnect=True,
                    )
                )
        # The pool sees it unavailable from now on (DRAINING); it learns that it is gone when
        # the last stream ends and the connection closes (``die``).
        if not self.streams:
            self.close()

    def stream_error(self, stream: H3Stream, code: int, message: str) -> None:
        """A stream error (RFC 9114 §8): the stream is reset and its reading stopped with
        ``code``, its caller fails (``REMOTE_PROTOCOL``, with the evidence of its stage), and
        the connection forgets it (the caller's end of it resets nothing more); the other
        streams carry on."""
        stream.fail(Failure(FailureCategory.REMOTE_PROTOCOL, message))
        stream_id = stream.stream_id
        if self.streams.pop(stream_id, None) is None:
            return
        self.pending.forget(stream_id)
        for end in (self.quic.reset_stream, self.quic.stop_stream):
            try:
                end(stream_id, code)
            except ValueError:
                pass  # (aioquic forgot a stream that ended both ways: nothing is left to end)
        self.kick()
        if self.state is H3State.DRAINING and not self.streams:
            self.close()

    def connection_error(self, code: int, message: str) -> None:
        """The server broke HTTP/3 on the connection itself: every open stream fails
        (``REMOTE_PROTOCOL``, with the evidence of its stage; a stream's own proof stays) and
        QUIC's CONNECTION_CLOSE carries ``code``."""
        self.die(FailureCategory.REMOTE_PROTOCOL, message)
        try:
            self.quic.close(error_code=code, reason_phrase=message)
        except Exception:
            pass

    def close(self) -> None:
        """Close at once (safe twice): open streams fail with the evidence of their stages,
        QUIC's CONNECTION_CLOSE is sent by the task, which then ends."""
        if self.state is H3State.CLOSED:
            return
        self.die(FailureCategory.CONNECTION_BROKEN, "the connection was closed by the client")
        if not self.pending.started:  # the task never started: nothing was sent
            return self.paths.close()
        try:
            self.quic.close(error_code=H3_NO_ERROR)
        except Exception:
            pass
        self.kick()

    def die(self, category: FailureCategory, message: str) -> None:
        """The connection is over: fail every open stream, tell the owner once (``on_dead``).
        A handshake still going on fails with it."""
        if self.state is H3State.CLOSED:
            return
        self.state = H3State.CLOSED
        self.dark.stop()
        self.ended_by = (category, message)
        if not self.handshake.is_set():
            # A connection that ends before its handshake completed is a failed handshake,
            # whatever ended it: the connector is told (a handshake going on in the background
            # must not leave its origin waiting for an outcome).
            self.handshake_failure = self.handshake_failure or (
                FailureCategory.TLS_HANDSHAKE,
                message,
            )
            self.handshake.set()
            self.pending.ended()
            failed, self._on_handshake_failed = self._on_handshake_failed, None
            if failed is not None:
                failed(message)
        failure = Failure(category, message)
        for stream in list(self.streams.values()):
            stream.fail(failure)
        self.kick()
        self._on_dead()

    # --- the one dispatch of aioquic's events ----------------------------------------------------

    def _process(self) -> None:
        """Dispatch every event QUIC produced (:data:`_QUIC_EVENTS`), then hand each to HTTP/3
        and dispatch what it made of it (:data:`_H3_EVENTS`): the one place where aioquic's
        events are handled. An event of a kind with no entry changes nothing here, nor one its
        entry keeps (returning ``False``) HTTP/3; once the connection is closed no event does
        (a handshake the client refused must not complete afterwards)."""
        if self.state is H3State.CLOSED:
            return
        quic = self.quic
        while (event := quic.next_event()) is not None:
            handler = _QUIC_EVENTS.get(type(event))
            kept = handler is not None and handler(self, event) is False
            if not kept and type(event) not in _NOT_FOR_H3:
                self.to_h3(event)
            if self.state is _CLOSED:
                return  # (what else QUIC made of the datagrams is not read)
        # aioquic's HTTP/3 found the server broke HTTP/3 or QPACK, and asked QUIC to close (an
        # application close, sent next; it hands on no event after that): every stream fails
        # now (``REMOTE_PROTOCOL``), not once QUIC's closing period is over.
        asked = quic.close_asked
        if asked is not None and asked[1] is None:
            words = closed_words(asked[0], None, asked[2])
            self.die(FailureCategory.REMOTE_PROTOCOL, f"the server broke HTTP/3 ({words})")

    def to_h3(self, event: QuicEvent) -> None:
        """Hand ``event`` to HTTP/3 and dispatch what it made of it (:data:`_H3_EVENTS`)."""
        for h3_event in self.h3.handle_event(event):
            h3_handler = _H3_EVENTS.get(type(h3_event))
            if h3_handler is not None:
                h3_handler(self, h3_event)

    # --- the task -------------------------------------------------------------------------------

    def kick(self) -> None:
        """Wake the task so it sends what the state machine has queued."""
        scope = self._wait_scope
        if scope is not None:
            scope.cancel()

    async def run(self) -> None:
        """The connection's task: send, wait for datagrams or the timer, process; until the
        connection ends. Never raises but ``Cancelled``: whatever ends it fails the open
        streams with the evidence of their stages and closes the socket.

        The socket is a non-blocking stdlib socket read and written directly after trio says
        it is ready (``wait_readable``/``wait_writable``): every datagram already received is
        taken in one round (up to :data:`_BATCH`) and QUIC's events handled once for all of
        them. Through ``trio.socket``, each datagram cost a checkpoint and a round of the loop:
        a 10 MB download ran at a twentieth of HTTP/2's speed, mostly in that loop. Each
        datagram goes on the path QUIC chose (``udp.py``).

        However it ends (the connection closed, or the client's nursery cancelled as the client
        exits), its last act is to send QUIC's CONNECTION_CLOSE (:meth:`_last_words`): without
        it the server keeps the connection, and probes it, until its idle timeout."""
        paths = self.paths
        sock = paths.sock
        quic = self.quic
        pending = self.pending
        pending.start(trio.current_time())
        try:
            while True:
                await self._send_pending()
                if self.state is H3State.CLOSED:
                    return  # (its CONNECTION_CLOSE, if any, has just been sent)
                timer = quic.get_timer()
                wake = min(pending.due, math.inf if timer is None else timer)  # (its limit)
                with trio.CancelScope(deadline=wake) as scope:
                    self._wait_scope = scope
                    self.dark.waiting()
                    if self.buffered > BUFFER_LIMIT:
                        await self._room.wait()  # (sends, and QUIC's timer, still go on)
                    else:
                        await trio.lowlevel.wait_readable(sock)
                self._wait_scope = None
                now = trio.current_time()
                for taken in range(_BATCH):
                    try:
                        data, address = paths.receive()
                    except BlockingIOError:
                        if taken == 0 and not scope.cancelled_caught:
                            self._bounced(None)  # readable with nothing to read: errors queued
                        break
                    except OSError as exc:
                        self._bounced(exc)
                        break
                    try:
                        quic.receive_datagram(data, address, now=now)
                    except Exception as exc:  # the client refused the server, or aioquic broke
                        self._unreadable(exc)
                        break
                    self.idle.last_received = now
                    self.dark.received()
                if timer is not None and now >= timer:
                    quic.handle_timer(now=now)
                self._process()
                if self.state is H3State.HANDSHAKING and now >= pending.due:
                    if not pending.run_out():  # (kept going, or given up: ``handshake.py``)
                        self.handshake_failed(FailureCategory.TIMEOUT, pending.overdue())
                # (Wakes the uploads waiting for QUIC's progress, and idle checks: O(those) per
                # round, never O(streams): a stream waiting for its response waits on its own.)
                progressed, self.progressed = self.progressed, trio.Event()
                progressed.set()
        except Exception as exc:  # a bug: fail the streams, never the client's nursery
            self.die(FailureCategory.CONNECTION_BROKEN, f"internal error in HTTP/3: {exc!r}")
        finally:
            self._wait_scope = None
            self.die(FailureCategory.CONNECTION_BROKEN, "the client closed")
            await self._last_words()
            paths.close()

    async def _send_pending(self) -> None:
        """Send every datagram QUIC has ready, each on its path (noting what went in 0-RTT,
        ``handshake.py``), waiting for the socket only when it is full."""
        paths = self.paths
        datagrams = self.quic.datagrams_to_send(now=trio.current_time())
        self.pending.written(self.quic)
        for data, address in datagrams:
            while True:
                try:
                    paths.send(data, address)
                    break
                except BlockingIOError:
                    await trio.lowlevel.wait_writable(paths.sock)
                except OSError as exc:
                    self._bounced(exc)
                    if self.state is H3State.CLOSED:
                        return
                    break  # (a path QUIC only probes: QUIC gives it up by itself)

    async def _last_words(self) -> None:
        """QUIC's CONNECTION_CLOSE, sent as the task ends however it ends (H3_NO_ERROR unless
        a close with a reason is already under way): at once, for a socket that takes it, or
        within ``clock.closing()``'s bound under a shield (the task may be ending because the
        client's nursery was cancelled). A close that cannot be sent is the server's idle
        timeout, as before."""
        quic = self.quic
        paths = self.paths
        try:
            quic.close(error_code=H3_NO_ERROR)  # (nothing if one is under way, or it is over)
            datagrams = quic.datagrams_to_send(now=trio.current_time())
        except Exception:
            return
        with closing():
            for data, address in datagrams:
                while True:
                    try:
                        paths.send(data, address)
                        break
                    except BlockingIOError:
                        await trio.lowlevel.wait_writable(paths.sock)
                    except OSError:
                        return

    def _bounced(self, exc: OSError | None) -> None:
        """The socket reported an error (``exc``), or has errors queued (``None``): an ICMP
        error for a datagram sent. One for the connection's path (or, where the system does
        not say which, any) loses the connection (:meth:`_lost`); one for a path QUIC was only
        probing (a server's preferred address) is QUIC's to give up (``udp.py``)."""
        bounced = self.paths.refused()
        if bounced is None:
            if exc is not None:
                self._lost(exc)
            return
        current = self.quic.get_peer_address()
        if any(address == current for address in bounced) or (exc is not None and not bounced):
            self._lost(exc or ConnectionRefusedError("ICMP: the server's UDP port is closed"))

    def _lost(self, exc: OSError) -> None:
        """The socket failed (ICMP unreachable, typically): during the handshake, its failure,
        early data or not (the origin is then reached over TCP)."""
        if self.state is H3State.HANDSHAKING:
            self.handshake_failed(FailureCategory.CONNECT, f"UDP: {exc}")
        self.die(FailureCategory.CONNECTION_BROKEN, f"the QUIC connection's socket failed: {exc}")

    def _unreadable(self, exc: Exception) -> None:
        """``receive_datagram`` raised: the client's check refused the server
        (``shims.HandshakeRefused``), or aioquic failed on what arrived. During the handshake
        that is the handshake's failure (the origin is then reached over TCP); after it, the
        connection's."""
        if isinstance(exc, HandshakeRefused):
            category, message = exc.category, exc.message
        else:
            category = FailureCategory.TLS_HANDSHAKE
            message = f"QUIC failed on a datagram from the server: {exc!r}"
        if self.state is H3State.HANDSHAKING:
            self.handshake_failed(category, message)  # (which closes, as below)
        self.die(FailureCategory.CONNECTION_BROKEN, message)
        try:
            self.quic.close(error_code=H3_INTERNAL_ERROR)  # sent by the next round
        except Exception:
            pass


# --- what QUIC's and HTTP/3's events mean (``QuicDriver._process`` dispatches them) -----------


def _handshake_completed(driver: QuicDriver, event: HandshakeCompleted) -> None:
    driver.handshake_completed(bool(event.early_data_accepted))


def _terminated(driver: QuicDriver, event: ConnectionTerminated) -> None:
    """QUIC's CONNECTION_CLOSE (the peer's, or an idle timeout, or ours); during the
    handshake, a TLS alert that refuses the certificate is ``TLS_CERTIFICATE``."""
    code, frame_type = event.error_code, event.frame_type
    detail = f"the QUIC connection closed ({closed_words(code, frame_type, event.reason_phrase)})"
    if driver.state is H3State.HANDSHAKING:
        category = (
            FailureCategory.TLS_CERTIFICATE
            if tls_alert(code, frame_type) in CERTIFICATE_ALERTS
            else FailureCategory.TLS_HANDSHAKE
        )
        driver.handshake_failed(category, detail)
    driver.die(FailureCategory.CONNECTION_BROKEN, detail)


def _stream_data(driver: QuicDriver, event: StreamDataReceived) -> bool:
    """A stream's bytes are read before HTTP/3 keeps any (``False``: none): a request stream's
    frames (``frames.py``: one refused is a stream error, HTTP/3 given the frames before it,
    or a connection error), the control stream's (``control.py``: GOAWAY, its id and the
    limits). A stream the caller is done with gets nothing more; a bidirectional stream the
    server opened is a connection error (RFC 9114 §6.1)."""
    stream_id = event.stream_id
    stream = driver.streams.get(stream_id)
    control = driver.control
    try:
        if stream is not None:
            stream.frames.feed(event.data, driver.max_header_bytes)
        elif stream_id % 4 == 3:
            goaway = control.feed(stream_id, event.data)
            if goaway is not None:
                driver.goaway(goaway)
        elif stream_id % 4 == 1:
            message = f"the server opened a bidirectional stream ({stream_id})"
            raise FrameRefused(H3_STREAM_CREATION_ERROR, message, stream_error=False)
        else:
            return False
    except FrameRefused as refused:
        if stream is not None and refused.stream_error:
            if refused.at:  # (the frames before it stand: a head, a body)
                driver.to_h3(StreamDataReceived(event.data[: refused.at], False, stream_id))
            # As if the server had reset it: aioquic's HTTP/3 drops what it kept of the stream.
            driver.h3.handle_event(StreamReset(stream_id=stream_id, error_code=refused.code))
            driver.stream_error(stream, refused.code, refused.message)
            return False
        if stream is None and control.goaway is not None:
            driver.goaway(control.goaway)  # (the GOAWAYs before the refused frame stand)
        words = f"the server broke HTTP/3: {refused.message} ({application_error(refused.code)})"
        driver.connection_error(refused.code, words)
        return False
    return True


def _reset(driver: QuicDriver, event: StreamReset) -> None:
    """A stream reset by the server: ``H3_REQUEST_REJECTED`` before a response head proves
    it was not processed (RFC 9114 §4.1.1); after one the server did answer, so the reset
    carries the stage reached, as any other (HTTP/2's REFUSED_STREAM likewise)."""
    stream = driver.streams.get(event.stream_id)
    if stream is None:
        return
    code = event.error_code
    if code == H3_REQUEST_REJECTED and stream.response is None:
        failure = Failure(
            FailureCategory.REFUSED_STREAM,
            "the server refused the stream (H3_REQUEST_REJECTED): the request was not processed",
            not_sent=True,
        )
    else:
        failure = Failure(
            FailureCategory.CONNECTION_BROKEN,
            f"the server reset the stream ({application_error(code)})",
        )
    stream.fail(failure)


def _ping_acknowledged(driver: QuicDriver, event: PingAcknowledged) -> None:
    driver.idle.answer(event.uid)


def _stop_sending(driver: QuicDriver, event: StopSendingReceived) -> None:
    stream = driver.streams.get(event.stream_id)
    if stream is not None:
        stream.send_stopped = True


def _headers(driver: QuicDriver, event: HeadersReceived) -> None:
    """A HEADERS frame: a final head, an interim one (skipped), or trailers (dropped: the
    head's fields are what a response carries); one refused (``headers.py``) is a stream
    error."""
    stream = driver.streams.get(event.stream_id)
    if stream is None:
        return
    try:
        if stream.response is not None:
            check_trailers(event.headers, driver.max_header_bytes)
            if event.stream_ended:
                stream.data(b"", True)
            return
        head = response_head(event.headers, driver.max_header_bytes, stream)
    except FrameRefused as refused:
        driver.stream_error(stream, refused.code, refused.message)
        return
    if head is not None:
        stream.head(head, event.stream_ended)


def _data(driver: QuicDriver, event: DataReceived) -> None:
    stream = driver.streams.get(event.stream_id)
    if stream is not None:
        stream.data(event.data, event.stream_ended)


def _malformed(driver: QuicDriver, event: MalformedResponse) -> None:
    """A malformed response (``shims.py``): a stream error H3_MESSAGE_ERROR (RFC 9114
    §4.1.2), its stream's alone."""
    stream = driver.streams.get(event.stream_id)
    if stream is not None:
        driver.stream_error(
            stream,
            H3_MESSAGE_ERROR,
            f"the server broke HTTP/3 on stream {stream.stream_id}: a malformed response "
            f"({event.reason})",
        )


#: What each QUIC event does (a function of the driver), by its type; one that returns
#: ``False`` keeps the event from HTTP/3.
_QUIC_EVENTS: dict[type[QuicEvent], Callable[[QuicDriver, Any], bool | None]] = {
    HandshakeCompleted: _handshake_completed,
    ConnectionTerminated: _terminated,
    StreamDataReceived: _stream_data,
    StreamReset: _reset,
    PingAcknowledged: _ping_acknowledged,
    StopSendingReceived: _stop_sending,
}
#: QUIC events HTTP/3 is not given (the connection is over).
_NOT_FOR_H3: frozenset[type[QuicEvent]] = frozenset({ConnectionTerminated})
#: What each HTTP/3 event does, by its type.
_H3_EVENTS: dict[type[H3Event], Callable[[QuicDriver, Any], None]] = {
    HeadersReceived: _headers,
    DataReceived: _data,
    MalformedResponse: _malformed,
}
