"""The checker: one client's calls judged against the ledger. Pure: values in, a score out.

The ledger (the backend's own record, written before it answers) is the truth about execution
*at the backend*. What the checks can and cannot prove:

- an execution is on the ledger even when its response was lost or its client gave up, so
  "executed twice", "failed although executed" and "NOT_SENT although executed" are proven
  when flagged;
- the converse is weaker: a request nginx received but never forwarded (a client that went away
  while nginx read the body, a reload) did not execute and leaves no ledger line, though the
  server did receive it; and nginx's access log cannot fill the gap for requests it never
  read: a request lost before nginx parsed its head leaves no line anywhere. So a missing line
  proves "not executed", never "not sent", and a NOT_SENT claim is only ever contradicted, never
  confirmed, by the records;
- attempts are matched by the ``x-attempt`` header the client sent. A client whose retries
  happen inside its transport (httpx ``retries=``, urllib3 ``Retry``) sends every try with the
  same header; the checks that use attempt numbers are trio_retry's only (its request hook
  writes the number of each attempt).

The violations, each with the request id it concerns (:data:`VIOLATIONS`):

``post_twice``
    a POST executed more than once (with a key: executed, not deduplicated, more than once).
``false_failure``
    a POST without a key reported as a plain failure (``failed``, ``foreign`` or ``hung``) while
    the ledger shows it executed: the caller was told it failed, and it happened. A POST that
    reached the backend with a key (the workload's, or one the client added itself: trio_retry
    ``idempotency_key=True``) is not counted here: with the caller's key it is safe to send
    again (``info``), and so when the failure handed the caller the key the client generated
    (trio_retry ``RequestFailed.idempotency_key``); with a key only the client held, a failure
    that may have run is *left unknown* (as an ambiguous call is), one that says NOT_SENT is
    checked as such. A failure
    whose evidence says the request ran (trio_retry: ``PARTIAL_RESPONSE``, the response broke
    after its status line) is the truth, not counted here (``info["failed_saying_it_ran"]``).
``false_not_sent``
    trio_retry said NOT_SENT and the ledger contradicts it: an attempt of the trail with
    NOT_SENT evidence whose number reached the backend more often than the trail's attempts of
    that number that may have been sent (attempt level), or a failure whose ``.evidence`` is
    NOT_SENT on a call the backend executed (call level: the caller reading ``exc.evidence``
    would conclude "it did not happen").
``false_reconciled``
    the call's reconciler (trio_retry ``reconcile=``) answered against the ledger: an attempt
    reconciled as executed for a request id the ledger never executed, or as not executed when
    the ledger shows that attempt (or an earlier one) executed. Its "not executed" answers are
    checked at the end of the run, so an attempt that reached the backend after the look-up
    counts too (the lab's backend fences it: see :mod:`.backend`).
``deadline_overrun``
    a call ended more than ``tolerance`` seconds after its deadline (``hung`` calls included).
``socket_leak``
    the client's process had sockets open after closing the client (once per client run).
``foreign_exception``
    an exception that is not the library's own reached the caller.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.exactly_once.backend import EXECUTED, FENCED, IN_FLIGHT
from benchmarks.exactly_once.records import (
    GET,
    POST,
    POST_KEY,
    CallRecord,
    ClientRun,
    LedgerEntry,
)

VIOLATIONS = (
    "post_twice",
    "false_failure",
    "false_not_sent",
    "false_reconciled",
    "deadline_overrun",
    "socket_leak",
    "foreign_exception",
)
#: A call may end this much after its deadline before it counts as an overrun: scheduling noise
#: on a loaded two-core machine (the checks of tests/reliability allow about as much).
DEFAULT_TOLERANCE = 0.25
_FAILURES = ("failed", "foreign", "hung")
#: evidence with which a failure tells the caller the request ran (trio_retry's RequestFailed
#: with PARTIAL_RESPONSE: the status line came, then the body broke; SPEC §3): no falsehood
_RAN = ("PARTIAL_RESPONSE", "RESPONSE_RECEIVED")


@dataclass(frozen=True, kw_only=True)
class Violation:
    kind: str
    rid: str
    detail: str
    #: false_not_sent only: "attempt" (an attempt of the trail) or "call" (the error's evidence)
    level: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.rid}: {self.detail}"


@dataclass(kw_only=True)
class Score:
    """One client's scoreboard row, and the violations behind its counts."""

    client: str
    calls: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)
    #: ambiguous calls split by the ledger: executed / deduplicated / not executed
    ambiguous_split: dict[str, int] = field(default_factory=dict)
    #: the calls the caller was left not knowing about (ambiguous: hand work for the caller)
    left_unknown: int = 0
    #: the reconciler's answers (trio_retry ``reconcile=``), per ReconcileOutcome name
    reconciled: dict[str, int] = field(default_factory=dict)
    #: the calls left unknown after their reconciler was asked, each with why (what the
    #: reconciler was given and got: :func:`_unsettled`); the lab adds the faults of its time
    unsettled: list[dict[str, Any]] = field(default_factory=list)
    overrun_max: float = 0.0
    overrun_p99: float = 0.0
    sockets_left: int = 0
    foreign_types: dict[str, int] = field(default_factory=dict)
    #: not violations, for context: GETs executed more than once (retries of a safe call),
    #: keyed POSTs reported failed although executed (safe to replay with the key), ledger
    #: executions with no access-log line
    info: dict[str, int] = field(default_factory=dict)

    def count(self, kind: str) -> int:
        return sum(1 for v in self.violations if v.kind == kind)

    def to_json(self) -> dict[str, Any]:
        return {
            "client": self.client,
            "calls": self.calls,
            "by_kind": self.by_kind,
            "outcomes": self.outcomes,
            "violations": {kind: self.count(kind) for kind in VIOLATIONS},
            "false_not_sent_by_level": dict(
                Counter(v.level for v in self.violations if v.kind == "false_not_sent")
            ),
            "ambiguous_split": self.ambiguous_split,
            "left_unknown": self.left_unknown,
            "reconciled": self.reconciled,
            "unsettled": self.unsettled,
            "overrun_max": round(self.overrun_max, 4),
            "overrun_p99": round(self.overrun_p99, 4),
            "sockets_left": self.sockets_left,
            "foreign_types": self.foreign_types,
            "info": self.info,
            "examples": [str(v) for v in self.violations[:20]],
        }


