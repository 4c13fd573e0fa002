"""Raw HTTP/1.1 (h11) and HTTP/2 (h2) clients for driving FaultServer in tests.

They are deliberately dumb: they report what arrived on the wire (statuses, frames, EOF versus
reset) and never retry or interpret, so the tests see exactly what a script produced.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events
import h2.settings
import h11
import trio

from trio_retry.testing import FaultServer

RECEIVE = 65536

#: Every stream `connect` opened; the test fixtures close them after each test.
OPENED: list[trio.abc.Stream] = []


async def close_opened() -> None:
    """Close every stream `connect` opened (abruptly) and forget them."""
    while OPENED:
        await trio.aclose_forcefully(OPENED.pop())


def is_reset(exc: BaseException) -> bool:
    """True when `exc` (or anything it was raised from) is a ConnectionResetError."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, ConnectionResetError):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


async def wait_until(predicate: Callable[[], bool]) -> None:
    """Poll `predicate` every 10 ms (callers bound the wait with trio.fail_after)."""
    while not predicate():
        await trio.sleep(0.01)


async def connect(server: FaultServer, alpn: Sequence[str] | None = None) -> trio.abc.Stream:
    """A connection to `server`: TCP, plus TLS (with `alpn` offered) for a TLS server."""
    tcp = await trio.open_tcp_stream("127.0.0.1", server.port)
    OPENED.append(tcp)
    if not server.tls:
        return tcp
    context = server.client_ssl_context()
    context.set_alpn_protocols(list(alpn or ()))  # none offered unless asked for
    tls = trio.SSLStream(tcp, context, server_hostname="127.0.0.1")
    await tls.do_handshake()
    return tls


async def read_to_end(stream: trio.abc.Stream) -> tuple[bytes, str]:
    """Read until the connection ends; returns (bytes read, "eof" or "reset")."""
    data = bytearray()
    while True:
        try:
            chunk = await stream.receive_some(RECEIVE)
        except trio.BrokenResourceError as exc:
            if is_reset(exc):
                return bytes(data), "reset"
            raise
        if not chunk:
            return bytes(data), "eof"
        data += chunk


@dataclass
class H1Response:
    informational: list[int] = field(default_factory=list)
    status: int | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    complete: bool = False
    #: How the connection ended while reading, when it did: "eof" or "reset".
    end: str | None = None
    times: dict[str, float] = field(default_factory=dict)

    def header(self, name: str) -> str | None:
        return next((v for n, v in self.headers if n == name.lower()), None)


