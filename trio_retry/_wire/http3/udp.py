"""The UDP socket of one QUIC connection: each datagram sent on the path QUIC chose, each
received with the address it came from, and an ICMP error told apart by the path it concerns.

One job: let QUIC move. aioquic says where each datagram goes (``datagrams_to_send`` returns
``(data, address)``): to the server's address from the handshake, or, once the handshake is
confirmed, to the *preferred address* a server may offer (RFC 9000 §9.6), first to validate
that path (PATH_CHALLENGE) and then for everything. A socket ``connect()``-ed to the first
address, as before, sent every datagram there and let the kernel drop every datagram from the
preferred address: the probe was answered over the old path, aioquic took that as validation,
and the server never received on its preferred address. So the socket is left unconnected:
``sendto`` the address QUIC gave, ``recvfrom`` hands QUIC the address each datagram came from
(aioquic drops what comes from an address that is none of its paths, RFC 9000 §9).

What a connected socket gave and an unconnected one loses: the kernel reports an ICMP error
(port unreachable: nothing listens on the server's UDP port) only to a connected UDP socket,
and that error is how a closed port fails the handshake at once, instead of after the
handshake limit. Linux reports them to an unconnected socket that asks (``IP_RECVERR``,
``IPV6_RECVERR``), in its error queue, each with the destination of the datagram that
bounced: :meth:`UdpPaths.refused` reads them, so an error on the connection's path still ends
the handshake at once, and one on a path QUIC was only probing is left to QUIC (it gives the
validation up by its own timer and stays where it was). Where the system cannot say which path
an error concerns (not Linux), the socket stays connected to the handshake's address and
migration is declined: a datagram for another address is not sent, so QUIC's validation of
that path fails and the connection stays on the address it began on (RFC 9000 §9.6.1: the
client MAY decline to use a preferred address).
"""

from __future__ import annotations

import socket
import sys
from typing import Any, TypeAlias

__all__ = ["Address", "UdpPaths"]

#: A socket address as Python gives it: ``(host, port)``, or for IPv6
#: ``(host, port, flowinfo, scope_id)`` (aioquic's ``NetworkAddress``).
Address: TypeAlias = "tuple[Any, ...]"

#: ``<linux/in.h>`` and ``<linux/in6.h>``: Python's socket module names neither.
_IP_RECVERR = 11
_IPV6_RECVERR = 25
#: The largest datagram read (QUIC's are at most 1500 bytes on an Ethernet path; 64 KiB covers
#: loopback and GSO-coalesced ones).
_DATAGRAM = 65536
#: Errors read from the error queue per call, at most (each is one datagram that bounced).
_ERRORS = 64


class UdpPaths:
    """One QUIC connection's UDP socket; see the module docstring. Non-blocking: each method
    raises ``BlockingIOError`` where the socket would block, and ``OSError`` for an error the
    kernel reports (an ICMP error, typically): then call :meth:`refused`."""

    __slots__ = ("_connected", "peer", "sock")

    def __init__(self, family: int, peer: Address) -> None:
        """A socket for the connection to ``peer`` (the handshake's address). Raises
        ``OSError`` if it cannot be made (or, connected, if ``peer`` is unreachable)."""
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            sock.setblocking(False)
            self._connected = not _report_errors(sock, family)
            if self._connected:
                sock.connect(peer)  # (UDP: sets the peer, sends nothing, never blocks)
        except OSError:
            sock.close()
            raise
        #: The socket (only the connection's task reads or writes it; trio waits on it).
        self.sock = sock
        self.peer = peer

    @property
    def migrates(self) -> bool:
        """Whether datagrams go wherever QUIC says (else only to :attr:`peer`)."""
        return not self._connected

    def send(self, data: bytes, address: Address) -> None:
        """Send ``data`` to ``address`` (on a connected socket, only to :attr:`peer`: a
        datagram for another path is dropped here, which declines that path)."""
        if not self._connected:
            self.sock.sendto(data, address)
        elif address == self.peer:
            self.sock.send(data)

    def receive(self) -> tuple[bytes, Address]:
        """The next datagram and the address it came from."""
        if self._connected:
            return self.sock.recv(_DATAGRAM), self.peer
        data, address = self.sock.recvfrom(_DATAGRAM)
        return data, address

    def refused(self) -> list[Address] | None:
        """The destinations of the datagrams that bounced since the last call (the error
        queue, read empty), or ``None`` where the system does not say (a connected socket:
        then it was :attr:`peer`). Reading the queue also ends its readiness: a socket with
        errors queued is always "readable"."""
        if self._connected:
            return None
        bounced: list[Address] = []
        for _ in range(_ERRORS):
            try:
                _, _, _, address = self.sock.recvmsg(1, 512, socket.MSG_ERRQUEUE)
            except OSError:  # (BlockingIOError: the queue is empty)
                break
            if address:
                bounced.append(address)
        return bounced

    def close(self) -> None:
        self.sock.close()


def _report_errors(sock: socket.socket, family: int) -> bool:
    """Ask the kernel to report ICMP errors to this unconnected socket, with the destination
    each concerns (Linux); false where it cannot."""
    if not sys.platform.startswith("linux") or not hasattr(socket, "MSG_ERRQUEUE"):
        return False
    try:
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, _IPV6_RECVERR, 1)
        else:
            sock.setsockopt(socket.IPPROTO_IP, _IP_RECVERR, 1)
    except OSError:
        return False
    return True
