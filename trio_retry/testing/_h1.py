"""Serve one HTTP/1.1 connection (h11), applying the script to each request in turn."""

from __future__ import annotations

import h11
import trio

from ._common import ConnContext, Ending, Slot, ending_for
from ._replies import h11_headers
from ._routes import Pick
from ._script import (
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
    Stall,
    StopReading,
    StreamedBody,
    StreamFrames,
    body_allowed,
    paced_chunks,
    response_headers,
)

__all__ = ["H1Handler"]

_RECEIVE_SIZE = 65536


class H1Handler:
    """One HTTP/1.1 connection: read a head, pick the action, apply it, repeat (keep-alive).

    `run` returns how the connection should end; the caller closes it. Disconnects surface as
    exceptions from `DISCONNECTS`; a script that cannot apply to HTTP/1.1 raises `ScriptError`.
    """

    def __init__(self, ctx: ConnContext, initial: bytes) -> None:
        self._ctx = ctx
        self._conn = h11.Connection(h11.SERVER)
        # Bytes already read while sniffing for the HTTP/2 preface belong to the first head.
        self._head_started = bool(initial)
        if initial:
            self._conn.receive_data(initial)
        self._sent_100 = False

    async def run(self) -> Ending:
        while True:
            try:
                request = await self._read_head()
            except h11.RemoteProtocolError as exc:
                await self._send_error(exc)
                return Ending.CLOSE
            if request is None:
                return Ending.CLOSE
            ending = await self._serve_one(request)
            if ending is not None:
                return ending
            self._conn.start_next_cycle()
            self._sent_100 = False

    async def _receive(self, within: float) -> bool:
        """Feed h11 one read; False if nothing arrived within `within` seconds."""
        with trio.move_on_after(max(0.0, within)):
            data = await self._ctx.stream.receive_some(_RECEIVE_SIZE)
            self._conn.receive_data(bytes(data))
            return True
        return False

    async def _send(self, event: h11.Event) -> None:
        if isinstance(event, h11.Response) and self._ctx.alt_svc is not None:
            # Every final response advertises HTTP/3 (FaultServer(http3=True)), in one place.
            headers = [*event.headers, (b"alt-svc", self._ctx.alt_svc.encode("ascii"))]
            event = h11.Response(status_code=event.status_code, headers=headers)
        data = self._conn.send(event)
        if data:
            with trio.fail_after(self._ctx.timeouts.write):
                await self._ctx.stream.send_all(data)

    async def _send_error(self, exc: h11.RemoteProtocolError) -> None:
        # Like any server, answer garbage with a 4xx when h11 still allows a response.
        if self._conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        headers = [("Content-Length", "0"), ("Connection", "close")]
        try:
            await self._send(h11.Response(status_code=exc.error_status_hint, headers=headers))
            await self._send(h11.EndOfMessage())
        except h11.LocalProtocolError:
            pass

    async def _read_head(self) -> h11.Request | None:
        """The next request head, or None when the client closed or stayed silent too long.

        Waiting for a request's first byte is bounded by the idle timeout; from its first
        byte, the whole head must arrive within the read timeout.
        """
        timeouts = self._ctx.timeouts
        deadline = trio.current_time() + timeouts.read if self._head_started else None
        self._head_started = False
        while True:
            event = self._conn.next_event()
            if isinstance(event, h11.Request):
                return event
            if isinstance(event, h11.ConnectionClosed):
                return None
            if event is not h11.NEED_DATA:
                raise h11.RemoteProtocolError(f"unexpected {event!r} before a request")
            if deadline is None:
                if not await self._receive(timeouts.idle):
                    return None
                deadline = trio.current_time() + timeouts.read
            elif not await self._receive(deadline - trio.current_time()):
                return None

    async def _serve_one(self, request: h11.Request) -> Ending | None:
        """Apply the script to one request; None means keep the connection for the next."""
        method = request.method.decode("ascii")
        target = request.target.decode("latin-1")
        recorder = self._ctx.recorder
        # The HTTP/2 preface reached a server not speaking HTTP/2: no application ran it, and it
        # takes no scripted action. Recorded (not executed), answered 505 and closed, as an
        # HTTP/1.1-only server would refuse it.
        preface = method == "PRI" and target == "*"
        pick = Pick(CloseBeforeRead(), {}) if preface else recorder.script.pick(method, target)
        action = pick.action
        slot = recorder.open(
            method=method,
            path=target,
            headers=tuple((n.decode("latin-1"), v.decode("latin-1")) for n, v in request.headers),
            connection_id=self._ctx.connection_id,
            http_version="HTTP/" + request.http_version.decode("ascii"),
            stream_id=None,
            action=action,
            params=pick.params,
        )
        try:
            if preface:
                headers = [("Content-Length", "0"), ("Connection", "close")]
                try:
                    await self._send(h11.Response(status_code=505, headers=headers))
                    await self._send(h11.EndOfMessage())
                except h11.LocalProtocolError:
                    pass
                return ending_for(False)
            body_read = False
            if isinstance(action, Handler):
                # A handler sees the whole request, so the body is read first.
                await self._read_body(slot)
                body_read = True
                action = await recorder.resolve(slot, action)
            if isinstance(action, (RefuseStream, GoAway, StopReading, ShutWindow, StreamFrames)):
                raise ScriptError(
                    f"{type(action).__name__} is HTTP/2-only, but {method} {target} arrived"
                    " over HTTP/1.1"
                )
            if isinstance(action, CloseBeforeRead):
                return ending_for(action.reset)
            if isinstance(action, CloseAfterHead):
                if not body_read:
                    self._take_buffered_body(slot)
                return ending_for(action.reset)
            if not body_read:
                await self._read_body(slot)
            slot.executed = True
            recorder.commit(slot)
            return await self._after_body(action, method)
        finally:
            recorder.commit(slot)

    def _take_buffered_body(self, slot: Slot) -> None:
        """Record body bytes that arrived with the head, without reading the socket."""
        try:
            while isinstance(event := self._conn.next_event(), h11.Data):
                slot.body += event.data
        except h11.RemoteProtocolError:
            pass

    async def _read_body(self, slot: Slot) -> None:
        if self._conn.they_are_waiting_for_100_continue:
            # What a real server does when its application starts reading the body.
            await self._send(h11.InformationalResponse(status_code=100, headers=[]))
            self._sent_100 = True
        while True:
            event = self._conn.next_event()
            if isinstance(event, h11.Data):
                slot.body += event.data
                self._ctx.recorder.commit(slot)
            elif isinstance(event, h11.EndOfMessage):
                return
            elif event is h11.NEED_DATA:
                if not await self._receive(self._ctx.timeouts.read):
                    raise trio.TooSlowError("request body stalled")
            else:
                raise h11.RemoteProtocolError(f"unexpected {event!r} in a request body")

    async def _after_body(self, action: AfterBody, method: str) -> Ending | None:
        if isinstance(action, Stall):
            await trio.sleep(action.seconds)
            return await self._after_body(action.then, method)
        if isinstance(action, CloseAfterBody):
            return ending_for(action.reset)
        if isinstance(action, PartialBody):
            headers = response_headers(action.status, action.headers, action.declared_length)
            await self._send(h11.Response(status_code=action.status, headers=h11_headers(headers)))
            if action.body and body_allowed(action.status, method):
                await self._send(h11.Data(data=action.body))
            return ending_for(action.reset)
        if isinstance(action, Raw):
            return await self._raw(action)
        if isinstance(action, EndlessBody):
            return await self._endless(action, method)
        if isinstance(action, StreamedBody):
            return await self._streamed(action, method)
        if isinstance(action, StreamFrames):  # as the `then` of a Stall
            raise ScriptError("StreamFrames is HTTP/2-only, but arrived over HTTP/1.1")
        return await self._respond(action, method)

    async def _raw(self, action: Raw) -> Ending:
        """Write the bytes outside h11 (whose state no longer matches the wire), then close, or
        keep the connection open, discarding input, until the client closes or goes idle."""
        if action.data:
            with trio.fail_after(self._ctx.timeouts.write):
                await self._ctx.stream.send_all(action.data)
        if not action.close:
            with trio.move_on_after(self._ctx.timeouts.idle):
                while await self._ctx.stream.receive_some(_RECEIVE_SIZE):
                    pass
        return Ending.CLOSE

    async def _endless(self, action: EndlessBody, method: str) -> Ending | None:
        # No length in the headers: h11 picks chunked (close-delimited for HTTP/1.0 clients).
        await self._send(
            h11.Response(status_code=action.status, headers=h11_headers(action.headers))
        )
        if not body_allowed(action.status, method):
            await self._send(h11.EndOfMessage())
            return Ending.CLOSE if self._conn.our_state is h11.MUST_CLOSE else None
        pause = action.pause()
        # Ends when a write fails (the client left) or stalls for the write timeout; `seconds`
        # bounds it even against a client that reads forever.
        with trio.move_on_after(action.seconds):
            while True:
                await self._send(h11.Data(data=action.chunk))
                if pause:
                    await trio.sleep(pause)
        return Ending.RESET

    async def _streamed(self, action: StreamedBody, method: str) -> Ending | None:
        # No length in the headers: h11 picks chunked (close-delimited for HTTP/1.0 clients).
        await self._send(
            h11.Response(status_code=action.status, headers=h11_headers(action.headers))
        )
        if body_allowed(action.status, method):
            with trio.move_on_after(action.seconds) as bound:
                for part in action.parts:
                    if isinstance(part, bytes):
                        await self._send(h11.Data(data=part))
                    else:
                        await trio.sleep(part)
                if action.end == "hang":
                    # Until the client leaves (EOF or an error), discarding what it sends.
                    while await self._ctx.stream.receive_some(_RECEIVE_SIZE):
                        pass
            if action.end == "reset":
                return Ending.RESET
            if action.end != "finish" or bound.cancelled_caught:
                return Ending.CLOSE  # without the last chunk: the body is cut short
        await self._send(h11.EndOfMessage())
        return Ending.CLOSE if self._conn.our_state is h11.MUST_CLOSE else None

    async def _respond(self, action: Respond, method: str) -> Ending | None:
        if action.delay:
            await trio.sleep(action.delay)
        skip_100 = self._sent_100
        for status in action.informational:
            if status == 100 and skip_100:
                skip_100 = False  # already sent when the body was read
                continue
            await self._send(h11.InformationalResponse(status_code=status, headers=[]))
        headers = response_headers(action.status, action.headers, len(action.body))
        await self._send(h11.Response(status_code=action.status, headers=h11_headers(headers)))
        if body_allowed(action.status, method):
            for chunk, pause in paced_chunks(action.body, action.body_rate):
                await self._send(h11.Data(data=chunk))
                if pause:
                    await trio.sleep(pause)
        await self._send(h11.EndOfMessage())
        # close_after: no "Connection: close" was sent, so the client believes the connection
        # is reusable; that is the point (a stale pooled connection).
        if action.close_after or self._conn.our_state is h11.MUST_CLOSE:
            return Ending.CLOSE
        return None
