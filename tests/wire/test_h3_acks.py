"""``_wire/http3/acks.py``: when the connection's task holds QUIC's acknowledgement back for a
caller's next request to carry, and what the QUIC library tells it
(``CheckedQuicConnection.owes_only_an_ack``). The client-level behaviour (one datagram per
sequential request, a lone acknowledgement still sent) is ``tests/client/test_h3_acks.py``."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("aioquic")

from tests.wire.test_h3_zero_rtt import Endpoints, _settle
from tests.wire.test_h3_zero_rtt import endpoints as endpoints
from tests.wire.test_h3_zero_rtt import pki as pki
from trio_retry._wire.clock import FIXED
from trio_retry._wire.http3 import acks, backend


class _Quic:
    """QUIC that owes only an acknowledgement (``owes``), or cannot say (``fails``)."""

    def __init__(self, owes: bool = True, fails: bool = False) -> None:
        self.owes = owes
        self.fails = fails
        self.asked: list[float] = []

    def owes_only_an_ack(self, now: float) -> bool:
        self.asked.append(now)
        if self.fails:
            raise RuntimeError("a QUIC library that changed its shape")
        return self.owes


@pytest.mark.parametrize(
    ("answered", "kicked", "leftovers", "owes", "held"),
    [
        (True, False, False, True, True),
        (False, False, False, True, False),  # part of a response: its sender waits on the ACK
        (True, True, False, True, False),  # a caller's bytes go at once
        (True, False, True, True, False),  # what a flush left goes at once
        (True, False, False, False, False),  # QUIC owes more than the acknowledgement
    ],
)
def test_held_only_after_a_response_with_nothing_else_to_send(
    answered: bool, kicked: bool, leftovers: bool, owes: bool, held: bool
) -> None:
    quic = _Quic(owes=owes)
    until = acks.hold_until(quic, 10.0, answered=answered, kicked=kicked, leftovers=leftovers)
    assert until == (10.0 + FIXED.ack_hold if held else None)


def test_a_quic_that_cannot_say_holds_nothing() -> None:
    quic = _Quic(fails=True)
    assert acks.hold_until(quic, 1.0, answered=True, kicked=False, leftovers=False) is None
    assert quic.asked == [1.0]


def test_no_hold_when_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(acks, "FIXED", dataclasses.replace(FIXED, ack_hold=0.0))
    quic = _Quic()
    assert acks.hold_until(quic, 1.0, answered=True, kicked=False, leftovers=False) is None


def test_the_hold_is_far_inside_the_announced_max_ack_delay() -> None:
    """RFC 9000 §13.2.1: within ``max_ack_delay`` (25 ms, both libraries' default)."""
    assert 0 < FIXED.ack_hold <= 0.005


def test_what_quic_owes_after_a_response_ends(endpoints: Endpoints) -> None:
    """Sans-IO, over the library in use: a response's last packet (its FIN) arrives. Over qh3
    the acknowledgement is due at once and is all QUIC owes; once a request is handed, QUIC
    owes that too (and the acknowledgement goes in the request's packet: nothing is left to
    send). Over aioquic, never: it delays its acknowledgement itself."""
    pair = endpoints.pair()
    pair.handshake()
    _settle(pair)
    client = pair.client
    assert not client.owes_only_an_ack(pair.now)  # (owes nothing at all)
    client.send_stream_data(0, b"GET /first", end_stream=True)
    assert not client.owes_only_an_ack(pair.now)  # a request's bytes are queued
    assert pair.to_server() == 1
    pair.server.send_stream_data(0, b"the response", end_stream=True)
    assert pair.to_client() == 1
    assert client.owes_only_an_ack(pair.now) is (backend.NAME == "qh3")
    client.send_stream_data(4, b"GET /next", end_stream=True)
    assert not client.owes_only_an_ack(pair.now)
    client.acknowledge_with_next(pair.now)  # (as a caller's flush does)
    assert pair.to_server() == 1  # the request, with the acknowledgement
    assert client.datagrams_to_send(now=pair.now + 0.01) == []


# --- during a download (``acks.BulkReads``) ---------------------------------------------------

_FULL = 1350  # (a datagram of a download, about)


def _round(
    reads: acks.BulkReads,
    *,
    datagrams: int = 4,
    delivered: int | None = None,
    answered: bool = False,
    kicked: bool = False,
) -> float | None:
    size = datagrams * _FULL
    body = size - 40 * datagrams if delivered is None else delivered
    return reads.next_read(
        5.0, datagrams=datagrams, size=size, delivered=body, answered=answered, kicked=kicked
    )


def _under_way() -> acks.BulkReads:
    """A download past its first :data:`acks.BULK_AFTER` bytes (each of those rounds read at
    once)."""
    reads = acks.BulkReads()
    for _ in range(acks.BULK_AFTER // (4 * (_FULL - 40))):
        assert _round(reads) is None
    assert _round(reads) == 5.0 + FIXED.ack_coalesce
    return reads


def test_a_download_under_way_waits_after_a_round_of_few_datagrams() -> None:
    reads = _under_way()
    assert _round(reads, datagrams=1) == 5.0 + FIXED.ack_coalesce
    assert _round(reads, datagrams=acks.FEW - 1) == 5.0 + FIXED.ack_coalesce


@pytest.mark.parametrize(
    "case",
    [
        {"datagrams": acks.FEW},  # the client is behind: it reads again at once
        {"datagrams": 0},  # a timer's round, or a kick's
        {"kicked": True},  # a caller has something to send
    ],
    ids=["many", "none", "kicked"],
)
def test_these_rounds_read_again_at_once_and_the_download_stays_under_way(
    case: dict[str, int | bool],
) -> None:
    reads = _under_way()
    assert _round(reads, **case) is None  # type: ignore[arg-type]
    assert _round(reads) == 5.0 + FIXED.ack_coalesce


@pytest.mark.parametrize(
    "case",
    [
        {"answered": True},  # a response ended: the next request's round trip must not wait
        {"delivered": 0},  # bytes behind a hole (a loss, reordering): the ACK goes at once
        {"delivered": 2 * _FULL - 1},  # less than half of 4 datagrams delivered in order
    ],
    ids=["answered", "hole", "mostly-not-body"],
)
def test_these_rounds_read_at_once_and_the_count_starts_again(case: dict[str, int | bool]) -> None:
    reads = _under_way()
    assert _round(reads, **case) is None  # type: ignore[arg-type]
    assert _round(reads) is None  # (the first BULK_AFTER bytes again)
    for _ in range(acks.BULK_AFTER // (4 * (_FULL - 40))):
        _round(reads)
    assert _round(reads) == 5.0 + FIXED.ack_coalesce


def test_small_responses_never_wait() -> None:
    """Sequential small requests: each round ends a response."""
    reads = acks.BulkReads()
    for _ in range(1000):
        assert _round(reads, datagrams=1, answered=True) is None


def test_no_wait_when_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    reads = _under_way()
    monkeypatch.setattr(acks, "FIXED", dataclasses.replace(FIXED, ack_coalesce=0.0))
    assert _round(reads) is None


def test_the_wait_is_far_inside_the_announced_max_ack_delay() -> None:
    """RFC 9000 §13.2.1: within ``max_ack_delay`` (25 ms, both libraries' default), with room
    for the round itself."""
    assert 0 < FIXED.ack_coalesce <= 0.002
