"""The checker's honesty: it flags each kind of violation when one is planted in a real run.

``recorded_run.json`` is a run the lab recorded (trio_retry's calls and its part of the
backend's ledger, from ``python -m benchmarks.exactly_once --smoke``). Judged as recorded it is
clean. Each test plants exactly one violation of one kind (a second execution on the ledger, a
failure reported for an executed POST, a NOT_SENT claim the ledger contradicts, an overrun, a
reconciler's answer the ledger contradicts, a leaked socket, a foreign exception) and requires
the checker to report exactly that one, and nothing else. No root, no network: the checker is a
pure function.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from benchmarks.exactly_once.backend import EXECUTED, FENCED
from benchmarks.exactly_once.checker import VIOLATIONS, Score, check
from benchmarks.exactly_once.lab import rescore
from benchmarks.exactly_once.records import (
    GET,
    POST,
    CallRecord,
    ClientRun,
    LedgerEntry,
    TrailAttempt,
)

RECORDED = Path(__file__).with_name("recorded_run.json")

Run = tuple[ClientRun, list[LedgerEntry]]


def recorded() -> Run:
    data = json.loads(RECORDED.read_text())
    return ClientRun.from_json(data["run"]), [LedgerEntry(**e) for e in data["ledger"]]


def _first(run: ClientRun, ledger: list[LedgerEntry], kind: str) -> CallRecord:
    """The first call of ``kind`` that got a response at its first attempt, which the backend
    executed."""
    executed = {e.rid for e in ledger if e.result == EXECUTED and e.attempt == "1"}
    return next(
        c
        for c in run.calls
        if c.kind == kind and c.outcome == "ok" and c.rid in executed and len(c.trail) == 1
    )


def _replace(run: ClientRun, call: CallRecord, **changes: Any) -> ClientRun:
    calls = tuple(dataclasses.replace(c, **changes) if c is call else c for c in run.calls)
    return dataclasses.replace(run, calls=calls)


def plant_post_twice(run: ClientRun, ledger: list[LedgerEntry]) -> Run:
    call = _first(run, ledger, POST)
    entry = next(e for e in ledger if e.rid == call.rid)
    return run, [*ledger, dataclasses.replace(entry, attempt="2")]


def plant_false_failure(run: ClientRun, ledger: list[LedgerEntry]) -> Run:
    call = _first(run, ledger, POST)
    failed = _replace(run, call, outcome="failed", status=None, error="x.ConnectionBroken")
    return failed, ledger


def plant_false_not_sent_attempt(run: ClientRun, ledger: list[LedgerEntry]) -> Run:
    # the trail says attempt 1 was NOT_SENT and attempt 2 answered; the ledger holds attempt 1
    call = _first(run, ledger, GET)
    trail = (
        TrailAttempt(number=1, evidence="NOT_SENT", stage="CONNECT"),
        TrailAttempt(number=2, evidence="RESPONSE_RECEIVED", stage="COMPLETE"),
    )
    return _replace(run, call, trail=trail), ledger


def plant_false_not_sent_call(run: ClientRun, ledger: list[LedgerEntry]) -> Run:
    # a failure whose .evidence says NOT_SENT on a call the backend executed (the trail's own
    # attempt is consistent: it is the call-level claim that is false)
    call = _first(run, ledger, GET)
    trail = (
        TrailAttempt(number=1, evidence="SENT_NO_RESPONSE", stage="AWAITING_RESPONSE"),
        TrailAttempt(number=2, evidence="NOT_SENT", stage="CONNECT"),
    )
    failed = _replace(
        run, call, outcome="failed", status=None, error="x.ConnectFailed", evidence="NOT_SENT",
        trail=trail,
    )  # fmt: skip
    return failed, ledger


def plant_false_reconciled_executed(run: ClientRun, ledger: list[LedgerEntry]) -> Run:
    # the reconciler said attempt 1 of a POST ran; the ledger has no execution of it
    call = _first(run, ledger, POST)
    trail = (
        TrailAttempt(
            number=1, evidence="SENT_NO_RESPONSE", stage="AWAITING_RESPONSE", reconciled="EXECUTED"
        ),
    )
    return _replace(run, call, trail=trail), [e for e in ledger if e.rid != call.rid]


#: attempt 1 in doubt, reconciled as not executed; attempt 2, sent again, answered
RESENT_AFTER_NOT_EXECUTED = (
    TrailAttempt(
        number=1, evidence="SENT_NO_RESPONSE", stage="AWAITING_RESPONSE", reconciled="NOT_EXECUTED"
    ),
    TrailAttempt(number=2, evidence="RESPONSE_RECEIVED", stage="COMPLETE"),
)


def plant_false_reconciled_not_executed(run: ClientRun, ledger: list[LedgerEntry]) -> Run:
    # the reconciler said attempt 1 did not run, attempt 2 answered; the ledger executed 1 only
    call = _first(run, ledger, POST)
    trail = RESENT_AFTER_NOT_EXECUTED
    return _replace(run, call, trail=trail), ledger


def plant_deadline_overrun(run: ClientRun, ledger: list[LedgerEntry]) -> Run:
    call = run.calls[0]
    return _replace(run, call, elapsed=call.deadline + 1.0), ledger


def plant_socket_leak(run: ClientRun, ledger: list[LedgerEntry]) -> Run:
    return dataclasses.replace(run, sockets_left=1), ledger


def plant_foreign_exception(run: ClientRun, ledger: list[LedgerEntry]) -> Run:
    call = _first(run, ledger, GET)  # a GET: a failed GET that ran is no false failure
    return _replace(run, call, outcome="foreign", status=None, error="builtins.OSError"), ledger


PLANTS: list[tuple[str, Callable[[ClientRun, list[LedgerEntry]], Run]]] = [
    ("post_twice", plant_post_twice),
    ("false_failure", plant_false_failure),
    ("false_not_sent", plant_false_not_sent_attempt),
    ("false_not_sent", plant_false_not_sent_call),
    ("false_reconciled", plant_false_reconciled_executed),
    ("false_reconciled", plant_false_reconciled_not_executed),
    ("deadline_overrun", plant_deadline_overrun),
    ("socket_leak", plant_socket_leak),
    ("foreign_exception", plant_foreign_exception),
]


def counts(score: Score) -> dict[str, int]:
    return {kind: score.count(kind) for kind in VIOLATIONS}


def test_the_recorded_run_is_clean() -> None:
    run, ledger = recorded()
    score = check(run, ledger)
    assert counts(score) == dict.fromkeys(VIOLATIONS, 0)
    assert score.calls == len(run.calls) > 50
    # the run did meet faults: some calls were ambiguous, and the ledger tells them apart
    assert sum(score.ambiguous_split.values()) == score.outcomes["ambiguous"] > 0


def test_every_kind_has_a_plant() -> None:
    assert {kind for kind, _ in PLANTS} == set(VIOLATIONS)


@pytest.mark.parametrize(("kind", "plant"), PLANTS, ids=[plant.__name__ for _, plant in PLANTS])
def test_a_planted_violation_is_flagged(
    kind: str, plant: Callable[[ClientRun, list[LedgerEntry]], Run]
) -> None:
    score = check(*plant(*recorded()))
    assert counts(score) == {k: int(k == kind) for k in VIOLATIONS}, score.violations


def test_a_failure_that_says_it_ran_is_no_false_failure() -> None:
    # trio_retry's RequestFailed with PARTIAL_RESPONSE: the response broke after its status
    # line, and the evidence tells the caller the POST ran. The truth, not a violation.
    run, ledger = recorded()
    call = _first(run, ledger, POST)
    told = _replace(
        run, call, outcome="failed", error="x.ConnectionBroken", evidence="PARTIAL_RESPONSE"
    )
    score = check(told, ledger)
    assert counts(score) == dict.fromkeys(VIOLATIONS, 0)
    assert score.info["failed_saying_it_ran"] == 1


def test_ambiguous_calls_are_split_by_the_ledger() -> None:
    run, ledger = recorded()
    post = _first(run, ledger, POST)
    ambiguous = _replace(run, post, outcome="ambiguous", status=None)
    before = check(run, ledger).ambiguous_split
    after = check(ambiguous, ledger).ambiguous_split
    assert after.get("executed", 0) == before.get("executed", 0) + 1
    # the same call with its execution gone from the ledger: "not executed", and no violation
    gone = [e for e in ledger if e.rid != post.rid]
    split = check(ambiguous, gone).ambiguous_split
    assert split.get("not_executed", 0) == before.get("not_executed", 0) + 1


def test_a_recorded_document_is_judged_again_the_same() -> None:
    run, ledger = recorded()
    first = check(run, ledger).to_json()
    doc = {
        "config": {"tolerance": 0.25},
        "clients": [
            {
                "run": run.to_json(),
                "ledger": [dataclasses.asdict(e) for e in ledger],
                "score": first,
            }
        ],
    }
    assert rescore(doc)["clients"][0]["score"] == first


def test_a_true_reconciliation_is_counted_and_not_flagged() -> None:
    # attempt 1 reconciled as not executed; it reached the backend after the look-up and was
    # fenced (no side effect); attempt 2 executed: no violation, the answer counted
    run, ledger = recorded()
    call = _first(run, ledger, POST)
    trail = RESENT_AFTER_NOT_EXECUTED
    mine = [e for e in ledger if e.rid == call.rid]
    others = [e for e in ledger if e.rid != call.rid]
    fenced = dataclasses.replace(mine[0], result=FENCED)
    later = [fenced, dataclasses.replace(mine[0], attempt="2")]
    score = check(_replace(run, call, trail=trail), others + later)
    assert counts(score) == dict.fromkeys(VIOLATIONS, 0), score.violations
    assert score.reconciled == {"NOT_EXECUTED": 1}
    assert score.left_unknown == score.outcomes.get("ambiguous", 0)
    rejudged = ClientRun.from_json(_replace(run, call, trail=trail).to_json())
    assert next(c for c in rejudged.calls if c.rid == call.rid).trail == trail


def test_a_post_keyed_by_the_client_that_may_have_run_is_left_unknown() -> None:
    # trio_retry idempotency_key=True on a key-less POST of the workload: reported failed with
    # SENT_NO_RESPONSE although executed. Not a false failure (the evidence says it may have
    # run), but the caller holds no key to send it again with: left unknown, like an
    # ambiguous call, and split by the ledger the same way
    run, ledger = recorded()
    call = _first(run, ledger, POST)
    before = check(run, ledger)
    failed = _replace(
        run, call, outcome="failed", status=None, error="x.DeadlineExceeded",
        evidence="SENT_NO_RESPONSE", client_key=True,
    )  # fmt: skip
    keyed = [dataclasses.replace(e, key='"k"') if e.rid == call.rid else e for e in ledger]
    score = check(failed, keyed)
    assert counts(score) == dict.fromkeys(VIOLATIONS, 0), score.violations
    assert score.left_unknown == before.left_unknown + 1
    assert score.ambiguous_split.get("executed", 0) == before.ambiguous_split.get("executed", 0) + 1


def test_a_call_its_reconciler_left_unknown_is_recorded_with_why() -> None:
    # what the reconciler was given and what its look-ups got, with when the call ran (the lab
    # adds the faults of that time): the record of why it stayed unknown, kept in the score
    run, ledger = recorded()
    call = _first(run, ledger, POST)
    doubt = TrailAttempt(
        number=1,
        evidence="SENT_NO_RESPONSE",
        stage="AWAITING_RESPONSE",
        reconciled="UNKNOWN",
        detail="look-up DeadlineExceeded after 0.70 s",
        time_left=1.4,
    )
    left = _replace(run, call, outcome="ambiguous", status=None, trail=(doubt,), started=12.5)
    score = check(left, ledger)
    (unsettled,) = [u for u in score.unsettled if u["rid"] == call.rid]
    assert unsettled["started"] == 12.5
    assert unsettled["ledger"] == "executed 1x"
    assert unsettled["attempts"] == [
        "1 SENT_NO_RESPONSE@AWAITING_RESPONSE -> UNKNOWN in 1.4 s: "
        "look-up DeadlineExceeded after 0.70 s"
    ]
    rejudged = ClientRun.from_json(left.to_json())
    assert next(c for c in rejudged.calls if c.rid == call.rid).trail == (doubt,)


def test_a_call_left_unknown_is_judged_again_with_the_faults_of_its_time() -> None:
    """``--rescore`` says which faults were in force during a call a reconciler left unknown,
    as the run does (from each fault's record: when it was in force and when undone)."""
    run, ledger = recorded()
    call = _first(run, ledger, POST)
    trail = (
        TrailAttempt(
            number=1, evidence="SENT_NO_RESPONSE", stage="AWAITING_RESPONSE", reconciled="UNKNOWN"
        ),
    )
    unknown = _replace(
        run, call, outcome="ambiguous", status=None, trail=trail, started=100.0, elapsed=2.0
    )
    partition = {
        "kind": "partition", "duration": 1.5, "began_at": 100.2, "in_force_at": 100.25,
        "ended_at": 101.8,
    }  # fmt: skip
    doc = {
        "config": {"tolerance": 0.25},
        "clients": [
            {
                "run": unknown.to_json(),
                "ledger": [dataclasses.asdict(e) for e in ledger],
                "faults": [partition],
            }
        ],
    }
    (unsettled,) = rescore(doc)["clients"][0]["score"]["unsettled"]
    assert unsettled["rid"] == call.rid
    assert unsettled["faults"] == ["partition 1500 ms from +0.20 s (in force +0.25..+1.80 s)"]
