"""Tail latency and overload benchmarks (issue #21): hedging, adaptive throttling, breaking.

``python -m benchmarks.overload [--smoke] [--json PATH] [--only tail,throttle,outage]``

Three suites, each comparing trio_retry's modes side by side in one run, against a small
scripted HTTP/1.1 server (h11 over Trio, in-process, 127.0.0.1, port 0) whose behaviour each
suite sets:

- **tail** (real time): 5% of responses are delayed by 200 ms (independently per request, from
  a seeded RNG). Open loop, ``TAIL_RATE`` calls/s. Modes: the same server without its slow tail
  (``fast_server``, the reference the others aim at); no hedging; ``Hedging`` with a fixed
  50 ms delay; ``Hedging`` with the observed p95 as delay (at least 10 ms); a naive client
  that always sends two copies and takes the first; then, over HTTP/2 (h2c, ``FaultServer``,
  ``TAIL_RATE_H2`` calls/s), the reference, no hedging and the p95 hedging. Figures:
  p50/p99/p99.9 call latency, and extra load (requests the server received / calls - 1).
- **throttle** (virtual time, ``MockClock``): the server answers 429 above a fixed rate
  (a token bucket of ``LIMIT`` requests/s, burst ``LIMIT / 10``). Open loop at twice that
  rate, every call in its own task, deadline 5 s, up to 4 attempts with backoff. Modes: a
  fixed-retry loop (trio_retry with an unlimited retry budget, no throttle); trio_retry
  with its default budget; trio_retry with ``AdaptiveThrottle``. Figures: accepted requests
  per second, 429s received, wasted attempts (attempts answered 429), calls rejected before
  sending (NOT_SENT at ADMISSION).
- **outage** (virtual time): the server is up, answers 503 to everything for ``DOWN``
  seconds, then is up again. Open loop. Modes: no breaker; ``CircuitBreaker``. Figures:
  requests reaching the upstream while it is down, median time for a call to fail while it
  is down, time from the upstream's return to the first success and until every call
  succeeds again.

Numbers from ``--smoke`` only show that the harness works. The machine is shared: real-time
figures (tail) move with other load; virtual-time figures (throttle, outage) do not.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import h11
import trio

import trio_retry
from benchmarks.scenarios.retrying import run_virtual
from trio_retry import (
    AdaptiveThrottle,
    AdmissionRejected,
    Backoff,
    CircuitBreaker,
    Hedging,
    RequestFailed,
    RetryBudget,
    RetryPolicy,
    Upstream,
)
from trio_retry.testing import FaultServer, Respond

TAIL_RATE = 200.0  # calls/s offered in the tail suite (well below what one core serves)
TAIL_RATE_H2 = 50.0  # the same over HTTP/2: pure-Python h2 on both sides costs more per call
SLOW_SHARE = 0.05
SLOW_DELAY = 0.2
LIMIT = 50.0  # the throttling server's rate, requests/s
DOWN = 20.0  # seconds the outage lasts (full mode)

# --- the server ------------------------------------------------------------------------------

Decide = Callable[[str, str], Awaitable[tuple[int, list[tuple[str, str]]]]]


@dataclass
class Server:
    """A keep-alive HTTP/1.1 server answering each request as ``decide`` says (after
    ``decide`` returns, which may sleep). Counts what it received."""

    decide: Decide
    received: int = 0
    times: list[float] = field(default_factory=list)
    port: int = 0

    async def _serve(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    conn.receive_data(data)
                    continue
                if isinstance(event, h11.Request):
                    method, target = event.method.decode(), event.target.decode()
                    while not isinstance(conn.next_event(), h11.EndOfMessage):
                        more = await stream.receive_some(65536)
                        if not more:
                            return
                        conn.receive_data(more)
                    self.received += 1
                    self.times.append(trio.current_time())
                    status, headers = await self.decide(method, target)
                    body = b"ok\n"
                    head = h11.Response(
                        status_code=status,
                        headers=[("content-length", str(len(body))), *headers],
                    )
                    await stream.send_all(conn.send(head) + conn.send(h11.Data(data=body)))
                    await stream.send_all(conn.send(h11.EndOfMessage()))
                    conn.start_next_cycle()
                    continue
                return
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError):
            return
        finally:
            await stream.aclose()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._serve, listeners)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


# --- tail ------------------------------------------------------------------------------------


async def _tail_mode(mode: str, calls: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    h2 = mode.startswith("h2_")  # HTTP/2 (h2c): a hedge is a stream on the same connection
    base_mode = mode.removeprefix("h2_")

    async def decide(method: str, target: str) -> tuple[int, list[tuple[str, str]]]:
        if slow():
            await trio.sleep(SLOW_DELAY)
        return 200, []

    def slow() -> bool:
        return base_mode != "fast_server" and rng.random() < SLOW_SHARE

    server = Server(decide)
    # Over HTTP/2 the same tail comes from a FaultServer script (one action per request, in
    # arrival order, drawn from the same RNG): enough for the calls, their hedges, the warm-up.
    fault = FaultServer(http2=True, idle_timeout=300, read_timeout=300)
    fault.script(
        *(
            Respond(200, body=b"ok\n", delay=SLOW_DELAY if slow() else 0.0)
            for _ in range(3 * calls + 100)
        )
    )
    hedging: Hedging | None = None
    if base_mode == "hedging":
        hedging = Hedging(delay=0.05, max_share=0.1)
    elif base_mode == "hedging_p95":
        hedging = Hedging(delay=0.01, percentile=0.95, max_share=0.1)
    upstream = Upstream(hedging=hedging)
    latencies: list[float] = []
    async with trio.open_nursery() as nursery:
        if h2:
            base = await nursery.start(fault.serve)
        else:
            await nursery.start(server.run)
            base = server.url
        url = base + "/item"

        def received() -> int:
            return len(fault.requests) if h2 else server.received

        async with trio_retry.Client(default_upstream=upstream, http2_prior_knowledge=h2) as client:
            for _ in range(20):  # warm the pool (and the percentile)
                await client.get(url)
            warm = received()

            async def one() -> None:
                if mode != "naive_two":
                    await client.get(url)
                    return
                async with trio.open_nursery() as race:

                    async def copy() -> None:
                        await client.get(url)
                        race.cancel_scope.cancel()

                    race.start_soon(copy)
                    race.start_soon(copy)

            async def timed() -> None:
                start = time.perf_counter()
                await one()
                latencies.append(time.perf_counter() - start)

            # Open loop: one call every 1 / TAIL_RATE s, whatever the others are doing. (A
            # closed loop would measure CPU contention: when hedging unblocks the workers
            # stuck on slow responses, more of them compete and the median rises.)
            begin = trio.current_time()
            async with trio.open_nursery() as calls_nursery:
                rate = TAIL_RATE_H2 if h2 else TAIL_RATE
                for i in range(calls):
                    await trio.sleep_until(begin + i / rate)
                    calls_nursery.start_soon(timed)
        nursery.cancel_scope.cancel()
    return {
        "mode": mode,
        "calls": len(latencies),
        "p50_ms": _quantile(latencies, 0.5) * 1000,
        "p99_ms": _quantile(latencies, 0.99) * 1000,
        "p999_ms": _quantile(latencies, 0.999) * 1000,
        "extra_load": (received() - warm) / len(latencies) - 1,
    }


def run_tail(smoke: bool) -> list[dict[str, Any]]:
    calls, calls_h2 = (200, 50) if smoke else (3000, 1000)
    h1 = ("fast_server", "none", "hedging", "hedging_p95", "naive_two")
    h2 = ("h2_fast_server", "h2_none", "h2_hedging_p95")
    return [trio.run(_tail_mode, mode, calls, 21) for mode in h1] + [
        trio.run(_tail_mode, mode, calls_h2, 21) for mode in h2
    ]


# --- throttle --------------------------------------------------------------------------------


def _retry_policy() -> RetryPolicy:
    return RetryPolicy(max_attempts=4, backoff=Backoff(initial=0.1, max=2.0, jitter="full"))


async def _throttle_mode(mode: str, seconds: float) -> dict[str, Any]:
    tokens = LIMIT / 10
    last = 0.0

    async def decide(method: str, target: str) -> tuple[int, list[tuple[str, str]]]:
        nonlocal tokens, last
        now = trio.current_time()
        tokens = min(LIMIT / 10, tokens + (now - last) * LIMIT)
        last = now
        if tokens >= 1:
            tokens -= 1
            return 200, []
        return 429, []

    server = Server(decide)
    budget = RetryBudget(ratio=1.0, min_per_second=1e6) if mode == "fixed_retry" else RetryBudget()
    upstream = Upstream(budget=budget, throttle=AdaptiveThrottle() if mode == "adaptive" else None)
    counts = {"ok": 0, "failed_429": 0, "rejected": 0, "other": 0, "attempts_429": 0}
    offered = 2 * LIMIT
    async with trio.open_nursery() as nursery:
        await nursery.start(server.run)
        url = server.url + "/api"
        async with trio_retry.Client(
            retry=_retry_policy(), default_upstream=upstream, rng=random.Random(7)
        ) as client:

            async def call() -> None:
                try:
                    response = await client.get(url, deadline=5.0)
                except AdmissionRejected as exc:
                    counts["rejected"] += 1
                    counts["attempts_429"] += sum(a.status == 429 for a in exc.attempts)
                    return
                except RequestFailed:
                    counts["other"] += 1
                    return
                counts["attempts_429"] += sum(a.status == 429 for a in response.attempts)
                counts["ok" if response.status == 200 else "failed_429"] += 1

            start = trio.current_time()
            async with trio.open_nursery() as calls:
                for i in range(int(seconds * offered)):
                    await trio.sleep_until(start + i / offered)
                    calls.start_soon(call)
            elapsed = trio.current_time() - start
        nursery.cancel_scope.cancel()
    total = sum(counts[k] for k in ("ok", "failed_429", "rejected", "other"))
    return {
        "mode": mode,
        "calls": total,
        "accepted_per_s": counts["ok"] / elapsed,
        "received_429": counts["attempts_429"],
        "wasted_attempts": counts["attempts_429"],
        "server_requests": server.received,
        "failed_429": counts["failed_429"],
        "rejected_not_sent": counts["rejected"],
        "other_failures": counts["other"],
    }


def run_throttle(smoke: bool) -> list[dict[str, Any]]:
    seconds = 4.0 if smoke else 30.0
    return [
        run_virtual(lambda m=mode: _throttle_mode(m, seconds), wall_limit=120)  # type: ignore[misc]
        for mode in ("fixed_retry", "budget", "adaptive")
    ]


# --- outage ----------------------------------------------------------------------------------


async def _outage_mode(mode: str, up: float, down: float, after: float) -> dict[str, Any]:
    t0 = 0.0
    down_from, down_until = up, up + down

    async def decide(method: str, target: str) -> tuple[int, list[tuple[str, str]]]:
        now = trio.current_time() - t0
        return (503, []) if down_from <= now < down_until else (200, [])

    server = Server(decide)
    breaker = (
        CircuitBreaker(consecutive_failures=5, cool_down=0.5, max_cool_down=2.0)
        if mode == "breaker"
        else None
    )
    upstream = Upstream(breaker=breaker)
    rate = 50.0
    failures: list[float] = []  # seconds to fail, for calls started while down
    successes: list[float] = []  # start times (relative) of successful calls after the return
    failed_after: list[float] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(server.run)
        url = server.url + "/api"
        async with trio_retry.Client(
            retry=_retry_policy(), default_upstream=upstream, rng=random.Random(7)
        ) as client:
            t0 = trio.current_time()

            async def call() -> None:
                begun = trio.current_time() - t0
                ok = False
                try:
                    ok = (await client.get(url, deadline=5.0)).status == 200
                except RequestFailed:
                    pass
                ended = trio.current_time() - t0
                if down_from <= begun < down_until and not ok:
                    failures.append(ended - begun)
                if begun >= down_until:
                    (successes if ok else failed_after).append(begun)

            async with trio.open_nursery() as calls:
                for i in range(int((up + down + after) * rate)):
                    await trio.sleep_until(t0 + i / rate)
                    calls.start_soon(call)
        nursery.cancel_scope.cancel()
    during = sum(down_from <= t - t0 < down_until for t in server.times)
    first_ok = min(successes) - down_until if successes else math.inf
    all_ok = (max(failed_after) - down_until + 1 / rate) if failed_after else 0.0
    return {
        "mode": mode,
        "calls_while_down": int(down * rate),
        "upstream_requests_while_down": during,
        "time_to_fail_p50_ms": statistics.median(failures) * 1000 if failures else 0.0,
        "first_success_after_return_s": first_ok,
        "all_succeed_after_return_s": all_ok,
    }


def run_outage(smoke: bool) -> list[dict[str, Any]]:
    up, down, after = (1.0, 3.0, 3.0) if smoke else (5.0, DOWN, 10.0)
    return [
        run_virtual(lambda m=mode: _outage_mode(m, up, down, after), wall_limit=120)  # type: ignore[misc]
        for mode in ("no_breaker", "breaker")
    ]


# --- the runner ------------------------------------------------------------------------------

SUITES: dict[str, Callable[[bool], list[dict[str, Any]]]] = {
    "tail": run_tail,
    "throttle": run_throttle,
    "outage": run_outage,
}


def _print(name: str, rows: list[dict[str, Any]]) -> None:
    keys = [k for k in rows[0] if k != "mode"]
    print(f"\n{name}")
    print(f"  {'mode':<13}" + "".join(f"{k:>30}" for k in keys))
    for row in rows:
        cells = "".join(
            f"{row[k]:>30.3f}" if isinstance(row[k], float) else f"{row[k]:>30}" for k in keys
        )
        print(f"  {row['mode']:<13}" + cells)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.overload")
    parser.add_argument("--smoke", action="store_true", help="seconds: the harness works")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--only", default=",".join(SUITES), help="comma-separated suites")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"mode": "smoke" if args.smoke else "full", "suites": {}}
    for name in [s.strip() for s in args.only.split(",") if s.strip()]:
        started = time.perf_counter()
        rows = SUITES[name](args.smoke)
        results["suites"][name] = rows
        _print(f"{name} ({time.perf_counter() - started:.1f} s wall)", rows)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
