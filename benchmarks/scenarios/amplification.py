"""Retry amplification under an outage: how much extra load do retries put on a sick upstream?

Open-loop traffic on a virtual clock (``trio.testing.MockClock``, see
:func:`~benchmarks.scenarios.retrying.run_virtual`): one GET every ``1 / rate`` seconds, each in
its own task, whatever happened to the previous ones (callers do not slow down because the
upstream is down). Every call may make up to 4 attempts in every contestant
(:mod:`benchmarks.scenarios.retrying`); the difference is who decides whether to use them.

- ``outage_503``: a ``FaultServer`` answers ``503`` to everything (HTTP/1.1, keep-alive). What
  reaches the upstream is counted at the server: ``len(server.requests)``.
- ``outage_refused``: nothing listens on the port (``trio_retry.testing.refused_port()``), so
  every connection is refused. Nothing can be counted at a server; the TCP ``connect()`` calls
  are counted in the client process by a Trio socket factory
  (:class:`~benchmarks.scenarios.retrying.ConnectCounter`), the same way for every contestant.

**amplification** = what reached the upstream / first attempts (= calls). trio_retry's retry
budget (default ``RetryBudget(ratio=0.2, min_per_second=10, window=10)``) admits at most
``0.2 x first attempts + 10 retries/s``, so at ``R`` calls/s its steady state is
``1.2 + 10 / R``: the floor of 10 retries a second (meant for low-traffic clients) weighs less
the more traffic there is. The full run therefore also measures trio_retry alone at other rates
(``sweep``) and with the budget switched off (``budget_off``: the same client with an unlimited
budget, i.e. what ``max_attempts=4`` alone would do).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import trio

from benchmarks.scenarios import Column, RunParams, register
from benchmarks.scenarios.retrying import (
    CONTESTANTS,
    MAX_ATTEMPTS,
    CallResult,
    ConnectCounter,
    Contestant,
    Outcome,
    ResilienceScenario,
    run_virtual,
)

if TYPE_CHECKING:
    from benchmarks.clients import Adapter
    from benchmarks.runtime import Runtime

SWEEP_SECONDS = 30.0  # virtual seconds of outage per sweep point
BUDGET_RATIO = 0.2  # trio_retry's defaults (SPEC §8), for the predicted figures
BUDGET_FLOOR = 10.0
BUDGET_WINDOW = 10.0
TARGET = 1.2  # the target for trio_retry


def steady_state(rate: float) -> float:
    """trio_retry's steady-state amplification at ``rate`` calls/s with the default budget."""
    return 1.0 + min(MAX_ATTEMPTS - 1.0, BUDGET_RATIO + BUDGET_FLOOR / rate)


def budget_bound(calls: int, seconds: float) -> float:
    """SPEC §8's bound over a span of ``seconds``: retries <= ratio x first attempts +
    min_per_second x (span + window), +1 per window for rounding; as an amplification."""
    windows = math.ceil((seconds + BUDGET_WINDOW) / BUDGET_WINDOW)
    retries = BUDGET_RATIO * calls + BUDGET_FLOOR * (seconds + BUDGET_WINDOW) + windows
    return 1.0 + min(MAX_ATTEMPTS - 1.0, retries / calls)


