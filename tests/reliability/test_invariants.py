"""The oracle has teeth: each invariant check fires on a made-up violation, and stays quiet
on the honest outcomes it must accept. (Pure: no I/O.)"""

from __future__ import annotations

import pytest

from benchmarks.invariants import (
    CallSpec,
    Kind,
    Outcome,
    check_call,
    expected_idempotency,
    has_side_effect,
)
from trio_retry import (
    Attempt,
    ClientStateError,
    ConnectionBroken,
    Evidence,
    HttpAmbiguousExecutionError,
    Idempotency,
    Stage,
)
from trio_retry.testing import (
    Action,
    CloseAfterBody,
    CloseAfterHead,
    GoAway,
    RecordedRequest,
    Respond,
    Stall,
)

POST = CallSpec(
    method="POST", idempotency=Idempotency.NON_IDEMPOTENT, one_shot=False, max_attempts=3,
    time_limit=1.0,
)  # fmt: skip
GET = CallSpec(
    method="GET", idempotency=Idempotency.SAFE, one_shot=False, max_attempts=3, time_limit=1.0
)


def record(action: Action, *, executed: bool = True, key: str | None = None) -> RecordedRequest:
    headers = (("idempotency-key", key),) if key is not None else ()
    return RecordedRequest(
        method="POST", path="/call/0", headers=headers, body=b"", connection_id=1,
        http_version="HTTP/1.1", stream_id=None, time=0.0, executed=executed, action=action,
    )  # fmt: skip


def attempt(number: int, evidence: Evidence, status: int | None = None) -> Attempt:
    stage = {
        Evidence.NOT_SENT: Stage.CONNECT,
        Evidence.SENT_NO_RESPONSE: Stage.AWAITING_RESPONSE,
        Evidence.RESPONSE_RECEIVED: Stage.COMPLETE,
        Evidence.PARTIAL_RESPONSE: Stage.RESPONSE_BODY,
    }[evidence]
    return Attempt(number=number, stage=stage, evidence=evidence, status=status)


def failed(*attempts: Attempt) -> Outcome:
    error = ConnectionBroken("x", evidence=attempts[-1].evidence, attempts=attempts)
    return Outcome.of_error(error, 0.1)


def ambiguous(*attempts: Attempt) -> Outcome:
    error = HttpAmbiguousExecutionError("x", evidence=attempts[-1].evidence, attempts=attempts)
    return Outcome.of_error(error, 0.1)


def broken(spec: CallSpec, outcome: Outcome, *records: RecordedRequest) -> str:
    return " | ".join(check_call(spec, outcome, records, slack=0.0))


def test_expected_idempotency_follows_the_spec_precedence() -> None:
    assert expected_idempotency("POST", explicit=None, key=False) is Idempotency.NON_IDEMPOTENT
    assert expected_idempotency("POST", explicit=None, key=True) is Idempotency.IDEMPOTENT
    assert expected_idempotency("PUT", explicit=None, key=False) is Idempotency.IDEMPOTENT
    assert expected_idempotency("GET", explicit=None, key=False) is Idempotency.SAFE
    assert expected_idempotency("patch", explicit=None, key=False) is Idempotency.NON_IDEMPOTENT
    explicit = Idempotency.NON_IDEMPOTENT
    assert expected_idempotency("PUT", explicit=explicit, key=True) is explicit


def test_side_effects_exclude_statuses_that_promise_no_processing() -> None:
    assert has_side_effect(record(Respond(200)))
    assert has_side_effect(record(Respond(503)))
    assert has_side_effect(record(CloseAfterBody()))
    assert not has_side_effect(record(Respond(429)))
    assert not has_side_effect(record(Stall(1, then=Respond(408))))
    assert not has_side_effect(record(GoAway(then=Respond(425))))
    assert not has_side_effect(record(CloseAfterHead(), executed=False))


def test_1_executed_twice() -> None:
    outcome = Outcome.of_error(ClientStateError("closed"), 0.0)
    text = broken(POST, outcome, record(Respond(200)), record(Respond(200)))
    assert "(1)" in text
    # Twice, but once was a 429: fine.
    two = [attempt(1, Evidence.RESPONSE_RECEIVED, 429), attempt(2, Evidence.RESPONSE_RECEIVED, 200)]
    response_like = Outcome(Kind.RESPONSE, 0.1, attempts=two)
    assert broken(POST, response_like, record(Respond(429)), record(Respond(200))) == ""


