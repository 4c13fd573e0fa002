"""`MockTransport`: the real client, a `FaultServer`'s scripts, and no socket in between.

``Client(transport=MockTransport(server))`` runs everything the client is made of (the pool,
the HTTP/1.1 or HTTP/2 wire layer, evidence, the retry loop) over in-memory streams
(`_memory.memory_connection`) whose other end the `FaultServer`'s own connection handlers
serve. So the same scripts, handlers and records apply, and every fault produces the evidence
it produces over loopback (tests/testing/test_mock_equivalence.py checks each one).

What it cannot model, because no socket is opened: DNS, the TCP connect and the TLS
handshake. Those stages always succeed at once (``connect`` and ``tls`` timings of 0), unless
a `ConnectFailure` is scripted with `MockTransport.fail_connect`: the next connection then
fails at that stage, ``NOT_SENT``, as a failed resolution, refused connect or failed
handshake would. For an ``https://`` URL no TLS happens; the protocol is what the server's
ALPN would pick among the client's offers (``h2`` when both sides allow HTTP/2).

Where the server runs: each connection's server side is a task in the client's own background
nursery (the one its HTTP/2 readers live in), so no task outlives the client, and a broken
script (`ScriptError`) fails the client's ``async with`` block as it would fail the test's
nursery around ``FaultServer.serve``.
"""

from __future__ import annotations

import errno
import socket
import ssl
from collections import deque
from dataclasses import dataclass

import trio

from .._core.evidence import Evidence, FailureCategory, Stage
from .._wire.dialer import ConnectTarget
from .._wire.progress import AttemptProgress, WireError
from .._wire.transport import Transport
from ._memory import DEFAULT_LIMIT, MemoryEnd, memory_connection
from ._server import FaultServer

__all__ = ["ConnectFailure", "MockTransport"]

_CONNECT_STAGES = (Stage.DNS, Stage.CONNECT, Stage.TLS)
_DEFAULT_CATEGORY = {
    Stage.DNS: FailureCategory.DNS,
    Stage.CONNECT: FailureCategory.CONNECT,
    Stage.TLS: FailureCategory.TLS_HANDSHAKE,
}
_ALLOWED_CATEGORIES = {
    Stage.DNS: {FailureCategory.DNS, FailureCategory.TIMEOUT},
    Stage.CONNECT: {FailureCategory.CONNECT, FailureCategory.TIMEOUT},
    Stage.TLS: {
        FailureCategory.TLS_HANDSHAKE,
        FailureCategory.TLS_CERTIFICATE,
        FailureCategory.TIMEOUT,
    },
}


@dataclass(frozen=True, slots=True, init=False)
class ConnectFailure:
    """A scripted failure to open a connection, at `stage` (``Stage.DNS``, ``Stage.CONNECT``
    or ``Stage.TLS``): the attempt is ``NOT_SENT`` at that stage.

    `category` defaults to ``DNS``, ``CONNECT`` or ``TLS_HANDSHAKE``; ``TLS_CERTIFICATE`` (a
    certificate that does not verify, never retried) and ``TIMEOUT`` are also accepted. A
    ``Stage.TLS`` failure applies only to ``https://`` connections (see
    `MockTransport.fail_connect`). `message` becomes the error's text.
    """

    stage: Stage
    category: FailureCategory
    message: str

    def __init__(
        self,
        stage: Stage = Stage.CONNECT,
        category: FailureCategory | None = None,
        message: str = "",
    ) -> None:
        if stage not in _CONNECT_STAGES:
            raise ValueError(
                f"ConnectFailure stage must be Stage.DNS, Stage.CONNECT or Stage.TLS, got {stage!r}"
            )
        chosen = _DEFAULT_CATEGORY[stage] if category is None else category
        if chosen not in _ALLOWED_CATEGORIES[stage]:
            allowed = ", ".join(sorted(c.name for c in _ALLOWED_CATEGORIES[stage]))
            raise ValueError(
                f"ConnectFailure category {chosen!r} does not fit {stage!r} (accepted: {allowed})"
            )
        object.__setattr__(self, "stage", stage)
        object.__setattr__(self, "category", chosen)
        object.__setattr__(self, "message", message)

    def error(self, target: ConnectTarget) -> WireError:
        """The wire error this failure raises, caused by the OS or ssl error it stands for
        (as the real stage's error is)."""
        where = f"{target.host}:{target.port}"
        text = self.message or f"scripted {self.stage.name} failure for {where} (MockTransport)"
        error = WireError(
            text, stage=self.stage, evidence=Evidence.NOT_SENT, category=self.category
        )
        error.__cause__ = self._cause(text)
        return error

    def _cause(self, text: str) -> Exception:
        if self.category is FailureCategory.TIMEOUT:
            return trio.TooSlowError(text)
        if self.stage is Stage.DNS:
            return socket.gaierror(socket.EAI_NONAME, text)
        if self.stage is Stage.CONNECT:
            return ConnectionRefusedError(errno.ECONNREFUSED, text)
        if self.category is FailureCategory.TLS_CERTIFICATE:
            return ssl.SSLCertVerificationError(text)
        return ssl.SSLError(text)


