"""Per-request profile of trio_retry against the bare loop: ``python -m benchmarks.profile``.

Against the harness's server (nginx when installed), one process runs the selected clients
(trio_retry and the bare h11 loop by default; the bare h2 loop with ``--h2``) through the same
GETs of ``/small`` and prints, per request and per client:

- **Python function calls** (``sys.setprofile`` "call" events: every Python frame entered,
  coroutine resumptions included) and builtin calls ("c_call"), and **task steps** (a Trio
  instrument's ``before_task_step``): deterministic, the same under load;
- **blocking I/O waits** (``before_io_wait`` with a timeout, counted at full speed after the
  CPU blocks): how often the response was not there yet when the client read. Not
  deterministic: a client that reads sooner, or a server that answers later, waits more, and a
  wait costs CPU of its own (the epoll registration, the sleep and the wake-up);
- **CPU us** (``time.process_time``), the clients taking turns in blocks (A/B interleaved, the
  order alternating) so that a drift of the machine hits every client alike: the median over
  blocks, and the mean;
- the **cProfile tottime breakdown by area** (trio_retry's modules grouped by what they do, then
  h11, h2/hpack, trio, its epoll waits, ssl with ``trio.SSLStream``, socket system calls, the
  harness, other): per request in us (inflated by cProfile's own cost) and as a share of the
  client's total, with its calls per request; and **CPU per request by area**, each share of
  the unprofiled CPU median (the layers' cost, and where a client's CPU above its floor goes).

The request driver and the bare loops are the harness's own (``benchmarks/clients.py``), so the
numbers compare with the throughput suite's. trio_retry is imported from ``--checkout`` (default:
the current directory), which makes the same harness profile any checkout, before and after a
change::

    cd /path/to/old/checkout && python /path/to/harness/benchmarks/profile.py --n 2000

See docs/benchmarks.md, "Profile breakdown".
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__" and not __package__:
    # Run as a script: this directory would shadow the stdlib's ``profile`` (cProfile imports
    # it) and hide the ``benchmarks`` package; use the harness root instead.
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    sys.path.insert(0, os.path.dirname(_here))

import argparse
import cProfile
import gc
import json
import pstats
import statistics
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from benchmarks.checkout import describe_checkout, import_trio_retry
from benchmarks.clients import ADAPTERS, H1, H2, Adapter, Endpoint, TrioRetryAdapter
from benchmarks.profile_areas import Classifier, area_rank
from benchmarks.run import choose_cpus
from benchmarks.scenarios.throughput import SMALL_BODY, SMALL_PATH
from benchmarks.servers import running_server

# ------------------------------------------------------------------------------------------
# The driver: the same closed loop as the throughput suite, without its bookkeeping.
# ------------------------------------------------------------------------------------------


async def run_block(adapter: Adapter, n: int, conc: int) -> None:
    """Issue ``n`` GETs of /small from ``conc`` tasks; raise on any unexpected response."""
    left = n
    expected = len(SMALL_BODY)

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            status, received = await adapter.get(SMALL_PATH)
            if status != 200 or received != expected:
                raise RuntimeError(f"unexpected response: {status}, {received} body bytes")

    async with trio.open_nursery() as nursery:
        for _ in range(min(conc, n)):
            nursery.start_soon(worker)


class _Counter:
    """``sys.setprofile`` hook counting Python and builtin calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.c_calls = 0

    def __call__(self, frame: object, event: str, arg: object) -> None:
        if event == "call":
            self.calls += 1
        elif event == "c_call":
            self.c_calls += 1


class _Steps(trio.abc.Instrument):
    def __init__(self) -> None:
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1


class _Waits(trio.abc.Instrument):
    """Counts the run loop's blocking I/O waits: nothing was ready to run, so it slept in the
    kernel until a socket became ready (``before_io_wait`` with a timeout above zero)."""

    def __init__(self) -> None:
        self.blocking = 0

    def before_io_wait(self, timeout: float) -> None:
        if timeout > 0:
            self.blocking += 1


