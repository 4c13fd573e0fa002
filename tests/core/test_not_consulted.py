"""The engine's "not consulted" decisions (``_core/engine.py``, ``BEFORE_RULES``): which
answer is given without a ``RetryContext``, in which order, pure."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_retry._core.engine import (
    BEFORE_RULES,
    MAX_RECONNECTS,
    AttemptFacts,
    NotConsulted,
    Then,
    final_response,
    not_consulted,
)


def facts(**overrides: Any) -> AttemptFacts:
    """A failed attempt about which nothing is decided before the engine; tests change one
    thing."""
    base: dict[str, Any] = {"status": None}
    base.update(overrides)
    return AttemptFacts(**base)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (facts(), None),  # a plain failure: the engine decides
        (facts(status=200), NotConsulted.FINAL_RESPONSE),
        (facts(status=399), NotConsulted.FINAL_RESPONSE),
        (facts(status=400), None),
        (facts(status=503), None),
        (facts(reconnect=True), NotConsulted.RECONNECT),
        # early data whose QUIC handshake never completed ("unconfirmed", SENT_NO_RESPONSE):
        # over TCP uncounted, as any request of a failed handshake (the essay says why)
        (facts(reconnect=True, early_data=True), NotConsulted.RECONNECT),
        (facts(reconnect=True, reconnects=MAX_RECONNECTS - 1), NotConsulted.RECONNECT),
        # past the allowance the refusal counts as an attempt like any other
        (facts(reconnect=True, reconnects=MAX_RECONNECTS), None),
        (facts(reconnect=True, replayable=False), None),  # a one-shot body cannot go again
        (facts(reconnect=True, draining=True), None),  # a draining client sends nothing new
        (facts(ends_call=True), NotConsulted.ENDS_CALL),
        (facts(status=401, challenge=True), NotConsulted.AUTH_CHALLENGE),
        (facts(status=401, challenge=True, replayable=False), None),
        (facts(status=401), None),  # no auth that answers challenges: the engine's 401 rule
        (facts(status=403, challenge=True), None),
        (facts(status=425, early_data=True), NotConsulted.TOO_EARLY),
        (facts(status=425), None),  # not sent early: the engine's, as any other status
        (facts(status=425, early_data=True, reconnects=MAX_RECONNECTS), None),
        (facts(status=425, early_data=True, replayable=False), None),
        (facts(status=425, early_data=True, draining=True), None),
        (facts(status=500, early_data=True), None),
    ],
)
def test_each_not_consulted_decision(given: AttemptFacts, expected: NotConsulted | None) -> None:
    assert not_consulted(given) is expected


def test_the_order_is_final_reconnect_ends_call_challenge_too_early() -> None:
    assert [decision for decision, _ in BEFORE_RULES] == [
        NotConsulted.FINAL_RESPONSE,
        NotConsulted.RECONNECT,
        NotConsulted.ENDS_CALL,
        NotConsulted.AUTH_CHALLENGE,
        NotConsulted.TOO_EARLY,
    ]
    # A reconnect that also ends the call is sent again (the connection refused it: the
    # request's own failure never happened).
    assert not_consulted(facts(reconnect=True, ends_call=True)) is NotConsulted.RECONNECT


@given(
    status=st.one_of(st.none(), st.integers(100, 599)),
    reconnect=st.booleans(),
    reconnects=st.integers(0, 5),
    ends_call=st.booleans(),
    replayable=st.booleans(),
    draining=st.booleans(),
    challenge=st.booleans(),
    early_data=st.booleans(),
)
def test_the_first_rule_that_applies_wins(**fields: Any) -> None:
    """Pure and ordered: the answer is the first rule of BEFORE_RULES whose test holds, the
    same every time; a response below 400 is always final."""
    given_facts = AttemptFacts(**fields)
    applying = [decision for decision, applies in BEFORE_RULES if applies(given_facts)]
    assert not_consulted(given_facts) is (applying[0] if applying else None)
    assert not_consulted(given_facts) is not_consulted(given_facts)
    if fields["status"] is not None and final_response(fields["status"]):
        assert not_consulted(given_facts) is NotConsulted.FINAL_RESPONSE


def test_every_decision_has_words() -> None:
    for decision in NotConsulted:
        assert str(decision)
        assert str(decision) == decision.action.why


@pytest.mark.parametrize(
    ("decision", "then", "counted", "learns"),
    [
        (NotConsulted.FINAL_RESPONSE, Then.ANSWER, True, True),
        # the connection refused it: sent again uncounted, the breaker told nothing
        (NotConsulted.RECONNECT, Then.SEND_AGAIN, False, False),
        (NotConsulted.ENDS_CALL, Then.END, True, True),
        # the 401 is the upstream's answer (it learns), its answer is not an attempt
        (NotConsulted.AUTH_CHALLENGE, Then.ASK_AUTH, False, True),
        # RFC 8470 §5.2: the server did not process it; the handshake's, not the upstream's
        (NotConsulted.TOO_EARLY, Then.SEND_AGAIN, False, False),
    ],
)
def test_each_decision_carries_its_action(
    decision: NotConsulted, then: Then, counted: bool, learns: bool
) -> None:
    """The table the loop executes (``NotConsulted.action``), member by member."""
    action = decision.action
    assert (action.then, action.counted, action.learns) == (then, counted, learns)
    assert str(action.then)
