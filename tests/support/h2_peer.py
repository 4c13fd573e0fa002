"""A scripted raw-frame HTTP/2 server: a Trio TCP server on 127.0.0.1 (h2c, or TLS with trustme)
that writes exactly the bytes a test gives it and records every frame the client sends.

    server = ScriptedServer(play, tls=certificates)     # or tls=None for h2c
    await nursery.start(server.serve)
    ...                                                 # a client calls server.url("/")
    peer = server.peers[0]
    await peer.closed()                                 # bounded
    assert [str(f) for f in peer.frames_of(Kind.GOAWAY)] == ["GOAWAY[0] NO_ERROR last=0"]

Each connection is a :class:`Peer`. The server sends its connection preface (``first``: an
empty SETTINGS frame unless the test gives other bytes), then reads the client's frames in a
task of its own, doing only what any server must and nothing a test could want to see done
otherwise: it acknowledges the client's SETTINGS and answers the client's PINGs. Once the
client's first request (a HEADERS frame) arrived, ``play(peer, stream_id)`` runs: it writes
whatever the scenario says, and may wait for the client's frames (:meth:`Peer.seen`). Requests
after the first one are answered ``200 ok`` once ``play`` returned (a test's way to show that
the connection is still usable). Everything is bounded in time (:data:`LIMIT`): a peer that is
left waiting closes its connection.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import hpack
import trio

from trio_retry.testing._certs import ServerCertificates

from .h2_frames import (
    ACK,
    END_HEADERS,
    END_STREAM,
    PADDED,
    PRIORITY_FLAG,
    Frame,
    FrameReader,
    Kind,
    data_frame,
    headers_frame,
    names,
    ping_frame,
    settings_frame,
)

__all__ = ["LIMIT", "Peer", "Play", "ScriptedServer"]

#: The longest any wait of the server (or of a test on it) may take.
LIMIT = 5.0

Play = Callable[["Peer", int], Awaitable[None]]


class Peer:
    """One connection, from the server's side: what the client sent, and a way to answer."""

    def __init__(self, stream: trio.abc.Stream, table_size: int = 4096) -> None:
        self._stream = stream
        self._send_lock = trio.Lock()
        self._reader = FrameReader()
        self._sent = FrameReader(preface=False)
        self._changed = trio.lowlevel.ParkingLot()
        self._decoder = hpack.Decoder()
        self._decoder.max_allowed_table_size = table_size
        self._block: list[Frame] = []
        #: The client's frames, in the order they arrived (the preface not included).
        self.frames: list[Frame] = []
        #: Both sides' frames in the order the server saw them: ``("server", frame)`` when it
        #: wrote one, ``("client", frame)`` when it read one (what flow control is judged by).
        self.events: list[tuple[str, Frame]] = []
        #: Each request's field block, decoded (RFC 9113 §4.3: by one decoder per connection,
        #: in order), by stream; a block that does not decode is kept as the error's text.
        self.fields: dict[int, list[tuple[bytes, bytes]] | str] = {}
        #: The first octet of each of the client's field blocks, in order.
        self.block_starts: list[int] = []
        #: How the client's side ended: ``"eof"``, ``"reset"``, or ``None`` while open.
        self.end: str | None = None
        self.ended = trio.Event()
        #: ``play`` returned: later requests are answered ``200 ok``.
        self.played = False
        #: The streams the server ended (END_STREAM or RST_STREAM): not answered again.
        self.answered: list[int] = []

    @property
    def preface(self) -> bytes:
        """The first 24 octets the client sent (RFC 9113 §3.4 says what they must be)."""
        return self._reader.preface

    def data_sent(self, stream_id: int) -> int:
        """How many DATA octets the client sent on ``stream_id`` (padding included)."""
        return sum(len(f.payload) for f in self.frames_of(Kind.DATA) if f.stream_id == stream_id)

    def frames_of(self, kind: int) -> list[Frame]:
        return [f for f in self.frames if f.kind == kind]

    @property
    def requests(self) -> list[int]:
        """The stream ids the client opened (its HEADERS frames), in order."""
        return [f.stream_id for f in self.frames_of(Kind.HEADERS)]

    async def send(self, *chunks: bytes) -> None:
        """Write ``chunks`` in one write. A client that went away is not an error here: the
        test asserts on what the client sent, not on what reached it."""
        data = b"".join(chunks)
        async with self._send_lock:
            for sent in self._sent.feed(data):
                self.events.append(("server", sent))
                ended = sent.kind in (Kind.HEADERS, Kind.DATA) and sent.flags & END_STREAM
                if ended or sent.kind == Kind.RST_STREAM:
                    self.answered.append(sent.stream_id)  # the play answered it
            try:
                await self._stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass

    async def seen(
        self, what: str, predicate: Callable[[Frame], bool], timeout: float = LIMIT
    ) -> Frame | None:
        """Wait (at most ``timeout`` seconds) for a frame of the client's that ``predicate``
        accepts (``what`` says which, for a reader of the code); ``None`` if the connection
        ended or the time ran out first."""
        with trio.move_on_after(timeout):
            while True:
                for received in self.frames:
                    if predicate(received):
                        return received
                if self.end is not None:
                    return None
                await self._changed.park()
        return None

    async def ping_acked(self, opaque: bytes) -> bool:
        """Wait for the client's PING ACK carrying ``opaque``."""
        found = await self.seen(
            f"PING ACK {opaque!r}",
            lambda f: f.kind == Kind.PING and bool(f.flags & ACK) and f.payload == opaque,
        )
        return found is not None

    async def closed(self) -> None:
        """Wait (at most :data:`LIMIT`, then raise ``trio.TooSlowError``) for the client to
        close its side."""
        with trio.fail_after(LIMIT):
            await self.ended.wait()

    async def _read(self) -> None:
        try:
            while True:
                try:
                    data = await self._stream.receive_some(65536)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    self.end = "reset"
                    return
                if not data:
                    self.end = "eof"
                    return
                for received in self._reader.feed(data):
                    self.frames.append(received)
                    self.events.append(("client", received))
                    self._decode(received)
                    await self._answer(received)
                self._changed.unpark_all()
        finally:
            if self.end is None:
                self.end = "cancelled"
            self.ended.set()
            self._changed.unpark_all()

    def _decode(self, received: Frame) -> None:
        """Gather the client's field blocks (HEADERS, then CONTINUATIONs) and decode each."""
        if received.kind == Kind.HEADERS or (received.kind == Kind.CONTINUATION and self._block):
            self._block.append(received)
        if not self._block or received is not self._block[-1] or not received.flags & END_HEADERS:
            return
        (first, *rest), self._block = self._block, []
        block = _fragment(first) + b"".join(f.payload for f in rest)
        if block:
            self.block_starts.append(block[0])
        try:
            self.fields[first.stream_id] = list(self._decoder.decode(block, raw=True))
        except hpack.HPACKError as exc:
            self.fields[first.stream_id] = f"{type(exc).__name__}: {exc}"

    async def _answer(self, received: Frame) -> None:
        """What any server does: acknowledge SETTINGS, answer PING, and, once ``play`` is
        over, answer a new request."""
        if received.kind == Kind.SETTINGS and not received.flags & ACK:
            await self.send(settings_frame(ack=True))
        elif received.kind == Kind.PING and not received.flags & ACK:
            await self.send(ping_frame(received.payload, ack=True))
        elif (
            received.kind == Kind.HEADERS
            and self.played
            and received.flags & END_HEADERS
            and received.stream_id not in self.answered
        ):
            self.answered.append(received.stream_id)
            await self.send(
                headers_frame(received.stream_id, [(":status", "200"), ("content-length", "2")]),
                data_frame(received.stream_id, b"ok", end_stream=True),
            )

    def __repr__(self) -> str:
        return f"<Peer end={self.end} frames={names(self.frames)}>"


