"""Throughput and latency suite: closed-loop load against a fast loopback server.

``concurrency`` tasks share one request counter; each task issues its next request as soon as its
previous one finished (closed loop), until ``requests`` have been issued. A warm-up phase with the
same concurrency runs first (opening every pooled connection, TLS handshakes included) and is
excluded from every number. Client CPU is ``time.process_time()`` of the worker process (all its
threads) over the measured phase only.
"""

from __future__ import annotations

import gc
import os
import resource
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from benchmarks.derived import percentile
from benchmarks.scenarios import RunParams, Scenario, register

if TYPE_CHECKING:
    from benchmarks.adapter import Adapter
    from benchmarks.loadgen import LoadGenerator
    from benchmarks.runtime import Runtime

SMALL_BODY = b"hello, world\n"  # what the servers return for /small
BIG_SIZE = 64 * 1024  # /64k.bin, and the upload size
SMALL_PATH = "/small"
BIG_PATH = "/64k.bin"
UPLOAD_PATH = "/upload"
UPLOAD_REPLY = b"ok\n"

MAX_ERROR_SAMPLES = 5


@dataclass
class _LoadState:
    total: int
    deadline: float
    min_end: float
    issued: int = 0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    received: int = 0
    truncated: bool = False
    aborted: bool = False

    def error(self, message: str) -> None:
        self.errors += 1
        if len(self.error_samples) < MAX_ERROR_SAMPLES:
            self.error_samples.append(message)
        # Stop early when a client is clearly broken: numbers would be meaningless anyway.
        if self.errors > max(10, self.total // 10):
            self.aborted = True


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _read_process_cpu(pids: tuple[int, ...]) -> float | None:
    """utime + stime (seconds) of the given processes, from /proc (Linux only)."""
    if not pids:
        return None
    total = 0
    try:
        for pid in pids:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
            fields = stat[stat.rindex(b")") + 2 :].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    except (OSError, ValueError, IndexError):
        return None
    return total / _TICK


def _read_cpu_busy() -> dict[int, float] | None:
    """Per-CPU busy seconds (user + nice + system + steal) from /proc/stat (Linux only).

    irq/softirq are left out: loopback packet processing lands there on behalf of whichever
    process sent the packet, so it is not "someone else's" load.
    """
    try:
        with open("/proc/stat", "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    busy = {}
    for line in lines:
        if line.startswith(b"cpu") and line[3:4].isdigit():
            parts = line.split()
            values = [int(v) for v in parts[1:9]]
            user, nice, system, steal = values[0], values[1], values[2], values[7]
            busy[int(parts[0][3:])] = (user + nice + system + steal) / _TICK
    return busy


@dataclass(frozen=True)
class _Snapshot:
    wall: float
    cpu: float
    ru: resource.struct_rusage
    server: float | None
    cpus: dict[int, float] | None

    @classmethod
    def take(cls, params: RunParams) -> _Snapshot:
        server = _read_process_cpu(params.server_pids)
        cpus = _read_cpu_busy() if params.client_cpu is not None else None
        ru = resource.getrusage(resource.RUSAGE_SELF)
        cpu = time.process_time()
        return cls(time.perf_counter(), cpu, ru, server, cpus)


def _busy_delta(before: _Snapshot, after: _Snapshot, cpu: int) -> float:
    if before.cpus is None or after.cpus is None:
        return 0.0
    return after.cpus.get(cpu, 0.0) - before.cpus.get(cpu, 0.0)


@dataclass(frozen=True)
class LoadScenario(Scenario):
    suite: ClassVar[str] = "throughput"
    name: str
    title: str
    description: str
    endpoint: str
    concurrency: int
    requests: int
    warmup: int
    smoke_requests: int
    smoke_warmup: int
    method: str = "GET"
    path: str = SMALL_PATH
    expected_body: int = len(SMALL_BODY)
    upload_size: int = 0

    def to_json(self) -> dict[str, Any]:
        data = super().to_json()
        data.update(method=self.method, path=self.path, upload_size=self.upload_size)
        return data

    async def _drive(
        self, adapter: Adapter, runtime: Runtime, total: int, min_time: float, limit: float
    ) -> _LoadState:
        now = time.perf_counter()
        state = _LoadState(total=total, deadline=now + limit, min_end=now + min_time)
        path = self.path
        expected = self.expected_body
        body = bytes(self.upload_size) if self.method == "POST" else None
        latencies = state.latencies
        perf_counter = time.perf_counter

        async def worker() -> None:
            while not state.aborted:
                now = perf_counter()
                if state.issued >= state.total and now >= state.min_end:
                    return
                if now > state.deadline:
                    state.truncated = True
                    return
                state.issued += 1
                t0 = perf_counter()
                try:
                    if body is None:
                        status, received = await adapter.get(path)
                    else:
                        status, received = await adapter.post(path, body)
                except Exception as exc:
                    state.error(f"{type(exc).__name__}: {exc}")
                    continue
                t1 = perf_counter()
                if status != 200 or received != expected:
                    state.error(f"unexpected response: status {status}, {received} body bytes")
                    continue
                latencies.append(t1 - t0)
                state.received += received

        await runtime.run_parallel(worker, min(self.concurrency, total))
        return state

    def skip_reason(self, client: str) -> str | None:
        from benchmarks.clients import ADAPTERS
        from benchmarks.loadgen import LoadGenerator

        cls = ADAPTERS.get(client)
        if cls is not None and issubclass(cls, LoadGenerator):
            return cls.skip_for(self)
        return None

    def run(self, adapter: Adapter, runtime: Runtime, params: RunParams) -> dict[str, Any]:
        from benchmarks.loadgen import LoadGenerator

        if isinstance(adapter, LoadGenerator):
            return self._run_generator(adapter, params)

        async def main() -> dict[str, Any]:
            async with adapter.lifespan():
                if params.warmup:
                    warm = await self._drive(
                        adapter, runtime, params.warmup, 0.0, params.soft_limit
                    )
                    if warm.errors:
                        return {
                            "status": "failed",
                            "note": f"warm-up failed: {warm.error_samples[0]}",
                            "errors": warm.errors,
                            "error_samples": warm.error_samples,
                        }
                gc.collect()
                before = _Snapshot.take(params)
                state = await self._drive(
                    adapter, runtime, params.requests, params.min_time, params.soft_limit
                )
                after = _Snapshot.take(params)
            return self._summarise(state, before, after, params)

        return runtime.run(main, params.hard_limit)

    def _run_generator(self, generator: LoadGenerator, params: RunParams) -> dict[str, Any]:
        """A C load generator's run: the tool's own counts, its CPU from its rusage."""
        before = _Snapshot.take(params)
        figures, ru = generator.execute(self, params)
        after = _Snapshot.take(params)
        cpu = ru.ru_utime + ru.ru_stime
        ok, errors, wall = figures["requests"], figures["errors"], figures["wall_s"]
        return {
            "status": "ok" if ok and not errors else "failed",
            "note": f"{errors} errors (non-2xx or socket errors)" if errors else "",
            "requests": ok,
            "errors": errors,
            "error_samples": [],
            "truncated": False,
            "concurrency": self.concurrency,
            "wall_s": wall,
            "rps": ok / wall if wall > 0 else 0.0,
            **{k: figures.get(k) for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms", "mean_ms")},
            "cpu_s": cpu,
            "cpu_user_s": ru.ru_utime,
            "cpu_sys_s": ru.ru_stime,
            "cpu_ms_per_req": cpu / ok * 1e3 if ok else float("nan"),
            "client_cpu_util": cpu / wall if wall > 0 else 0.0,
            **_shares(before, after, params, cpu),
            "bytes_received": None,
            "command": figures["command"],
        }

    def _summarise(
        self, state: _LoadState, before: _Snapshot, after: _Snapshot, params: RunParams
    ) -> dict[str, Any]:
        lat = sorted(state.latencies)
        ok = len(lat)
        wall = after.wall - before.wall
        cpu = after.cpu - before.cpu
        return {
            "status": "ok" if ok and not state.errors else "failed",
            "note": (
                f"{state.errors} errors, e.g. {state.error_samples[0]}" if state.errors else ""
            ),
            "requests": ok,
            "errors": state.errors,
            "error_samples": state.error_samples,
            "truncated": state.truncated,
            "concurrency": self.concurrency,
            "wall_s": wall,
            "rps": ok / wall if wall > 0 else 0.0,
            "p50_ms": percentile(lat, 50) * 1e3,
            "p90_ms": percentile(lat, 90) * 1e3,
            "p99_ms": percentile(lat, 99) * 1e3,
            "max_ms": (lat[-1] if lat else float("nan")) * 1e3,
            "mean_ms": (sum(lat) / ok if ok else float("nan")) * 1e3,
            "cpu_s": cpu,
            "cpu_user_s": after.ru.ru_utime - before.ru.ru_utime,
            "cpu_sys_s": after.ru.ru_stime - before.ru.ru_stime,
            "cpu_ms_per_req": cpu / ok * 1e3 if ok else float("nan"),
            "client_cpu_util": cpu / wall if wall > 0 else 0.0,
            **_shares(before, after, params, cpu),
            "bytes_received": state.received,
        }


def _shares(
    before: _Snapshot, after: _Snapshot, params: RunParams, cpu: float
) -> dict[str, float | None]:
    """The server's CPU over the phase, and the share of the pinned CPUs that others took
    (``cpu``: the client's own CPU seconds over the phase)."""
    wall = after.wall - before.wall
    server_cpu = None
    if before.server is not None and after.server is not None:
        server_cpu = after.server - before.server
    # /proc counts in clock ticks (10 ms): below a second the shares would be noise.
    trusted = wall >= 1.0
    server_util = server_cpu / wall if server_cpu is not None and trusted else None
    # Busy time on the pinned CPUs that was neither this client nor the server: other
    # processes on the machine, or hypervisor steal. It slows the run down unfairly.
    foreign_client = foreign_server = None
    if trusted and params.client_cpu is not None:
        busy = _busy_delta(before, after, params.client_cpu)
        foreign_client = max(0.0, (busy - cpu) / wall)
        if params.server_cpu is not None and server_cpu is not None:
            busy = _busy_delta(before, after, params.server_cpu)
            foreign_server = max(0.0, (busy - server_cpu) / wall)
    shares = [f for f in (foreign_client, foreign_server) if f is not None]
    return {
        "server_cpu_s": server_cpu,
        "server_cpu_util": server_util,
        "foreign_cpu_util": max(shares) if shares else None,
        "foreign_cpu_util_client": foreign_client,
        "foreign_cpu_util_server": foreign_server,
    }


register(
    LoadScenario(
        name="get_sequential",
        title="3000 sequential keep-alive GETs",
        description="One task, one keep-alive connection, GET of a 13-byte body, back to back.",
        endpoint="h1",
        concurrency=1,
        requests=3000,
        warmup=200,
        smoke_requests=30,
        smoke_warmup=5,
    ),
    LoadScenario(
        name="get_concurrent_32",
        title="32 concurrent GETs over a pool",
        description="32 tasks share one client (pool of 32 connections), small GETs.",
        endpoint="h1",
        concurrency=32,
        requests=4096,
        warmup=320,
        smoke_requests=64,
        smoke_warmup=32,
    ),
    LoadScenario(
        name="get_concurrent_128",
        title="128 concurrent GETs over a pool",
        description="128 tasks share one client (pool of 128 connections), small GETs.",
        endpoint="h1",
        concurrency=128,
        requests=4096,
        warmup=512,
        smoke_requests=128,
        smoke_warmup=128,
    ),
    LoadScenario(
        name="download_64k",
        title="64 KiB download",
        description="Sequential GETs of a 64 KiB static file over one keep-alive connection.",
        endpoint="h1",
        concurrency=1,
        requests=1000,
        warmup=50,
        smoke_requests=10,
        smoke_warmup=2,
        path=BIG_PATH,
        expected_body=BIG_SIZE,
    ),
    LoadScenario(
        name="upload_64k",
        title="64 KiB upload",
        description="Sequential POSTs of a 64 KiB body (Content-Length) over one connection.",
        endpoint="h1",
        concurrency=1,
        requests=1000,
        warmup=50,
        smoke_requests=10,
        smoke_warmup=2,
        method="POST",
        path=UPLOAD_PATH,
        expected_body=len(UPLOAD_REPLY),
        upload_size=BIG_SIZE,
    ),
    LoadScenario(
        name="h2_tls_streams_32",
        title="HTTP/2 over TLS, 32 concurrent streams",
        description="32 tasks share one client; one TLS connection, ALPN h2, small GETs.",
        endpoint="h2_tls",
        concurrency=32,
        requests=4096,
        warmup=320,
        smoke_requests=64,
        smoke_warmup=32,
    ),
    LoadScenario(
        name="h1_tls_concurrent_32",
        title="HTTP/1.1 over TLS, 32 concurrent GETs (extra)",
        description="As get_concurrent_32 but over TLS: separates TLS cost from HTTP/2 cost.",
        endpoint="h1_tls",
        concurrency=32,
        requests=4096,
        warmup=320,
        smoke_requests=64,
        smoke_warmup=32,
    ),
)
