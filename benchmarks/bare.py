"""The floors: bare h11 and bare h2 loops over Trio, and under them the raw Trio loop.

Everything a real client does on top (pooling, timeouts, validation, evidence, retries) costs on
top of the h11 and h2 loops; what any Trio client pays before it parses a byte (the scheduler,
``trio.SocketStream``, ``trio.SSLStream``) is the raw loop's. See docs/benchmarks.md, "Clients".
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import cast

import h2.config
import h2.connection
import h2.events
import h2.settings
import h11
import trio

from benchmarks.adapter import H1, H2, Adapter

# --------------------------------------------------------------------------------------------
# The raw Trio loop: prebaked requests written, bytes read and counted, nothing parsed. One
# connection per task, as the h11 loop. The floor under every Trio client: what the scheduler
# and trio's streams cost per request (the TLS one included), with no HTTP at all.
# --------------------------------------------------------------------------------------------


class _RawConn:
    __slots__ = ("stream",)

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream


class TrioRawAdapter(Adapter):
    """Writes one prebaked request per call (the bytes of each (method, path, body size) built
    once) and reads until the response's known length arrived.

    The length of each path's whole response (head and body) is learnt once per process, from
    its first response (found by the blank line and ``Content-Length``: the only parsing it
    does); later responses are read by count alone. nginx's (and the fallback's) responses to
    a path keep one length (its ``Date`` is fixed width), and a read past it, a close, or a
    status other than 200 in the first bytes is an error, so a changed length cannot pass
    unnoticed. Only the status line's start is checked per response; the driver checks the
    body's length, which is the learnt one."""

    name = "trio_raw"
    label = "raw Trio loop"
    runtime = "trio"
    protocols = frozenset({H1})
    description = (
        "prebaked requests over trio.SocketStream (trio.SSLStream for TLS), one keep-alive "
        "connection per task, responses read by their length: no parsing"
    )

    async def setup(self) -> None:
        self._conns: dict[trio.lowlevel.Task, _RawConn] = {}
        self._ssl = self.endpoint.ssl_context([H1]) if self.endpoint.tls else None
        self._host = f"{self.endpoint.host}:{self.endpoint.port}".encode()
        self._requests: dict[tuple[bytes, str, int], bytes] = {}
        #: path -> (whole response length, body length), learnt from its first response.
        self._lengths: dict[str, tuple[int, int]] = {}

    async def teardown(self) -> None:
        conns = list(self._conns.values())
        self._conns.clear()
        with trio.move_on_after(2):
            for c in conns:
                await trio.aclose_forcefully(c.stream)

    async def _connect(self) -> _RawConn:
        stream: trio.abc.Stream = await trio.open_tcp_stream(self.endpoint.host, self.endpoint.port)
        if self._ssl is not None:
            tls = trio.SSLStream(
                stream, self._ssl, server_hostname=self.endpoint.host, https_compatible=True
            )
            await tls.do_handshake()
            stream = tls
        return _RawConn(stream)

    def _request_bytes(self, method: bytes, path: str, body: bytes | None) -> bytes:
        key = (method, path, -1 if body is None else len(body))
        data = self._requests.get(key)
        if data is None:
            head = b"%s %s HTTP/1.1\r\nhost: %s\r\nuser-agent: bench-raw\r\n" % (
                method,
                path.encode(),
                self._host,
            )
            if body is not None:
                head += b"content-length: %d\r\n" % len(body)
            data = self._requests[key] = head + b"\r\n" + (body or b"")
        return data

    async def _learn(self, stream: trio.abc.Stream, path: str) -> tuple[int, int]:
        """Read one whole response and return its (total, body) lengths (setup, once)."""
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200 "):
            raise RuntimeError(f"unexpected response: {head[:40]!r}")
        length = None
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if length is None:
            raise RuntimeError("the raw loop needs a Content-Length")
        while len(rest) < length:
            chunk = await stream.receive_some(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            rest += chunk
        if len(rest) != length:
            raise RuntimeError("bytes past the response")
        return len(head) + 4 + length, length

    async def _exchange(self, method: bytes, path: str, body: bytes | None) -> tuple[int, int]:
        task = trio.lowlevel.current_task()
        c = self._conns.get(task)
        if c is None:
            c = self._conns[task] = await self._connect()
        stream = c.stream
        try:
            await stream.send_all(self._request_bytes(method, path, body))
            lengths = self._lengths.get(path)
            if lengths is None:
                lengths = self._lengths[path] = await self._learn(stream, path)
                return 200, lengths[1]
            left, size = lengths
            first = await stream.receive_some(65536)
            if first[:13] != b"HTTP/1.1 200 ":
                raise RuntimeError(f"unexpected response: {first[:40]!r}")
            left -= len(first)
            while left > 0:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    raise ConnectionError("server closed the connection")
                left -= len(chunk)
            if left:
                raise RuntimeError("the response was longer than learnt: lengths differ")
            return 200, size
        except BaseException:
            self._conns.pop(task, None)
            await trio.aclose_forcefully(stream)
            raise

    async def get(self, path: str) -> tuple[int, int]:
        return await self._exchange(b"GET", path, None)

    async def post(self, path: str, body: bytes) -> tuple[int, int]:
        return await self._exchange(b"POST", path, body)


# --------------------------------------------------------------------------------------------
# Bare h11 over Trio: one connection per task, keep-alive, no pool. The floor of a pure-Python
# h11 stack: everything a real client adds (pooling, evidence, retries) costs on top of this.
# --------------------------------------------------------------------------------------------


class _H11Conn:
    __slots__ = ("conn", "stream")

    def __init__(self, stream: trio.abc.Stream, conn: h11.Connection) -> None:
        self.stream = stream
        self.conn = conn


class H11TrioAdapter(Adapter):
    name = "h11_trio"
    label = "bare h11 (Trio)"
    runtime = "trio"
    protocols = frozenset({H1})
    description = "h11.Connection over trio.SocketStream, one keep-alive connection per task"

    async def setup(self) -> None:
        self._conns: dict[trio.lowlevel.Task, _H11Conn] = {}
        self._ssl = self.endpoint.ssl_context([H1]) if self.endpoint.tls else None
        self._base_headers = [
            (b"host", f"{self.endpoint.host}:{self.endpoint.port}".encode()),
            (b"user-agent", b"bench-bare-h11"),
        ]

    async def teardown(self) -> None:
        conns = list(self._conns.values())
        self._conns.clear()
        with trio.move_on_after(2):
            for c in conns:
                await trio.aclose_forcefully(c.stream)

    async def _connect(self) -> _H11Conn:
        stream: trio.abc.Stream = await trio.open_tcp_stream(self.endpoint.host, self.endpoint.port)
        if self._ssl is not None:
            tls = trio.SSLStream(
                stream, self._ssl, server_hostname=self.endpoint.host, https_compatible=True
            )
            await tls.do_handshake()
            stream = tls
        return _H11Conn(stream, h11.Connection(h11.CLIENT))

    async def _request(self, method: bytes, path: str, body: bytes | None) -> tuple[int, int]:
        task = trio.lowlevel.current_task()
        c = self._conns.get(task)
        if c is None:
            c = await self._connect()
            self._conns[task] = c
        conn = c.conn
        try:
            if body is None:
                head = conn.send(
                    h11.Request(method=method, target=path, headers=self._base_headers)
                )
                out = b"".join((head or b"", conn.send(h11.EndOfMessage()) or b""))
            else:
                headers = [*self._base_headers, (b"content-length", str(len(body)).encode())]
                head = conn.send(h11.Request(method=method, target=path, headers=headers))
                data = conn.send(h11.Data(data=body))
                end = conn.send(h11.EndOfMessage())
                out = b"".join((head or b"", data or b"", end or b""))
            await c.stream.send_all(out)
            status = 0
            received = 0
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(cast(bytes, await c.stream.receive_some(65536)))
                elif type(event) is h11.Data:
                    received += len(event.data)
                elif type(event) is h11.Response:
                    status = event.status_code
                elif type(event) is h11.EndOfMessage:
                    break
                elif type(event) is h11.ConnectionClosed:
                    raise ConnectionError("server closed the connection")
            if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
                conn.start_next_cycle()
            else:
                del self._conns[task]
                await trio.aclose_forcefully(c.stream)
            return status, received
        except BaseException:
            self._conns.pop(task, None)
            await trio.aclose_forcefully(c.stream)
            raise

    async def get(self, path: str) -> tuple[int, int]:
        return await self._request(b"GET", path, None)

    async def post(self, path: str, body: bytes) -> tuple[int, int]:
        return await self._request(b"POST", path, body)


# --------------------------------------------------------------------------------------------
# Bare h2 over Trio + TLS: one connection, many concurrent streams, one reader task. The floor
# of a pure-Python h2 stack.
# --------------------------------------------------------------------------------------------


class _H2Stream:
    __slots__ = ("done", "error", "received", "status")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.status = 0
        self.received = 0
        self.error: BaseException | None = None


class H2TrioAdapter(Adapter):
    name = "h2_trio"
    label = "bare h2 (Trio)"
    runtime = "trio"
    protocols = frozenset({H2})
    description = "h2.H2Connection over trio.SSLStream, one connection, one reader task"

    _WINDOW = 1 << 24

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        ctx = self.endpoint.ssl_context([H2])
        tcp = await trio.open_tcp_stream(self.endpoint.host, self.endpoint.port)
        self._stream = trio.SSLStream(
            tcp, ctx, server_hostname=self.endpoint.host, https_compatible=True
        )
        try:
            await self._stream.do_handshake()
            if self._stream.selected_alpn_protocol() != H2:
                raise RuntimeError("server did not negotiate h2 via ALPN")
            config = h2.config.H2Configuration(client_side=True, header_encoding=None)
            self._conn = h2.connection.H2Connection(config=config)
            self._conn.initiate_connection()
            self._conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: self._WINDOW})
            self._conn.increment_flow_control_window(self._WINDOW)
            self._send_lock = trio.Lock()
            self._streams: dict[int, _H2Stream] = {}
            self._window_changed = trio.Event()
            self._failure: BaseException | None = None
            authority = f"{self.endpoint.host}:{self.endpoint.port}".encode()
            self._headers_base = [(b":scheme", b"https"), (b":authority", authority)]
            await self._flush()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._reader)
                try:
                    yield
                finally:
                    nursery.cancel_scope.cancel()
            with trio.move_on_after(1):
                self._conn.close_connection()
                await self._flush()
        finally:
            await trio.aclose_forcefully(self._stream)

    async def _flush(self) -> None:
        async with self._send_lock:
            data = self._conn.data_to_send()
            if data:
                await self._stream.send_all(data)

    async def _reader(self) -> None:
        conn = self._conn
        streams = self._streams
        try:
            while True:
                data = await self._stream.receive_some(65536)
                if not data:
                    raise ConnectionError("server closed the connection")
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.DataReceived):
                        st = streams.get(event.stream_id)
                        if st is not None and event.data is not None:
                            st.received += len(event.data)
                        conn.acknowledge_received_data(
                            event.flow_controlled_length, event.stream_id
                        )
                    elif isinstance(event, h2.events.ResponseReceived):
                        st = streams.get(event.stream_id)
                        if st is not None:
                            for name, value in event.headers:
                                if name == b":status":
                                    st.status = int(value)
                                    break
                    elif isinstance(event, h2.events.StreamEnded):
                        st = streams.get(event.stream_id)
                        if st is not None:
                            st.done.set()
                    elif isinstance(event, h2.events.StreamReset):
                        st = streams.get(event.stream_id)
                        if st is not None:
                            st.error = ConnectionError(f"stream reset: {event.error_code!r}")
                            st.done.set()
                    elif isinstance(event, h2.events.WindowUpdated):
                        self._window_changed.set()
                        self._window_changed = trio.Event()
                    elif isinstance(event, h2.events.ConnectionTerminated):
                        raise ConnectionError(f"GOAWAY: {event.error_code!r}")
                await self._flush()
        except Exception as exc:
            self._failure = exc
            self._window_changed.set()
            for st in streams.values():
                st.error = exc
                st.done.set()

    async def _exchange(self, method: bytes, path: str, body: bytes | None) -> tuple[int, int]:
        if self._failure is not None:
            raise ConnectionError(f"connection failed: {self._failure!r}")
        conn = self._conn
        stream_id = conn.get_next_available_stream_id()
        st = _H2Stream()
        self._streams[stream_id] = st
        headers = [(b":method", method), (b":path", path.encode()), *self._headers_base]
        try:
            if body is None:
                conn.send_headers(stream_id, headers, end_stream=True)
                await self._flush()
            else:
                headers.append((b"content-length", str(len(body)).encode()))
                conn.send_headers(stream_id, headers)
                await self._send_body(stream_id, body)
            await st.done.wait()
        finally:
            del self._streams[stream_id]
        if st.error is not None:
            raise st.error
        return st.status, st.received

    async def _send_body(self, stream_id: int, body: bytes) -> None:
        conn = self._conn
        view = memoryview(body)
        while True:
            window = min(conn.local_flow_control_window(stream_id), conn.max_outbound_frame_size)
            if window <= 0:
                changed = self._window_changed
                await self._flush()
                await changed.wait()
                if self._failure is not None:
                    raise ConnectionError(f"connection failed: {self._failure!r}")
                continue
            chunk = view[:window]
            view = view[window:]
            conn.send_data(stream_id, chunk.tobytes(), end_stream=not view)
            if not view:
                break
        await self._flush()

    async def get(self, path: str) -> tuple[int, int]:
        return await self._exchange(b"GET", path, None)

    async def post(self, path: str, body: bytes) -> tuple[int, int]:
        return await self._exchange(b"POST", path, body)
