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


async def test_an_icmp_error_ends_the_handshake_only_on_the_connections_path() -> None:
    """The driver's judgement (``QuicDriver._bounced``): port unreachable from an address QUIC
    was only probing (a server's preferred address) leaves the connection to QUIC; from the
    address it is on, it fails the handshake at once (the origin then goes over TCP)."""
    from aioquic.h3.connection import H3_ALPN, H3Connection
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.connection import QuicConnection

    from trio_retry._core.evidence import FailureCategory
    from trio_retry._wire.http3.driver import H3State, QuicDriver

    server, probe = _closed_port(), _closed_port()
    quic = QuicConnection(configuration=QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN))
    quic.connect(server, now=trio.current_time())
    failed: list[str] = []
    driver = QuicDriver(
        UdpPaths(socket.AF_INET, server),
        quic,
        H3Connection(quic),
        clock=None,
        max_header_bytes=65536,
        on_dead=lambda: None,
        on_handshake_failed=failed.append,
    )
    paths = driver.paths
    try:
        for target, fails in ((probe, False), (server, True)):
            paths.send(b"x" * 1200, target)
            with trio.fail_after(5):
                await trio.lowlevel.wait_readable(paths.sock)
            with pytest.raises(ConnectionRefusedError) as refused:
                paths.receive()
            driver._bounced(refused.value)
            assert (driver.state is H3State.CLOSED) is fails
            assert bool(failed) is fails
        assert driver.handshake_failure is not None
        assert driver.handshake_failure[0] is FailureCategory.CONNECT
    finally:
        paths.close()