@dataclass
class ClientProfile:
    name: str
    label: str
    note: str = ""
    calls: float = 0.0
    c_calls: float = 0.0
    task_steps: float = 0.0
    blocking_waits: float = float("nan")
    cpu_blocks_us: list[float] = field(default_factory=list)
    areas: dict[str, dict[str, float]] = field(default_factory=dict)
    profiled_us: float = 0.0  # cProfile's total tottime per request
    top: list[dict[str, Any]] = field(default_factory=list)

    @property
    def cpu_us(self) -> float:
        return statistics.median(self.cpu_blocks_us) if self.cpu_blocks_us else float("nan")

    @property
    def cpu_mean_us(self) -> float:
        return statistics.fmean(self.cpu_blocks_us) if self.cpu_blocks_us else float("nan")

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "label": self.label,
            "note": self.note,
            "python_calls_per_req": self.calls,
            "builtin_calls_per_req": self.c_calls,
            "task_steps_per_req": self.task_steps,
            "blocking_waits_per_req": self.blocking_waits,
            "cpu_us_per_req": self.cpu_us,
            "cpu_us_per_req_mean": self.cpu_mean_us,
            "cpu_us_blocks": self.cpu_blocks_us,
            "cprofile_us_per_req": self.profiled_us,
            "areas": {
                area: {**a, "cpu_us": a["share"] * self.cpu_us} for area, a in self.areas.items()
            },
            "top": self.top,
        }


async def count_calls(adapter: Adapter, n: int, conc: int, prof: ClientProfile) -> None:
    counter = _Counter()
    steps = _Steps()
    trio.lowlevel.add_instrument(steps)
    sys.setprofile(counter)
    try:
        await run_block(adapter, n, conc)
    finally:
        sys.setprofile(None)
        trio.lowlevel.remove_instrument(steps)
    prof.calls = counter.calls / n
    prof.c_calls = counter.c_calls / n
    prof.task_steps = steps.steps / n


async def count_waits(adapter: Adapter, n: int, conc: int, prof: ClientProfile) -> None:
    """Blocking waits per request, at full speed (no profiler): how often the response was
    not there yet when the client went to read it. The CPU blocks run without this
    instrument."""
    waits = _Waits()
    trio.lowlevel.add_instrument(waits)
    try:
        await run_block(adapter, n, conc)
    finally:
        trio.lowlevel.remove_instrument(waits)
    prof.blocking_waits = waits.blocking / n


async def profile_areas(
    adapter: Adapter, n: int, conc: int, prof: ClientProfile, classify: Classifier, top: int
) -> None:
    # CPU time, not wall time: the wait for the server is nobody's cost.
    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    try:
        await run_block(adapter, n, conc)
    finally:
        profiler.disable()
    stats: dict[Any, Any] = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    areas: dict[str, list[float]] = {}
    total = 0.0
    rows = []

    def add(area: str, tottime: float, ncalls: float) -> None:
        acc = areas.setdefault(area, [0.0, 0.0])
        acc[0] += tottime
        acc[1] += ncalls

    for (filename, line, name), (_cc, ncalls, tottime, cumtime, callers) in stats.items():
        total += tottime
        rows.append((tottime, ncalls, cumtime, f"{os.path.basename(filename)}:{line}({name})"))
        area = classify(filename, name)
        if area != "other" or not callers:
            add(area, tottime, ncalls)
            continue
        # A builtin or stdlib function: its time counts for the area that called it.
        for (cfile, _cline, cname), edge in callers.items():
            c_ncalls, c_tottime = (edge[0], edge[2]) if isinstance(edge, tuple) else (edge, 0.0)
            add(classify(cfile, cname), c_tottime, c_ncalls)
        rest = tottime - sum(e[2] for e in callers.values() if isinstance(e, tuple))
        if rest > 1e-9:
            add("other", rest, 0)
    prof.profiled_us = total / n * 1e6
    prof.areas = {
        area: {"us": t / n * 1e6, "share": t / total if total else 0.0, "calls": c / n}
        for area, (t, c) in sorted(areas.items(), key=lambda kv: area_rank(kv[0]))
    }
    rows.sort(reverse=True)
    prof.top = [
        {"function": f, "tottime_us": t / n * 1e6, "cumtime_us": ct / n * 1e6, "calls": c / n}
        for t, c, ct, f in rows[:top]
    ]


