"""Soak: hundreds of concurrent mixed calls with random faults, each judged on the record.

``python -m benchmarks.soak`` runs ``--concurrency`` workers (200) for ``--duration`` seconds
(120) in one Trio process, real time, real sockets. Four long-lived `FaultServer`s on loopback
(HTTP/1.1 and HTTP/2, cleartext and TLS) and five long-lived clients (one per mode, plus one
that does not trust the test CA). Each worker loops: pick a mode, a body, an idempotency, a
deadline and a schedule of up to three faults for a path of its own; make the call; queue it for
judgement. Calls are judged ``--quarantine`` seconds (3) after they ended, by the oracle the
property tests use too (``benchmarks/invariants.py``) against the server's record, so a request
the server executed late still counts.

Clients and servers live for the whole run, so a leak in the client's per-call, per-connection
or per-origin state would show as growth. What the harness itself keeps is bounded: each worker
reuses a ring of ``SLOTS`` paths (a path is reused only once its last call has been judged, so
records never mix), and judged records are replaced in the server's list by one shared
placeholder (eight bytes per request remain: about 1 MB over a two-minute run).

It reports calls, faults injected, outcomes, invariant violations (which must be 0), deadline
overshoots, and memory: the resident set size every half second, compared between the end of
the warm-up (the first quarter of the run) and the end. At the end the clients close: none of
their sockets may remain, and the process must have the file descriptors and tasks it started
with. The exit status is 1 if any of that fails or memory grew more than ``--max-growth-mb``.
A smoke of a few seconds runs in the test suite (tests/reliability/test_soak_smoke.py); the
figures of the full run are in docs/reliability.md.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from collections import Counter, deque
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

import trio_retry
from benchmarks.invariants import (
    CallSpec,
    Kind,
    Outcome,
    check_call,
    client_tasks,
    expected_idempotency,
    final_action,
    open_fds,
    sockets_connected_to,
)
from benchmarks.memory import memory_summary, rss_mb
from trio_retry import (
    Backoff,
    FailureCategory,
    Idempotency,
    Reopenable,
    RetryPolicy,
    StageTimeouts,
)
from trio_retry.testing import (
    Action,
    AfterBody,
    CloseAfterBody,
    CloseAfterHead,
    CloseBeforeRead,
    EndlessBody,
    FaultServer,
    GoAway,
    PartialBody,
    Raw,
    RecordedRequest,
    RefuseStream,
    Respond,
    Stall,
    refused_port,
)

MODES = ("h1", "h1-tls", "h2c", "h2-tls")
METHODS = ("GET", "POST", "PUT", "GET", "POST", "DELETE", "PATCH")
#: Paths per worker, reused in turn (see the module docstring).
SLOTS = 16
#: Seconds after a call ends before it is judged (``--quarantine``): anything the server still
#: does with it (read a late body, finish a stall) is done by then.
QUARANTINE = 3.0
#: Seconds a call may outlive its deadline. One process runs the clients, the servers and
#: hundreds of tasks on a couple of cores, so one scheduling round can take a few hundred
#: milliseconds under this load; the worst overshoot is reported too.
DEFAULT_SLACK = 1.0

GARBAGE = Raw(b"SSH-2.0-OpenSSH_9.6\r\n")
BAD_LENGTH = Raw(b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n")
BAD_CHUNKS = Raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n")
H2_VIOLATION = Raw(b"\x00\x00\x04\x00\x01\x00\x00\x00\x00data")  # DATA on stream 0
OK = Respond(200, body=b"ok")

AFTER_BODY: tuple[AfterBody, ...] = (
    Respond(201, body=b"created"),
    Respond(204),
    Respond(404),
    Respond(408),
    Respond(425),
    Respond(429, headers={"Retry-After": "0"}),
    Respond(500),
    Respond(502),
    Respond(503, headers={"Retry-After": "0"}),
    Respond(504),
    Respond(200, body=b"ok", close_after=True),
    Respond(200, body=b"s" * 20_000, body_rate=100_000),
    Respond(200, body=b"B" * 200_000),
    Respond(200, headers={"X-Big": "a" * 70_000}),
    PartialBody(),
    PartialBody(reset=True),
    CloseAfterBody(),
    CloseAfterBody(reset=True),
    GARBAGE,
    BAD_LENGTH,
    BAD_CHUNKS,
    EndlessBody(chunk=b"e" * 4096, rate=200_000, seconds=10.0),
)
BEFORE_BODY: tuple[Action, ...] = (
    CloseBeforeRead(),
    CloseBeforeRead(reset=True),
    CloseAfterHead(),
    CloseAfterHead(reset=True),
)


def fault(rng: random.Random, http2: bool) -> Action:
    roll = rng.random()
    if roll < 0.35:
        return OK
    if roll < 0.45:
        return rng.choice(BEFORE_BODY)
    if roll < 0.55:
        return Stall(rng.choice((0.05, 0.2, 0.6)), then=rng.choice((OK, *AFTER_BODY)))
    if http2 and roll < 0.62:
        return rng.choice((RefuseStream(), H2_VIOLATION))
    if http2 and roll < 0.67:
        return GoAway(error_code=rng.choice((0, 2)), then=rng.choice((OK, *AFTER_BODY)))
    return rng.choice(AFTER_BODY)


def fault_name(record: RecordedRequest) -> str | None:
    """A short name for the fault a request met; None for a plain success. A GOAWAY counts
    once, for the stream that took it from the script (it ran), not for the streams above it
    that it abandoned (which are recorded with it)."""
    action = record.action
    final = final_action(action)
    if isinstance(action, GoAway):
        return "GoAway" if record.executed else None
    if isinstance(action, Stall):
        return "Stall"
    if isinstance(final, Respond):
        if final.status >= 400:
            return f"Respond({final.status})"
        if final.close_after or final.body_rate or len(final.body) > 100_000:
            return "Respond(close/slow/big)"
        if final.headers:
            return "Respond(oversized head)"
        return None
    if isinstance(final, Raw):
        return "Raw(h2 violation)" if final == H2_VIOLATION else "Raw(not HTTP)"
    return type(final).__name__


class OneShot:
    """A one-shot request body (an async iterator)."""

    def __init__(self) -> None:
        self.left = 3

    def __aiter__(self) -> OneShot:
        return self

    async def __anext__(self) -> bytes:
        if not self.left:
            raise StopAsyncIteration
        self.left -= 1
        await trio.lowlevel.checkpoint()
        return b"o" * 1000


PLACEHOLDER = RecordedRequest(
    method="", path="", headers=(), body=b"", connection_id=0, http_version="",
    stream_id=None, time=math.inf, executed=False, action=OK,
)  # fmt: skip


class Records:
    """One server's record, indexed by path as it grows; judged entries are dropped."""

    def __init__(self, server: FaultServer) -> None:
        self.server = server
        self.index: dict[str, list[int]] = {}
        self.seen = 0

    def take(self, path: str, until: float) -> list[RecordedRequest]:
        """The records of `path` whose head arrived before `until`, removed from the record."""
        requests = self.server.requests
        for i in range(self.seen, len(requests)):
            self.index.setdefault(requests[i].path, []).append(i)
        self.seen = len(requests)
        indices = self.index.get(path, [])
        taken = [i for i in indices if requests[i].time < until]
        self.index[path] = [i for i in indices if i not in taken]
        records = [requests[i] for i in taken]
        for i in taken:
            requests[i] = PLACEHOLDER
        return records


