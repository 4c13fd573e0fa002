"""The HTTP/3 servers a QUIC case is played against, behind one face: FaultServer's HTTP/3
(watched from inside, :mod:`tests.support.fault_quic`), ngtcp2's gtlsserver
(:mod:`tests.support.ngtcp2`) and caddy (:mod:`tests.support.caddy`).

A target serves the files a case gives it (:meth:`Target.put_files`) at :meth:`Target.path`,
takes uploads at ``Target.upload_path`` when it can, and reports what the server itself saw
as a :class:`ServerView`: its connections (handshakes, resumption, cipher, the client's
CONNECTION_CLOSE, the client addresses, key updates, flow-control updates) and its requests
(by ``x-request-id``, with their connection, and whether their data came in 0-RTT packets).
What a server cannot tell is ``None`` in the view; a case reads it through :func:`known`, so a
table that plays a case where its evidence cannot be had fails, naming what is missing,
instead of passing on nothing.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from trio_retry.testing import FaultServer, Handler, RecordedRequest, Respond

from .caddy import RunningCaddy
from .fault_quic import QuicWatch
from .ngtcp2 import RunningNgtcp2

__all__ = [
    "CaddyTarget",
    "FaultTarget",
    "Ngtcp2Target",
    "SeenConnection",
    "SeenRequest",
    "ServerView",
    "Target",
    "known",
]

_T = TypeVar("_T")


def known(value: _T | None, what: str, target: str) -> _T:
    """`value`, which the case needs; a failure naming it when `target` cannot tell it."""
    assert value is not None, f"{target} cannot tell {what}: the case table must not play it there"
    return value


@dataclass(frozen=True, slots=True)
class SeenConnection:
    """One QUIC connection as the server saw it (``None``: this server cannot tell)."""

    key: object
    handshake: bool
    resumed: bool | None = None
    cipher: str | None = None
    closes_received: int | None = None
    client_addresses: frozenset[str] | None = None
    server_addresses: frozenset[str] | None = None
    key_updates: int | None = None
    #: ``trio.current_time()`` of the server's first key update (None: none, or cannot tell).
    key_updated_at: float | None = None
    #: Flow-control window updates (MAX_DATA, MAX_STREAM_DATA) the server sent / received.
    window_updates_sent: int | None = None
    window_updates_received: int | None = None


@dataclass(frozen=True, slots=True)
class SeenRequest:
    """One request as the server saw it."""

    request_id: str | None
    path: str | None
    #: The ``key`` of its `SeenConnection` (None: this server cannot tell).
    connection: object | None
    #: Its data came, at least in part, in 0-RTT packets (None: this server cannot tell).
    early: bool | None
    #: The request body's length as executed (None: this server cannot tell).
    body_length: int | None = None
    #: ``trio.current_time()`` when its head arrived (None: this server cannot tell).
    time: float | None = None
    #: ``"HTTP/3"``, or the TCP protocol a fallback used (``"HTTP/2"``, ``"HTTP/1.1"``).
    http_version: str = "HTTP/3"


@dataclass(frozen=True, slots=True)
class ServerView:
    """What one server saw, at one moment."""

    target: str
    #: None: this server cannot list its connections.
    connections: tuple[SeenConnection, ...] | None
    requests: tuple[SeenRequest, ...]
    #: Retry tokens verified (None: cannot tell).
    retries: int | None = None

    @property
    def handshakes(self) -> int:
        conns = known(self.connections, "its connections", self.target)
        return sum(1 for conn in conns if conn.handshake)

    @property
    def http3_requests(self) -> tuple[SeenRequest, ...]:
        return tuple(r for r in self.requests if r.http_version == "HTTP/3")

    def request(self, request_id: str) -> SeenRequest:
        """The one request with this ``x-request-id`` (fails if it came twice, or never)."""
        found = [r for r in self.requests if r.request_id == request_id]
        assert len(found) == 1, f"{self.target} saw {request_id!r} {len(found)} times"
        return found[0]

    def connection_of(self, request_id: str) -> SeenConnection:
        key = self.request(request_id).connection
        conns = known(self.connections, "its connections", self.target)
        [conn] = [c for c in conns if c.key == key]
        return conn


class Target:
    """One HTTP/3 server under test; see the module docstring."""

    name: str
    host: str
    port: int
    #: Whether the server also listens on TCP at the same port (a fallback finds it).
    tcp: bool
    #: The path uploads go to (the server executes them and knows their length), or None.
    upload_path: str | None = None

    def put_files(self, files: Mapping[str, bytes]) -> None:
        raise NotImplementedError

    def path(self, name: str) -> str:
        """The path a file put with :meth:`put_files` is served at."""
        return f"/{name}"

    def ssl_context(self) -> ssl.SSLContext:
        raise NotImplementedError

    def view(self) -> ServerView:
        raise NotImplementedError


class FaultTarget(Target):
    """FaultServer(http3=True): files served by a handler (any method gets the file, a
    body is recorded), every QUIC connection watched."""

    name = "faultserver"
    tcp = True
    upload_path = "/upload"

    def __init__(self, server: FaultServer, watch: QuicWatch) -> None:
        self.server = server
        self.watch = watch
        self.host = server.host
        self.port = server.port
        self._files: dict[str, bytes] = {}

        def serve(request: RecordedRequest) -> Respond:
            if request.path == self.upload_path:
                return Respond(200, body=b"%d" % len(request.body))
            content = self._files.get(request.params["name"])
            return Respond(404) if content is None else Respond(200, body=content)

        server.route("*", "/{name:path}", Handler(serve))

    def put_files(self, files: Mapping[str, bytes]) -> None:
        self._files.update(files)

    def ssl_context(self) -> ssl.SSLContext:
        return self.server.client_ssl_context()

    def view(self) -> ServerView:
        conns = tuple(
            SeenConnection(
                key=conn.connection_id,
                handshake=conn.handshakes > 0,
                resumed=conn.resumed,
                cipher=conn.cipher,
                closes_received=conn.closes_received,
                client_addresses=frozenset(conn.client_addresses),
                key_updates=conn.key_updates,
                key_updated_at=conn.key_updated_at,
            )
            for conn in self.watch.connections
        )
        early = {c.connection_id: c.early_streams for c in self.watch.connections}
        requests = tuple(
            SeenRequest(
                request_id=dict(r.headers).get("x-request-id"),
                path=r.path,
                connection=r.connection_id,
                early=r.stream_id in early.get(r.connection_id, ()),
                body_length=len(r.body),
                time=r.time,
                http_version=r.http_version,
            )
            for r in self.server.requests
        )
        return ServerView(self.name, conns, requests)


class Ngtcp2Target(Target):
    """gtlsserver: its document root, its log."""

    name = "ngtcp2"
    tcp = False

    def __init__(self, server: RunningNgtcp2) -> None:
        self.server = server
        self.host = server.host
        self.port = server.port
        #: The port of the preferred address the server offers (None: none).
        self.preferred_port = server.preferred_port

    def put_files(self, files: Mapping[str, bytes]) -> None:
        from .procs import write_files

        write_files(self.server.workdir / "htdocs", files)

    def ssl_context(self) -> ssl.SSLContext:
        return self.server.ssl_context()

    def view(self) -> ServerView:
        log = self.server.log()
        conns = tuple(
            SeenConnection(
                key=conn.cid,
                handshake=conn.handshake_completed,
                resumed=conn.resumed,
                cipher=conn.cipher,
                closes_received=conn.closes_received,
                client_addresses=frozenset(conn.remote_addresses),
                server_addresses=frozenset(conn.local_addresses),
                window_updates_sent=conn.window_updates_sent,
                window_updates_received=conn.window_updates_received,
            )
            for conn in log.connections
        )
        requests = tuple(
            SeenRequest(
                request_id=request.request_id,
                path=request.path,
                connection=conn.cid,
                early=conn.early(request),
            )
            for conn in log.connections
            for request in conn.requests
        )
        return ServerView(self.name, conns, requests, retries=log.retries)


class CaddyTarget(Target):
    """caddy: files from its file server, uploads to its proxied backend, its access log
    (which lists requests, not connections: a case counts those at a relay)."""

    name = "caddy"
    tcp = True
    upload_path = "/echo"

    def __init__(self, server: RunningCaddy) -> None:
        self.server = server
        self.host = "127.0.0.1"
        self.port = server.port

    def put_files(self, files: Mapping[str, bytes]) -> None:
        self.server.put_files(files)

    def path(self, name: str) -> str:
        return f"/files/{name}"

    def ssl_context(self) -> ssl.SSLContext:
        return self.server.ssl_context()

    def view(self) -> ServerView:
        lengths = {e.rid: e.body_length for e in self.server.backend.executions}
        requests = tuple(
            SeenRequest(
                request_id=entry.request_id,
                path=entry.uri,
                connection=None,
                early=None,
                body_length=lengths.get(entry.request_id),
                http_version=entry.protocol.removesuffix(".0"),
            )
            for entry in self.server.log().entries
        )
        return ServerView(self.name, None, requests)
