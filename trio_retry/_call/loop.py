"""The retry loop and the redirect chain of one call.

One call runs this loop (:func:`send`):

1. admission: a draining client admits no new call (``AdmissionRejected``, ``NOT_SENT``);
2. an attempt: an :class:`~.attempt.AttemptRun` (or, for a hedged call, the copies of
   :func:`~.hedge.hedged_attempt`, each its own run) within the call's deadline; the wire
   keeps its ``AttemptProgress`` current, so however the attempt ends the stage reached is
   known; the origin's breaker, throttle and hedging ledger learn from it
   (:func:`~.hedge.learn`);
3. the :class:`Attempt` record (a call's one buffered attempt that nobody watches has its
   record built when ``Response.attempts`` is first read);
4. whether to send again, decided by the engine's file (``_core/engine.py``) alone: first
   its "not consulted" decisions (a response below 400 is the answer; a connection's
   refusal goes again uncounted; a failure that ends the call; an auth challenge to answer),
   else the engine on a ``RetryContext``. On ``RetryAllowed`` the attempt has *already*
   given back its connection and its bulkhead permit; the budget is debited and the backoff
   sleeps — never past the call deadline, and cut short by ``drain()``;
5. the end: a response, ``HttpAmbiguousExecutionError`` or a ``RequestFailed`` subclass
   (:mod:`.failures`).

:func:`send_following` wraps it with redirects: the call's deadline spans the whole chain.
Outer cancellation is never caught: only the client's own scopes (the call deadline, the client
closing) are turned into errors, and each of those carries the evidence of the stage reached.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

import trio

from .._auth import auth_request
from .._core.attempt import Attempt
from .._core.decision import AmbiguousFailure, Decision, RetryAllowed, RetryDenied
from .._core.engine import (
    FINAL_BELOW,
    AttemptFacts,
    NotConsulted,
    RetryContext,
    build_context,
    not_consulted,
)
from .._core.errors import RejectReason
from .._core.evidence import Evidence, FailureCategory
from .._errors import AdmissionRejected, HttpAmbiguousExecutionError, TooManyRedirects
from .._models import Headers, Response, shown_url
from .._redirects import REDIRECT_STATUSES
from .._wire.exchange import WireResponse
from .._wire.progress import AttemptProgress, WireError
from .attempt import AttemptRun
from .body import REDIRECT_CLOSED, CheckedDecoder, StreamedBody
from .config import RefreshableAuth
from .failures import ambiguous_status, failure
from .hedge import hedge_ledger, hedged_attempt, learn
from .prepare import PreparedRequest, prepare_redirect
from .resume import carry
from .runtime import Runtime
from .upstream import UpstreamState

if TYPE_CHECKING:
    from .._core.hedging import HedgeLedger

__all__ = ["Closer", "send", "send_following"]

logger = logging.getLogger("trio_retry")

#: (a global: on Python 3.11 an enum class attribute costs a ``__getattr__`` hook)
_RECEIVED = Evidence.RESPONSE_RECEIVED

#: Ends a streamed response (``StreamedBody.close``): gives its connection back (reusable if
#: the body was read to the end) and its permit; reading on after it raises ``StreamClosed``
#: with the message given (what closed it). ``None`` for a buffered response, which holds
#: nothing.
Closer = Callable[[str], None]


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
    attempts: list[Attempt] = []
    retries: _Retries | None = None  # the failure path's state, made at the first failure

    while True:
        # 2. an attempt (answered auth challenges are in the trail, not numbered)
        number = len(attempts) + 1 - (retries.challenges if retries is not None else 0)
        progress = AttemptProgress(started if not attempts else rt.now())
        if attempts and attempts[-1].status == 425 and attempts[-1].early_data is not None:
            progress.late_only = True  # NotConsulted.TOO_EARLY: after the handshake this time
        if ledger is not None:
            run, number = await hedged_attempt(
                rt, request, state, progress, streaming, attempts, ledger, number, _notify
            )
            run.number = number  # the winner's place in the trail
        else:
            run = AttemptRun(rt, request, state, progress, streaming, number)
            await run.run()
        ended = rt.now()
        wire = run.response
        if wire is not None and run.error is None and wire.status < FINAL_BELOW:
            # 3, 5: NotConsulted.FINAL_RESPONSE: the record, and the caller's response.
            if guarded:
                learn(state, run, run.progress, None, None, ledger)
            if not attempts and run.body is not None and not _watched(rt, request):
                # The call's one attempt, buffered, and nobody to tell of it: its record is
                # built when Response.attempts is first read (from this run, which nothing
                # changes any more).
                first = partial(run.record, 1, _RECEIVED, None, ended)
                return _response(request, run, None, None, ended=ended, attempt_record=first), None
            return await _answer(rt, request, run, attempts, ended, streaming, state, retries)
        # 4. whether to send again: the engine's file decides (and the attempt is recorded).
        if retries is None:
            retries = _Retries(rt, request, state, ledger)
        decision = await retries.decide(run, attempts, ended)
        if decision is None:
            continue  # sent again at once, uncounted (a reconnect, an answered challenge)
        if isinstance(decision, RetryAllowed):
            denied = await retries.wait(decision, attempts[-1])
            if denied is None:
                continue
            decision = denied
        return _finish(request, run, attempts, decision)  # 5


async def _answer(
    rt: Runtime,
    request: PreparedRequest,
    run: AttemptRun,
    attempts: list[Attempt],
    ended: float,
    streaming: bool,
    state: UpstreamState,
    retries: _Retries | None,
) -> tuple[Response, Closer | None]:
    """The call's response from an attempt answered below 400, and the attempt's record
    (told of). (A call's one buffered attempt that nobody watches is answered in
    :func:`send` itself, with no coroutine of this one.)"""
    attempts.append(run.record(len(attempts) + 1, _RECEIVED, None, ended))
    try:
        if (pending := _notify(rt, attempts[-1], request)) is not None:
            await pending
    except BaseException:
        # A raising on_attempt, or outer cancellation while it ran: the streamed response
        # will not be handed over, so its connection and permit go back now.
        run.end()
        raise
    if run.body is not None:
        return _response(request, run, attempts, None, ended=ended), None
    # The body, read through a Continuation: continued where it breaks, if it can be.
    body, carried, decoder = carry(
        rt, request, state, run, attempts, lambda: retries or _Retries(rt, request, state, None)
    )
    if streaming:
        response = _response(request, run, attempts, None, body, decoder)
        response._continuation = carried
        return response, body.close
    # A buffered body left unread by its attempt because it can be continued: read whole here.
    head, raw_length = await carried.read_buffered()
    response = _response(request, head, attempts, None)
    response._continuation = carried
    response._downloaded = raw_length
    return response, None


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
        "challenges",
        "deadline",
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
        self._reconnects = 0  # tries sent again on a fresh connection, not counted
        self.challenges = 0  # answered auth challenges: in the trail, not numbered
        self._retry_after: float | None = None
        self._ended = 0.0  # when the attempt the engine decided on ended
        #: The call's deadline, or the caller's own if earlier (read when deciding: it costs
        #: a walk up the cancel-scope chain).
        self.deadline = math.inf

    async def decide(
        self,
        run: AttemptRun,
        attempts: list[Attempt],
        ended: float,
        continuation: bool = False,
        delivered: bool = False,
    ) -> Decision | None:
        """What follows the finished attempt ``run``, its record appended to ``attempts``
        (and told: ``on_attempt``, the log, the span): ``None`` to send again at once,
        uncounted (``NotConsulted.RECONNECT``, an answered ``AUTH_CHALLENGE``), or the
        engine's decision. Raises the call's exception for ``NotConsulted.ENDS_CALL``.
        ``continuation``: ``run`` asked for the rest of a broken body (``_call/resume.py``):
        continuable, and ``delivered`` when the caller has read its beginning."""
        rt = self._rt
        request = self._request
        wire = run.response
        error = run.error
        evidence, category, retry_after = run.observe()
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
                early_data=run.progress.early_data is not None,
            )
        )
        if skip is NotConsulted.RECONNECT or skip is NotConsulted.TOO_EARLY:
            # No attempt counted, no budget, no backoff; in the trail with decision None. The
            # breaker does not learn from it (the connection refused it, not the upstream),
            # but a probe slot the attempt held is given back.
            self._state.guard.release(run.admission)
            run.admission = None
            self._reconnects += 1
            await _told(rt, request, attempts, run.record(run.number, evidence, category, ended))
            return None
        if self._guarded:
            learn(self._state, run, run.progress, category, retry_after, self._ledger)
        number = len(attempts) + 1
        if skip is NotConsulted.AUTH_CHALLENGE and await _answer_challenge(request, wire):
            self._challenged = True
            self.challenges += 1
            await _told(rt, request, attempts, run.record(number, evidence, category, ended))
            return None
        if skip is NotConsulted.ENDS_CALL:
            assert error is not None
            await _told(rt, request, attempts, run.record(number, evidence, category, ended))
            raise _counted(request, failure(request, attempts, error, None))
        wire_status = wire.status if wire is not None and category is None else None
        fresh = not run.progress.connection_reused
        context = self._context(
            attempts, ended, evidence, category, wire_status, fresh, continuation, delivered
        )
        decision = rt.config.engine.decide(context)
        # Built once, with its decision (a dataclasses.replace would build it twice).
        await _told(rt, request, attempts, run.record(number, evidence, category, ended, decision))
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
        await _told(self._rt, self._request, attempts, attempt)

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
        counted = len(attempts) + 1 - self._reconnects  # attempts so far, hedges included
        proposed = backoff.delay(counted, self._rt.config.rng, self._previous_delay)
        if retry_after is not None:
            proposed = max(proposed, retry_after)
        self.deadline = min(request.deadline, trio.current_effective_deadline())
        remaining = self.deadline - now
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


async def _told(
    rt: Runtime, request: PreparedRequest, attempts: list[Attempt], attempt: Attempt
) -> None:
    """Append ``attempt`` to the call's trail and tell of it (:func:`_notify`)."""
    attempts.append(attempt)
    if (pending := _notify(rt, attempt, request)) is not None:
        await pending


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


