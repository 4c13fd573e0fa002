"""Fallback benchmark server, used when nginx is not installed (or with ``--server fallback``).

A single-process asyncio server built on ``asyncio.Protocol`` (no framework): a minimal
hand-written HTTP/1.1 parser for cleartext and TLS, and ``h2`` for HTTP/2 over TLS (ALPN). It
serves exactly the routes the benchmarks use, the same bytes as the nginx configuration:

- ``GET /small``     -> 200, ``hello, world\\n`` (13 bytes)
- ``GET /64k.bin``   -> 200, 65536 bytes
- ``POST /upload``   -> 200, ``ok\\n`` after the whole request body has been read
- anything else      -> 404 (405 for a POST elsewhere)

It is pure Python, so each request costs it more CPU than nginx, and on a slower machine or with
faster clients it can become the bottleneck: look at the "srv CPU" column (near 100% means the
server, not the client, set the pace). It also writes one batch of responses per read, where
nginx writes per response, which changes what a client pays per request (notably over HTTP/2).
Use its numbers as ratios between clients of the same run; publish numbers measured with nginx.

Run as ``python -m benchmarks.fallback_server --cert C --key K``; it prints one JSON line with the
ports it listens on (all on 127.0.0.1) and serves until SIGTERM/SIGINT, its parent exits, or
``--max-lifetime`` seconds pass.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import ssl
import sys

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

SMALL = b"hello, world\n"
BIG = bytes(range(256)) * 256  # 64 KiB
UPLOAD_REPLY = b"ok\n"
MAX_HEAD = 65536


def _h1_response(status: int, reason: str, body: bytes, ctype: str) -> bytes:
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "Server: bench-fallback\r\n"
        f"Content-Type: {ctype}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode("ascii")
    return head + body


def route(method: bytes, target: bytes) -> tuple[int, bytes, bytes]:
    """(status, body, content-type) for a request."""
    if method == b"GET" or method == b"HEAD":
        if target == b"/small":
            return 200, SMALL, b"text/plain"
        if target == b"/64k.bin":
            return 200, BIG, b"application/octet-stream"
        return 404, b"not found\n", b"text/plain"
    if method == b"POST":
        if target == b"/upload":
            return 200, UPLOAD_REPLY, b"text/plain"
        return 405, b"method not allowed\n", b"text/plain"
    return 405, b"method not allowed\n", b"text/plain"


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}
_H1_CACHE: dict[tuple[int, bytes, bytes], bytes] = {}


def _h1_bytes(status: int, body: bytes, ctype: bytes) -> bytes:
    key = (status, body, ctype)
    resp = _H1_CACHE.get(key)
    if resp is None:
        resp = _h1_response(status, _REASONS.get(status, "Unknown"), body, ctype.decode())
        _H1_CACHE[key] = resp
    return resp


# Parser states
_HEAD, _BODY, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_CRLF, _TRAILER = range(6)


class H1Protocol(asyncio.Protocol):
    """HTTP/1.1 with keep-alive, pipelining, Content-Length and chunked request bodies."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.state = _HEAD
        self.remaining = 0
        self.response = b""
        self.close_after = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def _bad(self) -> None:
        assert self.transport is not None
        self.transport.write(_h1_bytes(400, b"bad request\n", b"text/plain"))
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        buf = self.buf
        buf += data
        out: list[bytes] = []
        while buf:
            state = self.state
            if state == _HEAD:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(buf) > MAX_HEAD:
                        self._bad()
                        return
                    break
                head = bytes(buf[:end])
                del buf[: end + 4]
                lines = head.split(b"\r\n")
                parts = lines[0].split(b" ")
                if len(parts) != 3:
                    self._bad()
                    return
                method, target, version = parts
                length = 0
                chunked = False
                close = version == b"HTTP/1.0"
                for line in lines[1:]:
                    name, _, value = line.partition(b":")
                    name = name.strip().lower()
                    if name == b"content-length":
                        try:
                            length = int(value)
                        except ValueError:
                            self._bad()
                            return
                    elif name == b"transfer-encoding":
                        chunked = b"chunked" in value.lower()
                    elif name == b"connection":
                        v = value.strip().lower()
                        close = v == b"close" or (close and v != b"keep-alive")
                status, body, ctype = route(method, target)
                resp = _h1_bytes(status, body, ctype)
                if method == b"HEAD":
                    resp = resp[: len(resp) - len(body)]
                self.response = resp
                self.close_after = close
                if chunked:
                    self.state = _CHUNK_SIZE
                elif length > 0:
                    self.state = _BODY
                    self.remaining = length
                else:
                    out.append(resp)
                    if close:
                        break
            elif state == _BODY or state == _CHUNK_DATA:
                n = min(len(buf), self.remaining)
                del buf[:n]
                self.remaining -= n
                if self.remaining:
                    break
                if state == _CHUNK_DATA:
                    self.state = _CHUNK_CRLF
                else:
                    self.state = _HEAD
                    out.append(self.response)
                    if self.close_after:
                        break
            elif state == _CHUNK_CRLF:
                if len(buf) < 2:
                    break
                del buf[:2]
                self.state = _CHUNK_SIZE
            else:  # _CHUNK_SIZE or _TRAILER: line-oriented
                end = buf.find(b"\r\n")
                if end < 0:
                    break
                line = bytes(buf[:end])
                del buf[: end + 2]
                if state == _CHUNK_SIZE:
                    try:
                        size = int(line.split(b";", 1)[0], 16)
                    except ValueError:
                        self._bad()
                        return
                    if size == 0:
                        self.state = _TRAILER
                    else:
                        self.remaining = size
                        self.state = _CHUNK_DATA
                elif not line:  # end of trailers: request complete
                    self.state = _HEAD
                    out.append(self.response)
                    if self.close_after:
                        break
        if out:
            self.transport.write(b"".join(out))
        if self.close_after and self.state == _HEAD and out:
            self.transport.close()