def _p99(values: Sequence[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]


def check(
    run: ClientRun,
    ledger: Sequence[LedgerEntry],
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    logged: Counter[str] | None = None,
) -> Score:
    """Judge ``run`` against ``ledger`` (entries of other clients are ignored). ``logged``:
    access-log lines per request id, for the context figure only."""
    by_rid: dict[str, list[LedgerEntry]] = defaultdict(list)
    rids = {call.rid for call in run.calls}
    for entry in ledger:
        if entry.rid in rids:
            by_rid[entry.rid].append(entry)
    score = Score(client=run.client, calls=len(run.calls), sockets_left=run.sockets_left)
    score.by_kind = dict(Counter(call.kind for call in run.calls))
    score.outcomes = dict(Counter(call.outcome for call in run.calls))
    split: Counter[str] = Counter()
    info: Counter[str] = Counter()
    foreign: Counter[str] = Counter()
    answers: Counter[str] = Counter()
    overruns: list[float] = []
    add = score.violations.append
    for call in run.calls:
        entries = by_rid.get(call.rid, [])
        executed = [e for e in entries if e.result == EXECUTED]
        overruns.append(max(0.0, call.elapsed - call.deadline))
        if call.kind in (POST, POST_KEY) and len(executed) > 1:
            add(Violation(kind="post_twice", rid=call.rid, detail=f"executed {len(executed)}x"))
        if call.kind == GET and len(executed) > 1:
            info["get_executed_more_than_once"] += 1
        in_flight = sum(1 for e in entries if e.result == IN_FLIGHT)
        if in_flight:  # the draft's 409 "still being processed", and what the caller got
            info["answered_409_in_flight"] += in_flight
            info[f"409_in_flight_then_{call.outcome}"] += 1
        if call.outcome in _FAILURES and executed:
            if call.evidence in _RAN:
                info["failed_saying_it_ran"] += 1
            elif call.client_key:
                pass  # left unknown (below): the caller has no key to send it again with
            elif call.kind == POST and not any(e.key for e in entries):
                add(
                    Violation(
                        kind="false_failure",
                        rid=call.rid,
                        detail=f"reported {call.outcome} ({call.error}), executed",
                    )
                )
            elif call.kind != GET:  # it carried the caller's key: safe to send again
                info["keyed_post_failed_but_executed"] += 1
        if call.outcome == "ambiguous" or _unknown_to_caller(call):
            if any(a.reconciled for a in call.trail):
                score.unsettled.append(_unsettled(call, executed))
            if executed:
                split["executed"] += 1
            elif entries:
                split["deduplicated"] += 1
            else:
                split["not_executed"] += 1
        reached = [e for e in entries if e.result != FENCED]  # a fenced one did not run
        _check_not_sent(call.rid, call.evidence, call.outcome, call.trail, reached, add)
        for attempt in call.trail:
            if attempt.reconciled is not None:
                answers[attempt.reconciled] += 1
                _check_reconciled(call.rid, attempt.number, attempt.reconciled, executed, add)
        if call.elapsed > call.deadline + tolerance:
            add(
                Violation(
                    kind="deadline_overrun",
                    rid=call.rid,
                    detail=f"{call.elapsed:.3f}s for a {call.deadline:.3f}s deadline",
                )
            )
        if call.outcome == "foreign":
            foreign[call.error or "?"] += 1
            add(Violation(kind="foreign_exception", rid=call.rid, detail=call.error or "?"))
        if logged is not None and entries and not logged.get(call.rid):
            info["executed_without_access_log_line"] += 1
    if run.sockets_left > 0:
        add(
            Violation(
                kind="socket_leak",
                rid="-",
                detail=f"{run.sockets_left} socket(s) open after the client closed",
            )
        )
    score.ambiguous_split = dict(split)
    score.left_unknown = sum(split.values())
    score.reconciled = dict(answers)
    score.info = dict(info)
    score.foreign_types = dict(foreign)
    score.overrun_max = max(overruns, default=0.0)
    score.overrun_p99 = _p99(overruns)
    return score


def _check_not_sent(
    rid: str,
    evidence: str | None,
    outcome: str,
    trail: Sequence[Any],
    entries: Sequence[LedgerEntry],
    add: Any,
) -> None:
    if not trail and evidence is None:
        return  # a peer: it makes no such claim
    reached = Counter(entry.attempt for entry in entries)
    flagged = False
    for number in sorted({a.number for a in trail if a.evidence == "NOT_SENT"}):
        maybe_sent = sum(1 for a in trail if a.number == number and a.evidence != "NOT_SENT")
        if reached.get(str(number), 0) > maybe_sent:
            add(
                Violation(
                    kind="false_not_sent",
                    level="attempt",
                    rid=rid,
                    detail=f"attempt {number} reported NOT_SENT, reached the backend "
                    f"{reached[str(number)]}x",
                )
            )
            flagged = True
    if not flagged and outcome in _FAILURES and evidence == "NOT_SENT" and entries:
        add(
            Violation(
                kind="false_not_sent",
                level="call",
                rid=rid,
                detail=f"the failure says NOT_SENT; the backend saw it {len(entries)}x "
                f"(attempts {sorted(reached)})",
            )
        )


def _unsettled(call: CallRecord, executed: Sequence[LedgerEntry]) -> dict[str, Any]:
    """A call left unknown although its reconciler was asked: when (the machine's clock, for
    the faults of its time), how it went (each attempt: evidence at stage, and the
    reconciler's answer with the seconds it was given and what its look-ups got) and what the
    ledger says."""
    return {
        "rid": call.rid,
        "kind": call.kind,
        "proto": call.proto,
        "started": round(call.started, 3),
        "elapsed": round(call.elapsed, 3),
        "ledger": f"executed {len(executed)}x",
        "attempts": [
            f"{a.number} {a.evidence}@{a.stage}"
            + (f" -> {a.reconciled} in {a.time_left} s: {a.detail}" if a.reconciled else "")
            for a in call.trail
        ],
    }


def _unknown_to_caller(call: CallRecord) -> bool:
    """A failure that may have run (evidence not ``NOT_SENT``, nor saying it ran) of a request
    whose only key was the client's own: the caller cannot send it again safely, nor knows
    whether it ran. Left unknown, as an ambiguous call is."""
    return (
        call.client_key
        and call.outcome in _FAILURES
        and call.evidence != "NOT_SENT"
        and call.evidence not in _RAN
    )


def _check_reconciled(
    rid: str, number: int, answer: str, executed: Sequence[LedgerEntry], add: Any
) -> None:
    """A reconciler's answer about attempt ``number`` against the ledger's executions of its
    request id."""
    if answer == "EXECUTED" and not executed:
        add(
            Violation(
                kind="false_reconciled",
                rid=rid,
                detail=f"attempt {number} reconciled as executed; the ledger has no execution",
            )
        )
    ran = sorted(e.attempt for e in executed if e.attempt.isdigit() and int(e.attempt) <= number)
    if answer == "NOT_EXECUTED" and ran:
        add(
            Violation(
                kind="false_reconciled",
                rid=rid,
                detail=f"attempt {number} reconciled as not executed; the ledger executed "
                f"attempt(s) {ran}",
            )
        )
