"""Property-based fault fuzzing: the central promise, checked against the server's own record.

Hypothesis generates a *scenario*: a protocol (HTTP/1.1 or HTTP/2, TLS on or off, a client that
trusts the server's certificate or not), client settings (attempts, backoff, pool limits,
bulkhead, body limit, stage timeouts), an interruption (none, ``drain()``, or the client
closing with calls in flight) and one to five calls. Each call has a method, a body (none,
bytes, a large one, reopenable, one-shot), an idempotency key or an explicit idempotency or
neither, a deadline, a start time, maybe an outer cancellation, and its own queue of faults on
the server, from every stage: connection refused, TLS rejected, connection dropped before or
after the head or after the body, stalls, slow and partial and endless bodies, garbage,
oversized heads, error statuses, REFUSED_STREAM, GOAWAY, HTTP/2 frames that break the protocol.

Each scenario runs in a fresh ``trio.run`` with ``MockClock(autojump_threshold=0)`` against a
real `FaultServer` on loopback, so time-outs and stalls cost no wall time and elapsed times
are exact. Every call is then judged by ``benchmarks.invariants.check_call`` (invariants 1-4),
and the run by invariant 5: once the client's ``async with`` has exited, no socket to the server and
no client task remains, calls still in flight ended at once, and once the server stopped too
the process has exactly the file descriptors and tasks it had before.

The suite runs a fixed, derandomized set of ``CI_EXAMPLES`` examples. The long profile:
``TRIO_RETRY_FUZZ_EXAMPLES=5000 pytest tests/reliability/test_fuzz.py -s`` (random; add
``TRIO_RETRY_FUZZ_REPORT=fuzz.json`` for the figures as JSON, see docs/reliability.md).
"""

from __future__ import annotations

