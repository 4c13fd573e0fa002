"""Reading many datagrams per system call: qh3's binding of quinn-udp (the boundary).

One job: :func:`batch_reader` gives :class:`~.udp.UdpPaths` a :class:`BatchReader` where it
can, and ``None`` where it cannot (the plain path in ``udp.py`` then reads, one datagram or one
GRO buffer per call). Python has no ``recvmmsg``; qh3 (the QUIC library the client runs on
where it is installed, ``backend.py``) ships one, ``qh3._hazmat.UdpSocketState``: on Linux it
reads up to a few dozen datagrams per ``recvmmsg`` call, with GRO, in native code, and returns
each datagram with the address it came from (GRO buffers cut apart; IPv6 addresses in the
shape ``recvfrom`` gives, so QUIC matches them to its paths as before). A download from a
server that sends datagram by datagram (caddy 2.6's quic-go has no GSO, so GRO never
coalesces) cost a ``recvmsg`` call per datagram; one read per round of a sequential request
cost about as much alone.

What it guarantees (``tests/wire/test_h3_udp_batch.py``, against the plain path on the same
datagrams): the same datagrams, in the same order, from the same addresses; a read with
nothing queued raises ``BlockingIOError``; an error the kernel reports (an ICMP error, read
with ``IP_RECVERR``) raises ``OSError`` as ``recvmsg`` does, after what was read before it has
been returned, and the error queue is left for ``UdpPaths.refused`` to read.

Used only where qh3 is the QUIC library (``TRIO_RETRY_QUIC=aioquic`` opts out of qh3 whole),
on Linux, and for an unconnected socket (the socket is connected only where the system cannot
say which path an ICMP error concerns: not Linux). quinn-udp sets socket options as it starts
(ECN and destination-address reports, which only add control messages to what it reads, and
the Don't Fragment discipline for what the socket sends): the latter is set back to what it
was, so that what is sent, and how a datagram larger than the path allows fails, stays as it
was without this reader. A qh3 without the binding, or one that refuses the socket: ``None``.

Rejected: ``socket.recvmsg_into`` in a loop (one call per datagram still); a ``ctypes`` call
of ``recvmmsg`` (buffers and control messages laid out by hand, per platform, for less than
the binding gives).
"""

from __future__ import annotations

import socket
import sys
from typing import Any

__all__ = ["BatchReader", "batch_reader"]

#: ``<linux/in.h>`` and ``<linux/in6.h>``: the Don't Fragment discipline, per family.
_MTU_DISCOVER = {
    socket.AF_INET: (socket.IPPROTO_IP, 10),
    socket.AF_INET6: (socket.IPPROTO_IPV6, 23),
}


class BatchReader:
    """Datagrams read many per system call, handed on a run from one address at a time
    (:meth:`read`); see the module docstring."""

    __slots__ = ("_at", "_read", "_waiting")

    def __init__(self, read: Any) -> None:
        #: One ``recvmmsg``: a list of ``(datagram, address)``, empty when none is queued.
        self._read = read
        #: What the last call read and :meth:`read` has not handed on yet, from ``_at``.
        self._waiting: list[tuple[bytes, tuple[Any, ...]]] = []
        self._at = 0

    def read(self) -> tuple[list[bytes], tuple[Any, ...]]:
        """The next datagrams, all from one address, in the order they arrived, and that
        address (as ``recvfrom`` gives it: ``udp.Address``). Raises ``BlockingIOError`` when
        none is queued, ``OSError`` for an error the kernel reports."""
        waiting, at = self._waiting, self._at
        if at >= len(waiting):
            waiting = self._read()
            if not waiting:
                raise BlockingIOError
            self._waiting, at = waiting, 0
        address = waiting[at][1]
        end = at + 1
        total = len(waiting)
        while end < total and waiting[end][1] == address:
            end += 1
        self._at = end
        if at == 0 and end == total:
            return [data for data, _ in waiting], address
        return [data for data, _ in waiting[at:end]], address


def batch_reader(sock: socket.socket, *, quic_library: str) -> BatchReader | None:
    """A reader of ``sock`` (unconnected, non-blocking UDP) through qh3's binding, or
    ``None`` where it cannot be had (the module docstring). Never raises."""
    if quic_library != "qh3" or not sys.platform.startswith("linux"):
        return None
    try:
        from qh3._hazmat import UdpSocketState
    except ImportError:
        return None
    option = _MTU_DISCOVER.get(sock.family)
    try:
        before = sock.getsockopt(*option) if option is not None else None
        state = UdpSocketState(sock.fileno())
        if option is not None and before is not None:
            sock.setsockopt(*option, before)
        read = state.recv
    except Exception:
        return None
    return BatchReader(read)
