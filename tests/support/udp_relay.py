"""A UDP relay between a QUIC client and its server, in the test's own Trio loop: the network
of the QUIC interop runner's cases, offline. It can delay, drop (a seeded fraction), corrupt
and duplicate datagrams, blackhole everything for a while, change the address the server
sees the client at in the middle of a connection (port or address rebinding, as a NAT does),
and stop taking UDP at all (the port then answers with ICMP unreachable).

Use it from a test::

    relay = UdpRelay(("127.0.0.1", server_port), seed=1)
    await nursery.start(relay.run)
    relay.faults = Faults(drop=0.1)       # from now on
    ...  # the client talks to https://127.0.0.1:{relay.port}/
    relay.rebind()                         # the server sees the client at a new port
    assert relay.counts.to_server.dropped > 0

The client talks to the relay's socket (``relay.port``, on the target's address family); each
client address (a QUIC client uses one UDP socket per connection) is a *flow* with a socket
of its own towards the server, which is the client's address as the server sees it. Replies
come back to the client from the relay's socket, so a client with a connected UDP socket
notices nothing of a rebinding: only the server sees the new address (and validates the new
path, RFC 9000 §9.3).

With ``tcp=True`` the relay also listens on TCP with the same port number and pipes each
connection to the target's TCP port unchanged (no faults): a client falling back from QUIC
to TCP finds the server there, as it would at the server's own address.

Faults are decided per datagram, in each direction with a `random.Random` of its own seeded
from ``seed``, so a case sees the same pattern in every run for the same sequence of
datagrams. Delays keep the order of datagrams (one queue per direction, a fixed delay).
Nothing is bounded by wall time here; the relay runs until its task is cancelled (the test's
nursery ends it), and every socket it opened is closed then.
"""

from __future__ import annotations

import math
import random
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import trio

import trio_retry

__all__ = ["Counts", "Direction", "Faults", "UdpRelay"]

_DATAGRAM = 65536
#: Datagrams waiting out their delay in one direction before more are dropped (a full queue,
#: as a router's).
_QUEUE = 4096


