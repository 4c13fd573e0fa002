"""The engine and the bookkeeping timed alone, for :mod:`benchmarks.scenarios.engine_cost`:
``micro_benchmarks`` replays, with trio_retry's own types, what the client and its HTTP/1.1 wire
layer do per call for evidence and retry accounting (``_Micro``), and times it and the engine's
``decide()`` with ``timeit``; ``TimedEngine`` times the client's engine in place. Not a
scenario of its own (not in ``SUITE_MODULES``).
"""

from __future__ import annotations

import logging
import math
import random
import time
import timeit
from collections.abc import Callable
from typing import Any

import trio

# Response headers as nginx sends them for /small (scanned for Retry-After by the client).
RESPONSE_HEADERS = [
    (b"Server", b"nginx/1.22.1"),
    (b"Date", b"Mon, 01 Jan 2024 00:00:00 GMT"),
    (b"Content-Type", b"text/plain"),
    (b"Content-Length", b"13"),
    (b"Connection", b"keep-alive"),
]


class TimedEngine:
    """Wraps the client's engine and adds up the time spent in ``decide()``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0
        self.seconds = 0.0

    def decide(self, ctx: Any) -> Any:
        t0 = time.perf_counter()
        decision = self.inner.decide(ctx)
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        return decision


def timer_overhead() -> float:
    """What one ``perf_counter()`` pair costs, subtracted from the in-place engine time."""
    best = math.inf
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(10000):
            a = time.perf_counter()
            b = time.perf_counter()
        del a, b
        best = min(best, (time.perf_counter() - t0) / 10000)
    return best


# --- the bookkeeping replica ---------------------------------------------------------------


class _Micro:
    """trio_retry's per-call evidence and retry bookkeeping, replayed for timing (inside
    ``trio.run``: the client reads ``trio.current_time()`` where it does)."""

    def __init__(self) -> None:
        import trio_retry as tr
        from trio_retry._core.attempt import build_attempt
        from trio_retry._core.engine import build_context
        from trio_retry._wire.progress import AttemptProgress

        self.tr = tr
        self.build_context = build_context
        self.build_attempt = build_attempt
        self.AttemptProgress = AttemptProgress
        self.budget = tr.RetryBudget()
        self.backoff = tr.Backoff()
        self.rng = random.Random(1)
        self.engine = tr.DefaultRetryEligibilityEngine()
        self.logger = logging.getLogger("trio_retry")
        self.deadline = math.inf

    def call_bookkeeping(self) -> None:
        """Per call: the budget deposit of the first attempt."""
        self.budget.deposit(trio.current_time())

    def attempt_bookkeeping(self, status: int = 200, decision: Any = None) -> Any:
        """Per attempt: AttemptProgress as the pool and HTTP/1.1 wire layer update it for a
        keep-alive GET, then the Attempt record (Client._record, with the engine's decision
        when there was one: the client builds it once, after deciding) and the log check."""
        tr = self.tr
        stage = tr.Stage
        progress = self.AttemptProgress(trio.current_time())
        progress.advance(stage.POOL)
        progress.connection_reused = True
        progress.http_version = "HTTP/1.1"
        progress.advance(stage.REQUEST_HEAD)
        progress.bytes_sent += 120
        progress.advance(stage.AWAITING_RESPONSE)
        if progress.stage == stage.AWAITING_RESPONSE:
            progress.advance(stage.RESPONSE_HEAD)
            progress.timings["first_byte"] = trio.current_time() - progress.started
        progress.bytes_received += 160
        progress.advance(stage.RESPONSE_BODY)
        progress.advance(stage.COMPLETE)
        timings = progress.timings
        timings["total"] = trio.current_time() - progress.started
        retry_after = None
        for name, value in RESPONSE_HEADERS:
            if name.lower() == b"retry-after":
                retry_after = value
        del retry_after
        attempt = self.build_attempt(
            number=1,
            stage=progress.stage,
            evidence=tr.Evidence.RESPONSE_RECEIVED,
            error=None,
            status=status,
            http_version=progress.http_version,
            early_data=progress.early_data,
            connection_reused=progress.connection_reused,
            bytes_sent=progress.bytes_sent,
            bytes_received=progress.bytes_received,
            category=None,
            timings=timings,
            decision=decision,
            range_start=None,
            reconciled=None,
        )
        self.logger.isEnabledFor(logging.DEBUG)
        return attempt

    def context(self, status: int, proposed: float = 0.05) -> Any:
        tr = self.tr
        now = trio.current_time()
        remaining = self.deadline - now
        return self.build_context(
            attempt=1,
            max_attempts=3,
            budget_available=self.budget.available(now),
            replayability=tr.Replayability.REPLAYABLE,
            response_delivered=False,
            draining=False,
            remaining_deadline=remaining if math.isfinite(remaining) else None,
            min_attempt_budget=0.05,
            failure=None,
            evidence=tr.Evidence.RESPONSE_RECEIVED,
            idempotency=tr.Idempotency.SAFE,
            status=status,
            retry_after=None,
            transient_500=False,
            proposed_delay=proposed,
            max_backoff=self.backoff.max,
            auth_refreshed=False,
            retried_425=False,
            auth_refreshable=False,
            fresh_connection=False,
            continuable=False,
            keyed=False,
            key_expires_in=None,
            reconciled=None,
        )

    def failure_bookkeeping(self, status: int, decision: Any, withdraw: bool) -> None:
        """Per failed attempt, around the engine call (not included): the backoff delay, the
        RetryContext with the budget check (both read the outer deadline first, as the client
        does), the attempt recorded with its decision, and the budget withdrawal when the
        retry goes ahead."""
        proposed = self.backoff.delay(1, self.rng, None)
        trio.current_effective_deadline()
        self.context(status, proposed)
        self.attempt_bookkeeping(status, decision)
        if withdraw:
            self.budget.try_withdraw(trio.current_time())


def micro_benchmarks(path: str, number: int, repeat: int) -> dict[str, float]:
    """Seconds per call of the engine and of the bookkeeping on ``path`` ("200", "404",
    "503": the 503-then-200 call)."""

    def per_op(fn: Callable[[], object]) -> float:
        """Median seconds per call of ``fn`` over ``repeat`` timing runs of ``number`` calls."""
        times = sorted(t / number for t in timeit.repeat(fn, repeat=repeat, number=number))
        return times[len(times) // 2]

    async def main() -> dict[str, float]:
        m = _Micro()
        tr = m.tr
        ctx_503 = m.context(503)
        ctx_404 = m.context(404)
        allowed = m.engine.decide(ctx_503)
        denied = m.engine.decide(ctx_404)
        assert isinstance(allowed, tr.RetryAllowed), allowed
        assert isinstance(denied, tr.RetryDenied), denied

        def happy() -> None:
            m.call_bookkeeping()
            m.attempt_bookkeeping(200)

        def not_found() -> None:
            m.call_bookkeeping()
            m.failure_bookkeeping(404, denied, withdraw=False)

        def retried() -> None:
            m.call_bookkeeping()
            m.failure_bookkeeping(503, allowed, withdraw=True)
            m.attempt_bookkeeping(200)

        out = {
            "attempt_bookkeeping": per_op(happy),
            "decide_404": per_op(lambda: m.engine.decide(ctx_404)),
            "decide_503": per_op(lambda: m.engine.decide(ctx_503)),
        }
        if path != "200":
            # The failure path piece by piece, to show where its time goes.
            now = trio.current_time()
            out["part_context"] = per_op(lambda: m.context(404))
            out["part_backoff"] = per_op(lambda: m.backoff.delay(1, m.rng, None))
            out["part_budget_available"] = per_op(lambda: m.budget.available(now))
            out["part_outer_deadline"] = per_op(trio.current_effective_deadline)
        if path == "404":
            out["bookkeeping"] = per_op(not_found)
            out["engine"] = out["decide_404"]
        elif path == "503":
            out["bookkeeping"] = per_op(retried)
            out["engine"] = out["decide_503"]
        else:
            out["bookkeeping"] = out["attempt_bookkeeping"]
            out["engine"] = 0.0
        return out

    return trio.run(main)
