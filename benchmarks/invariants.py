"""The oracle: the central promise, as checks of one call's outcome against the server's record.

Shared by the soak (``benchmarks/soak.py``) and the property-based fuzzing and lifecycle tests
(``tests/reliability/``), so all judge a call by the same rules. It lives here because
``benchmarks/`` imports nothing from ``tests/`` (tests may import benchmarks).

A call is identified by a path of its own (``/call/<n>``), so every `RecordedRequest` with that
path belongs to it. The invariants, in the words of issue 8:

1. a ``NON_IDEMPOTENT`` request is never executed twice;
2. an attempt reported ``NOT_SENT`` reached no request handler. Attempts cannot always be
   matched to records one by one (a refused HTTP/2 stream leaves a record, a refused TCP
   connection does not), so the check is a count: the executed records of a call are at most
   the attempts whose evidence is not ``NOT_SENT``;
3. every call ends in exactly one of: a response, a ``RequestFailed``, an
   ``HttpAmbiguousExecutionError`` — and never ``RequestFailed`` when the server executed a
   non-idempotent request whose response the client did not get (counted as in 2: executed
   records at most the attempts that got a response, whole or partial);
4. the call took no longer than its deadline plus a small slack;
5. (checked by the callers) after the client closes, none of its sockets or tasks remain.

"Executed" is the server's record; a *side effect* is an executed request whose response was
not 408, 425 or 429: those statuses tell the client that the server did not process the
request (SPEC §6), so a script that answers with them stands for a server keeping that promise,
and the client may send the request again whatever its idempotency.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import trio

from trio_retry import (
    Attempt,
    ClientStateError,
    Evidence,
    HttpAmbiguousExecutionError,
    Idempotency,
    RequestFailed,
    Response,
)
from trio_retry._call.failures import call_evidence
from trio_retry._core.engine import MAX_RECONNECTS as RECONNECT_TRIES
from trio_retry.testing import Action, GoAway, RecordedRequest, Respond, Stall

__all__ = [
    "NOT_PROCESSED_STATUSES",
    "CallSpec",
    "Kind",
    "Outcome",
    "check_call",
    "client_tasks",
    "expected_idempotency",
    "final_action",
    "has_side_effect",
    "open_fds",
    "sockets_connected_to",
]

#: Statuses that say "not processed" (SPEC §6: retried whatever the idempotency).
NOT_PROCESSED_STATUSES = frozenset({408, 425, 429})

_METHOD_DEFAULTS = {
    "GET": Idempotency.SAFE,
    "HEAD": Idempotency.SAFE,
    "OPTIONS": Idempotency.SAFE,
    "TRACE": Idempotency.SAFE,
    "PUT": Idempotency.IDEMPOTENT,
    "DELETE": Idempotency.IDEMPOTENT,
}


def expected_idempotency(method: str, *, explicit: Idempotency | None, key: bool) -> Idempotency:
    """SPEC §4, written out independently of the client: explicit, then a key, then the method."""
    if explicit is not None:
        return explicit
    if key:
        return Idempotency.IDEMPOTENT
    return _METHOD_DEFAULTS.get(method.upper(), Idempotency.NON_IDEMPOTENT)


def final_action(action: Action) -> Action:
    """The action that answered: through `Stall.then` and `GoAway.then`."""
    while isinstance(action, (Stall, GoAway)):
        action = action.then
    return action


def has_side_effect(record: RecordedRequest) -> bool:
    """Executed, and not answered with a status that promises it was not processed."""
    if not record.executed:
        return False
    action = final_action(record.action)
    return not (isinstance(action, Respond) and action.status in NOT_PROCESSED_STATUSES)


class Kind(enum.Enum):
    RESPONSE = "response"
    FAILED = "failed"  # a RequestFailed
    AMBIGUOUS = "ambiguous"  # an HttpAmbiguousExecutionError
    CANCELLED = "cancelled"  # the caller's own cancel scope (only where the test cancelled)
    CLOSED = "closed"  # ClientStateError: the call started after the client closed
    OTHER = "other"  # anything else: always a violation


@dataclass
class Outcome:
    """How one call ended, and how long it took (trio time)."""

    kind: Kind
    elapsed: float
    error: BaseException | None = None
    response: Response | None = None
    attempts: list[Attempt] = field(default_factory=list)

    @classmethod
    def of_response(cls, response: Response, elapsed: float) -> Outcome:
        return cls(Kind.RESPONSE, elapsed, response=response, attempts=list(response.attempts))

    @classmethod
    def of_error(cls, error: BaseException, elapsed: float) -> Outcome:
        if isinstance(error, HttpAmbiguousExecutionError):
            return cls(Kind.AMBIGUOUS, elapsed, error, attempts=list(error.attempts))
        if isinstance(error, RequestFailed):
            return cls(Kind.FAILED, elapsed, error, attempts=list(error.attempts))
        if isinstance(error, ClientStateError):
            return cls(Kind.CLOSED, elapsed, error)
        return cls(Kind.OTHER, elapsed, error)

    def slim(self) -> Outcome:
        """The same ending without exception objects, tracebacks or bodies: what a long run
        keeps to judge the call again once the server's record is final."""
        attempts = [replace(a, error=None) for a in self.attempts]
        error: BaseException | None = None
        if self.kind is Kind.AMBIGUOUS:
            assert isinstance(self.error, HttpAmbiguousExecutionError)
            error = HttpAmbiguousExecutionError("", evidence=self.error.evidence)
        elif self.kind is Kind.FAILED:
            assert isinstance(self.error, RequestFailed)
            error = RequestFailed("", evidence=self.error.evidence)
        elif self.kind is Kind.CLOSED:
            error = ClientStateError("")
        elif self.error is not None:
            error = RuntimeError(f"{type(self.error).__name__}: {self.error}"[:300])
        return Outcome(self.kind, self.elapsed, error, attempts=attempts)

    def describe(self) -> str:
        trail = "; ".join(str(a) for a in self.attempts) or "no attempts"
        what = f"{type(self.error).__name__}: {self.error}" if self.error is not None else ""
        if self.response is not None:
            what = f"status {self.response.status}"
        return f"{self.kind.value} after {self.elapsed:.3f}s ({what}) [{trail}]"