@dataclass(frozen=True, slots=True)
class Faults:
    """What happens to each datagram from now on (both directions unless one is named)."""

    #: Added to each datagram's trip, one way (so the round trip grows by twice this).
    delay: float = 0.0
    #: The fraction of datagrams dropped.
    drop: float = 0.0
    #: The fraction of datagrams with one byte flipped (QUIC's AEAD then refuses them).
    corrupt: float = 0.0
    #: The fraction of datagrams sent twice.
    duplicate: float = 0.0
    #: Drop everything.
    blackhole: bool = False
    #: Only datagrams going this way suffer the faults above ("to_server" or "to_client").
    only: str | None = None

    def __post_init__(self) -> None:
        for name in ("drop", "corrupt", "duplicate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"Faults.{name} is a fraction in [0, 1], got {value!r}")
        if not (0.0 <= self.delay < math.inf):
            raise ValueError(f"Faults.delay is seconds >= 0, got {self.delay!r}")
        if self.only not in (None, "to_server", "to_client"):
            raise ValueError(f"Faults.only is 'to_server', 'to_client' or None, got {self.only!r}")


@dataclass(slots=True)
class Direction:
    """What one direction saw (datagrams)."""

    received: int = 0
    forwarded: int = 0
    dropped: int = 0
    corrupted: int = 0
    duplicated: int = 0


@dataclass(slots=True)
class Counts:
    to_server: Direction = field(default_factory=Direction)
    to_client: Direction = field(default_factory=Direction)


class _Flow:
    """One client address and the socket that stands for it towards the server."""

    __slots__ = ("answered", "client", "flight", "upstream")

    def __init__(self, client: tuple[object, ...], upstream: trio.socket.SocketType) -> None:
        self.client = client
        self.upstream = upstream
        #: The client's datagrams until the server's first reached the relay.
        self.flight: list[bytes] = []
        self.answered = False


class UdpRelay:
    """See the module docstring. ``target``: the server's (host, port); ``seed``: the fault
    decisions' seed; ``tcp``: also pipe TCP on the same port number to the target."""

    def __init__(
        self,
        target: tuple[str, int],
        *,
        seed: int = 0,
        faults: Faults = Faults(),
        tcp: bool = False,
    ) -> None:
        self.target = target
        self.host = target[0]
        self.family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        self.faults = faults
        self.counts = Counts()
        #: Every client address seen, in order (one per QUIC connection of a client that
        #: opens a socket per connection): the number of connections attempted.
        self.clients: list[tuple[object, ...]] = []
        #: The first datagram of each client, in the same order.
        self.first_datagrams: list[bytes] = []
        #: Each client's first flight, in the same order: what it sent before the server's
        #: first datagram (a ClientHello may take two, before any 0-RTT packet).
        self.first_flights: list[list[bytes]] = []
        #: Rebindings done so far (each moved every flow to a new socket).
        self.rebindings = 0
        #: The server's datagrams received at the client's new address since the last
        #: rebinding: it answers there (after validating the path, RFC 9000 §9.3).
        self.answered_after_rebind = 0
        #: :meth:`close_udp` was called: the port answers UDP with ICMP unreachable.
        self.udp_closed = False
        self._tcp = tcp
        self._random = {
            "to_server": random.Random(f"{seed}/to_server"),
            "to_client": random.Random(f"{seed}/to_client"),
        }
        self._flows: dict[tuple[object, ...], _Flow] = {}
        self._sock: trio.socket.SocketType | None = None
        self._nursery: trio.Nursery | None = None
        self._queues: dict[str, trio.MemorySendChannel[tuple[float, bytes, _Send]]] = {}
        self.port = 0

    # -- lifecycle -----------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Relay until cancelled; `task_status` gets the relay's port. Closes every socket."""
        sock, listener = await self._bind()
        self._sock = sock
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                for name in ("to_server", "to_client"):
                    send, receive = trio.open_memory_channel[tuple[float, bytes, _Send]](_QUEUE)
                    self._queues[name] = send
                    nursery.start_soon(self._deliver, name, receive)
                if listener is not None:
                    nursery.start_soon(trio.serve_listeners, self._pipe_tcp, [listener])
                nursery.start_soon(self._from_clients, sock)
                task_status.started(self.port)
        finally:
            sock.close()
            for flow in self._flows.values():
                flow.upstream.close()
            if listener is not None:
                await trio.aclose_forcefully(listener)

    async def _bind(self) -> tuple[trio.socket.SocketType, trio.SocketListener | None]:
        """The client-facing UDP socket, and with ``tcp`` a TCP listener on the same port
        number (picked again, a few times, when the kernel's TCP port is taken on UDP)."""
        for _ in range(20):
            listener = None
            if self._tcp:
                tcp = trio.socket.socket(self.family, socket.SOCK_STREAM)
                await tcp.bind((self.host, 0))
                tcp.listen(64)
                listener = trio.SocketListener(tcp)
            sock = trio.socket.socket(self.family, socket.SOCK_DGRAM)
            port = 0 if listener is None else listener.socket.getsockname()[1]
            try:
                await sock.bind((self.host, port))
            except OSError:
                sock.close()
                if listener is not None:
                    await trio.aclose_forcefully(listener)
                continue
            self.port = sock.getsockname()[1]
            return sock, listener
        raise OSError("no loopback port free on both TCP and UDP for the relay")

    # -- rebinding -----------------------------------------------------------------------------

    def rebind(self, host: str | None = None) -> None:
        """From now on the server sees every current client at a new address: a new port on
        the same host (port rebinding), or on `host` (address rebinding, e.g. ``127.0.0.2``,
        another loopback address). The old sockets are closed: what the server still sends
        there is lost, as behind a NAT that forgot the old mapping."""
        assert self._nursery is not None, "the relay is not running"
        self.answered_after_rebind = 0
        for flow in self._flows.values():
            old = flow.upstream
            flow.upstream = self._upstream(host)
            old.close()
        self.rebindings += 1
        for flow in self._flows.values():
            self._nursery.start_soon(self._from_server, flow, flow.upstream)

    def _upstream(self, host: str | None) -> trio.socket.SocketType:
        raw = socket.socket(self.family, socket.SOCK_DGRAM)
        try:
            raw.bind((host or self.host, 0))  # synchronous: rebind is called from sync code
        except BaseException:
            raw.close()
            raise
        return trio.socket.from_stdlib_socket(raw)

    def close_udp(self) -> None:
        """Close the client-facing UDP socket (TCP, if piped, goes on): from now on a datagram
        the client sends to the relay's port is answered by the kernel with ICMP port
        unreachable, as by a host whose QUIC server stopped (or a firewall that rejects UDP)."""
        assert self._sock is not None, "the relay is not running"
        self._sock.close()
        self.udp_closed = True

    # -- the datagram paths --------------------------------------------------------------------

    async def _from_clients(self, sock: trio.socket.SocketType) -> None:
        while True:
            try:
                data, client = await sock.recvfrom(_DATAGRAM)
            except ConnectionError:
                continue  # an ICMP error from an earlier send to a client that is gone
            except (trio.ClosedResourceError, OSError):
                return  # close_udp()
            flow = self._flows.get(client)
            if flow is None:
                assert self._nursery is not None
                flow = self._flows[client] = _Flow(client, self._upstream(None))
                self.clients.append(client)
                self.first_datagrams.append(data)
                self.first_flights.append(flow.flight)
                self._nursery.start_soon(self._from_server, flow, flow.upstream)
            if not flow.answered:
                flow.flight.append(data)
            self._pass("to_server", data, flow.upstream, self.target)

    async def _from_server(self, flow: _Flow, upstream: trio.socket.SocketType) -> None:
        """The server's datagrams to `flow`'s socket `upstream`, until it is closed
        (rebound away, or the relay stops)."""
        assert self._sock is not None
        rebound = self.rebindings > 0
        while True:
            try:
                data, _ = await upstream.recvfrom(_DATAGRAM)
            except ConnectionError:
                continue
            except (trio.ClosedResourceError, OSError):
                return
            if rebound:
                self.answered_after_rebind += 1
            flow.answered = True
            self._pass("to_client", data, self._sock, flow.client)

    def _pass(
        self, way: str, data: bytes, sock: trio.socket.SocketType, to: tuple[object, ...]
    ) -> None:
        """Apply the faults to one datagram going `way`, and queue what survives."""
        counts = getattr(self.counts, way)
        counts.received += 1
        faults = self.faults
        rng = self._random[way]
        # Each datagram draws the same numbers whatever the faults are, so changing one
        # fault's rate leaves the others' pattern as it was.
        drop, corrupt, position, duplicate = rng.random(), rng.random(), rng.random(), rng.random()
        applies = faults.only is None or faults.only == way
        if applies and (faults.blackhole or drop < faults.drop):
            counts.dropped += 1
            return
        if applies and corrupt < faults.corrupt and data:
            index = int(position * len(data))
            data = data[:index] + bytes([data[index] ^ 0xFF]) + data[index + 1 :]
            counts.corrupted += 1
        copies = 2 if applies and duplicate < faults.duplicate else 1
        counts.duplicated += copies - 1
        due = trio.current_time() + (faults.delay if applies else 0.0)
        for _ in range(copies):
            try:
                self._queues[way].send_nowait((due, data, _Send(sock, to)))
            except trio.WouldBlock:
                counts.dropped += 1

    async def _deliver(
        self, way: str, queue: trio.MemoryReceiveChannel[tuple[float, bytes, _Send]]
    ) -> None:
        """Send each datagram queued going `way` once its delay is over, in order."""
        counts = getattr(self.counts, way)
        async for due, data, send in queue:
            await trio.sleep_until(due)
            try:
                await send.sock.sendto(data, send.to)
            except (OSError, trio.ClosedResourceError):
                continue  # a socket rebound away, or ICMP from a peer that is gone: lost
            counts.forwarded += 1

    # -- TCP -----------------------------------------------------------------------------------

    async def _pipe_tcp(self, client: trio.SocketStream) -> None:
        """Pipe one TCP connection to the target, both ways (each end's EOF passed on), until
        both sides have finished."""
        async with client:
            try:
                server = await trio.open_tcp_stream(*self.target)
            except OSError:
                return
            async with server, trio.open_nursery() as nursery:

                async def pump(source: trio.SocketStream, sink: trio.SocketStream) -> None:
                    try:
                        while data := await source.receive_some(65536):
                            await sink.send_all(data)
                        await sink.send_eof()
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                        nursery.cancel_scope.cancel()  # one side broke: so does the pipe

                nursery.start_soon(pump, client, server)
                nursery.start_soon(pump, server, client)


@dataclass(frozen=True, slots=True)
class _Send:
    sock: trio.socket.SocketType
    to: tuple[object, ...]


@asynccontextmanager
async def http3_client_through(
    nursery: trio.Nursery, port: int, context: object, *, seed: int = 0
) -> AsyncIterator[tuple[UdpRelay, str, trio_retry.Client]]:
    """A relay (running in ``nursery``) to the HTTP/3 server on ``port``, its URL, and a
    client that speaks HTTP/3 to it at once with ``context`` as its TLS context and one
    attempt per call (no retry hides what the relay counts); closed on exit."""
    relay = UdpRelay(("127.0.0.1", port), seed=seed)
    await nursery.start(relay.run)
    url = f"https://127.0.0.1:{relay.port}"
    async with trio_retry.Client(
        ssl_context=context,  # type: ignore[arg-type]
        upstreams={url: trio_retry.Upstream(http3=True)},
        retry=trio_retry.RetryPolicy(max_attempts=1),
    ) as client:
        yield relay, url, client
