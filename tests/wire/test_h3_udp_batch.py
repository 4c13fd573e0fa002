"""``_wire/http3/udp_batch.py`` against the plain path (``udp.py``), on real loopback sockets:
the same datagrams, in the same order, from the same addresses, however they were sent (one by
one, in a GSO burst, from two senders interleaved); nothing queued is ``BlockingIOError``
(an ICMP error, read both ways: ``test_h3_udp.py``); what the socket sends is unchanged (the
Don't Fragment discipline put back); where qh3's binding is not there, the plain path reads."""

from __future__ import annotations

import socket
import struct
import sys
import time

import pytest
import trio

from trio_retry._wire.http3 import udp_batch
from trio_retry._wire.http3.udp import UdpPaths


def _binding() -> bool:
    """Whether qh3's UDP binding is there to read through."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        return udp_batch.batch_reader(probe, quic_library="qh3") is not None


pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="recvmmsg: Linux"),
    pytest.mark.skipif(not _binding(), reason="needs qh3 with its UDP binding (the http3 extra)"),
]

UDP_SEGMENT = 103


def _paths(peer: tuple[str, int], *, batch: bool) -> UdpPaths:
    paths = UdpPaths(socket.AF_INET, peer, quic_library="qh3" if batch else "aioquic")
    assert (paths.batch is not None) is batch
    return paths


def _send_everything(
    one: socket.socket, two: socket.socket, to: tuple[str, int]
) -> list[tuple[bytes, tuple[str, int]]]:
    """What both senders send ``to``, in the order it is sent: single datagrams of every size,
    a GSO burst (four of 1,200 bytes and a short one), the two senders interleaved."""
    sent: list[tuple[bytes, tuple[str, int]]] = []
    for index in range(40):
        sender = one if index % 7 < 4 else two
        data = bytes([index]) * (1 + index * 37 % 1400)
        sender.sendto(data, to)
        sent.append((data, sender.getsockname()))
    burst = [bytes([200 + i]) * (1200 if i < 4 else 300) for i in range(5)]
    one.sendmsg(burst, [(socket.SOL_UDP, UDP_SEGMENT, struct.pack("=H", 1200))], 0, to)
    sent += [(data, one.getsockname()) for data in burst]
    for index in range(10):
        sender = two if index % 2 else one
        data = b"tail %d" % index
        sender.sendto(data, to)
        sent.append((data, sender.getsockname()))
    return sent


async def _read_all(paths: UdpPaths, count: int) -> tuple[list[tuple[bytes, tuple[str, int]]], int]:
    received: list[tuple[bytes, tuple[str, int]]] = []
    reads = 0
    for _ in range(200):  # (bounded)
        if len(received) >= count:
            break
        try:
            datagrams, address = paths.receive_many()
        except BlockingIOError:
            with trio.fail_after(5):
                await trio.lowlevel.wait_readable(paths.sock)
            continue
        reads += 1
        assert datagrams  # (never an empty run)
        received += [(data, address) for data in datagrams]
    return received, reads


@pytest.mark.parametrize("batch", [True, False], ids=["recvmmsg", "plain"])
async def test_the_same_datagrams_in_the_same_order_from_the_same_addresses(batch: bool) -> None:
    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as one,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as two,
    ):
        one.bind(("127.0.0.1", 0))
        two.bind(("127.0.0.1", 0))
        paths = _paths(one.getsockname(), batch=batch)
        try:
            paths.send(b"hello", one.getsockname())  # (binds it: its address, to send to)
            _, address = one.recvfrom(100)
            sent = _send_everything(one, two, address)
            time.sleep(0.05)  # (all of it queued: a batch sees runs from both senders)
            calls = []
            if paths.batch is not None:
                read = paths.batch._read
                paths.batch._read = lambda: calls.append(1) or read()
            received, reads = await _read_all(paths, len(sent))
            assert received == sent
            assert reads >= 20  # (a run from one sender at a time: the senders interleave)
            if batch:
                assert len(calls) <= 4  # many datagrams per system call
            with pytest.raises(BlockingIOError):
                paths.receive_many()
        finally:
            paths.close()


def test_what_the_socket_sends_is_unchanged() -> None:
    """quinn-udp sets the Don't Fragment discipline as it starts; the reader puts it back."""
    plain = _paths(("127.0.0.1", 9), batch=False)
    batch = _paths(("127.0.0.1", 9), batch=True)
    try:
        level, name = socket.IPPROTO_IP, 10  # IP_MTU_DISCOVER
        assert batch.sock.getsockopt(level, name) == plain.sock.getsockopt(level, name)
    finally:
        plain.close()
        batch.close()


def test_without_the_binding_the_plain_path_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    import qh3._hazmat

    monkeypatch.delattr(qh3._hazmat, "UdpSocketState")
    paths = UdpPaths(socket.AF_INET, ("127.0.0.1", 9), quic_library="qh3")
    try:
        assert paths.batch is None
    finally:
        paths.close()
