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

Batches, where the kernel has them (Linux): a run of datagrams to one address, each the size of
the first but the last, goes in one system call (GSO: ``UDP_SEGMENT``, the kernel cuts it up),
and the datagrams the kernel received coalesced (GRO: ``UDP_GRO``, one buffer and the size of
its segments in a control message) are read in one call and cut up here, so QUIC never sees
two datagrams as one. Where the socket refuses either option (another system, an old kernel),
or ``batching=False``, each datagram is one call: the same datagrams, in the same order
(``tests/wire/test_h3_udp.py`` runs both ways). A GSO send the path refuses (a device that
cannot segment: ``EIO``) turns GSO off for the socket and goes again one by one. Where qh3 is
the QUIC library, its binding of ``recvmmsg`` reads many datagrams per call (``udp_batch.py``,
behind its own boundary).
"""

from __future__ import annotations

import errno
import socket
import struct
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import trio

from .udp_batch import BatchReader, batch_reader

__all__ = ["RECEIVE_BUFFER", "Address", "UdpPaths", "send_datagrams"]

#: A socket address as Python gives it: ``(host, port)``, or for IPv6
#: ``(host, port, flowinfo, scope_id)`` (aioquic's ``NetworkAddress``).
Address: TypeAlias = "tuple[Any, ...]"

#: The receive buffer asked for (``SO_RCVBUF``; the kernel caps it at ``net.core.rmem_max`` and
#: Linux doubles it for its bookkeeping). Linux's default, 208 KiB, holds about 90 datagrams of
#: 1,350 bytes (each is counted with its kernel overhead): a server sending at loopback speed
#: filled it whenever the client's task spent a millisecond elsewhere, and every datagram
#: dropped there was a loss to QUIC (a retransmission, and the server's congestion window cut).
#: ``acks.py`` leaves the socket unread for a moment during a download, by design. 2 MiB: with
#: 1 MiB a client starved of CPU on a busy machine still lost 1-5 % of a 20 MB download from
#: caddy (its retransmissions counted on the wire), with 2 or 4 MiB none. Kernel memory,
#: capped by the kernel, held only while datagrams wait in it. Only over qh3, whose packets are
#: read in native code: aioquic's Python drains a socket several times slower than caddy fills
#: it, so a deep buffer held tens of milliseconds of datagrams, which caddy's loss timers took
#: for losses (15 % of a download sent twice); at the kernel's default it drops a few instead.
RECEIVE_BUFFER = 2 * 1024 * 1024
#: ``<linux/in.h>`` and ``<linux/in6.h>``: Python's socket module names neither.
_IP_RECVERR = 11
_IPV6_RECVERR = 25
#: The largest datagram read (QUIC's are at most 1500 bytes on an Ethernet path; 64 KiB covers
#: loopback and GSO-coalesced ones).
_DATAGRAM = 65536
#: Errors read from the error queue per call, at most (each is one datagram that bounced).
_ERRORS = 64
#: ``<linux/udp.h>`` (Python names ``UDP_SEGMENT`` from 3.12 on, ``UDP_GRO`` nowhere).
_SOL_UDP = 17
_UDP_SEGMENT = 103
_UDP_GRO = 104
#: Datagrams, and bytes, one GSO send carries at most (the kernel's ``UDP_MAX_SEGMENTS`` is 64
#: on older kernels; a UDP payload is at most 65,507 bytes).
_GSO_SEGMENTS = 64
_GSO_BYTES = 65000
#: Room for GRO's control message (the segment size, an int).
_GRO_SPACE = socket.CMSG_SPACE(4) if hasattr(socket, "CMSG_SPACE") else 0
#: What a GSO send the path cannot segment fails with: GSO is then turned off.
_NO_GSO = frozenset({errno.EIO, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOPROTOOPT})


class UdpPaths:
    """One QUIC connection's UDP socket; see the module docstring. Non-blocking: each method
    raises ``BlockingIOError`` where the socket would block, and ``OSError`` for an error the
    kernel reports (an ICMP error, typically): then call :meth:`refused`."""

    __slots__ = ("_connected", "batch", "gro", "gso", "peer", "sock")

    def __init__(
        self,
        family: int,
        peer: Address,
        *,
        batching: bool = True,
        quic_library: str | None = None,
    ) -> None:
        """A socket for the connection to ``peer`` (the handshake's address), sending and
        receiving in batches where the kernel can (``batching=False``: one datagram a call),
        reading through qh3's ``recvmmsg`` where ``quic_library`` (default: the one in use,
        ``backend.py``) is qh3 (``udp_batch.py``), with :data:`RECEIVE_BUFFER` there. Raises
        ``OSError`` if it cannot be made (or, connected, if ``peer`` is unreachable)."""
        if quic_library is None:
            from .backend import NAME

            quic_library = NAME
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            sock.setblocking(False)
            if quic_library == "qh3":
                _receive_buffer(sock)
            self._connected = not _report_errors(sock, family)
            if self._connected:
                sock.connect(peer)  # (UDP: sets the peer, sends nothing, never blocks)
        except OSError:
            sock.close()
            raise
        #: Whether a run of datagrams goes in one call (GSO), and coalesced ones are read in
        #: one (GRO).
        self.gso = batching and _option(sock, _UDP_SEGMENT, 0)
        self.gro = batching and _GRO_SPACE > 0 and _option(sock, _UDP_GRO, 1)
        #: Many datagrams per read where qh3's binding is there (``udp_batch.py``).
        self.batch: BatchReader | None = None
        if batching and not self._connected:
            self.batch = batch_reader(sock, quic_library=quic_library)
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

    def send_many(self, datagrams: Sequence[tuple[bytes, Address]], start: int) -> int:
        """Send what one system call carries of ``datagrams`` from ``start`` on: with GSO, the
        run of those to one address, each of the first's size but the last (which may be
        shorter), at most :data:`_GSO_SEGMENTS` of them; else the one at ``start``. Returns how
        many it carried (sent, or dropped as :meth:`send` drops another path's). Raises
        ``BlockingIOError`` (nothing sent: call again once writable) or ``OSError`` (these
        datagrams are lost: an ICMP error reported, typically)."""
        data, address = datagrams[start]
        count = self._run(datagrams, start) if self.gso else 1
        if count == 1:
            self.send(data, address)
            return 1
        if self._connected and address != self.peer:
            return count
        buffers = [datagram for datagram, _ in datagrams[start : start + count]]
        segment = [(_SOL_UDP, _UDP_SEGMENT, struct.pack("=H", len(data)))]
        try:
            if self._connected:
                self.sock.sendmsg(buffers, segment)
            else:
                self.sock.sendmsg(buffers, segment, 0, address)
        except BlockingIOError:
            raise
        except OSError as exc:
            if exc.errno not in _NO_GSO:
                raise
            self.gso = False  # (the path cannot segment: one by one from now on)
            self.send(data, address)
            return 1
        return count

    def _run(self, datagrams: Sequence[tuple[bytes, Address]], start: int) -> int:
        """How many datagrams from ``start`` one GSO send can carry."""
        data, address = datagrams[start]
        size = len(data)
        end = min(len(datagrams), start + _GSO_SEGMENTS, start + _GSO_BYTES // max(size, 1))
        count = 1
        for index in range(start + 1, end):
            following, to = datagrams[index]
            length = len(following)
            if to != address or length > size:
                break
            count += 1
            if length < size:
                break  # (a shorter one ends the run)
        return count

    def receive_many(self) -> tuple[list[bytes], Address]:
        """The datagrams one system call reads, and the address they came from: through
        :attr:`batch`, a run of those ``recvmmsg`` read from one address; with GRO, every
        datagram the kernel coalesced (one sender's, in order), cut apart; else one. Raises
        ``BlockingIOError`` when none is queued, ``OSError`` for an error the kernel
        reports."""
        batch = self.batch
        if batch is not None:
            return batch.read()
        if not self.gro:
            if self._connected:
                return [self.sock.recv(_DATAGRAM)], self.peer
            data, address = self.sock.recvfrom(_DATAGRAM)
            return [data], address
        data, ancillary, _, address = self.sock.recvmsg(_DATAGRAM, _GRO_SPACE)
        if self._connected:
            address = self.peer
        size = _segment_size(ancillary)
        if size <= 0 or size >= len(data):
            return [data], address
        return [data[offset : offset + size] for offset in range(0, len(data), size)], address

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


def _receive_buffer(sock: socket.socket) -> None:
    """Ask for :data:`RECEIVE_BUFFER` where the socket's own is smaller (a system that refuses
    keeps its own)."""
    try:
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) < RECEIVE_BUFFER:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
    except OSError:
        pass


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


async def send_datagrams(
    paths: UdpPaths,
    datagrams: Sequence[tuple[bytes, Address]],
    refused: Callable[[OSError], bool],
) -> None:
    """Send every datagram of ``datagrams`` in order (:meth:`UdpPaths.send_many`), waiting for
    the socket only when it is full. An ``OSError`` is handed to ``refused``: true stops here
    (the rest is not sent), false skips the datagram it failed at and goes on. Cancelled while
    waiting for the socket: what was not sent is not (QUIC sends it again if it must)."""
    index, total = 0, len(datagrams)
    while index < total:
        try:
            index += paths.send_many(datagrams, index)
        except BlockingIOError:
            await trio.lowlevel.wait_writable(paths.sock)
        except OSError as exc:
            if refused(exc):
                return
            index += 1


def _option(sock: socket.socket, name: int, value: int) -> bool:
    """Set UDP option ``name`` to ``value`` (Linux); false where the socket refuses it."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        sock.setsockopt(_SOL_UDP, name, value)
    except OSError:
        return False
    return True


def _segment_size(ancillary: list[tuple[int, int, bytes]]) -> int:
    """GRO's segment size, from ``recvmsg``'s control messages (0: not coalesced)."""
    for level, kind, value in ancillary:
        if level == _SOL_UDP and kind == _UDP_GRO and len(value) >= 4:
            size: int = struct.unpack("=i", value[:4])[0]
            return size
    return 0
