"""The client side of ``benchmarks/scale.py``: one burst of concurrent calls, or one soak, by
one client in a process of its own.

Started as ``python -m benchmarks.scale_worker CONFIG_JSON`` by the runner; the result is the
last stdout line, prefixed by ``RESULT_TAG``. The client is one of the benchmarks' adapters
(``benchmarks/clients.py``), created for ``connections`` (its pool limit) and driven by its own
event loop (``benchmarks/runtime.py``). Its file-descriptor limit is raised to the hard limit
first: 10,000 HTTP/1.1 connections need 10,000 descriptors.

**Burst** (``mode: "burst"``): a fresh client makes one warm-up call (its first connection, the
protocol's imports), then ``calls`` calls of ``GET /small`` started at once, each checked (200,
13 bytes). The first such burst measures memory: with its connections idle in the pool, the
resident set and the sockets held, against the same figures just before it, both after
``gc.collect()`` and ``malloc_trim(0)`` (garbage and freed heap would otherwise count as the
connections'). Then ``rounds`` bursts, each by a fresh client, are timed (around the calls
only): CPU (``time.process_time``: every thread of the process), its share in the kernel and in
the cyclic garbage collector (``gc.callbacks``), and wall time. The process's peak RSS
(``ru_maxrss``) is reported too.

Why rounds: the collector's full passes come each time the objects that survived young
collections grow by a quarter of the long-lived heap, and cost a pass over all of it, i.e. about
four visits per surviving object, paid by every size in the long run. One burst of 1,000 calls
is too short to reach a full pass (it pays none), one of 10,000 pays its share: compared so,
the collector alone doubled HTTP/1.1's CPU per call between the two. The runner therefore
times at least ``--min-calls`` calls per case, in bursts of the case's size, and no
``gc.collect()`` comes between them.

Why a pause between bursts (``pause``, ``--pause``: 1.5 s; none in the smoke run): a client
closing its pool leaves its connections in TIME_WAIT, and Linux (``tcp_tw_reuse = 2``, loopback)
lets a new connect to the same address reuse such a port only once it is a second old; until
then each connect's search for a free port goes past them (``__inet_hash_connect``,
``tcp_twsk_unique`` in a profile). A burst of 10,000 calls started within the second after the
previous burst's 10,000 connections closed paid 30 to 60 µs of kernel time more per call than
one started later, whichever client it was, and whether it did depended on how fast that
client reached its connects: most of the noise of the 10,000 case, and a penalty on a faster
client. The pause comes after a client closed, before the next one's warm-up: it is not timed.

``gc_threshold`` (``--gc-threshold``), when given, is set with ``gc.set_threshold`` before the
client starts, as an application may: the collector's thresholds are the application's to
choose, never the client's (docs/benchmarks.md says what a higher first threshold changes).

**Soak** (``mode: "soak"``): ``lanes`` loops share a steady ``rate`` of calls for ``seconds``:
lane *k* calls at ``start + k/rate``, then every ``lanes/rate`` seconds after (at once when it is
behind). The runner samples this process's RSS and descriptors from ``/proc`` meanwhile.
"""

from __future__ import annotations

import ctypes
import gc
import itertools
import os
import resource
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.memory import fd_count, rss_mb
from benchmarks.worker import serve_config

RESULT_TAG = "SCALE-RESULT "
#: Seconds between one client's close and the next burst's client (the module docstring).
TIME_WAIT_PAUSE = 1.5
PATH = "/small"
BODY_SIZE = 13  # SMALL_BODY, the answer of every benchmark server at /small


@dataclass
class Tally:
    ok: int = 0
    errors: int = 0
    first_error: str = ""

    def error(self, what: str) -> None:
        self.errors += 1
        if not self.first_error:
            self.first_error = what


async def one_call(adapter: Any, tally: Tally) -> None:
    """One checked ``GET /small``; a failure is counted, never raised."""
    try:
        status, size = await adapter.get(PATH)
    except Exception as exc:
        tally.error(f"{type(exc).__name__}: {exc}"[:300])
        return
    if status == 200 and size == BODY_SIZE:
        tally.ok += 1
    else:
        tally.error(f"status {status} with {size} bytes")