@dataclass(frozen=True)
class OutageScenario(ResilienceScenario):
    suite: ClassVar[str] = "amplification"
    columns: ClassVar[tuple[Column, ...] | None] = (
        Column("calls", "calls", width=7),
        Column("upstream", "upstream", width=8),
        Column("amplif.", "amplification", ".2f", width=7, suffix="x"),
        Column("retries", "retries", width=7),
        Column("budget-denied", "budget_denied", width=13),
        Column("gave 503 back", "final_status", width=13),
        Column("raised", "final_error", width=7),
        Column("sim. s", "virtual_s", ".0f", width=6),
        Column("wall s", "wall_s", ".1f", width=6),
    )
    summary: ClassVar[dict[str, str] | None] = {
        k: "median"
        for k in (
            "calls",
            "upstream",
            "amplification",
            "retries",
            "budget_denied",
            "final_status",
            "final_error",
            "virtual_s",
            "wall_s",
        )
    }
    legend: ClassVar[str | None] = (
        "amplif.: what reached the upstream (503: requests at the server; refused: TCP connect "
        "attempts) per call;\nevery contestant may make 4 attempts per call; trio_retry has its "
        "default retry budget (steady state 1.2 + 10/rate)."
    )
    name: str
    title: str
    description: str
    requests: int  # calls, full mode
    smoke_requests: int
    kind: str  # "503" or "refused"
    rate: float  # calls per (virtual) second
    endpoint: str = "h1"  # unused
    concurrency: int = 0  # open loop: one task per call
    warmup: int = 0
    smoke_warmup: int = 0
    http2: bool = False
    sweep_rates: tuple[float, ...] = ()  # trio_retry only, full mode
    seed: int = 20240503

    def to_json(self) -> dict[str, Any]:
        data = super().to_json()
        data.update(kind=self.kind, rate=self.rate, max_attempts=MAX_ATTEMPTS)
        return data

    def progress_line(self, entry: dict[str, Any]) -> str:
        return (
            f"{entry['calls']:6} calls -> {entry['upstream']:6} upstream "
            f"({entry['amplification']:.2f}x)  wall {entry['wall_s']:.1f}s"
        )

    def run(self, adapter: Adapter, runtime: Runtime, params: RunParams) -> dict[str, Any]:
        cls = CONTESTANTS[adapter.name]
        wall_deadline = time.monotonic() + params.soft_limit

        async def main() -> dict[str, Any]:
            started_cpu = time.process_time()
            started = time.perf_counter()
            result = await self._measure(cls, params.requests, self.rate, wall_deadline)
            if cls.name == "trio_retry" and not params.smoke:
                # The default budget's floor (min_per_second=10) is what lifts it above its
                # ratio at modest rates; the same client with the floor at 0 shows the ratio.
                no_floor = await self._measure(
                    cls, params.requests, self.rate, wall_deadline, budget_floor=0.0
                )
                result["no_floor"] = _point(no_floor, self.rate)
                result["details"] = [
                    f"trio_retry with RetryBudget(min_per_second=0) at {self.rate:g}/s: "
                    f"{no_floor['amplification']:.2f}x ({no_floor['upstream']} upstream for "
                    f"{no_floor['calls']} calls)"
                ]
            if cls.name == "trio_retry" and not params.smoke and self.kind == "503":
                sweep = []
                for rate in self.sweep_rates:
                    calls = round(rate * SWEEP_SECONDS)
                    point = await self._measure(cls, calls, rate, wall_deadline)
                    sweep.append(_point(point, rate))
                control = await self._measure(
                    cls, params.requests, self.rate, wall_deadline, unlimited_budget=True
                )
                result["sweep"] = sweep
                result["budget_off"] = _point(control, self.rate)
                result["details"] += [
                    "trio_retry alone at other call rates, "
                    f"{SWEEP_SECONDS:.0f} s each (measured / predicted steady state): "
                    + ", ".join(
                        f"{p['rate']:g}/s {p['amplification']:.2f}x / {p['steady_state']:.2f}x"
                        for p in sweep
                    ),
                    f"trio_retry with the budget switched off at {self.rate:g}/s: "
                    f"{control['amplification']:.2f}x ({control['upstream']} upstream for "
                    f"{control['calls']} calls)",
                ]
            result["wall_s"] = time.perf_counter() - started
            result["cpu_s"] = time.process_time() - started_cpu
            return result

        return run_virtual(main, params.hard_limit)

    async def _measure(
        self,
        cls: type[Contestant],
        calls: int,
        rate: float,
        wall_deadline: float,
        *,
        unlimited_budget: bool = False,
        budget_floor: float | None = None,
    ) -> dict[str, Any]:
        from trio_retry.testing import FaultServer, Respond, refused_port

        counter = ConnectCounter()
        trio.socket.set_custom_socket_factory(counter)
        results: list[CallResult] = []
        truncated = False
        async with trio.open_nursery() as nursery:
            server: FaultServer | None = None
            if self.kind == "503":
                server = FaultServer(http2=False)
                server.default = Respond(503, body=b"service unavailable\n")
                base_url = await nursery.start(server.serve)
                port = server.port
            else:
                port = refused_port()
                base_url = f"http://127.0.0.1:{port}"
            contestant = cls(
                base_url,
                timeout=10.0,
                seed=self.seed,
                unlimited_budget=unlimited_budget,
                budget_floor=budget_floor,
            )
            start = trio.current_time()

            async def one(i: int) -> None:
                results.append(await contestant.call("GET", f"/outage/{i}"))

            async with contestant.open():
                async with trio.open_nursery() as calls_nursery:
                    for i in range(calls):
                        if time.monotonic() > wall_deadline:
                            truncated = True
                            break
                        calls_nursery.start_soon(one, i)
                        await trio.sleep(1.0 / rate)
            virtual = trio.current_time() - start
            nursery.cancel_scope.cancel()
        trio.socket.set_custom_socket_factory(None)

        issued = len(results)
        upstream = len(server.requests) if server is not None else counter.by_port[port]
        outcomes = Counter(r.outcome.value for r in results)
        unexpected = outcomes[Outcome.OK.value] + outcomes[Outcome.AMBIGUOUS.value]
        note = ""
        if truncated:
            note = f"stopped after {issued} of {calls} calls (wall-clock limit)"
        elif unexpected:
            note = f"{unexpected} calls did not end in a 503 or an error during the outage"
        errors = Counter(r.error for r in results if r.error)
        return {
            "status": "failed" if note else "ok",
            "note": note,
            "kind": self.kind,
            "rate": rate,
            "calls": issued,
            "first_attempts": issued,
            "upstream": upstream,
            "amplification": upstream / issued if issued else float("nan"),
            "retries": upstream - issued,
            "client_attempts": sum(r.attempts for r in results),
            "connect_attempts": counter.by_port[port],
            "connections_accepted": server.connections_accepted if server is not None else 0,
            "budget_denied": sum(1 for r in results if r.budget_denied),
            "final_status": outcomes[Outcome.STATUS.value],
            "final_error": outcomes[Outcome.FAILED.value],
            "outcomes": dict(outcomes),
            "error_kinds": dict(errors.most_common(5)),
            "virtual_s": virtual,
            "steady_state": steady_state(rate) if cls.name == "trio_retry" else None,
            "budget_bound": budget_bound(issued, virtual)
            if cls.name == "trio_retry" and issued
            else None,
            "truncated": truncated,
            "unlimited_budget": unlimited_budget,
        }


def _point(result: dict[str, Any], rate: float) -> dict[str, Any]:
    return {
        "rate": rate,
        "calls": result["calls"],
        "upstream": result["upstream"],
        "amplification": result["amplification"],
        "budget_denied": result["budget_denied"],
        "virtual_s": result["virtual_s"],
        "steady_state": steady_state(rate),
    }


register(
    OutageScenario(
        name="outage_503",
        title="Outage: every request answered 503 (HTTP/1.1 FaultServer, 200 GETs/s, 30 s)",
        description="GETs at 200 calls/s for 30 virtual seconds against a server that answers "
        "503 to everything; requests reaching the server per call.",
        requests=6000,
        smoke_requests=40,
        kind="503",
        rate=200.0,
        sweep_rates=(20.0, 50.0, 200.0, 1000.0),
    ),
    OutageScenario(
        name="outage_refused",
        title="Outage: every connection refused (200 GETs/s, 30 s)",
        description="GETs at 200 calls/s for 30 virtual seconds to a port where nothing "
        "listens; TCP connection attempts per call, counted in the client process.",
        requests=6000,
        smoke_requests=40,
        kind="refused",
        rate=200.0,
    ),
)
