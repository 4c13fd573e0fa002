"""What the HTTP/2 and HTTP/3 connection handlers share for their request streams: reading a
request head, recording it, each stream's task (its body, its handler, the actions that mean
the same on both protocols, such as writing a scripted response through the protocol's own send
functions), and abandoning streams beyond a GOAWAY. What a fault does to the stream or the
connection stays with each protocol.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import ClassVar, Protocol

import trio

from ._common import Recorder, Slot
from ._replies import body_allowed, h2_response_headers
from ._script import (
    Action,
    AfterBody,
    EndlessBody,
    Handler,
    PartialBody,
    Respond,
    Stall,
    StreamedBody,
    StreamEnd,
)

__all__ = [
    "RequestHead",
    "RequestStream",
    "SendBody",
    "SendHeaders",
    "StreamServer",
    "endless",
    "respond",
    "short_body",
    "streamed",
]

HeaderPairs = Sequence[tuple[str, str]]


class SendHeaders(Protocol):
    """Queue a header block (``:status`` first) on the stream."""

    def __call__(self, headers: HeaderPairs, *, end_stream: bool) -> None: ...


class SendBody(Protocol):
    """Send body bytes on the stream, paced at `rate` bytes/s (None: at once)."""

    def __call__(self, body: bytes, rate: float | None, *, end_stream: bool) -> Awaitable[None]: ...


@dataclass(frozen=True, slots=True)
class RequestHead:
    """A request's header block, as the script and the record see it."""

    #: Names lowercased, pseudo-headers included, in order.
    headers: tuple[tuple[str, str], ...]
    method: str
    path: str
    #: ``expect: 100-continue``.
    expect_100: bool

    @classmethod
    def parse(cls, raw: Iterable[tuple[bytes | str, bytes | str]]) -> RequestHead:
        headers = tuple((_text(n).lower(), _text(v)) for n, v in raw)
        pseudo = {name: value for name, value in headers if name.startswith(":")}
        expect_100 = any(n == "expect" and v.lower() == "100-continue" for n, v in headers)
        return cls(headers, pseudo.get(":method", ""), pseudo.get(":path", ""), expect_100)


def _text(value: bytes | str) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


class RequestStream:
    """A request stream whose action runs in a task."""

    def __init__(self, stream_id: int, slot: Slot, expect_100: bool) -> None:
        self.stream_id = stream_id
        self.slot = slot
        self.expect_100 = expect_100
        self.sent_100 = False
        self.scope = trio.CancelScope()
        self.body_done = trio.Event()
        self.body_scope: trio.CancelScope | None = None
        self.abandoned = False

    def abandon(self) -> None:
        """Stop serving the stream (reset by the client, or beyond a GOAWAY)."""
        self.abandoned = True
        self.scope.cancel()

    async def wait_body(self, read_timeout: float, send_headers: SendHeaders) -> bool:
        """Wait for the end of the request body (sending ``100 Continue`` first when the
        client expects it); False if it stalled for `read_timeout`. The connection pushes
        `body_scope`'s deadline back each time body bytes arrive."""
        if self.expect_100 and not self.body_done.is_set():
            send_headers(((":status", "100"),), end_stream=False)
            self.sent_100 = True
        with trio.move_on_after(read_timeout) as scope:
            self.body_scope = scope
            await self.body_done.wait()
        self.body_scope = None
        return self.body_done.is_set()


async def respond(
    stream: RequestStream,
    action: Respond,
    method: str,
    send_headers: SendHeaders,
    send_body: SendBody,
) -> None:
    """`Respond` on a stream: its delay, its 1xx heads (a 100 already sent for
    ``expect: 100-continue`` is not sent twice), the final head and the paced body. What
    ``close_after`` means is the caller's."""
    if action.delay:
        await trio.sleep(action.delay)
    skip_100 = stream.sent_100
    for status in action.informational:
        if status == 100 and skip_100:
            skip_100 = False
            continue
        send_headers(((":status", str(status)),), end_stream=False)
    has_body = bool(action.body) and body_allowed(action.status, method)
    headers = h2_response_headers(action.status, action.headers, len(action.body))
    send_headers(headers, end_stream=not has_body)
    if has_body:
        await send_body(action.body, action.body_rate, end_stream=True)


async def short_body(
    action: PartialBody, method: str, send_headers: SendHeaders, send_body: SendBody
) -> None:
    """`PartialBody`'s head (with its declared length) and short body, leaving the stream
    open; how it is then broken off is the caller's."""
    headers = h2_response_headers(action.status, action.headers, action.declared_length)
    send_headers(headers, end_stream=False)
    if body_allowed(action.status, method):
        await send_body(action.body, None, end_stream=False)


