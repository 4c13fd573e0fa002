"""The cost of the retry engine and of the evidence bookkeeping, per call.

Each scenario is one request path, measured end to end for trio_retry *and* for the bare h11
loop (``benchmarks.clients.H11TrioAdapter``) in the same worker process, sequential calls over
one keep-alive connection each (as ``get_sequential``), the two clients taking turns every
``BLOCK`` calls so that any drift of the machine hits both alike; then the engine and the
bookkeeping are timed alone with ``timeit`` and expressed as a share of trio_retry's CPU time
per call:

- ``engine_cost_200``: ``GET /small`` -> 200 from the benchmark server: the happy path. The
  engine is never consulted below 400; the bookkeeping is the evidence record of one attempt.
- ``engine_cost_404``: ``GET /missing`` -> 404 from the same server: the engine is consulted
  once (it denies: not retryable), with a ``RetryContext`` built for it. Both clients also
  take turns on ``/small`` here, which measures the engine path *in place*: trio_retry's extra
  CPU for a 404 over a 200, less the bare loop's (``engine_path_in_situ_us``).
- ``engine_cost_503``: ``GET`` -> 503, retry, -> 200, from a ``FaultServer`` in a process of its
  own (``benchmarks.scenarios._upstream``; its CPU is not the client's): two attempts, one
  engine decision (allowed), one budget withdrawal, one backoff (``Backoff(initial=0)``, so the
  sleep is a bare checkpoint). The bare loop sends the two requests with a checkpoint between.
  Both clients also take turns on a plain 200 from the same server, for the in-place figure.
  trio_retry's budget here is ``RetryBudget(ratio=1.0)`` so that it never runs dry at thousands
  of calls per second (the bookkeeping is the same).

"Bookkeeping" is timed by replaying, with trio_retry's own types, exactly what the client and
its HTTP/1.1 wire layer do per call for evidence and retry accounting (``_attempt_bookkeeping``,
``_failure_bookkeeping``: the ``AttemptProgress`` stage updates and timings, the ``Attempt``
record, the budget deposit; after a failed attempt the backoff delay, the outer-deadline
lookup, the ``RetryContext`` with the budget check, the ``Attempt`` recorded with its decision,
and the budget withdrawal). The engine's
``decide()`` is timed on the context of the path; the engine's time is also measured in place,
by wrapping the client's engine (``engine_in_situ_us``). Client CPU is
``time.process_time()`` of the worker over each measured phase.
"""

from __future__ import annotations

import gc
import select
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import trio

from benchmarks.clients import Endpoint, H11TrioAdapter
from benchmarks.scenarios import Column, RunParams, Scenario, register
from benchmarks.scenarios.engine_micro import TimedEngine, micro_benchmarks, timer_overhead
from benchmarks.scenarios.throughput import SMALL_BODY, SMALL_PATH, _busy_delta, _Snapshot

if TYPE_CHECKING:
    from benchmarks.clients import Adapter
    from benchmarks.runtime import Runtime

MISSING_PATH = "/missing"
RETRY_PATH = "/retry"
TARGET_SHARE = 0.10
MICRO_NUMBER, MICRO_REPEAT = 20000, 5  # timeit: calls per timing run, timing runs (median)
SMOKE_MICRO_NUMBER, SMOKE_MICRO_REPEAT = 300, 3
# --- the end-to-end phases -------------------------------------------------------------------


@dataclass
class _Phase:
    calls: int
    cpu: float
    wall: float
    foreign: float | None


BLOCK = 50  # calls per block; the kinds of call of one scenario take turns block by block


async def _interleaved(
    calls: dict[str, Callable[[], Awaitable[None]]],
    warmup: int,
    params: RunParams,
    max_calls: int,
) -> dict[str, _Phase]:
    """Measure several kinds of call (trio_retry and the bare loop, on one or two paths) in
    turns of ``BLOCK`` calls, so that a drift of the machine (frequency, other load) affects
    every kind alike. Each kind gets at least ``params.requests`` calls and, together, the
    phase lasts at least ``params.min_time`` per kind."""
    for call in calls.values():
        for _ in range(warmup):
            await call()
    gc.collect()
    cpu = dict.fromkeys(calls, 0.0)
    wall = dict.fromkeys(calls, 0.0)
    done = dict.fromkeys(calls, 0)
    block = max(1, min(BLOCK, params.requests))
    before = _Snapshot.take(params)
    start = time.perf_counter()
    limit = start + params.soft_limit
    min_end = start + params.min_time * len(calls)
    while True:
        for kind, call in calls.items():
            c0, w0 = time.process_time(), time.perf_counter()
            for _ in range(block):
                await call()
            cpu[kind] += time.process_time() - c0
            wall[kind] += time.perf_counter() - w0
            done[kind] += block
        least = min(done.values())
        now = time.perf_counter()
        if (least >= params.requests and now >= min_end) or now > limit or least >= max_calls:
            break
    after = _Snapshot.take(params)
    total_wall = after.wall - before.wall
    foreign = None
    if params.client_cpu is not None and total_wall >= 1.0:
        busy = _busy_delta(before, after, params.client_cpu)
        foreign = max(0.0, (busy - (after.cpu - before.cpu)) / total_wall)
    return {kind: _Phase(done[kind], cpu[kind], wall[kind], foreign) for kind in calls}


