"""A small HTTP/3 client for tests: aioquic's client-side `QuicConnection` and `H3Connection`
over a Trio UDP socket, exposing what a test asserts on (statuses, bodies, stream resets, the
server's GOAWAY, the connection's close, 0-RTT acceptance, session tickets).

It is not trio_retry's client: it exists to drive `FaultServer(http3=True)`, caddy and
hypercorn before the real client does, so it does only what a test asks, in the order asked::

    async with open_h3_client(server.port, ca_pem=server.ca_pem) as client:
        response = await client.request("POST", "/echo", body=b"x")
    ticket = client.tickets[-1]  # resume (and send 0-RTT) with the newest ticket

0-RTT: pass ``session_ticket=`` (a ticket a previous connection received) and send requests
before `wait_handshake`: they leave in 0-RTT packets. `handshake.early_data_accepted` says
whether the server took them; when it did not, QUIC itself sends the same stream data again
after the handshake (aioquic's loss recovery), so the request still arrives, in 1-RTT.

aioquic's `H3Connection` drops the GOAWAY frames it receives without an event, so the client
reads the server's control stream itself (`goaway_id`).
"""

from __future__ import annotations

import math
import socket
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import trio
from aioquic._buffer import Buffer, BufferReadError
from aioquic.h3 import events as h3_events
from aioquic.h3.connection import H3_ALPN, FrameType, H3Connection
from aioquic.quic import events as quic_events
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.tls import SessionTicket

__all__ = ["H3Response", "H3TestClient", "open_h3_client"]

HOST = "127.0.0.1"
_CONTROL_STREAM_TYPE = 0x00


@dataclass
class H3Response:
    """One request stream as the client saw it."""

    stream_id: int
    status: int | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    informational: list[int] = field(default_factory=list)
    body: bytearray = field(default_factory=bytearray)
    #: The response ended with the stream's FIN.
    ended: bool = False
    #: The server reset the stream with this HTTP/3 error code.
    reset_code: int | None = None
    done: trio.Event = field(default_factory=trio.Event)

    def header(self, name: str) -> str | None:
        name = name.lower()
        return next((value for key, value in self.headers if key == name), None)


class _ControlReader:
    """Reads the server's control stream for the GOAWAY frames aioquic does not report."""

    def __init__(self) -> None:
        self._buffers: dict[int, bytearray] = {}
        self._control: int | None = None
        self.goaway_ids: list[int] = []

    def feed(self, stream_id: int, data: bytes) -> None:
        if stream_id % 4 != 3 or (self._control is not None and stream_id != self._control):
            return  # not a server-initiated unidirectional stream, or not the control one
        buffer = self._buffers.setdefault(stream_id, bytearray())
        buffer += data
        while buffer:
            reader = Buffer(data=bytes(buffer))
            try:
                if self._control is None:
                    if reader.pull_uint_var() != _CONTROL_STREAM_TYPE:
                        self._buffers.pop(stream_id)
                        return
                    self._control = stream_id
                else:
                    frame_type = reader.pull_uint_var()
                    payload = reader.pull_bytes(reader.pull_uint_var())
                    if frame_type == FrameType.GOAWAY:
                        self.goaway_ids.append(Buffer(data=payload).pull_uint_var())
            except BufferReadError:
                return  # wait for the rest of the frame
            del buffer[: reader.tell()]


