"""What an HTTP/2 connection's reader and its request side share: one :class:`Session`.

The reader (``inbound.py``) and the request side (``outbound.py``) each work on the session,
never on the connection: they read its public fields (the h2 state machine, the writer, the
streams table, the GOAWAY and death state, the parking lots) and change the connection's state
only through its methods, each one move with a name: a stream added, SETTINGS applied, a PING
sent or answered, a GOAWAY received, new streams refused, a stream done or broken, an attempt
interrupted, the connection dead. So every rule about the connection's lifetime (when it takes
no new stream, when it retires, what a stream is proven by its death) is written here once.
The connection (``connection.py``) owns the session, answers the pool from it, and hears of
its death through ``on_dead``.

Why a session rather than the connection handed to both halves (the obvious way, and the way
it was): each half then reached into the connection's private fields, through a protocol that
listed them, and the connection's module imported the two halves that depended on it. Here
the imports go one way: the session knows its streams and its writer, the halves know the
session, the connection knows them all.
"""

from __future__ import annotations

from collections.abc import Callable

import h2.connection
import h2.exceptions
import trio
from h2.errors import ErrorCodes

from ..._core.evidence import FailureCategory, Stage
from ..clock import Bound, bound, limit_of, timeout_message
from ..contract import DarkWatch, Failure, IdlePing
from ..progress import AttemptProgress
from ..timekeeper import Timekeeper
from ..transport import Transport
from .fast import FastMachine
from .frames import InboundFrames, code_name
from .headers import HeadVerdicts
from .stream import Stream
from .writer import Writer

__all__ = ["Session"]

_PING = b"trio-rt!"


