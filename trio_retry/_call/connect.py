"""Opening connections: which pool a request draws from, and how a new connection is made.

:class:`Connector` is the pool's opener. It turns a transport (TCP, TLS, a proxy tunnel: see
``_wire.transport``) into an HTTP/1.1 or HTTP/2 connection, HTTP/2 when ALPN (or prior
knowledge on cleartext) says so. The transport comes from :attr:`Connector.open_transport`, one
function with the signature of :func:`~trio_retry._wire.transport.open_transport`: the single
place where another way of reaching a server (an in-memory transport, a Unix socket, SOCKS)
plugs in. Every failure there is a ``WireError`` tagged with its stage (always ``NOT_SENT``).
"""

from __future__ import annotations

import ssl
import time
import warnings
from typing import TYPE_CHECKING, Protocol, TypeAlias

import trio

from .._core.evidence import Stage
from .._models import URL, Origin
from .._tls import InsecureTLSWarning, build_ssl_context
from .._url import tls_name
from .._wire.contract import PooledConnection
from .._wire.progress import AttemptProgress
from .._wire.timekeeper import Timekeeper
from .._wire.tlschoice import enabled_by_env as tls_enabled_by_env
from .._wire.transport import ProxyRoute, Transport, open_transport
from .config import ClientConfig

if TYPE_CHECKING:
    from .._proxy import ProxyConfig
    from .._state.memory import ProtocolMemory
    from .._wire.dialer import Dialer
    from .._wire.http2 import HTTP2Connection
    from .._wire.http3 import HTTP3Connection
    from .._wire.http3.quic import QuicTrust, TicketStore
    from .._wire.http11 import HTTP11Connection
    from .h3route import QuicRoutes

__all__ = ["Connector", "PoolKey", "TransportOpener", "pool_key"]

#: What a pool is keyed by: an origin, or (cleartext through a proxy) the proxy's address.
PoolKey: TypeAlias = "Origin | tuple[str, str, str, int]"


class TransportOpener(Protocol):
    """Opens a byte stream to ``host:port`` (through ``proxy``), TLS when ``ssl_context``."""

    async def __call__(
        self,
        host: str,
        port: int,
        *,
        progress: AttemptProgress,
        ssl_context: ssl.SSLContext | None,
        connect_timeout: float | None = None,
        tls_timeout: float | None = None,
        proxy: ProxyRoute | None = None,
        proxy_ssl_context: ssl.SSLContext | None = None,
        http2: bool = True,
        uds: str | None = None,
        tls_fast_path: bool = False,
        timekeeper: Timekeeper | None = None,
    ) -> Transport: ...


def pool_key(origin: Origin, proxy: ProxyConfig | None) -> PoolKey:
    """The pool a request to ``origin`` draws from: the origin's own, or (cleartext through a
    proxy, absolute-form targets) the proxy's."""
    if proxy is not None and proxy.forwards and not origin.tls:
        return ("proxy", proxy.scheme, proxy.host, proxy.port)
    return origin