class H3TestClient:
    """One QUIC connection. Create it with `open_h3_client`."""

    def __init__(self, quic: QuicConnection, sock: trio.socket.SocketType, port: int) -> None:
        self.quic = quic
        self.h3 = H3Connection(quic)
        self._sock = sock
        self._addr = (HOST, port)
        self.authority = f"{HOST}:{port}"
        self.responses: dict[int, H3Response] = {}
        #: Session tickets the server sent, oldest first.
        self.tickets: list[SessionTicket] = []
        self.handshake: quic_events.HandshakeCompleted | None = None
        self.terminated: quic_events.ConnectionTerminated | None = None
        self._control = _ControlReader()
        self._changed = trio.Event()
        self._kick = trio.Event()

    @property
    def goaway_id(self) -> int | None:
        """The stream id of the last GOAWAY the server sent (None: none yet)."""
        return self._control.goaway_ids[-1] if self._control.goaway_ids else None

    # -- requests -----------------------------------------------------------------------------

    def send_request(
        self,
        method: str,
        path: str,
        headers: Iterable[tuple[str, str]] = (),
        body: bytes = b"",
        *,
        end_stream: bool = True,
    ) -> int:
        """Queue a request (sent by the pump at once); returns its stream id. A complete body
        gets a ``content-length`` unless `headers` have one; to send a body without it, pass
        ``end_stream=False`` and then `send_body`."""
        stream_id = self.quic.get_next_available_stream_id()
        headers = list(headers)
        if body and end_stream and not any(n.lower() == "content-length" for n, _ in headers):
            headers.append(("content-length", str(len(body))))  # as browsers send it
        block = [
            (b":method", method.encode()),
            (b":scheme", b"https"),
            (b":authority", self.authority.encode()),
            (b":path", path.encode()),
            *((n.lower().encode(), v.encode()) for n, v in headers),
        ]
        self.responses[stream_id] = H3Response(stream_id)
        self.h3.send_headers(stream_id, block, end_stream=end_stream and not body)
        if body:
            self.h3.send_data(stream_id, body, end_stream=end_stream)
        self._kick.set()
        return stream_id

    def send_body(self, stream_id: int, data: bytes, *, end_stream: bool = True) -> None:
        self.h3.send_data(stream_id, data, end_stream=end_stream)
        self._kick.set()

    def reset(self, stream_id: int, error_code: int = 0x10C) -> None:
        """Cancel a request (H3_REQUEST_CANCELLED by default)."""
        self.quic.reset_stream(stream_id, error_code)
        self.quic.stop_stream(stream_id, error_code)
        self._kick.set()

    async def response(self, stream_id: int) -> H3Response:
        """Wait until the stream ended, was reset, or the connection ended."""
        response = self.responses[stream_id]
        await response.done.wait()
        return response

    async def request(
        self,
        method: str,
        path: str,
        headers: Iterable[tuple[str, str]] = (),
        body: bytes = b"",
    ) -> H3Response:
        return await self.response(self.send_request(method, path, headers, body))

    async def wait_until(self, predicate: object) -> None:
        """Wait until ``predicate()`` is true (re-checked after each batch of datagrams)."""
        assert callable(predicate)
        while not predicate():
            await self._changed.wait()

    async def wait_handshake(self) -> quic_events.HandshakeCompleted:
        await self.wait_until(lambda: self.handshake is not None or self.terminated is not None)
        assert self.handshake is not None, f"no handshake: {self.terminated}"
        return self.handshake

    async def wait_terminated(self) -> quic_events.ConnectionTerminated:
        await self.wait_until(lambda: self.terminated is not None)
        assert self.terminated is not None
        return self.terminated

    # -- the pump -----------------------------------------------------------------------------

    async def _transmit(self) -> None:
        for data, addr in self.quic.datagrams_to_send(trio.current_time()):
            await self._sock.sendto(data, addr)

    async def pump(self) -> None:
        """Feed QUIC until it is terminated: datagrams, sends asked for, its timer."""
        while self.terminated is None:
            await self._transmit()
            timer = self.quic.get_timer()
            data = None
            with trio.move_on_at(math.inf if timer is None else timer):
                async with trio.open_nursery() as race:

                    async def receive() -> None:
                        nonlocal data
                        data, _ = await self._sock.recvfrom(65536)
                        race.cancel_scope.cancel()

                    async def kicked() -> None:
                        await self._kick.wait()
                        self._kick = trio.Event()
                        race.cancel_scope.cancel()

                    race.start_soon(receive)
                    race.start_soon(kicked)
            now = trio.current_time()
            if data is not None:
                self.quic.receive_datagram(data, self._addr, now)
            elif timer is not None and now >= timer:
                self.quic.handle_timer(now)
            self._process_events()
            self._changed.set()
            self._changed = trio.Event()
        await self._transmit()

    def _process_events(self) -> None:
        while (event := self.quic.next_event()) is not None:
            if isinstance(event, quic_events.HandshakeCompleted):
                self.handshake = event
            elif isinstance(event, quic_events.ConnectionTerminated):
                self.terminated = event
                for response in self.responses.values():
                    response.done.set()
            elif isinstance(event, quic_events.StreamReset):
                response = self.responses.get(event.stream_id)
                if response is not None:
                    response.reset_code = event.error_code
                    response.done.set()
            elif isinstance(event, quic_events.StreamDataReceived):
                self._control.feed(event.stream_id, event.data)
            for h3_event in self.h3.handle_event(event):
                self._on_h3(h3_event)

    def _on_h3(self, event: h3_events.H3Event) -> None:
        if isinstance(event, h3_events.HeadersReceived):
            response = self.responses[event.stream_id]
            headers = [(n.decode(), v.decode()) for n, v in event.headers]
            status = int(dict(headers).get(":status", "0"))
            if 100 <= status < 200:
                response.informational.append(status)
            elif response.status is None:
                response.status = status
                response.headers = [(n, v) for n, v in headers if n != ":status"]
        elif isinstance(event, h3_events.DataReceived):
            self.responses[event.stream_id].body += event.data
        else:
            return
        if event.stream_ended:
            response = self.responses[event.stream_id]
            response.ended = True
            response.done.set()


@asynccontextmanager
async def open_h3_client(
    port: int,
    *,
    ca_pem: bytes,
    server_name: str = "localhost",
    session_ticket: SessionTicket | None = None,
    max_datagram_size: int = 1200,
) -> AsyncIterator[H3TestClient]:
    """Connect to 127.0.0.1:`port` over QUIC (ALPN h3), trusting `ca_pem`. The handshake
    starts at once but is not awaited (so requests sent first go in 0-RTT when
    `session_ticket` allows). On exit the connection is closed (CONNECTION_CLOSE, NO_ERROR)."""
    config = QuicConfiguration(
        is_client=True,
        alpn_protocols=list(H3_ALPN),
        server_name=server_name,
        session_ticket=session_ticket,
        max_datagram_size=max_datagram_size,
    )
    config.load_verify_locations(cadata=ca_pem)  # PEM bytes: aioquic parses PEM only
    client_holder: list[H3TestClient] = []
    quic = QuicConnection(
        configuration=config,
        session_ticket_handler=lambda ticket: client_holder[0].tickets.append(ticket),
    )
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with sock:
        await sock.bind((HOST, 0))
        quic.connect((HOST, port), now=trio.current_time())
        client = H3TestClient(quic, sock, port)
        client_holder.append(client)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.pump)
            try:
                yield client
            finally:
                if client.terminated is None:
                    quic.close()
                    with trio.move_on_after(1):
                        await client._transmit()
                nursery.cancel_scope.cancel()