def _fragment(headers: Frame) -> bytes:
    """A HEADERS frame's field block fragment: its payload without padding and priority."""
    payload = headers.payload
    if headers.flags & PADDED:
        payload = payload[1 : len(payload) - payload[0]]
    if headers.flags & PRIORITY_FLAG:
        payload = payload[5:]
    return payload


class ScriptedServer:
    """See the module docstring. ``tls``: the certificates to serve TLS with (ALPN ``h2``), or
    ``None`` for h2c. ``first``: the server's first bytes (its connection preface). ``request``:
    whether ``play`` waits for the client's first request (a scenario about the preface may
    have none)."""

    def __init__(
        self,
        play: Play,
        *,
        tls: ServerCertificates | None = None,
        first: bytes | None = None,
        request: bool = True,
    ) -> None:
        self._play = play
        self._tls = tls
        self._first = settings_frame() if first is None else first
        #: The SETTINGS_HEADER_TABLE_SIZE our preface gives the client's encoder (RFC 9113
        #: §6.5.2): the most the client's field blocks may use.
        self.table_size = 4096
        for sent in FrameReader(preface=False).feed(self._first):
            if sent.kind == Kind.SETTINGS and not sent.flags & ACK:
                self.table_size = sent.settings.get(0x1, self.table_size)
        self._request = request
        self.peers: list[Peer] = []
        self.port = 0

    def url(self, path: str = "/") -> str:
        scheme = "https" if self._tls is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, tcp: trio.SocketStream) -> None:
        stream: trio.abc.Stream = tcp
        with trio.move_on_after(LIMIT * 2):
            if self._tls is not None:
                tls = trio.SSLStream(
                    tcp, self._tls.server_context, server_side=True, https_compatible=True
                )
                try:
                    await tls.do_handshake()
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    await trio.aclose_forcefully(tcp)
                    return
                stream = tls
            peer = Peer(stream, table_size=self.table_size)
            self.peers.append(peer)
            async with trio.open_nursery() as nursery:
                await peer.send(self._first)
                nursery.start_soon(peer._read)
                if self._request:
                    opened = await peer.seen("a request", lambda f: f.kind == Kind.HEADERS)
                    if opened is not None:
                        await self._play(peer, opened.stream_id)
                else:
                    await self._play(peer, 0)
                peer.played = True
                for stream_id in peer.requests[1:]:  # arrived while play ran
                    if stream_id not in peer.answered:
                        await peer._answer(next(f for f in peer.frames if f.stream_id == stream_id))
                await peer.ended.wait()
        await trio.aclose_forcefully(stream)
