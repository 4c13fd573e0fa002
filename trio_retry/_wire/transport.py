"""Opening a connection, one stage at a time: DNS, TCP connect, TLS.

Every failure here happens before the first request byte exists, so each is ``NOT_SENT`` with
the stage that failed. Certificate verification failures are ``TLS_CERTIFICATE`` (permanent:
retrying cannot make a certificate valid); any other handshake failure is ``TLS_HANDSHAKE``.

DNS is resolved here rather than inside ``trio.open_tcp_stream`` so that a resolution failure
and a connect failure are told apart; the connect then races the addresses "happy eyeballs"
style (RFC 8305, as ``trio.open_tcp_stream`` does): the next address starts when the previous
one fails or after ``HAPPY_EYEBALLS_DELAY``, the first to connect wins, the rest are cancelled.
"""

from __future__ import annotations

import socket as _stdlib_socket
import ssl
from collections.abc import Sequence
from typing import Any

import h11
import trio

from .._core.evidence import Evidence, FailureCategory, Stage
from .progress import AttemptProgress, WireError
from .virtual import VirtualSocket

__all__ = ["HAPPY_EYEBALLS_DELAY", "Transport", "open_transport"]

HAPPY_EYEBALLS_DELAY = 0.25

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


async def _resolve(host: str, port: int) -> list[AddrInfo]:
    try:
        infos = await trio.socket.getaddrinfo(host, port, type=_stdlib_socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise _fail(Stage.DNS, FailureCategory.DNS, f"could not resolve {host!r}: {exc}") from exc
    if not infos:
        raise _fail(Stage.DNS, FailureCategory.DNS, f"no addresses for {host!r}")
    return infos


async def _connect_one(info: AddrInfo) -> trio.socket.SocketType:
    family, type_, proto, _, sockaddr = info
    sock = trio.socket.socket(family, type_, proto)
    try:
        await sock.connect(sockaddr)
    except BaseException:
        sock.close()
        raise
    return sock


async def _connect(infos: Sequence[AddrInfo]) -> trio.socket.SocketType:
    """Happy eyeballs over ``infos``; raises ``OSError`` (the last error) if none connects."""
    if len(infos) == 1:
        return await _connect_one(infos[0])
    winner: list[trio.socket.SocketType] = []
    errors: list[OSError] = []

    async def attempt(info: AddrInfo, failed: trio.Event, nursery: trio.Nursery) -> None:
        try:
            sock = await _connect_one(info)
        except OSError as exc:
            errors.append(exc)
            failed.set()
            return
        if winner:
            sock.close()
            return
        winner.append(sock)
        nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        for info in infos:
            failed = trio.Event()
            nursery.start_soon(attempt, info, failed, nursery)
            with trio.move_on_after(HAPPY_EYEBALLS_DELAY):
                await failed.wait()
    if winner:
        return winner[0]
    raise errors[-1] if errors else OSError("connect failed")


def _is_certificate_error(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


async def _tunnel(
    stream: trio.SocketStream, host: str, port: int, authorization: str | None, via: str
) -> None:
    """``CONNECT host:port`` through an HTTP proxy; returns once the tunnel is open.

    Nothing of the request exists yet, so every failure here is ``NOT_SENT`` (stage CONNECT):
    a refusal (any non-2xx), a malformed answer, or the proxy closing.
    """
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
                conn.receive_data(await stream.receive_some(65536))
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


async def open_transport(
    host: str,
    port: int,
    *,
    progress: AttemptProgress,
    ssl_context: ssl.SSLContext | None,
    connect_timeout: float | None = None,
    tls_timeout: float | None = None,
    proxy: tuple[str, int, str | None] | None = None,
) -> Transport:
    """Resolve, connect and (when ``ssl_context`` is given) handshake.

    With ``proxy=(host, port, authorization)`` the TCP connection goes to the proxy; for TLS a
    CONNECT tunnel to ``host:port`` is opened first and the handshake runs through it.

    Raises :class:`WireError` (always ``NOT_SENT``) with the stage that failed. On cancellation
    nothing is left open. ``progress`` records the stage and the ``connect``/``tls`` timings.
    """
    clock = trio.current_time
    progress.advance(Stage.DNS)
    started = clock()
    peer_host, peer_port = (proxy[0], proxy[1]) if proxy is not None else (host, port)
    via = f" via proxy {peer_host}:{peer_port}" if proxy is not None else ""
    with trio.move_on_after(connect_timeout if connect_timeout is not None else float("inf")) as s:
        infos = await _resolve(peer_host, peer_port)
        progress.advance(Stage.CONNECT)
        try:
            sock = await _connect(infos)
        except OSError as exc:
            raise _fail(
                Stage.CONNECT,
                FailureCategory.CONNECT,
                f"could not connect to {peer_host}:{peer_port}{via}: {exc.strerror or exc}",
            ) from exc
        tcp = trio.SocketStream(sock)
        if proxy is not None and ssl_context is not None:
            try:
                await _tunnel(tcp, host, port, proxy[2], f"{peer_host}:{peer_port}")
            except BaseException:
                sock.close()
                raise
    if s.cancelled_caught:
        # Every path cancelled inside the scope has already closed its socket.
        raise _fail(
            progress.stage,
            FailureCategory.TIMEOUT,
            f"connecting to {peer_host}:{peer_port}{via} took longer than the connect timeout "
            f"({connect_timeout}s)",
        )
    progress.timings["connect"] = clock() - started
    if ssl_context is None:
        return Transport(tcp, sock, None)

    progress.advance(Stage.TLS)
    started = clock()
    tls = trio.SSLStream(tcp, ssl_context, server_hostname=host, https_compatible=True)
    try:
        with trio.move_on_after(tls_timeout if tls_timeout is not None else float("inf")) as s:
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
    if s.cancelled_caught:
        sock.close()
        raise _fail(
            Stage.TLS,
            FailureCategory.TIMEOUT,
            f"TLS handshake with {host}:{port} took longer than the TLS timeout ({tls_timeout}s)",
        )
    progress.timings["tls"] = clock() - started
    return Transport(tls, sock, tls.selected_alpn_protocol())
