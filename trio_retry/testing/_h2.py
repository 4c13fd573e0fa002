"""Serve one HTTP/2 connection (h2), applying the script to each stream in its own task.

Structure: one reader task feeds the h2 state machine and reacts to its events synchronously;
one writer task owns the socket's send side; each request stream runs its action in a task of
its own. Stream tasks only change h2 state and wake the writer, so cancelling one (the client
reset it, or a GOAWAY abandoned it) can never cut a frame in half.

h2 moves a whole connection to CLOSED as soon as it sends or receives a GOAWAY, and then
refuses every later frame, including the responses of the streams that the GOAWAY promised to
finish. So GOAWAY never goes through h2 here: the server builds its own (`goaway_frame`), and
takes the client's out of the byte stream before h2 sees them (`_GoAwayFilter`).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from functools import partial

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import trio
from h2.errors import ErrorCodes

from ._common import DISCONNECTS, ConnContext, Ending, ending_for
from ._h2_frames import (
    PREFACE,
    _GoAwayFilter,
    data_frame,
    frame,
    goaway_frame,
    headers_frame,
    rst_stream_frame,
)
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
    Raw,
    RefuseStream,
    Respond,
    ScriptError,
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

__all__ = [
    "PREFACE",
    "H2Handler",
    "data_frame",
    "frame",
    "goaway_frame",
    "headers_frame",
    "rst_stream_frame",
]

_RECEIVE_SIZE = 65536


def _server_machine(max_concurrent_streams: int | None) -> h2.connection.H2Connection:
    """The server's h2 state machine, announcing ``max_concurrent_streams`` if given."""
    machine = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=False, header_encoding=None)
    )
    if max_concurrent_streams is not None:
        codes = h2.settings.SettingCodes
        machine.local_settings = h2.settings.Settings(
            client=False,
            initial_values={
                codes.MAX_CONCURRENT_STREAMS: max_concurrent_streams,
                codes.MAX_HEADER_LIST_SIZE: machine.DEFAULT_MAX_HEADER_LIST_SIZE,
            },
        )
    return machine


