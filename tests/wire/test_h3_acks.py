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
