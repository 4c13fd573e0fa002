"""The seam where a client gets the byte stream under a new connection.

By default the client opens sockets itself (``transport.open_transport``: DNS, TCP, TLS). A
`Dialer` replaces all of that for one client (``Client(transport=...)``): it is handed what
the connection is for (`ConnectTarget`) and returns a `Transport` whose stream the HTTP/1.1 or
HTTP/2 layer then drives exactly as it drives a socket. `trio_retry.testing.MockTransport` is
the one implementation we ship: in-memory streams to a `FaultServer`, no socket at all.

A connection without an OS socket under it puts a `~.virtual.VirtualSocket` in its
`Transport` where the socket would be.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import trio

    from .progress import AttemptProgress
    from .transport import Transport

__all__ = ["ConnectTarget", "Dialer"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectTarget:
    """What a new connection is for.

    `alpn` lists the protocols the client offers (``("h2", "http/1.1")`` or
    ``("http/1.1",)``) when `tls` is true, and is empty in cleartext. `h2c` is true when the
    client will open a cleartext connection with the HTTP/2 preface (prior knowledge).
    """

    scheme: str
    host: str
    port: int
    tls: bool
    alpn: tuple[str, ...]
    h2c: bool


class Dialer(Protocol):
    """Opens the stream under one new client connection (the ``transport=`` of a Client)."""

    async def connect(
        self, target: ConnectTarget, *, progress: AttemptProgress, nursery: trio.Nursery
    ) -> Transport:
        """Return an open `Transport` for `target`.

        Before each stage it reaches, it calls ``progress.advance(Stage.DNS / CONNECT / TLS)``
        (as ``open_transport`` does), so a failure carries the right stage. It fails only
        with a ``WireError`` that is ``NOT_SENT`` (no request byte exists yet). Tasks that
        must live as long as the connection go in `nursery`, the client's own background
        nursery: they end when the client closes, at the latest. On cancellation nothing it
        opened is left open.
        """
        ...
