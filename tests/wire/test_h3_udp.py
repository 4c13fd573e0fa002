"""The QUIC connection's UDP socket (``_wire/http3/udp.py``) on real loopback sockets: datagrams
go to the address given and come back with the address they came from; an ICMP error names
the destination that bounced, and reading it leaves the socket quiet (a queued error keeps a
socket "readable": unread, the connection's task would spin)."""

from __future__ import annotations

import errno
import select
import socket
import sys

import pytest
import trio

from trio_retry._wire.http3.udp import RECEIVE_BUFFER, UdpPaths

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
            assert paths.receive_many() == ([b"from two"], two.getsockname())
        finally:
            paths.close()


@pytest.mark.parametrize("library", ["qh3", "aioquic"], ids=["recvmmsg", "plain"])
async def test_an_icmp_error_names_the_path_it_concerns_and_is_read_once(library: str) -> None:
    """Read through qh3's ``recvmmsg`` (``udp_batch.py``, where it is installed) or plainly."""
    listening = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listening.bind(("127.0.0.1", 0))
    closed = _closed_port()
    paths = UdpPaths(socket.AF_INET, listening.getsockname(), quic_library=library)
    try:
        paths.send(b"probe", closed)  # nothing listens there: ICMP port unreachable
        with trio.fail_after(5):
            await trio.lowlevel.wait_readable(paths.sock)
        with pytest.raises(ConnectionRefusedError):
            paths.receive_many()
        assert paths.refused() == [closed]
        # Read, the error no longer makes the socket look readable (no spinning task).
        assert select.select([paths.sock], [], [], 0.05)[0] == []
        with pytest.raises(BlockingIOError):
            paths.receive_many()
        assert paths.refused() == []
    finally:
        paths.close()
        listening.close()


async def test_an_icmp_error_ends_the_handshake_only_on_the_connections_path() -> None:
    """The pump's judgement (``DatagramPump.bounced``): port unreachable from an address QUIC
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
        timekeeper=None,
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
                paths.receive_many()
            driver.pump.bounced(refused.value)
            assert (driver.state is H3State.CLOSED) is fails
            assert bool(failed) is fails
        assert driver.handshake_failure is not None
        assert driver.handshake_failure[0] is FailureCategory.CONNECT
    finally:
        paths.close()


# --- batches: GSO on send, GRO on receive, and the plain fallback (``batching=False``) -------


def _batch() -> list[bytes]:
    """Three full datagrams and a short last one (one GSO run), then one larger (a run of its
    own), each marked with its index."""
    sizes = [1200, 1200, 1200, 500, 1300]
    return [bytes([index]) * size for index, size in enumerate(sizes)]


def _drain_plain(sock: socket.socket, count: int) -> list[bytes]:
    """``count`` datagrams read one by one from a plain socket (each arrives as sent)."""
    received = []
    for _ in range(count):
        readable, _, _ = select.select([sock], [], [], 5)
        assert readable, f"only {len(received)} of {count} datagrams arrived"
        received.append(sock.recv(65536))
    return received


@pytest.mark.parametrize("batching", [True, False], ids=["gso", "plain"])
async def test_a_batch_goes_as_separate_datagrams_in_order(batching: bool) -> None:
    """With GSO the first four datagrams go in one call (the kernel cuts them up: a plain
    receiver sees four datagrams, not one of 4,100 bytes) and the fifth in another; without it,
    one call each. Either way the receiver sees the same datagrams in the same order."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as receiver:
        receiver.bind(("127.0.0.1", 0))
        peer = receiver.getsockname()
        paths = UdpPaths(socket.AF_INET, peer, batching=batching)
        try:
            assert paths.gso is batching  # (this kernel has GSO: the test runs on Linux)
            datagrams = [(data, peer) for data in _batch()]
            calls = []
            index = 0
            while index < len(datagrams):
                carried = paths.send_many(datagrams, index)
                calls.append(carried)
                index += carried
            assert calls == ([4, 1] if batching else [1, 1, 1, 1, 1])
            assert _drain_plain(receiver, 5) == _batch()
        finally:
            paths.close()


async def test_a_gso_run_stops_at_another_address_and_at_a_larger_datagram() -> None:
    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as one,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as two,
    ):
        one.bind(("127.0.0.1", 0))
        two.bind(("127.0.0.1", 0))
        paths = UdpPaths(socket.AF_INET, one.getsockname())
        try:
            a, b = one.getsockname(), two.getsockname()
            datagrams = [(b"1" * 100, a), (b"2" * 100, a), (b"3" * 100, b), (b"4" * 200, b)]
            datagrams += [(b"5" * 300, b), (b"6" * 50, b), (b"7" * 50, b)]
            assert paths.send_many(datagrams, 0) == 2
            assert paths.send_many(datagrams, 2) == 1  # (the next is larger: a run of its own)
            assert paths.send_many(datagrams, 3) == 1
            assert paths.send_many(datagrams, 4) == 2  # (a shorter one ends a run)
            assert paths.send_many(datagrams, 6) == 1
            assert _drain_plain(one, 2) == [b"1" * 100, b"2" * 100]
            assert _drain_plain(two, 5) == [
                b"3" * 100,
                b"4" * 200,
                b"5" * 300,
                b"6" * 50,
                b"7" * 50,
            ]
        finally:
            paths.close()


