"""`FaultServer`: accept connections, pick HTTP/1.1 or HTTP/2, and end each connection the way
its handler asks (graceful close, TCP reset, or abort); with ``http3=True`` also serve HTTP/3 on
the same port number over UDP (`_h3.py`)."""

from __future__ import annotations

import errno
import importlib
import math
import socket
import ssl
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import trio

from ._certs import ServerCertificates
from ._common import DISCONNECTS, ConnContext, Ending, Recorder, Timeouts
from ._h1 import H1Handler
from ._h2 import PREFACE, H2Handler
from ._memory import MemoryEnd
from ._routes import Script
from ._script import (
    H2_ONLY,
    H3_TOO,
    Action,
    Handler,
    RecordedRequest,
    RequestHandler,
    check_action,
)
from ._transport import Transport

if TYPE_CHECKING:
    from ._h3 import H3Endpoint

if sys.version_info < (3, 11):  # builtin from 3.11; trio itself needs the backport on 3.10
    from exceptiongroup import BaseExceptionGroup

__all__ = ["FaultServer", "UnusedScriptError", "refused_port"]


class UnusedScriptError(AssertionError):
    """Scripted actions were left unused (`FaultServer.assert_all_used`, strict mode).

    An `AssertionError`, so that pytest reports it as a failed test, with the list in its
    message.
    """


# Running out of file descriptors or buffers is transient: wait and accept again.
_ACCEPT_RETRY_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}


def _only_cancelled(exc: BaseException | None) -> bool:
    """True for a `trio.Cancelled`, or a group (nested or not) holding only Cancelled."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_only_cancelled(inner) for inner in exc.exceptions)
    return isinstance(exc, trio.Cancelled)


def _import_h3() -> None:
    """Import the HTTP/3 endpoint now, so that a missing aioquic fails at construction."""
    try:
        importlib.import_module("._h3", __package__)
    except ImportError as exc:
        raise ImportError(
            "FaultServer(http3=True) needs aioquic for QUIC and HTTP/3; install it with "
            "pip install 'trio_retry[http3]'"
        ) from exc


def refused_port(host: str = "127.0.0.1") -> int:
    """A loopback port with no listener: connecting to it fails with ECONNREFUSED.

    The port is bound and released without ever listening, so nothing answers on it unless
    another program binds it in the meantime (the kernel hands out fresh ports in rotation,
    so that is unlikely within a test).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
    return port