@dataclass(frozen=True)
class CallSpec:
    """What the oracle needs to know about a call."""

    method: str
    idempotency: Idempotency
    one_shot: bool
    max_attempts: int
    #: The time the call may take: its deadline (or the client's), or when it was cancelled.
    time_limit: float
    #: An Idempotency-Key was sent: every attempt must carry the same one.
    keyed: bool = False
    #: ClientStateError is expected (the call started after the client closed).
    may_find_closed: bool = False
    #: The caller cancelled the call: trio.Cancelled is an expected ending.
    may_be_cancelled: bool = False


def check_call(
    spec: CallSpec, outcome: Outcome, records: Sequence[RecordedRequest], *, slack: float
) -> list[str]:
    """Every broken invariant for one call, as readable sentences (empty: all hold)."""
    broken: list[str] = []
    executed = [r for r in records if r.executed]
    effects = [r for r in records if has_side_effect(r)]
    attempts = outcome.attempts
    non_idempotent = spec.idempotency is Idempotency.NON_IDEMPOTENT

    # (1) never executed twice
    if non_idempotent and len(effects) > 1:
        broken.append(f"(1) NON_IDEMPOTENT {spec.method} executed {len(effects)} times")

    # (3) exactly one of: response, RequestFailed, HttpAmbiguousExecutionError
    kind = outcome.kind
    if kind is Kind.OTHER:
        broken.append(f"(3) the call ended with {type(outcome.error).__name__}: {outcome.error!r}")
    elif kind is Kind.CLOSED and not spec.may_find_closed:
        broken.append("(3) ClientStateError for a call started while the client was open")
    elif kind is Kind.CANCELLED and not spec.may_be_cancelled:
        broken.append("(3) the call was cancelled, but nobody cancelled it")

    if kind in (Kind.RESPONSE, Kind.FAILED, Kind.AMBIGUOUS):
        sent = sum(1 for a in attempts if a.evidence is not Evidence.NOT_SENT)
        answered = sum(
            1
            for a in attempts
            if a.evidence in (Evidence.RESPONSE_RECEIVED, Evidence.PARTIAL_RESPONSE)
        )
        # (2) NOT_SENT reached no handler
        if len(executed) > sent:
            broken.append(
                f"(2) {len(executed)} executed record(s) but only {sent} attempt(s) not NOT_SENT"
            )
        if kind is Kind.FAILED and non_idempotent:
            if len(effects) > answered:
                broken.append(
                    f"(3) RequestFailed although the server executed the request "
                    f"({len(effects)} side effect(s), {answered} answered attempt(s))"
                )
            if attempts and attempts[-1].evidence is Evidence.SENT_NO_RESPONSE:
                broken.append("(3) RequestFailed with SENT_NO_RESPONSE on a NON_IDEMPOTENT call")
        if kind is Kind.AMBIGUOUS:
            error = outcome.error
            assert isinstance(error, HttpAmbiguousExecutionError)
            if spec.idempotency.safely_idempotent:
                broken.append(f"(3) HttpAmbiguousExecutionError for a {spec.idempotency} call")
            if error.evidence is Evidence.NOT_SENT:
                broken.append("(3) HttpAmbiguousExecutionError with evidence NOT_SENT")
        if kind is Kind.RESPONSE and attempts and attempts[-1].status is None:
            broken.append("(3) a response whose last attempt has no status")
        if kind is Kind.FAILED:
            error = outcome.error
            assert isinstance(error, RequestFailed)
            if attempts and error.evidence is not call_evidence(attempts):
                # The call's evidence: NOT_SENT only when no attempt reached the server.
                broken.append("(3) RequestFailed.evidence is not the call's evidence")
        # Consistency of the trail itself.
        if [a.number for a in attempts] != list(range(1, len(attempts) + 1)):
            broken.append(f"attempt numbers {[a.number for a in attempts]} are not 1..n")
        # Tries refused by the connection (a rotation GOAWAY, a failed PING) and sent again
        # on a fresh one do not count (SPEC §3): NOT_SENT, and no engine decision although
        # another attempt followed. At most RECONNECT_TRIES of them per call.
        uncounted = [
            a
            for a in attempts[:-1]
            if a.decision is None and a.evidence is Evidence.NOT_SENT and a.category is not None
        ]
        if len(uncounted) > RECONNECT_TRIES:
            broken.append(f"{len(uncounted)} uncounted tries, at most {RECONNECT_TRIES}")
        if len(attempts) - len(uncounted) > spec.max_attempts:
            broken.append(
                f"{len(attempts) - len(uncounted)} attempts, max_attempts is {spec.max_attempts}"
            )
        if spec.one_shot and len(attempts) > 1:
            broken.append(f"a ONE_SHOT body was sent in {len(attempts)} attempts")
    elif records and kind is Kind.CLOSED:
        broken.append("(2) a call refused as closed left records on the server")

    # (4) deadline
    if outcome.elapsed > spec.time_limit + slack:
        broken.append(
            f"(4) took {outcome.elapsed:.3f}s, limit {spec.time_limit:.3f}s + {slack}s slack"
        )

    if spec.keyed:
        keys = {r.header("idempotency-key") for r in records}
        if len(keys) > 1 or None in keys:
            broken.append(f"the Idempotency-Key changed between attempts: {sorted(map(str, keys))}")
    return broken