class H1Client:
    """One HTTP/1.1 connection driven by h11."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.conn = h11.Connection(h11.CLIENT)

    @classmethod
    async def open(cls, server: FaultServer) -> H1Client:
        return cls(await connect(server, ["http/1.1"]))

    async def send_request(
        self,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]] = (),
        body: bytes = b"",
        *,
        send_body: bool = True,
    ) -> None:
        """Send a request in one write (head and, unless `send_body` is False, the body)."""
        all_headers = [("Host", "127.0.0.1"), *headers]
        if body and not any(n.lower() == "content-length" for n, _ in headers):
            all_headers.append(("Content-Length", str(len(body))))
        data = self.conn.send(h11.Request(method=method, target=target, headers=all_headers))
        if send_body:
            data = (data or b"") + self._body_bytes(body)
        if data:
            await self.stream.send_all(data)

    def _body_bytes(self, body: bytes) -> bytes:
        data = self.conn.send(h11.Data(data=body)) if body else b""
        return (data or b"") + (self.conn.send(h11.EndOfMessage()) or b"")

    async def send_body(self, body: bytes) -> None:
        await self.stream.send_all(self._body_bytes(body))

    async def read_response(
        self,
        *,
        stop_after_head: bool = False,
        stop_after_informational: bool = False,
        start: float | None = None,
    ) -> H1Response:
        """Read one response; a connection that ends early is reported in `end`.

        `times` are seconds since `start` (default: now).
        """
        resp = H1Response()
        body = bytearray()
        start = trio.current_time() if start is None else start
        while True:
            try:
                event = self.conn.next_event()
            except h11.RemoteProtocolError:
                resp.end = "eof"
                break
            if event is h11.NEED_DATA:
                try:
                    data = await self.stream.receive_some(RECEIVE)
                except trio.BrokenResourceError as exc:
                    if not is_reset(exc):
                        raise
                    resp.end = "reset"
                    break
                self.conn.receive_data(bytes(data))
                continue
            if isinstance(event, h11.InformationalResponse):
                resp.informational.append(event.status_code)
                resp.times.setdefault("first_informational", trio.current_time() - start)
                if stop_after_informational:
                    break
            elif isinstance(event, h11.Response):
                resp.status = event.status_code
                resp.headers = [(n.decode(), v.decode()) for n, v in event.headers]
                resp.times["head"] = trio.current_time() - start
                if stop_after_head:
                    break
            elif isinstance(event, h11.Data):
                body += event.data
                resp.times.setdefault("first_body", trio.current_time() - start)
            elif isinstance(event, h11.EndOfMessage):
                resp.complete = True
                break
            elif isinstance(event, h11.ConnectionClosed):
                resp.end = "eof"
                break
        resp.body = bytes(body)
        resp.times["end"] = trio.current_time() - start
        return resp

    async def request(
        self,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]] = (),
        body: bytes = b"",
    ) -> H1Response:
        """Send a request and read its response. A reset while sending (the server may reset
        before reading everything) is reported like a reset while reading."""
        start = trio.current_time()
        try:
            await self.send_request(method, target, headers, body)
        except trio.BrokenResourceError as exc:
            if not is_reset(exc):
                raise
            return H1Response(end="reset")
        return await self.read_response(start=start)

    def next_cycle(self) -> None:
        self.conn.start_next_cycle()


def _text_headers(headers: Iterable[tuple[bytes | str, bytes | str]]) -> list[tuple[str, str]]:
    def text(value: bytes | str) -> str:
        return value.decode() if isinstance(value, bytes) else value

    return [(text(n), text(v)) for n, v in headers]


@dataclass(frozen=True)
class GoAwayFrame:
    last_stream_id: int
    error_code: int


def split_goaway(buffer: bytearray) -> tuple[bytes, list[GoAwayFrame]]:
    """Take the complete frames out of `buffer`; GOAWAY frames are returned parsed, all others
    as bytes to feed to h2. A partial frame stays in `buffer`.

    Why: h2 moves a connection to CLOSED when it receives GOAWAY and then rejects the frames of
    the streams the GOAWAY promised to finish, so the client reads GOAWAY itself.
    """
    passthrough = bytearray()
    goaways: list[GoAwayFrame] = []
    while len(buffer) >= 9:
        length = int.from_bytes(buffer[:3], "big")
        if len(buffer) < 9 + length:
            break
        frame = bytes(buffer[: 9 + length])
        del buffer[: 9 + length]
        if frame[3] == 0x7:
            last, code = struct.unpack(">II", frame[9:17])
            goaways.append(GoAwayFrame(last & 0x7FFFFFFF, code))
        else:
            passthrough += frame
    return bytes(passthrough), goaways


@dataclass
class H2Stream:
    informational: list[int] = field(default_factory=list)
    status: int | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytearray = field(default_factory=bytearray)
    ended: bool = False
    reset_code: int | None = None
    done_at: float | None = None

    def header(self, name: str) -> str | None:
        return next((v for n, v in self.headers if n == name), None)


class H2Client:
    """One HTTP/2 connection driven by h2; `pump` reads and records what the server sent."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        )
        self.streams: dict[int, H2Stream] = {}
        self.goaway: GoAwayFrame | None = None
        self._frames = bytearray()
        self.server_settings: dict[int, int] = {}
        self.settings_received = False
        #: How the connection ended: "eof", "reset", or None while open.
        self.end: str | None = None

    @classmethod
    async def open(cls, server: FaultServer) -> H2Client:
        if server.tls:
            stream = await connect(server, ["h2", "http/1.1"])
            assert isinstance(stream, trio.SSLStream)
            assert stream.selected_alpn_protocol() == "h2"
        else:
            stream = await connect(server)
        client = cls(stream)
        client.conn.initiate_connection()
        await client.flush()
        return client

    async def flush(self) -> None:
        data = self.conn.data_to_send()
        if data and self.end is None:
            try:
                await self.stream.send_all(data)
            except trio.BrokenResourceError as exc:
                # The server may reset while we still write (say, a SETTINGS ack).
                if not is_reset(exc):
                    raise
                self.end = "reset"

    async def pump(self) -> None:
        """Read once and process what arrived (sets `end` when the connection ends)."""
        try:
            data = await self.stream.receive_some(RECEIVE)
        except trio.BrokenResourceError as exc:
            if not is_reset(exc):
                raise
            self.end = "reset"
            return
        if not data:
            self.end = "eof"
            return
        self._frames += data
        passthrough, goaways = split_goaway(self._frames)
        for event in self.conn.receive_data(passthrough):
            self._on_event(event)
        if goaways:
            self.goaway = goaways[-1]
        await self.flush()

    def _on_event(self, event: h2.events.Event) -> None:
        sid = getattr(event, "stream_id", None)
        state = self.streams.get(sid) if sid else None
        if isinstance(event, h2.events.InformationalResponseReceived) and state:
            state.informational.append(int(dict(_text_headers(event.headers))[":status"]))
        elif isinstance(event, h2.events.ResponseReceived) and state:
            state.headers = _text_headers(event.headers)
            state.status = int(dict(state.headers)[":status"])
        elif isinstance(event, h2.events.DataReceived) and state:
            state.body += event.data
            self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded) and state:
            state.ended = True
            state.done_at = trio.current_time()
        elif isinstance(event, h2.events.StreamReset) and state:
            state.reset_code = int(event.error_code or 0)
            state.done_at = trio.current_time()
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            self.settings_received = True
            for code, changed in event.changed_settings.items():
                self.server_settings[int(code)] = changed.new_value

    async def pump_until(self, predicate: Callable[[], bool]) -> None:
        """Pump until `predicate()` holds or the connection ends."""
        while not predicate() and self.end is None:
            await self.pump()

    async def request(
        self,
        method: str,
        path: str,
        headers: Sequence[tuple[str, str]] = (),
        body: bytes = b"",
        *,
        end_stream: bool = True,
    ) -> int:
        """Open a stream and send the request (body flow-controlled); returns the stream id."""
        sid = self.conn.get_next_available_stream_id()
        self.streams[sid] = H2Stream()
        request_headers = [
            (":method", method),
            (":path", path),
            (":scheme", "https" if isinstance(self.stream, trio.SSLStream) else "http"),
            (":authority", "127.0.0.1"),
            *headers,
        ]
        self.conn.send_headers(sid, request_headers, end_stream=end_stream and not body)
        await self.flush()
        if body:
            await self.send_body(sid, body, end_stream=end_stream)
        return sid

    async def send_body(self, sid: int, body: bytes, *, end_stream: bool = True) -> None:
        view = body
        while view:
            window = min(
                self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size
            )
            if window <= 0:
                await self.pump()
                assert self.end is None, "connection ended while uploading"
                continue
            self.conn.send_data(sid, view[:window])
            view = view[window:]
            await self.flush()
        if end_stream:
            self.conn.end_stream(sid)
            await self.flush()

    async def response(self, sid: int) -> H2Stream:
        """Pump until stream `sid` ended, was reset, or the connection ended."""
        state = self.streams[sid]
        await self.pump_until(lambda: state.ended or state.reset_code is not None)
        return state