class Connector:
    """Opens the client's connections; HTTP/2 reader tasks live in the client's nursery."""

    __slots__ = (
        "_config",
        "_proxy_ssl_context",
        "_quic_trust",
        "_standby",
        "_tickets",
        "_tls_fast_path",
        "memory",
        "nursery",
        "open_transport",
        "quic_routes",
        "timekeeper",
    )

    def __init__(self, config: ClientConfig, opener: TransportOpener = open_transport) -> None:
        self._config = config
        #: Which origins go over HTTP/3 (``h3route.py``); ``None`` for a client without it.
        self.quic_routes: QuicRoutes | None = None
        self._tickets: TicketStore | None = None
        self._quic_trust: QuicTrust | None = None
        #: What HTTP/3 connections learn and reuse (tickets, tokens, Alt-Svc), kept in the
        #: ``state=`` file if given (``_state/``); ``None`` for a client without HTTP/3.
        self.memory: ProtocolMemory | None = None
        #: Per HTTP/3 origin, the connection whose handshake outlasted the fallback limit and
        #: went on in the background: the next opening there takes it once it completed.
        self._standby: dict[Origin, HTTP3Connection] = {}
        if config.http3 or config.http3_configured or config.http3_everywhere:
            from .._wire.http3.quic import TicketStore, quic_trust
            from .h3route import QuicRoutes

            # At construction: what QUIC cannot honour is refused before any request.
            self._quic_trust = quic_trust(
                config.ssl_context, config.cert, owns_context=config.owns_ssl_context
            )

            self.memory = _memory(config, self._quic_trust)
            self.quic_routes = QuicRoutes(
                discover=config.http3,
                configured=config.http3_configured,
                everywhere=config.http3_everywhere,
                excluded=config.http3_excluded,
            )
            self._tickets = TicketStore(self.memory)
        self.open_transport: TransportOpener = opener
        #: TLS on the socket itself where it can be (``_wire/tlschoice.py``) unless
        #: ``TRIO_RETRY_TLS_FAST_PATH=0`` turns it off (read here, once per client; on by default).
        self._tls_fast_path = tls_enabled_by_env()
        self.nursery: trio.Nursery | None = None  # set when the client is entered
        #: The client's timekeeper (``_wire/timekeeper.py``), handed to each connection it opens.
        self.timekeeper: Timekeeper | None = None
        self._proxy_ssl_context: ssl.SSLContext | None = None

    async def recall(self) -> None:
        """Read the ``state=`` file (in a thread) into the client's protocol memory; warn
        once (``StateFileWarning``) if it was ignored. Cancelled, nothing of it is used."""
        memory = self.memory
        if memory is None or memory.path is None:
            return
        problem = await trio.to_thread.run_sync(memory.load, time.time())
        if problem is not None:
            from .._state.file import StateFileWarning

            warnings.warn(problem, StateFileWarning, stacklevel=3)
        assert self.quic_routes is not None
        self.quic_routes.recall(memory, time.time())

    async def settle(self) -> None:
        """With a ``state=`` file: before the client's connections close, give each resumed
        HTTP/3 connection a moment (``clock.closing``) to receive its next ticket
        (``TicketStore.settle``), so the next process can resume too."""
        if self.memory is not None and self.memory.path is not None:
            assert self._tickets is not None
            await self._tickets.settle()

    async def remember(self) -> None:
        """Write what the client learned into its ``state=`` file (in a thread, shielded:
        the write completes even if the caller is cancelled, and it is atomic, see
        ``_state/file.py``); warn once if it could not be."""
        memory = self.memory
        if memory is None or memory.path is None:
            return
        assert self.quic_routes is not None
        self.quic_routes.remember(memory, time.time())
        with trio.CancelScope(shield=True):
            problem = await trio.to_thread.run_sync(memory.save, time.time())
        if problem is not None:
            from .._state.file import StateFileWarning

            warnings.warn(problem, StateFileWarning, stacklevel=3)

    def _proxy_tls(self) -> ssl.SSLContext:
        """The context for TLS to an ``https://`` proxy: the client's verification settings,
        offering only HTTP/1.1 (CONNECT is an HTTP/1.1 request). Built on first use; a
        caller's context is used as given (see ``trio_retry._tls``)."""
        context = self._proxy_ssl_context
        if context is None:
            config = self._config
            if config.owns_ssl_context:
                with warnings.catch_warnings():  # verify=False warned once already
                    warnings.simplefilter("ignore", InsecureTLSWarning)
                    context, _ = build_ssl_context(config.verify, config.cert, http2=False)
            else:
                context = config.ssl_context
            self._proxy_ssl_context = context
        return context

    def proxy_for(self, origin: Origin) -> ProxyConfig | None:
        """The proxy a request to ``origin`` goes through (``proxy=``, else the environment
        when ``trust_env``), or ``None``."""
        config = self._config
        if config.uds is not None:  # the socket is the route: no proxy in between
            return None
        if config.proxy is not None:
            return config.proxy
        if config.trust_env:
            # Imported by clients that trust the environment (not the default); once loaded,
            # a sys.modules look-up beside proxy_from_env's ~35 us scan of os.environ.
            from .._proxy import proxy_from_env

            return proxy_from_env(origin)
        return None

    def key_for(self, origin: Origin, proxy: ProxyConfig | None) -> PoolKey:
        """The pool a request to ``origin`` draws from now: its HTTP/3 connections when the
        origin is routed over HTTP/3 (``h3route.py``; never through a proxy), else
        :func:`pool_key`'s."""
        routes = self.quic_routes
        if routes is not None and proxy is None and origin.tls:
            if routes.port_for(origin) is not None:
                from .h3route import quic_key

                return quic_key(origin)
        return pool_key(origin, proxy)

    async def open(
        self,
        progress: AttemptProgress,
        *,
        url: URL,
        proxy: ProxyConfig | None,
        pool_key: PoolKey,
    ) -> PooledConnection:
        """A new connection for ``url``'s origin (through ``proxy`` if any). Raises
        ``WireError``; on cancellation nothing is left open."""
        config = self._config
        if pool_key.__class__ is tuple and pool_key[0] == "h3":  # (key_for: its HTTP/3 pool)
            return await self._open_quic(progress, url, pool_key)
        timeouts = config.stage_timeouts
        origin = url.origin
        via_proxy = proxy is not None and proxy.forwards and not origin.tls
        h2c = not origin.tls and config.http2_prior_knowledge and not via_proxy
        if config.transport is not None:
            transport = await self._dial(config.transport, origin, h2c, progress)
        else:
            transport = await self.open_transport(
                origin.host,
                origin.port,
                progress=progress,
                ssl_context=config.ssl_context if origin.tls else None,
                connect_timeout=timeouts.connect,
                tls_timeout=timeouts.tls,
                proxy=proxy,
                proxy_ssl_context=self._proxy_tls() if proxy is not None and proxy.tls else None,
                http2=config.http2,
                uds=config.uds,
                tls_fast_path=self._tls_fast_path,
                timekeeper=self.timekeeper,
            )
        if transport.alpn == "h2" or h2c:
            # The reader task lives in the client's nursery: no task outlives the client.
            assert self.nursery is not None
            return await _http2_connection().open(
                transport,
                pool_key,
                scheme=origin.scheme,
                authority=url.host_header,
                max_header_bytes=config.max_header_bytes,
                nursery=self.nursery,
                progress=progress,
                handshake_timeout=timeouts.tls if origin.tls else timeouts.connect,
                timekeeper=self.timekeeper,
                fast_path=config.http2_fast_path,
            )
        return _http11_connection()(
            transport,
            pool_key,
            config.max_header_bytes,
            fast_path=config.http1_fast_path,
            timekeeper=self.timekeeper,
        )

    async def _open_quic(
        self, progress: AttemptProgress, url: URL, key: PoolKey
    ) -> PooledConnection:
        """A new HTTP/3 connection to ``url``'s origin (``_wire/http3``). A failed QUIC
        handshake marks the origin broken (``h3route.py``) and raises a ``NOT_SENT``
        ``WireError`` with ``reconnect``: the loop sends the same attempt again at once,
        uncounted, and :meth:`key_for` then routes it over TCP. A handshake slower than the
        fallback limit raises the same, but goes on in the background with the origin
        *pending* (TCP meanwhile): once it completes, the next opening here is that
        connection, at once; if it fails, the origin is broken then."""
        from .._wire.http3 import HTTP3Connection
        from .._wire.http3.backend import CheckedQuicConnection
        from .._wire.http3.quic import allows_early_data, quic_configuration

        config = self._config
        routes, tickets = self.quic_routes, self._tickets
        assert routes is not None
        assert tickets is not None
        assert self.nursery is not None
        origin = url.origin
        standby = self._standby.pop(origin, None)
        if standby is not None:
            if standby.ready:
                progress.http_version = standby.http_version
                progress.advance(Stage.TLS)  # (its handshake is done: nothing to wait for)
                return standby
            standby.close()  # (not reached while it is pending: key_for routes to TCP then)
        port = routes.port_for(origin) or origin.port
        where = (origin.host, port)
        ticket = tickets.take(where)
        trust = self._quic_trust
        assert trust is not None
        token = tickets.take_token(where)
        quic = CheckedQuicConnection(
            configuration=quic_configuration(trust, tls_name(origin.host), ticket),
            trust=trust,
            session_ticket_handler=lambda new: tickets.keep(where, new),
            token_handler=lambda new: tickets.keep_token(where, new),
            token=token,
        )
        timeouts = config.stage_timeouts
        conn: HTTP3Connection = await HTTP3Connection.open(
            quic,
            origin.host,
            port,
            key,
            authority=url.host_header,
            max_header_bytes=config.max_header_bytes,
            nursery=self.nursery,
            progress=progress,
            timekeeper=self.timekeeper,
            connect_timeout=timeouts.connect,
            handshake_timeout=timeouts.tls,
            early=config.early_data and allows_early_data(ticket) and quic.zero_rtt_visible,
            on_handshake_failed=lambda _: self._quic_failed(origin),
            on_handshake_done=lambda: routes.mark_working(origin),
            on_slow=lambda slow: self._quic_slow(origin, slow),
        )
        return conn

    def _quic_slow(self, origin: Origin, conn: HTTP3Connection) -> None:
        """``conn``'s handshake outlasted the fallback limit and goes on: kept aside, the
        origin reached over TCP until it ends."""
        assert self.quic_routes is not None
        previous = self._standby.pop(origin, None)
        if previous is not None:
            previous.close()
        self._standby[origin] = conn
        self.quic_routes.mark_pending(origin)

    def _quic_failed(self, origin: Origin) -> None:
        """A QUIC handshake with ``origin`` failed (in an opening, or in the background)."""
        assert self.quic_routes is not None
        standby = self._standby.get(origin)
        if standby is not None and standby.closed:
            del self._standby[origin]
        self.quic_routes.mark_broken_now(origin)

    async def _dial(
        self, dialer: Dialer, origin: Origin, h2c: bool, progress: AttemptProgress
    ) -> Transport:
        """``transport=``: the dialer opens the stream (its tasks in the client's nursery)."""
        assert self.nursery is not None
        from .._wire.dialer import ConnectTarget  # transport= only: see _http2_connection()

        target = ConnectTarget(
            scheme=origin.scheme,
            host=origin.host,
            port=origin.port,
            tls=origin.tls,
            alpn=(("h2", "http/1.1") if self._config.http2 else ("http/1.1",))
            if origin.tls
            else (),
            h2c=h2c,
        )
        return await dialer.connect(target, progress=progress, nursery=self.nursery)

    def expect_multiplexed(
        self, origin: Origin, proxy: ProxyConfig | None, key: PoolKey | None = None
    ) -> bool:
        """Whether a new connection to ``origin`` will probably be HTTP/2 or HTTP/3 (the pool
        then waits for one being opened instead of opening a parallel one)."""
        if key is not None and key.__class__ is tuple and key[0] == "h3":
            return True
        if origin.tls:
            return self._config.http2
        return self._config.http2_prior_knowledge and proxy is None