def _counted(request: PreparedRequest, error: Exception) -> Exception:
    """``error``, counted in the ambiguous-outcomes metric when it is that (``telemetry=``)."""
    if request.trace is not None and isinstance(error, HttpAmbiguousExecutionError):
        request.trace.ended_ambiguous()
    return error


async def _backoff(rt: Runtime, delay: float, deadline: float) -> bool:
    """Sleep ``delay`` (never past ``deadline``); False if drain() cut it short."""
    if rt.draining:
        return False
    if delay <= 0:  # no timer needed: just let other tasks run (and outer cancellation in)
        await trio.lowlevel.checkpoint()
        return not rt.draining
    with trio.move_on_at(min(trio.current_time() + delay, deadline)):
        await rt.drain_event.wait()
    return not rt.draining


def _watched(rt: Runtime, request: PreparedRequest) -> bool:
    """Whether :func:`_notify` has anyone to tell of an attempt: a span, the DEBUG log or
    ``on_attempt``."""
    return (
        request.trace is not None
        or rt.config.on_attempt is not None
        or logger.isEnabledFor(logging.DEBUG)
    )


def _notify(rt: Runtime, attempt: Attempt, request: PreparedRequest) -> Awaitable[object] | None:
    """Log the attempt (DEBUG) and call ``on_attempt``; its awaitable, if it returned one,
    is for the caller to await (so that a client without an async callback awaits nothing).
    With ``telemetry=``, the attempt's span ends here, with the attempt's record.
    """
    trace = request.trace
    if trace is not None and trace.current is not None:
        trace.current.finish(attempt)
    if logger.isEnabledFor(logging.DEBUG):
        # The attempt trail only: no header values, so no credentials, ever reach the log.
        logger.debug(
            "%s %s attempt %d: %s %s %s%s (%.1f ms)%s",
            request.method,
            format(request.url),  # shown: no userinfo, no query value (str() has them)
            attempt.number,
            attempt.stage,
            attempt.evidence,
            attempt.status if attempt.status is not None else "-",
            f" {attempt.category}" if attempt.category is not None else "",
            attempt.timings.get("total", 0.0) * 1000,
            f"; {attempt.decision}" if attempt.decision is not None else "",
        )
    on_attempt = rt.config.on_attempt
    if on_attempt is not None:
        result = on_attempt(attempt)
        if inspect.isawaitable(result):
            return result
    return None


