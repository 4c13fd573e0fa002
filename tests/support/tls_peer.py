"""A scripted TLS server on real loopback sockets, and the two client streams it is played
against: ``trio.SSLStream(..., https_compatible=True)`` over a ``RawSocketStream`` (what the
client used before ``_wire/tlssock.py``) and ``TLSSocketStream``.

The server drives an ``ssl.SSLObject`` over memory buffers itself, so a test decides what goes
on the wire and how: records of a chosen size (each ``SSLObject.write`` is one record), the
ciphertext in one ``send`` or one byte per ``send``, a close_notify or none, a TCP reset, bytes
that are no TLS record at all. :func:`outcome` runs a client script against a fresh server for
each client kind and returns what the client saw, for the differential tests to compare.
"""

from __future__ import annotations

import socket
import ssl
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio
import trustme

from trio_retry._wire.rawsock import RawSocketStream, open_socket
from trio_retry._wire.tlssock import TLSSocketStream

KINDS = ("sslstream", "socket")
ClientStream = TLSSocketStream | trio.SSLStream[RawSocketStream]


@dataclass
class Certs:
    """A throwaway CA with a certificate for ``localhost`` and one for a client."""

    ca: trustme.CA = field(default_factory=trustme.CA)

    def __post_init__(self) -> None:
        self.server = self.ca.issue_cert("localhost", "127.0.0.1")
        self.client = self.ca.issue_cert("client@example.org")

    def server_context(
        self, version: ssl.TLSVersion | None = None, alpn: list[str] | None = None
    ) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.server.configure_cert(ctx)
        if version is not None:
            ctx.minimum_version = ctx.maximum_version = version
        if alpn is not None:
            ctx.set_alpn_protocols(alpn)
        return ctx

    def client_context(self, alpn: list[str] | None = None) -> ssl.SSLContext:
        ctx = ssl.create_default_context()
        self.ca.configure_trust(ctx)
        if alpn is not None:
            ctx.set_alpn_protocols(alpn)
        return ctx


class Peer:
    """The server's side of one connection: TLS by hand over a Trio socket stream."""

    def __init__(self, stream: trio.SocketStream, context: ssl.SSLContext) -> None:
        self.stream = stream
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_side=True)

    async def flush(self, split: bool = False) -> None:
        """Send what TLS wrote: in one ``send_all``, or (``split``) one byte per send."""
        data = self.outgoing.read()
        if not split:
            if data:
                await self.stream.send_all(data)
            return
        for i in range(len(data)):
            await self.stream.send_all(data[i : i + 1])
            await trio.sleep(0)  # (the client's task runs between: it reads many times)

    async def _feed(self) -> bool:
        data = await self.stream.receive_some(65536)
        if not data:
            self.incoming.write_eof()
            return False
        self.incoming.write(data)
        return True

    async def handshake(self, split: bool = False) -> None:
        for _ in range(50):  # bounded: a handshake is a few flights
            try:
                self.tls.do_handshake()
            except ssl.SSLError as exc:
                if not isinstance(exc, ssl.SSLWantReadError):
                    await self.flush()  # the alert saying why
                    raise
                await self.flush(split)
                if not await self._feed():
                    raise ConnectionError("the client left during the handshake") from None
                continue
            await self.flush(split)
            return
        raise AssertionError("no handshake in 50 rounds")

    async def send(self, data: bytes, record: int = 16384, split: bool = False) -> None:
        """``data`` in records of ``record`` bytes (the last one shorter)."""
        for i in range(0, len(data), record):
            self.tls.write(data[i : i + record])
        await self.flush(split)

    async def receive(self, size: int) -> bytes:
        """Exactly ``size`` bytes of plaintext (fewer if the client ended)."""
        got = b""
        for _ in range(10_000):  # bounded
            if len(got) >= size:
                break
            try:
                got += self.tls.read(size - len(got))
                continue
            except ssl.SSLWantReadError:
                await self.flush()
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                break
            if not await self._feed():
                break
        return got

    async def close_notify(self) -> None:
        try:
            self.tls.unwrap()
        except ssl.SSLWantReadError:
            pass
        await self.flush()

    async def raw(self, data: bytes) -> None:
        """Bytes as they are, no TLS around them."""
        await self.stream.send_all(data)

    def reset(self) -> None:
        """End the TCP connection with a reset (SO_LINGER on, 0 s)."""
        self.stream.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.stream.socket.close()


