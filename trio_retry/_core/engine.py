"""Retry eligibility: may the client try again, must it wait, or must it say "ambiguous"?

The engine is a pure function of a :class:`RetryContext`: no I/O, no clock, no randomness. The
client builds the context after every finished attempt (and only consults the engine for
failures and statuses >= 400).

The order of the rules is the whole design. Each rule either returns a decision or passes; the
first decision wins, so a later rule can never re-enable what an earlier one forbade:

1. attempts exhausted                       -> RetryDenied.max_attempts()
2. retry budget empty                       -> RetryDenied.budget_exhausted()
3. body not replayable (ONE_SHOT)           -> RetryDenied.body_not_replayable()
4. response already delivered to the caller, and its body cannot be continued
                                            -> RetryDenied.response_already_delivered()
5. client draining                          -> RetryDenied.runtime_draining()
6. remaining deadline after the delay below the minimum attempt budget -> RetryDenied.deadline()
7. permanent failure category               -> RetryDenied.permanent_failure(category)
8. SENT_NO_RESPONSE on an operation that is not safely idempotent -> AmbiguousFailure
9. the status table and the transport-failure rules (see :func:`_rule_status` and
   :func:`_rule_transport`); anything they do not retry -> RetryDenied.not_retryable()

Within rule 9: a ``409 Conflict`` to a request carrying an ``Idempotency-Key``
(``RetryContext.keyed``) is "that key is still being processed"
(draft-ietf-httpapi-idempotency-key-header §2.6): retried, after ``Retry-After`` else the
backoff, with the same key. And every retry rule 9 allows is refused when the request's
``Idempotency-Key`` is what makes it safe to send again and the next attempt would go after the
key may have expired at the server (``RetryContext.key_expires_in`` below the delay; the client
sets it from ``Upstream(idempotency_key_ttl=...)`` once an attempt may have reached the server):
``AmbiguousFailure(key_expired=True)``, since the server would run it again as a new request.

Within rule 9, a response that is not valid HTTP (``REMOTE_PROTOCOL``: garbage, a head over
``max_header_bytes``, ``Content-Length: abc``, a body its framing contradicts, a body that does
not decode) is retried only when it came on a *reused* connection: the next attempt goes on the
connection the pool gives it (a fresh one, unless another idle one is there), and a failure
there is judged again by this rule. On a fresh connection (``RetryContext.fresh_connection``:
opened for this attempt, no earlier exchange on it) it is denied, whatever the evidence: the
same server will answer the same way, and sending it again only runs it again. On a reused
connection the fault may be the connection's (bytes left by an earlier exchange, a peer that
half-closed it), so one more try on another connection is worth it. The rejected alternative,
retrying every such response as any other transport failure, made the server see three
requests for one broken answer (issue #38).

**Continuing a broken body (rule 4's exception).** A body that broke mid-way can be continued
from the byte where it stopped (``RetryContext.continuable``: a replay-safe request, a response
whose head promised the same bytes again, a strong validator and ``Accept-Ranges: bytes``;
the client sends ``Range: bytes=N-`` with ``If-Range``, RFC 9110 §14, §13.1.5). Such a retry
delivers no byte twice, so rule 4 lets it pass even when the caller has read the beginning;
every other rule holds for it as for any retry: the attempts (1), the budget (2), draining (5),
the deadline (6), a permanent failure (7), and rule 9's transport table (``continuable``
implies a safely idempotent operation, so a ``PARTIAL_RESPONSE`` or ``SENT_NO_RESPONSE`` of
it is retried, a response that is not HTTP on a fresh connection is not). The rule sits at 4,
not later, because "delivered" is rule 4's own question: placed after the limits, it can never
re-enable what they forbade, and its exception is exactly the case where the answer to that
question does not matter. Whether the continuation's answer really continues the body (a
``206`` with the matching ``Content-Range``) is judged by the client on that answer, never
spliced otherwise (``_resume.py``).

Why ambiguity (8) outranks the status/transport table (9) but not the limits (1-7): a denial for
budget or deadline is still reported as ambiguous by the client when the evidence says the
request may have run (SPEC §7) — the engine's job is only to say whether to try again, and rules
1-7 each make "no" certain regardless of what happened on the wire.

**Reconciliation** (SPEC §19) comes after the rules, where the call would end "ambiguous"
(:func:`asks_reconciler`): an ``AmbiguousFailure``, or any denial after an attempt of a request
that is not safely idempotent and may have run. The client then asks the call's reconciler
(``reconcile=``, else ``Upstream(reconcile=...)``), once per attempt, within the call's
deadline. *Executed*: the call ends with the reconciler's response (or
``ExecutedWithoutResponse``), never sent again; *unknown* (or a reconciler that raised, ran out
of time or returned late): the decision stands, and the call is ambiguous as without one;
*not executed*: the engine decides again on the same context with ``reconciled`` set to
``NOT_EXECUTED``, which rules 8 and 9 read as ``NOT_SENT`` (the reconciler's word that the server
did not run it): rules 1-7 still hold (a denial is then a plain failure, not ambiguous), and an
allowed retry is a counted attempt after the backoff. Why after the rules and not before them:
rules 1-7 make "no" certain whatever happened, and a reconciler is asked only where its answer
changes what the caller gets; a call that will be retried anyway (a keyed POST) is never held
up by one. Why not inside the engine: the engine is pure, and a reconciler is I/O.

The order lives in :data:`RULES`, a tuple; ``DefaultRetryEligibilityEngine`` just walks it (the
engine is consulted only after a failure or a status >= 400, never on the success path, so a
call per rule costs nothing a successful request pays). The decisions themselves are in
:mod:`.decision`, re-exported here.

**When the engine is not consulted.** This file owns every "send again?" of a call, including
the five answers given without asking the engine (whose :class:`RetryContext` describes a
failed attempt of the call). They are :class:`NotConsulted` decisions, taken in this order by
:func:`not_consulted` (:data:`BEFORE_RULES`, data again) from an attempt's :class:`AttemptFacts`;
the first that applies wins, and the client acts on it without building a context:

0. a response below 400 (:data:`FINAL_BELOW`)  -> FINAL_RESPONSE: the caller gets it;
1. the connection, not the request, refused it (a routine HTTP/2 GOAWAY rotation, an idle
   connection that failed its PING: ``NOT_SENT``; a QUIC handshake that failed or ran past its
   limit, SPEC §16), fewer than :data:`MAX_RECONNECTS` times in this call, with a body that
   can be sent again, the client not draining -> RECONNECT: sent again at once on a fresh
   connection (over TCP after a failed QUIC handshake), counted as neither an attempt nor a
   retry (SPEC §3);
2. a failure that ends the call (``WireError.ends_call``: a body over ``max_body_bytes``, the
   client closing, an admission refusal, a raising hook) -> ENDS_CALL: trying again would meet
   the same failure;
3. a 401 with a challenge the call's auth may answer (Digest), once, with a replayable body
   -> AUTH_CHALLENGE: if the auth answers it the request goes again with credentials (the 401
   proves the server did not act on it), uncounted; if not, the engine decides after all;
4. a ``425 Too Early`` to a request sent in HTTP/3 early data (RFC 8470 §5.2: the server did not
   process it), within the same :data:`MAX_RECONNECTS` and with a replayable body -> TOO_EARLY:
   sent again at once, uncounted; the connection's handshake is over by then, so it does not
   go in early data again. (A 425 to a request that was not sent early is the engine's, as
   any other status.)

Each of them carries what the client does on it (:class:`Action`, the member's value): what
follows (:class:`Then`: the answer, the same request again at once, the auth asked first, or
the end of the call), whether the try counts against ``max_attempts``, and whether the origin's
breaker, throttle and hedging ledger learn from it. The client executes the action; it never
derives it again from the attempt. Every try is numbered in the trail, counted or not.

A stale pooled HTTP/1.1 connection found closed before a byte was written is not an attempt
at all: the pool drops it and the same attempt goes on a fresh one (``_wire/pool.py``).

**Early data whose handshake never completed** is the one RECONNECT that is not ``NOT_SENT``.
A request QUIC wrote into 0-RTT packets of a handshake that then failed or ran out (UDP
dropped, ICMP unreachable) is ``SENT_NO_RESPONSE`` with ``Attempt.early_data ==
"unconfirmed"``: the server may have run it. It goes again over TCP uncounted all the same,
like a request that waited for that handshake: only a request whose replay is harmless goes
early (``SAFE``, or ``IDEMPOTENT`` with an ``Idempotency-Key`` where its upstream opted in:
rule 8 would let it go again anyway); the handshake's failure (or its limit) sends the
origin over TCP (marked broken, or pending while a slow handshake goes on), so it happens
once per handshake, not once per request; and counting it would make early data cost a call
its answer (with early data off, the same GET falls back uncounted). The trail keeps the
early try with its evidence and ``decision`` ``None``. Rejected: counting it as a retry (a
backoff, the budget, ``max_attempts``), which failed a ``max_attempts=1`` GET that TCP served.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeAlias, runtime_checkable

from .decision import AmbiguousFailure as AmbiguousFailure
from .decision import Decision as Decision
from .decision import DenyReason as DenyReason
from .decision import RetryAllowed as RetryAllowed
from .decision import RetryDenied as RetryDenied
from .decision import is_ambiguous
from .evidence import Evidence, FailureCategory
from .idempotency import Idempotency
from .reconcile import ReconcileOutcome
from .replay import Replayability
from .slots import slot_constructor

__all__ = [
    "BEFORE_RULES",
    "FINAL_BELOW",
    "MAX_RECONNECTS",
    "RULES",
    "Action",
    "AttemptFacts",
    "NotConsulted",
    "Then",
    "AmbiguousFailure",
    "Decision",
    "DefaultRetryEligibilityEngine",
    "DenyReason",
    "RetryAllowed",
    "RetryContext",
    "RetryDenied",
    "RetryEligibilityEngine",
    "asks_reconciler",
    "build_context",
    "final_response",
    "not_consulted",
]

#: How many times one call may send an attempt again on a fresh connection without counting
#: it (:attr:`NotConsulted.RECONNECT`); past that, such a failure counts as an attempt.
MAX_RECONNECTS = 3


class Then(enum.Enum):
    """What follows a decision taken without the engine (:attr:`Action.then`)."""

    ANSWER = "the response is the call's answer"
    SEND_AGAIN = "the request goes again at once: no budget, no backoff"
    ASK_AUTH = "the request goes again at once if the auth answers; else the engine decides"
    END = "the call ends on this failure"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True, kw_only=True)
class Action:
    """What the client does on a :class:`NotConsulted` decision (its value).

    ``counted``: the try counts against ``max_attempts`` (and the backoff's count) when the
    request goes again; ``learns``: the origin's breaker, throttle and hedging ledger learn
    from it (else a breaker probe slot it held is given back: the connection refused it, not
    the upstream). A ``SEND_AGAIN`` try counts against :data:`MAX_RECONNECTS`."""

    why: str
    then: Then
    counted: bool
    learns: bool


class NotConsulted(enum.Enum):
    """Why the engine was not consulted after an attempt (the module docstring, 0-4), each
    with its :class:`Action` (:attr:`action`)."""

    FINAL_RESPONSE = Action(
        why="a response below 400 is the call's answer", then=Then.ANSWER, counted=True, learns=True
    )
    RECONNECT = Action(
        why="refused by the connection, not the request: sent again on a fresh one",
        then=Then.SEND_AGAIN,
        counted=False,
        learns=False,
    )
    ENDS_CALL = Action(
        why="the failure ends the call: trying again would meet it again",
        then=Then.END,
        counted=True,
        learns=True,
    )
    AUTH_CHALLENGE = Action(
        why="an auth challenge to answer: sent again with credentials",
        then=Then.ASK_AUTH,
        counted=False,
        learns=True,
    )
    TOO_EARLY = Action(
        why="425 Too Early to a request sent in early data: sent again after the handshake",
        then=Then.SEND_AGAIN,
        counted=False,
        learns=False,
    )

    @property
    def action(self) -> Action:
        """What the client does on this decision."""
        action: Action = self.value
        return action

    def __str__(self) -> str:
        return self.action.why


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptFacts:
    """What :func:`not_consulted` looks at, about the attempt just finished."""

    status: int | None  # a response's status (``None``: a failure)
    reconnect: bool = False  # the failure is the connection's refusal (``WireError.reconnect``)
    reconnects: int = 0  # uncounted reconnects this call made already
    ends_call: bool = False  # the failure ends the call (``WireError.ends_call``)
    replayable: bool = True  # the body can be sent again
    draining: bool = False
    challenge: bool = False  # the call's auth may answer a 401's challenge (not yet answered)
    early_data: bool = False  # the attempt went in HTTP/3 early data


#: Rule 0 of :data:`BEFORE_RULES`: a response whose status is below this is the call's answer.
#: The client's success path compares with it directly (no facts built, no call).
FINAL_BELOW = 400


def final_response(status: int) -> bool:
    """Rule 0 of :data:`BEFORE_RULES`: a response below :data:`FINAL_BELOW` is the call's
    answer."""
    return status < FINAL_BELOW


def _before_final(facts: AttemptFacts) -> bool:
    return facts.status is not None and final_response(facts.status)


def _before_reconnect(facts: AttemptFacts) -> bool:
    return (
        facts.reconnect
        and facts.reconnects < MAX_RECONNECTS
        and facts.replayable
        and not facts.draining
    )


def _before_ends_call(facts: AttemptFacts) -> bool:
    return facts.ends_call


def _before_challenge(facts: AttemptFacts) -> bool:
    return facts.status == 401 and facts.challenge and facts.replayable


def _before_too_early(facts: AttemptFacts) -> bool:
    return (
        facts.status == 425
        and facts.early_data
        and facts.reconnects < MAX_RECONNECTS
        and facts.replayable
        and not facts.draining
    )


#: The "not consulted" decisions, in order: the first whose test holds wins.
BEFORE_RULES: tuple[tuple[NotConsulted, Callable[[AttemptFacts], bool]], ...] = (
    (NotConsulted.FINAL_RESPONSE, _before_final),
    (NotConsulted.RECONNECT, _before_reconnect),
    (NotConsulted.ENDS_CALL, _before_ends_call),
    (NotConsulted.AUTH_CHALLENGE, _before_challenge),
    (NotConsulted.TOO_EARLY, _before_too_early),
)


def not_consulted(facts: AttemptFacts) -> NotConsulted | None:
    """Which :class:`NotConsulted` decision applies to an attempt, or ``None``: then the
    engine decides (on a :class:`RetryContext`). Pure."""
    for decision, applies in BEFORE_RULES:
        if applies(facts):
            return decision
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryContext:
    """Everything the engine may look at, frozen. Built by the client after each attempt.

    ``attempt`` is the number of the attempt just finished (1-based). ``proposed_delay`` is the
    delay the client would wait (its backoff, raised to ``retry_after`` when present).
    ``auth_refreshable`` says whether a 401 can be answered by a refresh (False when the client
    has no ``auth``). ``fresh_connection`` says whether the attempt ran on a connection opened
    for it (no earlier exchange on it); ``False`` when unknown or reused. ``continuable``
    says whether the response body that broke can be continued from where it stopped (a
    ranged request for the rest: the module docstring, rule 4's exception).

    ``keyed``: the request carries an ``Idempotency-Key``. ``key_expires_in``: seconds until
    that key may have expired at the server, when the request's safety rests on it and an
    attempt may have reached the server (``None`` otherwise). ``reconciled``: what the call's
    reconciler said of this attempt (``None``: not asked; the engine is asked again with
    ``NOT_EXECUTED``).
    """

    attempt: int
    max_attempts: int
    budget_available: bool = True
    replayability: Replayability = Replayability.REPLAYABLE
    response_delivered: bool = False
    draining: bool = False
    remaining_deadline: float | None = None
    min_attempt_budget: float = 0.05
    failure: FailureCategory | None = None
    evidence: Evidence = Evidence.RESPONSE_RECEIVED
    idempotency: Idempotency = Idempotency.SAFE
    status: int | None = None
    retry_after: float | None = None
    transient_500: bool = False
    proposed_delay: float = 0.0
    max_backoff: float = math.inf
    auth_refreshed: bool = False
    retried_425: bool = False
    auth_refreshable: bool = True
    fresh_connection: bool = False
    continuable: bool = False
    keyed: bool = False
    key_expires_in: float | None = None
    reconciled: ReconcileOutcome | None = None

    @property
    def delay(self) -> float:
        """The wait before the next attempt: never earlier than the server's Retry-After."""
        if self.retry_after is None:
            return self.proposed_delay
        return max(self.proposed_delay, self.retry_after)


#: ``RetryContext(...)``, faster, for the client's failure path (see :func:`slot_constructor`).
build_context: Callable[..., RetryContext] = slot_constructor(RetryContext)


Rule: TypeAlias = Callable[[RetryContext], Decision | None]


@runtime_checkable
class RetryEligibilityEngine(Protocol):
    """Anything with a pure ``decide(ctx)``; the client consults it after every failed attempt."""

    def decide(self, ctx: RetryContext) -> Decision: ...


# --- the rules, in order ---------------------------------------------------------------------


def _rule_max_attempts(ctx: RetryContext) -> Decision | None:
    if ctx.attempt >= ctx.max_attempts:
        return RetryDenied.max_attempts(retry_after=ctx.retry_after)
    return None


def _rule_budget(ctx: RetryContext) -> Decision | None:
    if not ctx.budget_available:
        return RetryDenied.budget_exhausted(retry_after=ctx.retry_after)
    return None


def _rule_body(ctx: RetryContext) -> Decision | None:
    if not ctx.replayability.replayable:
        return RetryDenied.body_not_replayable(retry_after=ctx.retry_after)
    return None


def _rule_delivered(ctx: RetryContext) -> Decision | None:
    # A continuation delivers no byte twice: rule 4's exception (the module docstring).
    if ctx.response_delivered and not ctx.continuable:
        return RetryDenied.response_already_delivered(retry_after=ctx.retry_after)
    return None


def _rule_draining(ctx: RetryContext) -> Decision | None:
    if ctx.draining:
        return RetryDenied.runtime_draining(retry_after=ctx.retry_after)
    return None


def _rule_deadline(ctx: RetryContext) -> Decision | None:
    if ctx.remaining_deadline is not None:
        if ctx.remaining_deadline - ctx.delay < ctx.min_attempt_budget:
            return RetryDenied.deadline(retry_after=ctx.retry_after)
    return None


def _rule_permanent(ctx: RetryContext) -> Decision | None:
    if ctx.failure is not None and ctx.failure.permanent:
        return RetryDenied.permanent_failure(ctx.failure, retry_after=ctx.retry_after)
    return None


def _rule_ambiguous(ctx: RetryContext) -> Decision | None:
    if ctx.reconciled is ReconcileOutcome.NOT_EXECUTED:
        return None  # the reconciler's word: rule 9 judges it as NOT_SENT
    if is_ambiguous(ctx.evidence, ctx.idempotency):
        return AmbiguousFailure(ctx.evidence, ctx.status)
    return None


def _allow(ctx: RetryContext) -> Decision:
    """Allow after ``ctx.delay`` unless the server's Retry-After exceeds the backoff maximum,
    or the request's Idempotency-Key may have expired by then (the module docstring)."""
    if ctx.key_expires_in is not None and ctx.key_expires_in <= ctx.delay:
        return AmbiguousFailure(ctx.evidence, ctx.status, key_expired=True)
    if ctx.retry_after is not None and ctx.retry_after > ctx.max_backoff:
        return RetryDenied.retry_after_too_long(ctx.retry_after)
    return RetryAllowed(ctx.delay)


def _rule_status(ctx: RetryContext) -> Decision | None:
    """Rule 9 for responses (``failure is None``).

    408/425/429 mean the server did not process the request, so idempotency does not matter;
    409 to a keyed request, that the key is still being processed (retried with it). A
    502/503/504 to a request the reconciler said was not executed is retried.
    """
    status = ctx.status
    if status is None or ctx.failure is not None:
        return None
    safe = ctx.idempotency.safely_idempotent or ctx.reconciled is ReconcileOutcome.NOT_EXECUTED
    if status in (408, 429) or (status == 409 and ctx.keyed):
        return _allow(ctx)
    if status == 425:
        return _allow(ctx) if ctx.attempt == 1 and not ctx.retried_425 else _deny(ctx)
    if status == 401:
        ok = (
            ctx.idempotency is Idempotency.SAFE
            and ctx.replayability.replayable
            and ctx.auth_refreshable
            and not ctx.auth_refreshed
        )
        return _allow(ctx) if ok else _deny(ctx)
    if status == 500:
        return _allow(ctx) if ctx.transient_500 and safe else _deny(ctx)
    if status in (502, 503, 504):
        return _allow(ctx) if safe else AmbiguousFailure(ctx.evidence, status)
    return _deny(ctx)


def _rule_transport(ctx: RetryContext) -> Decision | None:
    """Rule 9 for transport failures (``status is None``).

    A response that is not valid HTTP on a fresh connection is denied (the module docstring:
    the same server will answer the same way). Otherwise NOT_SENT is retried whatever the
    idempotency: the server never saw it. A safely idempotent operation is retried after
    SENT_NO_RESPONSE or PARTIAL_RESPONSE; a non-idempotent one after PARTIAL_RESPONSE is denied
    (the side effect happened and its outcome is known to be lost).
    """
    if ctx.status is not None or ctx.failure is None:
        return None
    if ctx.failure is FailureCategory.REMOTE_PROTOCOL and ctx.fresh_connection:
        return _deny(ctx)
    if ctx.evidence is Evidence.NOT_SENT or ctx.reconciled is ReconcileOutcome.NOT_EXECUTED:
        return _allow(ctx)
    if ctx.evidence in (Evidence.SENT_NO_RESPONSE, Evidence.PARTIAL_RESPONSE):
        return _allow(ctx) if ctx.idempotency.safely_idempotent else _deny(ctx)
    return _deny(ctx)


def _deny(ctx: RetryContext) -> Decision:
    return RetryDenied.not_retryable(retry_after=ctx.retry_after)


#: The rule order, as data. The first rule that returns a decision wins.
RULES: tuple[Rule, ...] = (
    _rule_max_attempts,
    _rule_budget,
    _rule_body,
    _rule_delivered,
    _rule_draining,
    _rule_deadline,
    _rule_permanent,
    _rule_ambiguous,
    _rule_status,
    _rule_transport,
    _deny,
)


def asks_reconciler(decision: Decision, may_have_run: bool) -> bool:
    """Whether a call with a reconciler asks it after ``decision`` (the module docstring,
    "Reconciliation"): the decision would end the call ambiguous. ``may_have_run``: the
    attempt failed, and the call's evidence says a request that is not safely idempotent may
    have been executed (``is_ambiguous``). Pure."""
    if isinstance(decision, AmbiguousFailure):
        return True
    return may_have_run and not isinstance(decision, RetryAllowed)


class DefaultRetryEligibilityEngine:
    """The engine of SPEC §6: walks :data:`RULES` in order; the first decision wins."""

    __slots__ = ("rules",)

    def __init__(self, rules: tuple[Rule, ...] = RULES) -> None:
        self.rules = rules

    def decide(self, ctx: RetryContext) -> Decision:
        """Pure: the same context always yields the same decision."""
        for rule in self.rules:
            decision = rule(ctx)
            if decision is not None:
                return decision
        raise AssertionError("the last rule always decides")  # pragma: no cover

    def __repr__(self) -> str:
        return f"DefaultRetryEligibilityEngine({len(self.rules)} rules)"
