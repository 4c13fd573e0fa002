"""Duplicate side effects under injected faults: POSTs that a retry loop executes twice, and
failures reported as plain failures although the server executed the request.

Each logical call is a POST to a path of its own (``/orders/<i>``), so the ``FaultServer``'s
record (``server.requests``, with ``executed`` per request) says exactly how many times the
server carried out each call. A fixed schedule decides, per call, which fault its first attempt
meets and for how many attempts the fault persists (``PERSISTENCE``: 1, 1, 2, 1 or 4 attempts; 4
outlasts every contestant's 4 attempts); after that the server answers ``201``:

- ``close_after_body``: the connection is dropped after the whole request was read (executed);
- ``stall``: the response comes ``STALL`` seconds later, after the client's 1 s deadline/timeout
  (executed);
- ``refused_stream`` (HTTP/2 only): ``RST_STREAM(REFUSED_STREAM)`` before the body is read
  (not executed, and provably so);
- ``reset_mid_response``: the status line, part of the body, then a TCP reset (executed).

Half of the calls meet no fault. ``concurrency`` workers share one client, so on HTTP/2 a
dropped or reset connection also breaks the other streams in flight on it: that collateral
damage is part of the test. Everything runs on a virtual clock
(:func:`~benchmarks.scenarios.retrying.run_virtual`).

Per call, the client's final report (:class:`~benchmarks.scenarios.retrying.Outcome`) is set
against the number of executions in the server's record:

- **duplicate**: executed more than once;
- **false failed**: a plain failure (nothing in it says the server may have acted) although the
  server executed the call;
- **ambiguous**: the client said "may have been executed"; split by what actually happened;
- **failed, executed**: a failure whose evidence proves the server acted (the status line
  arrived, then the body broke: trio_retry's ``RequestFailed`` with ``PARTIAL_RESPONSE``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import trio

from benchmarks.scenarios import Column, RunParams, register
from benchmarks.scenarios.retrying import (
    CONTESTANTS,
    CallResult,
    Contestant,
    Outcome,
    ResilienceScenario,
    run_virtual,
)

if TYPE_CHECKING:
    from benchmarks.clients import Adapter
    from benchmarks.runtime import Runtime
    from trio_retry.testing import Action

TIMEOUT = 1.0  # trio_retry: the call deadline; the loops: httpx/h11 per-operation timeouts
STALL = 2.0  # past the deadline
CREATED = b'{"created": true}\n'
PERSISTENCE = (1, 1, 2, 1, 4)  # attempts a call's fault lasts, cycling per block of calls


def _fault(kind: str) -> Action:
    from trio_retry.testing import CloseAfterBody, PartialBody, RefuseStream, Respond, Stall

    makers: dict[str, Callable[[], Action]] = {
        "close_after_body": CloseAfterBody,
        "stall": lambda: Stall(STALL, then=Respond(201, body=CREATED)),
        "refused_stream": RefuseStream,
        "reset_mid_response": lambda: PartialBody(
            status=201, declared_length=64, body=b'{"created": tr', reset=True
        ),
    }
    return makers[kind]()


COUNT_KEYS = (
    "calls",
    "faulted",
    "duplicates",
    "extra_executions",
    "silent_duplicates",
    "false_failed",
    "ambiguous",
    "ambiguous_executed",
    "ambiguous_not_executed",
    "failed_executed",
    "failed_not_executed",
    "ok",
    "lost",
)


@dataclass(frozen=True)
class FaultScenario(ResilienceScenario):
    suite: ClassVar[str] = "duplicates"
    columns: ClassVar[tuple[Column, ...] | None] = (
        Column("calls", "calls", width=5),
        Column("faulted", "faulted", width=7),
        Column("dup calls", "duplicates", width=9),
        Column("extra exec", "extra_executions", width=10),
        Column("false failed", "false_failed", width=12),
        Column("ambig. exec/not", "ambiguous_split", "", width=15),
        Column("failed+exec", "failed_executed", width=11),
        Column("failed, not exec", "failed_not_executed", width=16),
        Column("ok", "ok", width=5),
    )
    # A duplicate or a false failure in any run must show: the worst run, not the median.
    summary: ClassVar[dict[str, str] | None] = {
        **{k: "max" for k in COUNT_KEYS},
        "ambiguous_split": "first",
        "wall_s": "median",
    }
    legend: ClassVar[str | None] = (
        "dup calls: POSTs the server executed more than once (extra exec: executions beyond "
        "the first); false failed: a plain failure\nalthough the server executed the call; "
        "ambig.: the client said 'may have been executed' (split by what the server did);\n"
        "failed+exec: a failure whose evidence proves execution (status line received, body "
        "broken); failed, not exec: a correct failure. Worst run shown."
    )
    name: str
    title: str
    description: str
    requests: int  # calls, full mode
    smoke_requests: int
    http2: bool
    faults: tuple[str, ...]
    endpoint: str = "h1"  # unused
    concurrency: int = 4
    warmup: int = 0
    smoke_warmup: int = 0
    seed: int = 7

    def to_json(self) -> dict[str, Any]:
        data = super().to_json()
        data.update(
            http2=self.http2,
            faults=list(self.faults),
            persistence=list(PERSISTENCE),
            timeout_s=TIMEOUT,
            stall_s=STALL,
        )
        return data

    def schedule(self, i: int) -> tuple[str | None, int]:
        """The fault of call ``i`` (None: none) and for how many attempts it persists."""
        pattern: list[str | None] = []
        for fault in self.faults:
            pattern += [None, fault]
        kind = pattern[i % len(pattern)]
        persistence = PERSISTENCE[(i // len(pattern)) % len(PERSISTENCE)]
        return kind, persistence

    def progress_line(self, entry: dict[str, Any]) -> str:
        return (
            f"{entry['calls']:5} POSTs: {entry['duplicates']} duplicated, "
            f"{entry['false_failed']} false failed, {entry['ambiguous']} ambiguous, "
            f"{entry['ok']} ok  wall {entry['wall_s']:.1f}s"
        )

    def run(self, adapter: Adapter, runtime: Runtime, params: RunParams) -> dict[str, Any]:
        cls = CONTESTANTS[adapter.name]
        wall_deadline = time.monotonic() + params.soft_limit

        async def main() -> dict[str, Any]:
            started = time.perf_counter()
            started_cpu = time.process_time()
            result = await self._measure(cls, params.requests, wall_deadline)
            result["wall_s"] = time.perf_counter() - started
            result["cpu_s"] = time.process_time() - started_cpu
            return result

        return run_virtual(main, params.hard_limit)

    async def _measure(
        self, cls: type[Contestant], calls: int, wall_deadline: float
    ) -> dict[str, Any]:
        from trio_retry.testing import FaultServer, Respond

        server = FaultServer(http2=self.http2)
        server.default = Respond(201, body=CREATED)
        kinds: list[str | None] = []
        for i in range(calls):
            kind, persistence = self.schedule(i)
            kinds.append(kind)
            if kind is not None:
                faults = [_fault(kind) for _ in range(persistence)]
                server.route("POST", f"/orders/{i}", *faults, Respond(201, body=CREATED))
        results: dict[int, CallResult] = {}
        truncated = False
        async with trio.open_nursery() as nursery:
            base_url = await nursery.start(server.serve)
            contestant = cls(
                base_url,
                http2=self.http2,
                timeout=TIMEOUT,
                seed=self.seed,
                max_connections=self.concurrency,
            )
            next_call = 0

            async def worker() -> None:
                nonlocal next_call, truncated
                while next_call < calls:
                    if time.monotonic() > wall_deadline:
                        truncated = True
                        return
                    i = next_call
                    next_call += 1
                    body = b'{"order": %d, "amount": 5}' % i
                    results[i] = await contestant.call("POST", f"/orders/{i}", body)

            async with contestant.open():
                async with trio.open_nursery() as workers:
                    for _ in range(self.concurrency):
                        workers.start_soon(worker)
            nursery.cancel_scope.cancel()
        return self._tally(server, kinds, results, truncated)

    def _tally(
        self,
        server: Any,
        kinds: list[str | None],
        results: dict[int, CallResult],
        truncated: bool,
    ) -> dict[str, Any]:
        executed: Counter[str] = Counter()
        received: Counter[str] = Counter()
        for record in server.requests:
            received[record.path] += 1
            if record.executed:
                executed[record.path] += 1
        totals: Counter[str] = Counter()
        by_fault: dict[str, Counter[str]] = {}
        examples: list[str] = []
        for i, result in sorted(results.items()):
            runs = executed[f"/orders/{i}"]
            kind = kinds[i] or "none"
            flags = _classify(result.outcome, runs)
            flags["calls"] = 1
            flags["faulted"] = int(kinds[i] is not None)
            totals.update(flags)
            by_fault.setdefault(kind, Counter()).update(flags)
            if (flags["duplicates"] or flags["false_failed"]) and len(examples) < 5:
                examples.append(
                    f"/orders/{i} ({kind}): {result.outcome.value} after {result.attempts} "
                    f"attempt(s), executed {runs}x, received {received[f'/orders/{i}']}x"
                    + (f" [{result.error}]" if result.error else "")
                )
        out: dict[str, Any] = {k: totals[k] for k in COUNT_KEYS}
        split = (totals["ambiguous_executed"], totals["ambiguous_not_executed"])
        out["ambiguous_split"] = f"{split[0]}/{split[1]}"
        out["false_failed_strict"] = totals["false_failed"] + totals["failed_executed"]
        out["requests_received"] = len(server.requests)
        out["executions"] = sum(executed.values())
        out["connections"] = server.connections_accepted
        out["by_fault"] = {k: {f: v[f] for f in COUNT_KEYS} for k, v in sorted(by_fault.items())}
        out["examples"] = examples
        out["truncated"] = truncated
        note = ""
        if truncated:
            note = f"stopped after {len(results)} calls (wall-clock limit)"
        elif totals["lost"]:
            note = f"{totals['lost']} calls reported success although the server never ran them"
        out["status"] = "failed" if note else "ok"
        out["note"] = note
        out["details"] = examples[:2]
        return out


def _classify(outcome: Outcome, runs: int) -> Counter[str]:
    c: Counter[str] = Counter()
    if runs > 1:
        c["duplicates"] = 1
        c["extra_executions"] = runs - 1
    if outcome is Outcome.OK:
        c["ok"] = 1
        if runs > 1:
            c["silent_duplicates"] = 1
        if runs == 0:
            c["lost"] = 1  # impossible unless the record or the client is wrong
    elif outcome is Outcome.AMBIGUOUS:
        c["ambiguous"] = 1
        c["ambiguous_executed" if runs else "ambiguous_not_executed"] = 1
    elif outcome is Outcome.FAILED_EXECUTED:
        c["failed_executed"] = 1
    elif runs:
        c["false_failed"] = 1  # FAILED (or a final error status) although executed
    else:
        c["failed_not_executed"] = 1
    return c


register(
    FaultScenario(
        name="faults_post_h2",
        title="Faults against POSTs over HTTP/2 (h2c, 4 concurrent calls)",
        description="POSTs, each to a path of its own, through close-after-body, stall past "
        "the deadline, REFUSED_STREAM and reset mid-response faults (HTTP/2 prior knowledge); "
        "executions counted in the server's record.",
        requests=2000,
        smoke_requests=40,
        http2=True,
        faults=("close_after_body", "stall", "refused_stream", "reset_mid_response"),
    ),
    FaultScenario(
        name="faults_post_h1",
        title="Faults against POSTs over HTTP/1.1 (4 concurrent calls)",
        description="As faults_post_h2 over HTTP/1.1 keep-alive connections, without "
        "REFUSED_STREAM (HTTP/2 only); the bare-h11 urllib3-style loop takes part.",
        requests=1500,
        smoke_requests=30,
        http2=False,
        faults=("close_after_body", "stall", "reset_mid_response"),
    ),
)