def test_2_not_sent_but_executed() -> None:
    text = broken(GET, failed(attempt(1, Evidence.NOT_SENT)), record(CloseAfterBody()))
    assert "(2)" in text
    honest = failed(attempt(1, Evidence.NOT_SENT), attempt(2, Evidence.SENT_NO_RESPONSE))
    assert broken(GET, honest, record(CloseAfterBody())) == ""


def test_3_request_failed_although_executed() -> None:
    text = broken(POST, failed(attempt(1, Evidence.SENT_NO_RESPONSE)), record(CloseAfterBody()))
    assert "(3) RequestFailed although the server executed" in text
    assert "SENT_NO_RESPONSE on a NON_IDEMPOTENT" in text
    # Executed and its (partial) response arrived: the side effect is known, RequestFailed ok.
    assert broken(POST, failed(attempt(1, Evidence.PARTIAL_RESPONSE)), record(Respond(200))) == ""
    # The same failure on a safely idempotent call is fine.
    put = CallSpec(
        method="PUT", idempotency=Idempotency.IDEMPOTENT, one_shot=False, max_attempts=3,
        time_limit=1.0,
    )  # fmt: skip
    assert broken(put, failed(attempt(1, Evidence.SENT_NO_RESPONSE)), record(Respond(200))) == ""


def test_3_ambiguous_only_where_it_can_be() -> None:
    assert "(3) HttpAmbiguousExecutionError for a SAFE" in broken(
        GET, ambiguous(attempt(1, Evidence.SENT_NO_RESPONSE))
    )
    assert "evidence NOT_SENT" in broken(POST, ambiguous(attempt(1, Evidence.NOT_SENT)))
    assert broken(POST, ambiguous(attempt(1, Evidence.SENT_NO_RESPONSE))) == ""


@pytest.mark.parametrize(
    ("outcome", "spec_change", "says"),
    [
        (Outcome(Kind.OTHER, 0.1, KeyError("x")), {}, "(3) the call ended with KeyError"),
        (Outcome(Kind.CLOSED, 0.1, ClientStateError("x")), {}, "ClientStateError"),
        (Outcome(Kind.CANCELLED, 0.1), {}, "nobody cancelled it"),
        (Outcome(Kind.CANCELLED, 0.1), {"may_be_cancelled": True}, ""),
        (Outcome(Kind.CLOSED, 0.1, ClientStateError("x")), {"may_find_closed": True}, ""),
    ],
)
def test_3_exactly_one_of_three_endings(
    outcome: Outcome, spec_change: dict[str, bool], says: str
) -> None:
    spec = CallSpec(**{**POST.__dict__, **spec_change})
    text = broken(spec, outcome)
    assert (says in text) if says else text == ""


def test_4_deadline() -> None:
    slow = Outcome(Kind.RESPONSE, 1.5, attempts=[attempt(1, Evidence.RESPONSE_RECEIVED, 200)])
    assert "(4)" in broken(GET, slow)
    assert check_call(GET, slow, [], slack=0.6) == []


def test_trail_consistency() -> None:
    too_many = failed(*(attempt(n, Evidence.NOT_SENT) for n in range(1, 5)))
    assert "4 attempts, max_attempts is 3" in broken(GET, too_many)
    skipped = failed(attempt(1, Evidence.NOT_SENT), attempt(3, Evidence.NOT_SENT))
    assert "not 1..n" in broken(GET, skipped)
    one_shot = CallSpec(**{**GET.__dict__, "one_shot": True})
    twice = failed(attempt(1, Evidence.NOT_SENT), attempt(2, Evidence.NOT_SENT))
    assert "ONE_SHOT" in broken(one_shot, twice)


def test_idempotency_key_must_not_change() -> None:
    keyed = CallSpec(**{**POST.__dict__, "keyed": True})
    two = failed(attempt(1, Evidence.SENT_NO_RESPONSE), attempt(2, Evidence.PARTIAL_RESPONSE))
    same = [record(Respond(503), key="k1"), record(Respond(200), key="k1")]
    changed = [record(Respond(503), key="k1"), record(Respond(200), key="k2")]
    assert "Idempotency-Key" not in broken(keyed, two, *same)
    assert "Idempotency-Key changed" in broken(keyed, two, *changed)
