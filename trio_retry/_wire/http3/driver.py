"""One QUIC connection's state, its moves, and the one task that drives it.

A :class:`QuicDriver` owns, from its constructor on, everything of one QUIC connection: the
UDP socket and the pump that moves QUIC's datagrams through it (``datagrams.py``), aioquic's
QUIC and HTTP/3 state machines, the GOAWAY reader (``control.py``), the request streams
(``stream.py``), the count of body bytes waiting for their callers, the handshake's outcome,
the idle check's PINGs (``contract.IdlePing``) and the one timer. The
connection the pool sees (``connection.py``) holds a driver, as ``HTTP2Connection`` holds its
session: it reads the driver's fields (and writes a request into its HTTP/3 state machine, as
HTTP/2's request side writes into h2's) and changes the connection's state only through the
driver's moves, each with a name (a stream opened, a stream finished, the handshake completed
or failed, a GOAWAY, a stream error, a connection error, the connection's end).

The task (:meth:`QuicDriver.run`, in the client's nursery) owns the socket: it sends what QUIC
has to send, waits for datagrams or QUIC's timer (whichever comes first; the timer is the bound
of every wait of QUIC's own, re-armed after each round), feeds what arrived to QUIC (the
pump tells the driver what arrived, and what failed: ``datagrams.PumpOwner``), and
dispatches QUIC's events, then HTTP/3's, in one place (``events.dispatch``): each kind of
event has one function there, which works through the driver's fields and moves. A caller's
task never waits on the socket: it writes into the state machine synchronously and, while the
task waits, sends what QUIC made of it without waiting (:meth:`QuicDriver.flush`: a request
costs no round of the task); else it kicks the task (:meth:`QuicDriver.kick`), which then
sends. Each caller waiting for the socket itself would let two tasks wait on one socket at
once (trio refuses that) and send QUIC's packets out of order; a flush sends nothing while
the task has datagrams to send.

What the connection's end proves: every open stream fails with the evidence of its own stage,
unless it holds a proof of its own already (``contract.Failure``: the first one wins). A
stream error (a malformed response, RFC 9114 §4.1.2) ends its stream alone.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from ..._core.evidence import FailureCategory
from ..clock import FIXED, retime, until
from ..contract import DarkWatch, Failure, IdlePing
from ..progress import AttemptProgress
from .codes import H3_INTERNAL_ERROR, H3_NO_ERROR, H3_REQUEST_CANCELLED
from .control import ControlReader
from .datagrams import DatagramPump
from .events import dispatch
from .handshake import PendingHandshake
from .shims import HandshakeRefused
from .stream import H3Stream
from .udp import UdpPaths

if TYPE_CHECKING:
    from ..timekeeper import Timekeeper
    from .shims import CheckedQuicConnection, PushlessH3Connection

__all__ = ["BUFFER_LIMIT", "DEFAULT_STREAMS", "H3State", "QuicDriver"]

#: Response body bytes received and not yet read by their callers, across the connection, above
#: which the driver stops reading datagrams until the callers have read half of them. aioquic
#: grants flow-control credit as soon as data is received, not as it is read, so without this a
#: caller reading slower than the network would buffer a whole response. Datagrams then wait in
#: the kernel's socket buffer, and past it are dropped: QUIC's loss recovery and congestion
#: control slow the server down (a pause of the whole connection, which a fast reader of
#: another stream shares).
BUFFER_LIMIT = 16 * 1024 * 1024
#: Streams lent at once when the server's limit is not known yet (before the handshake).
DEFAULT_STREAMS = 100


class H3State(enum.Enum):
    """The connection's one state (moves: HANDSHAKING -> OPEN -> DRAINING -> CLOSED, or to
    CLOSED from any)."""

    HANDSHAKING = "handshaking"
    OPEN = "open"
    DRAINING = "draining"  # GOAWAY received: no new streams; closed when the last ends
    CLOSED = "closed"


class QuicDriver:
    """One QUIC connection's state and its task; see the module docstring.

    Implements ``stream.StreamOwner`` (its streams report bytes received and read, and their
    end, here) and ``contract.PingPeer`` (the idle check PINGs through it). Read its fields
    freely; change them through its methods.
    """

    __slots__ = (
        "_answered",
        "_kicked",
        "_on_dead",
        "_on_draining",
        "_on_handshake_done",
        "_on_handshake_failed",
        "_room",
        "_wait_scope",
        "attempts",
        "buffered",
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
        "pump",
        "quic",
        "state",
        "streams",
        "timekeeper",
    )

    def __init__(
        self,
        paths: UdpPaths,
        quic: CheckedQuicConnection,
        h3: PushlessH3Connection,
        *,
        timekeeper: Timekeeper | None,
        max_header_bytes: int,
        on_dead: Callable[[], None],
        handshake_limit: float = FIXED.quic_handshake,
        on_handshake_failed: Callable[[str], None] | None = None,
        on_handshake_done: Callable[[], None] | None = None,
        on_draining: Callable[[], None] | None = None,
        on_slow: Callable[[], None] | None = None,
    ) -> None:
        #: The UDP socket (``udp.py``: each datagram on the path QUIC chose): only :meth:`run`
        #: waits on it, and closes it.
        self.paths = paths
        self.quic = quic
        self.h3 = h3
        #: QUIC's datagrams to and from the socket (``datagrams.py``); it tells :meth:`arrived`,
        #: :meth:`lost` and :meth:`unreadable`.
        self.pump = DatagramPump(paths, quic, self)
        #: The server's GOAWAY, read from its control stream (``control.py``).
        self.control = ControlReader()
        #: The client's timekeeper (``timekeeper.py``): the limits of the waits on this connection's
        #: streams; ``None``: unbounded.
        self.timekeeper = timekeeper
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
        #: Kicked since its last send (its next wait ends at once).
        self._kicked = False
        #: A response ended in the task's current round (``acks.py``: the pump's ``pace``).
        self._answered = False
        self._on_dead = on_dead
        self._on_handshake_failed = on_handshake_failed
        self._on_handshake_done = on_handshake_done
        self._on_draining = on_draining

    # --- the pool's view ----------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self.state is H3State.CLOSED

    @property
    def handshaking(self) -> bool:
        return self.state is H3State.HANDSHAKING

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
        self.pump.delivered += size
        if self.buffered > BUFFER_LIMIT and self._room.is_set():
            self._room = trio.Event()

    def answered(self) -> None:
        """A stream's response ended in this round (``acks.py``)."""
        self._answered = True

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
        self.quic.forget_stream(stream.stream_id)
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
        # The server's initial MAX_STREAMS for request streams (unknown: DEFAULT_STREAMS).
        limit = self.quic.peer_max_streams()
        if limit is not None:
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
        self.quic.forget_stream(stream_id)
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

    # --- the task -------------------------------------------------------------------------------

    def kick(self) -> None:
        """Wake the task so it sends what the state machine has queued (if it is not waiting,
        its next round does not wait)."""
        self._kicked = True
        scope = self._wait_scope
        if scope is not None:
            scope.cancel()

    def flush(self) -> None:
        """Send what the state machine has queued, from the caller's task, while the task
        waits and the caller's stream is the only one: one round of the task fewer per
        request. Otherwise the task is kicked and sends it: with other streams open, what
        their callers hand over in the same turn of the scheduler goes in the same packets
        (sent from each caller, 2,000 requests at once went in 2,000 packets and ran past the
        pool's limit); and where the task is not waiting, the handshake goes on, or the
        socket is full or reports an error (errors are judged there). Never waits, never
        raises."""
        scope = self._wait_scope
        if scope is None or self.state is not H3State.OPEN or len(self.streams) > 1:
            return self.kick()
        if not self.pump.send_now():  # (the socket is full, or failed: the task sends)
            return self.kick()
        self.pump.hold = None  # (an acknowledgement held went with the request: ``acks.py``)
        retime(scope, self._wake_at())  # (QUIC's timer moved: a new packet is in flight)

    def _wake_at(self) -> float:
        """When the task's wait ends at the latest: QUIC's timer, or the handshake's limit."""
        if self._kicked:
            return -math.inf
        if self.pump.hold is not None:
            return self.pump.hold  # (QUIC's timer is the acknowledgement held, due already)
        timer = self.quic.get_timer()
        return min(self.pending.due, math.inf if timer is None else timer, self.pump.read_at)

    async def run(self) -> None:
        """The connection's task: send, wait for datagrams or the timer, process; until the
        connection ends. Never raises but ``Cancelled``: whatever ends it fails the open
        streams with the evidence of their stages and closes the socket.

        Each round takes the datagrams already received (none while the callers' buffers are full),
        and sends what QUIC made of them, in batches (``datagrams.py``: the socket is read and
        written directly once trio says it is ready; during a download, less often: ``acks.py``).
        However it ends (closed, or the client's nursery cancelled as it exits), its last act is to
        send QUIC's CONNECTION_CLOSE (``DatagramPump.last_words``): without it the server keeps the
        connection, and probes it, until its idle timeout."""
        paths = self.paths
        sock = paths.sock
        quic = self.quic
        pump = self.pump
        pending = self.pending
        pending.start(trio.current_time())
        try:
            while True:
                # What a caller's flush left, then every datagram QUIC has ready (noting what
                # went in 0-RTT, ``handshake.py``), waiting for the socket only when it is full;
                # nothing while an acknowledgement is held for a caller's request (``acks.py``).
                self._kicked = False
                if pump.hold is None:
                    datagrams = pump.take(trio.current_time())
                    pending.written(quic)
                    await pump.send(datagrams)
                    if self.state is H3State.CLOSED:
                        return  # (its CONNECTION_CLOSE, if any, has just been sent)
                with until(self._wake_at()) as scope:
                    self._wait_scope = scope
                    self.dark.waiting()
                    if self.buffered > BUFFER_LIMIT:  # (nothing is read till there is room:
                        self.dark.stop()  # a silence of our own making, no dark watch)
                        await self._room.wait()  # (sends, and QUIC's timer, still go on)
                    elif pump.read_at < math.inf:
                        await trio.sleep_forever()  # (until then: the scope's deadline)
                    else:
                        await trio.lowlevel.wait_readable(sock)
                self._wait_scope = None
                now = trio.current_time()
                timer = quic.get_timer()
                pump.receive(now, scope.cancelled_caught, BUFFER_LIMIT - self.buffered)
                if timer is not None and now >= timer:
                    quic.handle_timer(now=now)
                dispatch(self)
                if self.state is H3State.HANDSHAKING and now >= pending.due:
                    if not pending.run_out():  # (kept going, or given up: ``handshake.py``)
                        self.handshake_failed(FailureCategory.TIMEOUT, pending.overdue())
                answered, self._answered = self._answered, False
                answered = answered and self.state is H3State.OPEN
                full = self.buffered > BUFFER_LIMIT
                pump.pace(now, answered=answered, kicked=self._kicked, full=full)
                # (Wakes the uploads waiting for QUIC's progress, and idle checks: O(those) per
                # round, never O(streams): a stream waiting for its response waits on its own.)
                progressed, self.progressed = self.progressed, trio.Event()
                progressed.set()
        except Exception as exc:  # a bug: fail the streams, never the client's nursery
            self.die(FailureCategory.CONNECTION_BROKEN, f"internal error in HTTP/3: {exc!r}")
        finally:
            self._wait_scope = None
            self.die(FailureCategory.CONNECTION_BROKEN, "the client closed")
            await pump.last_words()
            paths.close()

    # --- what the datagram pump tells (``datagrams.PumpOwner``) -------------------------------

    def arrived(self, now: float) -> None:
        """Datagrams arrived: the idle check and the dark-connection watch hear of it."""
        self.idle.last_received = now
        self.dark.received()

    def lost(self, exc: OSError) -> None:
        """The socket failed (ICMP unreachable, typically): during the handshake, its failure,
        early data or not (the origin is then reached over TCP)."""
        if self.state is H3State.HANDSHAKING:
            self.handshake_failed(FailureCategory.CONNECT, f"UDP: {exc}")
        self.die(FailureCategory.CONNECTION_BROKEN, f"the QUIC connection's socket failed: {exc}")

    def unreadable(self, exc: Exception) -> None:
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
