"""Opening a connection, one stage at a time: DNS, TCP (or Unix socket) connect, TLS.

Every failure here happens before the first request byte exists, so each is ``NOT_SENT`` with
the stage that failed. Certificate verification failures are ``TLS_CERTIFICATE`` (permanent:
retrying cannot make a certificate valid); any other handshake failure is ``TLS_HANDSHAKE``.

DNS is resolved here rather than inside ``trio.open_tcp_stream`` so that a resolution failure
and a connect failure are told apart; the connect then races the addresses "happy eyeballs"
style (RFC 8305, as ``trio.open_tcp_stream`` does): the next address starts when the previous
one fails or after ``FIXED.happy_eyeballs`` (``clock.py``), the first to connect wins, the
rest are cancelled. With one address, a second connect to it starts beside the first after
the same delay when the first has had no answer (a lost SYN: ``connect_backup.py``).

The byte stream over the connected socket (TCP or Unix, and under TLS or a proxy's steps) is a
:class:`~.rawsock.RawSocketStream`: ``trio.SocketStream``'s contract with fewer layers per call
(``trio.SocketStream`` itself when a custom Trio socket factory is installed).
"""

from __future__ import annotations

import socket as _stdlib_socket
import ssl
import sys
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol

import trio
from trio.lowlevel import cancel_shielded_checkpoint, checkpoint_if_cancelled

from .._core.evidence import Evidence, FailureCategory, Stage
from .._tls import check_alpn
from .._url import tls_name
from .clock import FIXED, Keeper, bound, opening, wait_for
from .connect_backup import Sockets, backed_up, why
from .progress import AttemptProgress, WireError
from .rawsock import connect_socket, open_socket, socket_stream
from .tlschoice import tls_stream
from .virtual import VirtualSocket

if sys.version_info < (3, 11):  # builtin from 3.11; trio itself needs the backport on 3.10
    from exceptiongroup import ExceptionGroup

__all__ = ["ProxyRoute", "Transport", "open_transport"]

AddrInfo = tuple[Any, Any, Any, str, Any]


class Transport:
    """An open byte stream plus what the HTTP layer needs to know about it."""

    __slots__ = ("alpn", "socket", "stream")

    def __init__(
        self,
        stream: trio.abc.Stream,
        sock: trio.socket.SocketType | VirtualSocket,  # see virtual.py
        alpn: str | None,
    ):
        self.stream = stream
        self.socket = sock
        self.alpn = alpn


def _fail(stage: Stage, category: FailureCategory, message: str) -> WireError:
    return WireError(message, stage=stage, evidence=Evidence.NOT_SENT, category=category)


def _ascii_name(host: str) -> str | bytes:
    """``host`` as bytes when it is ASCII with labels the IDNA codec would accept (1 to 63
    characters): ``socket.getaddrinfo`` encodes a ``str`` with that codec, whose first use
    imports it and ``stringprep`` (about a millisecond of a process's first request); bytes
    are what it would have produced. Anything else stays text, for trio's IDNA 2008 and the
    codec's own errors."""
    if host.isascii() and all(0 < len(label) < 64 for label in host.rstrip(".").split(".")):
        return host.encode("ascii")
    return host


#: ``getaddrinfo`` flags that make it answer only for an address literal and numeric port,
#: without a look-up (and without blocking): as ``trio.socket.getaddrinfo`` tries first.
_NUMERIC_ONLY = _stdlib_socket.AI_NUMERICHOST | getattr(_stdlib_socket, "AI_NUMERICSERV", 0)


def _literal_addresses(name: str | bytes, port: int) -> list[AddrInfo] | None:
    """The addresses of ``name`` when it is an IP address literal, as
    ``trio.socket.getaddrinfo`` gives them for it (its first, numeric-only try), else ``None``
    (a name to look up, or anything the numeric try refuses: trio's own way then decides,
    errors included). Within the call: no look-up, no thread, no await."""
    try:
        return _stdlib_socket.getaddrinfo(
            name, port, 0, _stdlib_socket.SOCK_STREAM, 0, _NUMERIC_ONLY
        )
    except (OSError, UnicodeError):
        return None