def _memory(config: ClientConfig, trust: QuicTrust) -> ProtocolMemory:
    """The client's protocol memory: with ``state=``, bound to the fingerprint of its trust
    settings (``_state/trust.py``); without, in memory only."""
    from .._state.memory import ProtocolMemory

    if config.state is None:
        return ProtocolMemory(None, "")
    from cryptography.hazmat.primitives.serialization import Encoding

    from .._state.trust import trust_fingerprint

    presented = trust.client_certificate
    der = None if presented is None else presented.certificate.public_bytes(Encoding.DER)
    return ProtocolMemory(config.state, trust_fingerprint(trust.context, config.verify, der))


def _http11_connection() -> type[HTTP11Connection]:
    """The HTTP/1.1 connection class, imported when a first connection speaks HTTP/1.1.

    As for HTTP/2 below: h11 and the HTTP/1.1 modules (~6 ms) load with the first connection
    that needs them, not with the package, so the command line's ``--help`` and a program that
    only speaks HTTP/2 never import them; a program's first HTTP/1.1 request pays them once.
    """
    from .._wire.http11 import HTTP11Connection

    return HTTP11Connection


def _http2_connection() -> type[HTTP2Connection]:
    """The HTTP/2 connection class, imported when a first connection speaks HTTP/2.

    The HTTP/2 package and the h2 library behind it are a fifth of trio_retry's import time,
    and a program that only meets HTTP/1.1 servers never needs them. Importing here costs a
    ``sys.modules`` look-up per new HTTP/2 connection (not per request); importing the package
    at the top of this module, as before, cost every program about 10 ms at start-up. The import
    is synchronous (no checkpoint), so no other task sees a half-imported package.
    """
    from .._wire.http2 import HTTP2Connection

    return HTTP2Connection