class H2Handler(StreamServer):
    """One HTTP/2 connection. `run` returns how the connection should end."""

    HTTP_VERSION = "HTTP/2"
    # The stream was closed under its task (client reset, client GOAWAY): nothing to answer.
    STREAM_GONE = (h2.exceptions.ProtocolError,)

    def __init__(
        self, ctx: ConnContext, initial: bytes, max_concurrent_streams: int | None
    ) -> None:
        super().__init__(ctx.recorder, ctx.connection_id, ctx.timeouts.read)
        self._ctx = ctx
        self._initial = initial
        self._h2 = _server_machine(max_concurrent_streams)
        self._incoming = _GoAwayFilter()
        self._pending = bytearray()  # bytes queued outside h2 (our GOAWAY frames), in order
        self._want_write = trio.Event()
        self._window_changed = trio.Event()
        self._goaway_last: int | None = None
        self._goaway_action: Action | None = None
        self._draining = False  # close once no stream is being served
        self._close_after_flush: Ending | None = None
        self._ending: Ending | None = None
        self._idle_scope: trio.CancelScope | None = None
        self._shut_windows: set[int] = set()  # ShutWindow streams: no stream WINDOW_UPDATE
        self._stop_reading: float | None = None  # StopReading: seconds to stop reading for

    async def run(self) -> Ending:
        self._h2.initiate_connection()
        # Our SETTINGS go out before anything else can happen, so even a connection that a
        # script closes on its first HEADERS has shown its settings.
        with trio.fail_after(self._ctx.timeouts.write):
            await self._ctx.stream.send_all(self._h2.data_to_send())
        try:
            # The writer lives outside the nursery that `_finish` cancels: cancelling a write
            # half-way would cut a frame (and break a TLS stream, losing its close_notify).
            # It stops by itself, between writes, once the connection has an ending.
            async with trio.open_nursery() as outer:
                outer.start_soon(self._guard, self._writer)
                try:
                    async with trio.open_nursery() as nursery:
                        self._nursery = nursery
                        nursery.start_soon(self._guard, self._reader)
                finally:
                    # Reader and streams are done: flush what is queued, then end.
                    self._finish_after_flush(Ending.CLOSE)
        finally:
            self._commit_all()
        return self._ending or Ending.CLOSE

    # -- connection plumbing ------------------------------------------------------------

    def _finish(self, ending: Ending) -> None:
        """End the connection now (the first ending asked for wins)."""
        if self._ending is None:
            self._ending = ending
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()
        self._kick()  # the writer sees the ending and stops

    def _finish_after_flush(self, ending: Ending) -> None:
        """End the connection once everything queued so far has been written."""
        if self._close_after_flush is None:
            self._close_after_flush = ending
        self._kick()

    def _kick(self) -> None:
        self._want_write.set()

    async def _guard(self, task: Callable[[], Awaitable[None]]) -> None:
        try:
            await task()
        except DISCONNECTS:
            self._finish(Ending.ABORT)

    async def _writer(self) -> None:
        while True:
            await self._want_write.wait()
            self._want_write = trio.Event()
            if self._ending is not None:
                return
            self._pending += self._h2.data_to_send()
            if self._pending:
                data = bytes(self._pending)
                self._pending.clear()
                with trio.fail_after(self._ctx.timeouts.write):
                    await self._ctx.stream.send_all(data)
            if self._close_after_flush is not None and not self._want_write.is_set():
                self._finish(self._close_after_flush)
                return

    async def _reader(self) -> None:
        if self._initial:
            self._feed(self._initial)
        while self._ending is None and self._close_after_flush is None:
            with trio.CancelScope(deadline=self._idle_deadline()) as scope:
                self._idle_scope = scope
                data = await self._ctx.stream.receive_some(_RECEIVE_SIZE)
            self._idle_scope = None
            if scope.cancelled_caught:
                # Idle: say goodbye politely, then close.
                last = self._h2.highest_inbound_stream_id
                self._send_goaway(last, 0, GoAway(last_stream_id=last))
                return
            if not data:
                self._finish(Ending.ABORT)
                return
            self._feed(bytes(data))
            if self._stop_reading is not None:
                # StopReading: the client's bytes pile up in the kernel buffers meanwhile.
                await trio.sleep(self._stop_reading)
                self._finish(Ending.RESET)
                return

    def _idle_deadline(self) -> float:
        return math.inf if self._streams else trio.current_time() + self._ctx.timeouts.idle

    def _streams_changed(self) -> None:
        if self._idle_scope is not None:
            self._idle_scope.deadline = self._idle_deadline()
        if self._draining and not self._streams:
            self._finish_after_flush(Ending.CLOSE)

    def _send_goaway(self, last_stream_id: int, error_code: int, cause: Action) -> None:
        """Queue a GOAWAY, abandon the streams above `last_stream_id`, drain the rest.

        `cause` becomes the recorded action of every stream above the last id that had not
        executed yet, and of any stream that arrives later.
        """
        if self._goaway_last is not None:
            last_stream_id = min(last_stream_id, self._goaway_last)  # it may only go down
        self._goaway_last = last_stream_id
        self._goaway_action = cause
        self._pending += self._h2.data_to_send()
        self._pending += goaway_frame(last_stream_id, error_code)
        self._draining = True
        self._abandon_from(last_stream_id + 1, cause)
        self._kick()
        self._streams_changed()

    # -- events ---------------------------------------------------------------------------

    def _feed(self, data: bytes) -> None:
        data, client_goaway = self._incoming.feed(data)
        try:
            events = self._h2.receive_data(data)
        except h2.exceptions.ProtocolError:
            # h2 has queued a GOAWAY describing the error: send it, then close.
            self._finish_after_flush(Ending.CLOSE)
            return
        for event in events:
            if self._ending is not None:
                return
            self._on_event(event)
        if client_goaway:
            # The client is leaving: answer what is in progress, then close.
            self._draining = True
            self._streams_changed()
        self._kick()

    def _on_event(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.RequestReceived):
            self._on_request(event)
        elif isinstance(event, h2.events.DataReceived):
            if event.flow_controlled_length and event.stream_id in self._shut_windows:
                # ShutWindow: the connection's window is reopened, the stream's never.
                self._h2.increment_flow_control_window(event.flow_controlled_length)
            elif event.flow_controlled_length:
                # Hand the window back at once: the body is buffered in memory, never applied
                # as backpressure, so uploads of any size flow.
                self._h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            self._body_received(event.stream_id, event.data)
        elif isinstance(event, h2.events.StreamEnded):
            self._body_ended(event.stream_id)
        elif isinstance(event, h2.events.StreamReset):
            self._client_reset(event.stream_id)
        elif isinstance(event, (h2.events.WindowUpdated, h2.events.RemoteSettingsChanged)):
            self._window_changed.set()
            self._window_changed = trio.Event()

    def _on_request(self, event: h2.events.RequestReceived) -> None:
        stream_id = event.stream_id
        head = RequestHead.parse(event.headers)
        if self._goaway_last is not None and stream_id > self._goaway_last:
            # Above the GOAWAY: never processed, never answered, no script entry used.
            assert self._goaway_action is not None
            self._record(stream_id, head, self._goaway_action)
            return
        pick = self._recorder.script.pick(head.method, head.path)
        action = pick.action
        slot = self._record(stream_id, head, action, pick.params)
        if isinstance(action, (CloseBeforeRead, CloseAfterHead)):
            self._finish(ending_for(action.reset))
            return
        if isinstance(action, RefuseStream):
            self._h2.reset_stream(stream_id, ErrorCodes.REFUSED_STREAM)
            return
        if isinstance(action, StopReading):
            wide = 2**31 - 1
            codes = h2.settings.SettingCodes
            self._h2.update_settings({codes.INITIAL_WINDOW_SIZE: wide})
            self._h2.increment_flow_control_window(wide - self._h2.inbound_flow_control_window)
            self._stop_reading = action.seconds
            self._kick()
            return
        if isinstance(action, ShutWindow):
            self._shut_windows.add(stream_id)
            action = Respond()  # answered only if the body ever ends: it cannot
        # Started before any GOAWAY below, so that the GOAWAY counts it as in progress (when
        # at or below the last stream id) or abandons it (when above).
        self._start_stream(
            stream_id, slot, head, action.then if isinstance(action, GoAway) else action
        )
        if isinstance(action, GoAway):
            last = stream_id if action.last_stream_id is None else action.last_stream_id
            self._send_goaway(last, action.error_code, action)
        self._streams_changed()

    # -- one stream -----------------------------------------------------------------------

    def _give_up(self, stream_id: int) -> None:
        self._reset_quietly(stream_id, ErrorCodes.CANCEL)

    def _reset_quietly(self, stream_id: int, error_code: ErrorCodes) -> None:
        try:
            self._h2.reset_stream(stream_id, error_code)
        except h2.exceptions.ProtocolError:
            return  # already closed
        self._kick()

    def _send_headers(
        self, stream_id: int, headers: Sequence[tuple[str, str]], *, end_stream: bool
    ) -> None:
        encoded = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in headers]
        if self._ctx.alt_svc is not None and not headers[0][1].startswith("1"):
            # Every final response advertises HTTP/3 (FaultServer(http3=True)), in one place.
            encoded.append((b"alt-svc", self._ctx.alt_svc.encode("ascii")))
        self._h2.send_headers(stream_id, encoded, end_stream=end_stream)
        self._kick()

    async def _send_body(
        self, stream_id: int, body: bytes, rate: float | None, *, end_stream: bool
    ) -> None:
        """Send `body` within the peer's flow-control windows, paced at `rate` bytes/s."""
        for chunk, pause in paced_chunks(body, rate):
            view = chunk
            while view:
                changed = self._window_changed
                window = min(
                    self._h2.local_flow_control_window(stream_id),
                    self._h2.max_outbound_frame_size,
                )
                if window <= 0:
                    with trio.fail_after(self._ctx.timeouts.write):
                        await changed.wait()
                    continue
                self._h2.send_data(stream_id, view[:window])
                view = view[window:]
                self._kick()
            if pause:
                await trio.sleep(pause)
        if end_stream:
            self._h2.end_stream(stream_id)
            self._kick()

    async def _fault_after_body(
        self, stream: RequestStream, action: AfterBody, method: str
    ) -> None:
        stream_id = stream.stream_id
        if isinstance(action, CloseAfterBody):
            self._finish(ending_for(action.reset))
        elif isinstance(action, PartialBody):
            send_headers = partial(self._send_headers, stream_id)
            await short_body(action, method, send_headers, partial(self._send_body, stream_id))
            self._break_off(stream_id, reset=action.reset)
        elif isinstance(action, StreamedBody):
            send_headers = partial(self._send_headers, stream_id)
            end = await streamed(action, method, send_headers, partial(self._send_body, stream_id))
            if end == "finish":
                await self._send_body(stream_id, b"", None, end_stream=True)
            elif end is not None:
                self._break_off(stream_id, reset=end == "reset")
        elif isinstance(action, Raw):
            # Outside h2, in order: what h2 queued so far goes first, then the raw bytes.
            self._pending += self._h2.data_to_send()
            self._pending += action.data
            if action.close:
                self._finish_after_flush(Ending.CLOSE)
            else:
                self._kick()
        elif isinstance(action, StreamFrames):
            # Hand-made frames for this stream, outside h2, after what h2 queued so far.
            self._pending += self._h2.data_to_send()
            self._pending += action.control + action.build(stream_id)
            if action.reset is not None:
                self._pending += rst_stream_frame(stream_id, action.reset)
            self._kick()

    def _break_off(self, stream_id: int, *, reset: bool) -> None:
        """Break a response off mid-body: ``RST_STREAM(INTERNAL_ERROR)``, the connection kept;
        `reset`: the whole connection reset instead (TCP RST), once what was queued before it
        (the head and the body so far) reached the wire."""
        if reset:
            self._finish_after_flush(Ending.RESET)
        else:
            self._h2.reset_stream(stream_id, ErrorCodes.INTERNAL_ERROR)
            self._kick()

    async def _endless(self, stream_id: int, action: EndlessBody, method: str) -> None:
        # Ends when the client resets the stream (this task is cancelled), the connection
        # ends, or the window stays shut for the write timeout; `seconds` bounds it even
        # against a client that reads forever.
        send_headers = partial(self._send_headers, stream_id)
        if await endless(action, method, send_headers, partial(self._send_body, stream_id)):
            self._finish(Ending.RESET)

    async def _respond(self, stream: RequestStream, action: Respond, method: str) -> None:
        stream_id = stream.stream_id
        send_headers = partial(self._send_headers, stream_id)
        await respond(stream, action, method, send_headers, partial(self._send_body, stream_id))
        if action.close_after:
            self._send_goaway(self._h2.highest_inbound_stream_id, 0, action)

    # -- handlers (testkit) -----------------------------------------------------------------

    async def _handled(self, stream: RequestStream, handler: Handler) -> AfterBody | None:
        """Ask `handler` (the body has arrived) and apply what acts at once; return what is
        left to do after the body, or None when the stream is done with.

        `CloseBeforeRead` / `CloseAfterHead` close the connection and `RefuseStream` refuses
        the stream, as they would on its HEADERS (not executed); `GoAway` sends its GOAWAY
        here and goes on with `then` when this stream is at or below the last stream id.
        """
        action = await self._recorder.resolve(stream.slot, handler)
        if stream.abandoned:
            return None
        if isinstance(action, (CloseBeforeRead, CloseAfterHead)):
            self._finish(ending_for(action.reset))
            return None
        if isinstance(action, RefuseStream):
            self._reset_quietly(stream.stream_id, ErrorCodes.REFUSED_STREAM)
            return None
        if isinstance(action, GoAway):
            last = stream.stream_id if action.last_stream_id is None else action.last_stream_id
            self._send_goaway(last, action.error_code, action)
            return None if stream.abandoned else action.then
        if isinstance(action, (StopReading, ShutWindow)):  # they act on HEADERS
            raise ScriptError(
                f"handler {handler.name} returned {action!r}, which acts when a stream's "
                "HEADERS arrive, before its body: a handler cannot return it"
            )
        return action