class Session:
    """The state of one HTTP/2 connection that its reader and its request side share.

    Implements ``stream.StreamOwner``: its streams hand credit back and report their end and
    their errors here; and ``contract.PingPeer``: the idle check (:attr:`idle`) PINGs through
    it. Read its fields freely; change them through its methods.
    """

    __slots__ = (
        "_on_dead",
        "_socket",
        "accepted_streams",
        "attempts",
        "awaiting_head",
        "capacity",
        "closed",
        "dark",
        "death",
        "frames",
        "goaway_last",
        "h2",
        "header_limit",
        "heads",
        "idle",
        "max_streams",
        "ping_lot",
        "requests",
        "run_clock",
        "settings_received",
        "streams",
        "timekeeper",
        "window_waiters",
        "writer",
    )

    def __init__(
        self,
        machine: FastMachine,
        transport: Transport,
        *,
        stall_timeout: float,
        idle: IdlePing,
        on_dead: Callable[[], None],
    ) -> None:
        self.h2 = machine
        self._socket = transport.socket
        self._on_dead = on_dead
        #: The one task that writes (``writer.py``); every frame queued with h2 goes by it.
        self.writer = Writer(
            transport.stream, machine, self._writer_broken, stall_timeout=stall_timeout
        )
        #: Our streams by id, until the client is done with each (:meth:`stream_done`).
        self.streams: dict[int, Stream] = {}
        #: The same streams by the attempt each carries: :meth:`interrupt` finds its stream at
        #: once (a scan of every stream per timeout was O(streams) per event).
        self.attempts: dict[AttemptProgress, Stream] = {}
        #: The streams waiting for the server's flow-control window: a connection-level
        #: WINDOW_UPDATE wakes these, not every stream (``inbound.py``).
        self.window_waiters: set[Stream] = set()
        #: Response heads checked on this connection, and their verdicts (``check_head``).
        self.heads: HeadVerdicts = {}
        #: The streams whose final head has not arrived (DATA for them is a stream error).
        self.awaiting_head: set[int] = set()
        #: Inbound bytes cut at frame boundaries (``frames.py``), read by the reader only.
        self.frames = InboundFrames(self.awaiting_head, preface=True, opened=0)
        #: Where requests wait for a free stream slot.
        self.capacity = trio.lowlevel.ParkingLot()
        self.settings_received = False
        #: The server's SETTINGS_MAX_CONCURRENT_STREAMS, refreshed on every SETTINGS frame
        #: (:meth:`settings_changed`); h2's own lookup is several calls, made a few times per
        #: request.
        self.max_streams = machine.remote_settings.max_concurrent_streams
        #: The server's SETTINGS_MAX_HEADER_LIST_SIZE (``None``: unlimited), refreshed alike.
        self.header_limit: int | None = machine.remote_settings.max_header_list_size
        #: Set once the connection takes no new stream (a GOAWAY's last-stream-id).
        self.goaway_last: int | None = None
        #: What ended the connection (the first cause), once :attr:`closed`.
        self.death: Failure | None = None
        self.closed = False
        #: Streams opened on this connection, in all.
        self.requests = 0
        #: Set on a rotation GOAWAY that refused streams: how many this connection was allowed.
        self.accepted_streams: int | None = None
        #: The idle check (``contract.IdlePing``): the reader notes each read there.
        self.idle = idle
        #: The dark-connection watch (``contract.DarkWatch``): the reader arms it before each
        #: read and disarms it on each.
        self.dark = DarkWatch(self)
        #: Where idle checks wait for their PING's answer.
        self.ping_lot = trio.lowlevel.ParkingLot()
        #: The run's clock, read directly (``trio.current_time()`` is three calls to it).
        self.run_clock = trio.lowlevel.current_clock()
        #: The client's timekeeper (``timekeeper.py``: the limits of this connection's waits),
        #: set by whoever opened the connection; ``None``: its waits are unbounded.
        self.timekeeper: Timekeeper | None = None

    # --- streams -------------------------------------------------------------------------------

    def in_use(self) -> int:
        """Streams that count against the server's limit: ours. h2 counts no more (each of
        its open streams is one of ours: a stream leaves :attr:`streams` only in
        :meth:`stream_done`, which resets it if h2 still has it open), and its count walks
        every stream; ``tests/wire/test_h2_wakes.py`` checks the two agree."""
        return len(self.streams)

    def add(self, stream: Stream) -> None:
        """``stream``'s HEADERS are queued: it counts from now on, awaiting its head."""
        self.streams[stream.stream_id] = stream
        self.attempts[stream.progress] = stream
        self.awaiting_head.add(stream.stream_id)
        self.frames.opened = stream.stream_id  # ids only go up
        self.requests += 1

    def consumed(self, stream_id: int, flow_controlled: int) -> None:
        """The client read ``flow_controlled`` bytes: hand the credit back to the server."""
        if flow_controlled and not self.closed:
            try:
                self.h2.acknowledge_received_data(flow_controlled, stream_id)
            except h2.exceptions.ProtocolError:
                return
            self.writer.collect()

    def stream_done(self, stream: Stream, unread: int) -> None:
        """The client is done with ``stream``: reset it if h2 still has it open (interrupted,
        or the response ended before our request did), hand back the credit of ``unread``
        bytes, free its slot."""
        if self.streams.get(stream.stream_id) is stream:
            del self.streams[stream.stream_id]
            if self.attempts.get(stream.progress) is stream:
                del self.attempts[stream.progress]
        self.awaiting_head.discard(stream.stream_id)
        if not self.closed:
            h2_stream = self.h2.streams.get(stream.stream_id)
            # A stream above a GOAWAY's last-stream-id is one the server ignores (RFC 9113
            # §6.8): nothing to reset.
            reset = (
                h2_stream is not None
                and not h2_stream.closed
                and (self.goaway_last is None or stream.stream_id <= self.goaway_last)
            )
            if reset or unread:
                try:
                    if reset:
                        self.h2.reset_stream(stream.stream_id, ErrorCodes.CANCEL)
                    if unread:
                        # Unread DATA still counts against the connection window: give it back.
                        self.h2.acknowledge_received_data(unread, stream.stream_id)
                except h2.exceptions.ProtocolError:
                    pass  # closed meanwhile: nothing to reset
                self.writer.collect()
        if self.capacity:
            # (Every request waiting for a slot looks again: the pool lends no more streams
            # than the server allows, so this lot is empty but for a race, or a SETTINGS that
            # lowered the limit.)
            self.capacity.unpark_all()
        if self.goaway_last is not None and not self.streams:
            # The server asked us to go; the last stream it promised to finish has finished.
            self.die(
                Failure(FailureCategory.GOAWAY, "the server sent GOAWAY", not_sent=True),
                ErrorCodes.NO_ERROR,
            )

    def stream_error(self, stream: Stream, problem: str) -> None:
        """A malformed response is a stream error (RFC 9113 §8.1.1): reset that stream with
        PROTOCOL_ERROR and fail it; the connection and its other streams carry on."""
        self.awaiting_head.discard(stream.stream_id)
        try:
            self.h2.reset_stream(stream.stream_id, ErrorCodes.PROTOCOL_ERROR)
        except h2.exceptions.ProtocolError:
            pass  # already closed on h2's side: nothing to reset
        self.writer.collect()
        stream.fail(
            Failure(
                FailureCategory.REMOTE_PROTOCOL,
                f"the server broke HTTP/2 on stream {stream.stream_id}: a malformed response "
                f"with {problem}",
            )
        )

    def wake_capacity(self) -> None:
        """A stream slot may have come free: every request waiting for one looks again."""
        self.capacity.unpark_all()

    def settings_changed(self) -> None:
        """The server's SETTINGS applied: MAX_CONCURRENT_STREAMS and INITIAL_WINDOW_SIZE may
        have changed, so every stream and every request waiting for a slot looks again."""
        self.settings_received = True
        self.max_streams = self.h2.remote_settings.max_concurrent_streams
        self.header_limit = self.h2.remote_settings.max_header_list_size
        # (O(streams), once per SETTINGS frame: a server sends one or two per connection.)
        for stream in self.streams.values():
            stream.wake()
        self.capacity.unpark_all()

    # --- the idle check's PING (``contract.PingPeer``) -----------------------------------------

    def send_ping(self, uid: int) -> None:
        """Queue a PING for the writer (its payload is always the same: an ACK answers every
        PING sent before it)."""
        self.h2.ping(_PING)
        self.writer.collect()

    async def ping_wait(self) -> None:
        """Until a PING is answered, the connection dies or an attempt is interrupted."""
        await self.ping_lot.park()

    def ping_unanswered(self, message: str) -> None:
        self.die(Failure(FailureCategory.CONNECTION_BROKEN, message), ErrorCodes.NO_ERROR)

    # --- the dark-connection watch (``contract.DarkPeer``) --------------------------------------

    def busy(self) -> bool:
        """A request waits for the server, and none of our frames waits to be written."""
        writer = self.writer
        return bool(self.streams) and writer.written >= writer.queued

    def gone_dark(self, message: str) -> None:
        """Nothing arrived, not even the answer to a PING: close the connection (:meth:`die`:
        a stream none of whose bytes left is ``NOT_SENT``, the others keep their evidence)."""
        self.die(Failure(FailureCategory.CONNECTION_BROKEN, message))

    def ping_answered(self) -> None:
        """A PING ACK arrived: every PING sent so far is answered."""
        self.idle.answer()
        self.ping_lot.unpark_all()

    # --- the end: GOAWAY and death -------------------------------------------------------------

    def goaway(self, last_stream_id: int, error_code: int) -> None:
        """From this moment the connection takes no new stream (``is_available`` is false
        before any other task runs); streams above the last-stream-id are proven unsent, and
        once none is left the connection retires.

        Above the last-stream-id the server promises it did nothing (RFC 9113 §6.8): such a
        stream is ``NOT_SENT`` with category ``GOAWAY``, unless it already got response bytes,
        which prove otherwise (it keeps its stage). When the GOAWAY is a rotation (the
        connection served streams, or the attempt reused it) the failure is ``reconnect``, and
        the number of streams the server allowed is kept in :attr:`accepted_streams` for the
        pool.
        """
        last = last_stream_id
        if self.goaway_last is not None:
            last = min(last, self.goaway_last)  # it may only go down (RFC 9113 §6.8)
        self.goaway_last = last
        code = code_name(error_code)
        refused = 0
        for stream_id, stream in list(self.streams.items()):  # (at most twice a connection)
            if stream_id > last:
                not_sent = stream.progress.stage < Stage.RESPONSE_HEAD
                refused += not_sent
                stream.fail(
                    Failure(
                        FailureCategory.GOAWAY,
                        f"the server sent GOAWAY ({code}, last stream {last}): stream "
                        f"{stream_id} was not processed",
                        not_sent=not_sent,
                        # A rotation (the connection served streams, or the attempt reused
                        # it): sending it again on a fresh connection is routine.
                        reconnect=last > 0 or stream.progress.connection_reused,
                    )
                )
        if refused and error_code == ErrorCodes.NO_ERROR and last > 0:
            self.accepted_streams = (last + 1) // 2  # client streams are the odd ids from 1
        self.capacity.unpark_all()
        if not self.streams:
            failure = Failure(FailureCategory.GOAWAY, f"the server sent GOAWAY ({code})", True)
            self.die(failure, ErrorCodes.NO_ERROR)

    def refuse_new_streams(self) -> None:
        """Our stream ids ran out (2**30 streams used): like a GOAWAY from ourselves, take no
        new stream, finish the others, then retire."""
        self.goaway_last = self.h2.highest_outbound_stream_id
        if not self.streams:
            self.close()

    def close(self) -> None:
        """The client closes the connection: GOAWAY(NO_ERROR) and close (see :meth:`die`)."""
        self.die(
            Failure(FailureCategory.CONNECTION_BROKEN, "the connection was closed by the client"),
            ErrorCodes.NO_ERROR,
        )

    def abort(self) -> None:
        """Close at once, without waiting for last words (an interrupted handshake, a client
        whose nursery would not start the connection's tasks): see :meth:`die`."""
        self.die(
            Failure(FailureCategory.CONNECTION_BROKEN, "the connection was closed by the client")
        )
        self.writer.stop()

    def die(self, failure: Failure, goaway: int | None = None) -> None:
        """The connection is over: fail every open stream, close the socket, tell the owner
        (``on_dead``).

        Idempotent; the first cause is kept (a later "closed by the client" does not hide the
        EOF that really ended it). A stream none of whose bytes the writer had handed to the
        transport is proven ``NOT_SENT``; one already proven so keeps its own failure.

        ``goaway``: the connection can still write, and says why it ends (RFC 9113 §5.4.1: a
        connection error the client detected, with its code; §6.8: NO_ERROR when the client
        closes a healthy connection). The GOAWAY goes after the frames the server is still
        owed (acknowledgements, resets) and before the close, written by the writer within
        ``FIXED.closing`` seconds (``Writer.finish``); the streams' failures do not wait for
        it. Without (the peer closed or reset the transport, a write failed or stalled), the
        socket is closed at once. Either way no frame of a request proven ``NOT_SENT`` here
        leaves afterwards.
        """
        if self.death is None:
            self.death = failure
        if self.closed:
            return
        self.closed = True
        death = self.death
        handed = self.writer.handed
        self.dark.stop()
        if goaway is not None and self.writer.can_finish:
            self.h2.close_connection(goaway)
            self.writer.finish(self._socket.close)
        else:
            self.writer.stop()
            self._socket.close()
        # Never handed to the transport: the connection failed, not the request, so the
        # client may send it again on a fresh connection without counting (``reconnect``).
        unsent = Failure(
            death.category,
            f"{death.message} (before the request was sent)",
            not_sent=True,
            reconnect=True,
        )
        for stream in list(self.streams.values()):  # (once: the connection's end)
            never_left = (
                handed <= stream.first_offset and stream.progress.stage < Stage.RESPONSE_HEAD
            )
            stream.fail(unsent if never_left else death)
        self.capacity.unpark_all()
        self.ping_lot.unpark_all()
        self._on_dead()

    def _writer_broken(self, category: FailureCategory, message: str) -> None:
        self.die(Failure(category, message))

    # --- an attempt's bounds -------------------------------------------------------------------

    def write_bound(self, progress: AttemptProgress) -> Bound:
        """The bound of one wait of ``progress``'s attempt for its frames to be written."""
        return bound("write", self.timekeeper, progress=progress, target=self)

    def stage_expired(self, which: str, progress: AttemptProgress) -> None:
        """The write bound of the attempt ``progress`` belongs to ran out (``clock.py``): end
        that attempt's waits, and only its (:meth:`interrupt`)."""
        limit = limit_of(self.timekeeper, which)
        self.interrupt(progress, timeout_message(which, limit))

    def interrupt(self, progress: AttemptProgress, why: str) -> None:
        """A bound of ``progress``'s attempt ran out: end that attempt's waits, and only its;
        the connection and the other streams carry on. Its stream, if it has one, fails with
        a timeout (which wakes it, and resets the stream like any failure); an attempt still
        waiting for a free stream slot, for the idle health check or for its frames to be
        written is woken and sees ``progress.interrupted``. What arrived before stays the
        attempt's: a stream that ended already is not failed (the attempt then succeeds, as
        over a scope that expired after the last byte)."""
        progress.interrupted = True
        stream = self.attempts.get(progress)
        if stream is not None:
            stream.fail(Failure(FailureCategory.TIMEOUT, why))
        # The lots hold attempts with no stream yet (a slot: empty but for a race; the idle
        # check: before any stream) and attempts writing a body the windows did not take whole:
        # each looks at its own progress and parks again. O(those), not O(streams).
        self.capacity.unpark_all()
        self.ping_lot.unpark_all()
        self.writer.wake_waiters()
