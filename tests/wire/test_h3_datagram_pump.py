"""``_wire/http3/datagrams.py``: what a caller's flush (``DatagramPump.send_now``) could not send
leaves before anything newer, and is never overwritten by a second flush in the same turn of the
scheduler (before the connection's task has sent it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import pytest

pytest.importorskip("aioquic")

from trio_retry._wire.http3.datagrams import DatagramPump

Address = tuple[str, int]
PEER: Address = ("127.0.0.1", 4433)


class _Quic:
    """QUIC with one batch of datagrams ready per flush."""

    def __init__(self, *batches: list[bytes]) -> None:
        self._batches = list(batches)

    def acknowledge_with_next(self, now: float) -> None:
        pass

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, Address]]:
        batch = self._batches.pop(0) if self._batches else []
        return [(data, PEER) for data in batch]


class _Paths:
    """A socket that is full (``BlockingIOError``) for its first ``full`` sends."""

    def __init__(self, full: int) -> None:
        self.full = full
        self.wire: list[bytes] = []

    def send_many(self, datagrams: Sequence[tuple[bytes, Address]], start: int) -> int:
        if self.full:
            self.full -= 1
            raise BlockingIOError
        self.wire.append(datagrams[start][0])
        return 1


def _pump(paths: _Paths, quic: _Quic) -> DatagramPump:
    return DatagramPump(cast(Any, paths), cast(Any, quic), cast(Any, None))


@pytest.mark.parametrize("full", [1, 2], ids=["socket-free-again", "socket-still-full"])
async def test_a_second_flush_leaves_the_first_ones_leftovers_to_the_task_in_order(
    full: int,
) -> None:
    paths = _Paths(full)
    pump = _pump(paths, _Quic([b"a", b"b"], [b"c"]))
    assert pump.send_now() is False  # the socket was full: a and b kept for the task
    assert pump.send_now() is False  # the task has not sent them yet: nothing overtakes them
    assert paths.wire == []
    assert [data for data, _ in pump.take(0.0)] == [b"a", b"b", b"c"]


async def test_a_flush_with_nothing_left_over_sends_at_once() -> None:
    paths = _Paths(0)
    pump = _pump(paths, _Quic([b"a", b"b"]))
    assert pump.send_now() is True
    assert paths.wire == [b"a", b"b"]
    assert pump.take(0.0) == []


class _AckingQuic(_Quic):
    """QUIC that owes no acknowledgement alone, and spaces its ACKs itself or not."""

    def __init__(self, delays_acks: bool) -> None:
        super().__init__()
        self.delays_acks = delays_acks

    def owes_only_an_ack(self, now: float) -> bool:
        return False


@pytest.mark.parametrize("delays_acks", [False, True], ids=["qh3", "aioquic"])
def test_a_downloads_reads_are_spaced_only_over_a_quic_that_acks_at_once(
    delays_acks: bool,
) -> None:
    """``DatagramPump.pace`` (``acks.py``, "During a download"): rounds of 4 datagrams of body
    past the first 128 KiB wait ``FIXED.ack_coalesce`` before the next read over qh3; never over
    aioquic, which delays each ACK by itself."""
    from trio_retry._wire.clock import FIXED

    pump = _pump(_Paths(0), _AckingQuic(delays_acks))
    waits = []
    for _ in range(40):  # (40 rounds of 5,200 bytes: past 128 KiB)
        pump.taken, pump.taken_bytes, pump.delivered = 4, 5400, 5200
        pump.pace(7.0, answered=False, kicked=False, full=False)
        waits.append(pump.read_at)
    if delays_acks:
        assert set(waits) == {float("inf")}
    else:
        assert waits[0] == float("inf")  # (the first 128 KiB: read at once)
        assert waits[-1] == 7.0 + FIXED.ack_coalesce
        pump.taken, pump.taken_bytes, pump.delivered = 4, 5400, 5200
        pump.pace(7.0, answered=False, kicked=False, full=True)  # the callers' buffers full
        assert pump.read_at == float("inf")


class _Queued:
    """A socket with ``datagrams`` queued, read two at a time (as ``recvmmsg`` reads several)."""

    def __init__(self, datagrams: list[bytes]) -> None:
        self.queued = datagrams
        self.reads = 0

    def receive_many(self) -> tuple[list[bytes], Address]:
        if not self.queued:
            raise BlockingIOError
        self.reads += 1
        read, self.queued = self.queued[:2], self.queued[2:]
        return read, PEER


class _Receiving:
    """QUIC that takes datagrams, and the owner told of them."""

    def __init__(self) -> None:
        self.handed: list[bytes] = []

    def receive_datagrams(self, datagrams: list[bytes], address: Address, now: float) -> None:
        self.handed += datagrams

    def arrived(self, now: float) -> None:
        pass


@pytest.mark.parametrize(
    ("room", "handed"), [(0, 0), (-5000, 0), (1, 2), (2400, 2), (2401, 4), (10**9, 10)]
)
def test_a_round_reads_no_more_than_the_callers_buffers_have_room_for(
    room: int, handed: int
) -> None:
    """``DatagramPump.receive(room=...)``: reads stop once what was read reaches the room the
    callers' buffers have left (``driver.BUFFER_LIMIT``), past it by one read at most; with no
    room, nothing is read (a round the timer woke while the buffers were full). Without the
    room, each round read every datagram queued (up to ``BATCH``)."""
    socket = _Queued([bytes(1200)] * 10)
    quic = _Receiving()
    pump = DatagramPump(cast(Any, socket), cast(Any, quic), cast(Any, quic))
    pump.receive(0.0, True, room)
    assert len(quic.handed) == handed
    assert (pump.taken, pump.taken_bytes) == (handed, handed * 1200)
    assert len(socket.queued) == 10 - handed
