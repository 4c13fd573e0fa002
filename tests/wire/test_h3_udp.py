"""The QUIC connection's UDP socket (``_wire/http3/udp.py``) on real loopback sockets: datagrams
go to the address given and come back with the address they came from; an ICMP error names
the destination that bounced, and reading it leaves the socket quiet (a queued error keeps a
socket "readable": unread, the connection's task would spin)."""

from __future__ import annotations

import select
import socket
import sys

import pytest
import trio

from trio_retry._wire.http3.udp import UdpPaths

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="ICMP errors on unconnected sockets: Linux"
)


def _closed_port() -> tuple[str, int]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()  # type: ignore[no-any-return]


async def test_datagrams_go_where_they_are_sent_and_say_where_they_came_from() -> None:
    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as one,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as two,
    ):
        one.bind(("127.0.0.1", 0))
        two.bind(("127.0.0.1", 0))
        paths = UdpPaths(socket.AF_INET, one.getsockname())
        try:
            assert paths.migrates
            paths.send(b"to one", one.getsockname())
            paths.send(b"to two", two.getsockname())  # (another path: not the first peer)
            data, back = one.recvfrom(100)
            assert data == b"to one"
            assert two.recvfrom(100)[0] == b"to two"
            two.sendto(b"from two", back)
            with trio.fail_after(5):
                await trio.lowlevel.wait_readable(paths.sock)
            assert paths.receive() == (b"from two", two.getsockname())
        finally:
            paths.close()


async def test_an_icmp_error_names_the_path_it_concerns_and_is_read_once() -> None:
    listening = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listening.bind(("127.0.0.1", 0))
    closed = _closed_port()
    paths = UdpPaths(socket.AF_INET, listening.getsockname())
    try:
        paths.send(b"probe", closed)  # nothing listens there: ICMP port unreachable
        with trio.fail_after(5):
            await trio.lowlevel.wait_readable(paths.sock)
        with pytest.raises(ConnectionRefusedError):
            paths.receive()
        assert paths.refused() == [closed]
        # Read, the error no longer makes the socket look readable (no spinning task).
        assert select.select([paths.sock], [], [], 0.05)[0] == []
        with pytest.raises(BlockingIOError):
            paths.receive()
        assert paths.refused() == []
    finally:
        paths.close()
        listening.close()