# --- the end of the loop ------------------------------------------------------------------


def _response(
    request: PreparedRequest,
    run: AttemptRun,
    attempts: list[Attempt] | None,
    decision: Decision | None,
    stream: StreamedBody | None = None,
    decoder: CheckedDecoder | None = None,
    ended: float | None = None,
    attempt_record: Callable[[], Attempt] | None = None,
) -> Response:
    """The call's response; ``ended``: when its attempt ended, if just read (else now);
    ``attempts=None``: its one attempt is ``attempt_record()``'s, built when first read."""
    wire = run.response
    assert wire is not None
    response = Response._received(
        status=wire.status,
        reason=wire.reason,
        wire_headers=wire.headers,  # decoded on first use, like the sent ones
        http_version=wire.http_version,
        url=request.url,
        request_method=request.method,
        sent_headers=run.sent_headers or (),
        elapsed=(trio.current_time() if ended is None else ended) - request.started,
        content=run.body,
        attempts=attempts,  # the call's own list: the loop is done with it
        retry_decision=decision,
        stream=stream,
        decoder=decoder,
        attempt_record=attempt_record,
    )
    if run.raw_length is not None:
        response._downloaded = run.raw_length
    return response


def _finish(
    request: PreparedRequest,
    run: AttemptRun,
    attempts: list[Attempt],
    decision: Decision,
) -> tuple[Response, Closer | None]:
    """The loop stopped on ``decision``: the final response, or the exception it means."""
    if run.response is not None and run.error is None:
        response = _response(request, run, attempts, decision)
        if isinstance(decision, AmbiguousFailure):
            raise _counted(request, ambiguous_status(request, response, attempts, decision))
        return response, None
    assert run.error is not None
    raise _counted(request, failure(request, attempts, run.error, decision))
