"""The loop's side of SPEC §15: learning from each attempt, and hedged attempts.

:func:`learn` feeds a finished attempt's evidence to its origin's breaker, throttle and
hedging ledger (:mod:`.resilience`). :func:`hedged_attempt` stands in for
:meth:`~.attempt.AttemptRun.run` when the call is hedged: each copy is an
:class:`~.attempt.AttemptRun` of its own, numbered as it starts, with the same contract (never
an exception but outer cancellation or the caller's own) and the same value (an
:class:`~.result.AttemptResult`, read here, never written); the copies that did not win are
appended to the trail, each with its own number, before the winner (the attempt the loop then
decides on).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import trio

from .._core.attempt import Attempt
from .._core.evidence import FailureCategory
from .._wire.clock import effective_deadline
from .._wire.progress import AttemptProgress
from .attempt import AttemptRun
from .notify import told
from .prepare import PreparedRequest
from .resilience import NON_FINAL_STATUSES, Copy, HedgeCancelled, run_hedged
from .result import AttemptResult, cancelled_result
from .runtime import Runtime
from .upstream import UpstreamState

if TYPE_CHECKING:
    from .._core.hedging import HedgeLedger

__all__ = ["hedge_ledger", "hedged_attempt", "learn"]


def hedge_ledger(
    request: PreparedRequest, state: UpstreamState, started: float
) -> HedgeLedger | None:
    """The ledger a call hedges with (the call's ``hedging=`` over the upstream's), after
    counting the call in it; ``None`` when the call is not hedged. A call that may not be
    hedged (not safely idempotent, or a body that cannot be sent again) still counts as a
    call: the share is of all the origin's calls."""
    hedging = request.hedging if request.hedging is not None else state.upstream.hedging
    if hedging is None or isinstance(hedging, bool):  # False: off (prepare refuses True)
        return None
    ledger = state.guard.ledger(hedging)
    ledger.record_call(started)
    if request.idempotency.safely_idempotent and request.body.replayability.replayable:
        return ledger
    return None


def learn(
    state: UpstreamState,
    result: AttemptResult,
    category: FailureCategory | None,
    retry_after: float | None,
    ledger: HedgeLedger | None,
) -> None:
    """Feed one finished attempt to the origin's breaker, throttle and hedging ledger (once
    per attempt: the breaker's admission verdict it carries is spent here)."""
    wire = result.response
    state.guard.observe(
        status=wire.status if wire is not None else None,
        category=category,
        retry_after=retry_after,
        verdict=result.admission,
    )
    if ledger is not None and wire is not None and category is None:
        first_byte = result.progress.timings.get("first_byte")
        if first_byte is not None:
            ledger.observe_latency(first_byte)


def _final(result: AttemptResult) -> bool:
    wire = result.response
    return wire is not None and result.error is None and wire.status not in NON_FINAL_STATUSES


async def hedged_attempt(
    rt: Runtime,
    request: PreparedRequest,
    state: UpstreamState,
    progress: AttemptProgress,
    streaming: bool,
    attempts: list[Attempt],
    ledger: HedgeLedger,
    number: int,
) -> AttemptResult:
    """One attempt, numbered ``number``, with hedged copies after ``ledger.delay()``
    (numbered on from it as each starts); returns the winner's result.

    Copies that did not win are appended to ``attempts`` first, in the order of their numbers
    (a cancelled one with a ``HedgeCancelled`` error and the evidence of the stage it reached;
    one that ended on its own with its outcome). Every copy has ended when this returns, and
    only the winner holds a connection or a permit (a streamed call's other copies that
    answered give theirs back, their bodies unread): on outer cancellation all are cancelled,
    none holds anything, and ``trio.Cancelled`` propagates, unwrapped.
    """
    # Imported by hedged calls only (the loop calls this when the call has a ledger): the
    # module is start-up time that programs without hedging never need; a hedged attempt's
    # nursery and copies cost far more than this sys.modules look-up.
    from .._core.hedging import HedgeContext, decide_hedge

    policy = request.retry
    hedging = ledger.hedging
    limiter = state.limiter
    sent = 0

    def may_hedge(started: int) -> bool:
        nonlocal sent
        now = trio.current_time()
        limit = effective_deadline(request.deadline) - now
        calls, hedges = ledger.counts(now)
        denial = decide_hedge(
            HedgeContext(
                idempotency=request.idempotency,
                replayability=request.body.replayability,
                hedges_sent=sent,
                max_hedges=hedging.max_hedges,
                attempts_started=len(attempts) + started,
                max_attempts=policy.max_attempts,
                remaining_deadline=limit if math.isfinite(limit) else None,
                min_attempt_budget=policy.min_attempt_budget,
                hedges_in_window=hedges,
                calls_in_window=calls,
                max_share=hedging.max_share,
                budget_available=state.budget.available(now),
                bulkhead_free=limiter is None
                or (limiter.available_tokens > 0 and state.waiting == 0),
            )
        )
        if denial is not None:
            return False
        state.budget.try_withdraw(now)  # a hedge is a retry for accounting
        ledger.record_hedge(now)
        sent += 1
        return True

    runs: list[AttemptRun] = []
    wall_clock = rt.config.wall_clock

    async def copy_attempt(copy_number: int, copy_progress: AttemptProgress) -> AttemptResult:
        # (Copies have no span of their own yet: they run at once, and a call has one slot.)
        run = AttemptRun(rt, request, state, copy_progress, streaming, copy_number, traced=False)
        runs.append(run)
        return await run.run()

    try:
        winner, others = await run_hedged(
            first=Copy(number, progress),
            attempt=copy_attempt,
            delay=ledger.delay,
            may_hedge=may_hedge,
            final=_final,
        )
        assert winner.outcome is not None
        for copy in sorted(others, key=lambda c: c.number):  # their records, each told of
            result = copy.outcome
            if result is None:  # lost the race: cancelled
                result = cancelled_result(
                    copy.number,
                    copy.progress,
                    HedgeCancelled(f"cancelled: attempt {winner.number} answered first"),
                )
                evidence, category, _ = result.observe(wall_clock)
            else:
                # Ended on its own but did not win. In a streamed call, a copy that answered at
                # the same instant as the winner still holds its connection and permit: they
                # go back now, its body unread (the connection closed, an HTTP/2 or HTTP/3
                # stream reset).
                if result.held is not None:
                    result.held.end()
                evidence, category, retry_after = result.observe(wall_clock)
                learn(state, result, category, retry_after, ledger)
            await told(rt, request, attempts, result.record(evidence, category, copy.ended))
    except BaseException:
        # Outer cancellation, or the caller's own error (a raising on_attempt, auth object or
        # body): no response will be handed over, so no copy keeps a connection or a permit,
        # the winner's included.
        for run in runs:
            run.end()
        raise
    return winner.outcome