async def connect(
    kind: str,
    port: int,
    context: ssl.SSLContext,
    hostname: str | None = "localhost",
    session: ssl.SSLSession | None = None,
) -> ClientStream:
    """A client stream of ``kind`` to ``127.0.0.1:port``, its handshake not yet made;
    ``session`` resumes an earlier one (trio.SSLStream takes it as an attribute)."""
    sock, raw = open_socket()
    assert raw is not None
    await sock.connect(("127.0.0.1", port))
    transport = RawSocketStream(sock, raw)
    if kind == "socket":
        return TLSSocketStream(transport, context, hostname, session=session)
    stream = trio.SSLStream(transport, context, server_hostname=hostname, https_compatible=True)
    if session is not None:
        stream.session = session
    return stream


def tls_object(stream: ClientStream) -> ssl.SSLObject:
    """The stream's ``ssl.SSLObject`` (trio.SSLStream forwards its attributes instead)."""
    if isinstance(stream, TLSSocketStream):
        return stream.ssl_object
    obj = stream._ssl_object  # (trio's; tests/wire/test_tlsread.py checks the name)
    assert isinstance(obj, ssl.SSLObject)
    return obj


def describe(exc: BaseException) -> tuple[str, str]:
    """An error as the differential tests compare it: its type and its cause's type."""
    cause = exc.__cause__
    return (type(exc).__name__, type(cause).__name__ if cause is not None else "-")


Script = Callable[[Peer], Awaitable[None]]
ClientScript = Callable[[ClientStream], Awaitable[list[object]]]


async def outcome(
    kind: str,
    server_context: ssl.SSLContext,
    client_context: ssl.SSLContext,
    server: Script,
    client: ClientScript,
    *,
    hostname: str | None = "localhost",
    split_handshake: bool = False,
    session: ssl.SSLSession | None = None,
) -> list[object]:
    """What ``client`` (a client stream of ``kind``) saw against ``server`` on a fresh
    connection: its own record, then ``("error", type, cause type)`` if it raised. The
    server's errors are the test's (the client may leave first: those are ignored)."""
    seen: list[object] = []
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]

        async def serve() -> None:
            stream = await listeners[0].accept()
            peer = Peer(stream, server_context)
            try:
                await peer.handshake(split_handshake)
                await server(peer)
            except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
                pass
            except ssl.SSLError:
                pass  # (the client refused the handshake: its side is what is compared)
            finally:
                await trio.aclose_forcefully(stream)
                await listeners[0].aclose()

        nursery.start_soon(serve)
        with trio.fail_after(20):
            stream = await connect(kind, port, client_context, hostname, session)
            try:
                await stream.do_handshake()
                seen += await client(stream)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                seen.append(("error", *describe(exc)))
            finally:
                await trio.aclose_forcefully(stream)
    return seen


async def read_all(stream: ClientStream, limit: int = 100_000) -> list[object]:
    """Every read until an end or an error: the bytes joined, then ``"end"`` or the error,
    then what one more read gives."""
    data = b""
    seen: list[object] = []
    try:
        for _ in range(limit):  # bounded
            chunk = await stream.receive_some()
            if not chunk:
                seen.append("end")
                break
            data += chunk
    except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        seen.append(("error", *describe(exc)))
    try:
        again = await stream.receive_some()
        after: object = ("again", bytes(again))
    except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        after = ("again", *describe(exc))
    return [data, *seen, after]
