"""The retry loop and the redirect chain of one call.

One call runs this loop (:func:`send`):

1. admission: a draining client admits no new call (``AdmissionRejected``, ``NOT_SENT``);
2. an attempt: an :class:`~.attempt.AttemptRun` (or, for a hedged call, the copies of
   :func:`~.hedge.hedged_attempt`, each its own run) within the call's deadline, numbered
   as it starts (the tries started before it, plus one: every try has its number, counted or
   not); it returns an :class:`~.result.AttemptResult`, a value this loop reads and never
   writes into; the wire keeps its ``AttemptProgress`` current, so however the attempt ends
   the stage reached is known; the origin's breaker, throttle and hedging ledger learn from
   it (:func:`~.hedge.learn`);
3. the :class:`Attempt` record, told of (:mod:`.notify`; a call's one buffered attempt that
   nobody watches has its record built when ``Response.attempts`` is first read);
4. whether to send again, decided by the engine's file (``_core/engine.py``) alone: first
   its "not consulted" decisions (a response below 400 is the answer; a connection's
   refusal goes again uncounted; a failure that ends the call; an auth challenge to answer),
   each carrying the action this loop executes (``NotConsulted.action``), else the engine on
   a ``RetryContext``; where its decision would end the call ambiguous, the call's
   reconciler is asked (:mod:`.reconcile`; ``asks_reconciler``) and, if it says "not
   executed", the engine decides again. On ``RetryAllowed`` the attempt has *already* given back its
   connection and its bulkhead permit; the budget is debited and the backoff sleeps — never
   past the call deadline, and cut short by ``drain()``;
5. the end: a response, ``HttpAmbiguousExecutionError`` or a ``RequestFailed`` subclass
   (:mod:`.answer`, with :mod:`.failures`).

:func:`send_following` wraps it with redirects: the call's deadline spans the whole chain.
Outer cancellation is never caught: only the client's own scopes (the call deadline, the client
closing) are turned into errors, and each of those carries the evidence of the stage reached.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, cast

import trio

from .._auth import auth_request
from .._core.attempt import Attempt
from .._core.decision import Decision, RetryAllowed, RetryDenied, is_ambiguous
from .._core.engine import (
    FINAL_BELOW,
    AttemptFacts,
    RetryContext,
    Then,
    asks_reconciler,
    build_context,
    not_consulted,
)
from .._core.errors import RejectReason
from .._core.evidence import Evidence, FailureCategory
from .._core.idempotency import method_default
from .._core.reconcile import ReconcileOutcome
from .._core.reconcile import Reconciler as AnyReconciler
from .._errors import AdmissionRejected, TooManyRedirects
from .._models import Headers, Response, shown_url
from .._reconcile import Reconciler
from .._redirects import REDIRECT_STATUSES
from .._wire.clock import effective_deadline, wait_for
from .._wire.exchange import WireResponse
from .._wire.progress import AttemptProgress, WireError
from .answer import Closer, buffered, counted, deliver, finish, response_of
from .attempt import AttemptRun
from .body import REDIRECT_CLOSED
from .client_options import RefreshableAuth
from .failures import call_evidence, failure
from .hedge import hedge_ledger, hedged_attempt, learn
from .notify import notify, told, watched
from .prepare import PreparedRequest, prepare_redirect
from .reconcile import ask, executed
from .result import AttemptResult
from .runtime import Runtime
from .upstream import UpstreamState

if TYPE_CHECKING:
    from .._core.hedging import HedgeLedger

__all__ = ["send", "send_following"]

#: (a global: on Python 3.11 an enum class attribute costs a ``__getattr__`` hook)
_RECEIVED = Evidence.RESPONSE_RECEIVED
_NOT_SENT = Evidence.NOT_SENT
#: A call's trail before its first attempt ended (``send``): empty, and never written to (a
#: tuple: an append would fail loudly, not add to every call's).
_NONE_YET = cast("list[Attempt]", ())


async def send_following(
    rt: Runtime, request: PreparedRequest, *, streaming: bool
) -> tuple[Response, Closer | None]:
    """:func:`send`, then follow redirects when the request asks: the call's deadline spans
    the chain; more than ``max_redirects`` hops raise ``TooManyRedirects``."""
    if not request.follow_redirects:
        return await send(rt, request, streaming=streaming)
    history: list[Response] = []
    max_redirects = rt.config.max_redirects
    while True:
        response, closer = await send(rt, request, streaming=streaming)
        location = (
            response.headers.get("location") if response.status in REDIRECT_STATUSES else None
        )
        if location is None:
            response.history = history
            return response, closer
        if closer is not None:  # a streamed redirect: its body is not wanted
            closer(REDIRECT_CLOSED)
        history.append(response)
        if len(history) > max_redirects:
            raise TooManyRedirects(
                f"{request.method} {history[0].url}: more than max_redirects "
                f"({max_redirects}) redirects; the last pointed to "
                f"{shown_url(location, loose=True)}",
                history=history,
            )
        request = prepare_redirect(request, response, location)


async def send(
    rt: Runtime, request: PreparedRequest, *, streaming: bool, first_hop: bool = False
) -> tuple[Response, Closer | None]:
    """Attempts of one request until a response, a denial or a failure: the five steps of
    the module docstring, in order.

    ``first_hop``: the request was prepared just now, so its ``started`` is also the start of
    its first attempt (one clock read fewer); a redirect hop reads the clock."""
    if rt.draining:  # 1. admission
        closed = rt.closed  # (a redirect hop after aclose())
        raise AdmissionRejected(
            f"{request.method} {request.url} not admitted: the client is "
            + ("closed" if closed else "draining"),
            reason=RejectReason.CLOSED if closed else RejectReason.DRAINING,
            evidence=Evidence.NOT_SENT,
            category=FailureCategory.ADMISSION,
        )
    rt.calls += 1
    state = rt.upstreams.get(request.url.origin)
    started = request.started if first_hop else rt.now()
    state.budget.deposit(started)
    hedged = request.hedging is not None or state.upstream.hedging is not None
    ledger = hedge_ledger(request, state, started) if hedged else None
    guarded = state.guarded or ledger is not None
    # The call's trail, made when its first attempt ends (a hedged call's at once: its copies
    # add to it), so that a call waiting for its first connection holds no list (issue #41).
    attempts = [] if ledger is not None else _NONE_YET
    retries: _Retries | None = None  # the failure path's state, made at the first failure

    while True:
        # 2. an attempt, numbered after every try the call started (each is in the trail)
        number = len(attempts) + 1
        progress = AttemptProgress(started if not attempts else rt.now())
        if attempts and attempts[-1].status == 425 and attempts[-1].early_data is not None:
            progress.late_only = True  # RFC 8470 §5.2: after the handshake this time
        if ledger is not None:
            result = await hedged_attempt(
                rt, request, state, progress, streaming, attempts, ledger, number
            )
        else:
            run = AttemptRun(rt, request, state, progress, streaming, number)
            attempt = run.start()
            if attempt is None:  # no connection ready: queued in the pool, parked here
                try:
                    await run
                except BaseException:
                    run.leave_queue()
                    raise
                attempt = run.served()
            result = await attempt
            if attempts is _NONE_YET:
                attempts = []
        ended = rt.now()
        wire = result.response
        if wire is not None and result.error is None and wire.status < FINAL_BELOW:
            # 3, 5: NotConsulted.FINAL_RESPONSE: the record, and the caller's response.
            if guarded:
                learn(state, result, None, None, ledger)
            if not attempts and result.body is not None and not watched(rt, request):
                # The call's one attempt, buffered, and nobody to tell of it: its record is
                # built when Response.attempts is first read (from the result, a value).
                first = partial(result.record, _RECEIVED, None, ended)
                return response_of(request, result, None, None, ended, first), None
            return await _answer(rt, request, result, attempts, ended, streaming, state, retries)
        # 4. whether to send again: the engine's file decides (and the attempt is recorded).
        if retries is None:
            retries = _Retries(rt, request, state, ledger)
        decision = await retries.decide(result, attempts, ended)
        if decision is None:
            continue  # sent again at once, uncounted (a reconnect, an answered challenge)
        if retries.executed:  # its reconciler said it ran: never sent again
            return executed(request, attempts), None
        if isinstance(decision, RetryAllowed):
            denied = await retries.wait(decision, attempts[-1])
            if denied is None:
                continue
            decision = denied
        return finish(request, result, attempts, decision)  # 5


async def _answer(
    rt: Runtime,
    request: PreparedRequest,
    result: AttemptResult,
    attempts: list[Attempt],
    ended: float,
    streaming: bool,
    state: UpstreamState,
    retries: _Retries | None,
) -> tuple[Response, Closer | None]:
    """The call's response from an attempt answered below 400, and the attempt's record
    (told of). (A call's one buffered attempt that nobody watches is answered in
    :func:`send` itself, with no coroutine of this one.)"""
    attempts.append(result.record(_RECEIVED, None, ended))
    try:
        if (pending := notify(rt, attempts[-1], request)) is not None:
            await pending
    except BaseException:
        # A raising on_attempt, or outer cancellation while it ran: the streamed response
        # will not be handed over, so its connection and permit go back now.
        if result.held is not None:
            result.held.end()
        raise
    if result.body is not None:
        return response_of(request, result, attempts, None, ended), None

    def retrier() -> _Retries:  # the call's retry state (made once, at its first failure)
        return retries or _Retries(rt, request, state, None)

    if not streaming:  # a buffered body left unread: it can be continued if it breaks
        return await buffered(rt, request, result, attempts, state, retrier), None
    return deliver(rt, request, result, attempts, state, retrier)


class _Retries:
    """A call's state once an attempt failed (or answered 400 or more): what the engine's
    file is told, and what follows its decision. Made at the first failure, so that a call
    answered at once pays nothing for it."""

    __slots__ = (
        "_auth_refreshed",
        "_challenged",
        "_ended",
        "_guarded",
        "_ledger",
        "_previous_delay",
        "_reconnects",
        "_request",
        "_retried_425",
        "_retry_after",
        "_rt",
        "_state",
        "_uncounted",
        "deadline",
        "executed",
    )

    def __init__(
        self,
        rt: Runtime,
        request: PreparedRequest,
        state: UpstreamState,
        ledger: HedgeLedger | None,
    ) -> None:
        self._rt = rt
        self._request = request
        self._state = state
        self._ledger = ledger
        self._guarded = state.guarded or ledger is not None
        self._previous_delay: float | None = None
        self._auth_refreshed = self._retried_425 = self._challenged = False
        self._reconnects = 0  # tries sent again at once (Then.SEND_AGAIN): MAX_RECONNECTS
        self._uncounted = 0  # tries sent again without counting (Action.counted False)
        self._retry_after: float | None = None
        self._ended = 0.0  # when the attempt the engine decided on ended
        #: The call's deadline, or the caller's own if earlier (read when deciding: it costs
        #: a walk up the cancel-scope chain).
        self.deadline = math.inf
        #: The reconciler said the last attempt was executed: the call ends with its answer.
        self.executed = False

    async def decide(
        self,
        result: AttemptResult,
        attempts: list[Attempt],
        ended: float,
        continuation: bool = False,
        delivered: bool = False,
    ) -> Decision | None:
        """What follows the finished attempt ``result``, its record appended to ``attempts``
        (and told: ``on_attempt``, the log, the span): ``None`` to send again at once,
        uncounted (``NotConsulted.RECONNECT``, an answered ``AUTH_CHALLENGE``), or the
        engine's decision. Raises the call's exception for ``NotConsulted.ENDS_CALL``.
        ``continuation``: ``result`` asked for the rest of a broken body (``_call/resume.py``):
        continuable, and ``delivered`` when the caller has read its beginning.

        A "not consulted" decision is executed as its action says (``NotConsulted.action``:
        what follows, whether the try counts, whether the upstream learns from it); nothing
        here derives it again."""
        rt = self._rt
        request = self._request
        wire = result.response
        error = result.error
        evidence, category, retry_after = result.observe(rt.config.wall_clock)
        self._retry_after = retry_after
        skip = not_consulted(
            AttemptFacts(
                status=wire.status if wire is not None and error is None else None,
                reconnect=isinstance(error, WireError) and error.reconnect,
                reconnects=self._reconnects,
                ends_call=isinstance(error, WireError) and error.ends_call,
                replayable=request.body.replayability.replayable,
                draining=rt.draining,
                challenge=not self._challenged and _may_answer_challenge(request),
                early_data=result.progress.early_data is not None,
            )
        )
        action = skip.action if skip is not None else None
        if action is None or action.learns:
            if self._guarded:
                learn(self._state, result, category, retry_after, self._ledger)
        else:
            # The connection refused it, not the upstream: the breaker learns nothing, but a
            # probe slot the attempt held is given back.
            self._state.guard.release(result.admission)
        if action is not None:
            then: Then | None = action.then
            assert then is not Then.ANSWER  # (answered in send(), before any facts)
            if then is Then.ASK_AUTH:
                if await _answer_challenge(request, wire):
                    self._challenged = True  # (once per call)
                else:
                    then = None  # the auth declined: the engine decides after all
            if then is not None:
                await told(rt, request, attempts, result.record(evidence, category, ended))
                if then is Then.END:
                    assert error is not None
                    raise counted(request, failure(request, attempts, error, None))
                if then is Then.SEND_AGAIN:
                    self._reconnects += 1
                if not action.counted:
                    self._uncounted += 1
                return None  # sent again at once, no budget, no backoff
        status = wire.status if wire is not None and category is None else None
        fresh = not result.progress.connection_reused
        context = self._context(
            attempts, ended, evidence, category, status, fresh, continuation, delivered
        )
        decision = rt.config.engine.decide(context)
        reconciler = request.reconcile or self._state.upstream.reconcile
        if reconciler is not None and asks_reconciler(
            decision,
            error is not None
            and is_ambiguous(
                evidence if evidence is not _NOT_SENT else call_evidence(attempts),
                request.idempotency,
            ),
        ):
            doubt = result.record(evidence, category, ended, decision)
            return await self._reconcile(reconciler, doubt, attempts, context)
        # Built once, with its decision (a dataclasses.replace would build it twice).
        await told(rt, request, attempts, result.record(evidence, category, ended, decision))
        return decision

    async def broke(
        self,
        failed: Attempt,
        attempts: list[Attempt],
        ended: float,
        delivered: bool,
        restart: tuple[Evidence, FailureCategory] | None = None,
    ) -> Decision:
        """The engine's decision on a body that broke and can be continued
        (``_call/resume.py``; ``delivered``: the caller has read its beginning): ``failed``
        (the broken attempt's record) replaces its head's record at the end of ``attempts``,
        with the decision (not told again: its head was). ``restart``: ``failed`` is a
        continuation whose answer was not the same body, and the body that broke with this
        evidence and category starts again (nothing of it reached the caller)."""
        self._retry_after = None
        attempts.pop()
        evidence, category = restart or (failed.evidence, failed.category)
        context = self._context(
            attempts, ended, evidence, category, None,
            not failed.connection_reused, restart is None, delivered,
        )  # fmt: skip
        decision = self._rt.config.engine.decide(context)
        attempts.append(replace(failed, decision=decision))
        return decision

    async def tell(self, attempts: list[Attempt], attempt: Attempt) -> None:
        """Append ``attempt`` to the call's trail and tell of it."""
        await told(self._rt, self._request, attempts, attempt)

    async def _reconcile(
        self,
        reconciler: Reconciler | AnyReconciler,
        doubt: Attempt,
        attempts: list[Attempt],
        context: RetryContext,
    ) -> Decision:
        """Ask the call's reconciler about ``doubt`` (the attempt just finished, on which the
        engine decided ``doubt.decision``) and act on its answer: *not executed*, the engine
        decides again; *executed*, :attr:`executed` (the call ends with its answer); else the
        decision stands. The attempt is recorded (and told) with the answer."""
        rt = self._rt
        assert doubt.decision is not None
        decision = doubt.decision
        reconciled = await ask(
            reconciler, self._request, [*attempts, doubt], context.status, self.deadline
        )
        if reconciled.outcome is ReconcileOutcome.NOT_EXECUTED:
            # Decided on the time left now: the reconciler spent some of it (on the context's
            # own, from when the attempt ended, a POST went again with too little left to
            # be reconciled in turn, and was in doubt at the deadline).
            now = self._ended = rt.now()
            remaining = self.deadline - now
            decision = rt.config.engine.decide(
                replace(
                    context,
                    reconciled=ReconcileOutcome.NOT_EXECUTED,
                    remaining_deadline=remaining if math.isfinite(remaining) else None,
                    budget_available=self._state.budget.available(now),
                )
            )
        elif reconciled.outcome is ReconcileOutcome.EXECUTED:
            self.executed = True
        record = replace(doubt, decision=decision, reconciled=reconciled)
        await told(rt, self._request, attempts, record)
        return decision

    def _context(
        self,
        attempts: list[Attempt],
        now: float,
        evidence: Evidence,
        category: FailureCategory | None,
        status: int | None,
        fresh: bool,
        continuation: bool,
        delivered: bool,
    ) -> RetryContext:
        """The engine's view of the call after an attempt (its evidence, category and status,
        whether its connection was fresh, the backoff it would wait, the deadline left at
        ``now``; ``continuation``: the rest of a broken body, ``delivered``: whose beginning the
        caller has read)."""
        request = self._request
        state = self._state
        policy = request.retry
        backoff = policy.backoff
        retry_after = self._retry_after
        self._ended = now
        counted = len(attempts) + 1 - self._uncounted  # attempts so far, hedges included
        proposed = backoff.delay(counted, self._rt.config.rng, self._previous_delay)
        if retry_after is not None:
            proposed = max(proposed, retry_after)
        self.deadline = effective_deadline(request.deadline)
        remaining = self.deadline - now
        key = request.idempotency_key
        key_expires_in = None
        ttl = state.upstream.idempotency_key_ttl
        if (
            key is not None
            and ttl is not None
            and not method_default(request.method).safely_idempotent
            and (
                evidence is not Evidence.NOT_SENT
                or call_evidence(attempts) is not Evidence.NOT_SENT
            )
        ):
            # The key's lifetime counts from its first use by this client (a replay included).
            first = self._rt.keys.first_used(key)
            key_expires_in = (first if first is not None else request.started) + ttl - now
        return build_context(  # RetryContext(...), built faster
            attempt=counted,
            max_attempts=policy.max_attempts,
            budget_available=state.budget.available(now),
            replayability=request.body.replayability,
            response_delivered=delivered,
            draining=self._rt.draining,
            remaining_deadline=remaining if math.isfinite(remaining) else None,
            min_attempt_budget=policy.min_attempt_budget,
            failure=category,
            evidence=evidence,
            idempotency=request.idempotency,
            status=status,
            retry_after=retry_after,
            transient_500=state.upstream.transient_500,
            proposed_delay=proposed,
            max_backoff=backoff.max,
            auth_refreshed=self._auth_refreshed,
            retried_425=self._retried_425,
            # Only while the credentials apply to this request: never for another origin's
            # 401 after a redirect (SPEC §10).
            auth_refreshable=isinstance(request.auth, RefreshableAuth) and request.apply_auth,
            fresh_connection=fresh,
            continuable=continuation,
            keyed=key is not None,
            key_expires_in=key_expires_in,
            reconciled=None,
        )

    async def wait(self, decision: RetryAllowed, attempt: Attempt) -> Decision | None:
        """After ``RetryAllowed``: debit the budget, wait the backoff (never past the
        deadline; the attempt has already returned its connection and its permit), refresh
        the auth after a 401. ``None`` to go on; ``RetryDenied.runtime_draining()`` when
        ``drain()`` cut the wait short."""
        rt = self._rt
        self._state.budget.try_withdraw(self._ended)
        if not await _backoff(rt, decision.delay, self.deadline):
            return RetryDenied.runtime_draining(retry_after=self._retry_after)
        self._previous_delay = decision.delay
        request = self._request
        auth = request.auth
        if (
            attempt.status == 401
            and attempt.category is None
            and isinstance(auth, RefreshableAuth)
            and request.apply_auth
        ):
            await auth.refresh()
            self._auth_refreshed = True
        if attempt.status == 425 and attempt.category is None:
            self._retried_425 = True
        return None


def _may_answer_challenge(request: PreparedRequest) -> bool:
    """Whether the call's auth answers challenges (``RequestAuth.challenge``) and applies to
    this request (never after leaving the origin)."""
    return getattr(request.auth, "challenge", None) is not None and request.apply_auth


async def _answer_challenge(request: PreparedRequest, wire: WireResponse | None) -> bool:
    """Whether the call's auth answered this 401's challenge (``RequestAuth.challenge``), so
    that the request may go again with credentials."""
    challenge = getattr(request.auth, "challenge", None)
    assert challenge is not None
    assert wire is not None
    answered: bool = await challenge(auth_request(request), Headers.from_wire(wire.headers))
    return answered


async def _backoff(rt: Runtime, delay: float, deadline: float) -> bool:
    """Sleep ``delay`` (never past ``deadline``); False if drain() cut it short."""
    if rt.draining:
        return False
    if delay <= 0:  # no timer needed: just let other tasks run (and outer cancellation in)
        await trio.lowlevel.checkpoint()
        return not rt.draining
    await wait_for(rt.drain_event, delay, deadline)
    return not rt.draining
