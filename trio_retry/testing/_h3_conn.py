"""Serve one HTTP/3 connection: aioquic's sans-IO `QuicConnection` and `H3Connection`, driven by
one Trio task, applying the script to each request stream in a task of its own.

Structure (the HTTP/2 handler's, over QUIC). The endpoint (`_h3.py`) owns the UDP socket and
hands each datagram of this connection to `deliver`. The pump task is the only one that feeds
QUIC and reads its events; it reacts to them synchronously, then sends what QUIC wants sent,
then waits for the next datagram, a `kick`, or QUIC's own timer (``get_timer()``), whichever
comes first. Stream tasks only change QUIC and HTTP/3 state and kick the pump, so cancelling
one never leaves a datagram half-built.

Two things aioquic does not offer publicly, and how they are done here:

* sending GOAWAY: `H3Connection` has no method for it (it also drops the GOAWAY frames it
  receives, without an event), so the frame is written on the connection's control stream
  (`_control_stream_id`);
* knowing when a response has reached the client: a QUIC stream reset or a CONNECTION_CLOSE
  discards what is not yet acknowledged (it is never retransmitted), so a fault that breaks
  off after some bytes first waits until the client acknowledged them (`_unacked`).

Early data: a request whose head arrives before the handshake completed (before QUIC's
`HandshakeCompleted` event, which comes in order with the stream events) arrived in 0-RTT.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import TypeAlias

import trio
from aioquic.buffer import encode_uint_var
from aioquic.h3 import events as h3_events
from aioquic.h3.connection import ErrorCode, FrameType, H3Connection, encode_frame
from aioquic.quic import events as quic_events
from aioquic.quic.connection import NetworkAddress, QuicConnection

from ._common import Recorder, Timeouts
from ._h3_actions import check_h3, close_code, goaway_id_for, h2_only
from ._script import (
    Action,
    AfterBody,
    CloseAfterBody,
    CloseAfterHead,
    CloseBeforeRead,
    EndlessBody,
    GoAway,
    Handler,
    PartialBody,
    RefuseStream,
    Respond,
    ShutWindow,
    StopReading,
    StreamedBody,
    StreamFrames,
    paced_chunks,
)
from ._stream_server import (
    RequestHead,
    RequestStream,
    StreamServer,
    endless,
    respond,
    short_body,
    streamed,
)

__all__ = ["H3ServerConnection"]

Send: TypeAlias = Callable[[bytes, NetworkAddress], Awaitable[None]]
CidCallback: TypeAlias = Callable[[bytes], None]

# Datagrams queued for the pump before more are dropped (as a full socket buffer would).
_INBOX = 512
# Response bytes a stream may have handed to QUIC and not yet seen acknowledged before it
# waits: the backpressure of a body (aioquic buffers whatever it is given).
_UNACKED_LIMIT = 256 * 1024
_KICK = None


class H3ServerConnection(StreamServer):
    """One QUIC connection speaking HTTP/3. `run` returns once QUIC says it is terminated
    (closed by either side, or idle for the QUIC idle timeout); cancelled, it abandons the
    connection without a CONNECTION_CLOSE."""

    HTTP_VERSION = "HTTP/3"

    def __init__(
        self,
        quic: QuicConnection,
        *,
        send: Send,
        connection_id: int,
        recorder: Recorder,
        timeouts: Timeouts,
        cid_issued: CidCallback,
        cid_retired: CidCallback,
    ) -> None:
        super().__init__(recorder, connection_id, timeouts.read)
        self._quic = quic
        self._h3: H3Connection | None = None  # made once the handshake picked ALPN h3
        self._send = send
        self._timeouts = timeouts
        self._cid_issued = cid_issued
        self._cid_retired = cid_retired
        self._inbox_send, self._inbox = trio.open_memory_channel[
            tuple[bytes, NetworkAddress] | None
        ](_INBOX)
        self._kicked = False
        self._handshake_done = False
        self._terminated = False
        self._closing = False
        self._progress = trio.Event()  # set (and replaced) after each batch of QUIC input
        self._highest = -1
        self._goaway_id: int | None = None
        self._goaway_action: Action | None = None
        self._draining = False
        self._next_ping = math.inf

    # -- the endpoint's side ------------------------------------------------------------------

    def deliver(self, data: bytes, addr: NetworkAddress) -> None:
        """Queue a datagram for this connection; dropped when the queue is full (UDP)."""
        try:
            self._inbox_send.send_nowait((data, addr))
        except trio.WouldBlock:
            pass

    # -- the pump -----------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await self._pump()
                nursery.cancel_scope.cancel()
        finally:
            self._commit_all()

    def _kick(self) -> None:
        if not self._kicked:
            self._kicked = True
            try:
                self._inbox_send.send_nowait(_KICK)
            except trio.WouldBlock:
                # Datagrams are queued: the pump drains them and transmits anyway; no kick
                # is pending, so the next one must not be skipped.
                self._kicked = False

    async def _pump(self) -> None:
        while not self._terminated:
            timer = self._quic.get_timer()
            deadline = min(math.inf if timer is None else timer, self._next_ping)
            timed_out = True
            with trio.move_on_at(deadline):
                item = await self._inbox.receive()
                timed_out = False
            now = trio.current_time()
            if timed_out:
                if timer is not None and now >= timer:
                    self._quic.handle_timer(now)
                self._ping(now)
            else:
                self._take(item, now)
                while True:  # everything already queued, before sending anything
                    try:
                        item = self._inbox.receive_nowait()
                    except trio.WouldBlock:
                        break
                    self._take(item, now)
            self._process_events()
            self._close_if_drained()
            self._progress.set()
            self._progress = trio.Event()
            await self._transmit()

    def _take(self, item: tuple[bytes, NetworkAddress] | None, now: float) -> None:
        if item is _KICK:
            self._kicked = False
        else:
            self._quic.receive_datagram(item[0], item[1], now)

    def _ping(self, now: float) -> None:
        """While a stream is served, PING now and then: a long `Stall` is not QUIC idleness
        (the client's acknowledgements keep both sides' idle timers from expiring)."""
        if not self._streams:
            self._next_ping = math.inf
        elif now >= self._next_ping:
            self._quic.send_ping(0)
            self._next_ping = now + self._timeouts.idle / 3
        elif self._next_ping == math.inf:
            self._next_ping = now + self._timeouts.idle / 3

    async def _transmit(self) -> None:
        for data, addr in self._quic.datagrams_to_send(trio.current_time()):
            try:
                await self._send(data, addr)
            except OSError:
                pass  # lost, as UDP may lose it; QUIC retransmits what matters

    def _process_events(self) -> None:
        while (event := self._quic.next_event()) is not None:
            if isinstance(event, quic_events.ConnectionIdIssued):
                self._cid_issued(event.connection_id)
            elif isinstance(event, quic_events.ConnectionIdRetired):
                self._cid_retired(event.connection_id)
            elif isinstance(event, quic_events.ConnectionTerminated):
                self._terminated = True
            elif isinstance(event, quic_events.HandshakeCompleted):
                self._handshake_done = True
                if event.alpn_protocol != "h3":
                    self._close(ErrorCode.H3_GENERAL_PROTOCOL_ERROR, "ALPN h3 only")
            elif isinstance(event, (quic_events.StreamReset, quic_events.StopSendingReceived)):
                self._client_reset(event.stream_id)
            if self._h3 is None and not self._closing:
                # Created on the first event: the client's 0-RTT streams arrive before the
                # handshake completes, and HTTP/3 must see them.
                self._h3 = H3Connection(self._quic)
            if self._h3 is not None and not self._closing:
                for h3_event in self._h3.handle_event(event):
                    self._on_h3_event(h3_event)
        self._ping(trio.current_time())

    # -- connection-level actions -------------------------------------------------------------

    def _close(self, error_code: int, reason: str) -> None:
        """CONNECTION_CLOSE now; every stream task stops."""
        if self._closing:
            return
        self._closing = True
        self._quic.close(error_code=error_code, reason_phrase=reason)
        for stream in self._streams.values():
            stream.abandon()
        self._streams.clear()
        self._kick()

    def _control_stream_id(self) -> int:
        # Private in aioquic (there is no public way to send GOAWAY): the stream it opened
        # for its SETTINGS.
        assert self._h3 is not None
        stream_id = self._h3._local_control_stream_id
        assert stream_id is not None
        return stream_id

    def _send_goaway(self, goaway_id: int, cause: Action) -> None:
        """Send GOAWAY(`goaway_id`), abandon the requests at or above it, drain the rest.

        `cause` becomes the recorded action of every request at or above the id that had not
        executed, and of any that arrives later. The id may only go down.
        """
        if self._goaway_id is not None:
            goaway_id = min(goaway_id, self._goaway_id)
        self._goaway_id = goaway_id
        self._goaway_action = cause
        frame = encode_frame(FrameType.GOAWAY, encode_uint_var(goaway_id))
        self._quic.send_stream_data(self._control_stream_id(), frame)
        self._draining = True
        self._abandon_from(goaway_id, cause)
        self._kick()
        self._streams_changed()

    def _streams_changed(self) -> None:
        if self._draining and not self._streams:
            self._kick()  # the pump closes once the GOAWAY itself was acknowledged

    def _close_if_drained(self) -> None:
        """After a GOAWAY, CONNECTION_CLOSE (H3_NO_ERROR) once no stream is served and the
        client has acknowledged the GOAWAY (a close would discard it otherwise)."""
        if self._draining and not self._streams and not self._closing:
            if self._unacked(self._control_stream_id()) == 0:
                self._close(ErrorCode.H3_NO_ERROR, "done")

    # -- events -------------------------------------------------------------------------------

    def _on_h3_event(self, event: h3_events.H3Event) -> None:
        if isinstance(event, h3_events.HeadersReceived):
            if event.stream_id not in self._slots:
                self._on_request(event)
            if event.stream_ended:  # also trailers that end the body
                self._body_ended(event.stream_id)
        elif isinstance(event, h3_events.DataReceived):
            self._body_received(event.stream_id, event.data)
            if event.stream_ended:
                self._body_ended(event.stream_id)

    def _on_request(self, event: h3_events.HeadersReceived) -> None:
        stream_id = event.stream_id
        head = RequestHead.parse(event.headers)
        method, path = head.method, head.path
        self._highest = max(self._highest, stream_id)
        early_data = not self._handshake_done
        if self._goaway_id is not None and stream_id >= self._goaway_id:
            # At or above the GOAWAY: never processed, never answered, no script entry used.
            assert self._goaway_action is not None
            self._record(stream_id, head, self._goaway_action, early_data=early_data)
            return
        pick = self._recorder.script.pick(method, path)
        action = pick.action
        slot = self._record(stream_id, head, action, pick.params, early_data=early_data)
        if isinstance(action, (CloseBeforeRead, CloseAfterHead)):
            self._close_for(action.reset)
            return
        if isinstance(action, RefuseStream):
            self._refuse(stream_id)
            return
        then = action.then if isinstance(action, GoAway) else action
        if isinstance(then, (StopReading, ShutWindow)):
            raise h2_only(then, method, path)
        check_h3(then, method, path)
        # Started before any GOAWAY below, so that the GOAWAY counts it as in progress (when
        # below its id) or abandons it.
        self._start_stream(stream_id, slot, head, then)
        if isinstance(action, GoAway):
            last = stream_id if action.last_stream_id is None else action.last_stream_id
            self._send_goaway(goaway_id_for(last), action)
        self._streams_changed()

    def _close_for(self, reset: bool) -> None:
        """A script's connection drop (see `close_code`)."""
        self._close(close_code(reset), "reset by script" if reset else "closed by script")

    def _refuse(self, stream_id: int) -> None:
        """`RefuseStream` (RFC 9114 §4.1.1): reset the request stream, and stop its upload,
        with H3_REQUEST_REJECTED."""
        self._quic.stop_stream(stream_id, ErrorCode.H3_REQUEST_REJECTED)
        self._quic.reset_stream(stream_id, ErrorCode.H3_REQUEST_REJECTED)
        self._kick()

    # -- one stream -----------------------------------------------------------------------------

    def _give_up(self, stream_id: int) -> None:
        self._reset(stream_id, ErrorCode.H3_REQUEST_CANCELLED)

    def _reset(self, stream_id: int, error_code: int) -> None:
        if not self._closing:
            self._quic.reset_stream(stream_id, error_code)
            self._kick()

    def _send_headers(
        self, stream_id: int, headers: Sequence[tuple[str, str]], *, end_stream: bool
    ) -> None:
        assert self._h3 is not None
        encoded = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in headers]
        self._h3.send_headers(stream_id, encoded, end_stream=end_stream)
        self._kick()

    def _unacked(self, stream_id: int) -> int:
        """Bytes handed to QUIC on this stream and not yet acknowledged by the client.

        Private in aioquic: the stream's send buffer holds exactly those bytes (it is trimmed
        as acknowledgements arrive). 0 once the stream is gone.
        """
        stream = self._quic._streams.get(stream_id)
        return 0 if stream is None else len(stream.sender._buffer)

    async def _until_unacked_at_most(self, stream_id: int, limit: int) -> None:
        """Wait (each wait bounded by the write timeout) until at most `limit` bytes of the
        stream are unacknowledged; `trio.TooSlowError` if the client stops acknowledging."""
        while self._unacked(stream_id) > limit:
            with trio.fail_after(self._timeouts.write):
                await self._progress.wait()

    async def _send_body(
        self, stream_id: int, body: bytes, rate: float | None, *, end_stream: bool
    ) -> None:
        """Send `body` paced at `rate` bytes/s, never more than `_UNACKED_LIMIT` ahead of the
        client's acknowledgements."""
        assert self._h3 is not None
        chunks = paced_chunks(body, rate)
        for index, (chunk, pause) in enumerate(chunks):
            for start in range(0, len(chunk), _UNACKED_LIMIT):
                await self._until_unacked_at_most(stream_id, _UNACKED_LIMIT)
                last = index == len(chunks) - 1 and start + _UNACKED_LIMIT >= len(chunk)
                piece = chunk[start : start + _UNACKED_LIMIT]
                self._h3.send_data(stream_id, piece, end_stream=end_stream and last)
                self._kick()
            if pause:
                await trio.sleep(pause)
        if end_stream and not chunks:
            self._h3.send_data(stream_id, b"", end_stream=True)
            self._kick()

    async def _fault_after_body(
        self, stream: RequestStream, action: AfterBody, method: str
    ) -> None:
        stream_id = stream.stream_id
        if isinstance(action, CloseAfterBody):
            self._close_for(action.reset)
        elif isinstance(action, PartialBody):
            send_headers = partial(self._send_headers, stream_id)
            await short_body(action, method, send_headers, partial(self._send_body, stream_id))
            await self._break_off(stream_id, reset=action.reset)
        elif isinstance(action, StreamedBody):
            send_headers = partial(self._send_headers, stream_id)
            end = await streamed(action, method, send_headers, partial(self._send_body, stream_id))
            if end == "finish":
                await self._send_body(stream_id, b"", None, end_stream=True)
                await self._until_unacked_at_most(stream_id, 0)
            elif end is not None:
                await self._break_off(stream_id, reset=end == "reset")
        elif isinstance(action, StreamFrames):
            # Hand-made frames the server's H3Connection never learns of: the connection's
            # first (on its control stream), then the request stream's.
            if action.control:
                self._quic.send_stream_data(self._control_stream_id(), action.control)
            fin = action.fin and action.reset is None
            self._quic.send_stream_data(stream_id, action.build(stream_id), fin)
            self._kick()
            if action.reset is not None:
                await self._until_unacked_at_most(stream_id, 0)
                self._reset(stream_id, action.reset)
        else:
            check_h3(action, method, stream.slot.path)

    async def _break_off(self, stream_id: int, *, reset: bool) -> None:
        """Break a response off mid-body: RESET_STREAM (H3_INTERNAL_ERROR); `reset`: the whole
        connection closed with H3_INTERNAL_ERROR instead. A reset discards what is not
        acknowledged, so the head and the body so far must have reached the client first."""
        await self._until_unacked_at_most(stream_id, 0)
        if reset:
            self._close(ErrorCode.H3_INTERNAL_ERROR, "reset by script")
        else:
            self._reset(stream_id, ErrorCode.H3_INTERNAL_ERROR)

    async def _endless(self, stream_id: int, action: EndlessBody, method: str) -> None:
        # Ends when the client resets or stops the stream (this task is cancelled), the
        # connection ends, or the client stops acknowledging for the write timeout; `seconds`
        # bounds it even against a client that reads forever.
        send_headers = partial(self._send_headers, stream_id)
        if await endless(action, method, send_headers, partial(self._send_body, stream_id)):
            self._reset(stream_id, ErrorCode.H3_INTERNAL_ERROR)

    async def _respond(self, stream: RequestStream, action: Respond, method: str) -> None:
        stream_id = stream.stream_id
        send_headers = partial(self._send_headers, stream_id)
        await respond(stream, action, method, send_headers, partial(self._send_body, stream_id))
        # The stream counts as served until the client has it all: a drain that closes the
        # connection after the last stream must not cut its response off.
        await self._until_unacked_at_most(stream_id, 0)
        if action.close_after:
            self._send_goaway(goaway_id_for(self._highest), action)

    # -- handlers (testkit) -------------------------------------------------------------------

    async def _handled(self, stream: RequestStream, handler: Handler) -> AfterBody | None:
        """Ask `handler` (the body has arrived) and apply what acts at once; return what is
        left to do after the body, or None when the stream is done with (as `_h2.py` does)."""
        action = await self._recorder.resolve(stream.slot, handler)
        if stream.abandoned:
            return None
        if isinstance(action, (CloseBeforeRead, CloseAfterHead)):
            self._close_for(action.reset)
            return None
        if isinstance(action, RefuseStream):
            self._refuse(stream.stream_id)
            return None
        if isinstance(action, GoAway):
            last = stream.stream_id if action.last_stream_id is None else action.last_stream_id
            self._send_goaway(goaway_id_for(last), action)
            return None if stream.abandoned else action.then
        if isinstance(action, (StopReading, ShutWindow)):
            raise h2_only(action, stream.slot.method, stream.slot.path)
        check_h3(action, stream.slot.method, stream.slot.path)
        return action