async def endless(
    action: EndlessBody, method: str, send_headers: SendHeaders, send_body: SendBody
) -> bool:
    """`EndlessBody` on a stream: a head with no length, then its chunk over and over until
    ``action.seconds`` pass (or the stream's task is cancelled, or a send times out). False
    when the response may have no body (HEAD, 204, 304): the head ended the stream; True when
    the body was sent and the caller must break the stream or connection off."""
    has_body = body_allowed(action.status, method)
    headers = [
        (name, value)
        for name, value in h2_response_headers(action.status, action.headers, 0)
        if name != "content-length"  # no length: the body has no end
    ]
    send_headers(headers, end_stream=not has_body)
    if not has_body:
        return False
    pause = action.pause()
    with trio.move_on_after(action.seconds):
        while True:
            await send_body(action.chunk, None, end_stream=False)
            if pause:
                await trio.sleep(pause)
            else:
                await trio.lowlevel.checkpoint()
    return True


async def streamed(
    action: StreamedBody, method: str, send_headers: SendHeaders, send_body: SendBody
) -> StreamEnd | None:
    """`StreamedBody` on a stream: a head with no length, then its parts (the pauses slept);
    with ``end="hang"``, nothing more until the stream's task is cancelled (the client reset
    the stream, or the connection ended). Returns how the caller must end the stream:
    ``"finish"`` (properly), ``"break"`` (the stream) or ``"reset"`` (the connection); a body
    that ran past ``action.seconds`` breaks. None when the head ended the stream (a response
    that may carry no body)."""
    has_body = body_allowed(action.status, method)
    headers = [
        (name, value)
        for name, value in h2_response_headers(action.status, action.headers, 0)
        if name != "content-length"  # no length: the body ends when the stream does
    ]
    send_headers(headers, end_stream=not has_body)
    if not has_body:
        return None
    with trio.move_on_after(action.seconds) as bound:
        for part in action.parts:
            if isinstance(part, bytes):
                await send_body(part, None, end_stream=False)
            else:
                await trio.sleep(part)
        if action.end == "hang":
            await trio.sleep_forever()
    if bound.cancelled_caught or action.end == "hang":
        return "break"
    return action.end