class MockTransport:
    """An in-memory transport for ``trio_retry.Client(transport=...)`` serving `server`.

    Every connection the client opens, to any host and port, is an in-memory stream served by
    `server` (a new ``FaultServer()`` when not given; it need not be started with ``serve``,
    and a started one can serve loopback clients at the same time). Script it as usual
    (``transport.server.route(...)``); its `requests` record what was received.

    `connects` lists every connection the client asked for (a `ConnectTarget`), failed ones
    included. `buffer_size` is how many bytes each direction of a connection buffers before a
    writer waits (a socket's buffers).
    """

    def __init__(self, server: FaultServer | None = None, *, buffer_size: int = DEFAULT_LIMIT):
        if server is not None and not isinstance(server, FaultServer):
            raise TypeError(f"MockTransport serves a FaultServer, got {type(server).__name__}")
        if buffer_size < 1:
            raise ValueError(f"buffer_size must be >= 1, got {buffer_size}")
        self.server = FaultServer() if server is None else server
        self.connects: list[ConnectTarget] = []
        self._failures: deque[ConnectFailure] = deque()
        self._buffer_size = buffer_size

    def fail_connect(self, *failures: ConnectFailure) -> None:
        """Queue failures: each of the next connections takes one (in order) and fails at its
        stage. A ``Stage.TLS`` failure at the head of the queue waits for a TLS connection;
        cleartext connections go past it."""
        for failure in failures:
            if not isinstance(failure, ConnectFailure):
                raise TypeError(f"not a ConnectFailure: {failure!r}")
        self._failures.extend(failures)

    @property
    def pending_failures(self) -> tuple[ConnectFailure, ...]:
        """The scripted connect failures not used yet."""
        return tuple(self._failures)

    def _take_failure(self, target: ConnectTarget) -> ConnectFailure | None:
        if not self._failures:
            return None
        if self._failures[0].stage is Stage.TLS and not target.tls:
            return None
        return self._failures.popleft()

    async def connect(
        self, target: ConnectTarget, *, progress: AttemptProgress, nursery: trio.Nursery
    ) -> Transport:
        """Open an in-memory connection to the server, or fail as scripted (``NOT_SENT``).

        The server's side of the connection runs in `nursery` (the client's) until the
        connection ends or the client closes. A checkpoint, like opening a socket.
        """
        await trio.lowlevel.checkpoint()
        self.connects.append(target)
        failure = self._take_failure(target)
        progress.advance(Stage.DNS)
        if failure is not None and failure.stage is Stage.DNS:
            raise failure.error(target)
        progress.advance(Stage.CONNECT)
        if failure is not None and failure.stage is Stage.CONNECT:
            raise failure.error(target)
        progress.timings["connect"] = 0.0
        alpn: str | None = None
        if target.tls:
            progress.advance(Stage.TLS)
            if failure is not None:
                raise failure.error(target)
            progress.timings["tls"] = 0.0
            alpn = self.server.negotiate_alpn(target.alpn)
        client_end, server_end = memory_connection(self._buffer_size)
        nursery.start_soon(self._serve, server_end, alpn)
        return Transport(client_end, client_end, alpn)

    async def _serve(self, end: MemoryEnd, alpn: str | None) -> None:
        await self.server.serve_memory(end, alpn=alpn)

    def __repr__(self) -> str:
        return f"<MockTransport: {len(self.connects)} connects, serving {self.server!r}>"