@pytest.mark.parametrize("batching", [True, False], ids=["gro", "plain"])
async def test_coalesced_datagrams_are_read_in_one_call_and_cut_apart(batching: bool) -> None:
    """A sender's GSO batch reaches a GRO socket coalesced: one read returns all five
    datagrams, cut at the segment size the kernel reports (a short last one included); without
    GRO, each read returns one. Either way: the same datagrams, in order, from the sender."""
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        sender.bind(("127.0.0.1", 0))
        paths = UdpPaths(socket.AF_INET, sender.getsockname(), batching=batching)
        try:
            assert paths.gro is batching
            sent = [bytes([index]) * (1200 if index < 4 else 700) for index in range(5)]
            paths.send(b"hello", sender.getsockname())  # (binds it: its address, to answer)
            _, back = sender.recvfrom(100)
            segment = [(socket.SOL_UDP, 103, struct.pack("=H", 1200))]  # UDP_SEGMENT
            sender.sendmsg(sent, segment, 0, back)
            received: list[bytes] = []
            reads = 0
            while len(received) < len(sent) and reads < 10:
                with trio.fail_after(5):
                    await trio.lowlevel.wait_readable(paths.sock)
                datagrams, address = paths.receive_many()
                assert address == sender.getsockname()
                received += datagrams
                reads += 1
            assert received == sent
            assert reads == (1 if batching else 5)
            with pytest.raises(BlockingIOError):
                paths.receive_many()
        finally:
            paths.close()


class _NoSegmentation(socket.socket):
    """A real UDP socket on a path that cannot segment: a GSO send fails with EIO (as on a
    device without checksum offload), a plain one goes through."""

    def sendmsg(self, buffers, ancdata=(), flags=0, address=None):  # type: ignore[no-untyped-def]
        if ancdata:
            raise OSError(errno.EIO, "Input/output error")
        return super().sendmsg(buffers, ancdata, flags, address)


async def test_a_path_that_cannot_segment_turns_gso_off_and_loses_nothing() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as receiver:
        receiver.bind(("127.0.0.1", 0))
        peer = receiver.getsockname()
        paths = UdpPaths(socket.AF_INET, peer)
        paths.sock.close()
        paths.sock = _NoSegmentation(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            assert paths.gso
            datagrams = [(data, peer) for data in _batch()]
            carried = [paths.send_many(datagrams, 0)]
            assert not paths.gso  # (one refusal: one by one from now on)
            while sum(carried) < len(datagrams):
                carried.append(paths.send_many(datagrams, sum(carried)))
            assert carried == [1, 1, 1, 1, 1]
            assert _drain_plain(receiver, 5) == _batch()
        finally:
            paths.close()


def _rmem_max() -> int:
    try:
        with open("/proc/sys/net/core/rmem_max") as f:
            return int(f.read())
    except OSError:
        return 0


@pytest.mark.skipif(_rmem_max() < RECEIVE_BUFFER, reason="net.core.rmem_max caps the buffer")
async def test_the_socket_holds_a_burst_of_a_download_unread() -> None:
    """A server's burst while the connection's task reads nothing (``acks.py`` leaves the socket
    unread for a moment during a download): 500 datagrams of 1,350 bytes wait, none dropped
    (Linux's default buffer, 208 KiB, held about 150 of them on loopback)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as server:
        server.bind(("127.0.0.1", 0))
        paths = UdpPaths(socket.AF_INET, server.getsockname(), quic_library="qh3")
        try:
            assert paths.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) >= RECEIVE_BUFFER
            paths.send(b"hello", server.getsockname())
            _, client = server.recvfrom(100)
            for index in range(500):
                server.sendto(index.to_bytes(2, "big") * 675, client)
            received = []
            for _ in range(600):  # (bounded: what is queued, then one empty read)
                try:
                    received += paths.receive_many()[0]
                except BlockingIOError:
                    break
            assert [int.from_bytes(data[:2], "big") for data in received] == list(range(500))
        finally:
            paths.close()


def test_over_aioquic_the_socket_keeps_the_kernels_buffer() -> None:
    """aioquic drains a socket slower than a server fills it: a deep buffer would hold tens of
    milliseconds of datagrams, which the server's loss timers take for losses (``udp.py``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as plain:
        default = plain.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
    paths = UdpPaths(socket.AF_INET, ("127.0.0.1", 9), quic_library="aioquic")
    try:
        assert paths.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) == default
    finally:
        paths.close()