class FaultServer:
    """A scripted HTTP/1.1, HTTP/2 and HTTP/3 server on loopback that fails on purpose, and
    records.

    Start it with ``url = await nursery.start(server.serve)``. Queue actions with `script`
    (global queue) and `route` (per method and path); each request pops the next action: its
    route's queue first, then the global queue, then `default`. Every request the server
    received, executed or not, is in `requests` in arrival order.

    Protocols: with ``tls=True`` ALPN picks HTTP/2 (``h2``, offered only when `http2`) or
    HTTP/1.1; in cleartext a connection opening with the HTTP/2 preface speaks h2c (prior
    knowledge) when `http2`, anything else speaks HTTP/1.1. `max_concurrent_streams` is
    advertised in the server's HTTP/2 SETTINGS (None: h2's default, 100).

    HTTP/3 (``http3=True``, needs ``tls=True`` and the extra ``http3``): the server also
    listens on UDP on the same port number and speaks HTTP/3 over QUIC (ALPN ``h3``, the same
    certificate). Responses over TCP then carry ``Alt-Svc: h3=":PORT"; ma=86400`` unless
    `alt_svc` is False. It issues session tickets that allow 0-RTT and accepts early data
    while `accept_early_data` is True; each record says whether it came in early data.

    Every wait is bounded (`idle_timeout` with no request in progress, `read_timeout` for a
    request head or between body reads, `write_timeout` for a write or a flow-control
    window), and a misbehaving client only ever costs its own connection.
    """

    def __init__(
        self,
        *,
        tls: bool = False,
        http2: bool = True,
        max_concurrent_streams: int | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        idle_timeout: float = 30.0,
        read_timeout: float = 10.0,
        write_timeout: float = 10.0,
        strict: bool = False,
        http3: bool = False,
        alt_svc: bool = True,
        accept_early_data: bool = True,
    ) -> None:
        if http3 and not tls:
            raise ValueError("http3=True needs tls=True: QUIC is always encrypted")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"port must be an int in 0..65535 (0: any free port), got {port!r}")
        if max_concurrent_streams is not None and not 0 <= max_concurrent_streams < 2**32:
            raise ValueError(f"max_concurrent_streams out of range: {max_concurrent_streams}")
        for name, value in (
            ("idle_timeout", idle_timeout),
            ("read_timeout", read_timeout),
            ("write_timeout", write_timeout),
        ):
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        self.tls = tls
        self.http2 = http2
        self.http3 = http3
        #: With `http3`: whether TCP responses advertise it (``Alt-Svc``); read at each new
        #: TCP connection.
        self.alt_svc = alt_svc
        #: With `http3`: whether 0-RTT early data is accepted; read at each new QUIC
        #: connection. False makes the server ignore the client's session ticket (a full
        #: handshake: aioquic accepts early data whenever it resumes a session), so the early
        #: data is dropped and the client must send it again after the handshake.
        self.accept_early_data = accept_early_data
        self.max_concurrent_streams = max_concurrent_streams
        self.host = host
        #: The port asked for (0: any free port, the default); `port` is the one listened on.
        self.requested_port = port
        #: When true, `serve` fails (`UnusedScriptError`) if it ends with scripted actions
        #: no request used; the pytest fixtures check it at the end of the test.
        self.strict = strict
        self._timeouts = Timeouts(idle=idle_timeout, read=read_timeout, write=write_timeout)
        self._script = Script()
        self._recorder = Recorder(self._script)
        #: Every request received, in arrival order (see `RecordedRequest`). A record is
        #: replaced by an updated one as its body arrives and when it is executed.
        self.requests: list[RecordedRequest] = self._recorder.requests
        #: Connections accepted so far: TCP, and QUIC with `http3` (connection ids are shared).
        self.connections_accepted = 0
        self._port: int | None = None
        self._started = False
        #: The certificates of a ``tls=True`` server (``_certs.py``), else ``None``.
        self._certs: ServerCertificates | None = None
        if tls:
            self._certs = ServerCertificates(http2=http2)
        if http3:
            _import_h3()

    # -- configuration ----------------------------------------------------------------------

    @property
    def default(self) -> Action:
        """The action for requests that find their queues empty (``Respond(200, body=b"ok")``
        unless set)."""
        return self._script.default

    @default.setter
    def default(self, action: Action) -> None:
        self._script.default = self._check([action])[0]

    def script(self, *actions: Action) -> None:
        """Append `actions` to the global queue: each request not served by its route's queue
        takes the next one."""
        self._script.extend(self._check(actions))

    def route(self, method: str, path: str, *actions: Action | RequestHandler) -> None:
        """Append `actions` to the queue of requests with `method` and `path`.

        `method` is matched in any case; ``"*"`` matches every method. `path` is the exact
        target (``/pay?id=1``), a path matched with or without the request's query string
        (``/pay``), or a pattern (``/users/{id}``: one segment; ``/files/{rest:path}``: the
        rest of the path) whose parameters the record carries in ``params``. A callable (sync
        or async) is a `Handler`: it receives the request's record and returns the action,
        and it answers every request of the route that reaches it. A request consults its
        route's queue first and falls back to the global queue, then to `default`, when it is
        empty (see docs/testing.md for the order among several matching routes).
        """
        self._script.extend_route(method, path, self._check(actions))

    def replace(self, method: str, path: str, *actions: Action | RequestHandler) -> None:
        """Make `actions` the whole queue of (`method`, `path`), dropping what it held."""
        self._script.replace_route(method, path, self._check(actions))

    def clear(self, method: str | None = None, path: str | None = None) -> None:
        """Empty the queue of (`method`, `path`), or, with no arguments, every queue (the
        global one included). `default` is kept. Dropped actions do not count as unused."""
        self._script.clear(method, path)

    @property
    def queued(self) -> tuple[Action, ...]:
        """The scripted actions still queued (global queue first, then routes); a handler
        stays queued while it answers its route."""
        return self._script.queued()

    def unused(self) -> list[tuple[str, str]]:
        """What was scripted and never used, as (queue, description) pairs: queued actions,
        handlers never called, a `Handler(times=N)`'s calls left."""
        return self._script.unused()

    def assert_all_used(self) -> None:
        """Raise `UnusedScriptError` (an `AssertionError`) listing every scripted action and
        handler that no request used; return quietly when there is none."""
        error = self._unused_error()
        if error is not None:
            raise error

    def _unused_error(self) -> UnusedScriptError | None:
        report = self._script.unused_report()
        return None if report is None else UnusedScriptError(f"{self!r}: {report}")

    def _check(self, actions: Iterable[Action | RequestHandler]) -> list[Action]:
        checked: list[Action] = []
        for action in actions:
            if isinstance(action, type):
                raise TypeError(f"pass an action or a handler, not the class {action.__name__}")
            if callable(action):  # actions are frozen values, never callable: a handler
                action = Handler(action)
            action = check_action(action)
            if not self.http2 and isinstance(action, H2_ONLY):
                if not (self.http3 and isinstance(action, H3_TOO)):
                    raise ValueError(f"{action!r} needs HTTP/2, but this server has http2=False")
            checked.append(action)
        return checked

    # -- observation ----------------------------------------------------------------------

    def executed_count(self, method: str | None = None, path: str | None = None) -> int:
        """How many recorded requests were executed, optionally only those with `method` (any
        case) and `path` (exact target, or target without its query string)."""
        return sum(1 for r in self.requests if r.executed and r.matches(method, path))

    @property
    def port(self) -> int:
        """The listening port (available once `serve` has started)."""
        if self._port is None:
            raise RuntimeError("FaultServer is not serving yet: await nursery.start(server.serve)")
        return self._port

    @property
    def url(self) -> str:
        """The base URL, ``http://127.0.0.1:PORT`` or ``https://...`` (once started)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    @property
    def ca_pem(self) -> bytes:
        """The PEM of the certificate authority that signed this server's certificate (for
        TCP and QUIC alike). Raises `RuntimeError` for a ``tls=False`` server."""
        return self._tls().ca_pem

    @property
    def alt_svc_value(self) -> str | None:
        """The ``Alt-Svc`` header value TCP responses carry now (None: no header)."""
        if not (self.http3 and self.alt_svc) or self._port is None:
            return None
        return f'h3=":{self._port}"; ma=86400'

    def client_ssl_context(self, *, http2: bool | None = None) -> ssl.SSLContext:
        """A new client `ssl.SSLContext` that trusts this server's certificate authority.

        The certificate is valid for ``127.0.0.1``, ``::1`` and ``localhost``. It offers the ALPN
        protocols this server speaks (``h2`` and ``http/1.1``, or ``http/1.1`` alone): a client
        uses a context it is given as it is, ALPN included. ``http2=False`` leaves ``h2`` out
        (for a ``Client(http2=False)`` against an HTTP/2 server). Raises `RuntimeError` for a
        ``tls=False`` server. For QUIC, trust the same authority: its certificates are
        ``get_ca_certs(binary_form=True)`` of this context, or `ca_pem`.
        """
        offer_h2 = self.http2 if http2 is None else http2 and self.http2
        return self._tls().client_context(offer_h2=offer_h2)

    def _tls(self) -> ServerCertificates:
        if self._certs is None:
            raise RuntimeError("this FaultServer was created with tls=False")
        return self._certs

    def __repr__(self) -> str:
        where = self.url if self._port is not None else "not serving"
        protocols = "h2+http/1.1" if self.http2 else "http/1.1"
        protocols += "+h3" if self.http3 else ""
        executed = sum(1 for r in self.requests if r.executed)
        return (
            f"<FaultServer {where} {protocols}: {len(self.requests)} requests ({executed}"
            f" executed), {self.connections_accepted} connections,"
            f" {self._script.pending()} actions queued>"
        )

    # -- serving ----------------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on ``host`` and ``port`` (0: any free port) and serve until cancelled;
        starts with `url`.

        Each connection runs in its own task (and each HTTP/2 or HTTP/3 stream's action in its
        own task); with `http3` one more task owns the UDP socket. Cancelling serve closes the
        listener and every connection abruptly (QUIC connections without CONNECTION_CLOSE).
        It raises only for a port it cannot listen on (`OSError`; ``errno.EADDRINUSE``, with
        the address in the message, for a port in use, TCP or UDP), a broken script
        (`ScriptError`), a strict server's unused script (`UnusedScriptError`, alone: not in
        an exception group, no traceback of the cancellation that ended serve) or a bug, never
        because a client misbehaved. A server serves once.
        """
        if self._started:
            raise RuntimeError("a FaultServer can serve only once")
        self._started = True
        listener, udp = await self._listen()
        ending: BaseException | None = None
        try:
            self._port = listener.socket.getsockname()[1]
            async with trio.open_nursery() as nursery:
                if udp is not None:
                    nursery.start_soon(self._h3_endpoint().serve, udp)
                task_status.started(self.url)
                while True:
                    try:
                        stream = await listener.accept()
                    except OSError as exc:
                        if exc.errno not in _ACCEPT_RETRY_ERRNOS:
                            raise
                        await trio.sleep(0.1)
                        continue
                    self.connections_accepted += 1
                    nursery.start_soon(self._serve_connection, stream, self.connections_accepted)
        except BaseException as exc:
            ending = exc
            raise
        finally:
            try:
                if udp is not None:
                    udp.close()
                await trio.aclose_forcefully(listener)
            finally:
                # The test is over (serve is cancelled with its nursery): nothing may be left.
                # Only when serve ends by cancellation: a real failure (a ScriptError) is not
                # hidden behind the report. (A checkpoint above raises Cancelled, hence the
                # inner finally.)
                if self.strict and _only_cancelled(ending):
                    unused = self._unused_error()
                    if unused is not None:
                        # One exception, not chained to the Cancelled (and serve's nursery
                        # group) it replaces: that chain is noise in the report.
                        raise unused from None

    async def _listen(self) -> tuple[trio.SocketListener, trio.socket.SocketType | None]:
        """The TCP listener, and with `http3` the UDP socket bound to the same port number.

        With port 0 the kernel picks the TCP port, which may be taken on UDP: then both are
        given up and picked again (a few times).
        """
        tries = 10 if self.http3 and self.requested_port == 0 else 1
        for attempt in range(tries):
            listener = await self._listen_tcp()
            if not self.http3:
                return listener, None
            from ._h3 import bind_udp

            port = listener.socket.getsockname()[1]
            try:
                return listener, await bind_udp(self.host, port)
            except OSError as exc:
                await trio.aclose_forcefully(listener)
                if attempt == tries - 1:
                    raise self._listen_error(exc, port, " (UDP, for HTTP/3)") from None
        raise AssertionError("unreachable")

    async def _listen_tcp(self) -> trio.SocketListener:
        try:
            listeners = await trio.open_tcp_listeners(self.requested_port, host=self.host)
        except OSError as exc:
            raise self._listen_error(exc, self.requested_port, "") from None
        for extra in listeners[1:]:
            await extra.aclose()
        return listeners[0]

    def _listen_error(self, exc: OSError, port: int, what: str) -> OSError:
        host = f"[{self.host}]" if ":" in self.host else self.host
        address = f"{host}:{port}{what}"
        if exc.errno == errno.EADDRINUSE:
            message = f"FaultServer cannot listen on {address}: port {port} is in use"
        else:
            message = f"FaultServer cannot listen on {address}: {exc.strerror or exc}"
        return OSError(exc.errno, message)

    def _h3_endpoint(self) -> H3Endpoint:
        from ._h3 import H3Endpoint

        def next_connection_id() -> int:
            self.connections_accepted += 1
            return self.connections_accepted

        return H3Endpoint(
            recorder=self._recorder,
            timeouts=self._timeouts,
            cert_pem=self._tls().cert_pem,
            key_pem=self._tls().key_pem,
            next_connection_id=next_connection_id,
            accept_early_data=lambda: self.accept_early_data,
        )

    async def _serve_connection(self, sock: trio.SocketStream, connection_id: int) -> None:
        transport = Transport.from_socket(sock, self._timeouts.linger)
        await self._serve_transport(
            transport,
            connection_id,
            None if self._certs is None else self._certs.server_context,
            None,
            self.alt_svc_value,
        )

    # -- in memory (MockTransport) ------------------------------------------------------------

    def negotiate_alpn(self, offered: Sequence[str]) -> str | None:
        """The protocol this server's ALPN would pick among `offered` (None: no overlap)."""
        mine = ("h2", "http/1.1") if self.http2 else ("http/1.1",)
        return next((protocol for protocol in mine if protocol in offered), None)

    async def serve_memory(self, end: MemoryEnd, *, alpn: str | None) -> None:
        """Serve one in-memory connection until it ends (for `MockTransport`).

        `alpn` stands for the outcome of a TLS handshake that is not modelled: ``"h2"`` or
        ``"http/1.1"`` fix the protocol; None sniffs it as in cleartext (h2c prior knowledge
        or HTTP/1.1). Counts in `connections_accepted`. Raises only `ScriptError` (a broken
        script, or a handler that failed); a misbehaving client costs only its connection.
        Cancelled, it abandons the connection at once.
        """
        self.connections_accepted += 1
        transport = Transport.from_memory(end, self._timeouts.linger)
        await self._serve_transport(transport, self.connections_accepted, None, alpn, None)

    async def _serve_transport(
        self,
        transport: Transport,
        connection_id: int,
        server_context: ssl.SSLContext | None,
        alpn: str | None,
        alt_svc: str | None,
    ) -> None:
        stream: trio.abc.Stream = transport
        ending = Ending.ABORT
        try:
            if server_context is not None:
                ssl_stream = trio.SSLStream(transport, server_context, server_side=True)
                stream = ssl_stream
                with trio.fail_after(self._timeouts.read):
                    await ssl_stream.do_handshake()
                alpn = ssl_stream.selected_alpn_protocol()
            ctx = ConnContext(stream, connection_id, self._recorder, self._timeouts, alt_svc)
            handler: H1Handler | H2Handler
            if alpn == "h2":
                handler = H2Handler(ctx, b"", self.max_concurrent_streams)
            elif alpn == "http/1.1":
                handler = H1Handler(ctx, b"")
            else:
                initial = await self._sniff(stream)
                if not initial:
                    ending = Ending.CLOSE
                    return
                if self.http2 and initial.startswith(PREFACE):
                    handler = H2Handler(ctx, initial, self.max_concurrent_streams)
                else:
                    handler = H1Handler(ctx, initial)
            ending = await handler.run()
        except DISCONNECTS:
            ending = Ending.ABORT
        finally:
            await self._end(stream, transport, ending)

    async def _sniff(self, stream: trio.abc.Stream) -> bytes:
        """Read until the bytes prove or rule out the HTTP/2 preface (b"" if none came)."""
        data = b""
        with trio.move_on_after(self._timeouts.idle):
            data = bytes(await stream.receive_some(65536))
        if not data:
            return b""
        with trio.move_on_after(self._timeouts.read):
            while len(data) < len(PREFACE) and PREFACE.startswith(data):
                more = await stream.receive_some(65536)
                if not more:
                    break
                data += more
        return data

    async def _end(self, stream: trio.abc.Stream, transport: Transport, ending: Ending) -> None:
        if ending is Ending.RESET:
            transport.reset()
        elif ending is Ending.ABORT:
            transport.close_now()
        else:
            # stream.aclose: close_notify (TLS), then the transport's lingering close. Bounded
            # in case the client never reads what is left to write.
            try:
                with trio.move_on_after(self._timeouts.linger + 1.0):
                    await stream.aclose()
            except DISCONNECTS:
                pass
            finally:
                transport.close_now()