async def _resolve(host: str, port: int) -> list[AddrInfo]:
    """The addresses of ``host`` (``trio.socket.getaddrinfo``'s); raises a ``DNS``
    :class:`WireError` when there are none. Always a checkpoint, as trio's.

    An address literal is answered by :func:`_literal_addresses`, then one checkpoint: the
    same schedule point as trio's way, without trio's look-up held across it (its coroutines,
    a ``_try_sync``, an outcome: while thousands of calls start at once, every one waits
    there, issue #41). The schedule point is kept on purpose: without it each call ran on from
    its start to its connect in one go, the connects of a burst came spread out instead of
    back to back, and the server (nginx on the other CPU) was woken for each one, the wake-ups
    charged to the client: 20 to 40 µs of kernel time more per call at 10,000 calls."""
    name = _ascii_name(host)
    infos = _literal_addresses(name, port)
    if infos is not None:
        await cancel_shielded_checkpoint()
        await checkpoint_if_cancelled()
        return infos
    try:
        infos = await trio.socket.getaddrinfo(name, port, type=_stdlib_socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise _fail(Stage.DNS, FailureCategory.DNS, f"could not resolve {host!r}: {exc}") from exc
    if not infos:
        raise _fail(Stage.DNS, FailureCategory.DNS, f"no addresses for {host!r}")
    return infos


def _address(sockaddr: Any) -> str:
    """``host:port`` of a socket address (``[host]:port`` for IPv6)."""
    host, port = sockaddr[0], sockaddr[1]
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


def _connect(infos: Sequence[AddrInfo]) -> Awaitable[Sockets]:
    """Happy eyeballs over ``infos``, to be awaited; raises ``OSError`` if none connects.

    With one address its own error is raised (its backup's too, when it was tried:
    :func:`~.connect_backup.backed_up`). With several, every address's error is kept,
    as ``trio.open_tcp_stream`` does: the ``OSError`` names each address and why it failed,
    and its ``__cause__`` is an ``ExceptionGroup`` of the individual errors (in address
    order). Raising only the last error would hide why the others failed: an IPv6 address
    that is unreachable and an IPv4 one that refuses are two different stories.

    (A plain function returning the awaitable of the way it chose: no frame of its own held
    while thousands of connections to one address each connect, issue #41.)
    """
    if len(infos) == 1:
        family, type_, proto, _, sockaddr = infos[0]
        return backed_up(family, type_, proto, sockaddr)
    return _race(infos)


async def _race(infos: Sequence[AddrInfo]) -> Sockets:
    """:func:`_connect` over several addresses. (A function of its own: the closure below
    gives its frame cells, which a connection to one address, the usual case, has no need to
    hold while it connects.)"""
    winner: list[Sockets] = []
    errors: dict[int, OSError] = {}

    async def attempt(
        index: int, info: AddrInfo, failed: trio.Event, nursery: trio.Nursery
    ) -> None:
        try:
            sock = await connect_socket(info[0], info[1], info[2], info[4])
        except OSError as exc:
            errors[index] = exc
            failed.set()
            return
        if winner:
            sock[0].close()
            return
        winner.append(sock)
        nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        for index, info in enumerate(infos):
            failed = trio.Event()
            nursery.start_soon(attempt, index, info, failed, nursery)
            await wait_for(failed, FIXED.happy_eyeballs)
    if winner:
        return winner[0]
    tried = [(infos[i][4], errors[i]) for i in sorted(errors)]
    message = "every address failed: " + "; ".join(
        f"{_address(sockaddr)} ({why(exc)})" for sockaddr, exc in tried
    )
    raise OSError(message) from ExceptionGroup(message, [exc for _, exc in tried])


async def _connect_unix(path: str) -> Sockets:
    """Connect to a Unix domain socket; a failure (no such file, nobody listening, no
    permission) is ``NOT_SENT`` at ``CONNECT``: nothing can have been sent."""
    sock, raw = open_socket(_stdlib_socket.AF_UNIX, _stdlib_socket.SOCK_STREAM)
    try:
        await sock.connect(path)
    except OSError as exc:
        sock.close()
        raise _fail(
            Stage.CONNECT,
            FailureCategory.CONNECT,
            f"could not connect to the Unix socket {path!r}: {exc.strerror or exc}",
        ) from exc
    except BaseException:
        sock.close()
        raise
    return sock, raw


def _is_certificate_error(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


async def _tunnel(
    stream: trio.abc.Stream, host: str, port: int, authorization: str | None, via: str
) -> None:
    """``CONNECT host:port`` through an HTTP proxy; returns once the tunnel is open.

    Nothing of the request exists yet, so every failure here is ``NOT_SENT`` (stage CONNECT):
    a refusal (any non-2xx), a malformed answer, or the proxy closing.
    """
    import h11  # here, for HTTP proxies only: see _call/connect.py's _http11_connection()

    target = f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"
    conn = h11.Connection(h11.CLIENT)
    headers = [("host", target)]
    if authorization is not None:
        headers.append(("proxy-authorization", authorization))
    try:
        await stream.send_all(
            conn.send(h11.Request(method="CONNECT", target=target, headers=headers))
            + (conn.send(h11.EndOfMessage()) or b"")
        )
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(bytes(await stream.receive_some(65536)))
                continue
            if isinstance(event, h11.InformationalResponse):
                continue
            if isinstance(event, h11.Response):
                if 200 <= event.status_code < 300 and not conn.trailing_data[0]:
                    return
                raise _fail(
                    Stage.CONNECT,
                    FailureCategory.CONNECT,
                    f"the proxy {via} refused CONNECT {target}: {event.status_code} "
                    f"{event.reason.decode('latin-1')}".rstrip(),
                )
            raise _fail(Stage.CONNECT, FailureCategory.CONNECT, f"unexpected {event!r}")
    except (h11.ProtocolError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        raise _fail(
            Stage.CONNECT,
            FailureCategory.CONNECT,
            f"the proxy {via} failed during CONNECT {target}: {exc}",
        ) from exc


class ProxyRoute(Protocol):
    """What the transport needs to know of a proxy (``trio_retry._proxy.ProxyConfig``)."""

    @property
    def scheme(self) -> str: ...
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def authorization(self) -> str | None: ...
    @property
    def username(self) -> str | None: ...
    @property
    def password(self) -> str | None: ...


async def _through_proxy(
    stream: trio.abc.Stream,
    host: str,
    port: int,
    *,
    proxy: ProxyRoute,
    proxy_ssl_context: ssl.SSLContext | None,
    tunnel: bool,
) -> trio.abc.Stream:
    """The proxy's own steps on a connected ``stream``: TLS to an ``https`` proxy, then a
    CONNECT tunnel (when ``tunnel``) or the SOCKS5 handshake. All at stage ``CONNECT``, all
    ``NOT_SENT`` on failure: no request byte exists yet."""
    via = f"{proxy.host}:{proxy.port}"
    if proxy.scheme.startswith("socks"):
        target = host
        if proxy.scheme == "socks5":  # the client resolves: the proxy is given an address
            infos = await _resolve(host, port)
            target = str(infos[0][4][0])
        # Imported per SOCKS connection, by clients with a SOCKS proxy only: with _proxy
        # behind it, start-up time that other programs never need.
        from .socks import socks5_handshake

        await socks5_handshake(
            stream, target, port, username=proxy.username, password=proxy.password, via=via
        )
        return stream
    if proxy.scheme == "https":
        assert proxy_ssl_context is not None
        tls = trio.SSLStream(stream, proxy_ssl_context, server_hostname=tls_name(proxy.host))
        try:
            await tls.do_handshake()
        except (trio.BrokenResourceError, ssl.SSLError, OSError) as exc:
            certificate = _is_certificate_error(exc)
            raise WireError(
                f"TLS with the proxy {via} failed: {exc.__cause__ or exc}",
                stage=Stage.CONNECT,
                evidence=Evidence.NOT_SENT,
                category=FailureCategory.TLS_CERTIFICATE
                if certificate
                else FailureCategory.CONNECT,
            ) from exc
        refused = check_alpn(tls.selected_alpn_protocol(), http2=False)
        if refused is not None:
            raise _fail(Stage.CONNECT, FailureCategory.CONNECT, f"the proxy {via}: {refused}")
        stream = tls
    if tunnel:
        await _tunnel(stream, host, port, proxy.authorization, via)
    return stream


async def open_transport(
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
    timekeeper: Keeper | None = None,
) -> Transport:
    """Resolve, connect and (when ``ssl_context`` is given) handshake.

    With ``proxy`` the TCP connection goes to the proxy. An ``https`` proxy is spoken to over
    TLS first (``proxy_ssl_context``, which must offer only ``http/1.1``). Through an HTTP(S)
    proxy a TLS origin gets a CONNECT tunnel to ``host:port`` and the handshake runs through
    it; a cleartext one is left to the caller (absolute-form requests to the proxy). A SOCKS5
    proxy always tunnels (``socks5h``: the proxy resolves ``host``; ``socks5``: we do).

    With ``uds="/path"`` the connection goes to that Unix domain socket instead of resolving
    and dialing ``host``; TLS (for ``https``) then runs over it with ``host`` as the server name.
    A connect failure is ``NOT_SENT`` at ``CONNECT``, as for TCP.

    ``http2=False`` refuses a server that picked ``h2`` (only a caller's own context can offer
    it to such a client: see ``trio_retry._tls``).

    TLS to the origin runs on the socket itself (``tlssock.TLSSocketStream``) when
    ``tls_fast_path`` and ``tlschoice.supported`` allow it, else over ``trio.SSLStream`` (through
    a proxy always): the same bytes and errors either way.

    Raises :class:`WireError` (always ``NOT_SENT``) with the stage that failed: reaching or
    negotiating with a proxy is ``CONNECT``. On cancellation nothing is left open.
    ``progress`` records the stage and the ``connect``/``tls`` timings. The ``connect`` and
    ``tls`` limits are kept on ``timekeeper``'s lanes when the opening has a cancel scope of
    its own to end (``clock.opening``), else each in a scope.
    """
    clock = trio.current_time
    progress.advance(Stage.DNS)
    started = clock()
    peer_host, peer_port = (proxy.host, proxy.port) if proxy is not None else (host, port)
    via = f" via proxy {peer_host}:{peer_port}" if proxy is not None else ""
    if uds is not None:
        via = f" via Unix socket {uds!r}"
    # Every path cancelled inside the bound has already closed its socket. The bound is
    # entered and left by hand, not by a `with` statement, whose frame would hold the bound's
    # __exit__ method while the connect waits: one object more for each of thousands of calls
    # connecting at once (issue #41). It never swallows what the connect raised.
    limited = bound(
        "connect",
        timekeeper,
        progress=progress,
        target=opening(progress),
        limit=connect_timeout,
        about=f"{peer_host}:{peer_port}{via}",
    )
    limited.__enter__()
    try:
        if uds is not None:
            progress.advance(Stage.CONNECT)  # no name to resolve: the path is the address
            sock, raw = await _connect_unix(uds)
        else:
            # (the addresses are not kept here while the connect waits: connect_socket's parts)
            connecting = _connect(await _resolve(peer_host, peer_port))
            progress.advance(Stage.CONNECT)
            try:
                sock, raw = await connecting
            except OSError as exc:
                raise _fail(
                    Stage.CONNECT,
                    FailureCategory.CONNECT,
                    f"could not connect to {peer_host}:{peer_port}{via}: {exc.strerror or exc}",
                ) from exc
        tcp: trio.abc.Stream = socket_stream(sock, raw)
        if proxy is not None:
            try:
                tcp = await _through_proxy(
                    tcp,
                    host,
                    port,
                    proxy=proxy,
                    proxy_ssl_context=proxy_ssl_context,
                    tunnel=ssl_context is not None,
                )
            except WireError as exc:
                sock.close()
                # A DNS failure for socks5 (local resolution) keeps its stage; the rest is
                # CONNECT: the proxy was reached or tried.
                if exc.stage is not Stage.DNS:
                    exc.stage = Stage.CONNECT
                raise
            except BaseException:
                sock.close()
                raise
    except BaseException as exc:
        limited.__exit__(type(exc), exc, exc.__traceback__)
        raise
    limited.__exit__(None, None, None)
    progress.timings["connect"] = clock() - started
    if ssl_context is None:
        return Transport(tcp, sock, None)

    progress.advance(Stage.TLS)
    started = clock()
    # SNI and the certificate's name: the host without a trailing dot (DNS had it as given).
    # TLS on the socket itself where it can be (tlssock.py), else trio.SSLStream: the same
    # errors either way. Through a proxy's tunnel, always trio.SSLStream (the proxy's own TLS,
    # or a SOCKS or CONNECT exchange, came first on that socket).
    fast = tls_fast_path and proxy is None
    tls = tls_stream(tcp, ssl_context, tls_name(host), fast=fast)
    try:
        with bound(
            "tls",
            timekeeper,
            progress=progress,
            target=opening(progress),
            limit=tls_timeout,
            about=f"{host}:{port}",
        ):
            await tls.do_handshake()
    except (trio.BrokenResourceError, ssl.SSLError, OSError) as exc:
        sock.close()
        if _is_certificate_error(exc):
            cause = exc.__cause__ or exc
            reason = getattr(cause, "verify_message", None) or str(cause)
            raise _fail(
                Stage.TLS,
                FailureCategory.TLS_CERTIFICATE,
                f"TLS certificate verification failed for {host}:{port}: {reason}",
            ) from exc
        raise _fail(
            Stage.TLS,
            FailureCategory.TLS_HANDSHAKE,
            f"TLS handshake with {host}:{port} failed: {exc.__cause__ or exc}",
        ) from exc
    except BaseException:
        sock.close()
        raise
    progress.timings["tls"] = clock() - started
    alpn = tls.selected_alpn_protocol()
    refused = check_alpn(alpn, http2)
    if refused is not None:
        sock.close()
        # Nothing was sent; trying again would negotiate the same thing.
        raise WireError(
            f"TLS with {host}:{port}: {refused}",
            stage=Stage.TLS,
            evidence=Evidence.NOT_SENT,
            category=FailureCategory.TLS_HANDSHAKE,
            ends_call=True,
        )
    return Transport(tls, sock, alpn)