class GcTimer:
    """The time the cyclic garbage collector took, by generation (``gc.callbacks``): at scale
    it is a share of the CPU per call that grows with what the process holds."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.runs = [0, 0, 0]
        self.active = False  # counting (only the timed bursts are)
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if not self.active:
            return
        if phase == "start":
            self._started = time.process_time()
        else:
            generation = info["generation"]
            self.seconds[generation] += time.process_time() - self._started
            self.runs[generation] += 1

    def __enter__(self) -> GcTimer:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


def settle() -> None:
    """Collect garbage and give freed heap back to the system (glibc), so that RSS counts
    what is held."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def sockets() -> int:
    """Sockets this process holds (TCP or UDP)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                count += 1
        except OSError:
            pass
    return count


def raise_fd_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


async def warm_up(adapter: Any) -> None:
    """The first call of a fresh client (its first connection, the protocol's imports)."""
    tally = Tally()
    await one_call(adapter, tally)
    if tally.errors:
        raise RuntimeError(f"the warm-up call failed: {tally.first_error}")


async def burst(
    make_adapter: Callable[[], Any],
    runtime: Any,
    calls: int,
    rounds: int,
    budget: float,
    pause: float = TIME_WAIT_PAUSE,
) -> dict[str, Any]:
    """A memory round (not timed), then ``rounds`` timed bursts, each by a fresh client; no
    more once the timed bursts took ``budget`` seconds (at least one is made). ``pause``
    seconds pass after each client closed, before the next burst's (not timed)."""
    tally = Tally()

    async def call() -> None:
        await one_call(adapter, tally)

    adapter = make_adapter()
    async with adapter.lifespan():
        await warm_up(adapter)
        settle()
        rss_before, sockets_before = rss_mb(), sockets()
        await runtime.run_parallel(call, calls)
        settle()
        rss_after, sockets_after = rss_mb(), sockets()
    await runtime.sleep(pause)  # (its connections' ports reusable: the module docstring)
    cpu = system = wall = 0.0
    done = 0
    with GcTimer() as collector:
        while done < rounds and not (done and wall > budget):
            done += 1
            adapter = make_adapter()
            async with adapter.lifespan():
                await warm_up(adapter)
                times, started = os.times(), time.perf_counter()
                begun = time.process_time()
                collector.active = True
                await runtime.run_parallel(call, calls)
                collector.active = False
                cpu += time.process_time() - begun
                wall += time.perf_counter() - started
                system += os.times().system - times.system
            if done < rounds and not wall > budget:
                await runtime.sleep(pause)
    return {
        "calls": calls * done,
        "rounds": done,
        "ok": tally.ok,
        "errors": tally.errors,
        "first_error": tally.first_error,
        "cpu_s": cpu,
        "system_s": system,
        "gc_s": collector.seconds,
        "gc_runs": collector.runs,
        "wall_s": wall / done,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_before_mb": rss_before,
        "rss_after_mb": rss_after,
        "sockets_before": sockets_before,
        "sockets_after": sockets_after,
    }


async def soak(
    adapter: Any, runtime: Any, rate: float, seconds: float, lanes: int
) -> dict[str, Any]:
    tally = Tally()
    behind: list[float] = []
    async with adapter.lifespan():
        await warm_up(adapter)
        numbers = itertools.count()
        start = time.monotonic() + 0.1
        end = start + seconds
        interval = lanes / rate
        cpu = time.process_time()

        async def lane() -> None:
            due = start + next(numbers) / rate
            while due < end:
                late = time.monotonic() - due
                if late < 0:
                    await runtime.sleep(-late)
                else:
                    behind.append(late)
                await one_call(adapter, tally)
                due += interval

        await runtime.run_parallel(lane, lanes)
        elapsed = time.monotonic() - start
        cpu = time.process_time() - cpu
    calls = tally.ok + tally.errors
    behind.sort()
    return {
        "ok": tally.ok,
        "errors": tally.errors,
        "first_error": tally.first_error,
        "calls": calls,
        "seconds": elapsed,
        "rate": calls / elapsed if elapsed > 0 else 0.0,
        "cpu_s": cpu,
        "late_calls": len(behind),
        "late_max_s": behind[-1] if behind else 0.0,
        "rss_end_mb": rss_mb(),
        "fds_end": fd_count(),
    }


def run(config: dict[str, Any]) -> dict[str, Any]:
    """One burst or soak of ``config``; always returns a dict (``unavailable``, ``error``, or
    the figures)."""
    if config.get("checkout"):
        from benchmarks.checkout import import_trio_retry

        import_trio_retry(config["checkout"])
    from benchmarks.clients import ADAPTERS, ClientUnavailable, Endpoint
    from benchmarks.runtime import get_runtime

    cls = ADAPTERS[config["client"]]
    os.environ.update(cls.env)
    try:
        cls.check_available()
    except ClientUnavailable as exc:
        return {"unavailable": str(exc)}
    fd_limit = raise_fd_limit()
    if config.get("gc_threshold"):  # the application's setting (--gc-threshold), not the client's
        gc.set_threshold(*config["gc_threshold"])
    endpoint = Endpoint.from_json(config["endpoint"])

    def make_adapter() -> Any:
        return cls(endpoint, config["connections"])

    runtime = get_runtime(cls.runtime)
    started_rss = rss_mb()
    try:
        if config["mode"] == "soak":
            figures = runtime.run(
                lambda: soak(
                    make_adapter(), runtime, config["rate"], config["seconds"], config["lanes"]
                ),
                config["hard_limit"],
            )
        else:
            figures = runtime.run(
                lambda: burst(
                    make_adapter,
                    runtime,
                    config["calls"],
                    config["rounds"],
                    config["budget"],
                    config.get("pause", TIME_WAIT_PAUSE),
                ),
                config["hard_limit"],
            )
    except ClientUnavailable as exc:
        return {"unavailable": str(exc)}
    except Exception as exc:
        return {
            "error": f"{type(exc).__name__}: {exc}"[:500],
            "traceback": traceback.format_exc(limit=8),
        }
    trio_retry = sys.modules.get("trio_retry")
    figures.update(
        rss_start_mb=started_rss,
        fd_limit=fd_limit,
        module=str(getattr(trio_retry, "__file__", "")) if trio_retry else "",
        gc_threshold=list(gc.get_threshold()),
        pause_s=config.get("pause", TIME_WAIT_PAUSE),
    )
    return figures


def main(argv: list[str]) -> int:
    return serve_config(argv, "benchmarks.scale_worker", RESULT_TAG, run)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