# --- invariant 5: what a closed client must not leave behind --------------------------------


def open_fds() -> set[int]:
    """The file descriptors open in this process (Linux ``/proc``)."""
    return {int(name) for name in os.listdir("/proc/self/fd")}


def _socket_inodes() -> dict[int, int]:
    inodes: dict[int, int] = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes[int(target[8:-1])] = int(name)
    return inodes


def _tcp_ports() -> dict[int, tuple[int, int]]:
    """inode -> (local port, remote port) of every TCP socket in the network namespace."""
    table: dict[int, tuple[int, int]] = {}
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path, encoding="ascii") as file:
                lines = file.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local = int(fields[1].rsplit(":", 1)[1], 16)
            remote = int(fields[2].rsplit(":", 1)[1], 16)
            table[int(fields[9])] = (local, remote)
    return table


def sockets_connected_to(ports: Iterable[int]) -> list[int]:
    """Our file descriptors of TCP sockets whose *remote* end is one of `ports`: the client
    side of connections to those servers (the servers' own sockets have them as local port)."""
    wanted = set(ports)
    table = _tcp_ports()
    found = []
    for inode, fd in _socket_inodes().items():
        ports_of = table.get(inode)
        if ports_of is not None and ports_of[1] in wanted and ports_of[0] not in wanted:
            found.append(fd)
    return sorted(found)


def client_tasks() -> list[str]:
    """Names of the live tasks that run trio_retry client code (the FaultServer's excluded)."""
    names: list[str] = []

    def walk(task: trio.lowlevel.Task) -> None:
        if task.name.startswith("trio_retry.") and not task.name.startswith("trio_retry.testing"):
            names.append(task.name)
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                walk(child)

    root = trio.lowlevel.current_root_task()
    assert root is not None
    walk(root)
    return names
