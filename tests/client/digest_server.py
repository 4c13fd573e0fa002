"""A small HTTP/1.1 server that demands Digest auth (RFC 7616), written from the RFC for
tests. Loopback only; h11 parses. It counts what it executed (a request with valid
credentials) apart from what it refused with a 401 challenge."""

from __future__ import annotations

import hashlib
import re

import h11
import trio

HASHES = {"MD5": hashlib.md5, "SHA-256": hashlib.sha256}


class DigestServer:
    def __init__(self, user: str, password: str, *, algorithm: str = "MD5") -> None:
        self.user, self.password, self.algorithm = user, password, algorithm
        self.realm = "tests@example"
        self.nonce = "dcd98b7102dd2f0e8b11d0f600bfb0c093"
        self.executed: list[tuple[str, str, bytes]] = []  # method, target, body
        self.challenged = 0
        self.seen_nc: list[str] = []
        self.port = 0

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started(self.port)
        await trio.serve_listeners(self._handle, listeners)

    def _valid(self, method: str, header: str) -> bool:
        params = {
            k.lower(): v.strip('"')
            for k, v in re.findall(r'([a-zA-Z]+)=("[^"]*"|[^,\s]+)', header.removeprefix("Digest "))
        }
        h = HASHES[self.algorithm]

        def hx(text: str) -> str:
            return h(text.encode()).hexdigest()

        ha1 = hx(f"{self.user}:{self.realm}:{self.password}")
        ha2 = hx(f"{method}:{params.get('uri')}")
        expected = hx(f"{ha1}:{self.nonce}:{params.get('nc')}:{params.get('cnonce')}:auth:{ha2}")
        self.seen_nc.append(params.get("nc", ""))
        return (
            params.get("username") == self.user
            and params.get("nonce") == self.nonce
            and params.get("qop") == "auth"
            and params.get("opaque") == "5ccc069c403ebaf9f0171e9517f40e41"
            and params.get("response") == expected
        )

    async def _handle(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                request: h11.Request | None = None
                body = b""
                while True:
                    event = conn.next_event()
                    if event is h11.NEED_DATA:
                        data = await stream.receive_some(65536)
                        conn.receive_data(data)
                        if not data and conn.their_state is h11.IDLE:
                            return
                        continue
                    if isinstance(event, h11.Request):
                        request = event
                    elif isinstance(event, h11.Data):
                        body += event.data
                    elif isinstance(event, h11.EndOfMessage):
                        break
                    elif isinstance(event, h11.ConnectionClosed):
                        return
                assert request is not None
                method, target = request.method.decode(), request.target.decode()
                auth = dict(request.headers).get(b"authorization", b"").decode()
                if auth.startswith("Digest ") and self._valid(method, auth):
                    self.executed.append((method, target, body))
                    response = h11.Response(status_code=200, headers=[("content-length", "2")])
                    payload = b"ok"
                else:
                    self.challenged += 1
                    challenge = (
                        f'Basic realm="{self.realm}", Digest realm="{self.realm}", '
                        f'qop="auth, auth-int", algorithm={self.algorithm}, '
                        f'nonce="{self.nonce}", opaque="5ccc069c403ebaf9f0171e9517f40e41"'
                    )
                    response = h11.Response(
                        status_code=401,
                        headers=[("www-authenticate", challenge), ("content-length", "0")],
                    )
                    payload = b""
                data = conn.send(response) or b""
                data += conn.send(h11.Data(data=payload)) if payload else b""
                data += conn.send(h11.EndOfMessage()) or b""
                await stream.send_all(data)
                conn.start_next_cycle()
        except (trio.BrokenResourceError, h11.ProtocolError):
            return