async def measure(
    adapters: dict[str, Adapter], profiles: dict[str, ClientProfile], args: argparse.Namespace
) -> None:
    conc = args.conc
    classify = Classifier(args.trio_retry_dir, args.by_module)
    async with AsyncExitStack() as stack:
        for adapter in adapters.values():
            await stack.enter_async_context(adapter.lifespan())
        for adapter in adapters.values():
            await run_block(adapter, args.warmup, conc)
        for name, adapter in adapters.items():
            await count_calls(adapter, args.count_n, conc, profiles[name])
        block = max(1, min(args.block, args.n))
        items = list(adapters.items())
        gc.collect()
        for b in range(max(1, args.n // block)):
            for name, adapter in items if b % 2 == 0 else items[::-1]:
                t0 = time.process_time()
                await run_block(adapter, block, conc)
                profiles[name].cpu_blocks_us.append((time.process_time() - t0) / block * 1e6)
        for name, adapter in adapters.items():
            await count_waits(adapter, args.count_n, conc, profiles[name])
        if args.profile_n > 0:
            for name, adapter in adapters.items():
                await profile_areas(
                    adapter, args.profile_n, conc, profiles[name], classify, args.top
                )


# ------------------------------------------------------------------------------------------
# Setting up: which trio_retry, which clients, which endpoint.
# ------------------------------------------------------------------------------------------


def _with_options(cls: type[Adapter], extra: dict[str, Any]) -> type[Adapter]:
    """``cls`` with ``extra`` added to its ``Client(...)`` arguments (trio_retry rows only).

    A row sits idle while the others run (seconds, under cProfile or load): with the default
    ``keepalive_expiry`` (5 s) its connection would be replaced in the middle of a measured
    phase, a reconnection (a TLS handshake) measured as if it were per-request cost. So the
    rows keep their connections (``keepalive_expiry=None``) unless ``--kw`` says otherwise."""
    if not issubclass(cls, TrioRetryAdapter):
        return cls
    from benchmarks.clients import client_accepts

    if client_accepts("keepalive_expiry"):
        extra = {"keepalive_expiry": None, **extra}
    base: Callable[[TrioRetryAdapter], dict[str, Any]] = cls.client_options

    def client_options(self: TrioRetryAdapter) -> dict[str, Any]:
        return {**base(self), **extra}

    return type(cls.__name__ + "WithOptions", (cls,), {"client_options": client_options})


def make_adapters(
    names: list[str], endpoint: Endpoint, args: argparse.Namespace, extra: dict[str, Any]
) -> tuple[dict[str, Adapter], dict[str, ClientProfile]]:
    adapters: dict[str, Adapter] = {}
    profiles: dict[str, ClientProfile] = {}
    want = H2 if endpoint.http2 else H1
    for name in names:
        cls = ADAPTERS[name]
        if want not in cls.protocols:
            print(f"{name}: skipped ({cls.no_h2_reason if want == H2 else 'HTTP/2 only'})")
            continue
        if cls.tls_only and not endpoint.tls:
            print(f"{name}: skipped ({cls.tls_only})")
            continue
        cls.check_available()
        # A row's own environment is not applied: in one process it would apply to every row.
        env_applied = all(os.environ.get(k) == v for k, v in cls.env.items())
        notes = [n for n in (cls.setup_note(env_applied),) if n]
        label = cls.label
        if extra and issubclass(cls, TrioRetryAdapter):
            label += f" {json.dumps(extra)}"
        if issubclass(cls, TrioRetryAdapter) and "keepalive_expiry" not in extra:
            notes.append("keepalive_expiry=None (idle while the other rows run)")
        adapters[name] = _with_options(cls, extra)(endpoint, args.conc)
        profiles[name] = ClientProfile(name, label, "; ".join(notes))
    return adapters, profiles


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.profile",
        description="Per-request calls, CPU and cProfile breakdown of trio_retry against the "
        "bare loop (see docs/benchmarks.md).",
    )
    p.add_argument("--n", type=int, default=2000, help="requests per client for CPU (2000)")
    p.add_argument("--count-n", type=int, default=500, help="requests for call counts (500)")
    p.add_argument("--profile-n", type=int, default=1000, help="requests under cProfile (1000)")
    p.add_argument("--warmup", type=int, default=200, help="unmeasured requests first (200)")
    p.add_argument("--block", type=int, default=250, help="requests per A/B block (250)")
    p.add_argument("--conc", type=int, default=1, help="concurrent tasks (1; try 32)")
    p.add_argument("--tls", action="store_true", help="HTTP/1.1 over TLS")
    p.add_argument("--h2", action="store_true", help="HTTP/2 over TLS (bare loop: h2_trio)")
    p.add_argument(
        "--clients",
        default=None,
        help="comma-separated, of: " + ", ".join(ADAPTERS) + " (default: trio_retry and the "
        "bare loop of the protocol)",
    )
    p.add_argument("--kw", default="", help="JSON: extra Client(...) arguments, trio_retry rows")
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set before trio_retry is imported (every row), e.g. TRIO_RETRY_HTTP1_FAST_PATH=0",
    )
    p.add_argument("--checkout", default=".", help="import trio_retry from here (default: .)")
    p.add_argument("--server", choices=("auto", "nginx", "fallback"), default="auto")
    p.add_argument(
        "--pin",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="server on the first CPU, this process on the second (default: with 2+ CPUs)",
    )
    p.add_argument("--by-module", action="store_true", help="trio_retry's time per module")
    p.add_argument("--top", type=int, default=0, help="also list the top N functions")
    p.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    args = p.parse_args(argv)
    if args.h2:
        args.tls = True
    names = args.clients.split(",") if args.clients else ["trio_retry"]
    if not args.clients:
        names.append("h2_trio" if args.h2 else "h11_trio")
    for name in names:
        if name not in ADAPTERS:
            p.error(f"unknown client {name!r}")
    args.names = names
    for n in (args.n, args.count_n, args.warmup, args.block, args.conc):
        if n < 1:
            p.error("--n, --count-n, --warmup, --block and --conc must be at least 1")
    for item in args.env:
        if "=" not in item:
            p.error(f"--env wants NAME=VALUE, not {item!r}")
    return args


