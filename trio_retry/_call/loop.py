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

import trio

from .._auth import auth_request
from .._core.attempt import Attempt
from .._core.decision import AmbiguousFailure, Decision, RetryAllowed, RetryDenied
from .._core.engine import (
    AttemptFacts,
    NotConsulted,
    build_context,
    final_response,
    not_consulted,
)
from .._core.evidence import Evidence, FailureCategory, Stage
from .._errors import AdmissionRejected, HttpAmbiguousExecutionError, TooManyRedirects
from .._models import Headers, Response
from .._redirects import REDIRECT_STATUSES
from .._wire.exchange import WireResponse
from .._wire.progress import AttemptProgress, WireError
from .attempt import AttemptRun
from .body import BodyReader, CheckedDecoder, StreamedBody, decoder_for
from .config import RefreshableAuth
from .failures import ambiguous_status, failure
from .hedge import hedge_ledger, hedged_attempt, learn
from .prepare import PreparedRequest, prepare_redirect
from .runtime import Runtime

__all__ = ["Closer", "send", "send_following"]

logger = logging.getLogger("trio_retry")

#: (a global: on Python 3.11 an enum class attribute costs a ``__getattr__`` hook)
_RECEIVED = Evidence.RESPONSE_RECEIVED

#: Ends a streamed response: gives its connection back (reusable if the body was read to the
#: end) and its permit. ``None`` for a buffered response, which holds nothing.
Closer = Callable[[], None]


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
            closer()
        history.append(response)
        if len(history) > max_redirects:
            raise TooManyRedirects(
                f"{request.method} {history[0].url}: more than max_redirects "
                f"({max_redirects}) redirects; the last pointed to {location}",
                history=history,
            )
        request = prepare_redirect(request, response, location)


