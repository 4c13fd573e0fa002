"""The attempt trail in words, tables and JSON: what the client saw and decided, per attempt.

Shared by the command line (``--explain``) and the demo, so neither imports the other; it
sits with the values (tests/test_layers.py), below both, and imports only the core. Pure
rendering: it reads finished :class:`Attempt` values and returns strings or plain dicts; no
I/O, no clock. Header values never appear (the attempts carry none), so credentials cannot
leak through a trail.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ._core.attempt import Attempt
from ._core.decision import AmbiguousFailure, Decision, RetryAllowed, RetryDenied
from ._core.evidence import Evidence

__all__ = ["Hop", "attempt_table", "execution_line", "short_decision", "trail_json"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Hop:
    """One request of a call (several when redirects were followed) and its attempts."""

    method: str
    url: str
    attempts: tuple[Attempt, ...]
    status: int | None = None  # the status this hop ended with, when it got a response


def short_decision(decision: Decision | None) -> str:
    """A decision in a table cell: ``retry in 0.050s``, ``denied (MAX_ATTEMPTS)``, ``AMBIGUOUS``
    or ``-`` when the engine was not consulted."""
    if decision is None:
        return "-"
    if isinstance(decision, RetryAllowed):
        return f"retry in {decision.delay:.3f}s"
    if isinstance(decision, RetryDenied):
        return f"denied ({decision.reason})"
    return "AMBIGUOUS"


def _ms(attempt: Attempt, key: str) -> str:
    value = attempt.timings.get(key)
    return "-" if value is None else f"{value * 1000:.1f}"


def attempt_table(attempts: Sequence[Attempt], *, wide: bool = True) -> str:
    """One line per attempt under a header line.

    ``status`` is the response status (``-`` when no response head arrived) and ``category``
    the failure's :class:`FailureCategory` (``-`` for a response): two columns, so a failure is
    never shown as a status. ``wide`` adds bytes sent and received and the connect, TLS,
    first-byte and total times in milliseconds; without it only the total is shown.
    """
    head = ["#", "stage", "evidence", "status", "category"]
    head += ["proto", "sent", "recv", "connect", "tls", "first", "total_ms"] if wide else ["ms"]
    head.append("decision")
    rows = [head]
    for a in attempts:
        row = [
            str(a.number),
            str(a.stage),
            str(a.evidence),
            str(a.status) if a.status is not None else "-",
            str(a.category) if a.category is not None else "-",
        ]
        if wide:
            row += [_protocol(a), str(a.bytes_sent), str(a.bytes_received)]
            row += [_ms(a, "connect"), _ms(a, "tls"), _ms(a, "first_byte")]
        row += [_ms(a, "total"), short_decision(a.decision)]
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _protocol(attempt: Attempt) -> str:
    """The protocol column: the version without ``HTTP/`` (``-`` before one was chosen), and
    the fate of early data when the request went in it."""
    version = attempt.http_version
    shown = "-" if version is None else version.removeprefix("HTTP/")
    if attempt.early_data is not None:
        shown += f" early:{attempt.early_data}"
    return shown


def _numbers(attempts: Sequence[Attempt]) -> str:
    names = [str(a.number) for a in attempts]
    return ("attempt " if len(names) == 1 else "attempts ") + ", ".join(names)


def execution_line(
    attempts: Sequence[Attempt],
    *,
    status: int | None = None,
    ambiguous: bool = False,
    idempotency_key: bool = False,
) -> str:
    """What is known about execution, in words, from the trail of the last request.

    ``status`` is the final response's status when the call returned one; ``ambiguous`` says
    the call raised :class:`HttpAmbiguousExecutionError`; ``idempotency_key`` that every
    attempt carried the same ``Idempotency-Key``.
    """
    if ambiguous:
        return (
            "it may have executed: reconcile before repeating it (look the operation up, or "
            "replay it with the same Idempotency-Key if the server deduplicates on it)"
        )
    earlier = [
        a
        for a in attempts[:-1]
        if a.evidence in (Evidence.SENT_NO_RESPONSE, Evidence.PARTIAL_RESPONSE)
    ]
    note = ""
    if earlier:
        note = f"; {_numbers(earlier)} may have executed too, and "
        if idempotency_key:
            note += (
                "carried the same Idempotency-Key: a server that deduplicates on it "
                "executed it once"
            )
        else:
            note += "was repeated because the request is idempotent"
    if status is not None:
        return f"the server received it and answered {status}{note}"
    if not attempts:
        return "the server never received it: nothing was sent"
    last = attempts[-1]
    if last.evidence is Evidence.NOT_SENT:
        reached = [a for a in attempts if a.evidence is not Evidence.NOT_SENT]
        if not reached:
            return "the server never received it: nothing was executed, it is safe to send again"
        return (
            f"the last attempt never reached the server; {_numbers(reached)} did, and "
            "may have executed (the request is idempotent, so repeating it is harmless)"
        )
    if last.evidence is Evidence.SENT_NO_RESPONSE:
        return (
            "the server may have received it but never answered; the request is idempotent, "
            "so sending it again is harmless"
        )
    if last.evidence is Evidence.PARTIAL_RESPONSE:
        shown = f" {last.status}" if last.status is not None else ""
        return f"it executed: the server answered{shown}, then the response broke mid-body"
    return "the server received it and answered" + note


def _attempt_json(a: Attempt) -> dict[str, Any]:
    decision = a.decision
    return {
        "number": a.number,
        "stage": str(a.stage),
        "evidence": str(a.evidence),
        "status": a.status,
        "category": str(a.category) if a.category is not None else None,
        "http_version": a.http_version,
        "early_data": a.early_data,
        "connection_reused": a.connection_reused,
        "bytes_sent": a.bytes_sent,
        "bytes_received": a.bytes_received,
        "timings_ms": {k: round(v * 1000, 3) for k, v in a.timings.items()},
        "decision": short_decision(decision) if decision is not None else None,
        "decision_text": str(decision) if decision is not None else None,
        "retry_delay": decision.delay if isinstance(decision, RetryAllowed) else None,
        "ambiguous": isinstance(decision, AmbiguousFailure),
    }


def trail_json(
    hops: Sequence[Hop], *, outcome: str, execution: str, error: str | None = None
) -> dict[str, Any]:
    """The whole trail as plain JSON-able values, for ``--explain=json``.

    ``outcome`` is ``"response"``, ``"failed"`` or ``"ambiguous"``; ``error`` the error's
    class name when the call raised.
    """
    return {
        "outcome": outcome,
        "error": error,
        "execution": execution,
        "status": hops[-1].status if hops else None,
        "hops": [
            {
                "method": hop.method,
                "url": hop.url,
                "status": hop.status,
                "attempts": [_attempt_json(a) for a in hop.attempts],
            }
            for hop in hops
        ],
    }
