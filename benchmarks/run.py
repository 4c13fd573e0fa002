"""Benchmark runner: ``python -m benchmarks [--smoke] [--json PATH] [--plot PATH] ...``.

Starts the server (nginx, or the pure-Python fallback), then runs every selected client through
every selected scenario, each run in a fresh worker subprocess (``benchmarks.worker``), and
reports medians over ``--repeat`` runs with ratios to httpx on Trio measured in the same run.
See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import SCHEMA_VERSION
from benchmarks.clients import ADAPTERS, BASELINE, H1, H2
from benchmarks.derived import derive
from benchmarks.derived import render_markdown as render_derived_markdown
from benchmarks.derived import render_text as render_derived_text
from benchmarks.report import aggregate, plot, render_markdown, render_text
from benchmarks.scenarios import Scenario, all_scenarios
from benchmarks.servers import PACKAGE_ROOT, child_preexec, running_server
from benchmarks.worker import RESULT_TAG

PACKAGES = (
    "trio_retry",
    "trio",
    "h11",
    "h2",
    "outcome",
    "httpx",
    "httpcore",
    "anyio",
    "aiohttp",
    "niquests",
    "urllib3-future",
    "trustme",
    "matplotlib",
)


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    scenarios = all_scenarios()
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Loopback HTTP client benchmarks (see docs/benchmarks.md).",
    )
    p.add_argument(
        "--smoke",
        action="store_true",
        help="a few requests per scenario, one worker per client: checks the harness works "
        "(seconds); numbers are meaningless",
    )
    p.add_argument("--json", metavar="PATH", help="write all results as JSON to PATH")
    p.add_argument("--plot", metavar="PATH", help="draw a PNG to PATH (needs matplotlib)")
    p.add_argument(
        "--repeat",
        type=int,
        default=None,
        metavar="N",
        help="runs per (scenario, client); the table shows medians (default 3, smoke 1)",
    )
    p.add_argument(
        "--clients",
        type=_csv,
        default=list(ADAPTERS),
        metavar="A,B",
        help=f"comma-separated subset of: {', '.join(ADAPTERS)}",
    )
    p.add_argument(
        "--scenarios",
        type=_csv,
        default=list(scenarios),
        metavar="X,Y",
        help=f"comma-separated subset of: {', '.join(scenarios)}",
    )
    p.add_argument(
        "--server",
        choices=("auto", "nginx", "fallback"),
        default="auto",
        help="auto: nginx if it is installed and starts, else the pure-Python fallback",
    )
    p.add_argument(
        "--pin",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="pin the server to the first CPU and each client to the second "
        "(default: on when 2+ CPUs are available)",
    )
    p.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiply every scenario's request count (full mode only)",
    )
    p.add_argument(
        "--min-time",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="full mode: keep each measured phase going at least this long, issuing more than "
        "the scenario's request count if needed (default 1.0; 0 = exact counts)",
    )
    p.add_argument(
        "--max-noise",
        type=float,
        default=0.10,
        metavar="SHARE",
        help="with pinning: re-run a run when other processes used more than this share of "
        "the client's or the server's CPU during it (default 0.10)",
    )
    p.add_argument(
        "--noise-retries",
        type=int,
        default=2,
        metavar="N",
        help="how many times a noisy run is re-run before it is kept, flagged (default 2)",
    )
    p.add_argument(
        "--quiet-wait",
        type=float,
        default=20.0,
        metavar="SECONDS",
        help="with pinning: before each run, wait up to this long for other load on the "
        "pinned CPUs to stop (default 20; 0 = never wait)",
    )
    p.add_argument(
        "--quiet-budget",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="total waiting allowed by --quiet-wait in one invocation (default 600)",
    )
    p.add_argument("--markdown", action="store_true", help="also print a Markdown table")
    p.add_argument("--list", action="store_true", help="list scenarios and clients, then exit")
    args = p.parse_args(argv)
    for name in args.clients:
        if name not in ADAPTERS:
            p.error(f"unknown client {name!r}; choose from {', '.join(ADAPTERS)}")
    for name in args.scenarios:
        if name not in scenarios:
            p.error(f"unknown scenario {name!r}; choose from {', '.join(scenarios)}")
    if args.repeat is None:
        args.repeat = 1 if args.smoke else 3
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    if args.scale <= 0:
        p.error("--scale must be positive")
    if args.min_time < 0 or args.noise_retries < 0:
        p.error("--min-time and --noise-retries must not be negative")
    return args


def machine_info() -> dict[str, Any]:
    cpu_model = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    versions: dict[str, str | None] = {}
    for pkg in PACKAGES:
        try:
            versions[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            versions[pkg] = None
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "nproc": os.cpu_count(),
        "affinity": affinity,
        "cpu_model": cpu_model,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "packages": versions,
    }


def choose_cpus(pin: bool | None) -> tuple[int | None, int | None, str]:
    if pin is False or not hasattr(os, "sched_getaffinity"):
        return None, None, "no CPU pinning"
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None, None, "no CPU pinning (fewer than 2 CPUs available)"
    return cpus[0], cpus[1], f"server pinned to CPU {cpus[0]}, client to CPU {cpus[1]}"


def _cpu_busy(cpus: set[int]) -> tuple[float, float]:
    """(busy, total) jiffies of the given CPUs from /proc/stat."""
    busy = total = 0.0
    with open("/proc/stat") as f:
        for line in f:
            parts = line.split()
            if parts[0].startswith("cpu") and parts[0][3:].isdigit() and int(parts[0][3:]) in cpus:
                values = [float(v) for v in parts[1:9]]
                total += sum(values)
                busy += values[0] + values[1] + values[2] + values[5] + values[6] + values[7]
    return busy, total


class QuietWaiter:
    """Before a run, wait (bounded) until the pinned CPUs are idle: nothing of ours runs then."""

    def __init__(self, cpus: set[int], threshold: float, per_run: float, budget: float) -> None:
        self.cpus = cpus
        self.threshold = threshold
        self.per_run = per_run
        self.budget = budget  # total seconds of waiting allowed in this invocation
        self.waited = 0.0

    def wait(self) -> None:
        if not self.cpus or self.per_run <= 0 or self.waited >= self.budget:
            return
        start = time.monotonic()
        limit = min(self.per_run, self.budget - self.waited)
        announced = False
        try:
            while True:
                b0, t0 = _cpu_busy(self.cpus)
                time.sleep(0.5)
                b1, t1 = _cpu_busy(self.cpus)
                load = (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0
                if load <= self.threshold:
                    return
                if time.monotonic() - start >= limit:
                    _progress(f"  machine still busy ({load:.0%}); running anyway")
                    return
                if not announced:
                    _progress(
                        f"  other load on the pinned CPUs ({load:.0%}): waiting up to {limit:.0f}s"
                    )
                    announced = True
        except OSError:
            return
        finally:
            self.waited += time.monotonic() - start


def run_worker(config: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run one worker subprocess; always returns a dict (failures described, never raised)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH", "")) if p
    )
    cmd = [sys.executable, "-m", "benchmarks.worker", json.dumps(config)]
    try:
        proc = subprocess.run(
            cmd,
            cwd=PACKAGE_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            preexec_fn=child_preexec(),
        )
    except subprocess.TimeoutExpired:
        return {"error": f"worker timed out after {timeout:.0f}s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            result: dict[str, Any] = json.loads(line[len(RESULT_TAG) :])
            return result
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-6:]
    return {"error": f"worker exited {proc.returncode}: " + " | ".join(tail)}


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    registry = all_scenarios()
    scenario_names: list[str] = [s for s in registry if s in args.scenarios]
    client_names: list[str] = [c for c in ADAPTERS if c in args.clients]
    labels = {name: cls.label for name, cls in ADAPTERS.items()}
    if args.list:
        for s in registry.values():
            print(f"scenario {s.name:24} {s.title}")
        for c in ADAPTERS.values():
            print(f"client   {c.name:24} {c.description}")
        return 0

    started = time.monotonic()
    mode = "smoke" if args.smoke else "full"
    server_cpu, client_cpu, pin_note = choose_cpus(args.pin)
    machine = machine_info()
    _progress(f"benchmarks: {mode} mode, repeat {args.repeat}, {pin_note}")

    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    discarded: dict[tuple[str, str], list[dict[str, Any]]] = {}
    skipped: dict[tuple[str, str], str] = {}
    client_notes: dict[str, str] = {}
    unavailable: dict[str, str] = {}
    for name in client_names:
        reason = ADAPTERS[name].unavailable_reason()
        if reason is not None:
            unavailable[name] = reason

    pinned = {c for c in (server_cpu, client_cpu) if c is not None}
    quiet = QuietWaiter(pinned, args.max_noise / 2, args.quiet_wait, args.quiet_budget)
    with running_server(args.server, server_cpu) as (server, _ca_file):
        for note in server.notes:
            _progress(f"server: {note}")
        endpoints = {
            k: {**v, "ca_file": _ca_file if v["scheme"] == "https" else None}
            for k, v in server.endpoints.items()
        }
        server_pids = tuple(server.pids)

        def applicable(scenario: Scenario, client: str) -> str | None:
            """Why (scenario, client) cannot run, or None."""
            reason = scenario.skip_reason(client)
            if reason is not None:
                return reason
            if client in unavailable:
                return unavailable[client]
            if scenario.endpoint not in endpoints:
                return "TLS unavailable (trustme not installed)"
            if ADAPTERS[client].tls_only and endpoints[scenario.endpoint]["scheme"] != "https":
                return ADAPTERS[client].tls_only
            want = H2 if endpoints[scenario.endpoint]["http2"] else H1
            if want not in ADAPTERS[client].protocols:
                return ADAPTERS[client].no_h2_reason if want == H2 else "HTTP/2-only client"
            return None

        def record(
            client: str, result: dict[str, Any], batch: list[Scenario], rep: int
        ) -> list[dict[str, Any]]:
            """Turn one worker's output into per-scenario run entries (and progress lines)."""
            if "error" in result:
                _progress(f"  {client}: FAILED: {result['error']}")
                return [
                    {"scenario": s.name, "status": "failed", "note": result["error"], "repeat": rep}
                    for s in batch
                ]
            if result.get("note"):
                client_notes[client] = result["note"]
            if not result.get("available", True):
                unavailable[client] = f"not available ({result.get('reason', '?')})"
                _progress(f"{client}: {unavailable[client]}")
                return []
            entries: list[dict[str, Any]] = result["results"]
            for entry in entries:
                entry["repeat"] = rep
                if entry.get("status") == "ok":
                    line = registry[entry["scenario"]].progress_line(entry)
                    _progress(f"  {entry['scenario']:22} {client:24} {line}")
                else:
                    _progress(f"  {entry['scenario']:22} {client:24} FAILED: {entry.get('note')}")
            return entries

        def launch(client: str, batch: list[Scenario], rep: int) -> None:
            items = []
            hard = 0.0
            for scenario in batch:
                params = scenario.params(
                    smoke=args.smoke,
                    scale=args.scale,
                    min_time=args.min_time,
                    server_pids=server_pids,
                    server_cpu=server_cpu,
                    client_cpu=client_cpu,
                )
                hard += params.hard_limit
                items.append({"name": scenario.name, "params": params.to_json()})
            config = {
                "client": client,
                "scenarios": items,
                "endpoints": endpoints,
                "client_cpu": client_cpu,
            }
            for attempt in range(1 + args.noise_retries):
                # Counting suites do not measure CPU time: no need to wait for quiet CPUs.
                if not args.smoke and any(s.cpu_sensitive for s in batch):
                    quiet.wait()
                entries = record(client, run_worker(config, timeout=hard + 60), batch, rep)
                noisy = [
                    e
                    for e in entries
                    if e.get("status") == "ok" and (e.get("foreign_cpu_util") or 0) > args.max_noise
                ]
                if not noisy or attempt == args.noise_retries:
                    break
                # Another process (or the hypervisor) took CPU time on our CPUs: redo the run.
                _progress(f"  {client}: other load above {args.max_noise:.0%}, running again")
                for e in entries:
                    discarded.setdefault((e["scenario"], client), []).append(e)
            for e in entries:
                if (e.get("foreign_cpu_util") or 0) > args.max_noise:
                    e["noisy"] = True
                runs.setdefault((e["scenario"], client), []).append(e)

        selected = [registry[s] for s in scenario_names]

        def wanted(scenario: Scenario, rep: int) -> bool:
            """Repeat ``rep`` runs this scenario (counting suites run once, see max_repeats)."""
            return scenario.max_repeats is None or rep < scenario.max_repeats

        for rep in range(args.repeat):
            if args.repeat > 1:
                _progress(f"repeat {rep + 1}/{args.repeat}")
            # Rotate the client order each repeat so no client always runs first or last.
            shift = rep % max(1, len(client_names))
            order = client_names[shift:] + client_names[:shift]
            if args.smoke:
                for client in order:
                    batch = [
                        s for s in selected if wanted(s, rep) and applicable(s, client) is None
                    ]
                    if batch:
                        launch(client, batch, rep)
            else:
                for scenario in selected:
                    if not wanted(scenario, rep):
                        continue
                    for client in order:
                        if applicable(scenario, client) is None:
                            launch(client, [scenario], rep)
        for scenario in selected:
            for client in client_names:
                reason = applicable(scenario, client)
                if reason is not None and (scenario.name, client) not in runs:
                    skipped[(scenario.name, client)] = reason
        server_info = server.describe()

    summaries: dict[str, dict[str, str]] = {}
    for name in scenario_names:
        summary = registry[name].summary
        if summary is not None:
            summaries[name] = summary
    results = aggregate(
        runs, skipped, scenario_names, client_names, labels, BASELINE, summaries=summaries
    )
    for r in results:
        r["discarded_runs"] = discarded.get((r["scenario"], r["client"]), [])
    scen_json = {name: registry[name].to_json() for name in scenario_names}
    for name in scenario_names:
        # The clients a scenario applies to (tables of other suites show only these rows).
        scen_json[name]["clients"] = [
            c for c in client_names if registry[name].skip_reason(c) is None
        ]
    duration = time.monotonic() - started

    print(
        f"\ntrio_retry benchmarks ({mode}; medians of {args.repeat} run(s); server: "
        f"{server_info['kind']} {server_info['version']}; {pin_note})"
    )
    print(
        f"machine: {machine['nproc']} CPUs, {machine['cpu_model']}, {machine['python']}, "
        f"{machine['platform']}"
    )
    for client in client_names:
        if client in unavailable:
            print(f"{client}: {unavailable[client]}")
        elif client_notes.get(client):
            print(f"{labels[client]} ({client}): {client_notes[client]}")
    throughput_like = [s for s in scenario_names if registry[s].columns is None]
    if throughput_like and not any(
        r["client"] == BASELINE and r["status"] == "ok" and r["scenario"] in throughput_like
        for r in results
    ):
        print(f"baseline {labels[BASELINE]} was not measured: no ratios in this run")
    derived = derive(results, scen_json)
    throughput_json = {k: v for k, v in scen_json.items() if v.get("columns") is None}
    others_json = {k: v for k, v in scen_json.items() if v.get("columns") is not None}
    print(render_text(results, throughput_json))
    print(render_derived_text(derived))
    if args.smoke and derived["targets"]:
        print("(smoke mode: too few requests, the figures and verdicts above mean nothing)")
    print(render_text(results, others_json))
    if args.markdown:
        print()
        print(render_markdown(results, scen_json))
        if derived["scenarios"]:
            print()
            print(render_derived_markdown(derived))
    print()
    if any(registry[s].legend is None for s in scenario_names):
        print(
            "x httpx/Trio: r/s ratio to httpx on Trio in this run (higher is better); "
            "CPU x httpx: CPU/request ratio (lower is better);\nsrv CPU: server busy share "
            "(near 100% = server-bound); spread: (max-min)/median r/s over repeats."
        )
    legends: dict[str, str] = {}
    for name in scenario_names:
        legend = registry[name].legend
        if legend is not None:
            legends.setdefault(registry[name].suite, legend)
    for suite, legend in legends.items():
        print(f"{suite}: {legend}")
    if any(r.get("noisy_runs") for r in results):
        print(
            f"*: every run of this cell had other load above {args.max_noise:.0%} on a pinned CPU "
            "(even after re-runs): treat it with care."
        )
    print(f"total time {duration:.1f}s")

    document = {
        "schema": SCHEMA_VERSION,
        "mode": mode,
        "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "duration_s": duration,
        "baseline": BASELINE,
        "config": {
            "repeat": args.repeat,
            "scale": args.scale,
            "min_time": args.min_time,
            "max_noise": args.max_noise,
            "noise_retries": args.noise_retries,
            "quiet_wait": args.quiet_wait,
            "quiet_budget": args.quiet_budget,
            "quiet_waited_s": quiet.waited,
            "server": args.server,
            "pinning": {"server_cpu": server_cpu, "client_cpu": client_cpu, "note": pin_note},
            "clients": client_names,
            "scenarios": scenario_names,
        },
        "machine": machine,
        "server": server_info,
        "scenarios": list(scen_json.values()),
        "clients": [
            {
                "name": c,
                "label": labels[c],
                "runtime": ADAPTERS[c].runtime,
                "description": ADAPTERS[c].description,
                "available": c not in unavailable,
                "note": unavailable.get(c, client_notes.get(c, "")),
            }
            for c in client_names
        ],
        "results": results,
        "derived": derived,
    }
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(_finite(document), indent=2, allow_nan=False))
        print(f"JSON written to {path}")
    if args.plot:
        title = (
            f"{mode}, medians of {args.repeat}; server {server_info['kind']}; "
            f"{machine['nproc']} CPUs {machine['cpu_model']}; {machine['python']}"
        )
        print(plot(results, scenario_names, client_names, labels, args.plot, title))
    failed = [r for r in results if r["status"] == "failed"]
    if failed:
        print(f"{len(failed)} result(s) FAILED", file=sys.stderr)
        return 1
    return 0


def _finite(value: Any) -> Any:
    """Replace NaN/inf (e.g. percentiles of an empty run) by None so the JSON is standard."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