class _Upstream:
    """The 503/200 FaultServer subprocess (see ``benchmarks.scenarios._upstream``)."""

    def __init__(self, pairs: int, lifetime: float, cpu: int | None) -> None:
        from benchmarks.servers import PACKAGE_ROOT, child_preexec

        cmd = [sys.executable, "-m", "benchmarks.scenarios._upstream", str(pairs), str(lifetime)]
        if cpu is not None:
            cmd.append(str(cpu))
        self.proc = subprocess.Popen(
            cmd,
            cwd=PACKAGE_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            preexec_fn=child_preexec(),
        )
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 20.0)
        line = self.proc.stdout.readline() if ready else b""
        if not line.startswith(b"PORT "):
            self.close()
            raise RuntimeError(f"the 503 upstream did not start (got {line!r})")
        self.port = int(line.split()[1])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@dataclass(frozen=True)
class EngineCostScenario(Scenario):
    suite: ClassVar[str] = "engine_cost"
    columns: ClassVar[tuple[Column, ...] | None] = (
        Column("trio_retry us/call", "trio_retry_us", ".1f", width=18),
        Column("bare h11 us/call", "h11_us", ".1f", width=16),
        Column("overhead us", "overhead_us", ".1f", width=11),
        Column("engine us", "engine_us", ".2f", width=9),
        Column("bookkeeping us", "bookkeeping_us", ".2f", width=14),
        Column("share, timeit", "share", ".1f", width=13, scale=100, suffix="%"),
        Column("share, in place", "share_in_situ", ".1f", width=15, scale=100, suffix="%"),
        Column("of overhead", "share_of_overhead", ".0f", width=11, scale=100, suffix="%"),
    )
    summary: ClassVar[dict[str, str] | None] = {
        k: "median"
        for k in (
            "trio_retry_us",
            "h11_us",
            "overhead_us",
            "engine_us",
            "engine_in_situ_us",
            "bookkeeping_us",
            "share",
            "share_of_overhead",
            "engine_path_in_situ_us",
            "share_in_situ",
            "foreign_cpu_util",
            "calls",
        )
    }
    legend: ClassVar[str | None] = (
        "client CPU per call (process_time), trio_retry and the bare h11 loop taking turns in "
        "one worker; engine: decide() alone; bookkeeping: evidence\nrecords, budget, backoff "
        "and RetryContext per call (timeit); share, timeit: (engine + bookkeeping) / "
        "trio_retry's CPU per call;\nshare, in place: the same with the engine path measured end "
        "to end against plain 200s (see details); of overhead: timeit share of trio_retry - "
        "bare h11. Target <= 10%."
    )
    client_labels: ClassVar[dict[str, str]] = {"trio_retry": "trio_retry vs bare h11"}
    name: str
    title: str
    description: str
    path_kind: str  # "200", "404" or "503"
    endpoint: str = "h1"
    concurrency: int = 1
    requests: int = 3000
    warmup: int = 200
    smoke_requests: int = 30
    smoke_warmup: int = 5

    def heading(self) -> str:
        return self.title

    def to_json(self) -> dict[str, Any]:
        data = super().to_json()
        data["path_kind"] = self.path_kind
        return data

    def skip_reason(self, client: str) -> str | None:
        if client == "h11_trio":
            return "measured inside the trio_retry row (same worker)"
        if client != "trio_retry":
            return "not in this suite (trio_retry against the bare h11 loop)"
        return None

    def progress_line(self, entry: dict[str, Any]) -> str:
        noise = entry.get("foreign_cpu_util")
        return (
            f"trio_retry {entry['trio_retry_us']:.1f} us/call, bare h11 {entry['h11_us']:.1f}, "
            f"engine {entry['engine_us']:.2f} us + bookkeeping {entry['bookkeeping_us']:.2f} us"
            f" = {entry['share']:.1%} of trio_retry's CPU"
            + (f"  other load {noise:.0%}" if noise else "")
        )

    def run(self, adapter: Adapter, runtime: Runtime, params: RunParams) -> dict[str, Any]:
        upstream: _Upstream | None = None
        endpoint = adapter.endpoint
        path = {"200": SMALL_PATH, "404": MISSING_PATH, "503": RETRY_PATH}[self.path_kind]
        max_calls = max(params.requests, 1) * 20
        if self.path_kind == "503":
            pairs = 2 * (max_calls + BLOCK + params.warmup) + 10
            upstream = _Upstream(pairs, params.hard_limit + 30, params.server_cpu)
            endpoint = Endpoint("http", "127.0.0.1", upstream.port, False)
        try:
            e2e = runtime.run(
                lambda: self._end_to_end(endpoint, path, params, max_calls), params.hard_limit
            )
        finally:
            if upstream is not None:
                upstream.close()
        number, repeat = MICRO_NUMBER, MICRO_REPEAT
        if params.smoke:
            number, repeat = SMOKE_MICRO_NUMBER, SMOKE_MICRO_REPEAT
        micro = micro_benchmarks(self.path_kind, number, repeat)
        tr_us = e2e["trio_retry_cpu"] / e2e["trio_retry_calls"] * 1e6
        h11_us = e2e["h11_cpu"] / e2e["h11_calls"] * 1e6
        engine_us = micro["engine"] * 1e6
        book_us = micro["bookkeeping"] * 1e6
        overhead = tr_us - h11_us
        share = (engine_us + book_us) / tr_us
        result: dict[str, Any] = {
            "status": "ok",
            "note": "",
            "path_kind": self.path_kind,
            "calls": e2e["trio_retry_calls"],
            "h11_calls": e2e["h11_calls"],
            "trio_retry_us": tr_us,
            "h11_us": h11_us,
            "overhead_us": overhead,
            "engine_us": engine_us,
            "engine_in_situ_us": e2e["engine_in_situ_us"],
            "engine_decisions_per_call": e2e["engine_decisions_per_call"],
            "bookkeeping_us": book_us,
            "attempt_bookkeeping_us": micro["attempt_bookkeeping"] * 1e6,
            "decide_404_us": micro["decide_404"] * 1e6,
            "decide_503_us": micro["decide_503"] * 1e6,
            "failure_path_parts_us": {
                k.removeprefix("part_"): v * 1e6 for k, v in micro.items() if k.startswith("part_")
            },
            "share": share,
            "share_of_overhead": (engine_us + book_us) / overhead if overhead > 0 else None,
            "engine_path_in_situ_us": e2e["engine_path_in_situ_us"],
            "share_in_situ": None,
            "target_share": TARGET_SHARE,
            "target_met": share <= TARGET_SHARE,
            "trio_retry_wall_s": e2e["trio_retry_wall"],
            "h11_wall_s": e2e["h11_wall"],
            "foreign_cpu_util": e2e["foreign"],
            "micro_number": number,
        }
        details = [
            "engine not consulted (status < 400); bookkeeping = one attempt's evidence record "
            f"+ budget deposit ({result['attempt_bookkeeping_us']:.2f} us)"
        ]
        if self.path_kind != "200":
            parts = result["failure_path_parts_us"]
            details = [
                f"engine decide() (timeit): 404 context {result['decide_404_us']:.2f} us, 503 "
                f"context {result['decide_503_us']:.2f} us; measured in place: "
                f"{result['engine_in_situ_us']:.2f} us per call "
                f"({result['engine_decisions_per_call']:.0f} decision(s)/call)",
                f"failure path, timeit: the RetryContext with the budget check "
                f"{parts['context']:.2f} us (of which budget.available "
                f"{parts['budget_available']:.2f}), backoff delay {parts['backoff']:.2f}, "
                f"outer deadline lookup {parts['outer_deadline']:.2f}; one attempt's evidence "
                f"record + deposit {result['attempt_bookkeeping_us']:.2f}",
            ]
        situ = result["engine_path_in_situ_us"]
        if situ is not None:
            # In place, end to end: the engine path (context, budget, backoff, decide, record)
            # plus each attempt's own bookkeeping (timeit), as a share of the call.
            attempts = 2 if self.path_kind == "503" else 1
            book = attempts * result["attempt_bookkeeping_us"]
            result["share_in_situ"] = (situ + book) / tr_us
            what = "a 404 costs trio_retry" if attempts == 1 else "a 503 + retry costs trio_retry"
            over = "a 200" if attempts == 1 else "two 200s"
            details.append(
                f"in place, end to end: {what} {situ:.1f} us more than {over}, beyond what it "
                "costs the bare loop (the engine path: context, budget, backoff, decide, "
                f"record); with the attempts' bookkeeping: {result['share_in_situ']:.1%} of "
                "trio_retry's CPU"
            )
        result["details"] = details
        return result

    async def _end_to_end(
        self, endpoint: Endpoint, path: str, params: RunParams, max_calls: int
    ) -> dict[str, Any]:
        import trio_retry as tr

        timed = TimedEngine(tr.DefaultRetryEligibilityEngine())
        retry = tr.RetryPolicy(backoff=tr.Backoff(initial=0.0, jitter="none"))
        upstream = tr.Upstream(budget=tr.RetryBudget(ratio=1.0))
        expected = {"200": 200, "404": 404, "503": 200}[self.path_kind]
        attempts_expected = 2 if self.path_kind == "503" else 1
        url = endpoint.base_url + path
        small_url = endpoint.base_url + SMALL_PATH
        h11 = H11TrioAdapter(endpoint, 1)

        async with (
            tr.Client(
                max_connections=1,
                max_connections_per_origin=1,
                engine=timed,
                retry=retry,
                default_upstream=upstream,
            ) as client,
            h11.lifespan(),
        ):

            async def tr_call() -> None:
                r = await client.get(url)
                if r.status != expected or len(r.attempts) != attempts_expected:
                    raise RuntimeError(f"trio_retry: status {r.status}, {len(r.attempts)} attempts")
                if expected == 200 and len(r.content) != len(SMALL_BODY):
                    raise RuntimeError(f"trio_retry: {len(r.content)} body bytes")

            async def h11_call() -> None:
                status, _ = await h11.get(path)
                if self.path_kind == "503":
                    if status != 503:
                        raise RuntimeError(f"bare h11: status {status} where 503 was scripted")
                    await trio.lowlevel.checkpoint()
                    status, _ = await h11.get(path)
                if status != expected:
                    raise RuntimeError(f"bare h11: status {status}")

            async def tr_small() -> None:
                r = await client.get(small_url)
                if r.status != 200:
                    raise RuntimeError(f"trio_retry: status {r.status} for {SMALL_PATH}")

            async def h11_small() -> None:
                status, _ = await h11.get(SMALL_PATH)
                if status != 200:
                    raise RuntimeError(f"bare h11: status {status} for {SMALL_PATH}")

            calls: dict[str, Callable[[], Awaitable[None]]] = {
                "trio_retry": tr_call,
                "h11": h11_call,
            }
            if self.path_kind != "200":
                # The same two clients on /small too, for the in-place differential below.
                calls.update(trio_retry_ref=tr_small, h11_ref=h11_small)
            phases = await _interleaved(calls, params.warmup, params, max_calls)

        tr_phase, h11_phase = phases["trio_retry"], phases["h11"]
        # The engine's own time in place: decide() calls in the measured phase per call, times
        # the mean time of one decide() (less the perf_counter pair around it).
        warm_decisions = params.warmup if self.path_kind != "200" else 0
        per_call = (timed.calls - warm_decisions) / tr_phase.calls if tr_phase.calls else 0.0
        per_decision = 0.0
        if timed.calls:
            per_decision = max(0.0, timed.seconds / timed.calls - timer_overhead())
        # What the engine path costs in place, end to end: trio_retry's extra CPU for this call
        # over the 200s it is made of (one for a 404, two for a 503 and its retry), less the
        # bare loop's extra for the same (a 404 carries a slightly larger body, for instance).
        differential = None
        if "trio_retry_ref" in phases:
            tr_ref, h11_ref = phases["trio_retry_ref"], phases["h11_ref"]
            n = attempts_expected
            differential = (tr_phase.cpu / tr_phase.calls - n * tr_ref.cpu / tr_ref.calls) - (
                h11_phase.cpu / h11_phase.calls - n * h11_ref.cpu / h11_ref.calls
            )
        return {
            "engine_path_in_situ_us": differential * 1e6 if differential is not None else None,
            "trio_retry_calls": tr_phase.calls,
            "trio_retry_cpu": tr_phase.cpu,
            "trio_retry_wall": tr_phase.wall,
            "h11_calls": h11_phase.calls,
            "h11_cpu": h11_phase.cpu,
            "h11_wall": h11_phase.wall,
            "engine_in_situ_us": per_decision * per_call * 1e6,
            "engine_decisions_per_call": per_call,
            "foreign": tr_phase.foreign,
        }


register(
    EngineCostScenario(
        name="engine_cost_200",
        title="Engine + bookkeeping cost, happy path: sequential GETs -> 200 (benchmark server)",
        description="trio_retry and the bare h11 loop, sequential keep-alive GETs of /small; "
        "the engine is not consulted; the bookkeeping is timed alone.",
        path_kind="200",
    ),
    EngineCostScenario(
        name="engine_cost_404",
        title="Engine + bookkeeping cost, engine consulted: sequential GETs -> 404 (denied)",
        description="As engine_cost_200 for /missing (404): one engine decision per call.",
        path_kind="404",
    ),
    EngineCostScenario(
        name="engine_cost_503",
        title="Engine + bookkeeping cost, retry path: GET -> 503, retry -> 200 (FaultServer "
        "process)",
        description="Each call: a 503, one engine decision (allowed), an immediate retry, a "
        "200; against a FaultServer in its own process.",
        path_kind="503",
        requests=2000,
        warmup=100,
        smoke_requests=20,
    ),
)