class StreamServer(abc.ABC):
    """The request-stream half of a multiplexed connection handler (HTTP/2, HTTP/3).

    It keeps the streams being served and the record of every stream of the connection, runs
    each stream's task (wait for the body, ask a `Handler`, mark the record executed, apply
    the action) and applies `Stall`, `EndlessBody` and `Respond`; the subclass sends the
    frames and applies the rest.
    """

    #: Recorded as each request's ``http_version``.
    HTTP_VERSION: ClassVar[str]
    #: Exceptions that mean the stream was closed under its task: nothing is left to answer.
    STREAM_GONE: ClassVar[tuple[type[BaseException], ...]] = ()

    def __init__(self, recorder: Recorder, connection_id: int, read_timeout: float) -> None:
        self._recorder = recorder
        self.connection_id = connection_id
        self._read_timeout = read_timeout
        self._streams: dict[int, RequestStream] = {}  # streams whose action task is running
        self._slots: dict[int, Slot] = {}  # every recorded stream of this connection
        self._nursery: trio.Nursery | None = None  # where the stream tasks run

    # -- what the protocol does -----------------------------------------------------------

    @abc.abstractmethod
    def _send_headers(
        self, stream_id: int, headers: Sequence[tuple[str, str]], *, end_stream: bool
    ) -> None: ...

    @abc.abstractmethod
    async def _send_body(
        self, stream_id: int, body: bytes, rate: float | None, *, end_stream: bool
    ) -> None: ...

    @abc.abstractmethod
    def _give_up(self, stream_id: int) -> None:
        """Reset the stream: its client stopped sending the body, or stopped reading."""

    @abc.abstractmethod
    def _streams_changed(self) -> None:
        """A stream stopped (or started) being served."""

    @abc.abstractmethod
    async def _handled(self, stream: RequestStream, handler: Handler) -> AfterBody | None:
        """Ask `handler` and apply what acts at once; return what is left to do after the
        body, or None when the stream is done with."""

    @abc.abstractmethod
    async def _fault_after_body(
        self, stream: RequestStream, action: AfterBody, method: str
    ) -> None:
        """Apply an after-body action other than `Stall`, `EndlessBody` and `Respond`."""

    @abc.abstractmethod
    async def _endless(self, stream_id: int, action: EndlessBody, method: str) -> None: ...

    @abc.abstractmethod
    async def _respond(self, stream: RequestStream, action: Respond, method: str) -> None: ...

    # -- book-keeping ---------------------------------------------------------------------

    def _record(
        self,
        stream_id: int,
        head: RequestHead,
        action: Action,
        params: Mapping[str, str] | None = None,
        *,
        early_data: bool = False,
    ) -> Slot:
        """Record the request whose head just arrived on `stream_id`."""
        slot = self._recorder.open(
            method=head.method,
            path=head.path,
            headers=head.headers,
            connection_id=self.connection_id,
            http_version=self.HTTP_VERSION,
            stream_id=stream_id,
            action=action,
            params=params or {},
            early_data=early_data,
        )
        self._slots[stream_id] = slot
        return slot

    def _commit_all(self) -> None:
        """Publish every stream's record as it stands (the connection is over)."""
        for slot in self._slots.values():
            self._recorder.commit(slot)

    def _body_received(self, stream_id: int, data: bytes) -> None:
        """Body bytes arrived: record them, and push the stream's read deadline back."""
        slot = self._slots.get(stream_id)
        if slot is not None and data:
            slot.body += data
            self._recorder.commit(slot)
        stream = self._streams.get(stream_id)
        if stream is not None and stream.body_scope is not None:
            stream.body_scope.deadline = trio.current_time() + self._read_timeout

    def _body_ended(self, stream_id: int) -> None:
        stream = self._streams.get(stream_id)
        if stream is not None:
            stream.body_done.set()

    def _client_reset(self, stream_id: int) -> None:
        """The client reset the stream: stop serving it."""
        stream = self._streams.pop(stream_id, None)
        if stream is not None:
            stream.abandon()
            self._streams_changed()

    def _abandon_from(self, first_id: int, cause: Action) -> None:
        """Stop serving the streams with an id at or above `first_id` (beyond a GOAWAY);
        `cause` becomes the recorded action of those that had not executed yet."""
        for stream_id, stream in list(self._streams.items()):
            if stream_id >= first_id:
                stream.abandon()
                if not stream.slot.executed:
                    stream.slot.action = cause
                del self._streams[stream_id]

    # -- one stream -----------------------------------------------------------------------

    def _start_stream(
        self, stream_id: int, slot: Slot, head: RequestHead, action: AfterBody | Handler
    ) -> None:
        """Serve the stream in a task of its own. It is registered at once, so that a GOAWAY
        sent next counts it as in progress or abandons it."""
        stream = RequestStream(stream_id, slot, head.expect_100)
        self._streams[stream_id] = stream
        assert self._nursery is not None
        self._nursery.start_soon(self._serve_stream, stream, action, head.method)

    async def _serve_stream(
        self, stream: RequestStream, action: AfterBody | Handler, method: str
    ) -> None:
        try:
            with stream.scope:
                if stream.abandoned:  # beyond a GOAWAY sent in the same batch of events
                    return
                if not await self._wait_body(stream):
                    # The client stopped sending its body: give up on this stream only.
                    self._give_up(stream.stream_id)
                    return
                if stream.abandoned:  # woken by the body and abandoned in the same batch
                    return
                if isinstance(action, Handler):
                    chosen = await self._handled(stream, action)
                    if chosen is None:
                        return
                    action = chosen
                stream.slot.executed = True
                self._recorder.commit(stream.slot)
                await self._after_body(stream, action, method)
        except self.STREAM_GONE:
            pass
        except trio.TooSlowError:
            # The client stopped reading (a shut flow-control window, or no acknowledgements):
            # give up on this stream only.
            self._give_up(stream.stream_id)
        finally:
            if self._streams.get(stream.stream_id) is stream:
                del self._streams[stream.stream_id]
            self._recorder.commit(stream.slot)
            self._streams_changed()

    async def _wait_body(self, stream: RequestStream) -> bool:
        """Wait for the end of the request body; False if it stalled for the read timeout."""
        send_headers = partial(self._send_headers, stream.stream_id)
        return await stream.wait_body(self._read_timeout, send_headers)

    async def _after_body(self, stream: RequestStream, action: AfterBody, method: str) -> None:
        if isinstance(action, Stall):
            await trio.sleep(action.seconds)
            await self._after_body(stream, action.then, method)
        elif isinstance(action, EndlessBody):
            await self._endless(stream.stream_id, action, method)
        elif isinstance(action, Respond):
            await self._respond(stream, action, method)
        else:
            await self._fault_after_body(stream, action, method)