import json
import os
import random
import struct
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import hpack
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
from trio_retry import Backoff, Idempotency, Reopenable, RetryPolicy, StageTimeouts, Upstream
from trio_retry.testing import (
    Action,
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

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

#: Examples in the normal suite (fixed: derandomized): 11-15 s on 2 cores (the budget is 40 s).
CI_EXAMPLES = 250
#: The client's default deadline, so that calls without one stay bounded.
CLIENT_DEADLINE = 10.0
#: Virtual seconds a call may outlive its deadline. The clock is virtual and jumps only when
#: every task waits, so this is exact up to float rounding.
SLACK = 1e-6
#: Virtual seconds to let the server settle before reading its record: more than its idle
#: timeout, so every connection has ended and every request body that was sent has been read.
SETTLE = 31.0

# --- the fault menu ---------------------------------------------------------------------------


def h2_frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    header = struct.pack(">I", len(payload))[1:] + bytes((kind, flags))
    return header + struct.pack(">I", stream_id) + payload


GARBAGE = b"SSH-2.0-OpenSSH_9.6\r\n\x00\xff\xfe not http"
#: What a broken server may send instead of a response, for either protocol (HTTP/1.1 bytes on
#: an HTTP/2 connection are a protocol violation too).
RAW_BYTES: tuple[Raw, ...] = (
    Raw(GARBAGE),
    Raw(b""),
    Raw(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf", close=False),
    Raw(b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\nabc"),
    Raw(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"),
    Raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"),
    Raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello world\r\n"),
    Raw(b"HTTP/1.1 999999 Nope\r\n\r\n"),
)
#: HTTP/2 frames that break the protocol (RFC 9113): DATA on stream 0; a zero WINDOW_UPDATE; a
#: SETTINGS frame of a bad size; a PUSH_PROMISE although we disabled push; a frame larger than
#: our SETTINGS_MAX_FRAME_SIZE; HEADERS for stream 1 with an upper-case name.
H2_VIOLATIONS: tuple[Raw, ...] = (
    Raw(h2_frame(0x0, 0x1, 0, b"data")),
    Raw(h2_frame(0x8, 0x0, 0, struct.pack(">I", 0))),
    Raw(h2_frame(0x4, 0x0, 0, b"\x00" * 7)),
    Raw(h2_frame(0x5, 0x4, 1, struct.pack(">I", 2) + hpack.Encoder().encode([(":status", "200")]))),
    Raw(h2_frame(0x0, 0x0, 1, b"\x00" * 20000)),
    Raw(h2_frame(0x1, 0x5, 1, hpack.Encoder().encode([(b":status", b"200"), (b"X-Upper", b"v")]))),
)
STALLS = (0.01, 0.1, 0.4, 1.5, 5.0)
#: Actions that run once the request body has been read (the request is executed).
AFTER_BODY: tuple[Action, ...] = (
    Respond(200, body=b"ok"),
    Respond(201, body=b"created"),
    Respond(204),
    Respond(400),
    Respond(401),
    Respond(404),
    Respond(408),
    Respond(425),
    Respond(429, headers={"Retry-After": "0"}),
    Respond(429, headers={"Retry-After": "1"}),
    Respond(429, headers={"Retry-After": "60"}),
    Respond(500),
    Respond(502),
    Respond(503, headers={"Retry-After": "0"}),
    Respond(504),
    Respond(200, body=b"ok", close_after=True),
    Respond(200, body=b"early hints first", informational=(103,)),
    Respond(200, body=b"s" * 5000, body_rate=20000),
    Respond(200, body=b"B" * 300_000),
    Respond(200, headers={"X-Big": "a" * 70_000}),
    PartialBody(),
    PartialBody(reset=True),
    PartialBody(status=503, declared_length=50, body=b"x"),
    CloseAfterBody(),
    CloseAfterBody(reset=True),
    EndlessBody(chunk=b"e" * 4096, rate=40960, seconds=20.0),
    *RAW_BYTES,
)
#: Actions that act before the request body is read (never executed).
BEFORE_BODY: tuple[Action, ...] = (
    CloseBeforeRead(),
    CloseBeforeRead(reset=True),
    CloseAfterHead(),
    CloseAfterHead(reset=True),
)


@st.composite
def faults(draw: st.DrawFn, *, http2: bool, alone: bool) -> Action:
    """One fault (or success) for one request, drawn uniformly from the whole menu so that a
    short run still meets every kind; an action that runs after the body may come after a
    stall, or (HTTP/2) with a GOAWAY. `alone`: no other call shares the connection, so a
    GOAWAY naming a stream below the one it answers is not a lie."""
    menu = [*AFTER_BODY, *BEFORE_BODY, *STALLS]
    if http2:
        menu += [RefuseStream(), *H2_VIOLATIONS]
        if alone:
            menu.append(GoAway(last_stream_id=0))
    choice = draw(st.sampled_from(menu))
    if isinstance(choice, float):  # a slow response
        return Respond(200, body=b"late", delay=choice)
    if isinstance(choice, (Respond, PartialBody, CloseAfterBody, Raw, EndlessBody)):
        wrapper = draw(st.sampled_from(["none", "none", "stall", "goaway" if http2 else "none"]))
        if wrapper == "stall":
            return Stall(draw(st.sampled_from(STALLS)), then=choice)
        if wrapper == "goaway":
            return GoAway(error_code=draw(st.sampled_from([0, 2, 11])), then=choice)
    return choice


# --- scenarios -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    method: str
    body: str  # "none" | "bytes" | "large" | "reopenable" | "one_shot"
    key: bool
    explicit: Idempotency | None
    deadline: float | None
    start: float
    cancel_after: float | None
    stream: bool
    refused: bool  # sent to a port nobody listens on
    faults: tuple[Action, ...]


@dataclass(frozen=True)
class Scenario:
    http2: bool
    tls: bool
    trusted: bool
    max_attempts: int
    backoff: Backoff
    max_connections: int
    pool_timeout: float | None
    max_concurrency: int | None
    transient_500: bool
    max_body_bytes: int | None
    stage_timeouts: StageTimeouts
    interrupt: str  # "none" | "drain" | "close"
    interrupt_at: float
    seed: int
    calls: tuple[Call, ...]


@st.composite
def calls(draw: st.DrawFn, *, http2: bool, alone: bool) -> Call:
    method = draw(st.sampled_from(["GET", "GET", "PUT", "POST", "POST", "POST", "DELETE", "PATCH"]))
    body = "none"
    if method != "GET":
        body = draw(st.sampled_from(["bytes", "bytes", "large", "reopenable", "one_shot", "none"]))
    return Call(
        method=method,
        body=body,
        key=method != "GET" and draw(st.sampled_from([False, False, True])),
        explicit=draw(st.sampled_from([None, None, None, None, *Idempotency])),
        deadline=draw(st.sampled_from([None, 0.05, 0.2, 0.5, 1.0, 3.0])),
        start=draw(st.sampled_from([0.0, 0.0, 0.0, 0.01, 0.1, 0.5])),
        cancel_after=draw(st.sampled_from([None] * 8 + [0.03, 0.25])),
        stream=draw(st.sampled_from([False, False, True])),
        refused=draw(st.sampled_from([False] * 12 + [True])),
        faults=tuple(draw(st.lists(faults(http2=http2, alone=alone), max_size=4))),
    )


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    http2 = draw(st.booleans())
    tls = draw(st.booleans())
    count = draw(st.integers(1, 5))
    return Scenario(
        http2=http2,
        tls=tls,
        trusted=not tls or draw(st.sampled_from([True] * 9 + [False])),
        max_attempts=draw(st.integers(1, 4)),
        backoff=draw(
            st.sampled_from(
                [
                    Backoff(initial=0.01, max=0.1, jitter="none"),
                    Backoff(initial=0.05, max=0.5, jitter="full"),
                    Backoff(initial=0.02, max=0.3, jitter="decorrelated"),
                ]
            )
        ),
        max_connections=draw(st.sampled_from([1, 2, 10, 100])),
        pool_timeout=draw(st.sampled_from([None, None, 0.05, 0.5])),
        max_concurrency=draw(st.sampled_from([None, None, None, 1, 2])),
        transient_500=draw(st.booleans()),
        max_body_bytes=draw(st.sampled_from([None, None, 100_000])),
        stage_timeouts=draw(
            st.sampled_from(
                [
                    StageTimeouts(),
                    StageTimeouts(),
                    StageTimeouts(first_byte=0.3),
                    StageTimeouts(read=0.2),
                    StageTimeouts(connect=0.5, tls=0.5, write=0.5),
                ]
            )
        ),
        interrupt=draw(st.sampled_from(["none"] * 6 + ["drain", "close"])),
        interrupt_at=draw(st.sampled_from([0.0, 0.02, 0.1, 0.3, 1.0])),
        seed=draw(st.integers(0, 2**32 - 1)),
        calls=tuple(draw(st.lists(calls(http2=http2, alone=count == 1), min_size=count,
                                  max_size=count))),
    )  # fmt: skip


# --- running one scenario --------------------------------------------------------------------


@dataclass
class Stats:
    """What the fuzzing did, for docs/reliability.md."""

    examples: int = 0
    calls: int = 0
    attempts: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    server_faults: Counter[str] = field(default_factory=Counter)
    client_faults: Counter[str] = field(default_factory=Counter)
    evidence: Counter[str] = field(default_factory=Counter)
    violations: int = 0

    @property
    def faults_injected(self) -> int:
        return sum(self.server_faults.values()) + sum(self.client_faults.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "examples": self.examples,
            "calls": self.calls,
            "attempts": self.attempts,
            "faults_injected": self.faults_injected,
            "server_faults": dict(sorted(self.server_faults.items())),
            "client_faults": dict(sorted(self.client_faults.items())),
            "outcomes": dict(sorted(self.outcomes.items())),
            "evidence": dict(sorted(self.evidence.items())),
            "violations": self.violations,
        }


def fault_name(record: RecordedRequest) -> str | None:
    """A short name for the fault a request met; None for a plain success. A GOAWAY counts
    once, for the stream that took it from the script, not for the streams above it that it
    abandoned (which are recorded with it)."""
    action = record.action
    final = final_action(action)
    name = type(action).__name__
    if isinstance(action, GoAway):
        return "GoAway" if record.executed else None
    if isinstance(action, Stall):
        return "Stall"
    if isinstance(final, Respond):
        if final.status >= 400:
            return f"Respond({final.status})"
        if final.close_after:
            return "Respond(close_after)"
        if final.delay or final.body_rate:
            return "Respond(slow)"
        if len(final.body) > 100_000 or sum(len(v) for _, v in final.headers) > 65536:
            return "Respond(oversized)"
        return None
    if isinstance(final, Raw):
        return "Raw(h2 violation)" if final in H2_VIOLATIONS else "Raw(bad HTTP/1.1)"
    return name


class OneShot:
    """A one-shot body: an async iterator (not a generator, whose finalisation on an
    interrupted upload is a separate, known issue: see test_lifecycle.py)."""

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


def _options(call: Call, number: int) -> dict[str, Any]:
    options: dict[str, Any] = {"deadline": call.deadline}
    if call.body == "bytes":
        options["content"] = b"b" * (100 + number)
    elif call.body == "large":
        options["content"] = b"L" * 200_000
    elif call.body == "reopenable":
        options["content"] = Reopenable(lambda: [b"r" * 1000] * 3)
    elif call.body == "one_shot":
        options["content"] = OneShot()
    if call.key:
        options["idempotency_key"] = True
    if call.explicit is not None:
        options["idempotency"] = call.explicit
    return options


async def _run_call(
    client: trio_retry.Client,
    url: str,
    call: Call,
    number: int,
    out: dict[int, Outcome],
    ended: dict[int, float],
) -> None:
    try:
        await _call(client, url, call, number, out)
    finally:
        ended[number] = trio.current_time()


async def _call(
    client: trio_retry.Client, url: str, call: Call, number: int, out: dict[int, Outcome]
) -> None:
    await trio.sleep(call.start)
    started = trio.current_time()
    try:
        with trio.CancelScope() as scope:
            if call.cancel_after is not None:
                scope.deadline = started + call.cancel_after
            options = _options(call, number)
            if call.stream:
                async with client.stream(call.method, url, **options) as response:
                    await response.aread()
            else:
                response = await client.request(call.method, url, **options)
    except Exception as exc:  # judged by the oracle: only three kinds are allowed
        out[number] = Outcome.of_error(exc, trio.current_time() - started)
        return
    elapsed = trio.current_time() - started
    if scope.cancelled_caught:
        out[number] = Outcome(Kind.CANCELLED, elapsed)
    else:
        out[number] = Outcome.of_response(response, elapsed)


def _make_client(scenario: Scenario, server: FaultServer) -> trio_retry.Client:
    options: dict[str, Any] = {
        "retry": RetryPolicy(max_attempts=scenario.max_attempts, backoff=scenario.backoff),
        "default_upstream": Upstream(
            transient_500=scenario.transient_500, max_concurrency=scenario.max_concurrency
        ),
        "max_connections": scenario.max_connections,
        "pool_timeout": scenario.pool_timeout,
        "max_body_bytes": scenario.max_body_bytes,
        "stage_timeouts": scenario.stage_timeouts,
        "deadline": CLIENT_DEADLINE,
        "rng": random.Random(scenario.seed),
        "http2": scenario.http2,
    }
    if scenario.tls:
        # Untrusted: the default context, which verifies against the system's CAs only.
        options["ssl_context"] = server.client_ssl_context() if scenario.trusted else None
    else:
        options["http2_prior_knowledge"] = scenario.http2
    return trio_retry.Client(**options)


def _spec(scenario: Scenario, call: Call, closed_at: float | None) -> CallSpec:
    deadline = call.deadline if call.deadline is not None else CLIENT_DEADLINE
    if call.cancel_after is not None:
        deadline = min(deadline, call.cancel_after)
    return CallSpec(
        method=call.method,
        idempotency=expected_idempotency(call.method, explicit=call.explicit, key=call.key),
        one_shot=call.body == "one_shot",
        max_attempts=scenario.max_attempts,
        time_limit=deadline,
        keyed=call.key,
        may_find_closed=closed_at is not None and call.start >= closed_at,
        may_be_cancelled=call.cancel_after is not None,
    )


async def run_scenario(scenario: Scenario, stats: Stats) -> list[str]:
    """Run one scenario; return every broken invariant (empty: the promise held)."""
    fds_before = open_fds()
    tasks_before = trio.lowlevel.current_statistics().tasks_living
    broken: list[str] = []
    server = FaultServer(tls=scenario.tls, http2=scenario.http2)
    outcomes: dict[int, Outcome] = {}
    async with trio.open_nursery() as server_nursery:
        await server_nursery.start(server.serve)
        refused = refused_port()
        scheme = "https" if scenario.tls else "http"
        urls = []
        for number, call in enumerate(scenario.calls):
            path = f"/call/{number}"
            server.route(call.method, path, *call.faults)
            port = refused if call.refused else server.port
            urls.append(f"{scheme}://127.0.0.1:{port}{path}")
        client = _make_client(scenario, server)
        ended: dict[int, float] = {}
        t0 = trio.current_time()
        async with trio.open_nursery() as calls_nursery:
            async with client:
                for number, call in enumerate(scenario.calls):
                    calls_nursery.start_soon(
                        _run_call, client, urls[number], call, number, outcomes, ended
                    )
                if scenario.interrupt == "close":
                    await trio.sleep(scenario.interrupt_at)
                else:
                    if scenario.interrupt == "drain":
                        await trio.sleep(scenario.interrupt_at)
                        client.drain()
                    while len(ended) < len(scenario.calls):
                        await trio.sleep(0.001)
            closed_at = trio.current_time() - t0
        # (5) calls in flight when the client closed ended at once...
        for number, call in enumerate(scenario.calls):
            late = ended[number] - t0 - closed_at
            if call.start < closed_at and late > SLACK:
                broken.append(f"(5) call {number} ended {late:.3f}s after the client closed")
        # ...and the closed client left no socket and no task behind.
        leftover = sockets_connected_to({server.port, refused})
        if leftover:
            broken.append(f"(5) {len(leftover)} client socket(s) open after the client closed")
        if client_tasks():
            broken.append(f"(5) client tasks alive after the client closed: {client_tasks()}")
        await trio.sleep(SETTLE)
        records_by_path: dict[str, list[RecordedRequest]] = {}
        for record in server.requests:
            records_by_path.setdefault(record.path, []).append(record)
            name = fault_name(record)
            if name is not None:
                stats.server_faults[name] += 1
        for number, call in enumerate(scenario.calls):
            outcome = outcomes[number]
            spec = _spec(scenario, call, closed_at if scenario.interrupt == "close" else None)
            records = records_by_path.get(f"/call/{number}", [])
            for problem in check_call(spec, outcome, records, slack=SLACK):
                broken.append(f"call {number} ({call.method}): {problem}; {outcome.describe()}")
            stats.calls += 1
            stats.attempts += len(outcome.attempts)
            stats.outcomes[outcome.kind.value] += 1
            for attempt in outcome.attempts:
                stats.evidence[str(attempt.evidence)] += 1
                if attempt.category is not None and attempt.category.name in (
                    "CONNECT",
                    "TLS_CERTIFICATE",
                    "TIMEOUT",
                    "POOL_TIMEOUT",
                ):
                    stats.client_faults[attempt.category.name] += 1
            if outcome.kind is Kind.CANCELLED:
                stats.client_faults["outer cancellation"] += 1
        if scenario.interrupt != "none":
            stats.client_faults[f"client {scenario.interrupt}"] += 1
        server_nursery.cancel_scope.cancel()
    if open_fds() != fds_before:
        broken.append(f"(5) file descriptors {sorted(open_fds() ^ fds_before)} differ at the end")
    if trio.lowlevel.current_statistics().tasks_living != tasks_before:
        broken.append("(5) tasks are alive at the end that were not at the start")
    stats.examples += 1
    stats.violations += bool(broken)
    return broken


# --- the test ----------------------------------------------------------------------------------


def fuzz_settings() -> settings:
    """A fixed example set in the suite; ``TRIO_RETRY_FUZZ_EXAMPLES=N`` for a long random run."""
    common: dict[str, Any] = {
        "deadline": None,
        "database": None,
        "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
        "print_blob": True,
    }
    long_run = os.environ.get("TRIO_RETRY_FUZZ_EXAMPLES")
    if long_run:
        return settings(max_examples=int(long_run), derandomize=False, **common)
    return settings(max_examples=CI_EXAMPLES, derandomize=True, **common)


def run_fuzz(report: Callable[[Stats, float], None]) -> None:
    stats = Stats()

    @fuzz_settings()
    @given(scenario=scenarios())
    def one(scenario: Scenario) -> None:
        clock = trio.testing.MockClock(autojump_threshold=0)
        broken = trio.run(run_scenario, scenario, stats, clock=clock)
        assert not broken, "\n".join(broken)

    started = time.perf_counter()
    one()
    report(stats, time.perf_counter() - started)


def _report(stats: Stats, seconds: float) -> None:
    figures = {**stats.as_dict(), "seconds": round(seconds, 1)}
    print("\nfuzz:", json.dumps(figures, indent=1))
    path = os.environ.get("TRIO_RETRY_FUZZ_REPORT")
    if path:
        with open(path, "w", encoding="utf-8") as file:
            json.dump(figures, file, indent=1)
    assert stats.violations == 0
    assert stats.faults_injected > stats.examples  # the faults really were injected


def test_the_promise_holds_under_generated_faults() -> None:
    run_fuzz(_report)
