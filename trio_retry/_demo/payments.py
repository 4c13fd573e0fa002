"""A tiny payment API for the demo: it deduplicates on ``Idempotency-Key``, as real ones do.

``POST /payments`` executes a payment (appends it to ``ledger``) and answers ``201``. A request
whose ``Idempotency-Key`` was already executed is not executed again: it gets the first
request's answer, with ``Idempotent-Replayed: true`` (the convention of Stripe-like APIs).
``crash_after_execute`` makes the next executions drop the connection after the payment is
recorded and before any answer: the server did it, the client cannot know.

HTTP/1.1 on h11, loopback only; each connection is served until the client closes it.
"""

from __future__ import annotations

import h11
import trio

__all__ = ["PaymentAPI"]


class PaymentAPI:
    """The server; ``received`` and ``ledger`` say what it saw and what it executed."""

    def __init__(self) -> None:
        self.received = 0
        self.ledger: list[bytes] = []  # one entry per executed payment
        self.crash_after_execute = 0
        self._answers: dict[str, bytes] = {}  # Idempotency-Key -> the body first answered
        self.url = ""

    @property
    def executed(self) -> int:
        return len(self.ledger)

    async def serve(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on 127.0.0.1 (an ephemeral port) until cancelled; ``task_status`` gets the
        base URL. Cancellation closes the listener and every connection."""
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        task_status.started(self.url)
        await trio.serve_listeners(self._connection, listeners)

    async def _connection(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        async with stream:
            while True:
                request, body = await self._read_request(conn, stream)
                if request is None:
                    return
                answer = self._handle(request, body)
                if answer is None:  # executed, then "crashed" before answering
                    return
                status, headers, payload = answer
                headers.append((b"content-length", str(len(payload)).encode()))
                data = conn.send(h11.Response(status_code=status, headers=headers))
                data += conn.send(h11.Data(data=payload)) + conn.send(h11.EndOfMessage())
                await stream.send_all(data)
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()

    @staticmethod
    async def _read_request(
        conn: h11.Connection, stream: trio.SocketStream
    ) -> tuple[h11.Request | None, bytes]:
        request: h11.Request | None = None
        body = b""
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError:
                return None, b""
            if event is h11.NEED_DATA:
                try:
                    data = await stream.receive_some(65536)
                except trio.BrokenResourceError:
                    return None, b""
                if not data:
                    return None, b""
                conn.receive_data(data)
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                return request, body
            elif isinstance(event, h11.ConnectionClosed):
                return None, b""

    def _handle(
        self, request: h11.Request, body: bytes
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes] | None:
        self.received += 1
        if request.method != b"POST" or request.target != b"/payments":
            return 404, [], b"no such route"
        key = next((v.decode() for n, v in request.headers if n == b"idempotency-key"), None)
        if key is not None and key in self._answers:
            return 201, [(b"idempotent-replayed", b"true")], self._answers[key]
        self.ledger.append(body)
        answer = b'{"payment_id": %d}' % len(self.ledger)
        if key is not None:
            self._answers[key] = answer
        if self.crash_after_execute:
            self.crash_after_execute -= 1
            return None
        return 201, [], answer