class H2Protocol(asyncio.Protocol):
    """HTTP/2 over TLS with the h2 library; honours flow control for large responses."""

    def __init__(self) -> None:
        self.conn = h2.connection.H2Connection(
            config=h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        self.transport: asyncio.Transport | None = None
        self.requests: dict[int, tuple[bytes, bytes]] = {}
        self.pending: dict[int, memoryview] = {}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is None or ssl_object.selected_alpn_protocol() != "h2":
            transport.close()
            return
        self.conn.initiate_connection()
        self.conn.update_settings(
            {
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 256,
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 20,
            }
        )
        self.conn.increment_flow_control_window(1 << 24)
        transport.write(self.conn.data_to_send())

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        conn = self.conn
        try:
            events = conn.receive_data(data)
        except h2.exceptions.ProtocolError:
            self.transport.write(conn.data_to_send())
            self.transport.close()
            return
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                method = path = b""
                for name, value in event.headers or ():
                    if name == b":method":
                        method = bytes(value)
                    elif name == b":path":
                        path = bytes(value)
                if event.stream_id is not None:
                    self.requests[event.stream_id] = (method, path)
            elif isinstance(event, h2.events.DataReceived):
                if event.stream_id is not None and event.flow_controlled_length is not None:
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                if event.stream_id is not None:
                    self._respond(event.stream_id)
            elif isinstance(event, h2.events.WindowUpdated):
                for stream_id in list(self.pending):
                    self._send_body(stream_id, self.pending.pop(stream_id))
            elif isinstance(event, h2.events.StreamReset):
                self.requests.pop(event.stream_id or 0, None)
                self.pending.pop(event.stream_id or 0, None)
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.transport.write(conn.data_to_send())
                self.transport.close()
                return
        out = conn.data_to_send()
        if out:
            self.transport.write(out)

    def _respond(self, stream_id: int) -> None:
        method, path = self.requests.pop(stream_id, (b"", b""))
        status, body, ctype = route(method, path)
        if method == b"HEAD":
            body = b""
        self.conn.send_headers(
            stream_id,
            [
                (b":status", str(status).encode()),
                (b"server", b"bench-fallback"),
                (b"content-type", ctype),
                (b"content-length", str(len(body)).encode()),
            ],
            end_stream=not body,
        )
        if body:
            self._send_body(stream_id, memoryview(body))

    def _send_body(self, stream_id: int, view: memoryview) -> None:
        conn = self.conn
        while view:
            try:
                window = conn.local_flow_control_window(stream_id)
            except Exception:  # stream closed meanwhile
                return
            size = min(window, conn.max_outbound_frame_size, len(view))
            if size <= 0:
                self.pending[stream_id] = view
                return
            conn.send_data(stream_id, view[:size].tobytes(), end_stream=size == len(view))
            view = view[size:]


def _tls_context(cert: str, key: str, alpn: list[str]) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    ctx.set_alpn_protocols(alpn)
    return ctx


async def serve(args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    servers: list[asyncio.Server] = []
    ports: dict[str, int] = {}
    h1 = await loop.create_server(H1Protocol, "127.0.0.1", 0, backlog=1024)
    servers.append(h1)
    ports["h1"] = h1.sockets[0].getsockname()[1]
    if args.cert and args.key:
        ctx1 = _tls_context(args.cert, args.key, ["http/1.1"])
        h1s = await loop.create_server(H1Protocol, "127.0.0.1", 0, ssl=ctx1, backlog=1024)
        ctx2 = _tls_context(args.cert, args.key, ["h2"])
        h2s = await loop.create_server(H2Protocol, "127.0.0.1", 0, ssl=ctx2, backlog=1024)
        servers += [h1s, h2s]
        ports["h1_tls"] = h1s.sockets[0].getsockname()[1]
        ports["h2_tls"] = h2s.sockets[0].getsockname()[1]
    print(json.dumps({"ports": ports, "pid": os.getpid()}), flush=True)

    parent = os.getppid()
    deadline = loop.time() + args.max_lifetime
    while not stop.is_set() and loop.time() < deadline and os.getppid() == parent:
        try:
            await asyncio.wait_for(stop.wait(), 1.0)
        except asyncio.TimeoutError:
            pass
    for server in servers:
        server.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--cert", help="PEM certificate chain (enables the TLS listeners)")
    parser.add_argument("--key", help="PEM private key")
    parser.add_argument("--cpu", type=int, default=None, help="pin this process to one CPU")
    parser.add_argument("--max-lifetime", type=float, default=3600.0)
    args = parser.parse_args(argv)
    if args.cpu is not None and hasattr(os, "sched_setaffinity"):
        try:
            os.sched_setaffinity(0, {args.cpu})
        except OSError as exc:
            print(f"fallback server: could not pin to CPU {args.cpu}: {exc}", file=sys.stderr)
    asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