async def send(
    rt: Runtime, request: PreparedRequest, *, streaming: bool, first_hop: bool = False
) -> tuple[Response, Closer | None]:
    """Attempts of one request until a response, a denial or a failure (the loop above).

    ``first_hop``: the request was prepared just now, so its ``started`` is also the start of
    its first attempt (one clock read fewer); a redirect hop reads the clock."""
    if rt.draining:
        raise AdmissionRejected(
            f"{request.method} {request.url} not admitted: the client is draining",
            evidence=Evidence.NOT_SENT,
            category=FailureCategory.ADMISSION,
        )
    rt.calls += 1
    config = rt.config
    state = rt.upstreams.get(request.url.origin)
    policy = request.retry
    started = request.started if first_hop else rt.now()
    state.budget.deposit(started)
    attempts: list[Attempt] = []
    previous_delay: float | None = None
    auth_refreshed = retried_425 = challenged = False
    reconnects = 0  # tries sent again on a fresh connection, not counted as attempts
    challenges = 0  # answered auth challenges: in the trail, not numbered as attempts
    hedged = request.hedging is not None or state.upstream.hedging is not None
    ledger = hedge_ledger(request, state, started) if hedged else None
    guarded = state.guarded or ledger is not None

    while True:
        number = len(attempts) + 1 - challenges
        progress = AttemptProgress(started if not attempts else rt.now())
        if ledger is not None:
            run, number = await hedged_attempt(
                rt, request, state, progress, streaming, attempts, ledger, number, _notify
            )
            progress = run.progress
        else:
            run = AttemptRun(rt, request, state, progress, streaming=streaming, number=number)
            await run.run()
        ended = rt.now()
        wire = run.response
        if wire is not None and run.error is None and final_response(wire.status):
            # NotConsulted.FINAL_RESPONSE (its evidence is RESPONSE_RECEIVED, no failure).
            if guarded:
                learn(state, run, progress, None, None, ledger)
            if not attempts and not streaming and not _watched(rt, request):
                # The call's one attempt, buffered, and nobody to tell of it: its record is
                # built when Response.attempts is first read (from this run, which nothing
                # changes any more).
                first = partial(run.record, 1, _RECEIVED, None, ended)
                return _response(request, run, None, None, ended=ended, attempt_record=first), None
            attempts.append(run.record(len(attempts) + 1, _RECEIVED, None, ended))
            if (pending := _notify(rt, attempts[-1], request)) is not None:
                await pending
            if not streaming or run.body is not None:
                return _response(request, run, attempts, None, ended=ended), None
            return _deliver(rt, request, run, attempts)
        evidence, category, retry_after = run.observe()
        error = run.error
        skip = not_consulted(
            AttemptFacts(
                status=wire.status if wire is not None and error is None else None,
                reconnect=isinstance(error, WireError) and error.reconnect,
                reconnects=reconnects,
                ends_call=isinstance(error, WireError) and error.ends_call,
                replayable=request.body.replayability.replayable,
                draining=rt.draining,
                challenge=not challenged and _may_answer_challenge(request),
            )
        )
        if skip is NotConsulted.RECONNECT:
            # Sent again at once on a fresh connection: no attempt counted, no budget, no
            # backoff; it stays in the trail with decision None.
            reconnects += 1
            attempts.append(run.record(number, evidence, category, ended))
            if (pending := _notify(rt, attempts[-1], request)) is not None:
                await pending
            continue
        if guarded:
            learn(state, run, progress, category, retry_after, ledger)
        if skip is NotConsulted.AUTH_CHALLENGE and await _answer_challenge(request, wire):
            challenged = True
            challenges += 1
            attempts.append(run.record(len(attempts) + 1, evidence, category, ended))
            if (pending := _notify(rt, attempts[-1], request)) is not None:
                await pending
            continue
        if skip is NotConsulted.ENDS_CALL:
            assert error is not None
            attempts.append(run.record(len(attempts) + 1, evidence, category, ended))
            if (pending := _notify(rt, attempts[-1], request)) is not None:
                await pending
            raise _counted(request, failure(request, attempts, error, None))

        counted = len(attempts) + 1 - reconnects  # attempts of this call, hedges included
        now = ended
        backoff = policy.backoff
        proposed = backoff.delay(counted, config.rng, previous_delay)
        if retry_after is not None:
            proposed = max(proposed, retry_after)
        call_deadline = min(request.deadline, trio.current_effective_deadline())
        remaining = call_deadline - now
        context = build_context(  # RetryContext(...), built faster
            attempt=counted,
            max_attempts=policy.max_attempts,
            budget_available=state.budget.available(now),
            replayability=request.body.replayability,
            response_delivered=False,
            draining=rt.draining,
            remaining_deadline=remaining if math.isfinite(remaining) else None,
            min_attempt_budget=policy.min_attempt_budget,
            failure=category,
            evidence=evidence,
            idempotency=request.idempotency,
            status=wire.status if wire is not None and category is None else None,
            retry_after=retry_after,
            transient_500=state.upstream.transient_500,
            proposed_delay=proposed,
            max_backoff=backoff.max,
            auth_refreshed=auth_refreshed,
            retried_425=retried_425,
            auth_refreshable=isinstance(request.auth, RefreshableAuth),
        )
        decision = config.engine.decide(context)
        # Built once, with its decision (a dataclasses.replace would build it twice).
        attempt = run.record(len(attempts) + 1, evidence, category, ended, decision)
        attempts.append(attempt)
        if (pending := _notify(rt, attempt, request)) is not None:
            await pending

        if isinstance(decision, RetryAllowed):
            # The attempt has already returned its connection and its permit.
            state.budget.try_withdraw(now)
            if not await _backoff(rt, decision.delay, call_deadline):
                decision = RetryDenied.runtime_draining(retry_after=retry_after)
                return _finish(request, run, attempts, decision)
            previous_delay = decision.delay
            auth = request.auth
            if (
                attempt.status == 401
                and attempt.category is None
                and isinstance(auth, RefreshableAuth)
            ):
                await auth.refresh()
                auth_refreshed = True
            if attempt.status == 425 and attempt.category is None:
                retried_425 = True
            continue
        return _finish(request, run, attempts, decision)


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
            request.url,
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
    return Response._received(
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


def _deliver(
    rt: Runtime, request: PreparedRequest, run: AttemptRun, attempts: list[Attempt]
) -> tuple[Response, Closer | None]:
    """The response of a successful streamed attempt, with its body still to be read, and the
    :data:`Closer` that ends it."""
    wire = run.response
    assert wire is not None
    progress = AttemptProgress(rt.now())
    progress.stage = Stage.RESPONSE_BODY
    done = False
    body: StreamedBody

    def close() -> None:
        nonlocal done
        if not done:
            done = True
            body.close()  # iterating after the block ends stops at once
            if run.body is None and run.conn is not None:
                wire.source.abandon()
            run.give_back()

    def ended() -> None:
        run.body = b""
        close()

    def broken(exc: WireError) -> Exception:
        close()
        failed = replace(
            attempts[-1],
            stage=progress.stage,
            evidence=Evidence.PARTIAL_RESPONSE,
            error=exc,
            category=exc.category,
            decision=RetryDenied.response_already_delivered(),
        )
        error = failure(request, [*attempts[:-1], failed], exc, failed.decision)
        error.__cause__ = exc
        return error

    config = rt.config
    limit = config.max_body_bytes
    reader = BodyReader(wire.source, progress, limit)
    decoder = decoder_for(request.method, wire.headers, limit)
    body = StreamedBody(reader, request.deadline, ended, broken)
    response = _response(
        request,
        run,
        attempts,
        None,
        body,
        CheckedDecoder(decoder, progress, broken) if decoder is not None else None,
    )
    return response, close
