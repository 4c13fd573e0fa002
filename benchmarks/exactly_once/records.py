"""What a run records, as values: the calls a client made (told by the client), the ledger (the
backend's record of execution) and nginx's access log (the second witness), and their readers.

A call's ``outcome`` is what the caller was told:

- ``ok``: a response (any status);
- ``failed``: the library's own "request failed" exception (trio_retry: a ``RequestFailed``);
- ``ambiguous``: the library says it cannot know whether the server executed the request
  (trio_retry: ``HttpAmbiguousExecutionError``; no peer has such an answer);
- ``foreign``: an exception that is not the library's own (the type name is in ``error``);
- ``hung``: the call outlived its deadline by the harness's grace and was cancelled by it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

GET, POST, POST_KEY = "get", "post", "post_key"
OUTCOMES = ("ok", "failed", "ambiguous", "foreign", "hung")


@dataclass(frozen=True, kw_only=True)
class TrailAttempt:
    """One attempt of a trio_retry call as its trail reports it."""

    number: int
    evidence: str  # an Evidence name
    stage: str
    #: what the call's reconciler answered about this attempt (a ReconcileOutcome name), if
    #: it was asked
    reconciled: str | None = None
    #: why the answer was what it was, when the reconciler was asked: ``Reconciled.detail``
    #: (the client's word: the reconciler raised, ran out of time...) or the lab reconciler's
    #: own (what its look-ups got)
    detail: str = ""
    #: the seconds the reconciler was given (``AmbiguityReport.time_left``)
    time_left: float | None = None


@dataclass(frozen=True, kw_only=True)
class CallRecord:
    rid: str
    kind: str  # GET, POST or POST_KEY
    proto: str
    outcome: str
    elapsed: float
    deadline: float
    status: int | None = None
    error: str | None = None  # the exception's type name
    evidence: str | None = None  # trio_retry: the error's evidence
    trail: tuple[TrailAttempt, ...] = ()
    #: the client added an ``Idempotency-Key`` of its own (trio_retry ``idempotency_key=True``),
    #: which the caller does not hold
    client_key: bool = False
    #: when the call started (``time.monotonic()``, the machine's clock: the faults'
    #: ``began_at`` is on it too); 0.0 in a document from before it was recorded
    started: float = 0.0

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["trail"] = [
            [a.number, a.evidence, a.stage]
            + ([a.reconciled, a.detail, a.time_left] if a.reconciled else [])
            for a in self.trail
        ]
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CallRecord:
        trail = tuple(
            TrailAttempt(
                number=n,
                evidence=e,
                stage=s,
                reconciled=(r or [None])[0],
                detail=r[1] if len(r) > 1 else "",
                time_left=r[2] if len(r) > 2 else None,
            )
            for n, e, s, *r in data["trail"]
        )
        return cls(**{**data, "trail": trail})


@dataclass(frozen=True, kw_only=True)
class ClientRun:
    """One client's part of a run, as its subprocess reported it."""

    client: str
    calls: tuple[CallRecord, ...]
    #: sockets the process still had open after closing its client(s), beyond those it had
    #: before opening them
    sockets_left: int
    available: bool = True
    note: str = ""
    protocols: tuple[str, ...] = ()
    wall: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "client": self.client,
            "available": self.available,
            "note": self.note,
            "protocols": list(self.protocols),
            "wall": self.wall,
            "sockets_left": self.sockets_left,
            "extra": self.extra,
            "calls": [call.to_json() for call in self.calls],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClientRun:
        return cls(
            client=data["client"],
            available=data.get("available", True),
            note=data.get("note", ""),
            protocols=tuple(data.get("protocols", ())),
            wall=data.get("wall", 0.0),
            sockets_left=data.get("sockets_left", 0),
            extra=data.get("extra", {}),
            calls=tuple(CallRecord.from_json(c) for c in data.get("calls", ())),
        )


@dataclass(frozen=True, kw_only=True)
class LedgerEntry:
    """One request that reached the backend (see :mod:`.backend`)."""

    rid: str
    attempt: str  # the x-attempt header as sent ("-" when absent)
    method: str
    key: str | None
    result: str  # "executed" or "deduplicated"
    t: float = 0.0
    path: str = ""
    #: the request body's size as read (chunked or by content-length)
    body_length: int = 0
    #: the protocol the client used at the proxy, when the proxy says (``x-client-proto``)
    client_proto: str | None = None


@dataclass(frozen=True, kw_only=True)
class LogLine:
    """One request nginx finished (its access log)."""

    rid: str
    attempt: str
    method: str
    protocol: str
    status: int
    upstream_status: str


def read_ledger(path: Path) -> list[LedgerEntry]:
    entries = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.strip():
            entries.append(LedgerEntry(**json.loads(line)))
    return entries


def read_access_log(path: Path) -> list[LogLine]:
    lines = []
    text = path.read_text(errors="replace") if path.exists() else ""
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) < 6:
            continue
        lines.append(
            LogLine(
                rid=fields[0],
                attempt=fields[1],
                method=fields[2],
                protocol=fields[3],
                status=int(fields[4]),
                upstream_status=fields[5],
            )
        )
    return lines


def for_client(items: Iterable[Any], rids: Sequence[str] | set[str]) -> list[Any]:
    """The ledger entries or log lines of the given request ids."""
    wanted = set(rids)
    return [item for item in items if item.rid in wanted]
