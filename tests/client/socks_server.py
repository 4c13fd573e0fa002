"""A small SOCKS5 server for tests (RFC 1928 CONNECT, RFC 1929 username/password).

Loopback only. Written from the RFCs, byte by byte, independent of the client's socksio, so
a mistake in how the client uses socksio cannot hide behind the same mistake here. Records
each CONNECT's address type and target; ``reply`` forces a failure code.
"""

from __future__ import annotations

import ipaddress
import socket

import trio


class SocksServer:
    def __init__(self, *, credentials: tuple[str, str] | None = None, reply: int = 0) -> None:
        self.credentials = credentials
        self.reply = reply
        #: (address type: "ipv4" | "ipv6" | "domain", host, port) of each CONNECT.
        self.connects: list[tuple[str, str, int]] = []
        self.handshakes = 0
        self.port = 0

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started(self.port)
        await trio.serve_listeners(self._handle, listeners)

    async def _exactly(self, stream: trio.SocketStream, count: int) -> bytes:
        data = b""
        while len(data) < count:
            more = await stream.receive_some(count - len(data))
            if not more:
                raise trio.BrokenResourceError
            data += more
        return data

    async def _handle(self, client: trio.SocketStream) -> None:
        try:
            with trio.fail_after(5):
                version, count = await self._exactly(client, 2)
                assert version == 5
                methods = await self._exactly(client, count)
                self.handshakes += 1
                wanted = 2 if self.credentials else 0
                if wanted not in methods:
                    await client.send_all(b"\x05\xff")
                    return
                await client.send_all(bytes([5, wanted]))
                if self.credentials:
                    _, ulen = await self._exactly(client, 2)
                    user = (await self._exactly(client, ulen)).decode()
                    (plen,) = await self._exactly(client, 1)
                    password = (await self._exactly(client, plen)).decode()
                    ok = (user, password) == self.credentials
                    await client.send_all(b"\x01\x00" if ok else b"\x01\x01")
                    if not ok:
                        return
                _, command, _, atype = await self._exactly(client, 4)
                assert command == 1
                if atype == 1:
                    kind, host = "ipv4", str(ipaddress.ip_address(await self._exactly(client, 4)))
                elif atype == 4:
                    kind, host = "ipv6", str(ipaddress.ip_address(await self._exactly(client, 16)))
                else:
                    (length,) = await self._exactly(client, 1)
                    kind, host = "domain", (await self._exactly(client, length)).decode()
                port = int.from_bytes(await self._exactly(client, 2), "big")
                self.connects.append((kind, host, port))
                if self.reply:
                    await client.send_all(bytes([5, self.reply, 0, 1, 0, 0, 0, 0, 0, 0]))
                    return
                target = "127.0.0.1" if host == "localhost" else host
                upstream = await trio.open_tcp_stream(target, port)
            bound = upstream.socket.getsockname()
            # Reply with the bound address, sent in two writes to exercise the client's framing.
            reply = bytes([5, 0, 0, 1]) + socket.inet_aton(bound[0]) + bound[1].to_bytes(2, "big")
            await client.send_all(reply[:3])
            await client.send_all(reply[3:])
            async with upstream, client, trio.open_nursery() as nursery:
                nursery.start_soon(self._pipe, client, upstream, nursery)
                nursery.start_soon(self._pipe, upstream, client, nursery)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, trio.TooSlowError):
            return

    async def _pipe(
        self, src: trio.SocketStream, dst: trio.SocketStream, nursery: trio.Nursery
    ) -> None:
        try:
            with trio.move_on_after(30):
                while data := await src.receive_some(65536):
                    await dst.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        nursery.cancel_scope.cancel()