# ------------------------------------------------------------------------------------------
# Output
# ------------------------------------------------------------------------------------------


def render(profiles: list[ClientProfile], header: list[str]) -> str:
    lines = [*header, ""]
    width = max(24, *(len(p.label) + 2 for p in profiles))
    floor = next(
        (p for p in profiles if p.name in ("h11_trio", "h2_trio", "trio_raw")), profiles[-1]
    )

    def row(title: str, cells: list[str]) -> None:
        lines.append(f"{title:34}" + "".join(f"{c:>{width}}" for c in cells))

    row("per request", [p.label for p in profiles])
    row("Python function calls", [f"{p.calls:.1f}" for p in profiles])
    row("builtin calls", [f"{p.c_calls:.1f}" for p in profiles])
    row("task steps", [f"{p.task_steps:.2f}" for p in profiles])
    row("blocking I/O waits", [f"{p.blocking_waits:.2f}" for p in profiles])
    blocks = len(profiles[0].cpu_blocks_us)
    row(f"CPU us (median of {blocks} blocks)", [f"{p.cpu_us:.1f}" for p in profiles])
    row("CPU us (mean)", [f"{p.cpu_mean_us:.1f}" for p in profiles])
    row(
        f"CPU / {floor.name}",
        [f"{p.cpu_us / floor.cpu_us:.3f}x" if floor.cpu_us else "-" for p in profiles],
    )
    row(f"calls / {floor.name}", [f"{p.calls / floor.calls:.3f}x" for p in profiles])
    if any(p.areas for p in profiles):
        lines.append("")
        lines.append(
            "cProfile tottime (CPU) per request, by area: us (inflated by cProfile), share of "
            "the client's total, calls;\nbuiltins and stdlib functions count in the area that "
            "called them"
        )
        areas: list[str] = []
        for p in profiles:
            areas += [a for a in p.areas if a not in areas]
        areas.sort(key=area_rank)
        for area in areas:
            cells = []
            for p in profiles:
                a = p.areas.get(area)
                cells.append(
                    "" if a is None else f"{a['us']:6.1f} {a['share']:6.1%} {a['calls']:6.1f}"
                )
            row(f"  {area}", cells)
        row("  total under cProfile", [f"{p.profiled_us:.1f} us" for p in profiles])
        lines.append("")
        lines.append(
            "CPU us per request by area: the CPU median above times the area's cProfile share "
            "(cProfile inflates\nevery call alike, so its shares, not its microseconds, carry "
            "over to the unprofiled CPU)"
        )
        for area in areas:
            cells = []
            for p in profiles:
                a = p.areas.get(area)
                cells.append("" if a is None else f"{a['share'] * p.cpu_us:.1f}")
            row(f"  {area}", cells)
    for p in profiles:
        if p.top:
            lines.append("")
            lines.append(f"top functions by tottime, {p.label} (us/req, cum us/req, calls/req)")
            for t in p.top:
                lines.append(
                    f"  {t['tottime_us']:7.2f} {t['cumtime_us']:8.2f} {t['calls']:6.1f}  "
                    f"{t['function']}"
                )
    notes = [f"{p.label}: {p.note}" for p in profiles if p.note]
    if notes:
        lines.append("")
        lines += notes
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for item in args.env:
        name, _, value = item.partition("=")
        os.environ[name] = value
    extra = json.loads(args.kw) if args.kw else {}
    trio_retry = import_trio_retry(args.checkout)
    args.trio_retry_dir = os.path.dirname(os.path.abspath(trio_retry.__file__))
    checkout = os.path.abspath(args.checkout)
    server_cpu, client_cpu, pin_note = choose_cpus(args.pin)
    if client_cpu is not None:
        os.sched_setaffinity(0, {client_cpu})
    key = "h2_tls" if args.h2 else ("h1_tls" if args.tls else "h1")
    with running_server(args.server, server_cpu) as (server, ca_file):
        info = server.describe()
        if key not in server.endpoints:
            raise SystemExit(f"endpoint {key} unavailable (TLS needs trustme)")
        d = server.endpoints[key]
        endpoint = Endpoint.from_json({**d, "ca_file": ca_file if d["scheme"] == "https" else None})
        adapters, profiles = make_adapters(args.names, endpoint, args, extra)
        if not adapters:
            raise SystemExit("no client to profile")
        trio.run(measure, adapters, profiles, args)
    header = [
        f"trio_retry {getattr(trio_retry, '__version__', '?')} from {args.trio_retry_dir} "
        f"({describe_checkout(checkout)})",
        f"server: {info['kind']} {info['version']}; {endpoint.base_url} "
        f"({'HTTP/2' if endpoint.http2 else 'HTTP/1.1'}{', TLS' if endpoint.tls else ''}); "
        f"{pin_note}",
        f"GET {SMALL_PATH}, {args.conc} task(s); CPU over {args.n} requests per client in blocks "
        f"of {min(args.block, args.n)}, calls over {args.count_n}, cProfile over {args.profile_n}",
    ]
    print(render(list(profiles.values()), header))
    if args.json:
        document = {
            "checkout": checkout,
            "revision": describe_checkout(checkout),
            "trio_retry_dir": args.trio_retry_dir,
            "server": {"kind": info["kind"], "version": info["version"]},
            "endpoint": endpoint.to_json(),
            "pinning": pin_note,
            "config": {
                k: getattr(args, k)
                for k in ("n", "count_n", "profile_n", "warmup", "block", "conc", "tls", "h2")
            },
            "client_options": extra,
            "env": args.env,
            "clients": [p.to_json() for p in profiles.values()],
        }
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(document, indent=2))
        print(f"JSON written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
