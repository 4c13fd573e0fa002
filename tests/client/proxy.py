"""A small real HTTP proxy for tests: absolute-form forwarding and CONNECT tunnelling.

Loopback only. Each client connection is bound to the first target it names (enough for tests,
which use one origin per proxy connection). ``refuse_connect`` answers CONNECT with 403;
``require_auth`` answers 407 unless the expected Proxy-Authorization arrives.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import trio

DENIED = b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n"


class LoopbackProxy:
    def __init__(self, *, refuse_connect: bool = False, require_auth: str | None = None) -> None:
        self.refuse_connect = refuse_connect
        self.require_auth = require_auth
        self.seen: list[str] = []  # request lines as received
        self.port = 0

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started(self.port)
        await trio.serve_listeners(self._handle, listeners)

    async def _read_head(self, stream: trio.SocketStream) -> tuple[bytes, bytes]:
        buffer = b""
        with trio.fail_after(5):
            while b"\r\n\r\n" not in buffer:
                data = await stream.receive_some(65536)
                if not data:
                    raise trio.BrokenResourceError
                buffer += data
        head, _, rest = buffer.partition(b"\r\n\r\n")
        return head, rest

    async def _handle(self, client: trio.SocketStream) -> None:
        try:
            head, rest = await self._read_head(client)
            lines = head.decode("latin-1").split("\r\n")
            method, target, version = lines[0].split(" ")
            self.seen.append(lines[0])
            headers = {
                k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])
            }
            if self.require_auth and headers.get("proxy-authorization") != self.require_auth:
                await client.send_all(DENIED)
                return
            if method == "CONNECT":
                if self.refuse_connect:
                    await client.send_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                    return
                host, _, port = target.rpartition(":")
                upstream = await trio.open_tcp_stream(host, int(port))
                await client.send_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                first = rest
            else:
                parts = urlsplit(target)
                upstream = await trio.open_tcp_stream(parts.hostname or "", parts.port or 80)
                origin_form = parts.path + (f"?{parts.query}" if parts.query else "")
                kept = [x for x in lines[1:] if not x.lower().startswith("proxy-authorization")]
                first = ("\r\n".join([f"{method} {origin_form} {version}", *kept]) + "\r\n\r\n"
                         ).encode("latin-1") + rest  # fmt: skip
            async with upstream, client:
                if first:
                    await upstream.send_all(first)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._pipe, client, upstream, nursery)
                    nursery.start_soon(self._pipe, upstream, client, nursery)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, trio.TooSlowError):
            return

    async def _pipe(self, src: trio.SocketStream, dst: trio.SocketStream, nursery: trio.Nursery
                    ) -> None:  # fmt: skip
        try:
            with trio.move_on_after(30):
                while data := await src.receive_some(65536):
                    await dst.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        nursery.cancel_scope.cancel()