@dataclass
class Slot:
    """A path of one worker, always used with the same mode and method, so the servers' route
    tables hold a fixed set of keys however long the run."""

    path: str
    mode: str
    method: str
    free: bool = True


@dataclass
class Pending:
    ready: float
    slot: Slot
    mode: str
    spec: CallSpec
    outcome: Outcome
    until: float


@dataclass
class Report:
    calls: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    server_faults: Counter[str] = field(default_factory=Counter)
    client_faults: Counter[str] = field(default_factory=Counter)
    violations: int = 0
    examples: list[str] = field(default_factory=list)
    overshoots: list[float] = field(default_factory=list)
    rss_mb: list[tuple[float, float]] = field(default_factory=list)

    def violation(self, text: str) -> None:
        self.violations += 1
        if len(self.examples) < 20:
            self.examples.append(text)


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.report = Report()
        self.servers: dict[str, FaultServer] = {}
        self.records: dict[str, Records] = {}
        self.clients: dict[str, trio_retry.Client] = {}
        self.pending: deque[Pending] = deque()
        self.refused = refused_port()

    # --- one call ----------------------------------------------------------------------------

    async def worker(self, number: int, end: float) -> None:
        slots = [
            Slot(
                f"/soak/w{number}/s{k}",
                MODES[(number // len(METHODS) + k) % len(MODES)],
                METHODS[(number + k) % len(METHODS)],
            )
            for k in range(SLOTS)
        ]
        turn = 0
        while trio.current_time() < end:
            slot = slots[turn % SLOTS]
            turn += 1
            while not slot.free:  # judged --quarantine seconds after its call ended
                await trio.sleep(0.05)
            slot.free = False
            await self.one_call(slot)

    async def one_call(self, slot: Slot) -> None:
        rng = self.rng
        mode = slot.mode
        server = self.servers[mode]
        client_name = "untrusted" if mode == "h1-tls" and rng.random() < 0.03 else mode
        client = self.clients[client_name]
        method = slot.method
        body = "none" if method == "GET" else rng.choice(("bytes", "bytes", "reopen", "oneshot"))
        key = method != "GET" and rng.random() < 0.2
        explicit = rng.choice((None, None, None, None, *Idempotency))
        deadline = rng.choice((0.2, 0.5, 1.0, 2.0))
        cancel_after = rng.choice((None,) * 20 + (0.1,))
        stream = rng.random() < 0.15
        port = self.refused if rng.random() < 0.03 else server.port
        if port == server.port:
            faults = [fault(rng, server.http2) for _ in range(rng.randint(0, 3))]
            server.route(method, slot.path, *faults)
        url = f"{'https' if server.tls else 'http'}://127.0.0.1:{port}{slot.path}"
        options: dict[str, Any] = {"deadline": deadline}
        if body == "bytes":
            options["content"] = b"b" * rng.choice((10, 1000, 100_000))
        elif body == "reopen":
            options["content"] = Reopenable(lambda: [b"r" * 1000] * 3)
        elif body == "oneshot":
            options["content"] = OneShot()
        if key:
            options["idempotency_key"] = True
        if explicit is not None:
            options["idempotency"] = explicit

        started = trio.current_time()
        try:
            with trio.CancelScope() as scope:
                if cancel_after is not None:
                    scope.deadline = started + cancel_after
                if stream:
                    async with client.stream(method, url, **options) as response:
                        await response.aread()
                else:
                    response = await client.request(method, url, **options)
        except Exception as exc:
            outcome = Outcome.of_error(exc, trio.current_time() - started)
        else:
            elapsed = trio.current_time() - started
            if scope.cancelled_caught:
                outcome = Outcome(Kind.CANCELLED, elapsed)
            else:
                outcome = Outcome.of_response(response, elapsed)
        ended = trio.current_time()

        limit = deadline if cancel_after is None else min(deadline, cancel_after)
        spec = CallSpec(
            method=method,
            idempotency=expected_idempotency(method, explicit=explicit, key=key),
            one_shot=body == "oneshot",
            max_attempts=3,
            time_limit=limit,
            keyed=key,
            may_be_cancelled=cancel_after is not None,
        )
        report = self.report
        report.calls += 1
        report.outcomes[outcome.kind.value] += 1
        if outcome.elapsed > limit:
            report.overshoots.append(outcome.elapsed - limit)
        if port == self.refused:
            report.client_faults["connection refused"] += 1
        if client_name == "untrusted":
            report.client_faults["untrusted certificate"] += 1
        if outcome.kind is Kind.CANCELLED:
            report.client_faults["outer cancellation"] += 1
        for attempt in outcome.attempts:
            if attempt.category is FailureCategory.TIMEOUT:
                report.client_faults["deadline or stage timeout"] += 1
        ready = ended + self.args.quarantine
        self.pending.append(Pending(ready, slot, mode, spec, outcome.slim(), ready))

    # --- judgement ---------------------------------------------------------------------------

    def judge(self, pending: Pending) -> None:
        records = self.records[pending.mode].take(pending.slot.path, pending.until)
        for record in records:
            name = fault_name(record)
            if name is not None:
                self.report.server_faults[name] += 1
        problems = check_call(pending.spec, pending.outcome, records, slack=self.args.slack)
        for problem in problems:
            self.report.violation(
                f"{pending.mode} {pending.spec.method} {pending.slot.path}: {problem}; "
                f"{pending.outcome.describe()}"
            )
        pending.slot.free = True

    async def judge_loop(self) -> None:
        while True:
            now = trio.current_time()
            while self.pending and self.pending[0].ready <= now:
                self.judge(self.pending.popleft())
            await trio.sleep(0.1)

    # --- the run -----------------------------------------------------------------------------

    async def sample_memory(self, started: float) -> None:
        while True:
            self.report.rss_mb.append((trio.current_time() - started, rss_mb()))
            await trio.sleep(0.5)

    def make_clients(self) -> dict[str, trio_retry.Client]:
        retry = RetryPolicy(max_attempts=3, backoff=Backoff(initial=0.02, max=0.2))
        clients: dict[str, trio_retry.Client] = {}
        for mode, server in self.servers.items():
            options: dict[str, Any] = {
                "retry": retry,
                "http2": server.http2,
                "max_body_bytes": 1_000_000,
                "pool_timeout": 1.0,
                "stage_timeouts": StageTimeouts(connect=1.0, tls=1.0),
            }
            if server.tls:
                options["ssl_context"] = server.client_ssl_context()
            else:
                options["http2_prior_knowledge"] = server.http2
            clients[mode] = trio_retry.Client(**options)
        # Trusts no test CA: every call through it is a certificate failure.
        clients["untrusted"] = trio_retry.Client(retry=retry, http2=False)
        return clients

    async def run(self) -> dict[str, Any]:
        args = self.args
        fds_before = open_fds()
        tasks_before = trio.lowlevel.current_statistics().tasks_living
        started = trio.current_time()
        end = started + args.duration
        problems: list[str] = []
        async with trio.open_nursery() as top:
            top.start_soon(self.sample_memory, started)
            async with trio.open_nursery() as servers:
                for mode in MODES:
                    server = FaultServer(tls=mode.endswith("tls"), http2=mode.startswith("h2"))
                    await servers.start(server.serve)
                    self.servers[mode] = server
                    self.records[mode] = Records(server)
                async with AsyncExitStack() as stack:
                    for name, client in self.make_clients().items():
                        self.clients[name] = await stack.enter_async_context(client)
                    async with trio.open_nursery() as judges:
                        judges.start_soon(self.judge_loop)
                        async with trio.open_nursery() as workers:
                            for number in range(args.concurrency):
                                workers.start_soon(self.worker, number, end)
                        with trio.fail_after(args.quarantine + 30):
                            while self.pending:
                                await trio.sleep(0.1)
                        judges.cancel_scope.cancel()
                # The clients are closed: nothing of theirs may remain.
                ports = {server.port for server in self.servers.values()} | {self.refused}
                leaked = sockets_connected_to(ports)
                if leaked:
                    problems.append(f"(5) {len(leaked)} client sockets open after closing")
                if client_tasks():
                    problems.append(f"(5) client tasks alive after closing: {client_tasks()}")
                servers.cancel_scope.cancel()
            top.cancel_scope.cancel()
        seconds = trio.current_time() - started
        fds_leaked = len(open_fds() - fds_before)
        tasks_leaked = trio.lowlevel.current_statistics().tasks_living - tasks_before
        if fds_leaked:
            problems.append(f"(5) {fds_leaked} file descriptors more than at the start")
        if tasks_leaked:
            problems.append(f"(5) {tasks_leaked} tasks more than at the start")
        for problem in problems:
            self.report.violation(problem)
        report = self.report
        overshoots = sorted(report.overshoots)
        return {
            "duration_s": round(seconds, 1),
            "concurrency": args.concurrency,
            "seed": args.seed,
            "calls": report.calls,
            "calls_per_s": round(report.calls / seconds, 1),
            "outcomes": dict(sorted(report.outcomes.items())),
            "faults_injected": sum(report.server_faults.values())
            + sum(report.client_faults.values()),
            "server_faults": dict(sorted(report.server_faults.items())),
            "client_faults": dict(sorted(report.client_faults.items())),
            "violations": report.violations,
            "violation_examples": report.examples,
            "deadline_overshoot_s": {
                "calls_over_deadline": len(overshoots),
                "p50": round(overshoots[len(overshoots) // 2], 3) if overshoots else 0.0,
                "p99": round(overshoots[int(len(overshoots) * 0.99)], 3) if overshoots else 0.0,
                "max": round(overshoots[-1], 3) if overshoots else 0.0,
                "slack": args.slack,
            },
            "fds_leaked": fds_leaked,
            "tasks_leaked": tasks_leaked,
            "memory": memory_summary(report.rss_mb, args.duration * args.warmup),
        }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.soak",
        description="Concurrent mixed calls with random faults, judged on the server's record.",
    )
    parser.add_argument("--duration", type=float, default=120.0, help="seconds (default 120)")
    parser.add_argument("--concurrency", type=int, default=200, help="workers (default 200)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    parser.add_argument(
        "--slack", type=float, default=DEFAULT_SLACK, help="seconds past a deadline allowed"
    )
    parser.add_argument(
        "--quarantine", type=float, default=QUARANTINE, help="seconds before a call is judged"
    )
    parser.add_argument(
        "--warmup", type=float, default=0.25, help="fraction of the run before memory counts"
    )
    parser.add_argument(
        "--max-growth-mb", type=float, default=20.0, help="memory growth after warm-up allowed"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = random.randrange(2**32)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    wall = time.perf_counter()
    figures = trio.run(Soak(args).run)
    figures["wall_s"] = round(time.perf_counter() - wall, 1)
    text = json.dumps(figures, indent=1)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n", encoding="utf-8")
    grew = figures["memory"].get("growth_after_warmup_mb", 0.0) > args.max_growth_mb
    return 1 if figures["violations"] or grew else 0


if __name__ == "__main__":
    raise SystemExit(main())
