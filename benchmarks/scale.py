"""Scale: ``python -m benchmarks.scale [--cases 100,1000,10000,20000@50] [--json P] [--chart P]``.

Thousands of calls at once, over HTTP/1.1 (nginx, cleartext), HTTP/2 (nginx over TLS, allowing
1,000 concurrent streams per connection) and HTTP/3 (caddy), by trio_retry and its peers
(aiohttp, httpx, niquests) in the same run. Each case ``N`` is ``N`` calls of ``GET /small``
started at once by a client whose pool allows ``N`` connections; ``N@C`` allows ``C`` (20,000
calls through 50 connections: the pool's queue at scale). Each (protocol, case, client) runs in
a process of its own (``benchmarks/scale_worker.py``), which times at least ``--min-calls``
(10,000) calls per case, in bursts of the case's size each by a fresh client (so that every
size pays its share of the garbage collector's full passes: the worker's docstring says why),
around the calls only, and reports:

- **CPU µs/call**: the process's CPU time (``time.process_time``) over the calls: the figure to
  compare on a shared machine, unlike wall time; **of it sys**: in the kernel; **of it gc**: in
  the cyclic garbage collector;
- **x ref**: that over the same client's at the reference case (``--reference``, 1,000) in the
  same run and protocol: flat (1.0x) is linear, issue #41's target is at most 1.3x at 10,000;
- **wall s**: one burst's duration; **peak RSS MB**: the process's (interpreter and harness
  included, the same for every client);
- **KiB/conn**: the resident set with a first (untimed) burst's connections idle in the pool,
  less that just before it, over the sockets gained (shown where at least 100 were).

A case's timed bursts stop after ``--give-up`` seconds (60; at least one is made), a process
is stopped after three times that, and a client whose bursts would take longer at the next case,
or need more memory than ``--max-memory-mb``, is not run at it: its row says so; a client that
cannot take part (not installed, no such protocol) is a row saying why.
``--checkout PATH`` measures the trio_retry of another tree with this harness (before and
after a change); ``--against PATH`` adds a tree measured in the same run, and ``--rounds R``
measures every case R times, interleaved across the trees, and reports the medians
(``benchmarks/scale_rounds.py``: the machine is shared and one run moves by ten per cent).

``--soak``: instead, each ``--soak-clients`` client makes a steady ``--soak-rate`` calls per
second for ``--soak-seconds`` over ``--soak-protocol``; the runner samples the process's RSS
and descriptors every second from ``/proc``: flat after the warm-up is the target.

See docs/benchmarks.md, "Scale".
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.checkout import describe_checkout
from benchmarks.child import spawn
from benchmarks.memory import drift, fd_count, rss_mb
from benchmarks.run import choose_cpus, machine_info
from benchmarks.scale_report import chart, render_text, summarise
from benchmarks.scale_rounds import render_rounds, run_rounds
from benchmarks.scale_worker import RESULT_TAG, TIME_WAIT_PAUSE
from benchmarks.servers import (
    HOST,
    PACKAGE_ROOT,
    NginxLimits,
    ServerUnavailable,
    make_tls_files,
    running_server,
)

PROTOCOLS = ("h1", "h2", "h3")
CLIENTS = ("trio_retry", "aiohttp", "httpx_trio", "niquests")
DEFAULT_CASES = "100,1000,10000,20000@50"
SMOKE_CASES = "10,20@2"
#: Calls timed per case at least, in bursts of its size (``--min-calls``).
MIN_CALLS = 10_000
#: nginx's concurrent streams per HTTP/2 connection (issue #41's setting).
H2_STREAMS = 1000


@dataclass(frozen=True, order=True)
class Case:
    """``calls`` started at once through a pool of ``connections``."""

    calls: int
    connections: int

    @property
    def name(self) -> str:
        if self.connections == self.calls:
            return f"{self.calls}"
        return f"{self.calls}@{self.connections}"


def parse_cases(text: str) -> list[Case]:
    cases = []
    for item in text.split(","):
        calls, _, connections = item.strip().partition("@")
        try:
            case = Case(int(calls), int(connections or calls))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"a case is N or N@C (calls, connections), got {item!r}"
            ) from None
        if case.calls < 1 or case.connections < 1:
            raise argparse.ArgumentTypeError(f"calls and connections must be >= 1: {item!r}")
        cases.append(case)
    return cases


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _thresholds(value: str) -> tuple[int, int, int]:
    parts = _csv(value)
    if len(parts) != 3 or not all(part.isdigit() for part in parts):
        raise argparse.ArgumentTypeError(f"three whole numbers N0,N1,N2 expected, not {value!r}")
    first, second, third = (int(part) for part in parts)
    return first, second, third


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from benchmarks.clients import ADAPTERS

    p = argparse.ArgumentParser(
        prog="python -m benchmarks.scale",
        description="Thousands of concurrent calls per client and protocol, CPU per call "
        "(see docs/benchmarks.md, 'Scale').",
    )
    p.add_argument("--cases", type=parse_cases, default=None, help=f"default {DEFAULT_CASES}")
    p.add_argument("--protocols", type=_csv, default=list(PROTOCOLS), metavar="h1,h2,h3")
    p.add_argument("--clients", type=_csv, default=list(CLIENTS), metavar="A,B")
    p.add_argument("--reference", type=int, default=1000, help="calls of the x ref column")
    p.add_argument(
        "--min-calls",
        type=int,
        default=None,
        help=f"time at least this many calls per case, in bursts of its size (default "
        f"{MIN_CALLS:,}; smoke: one burst); see benchmarks/scale_worker.py for why",
    )
    p.add_argument(
        "--give-up",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="a case's timed bursts stop after this long, and a client whose bursts would "
        "take longer at the next case is not run at it (default 60)",
    )
    p.add_argument(
        "--max-memory-mb",
        type=float,
        default=4000.0,
        help="a client whose peak RSS, scaled to the next case, would pass this is not run at "
        "it (default 4000: the machine is shared)",
    )
    p.add_argument(
        "--pause",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"between one client's close and the next burst, untimed (default "
        f"{TIME_WAIT_PAUSE:g}; smoke: 0): the closed connections' ports become reusable; see "
        "benchmarks/scale_worker.py for why",
    )
    p.add_argument(
        "--gc-threshold",
        type=_thresholds,
        default=None,
        metavar="N0,N1,N2",
        help="gc.set_threshold(N0, N1, N2) in each client's process before it starts: an "
        "application's own setting, measured (default: the interpreter's, 700,10,10)",
    )
    p.add_argument("--smoke", action="store_true", help=f"cases {SMOKE_CASES}, a 3 s soak")
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--chart", metavar="PATH.svg", help="draw the figures (needs matplotlib)")
    p.add_argument("--checkout", metavar="PATH", default=str(PACKAGE_ROOT))
    p.add_argument(
        "--against",
        metavar="PATH",
        action="append",
        default=[],
        help="another tree's trio_retry, measured in the same run, interleaved round by round "
        "with --checkout's (repeatable); see benchmarks/scale_rounds.py",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="measure every case this many times, interleaved across the trees; the rows are "
        "the medians (default 1)",
    )
    p.add_argument("--pin", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--soak", action="store_true", help="the soak instead of the bursts")
    p.add_argument("--soak-seconds", type=float, default=180.0)
    p.add_argument("--soak-rate", type=float, default=500.0, help="calls per second")
    p.add_argument("--soak-lanes", type=int, default=100, help="calls in flight at most")
    p.add_argument("--soak-protocol", choices=PROTOCOLS, default="h2")
    p.add_argument("--soak-clients", type=_csv, default=["trio_retry"], metavar="A,B")
    args = p.parse_args(argv)
    for value, known, option in (
        (args.clients, ADAPTERS, "--clients"),
        (args.soak_clients, ADAPTERS, "--soak-clients"),
        (args.protocols, PROTOCOLS, "--protocols"),
    ):
        for item in value:
            if item not in known:
                p.error(f"{option}: unknown {item!r}; choose from {', '.join(known)}")
    for option, tree in (("--checkout", args.checkout), *(("--against", t) for t in args.against)):
        if not os.path.isfile(os.path.join(tree, "trio_retry", "__init__.py")):
            p.error(f"{option}: no trio_retry package in {os.path.abspath(tree)}")
    if args.rounds < 1:
        p.error(f"--rounds: at least 1, got {args.rounds}")
    if args.cases is None:
        args.cases = parse_cases(SMOKE_CASES if args.smoke else DEFAULT_CASES)
    if args.min_calls is None:
        args.min_calls = 1 if args.smoke else MIN_CALLS
    if args.pause is None:
        args.pause = 0.0 if args.smoke else TIME_WAIT_PAUSE
    if args.pause < 0:
        p.error(f"--pause: at least 0, got {args.pause:g}")
    if args.smoke:
        args.soak_seconds, args.soak_rate, args.soak_lanes = 3.0, 50.0, 5
    if not (args.soak_seconds > 0 and args.soak_rate > 0 and args.soak_lanes > 0):
        p.error("--soak-seconds, --soak-rate and --soak-lanes must be positive")
    return args


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# The servers and their endpoints
# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def servers(
    args: argparse.Namespace, server_cpu: int | None
) -> Iterator[tuple[dict[str, dict[str, Any]], dict[str, str], dict[str, str]]]:
    """nginx (HTTP/1.1, HTTP/2) and, for HTTP/3, caddy: yield (endpoints by protocol, why a
    protocol has none, the servers' versions)."""
    most = max(case.connections for case in args.cases)
    limits = NginxLimits(
        http2_max_concurrent_streams=H2_STREAMS,
        worker_connections=max(4096, 2 * most + 1024),
        backlog=4096,
    )
    missing: dict[str, str] = {}
    versions: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        server, ca = stack.enter_context(running_server("nginx", server_cpu, limits=limits))
        versions["nginx"] = server.version
        endpoints: dict[str, dict[str, Any]] = {}
        h1 = server.endpoints["h1"]
        endpoints["h1"] = {**h1, "ca_file": None, "http3": False}
        if "h2_tls" in server.endpoints and ca is not None:
            endpoints["h2"] = {**server.endpoints["h2_tls"], "ca_file": ca, "http3": False}
        else:
            missing["h2"] = "no TLS here (trustme not installed)"
        wanted = "h3" in args.protocols or (args.soak and args.soak_protocol == "h3")
        if wanted:
            reason = _start_caddy(stack, endpoints, versions)
            if reason:
                missing["h3"] = reason
        yield endpoints, missing, versions


def _start_caddy(
    stack: contextlib.ExitStack, endpoints: dict[str, dict[str, Any]], versions: dict[str, str]
) -> str | None:
    try:
        import aioquic  # noqa: F401
    except ImportError:
        return "trio_retry's http3 extra (aioquic) is not installed"
    from benchmarks.caddy import CaddyUnavailable, start_caddy

    workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="scale-h3-")))
    tls = make_tls_files(workdir)
    if tls is None:
        return "no TLS here (trustme not installed)"
    try:
        caddy = start_caddy(workdir, tls.cert_chain, tls.key)
    except CaddyUnavailable as exc:
        return str(exc)
    stack.callback(caddy.stop)
    versions["caddy"] = caddy.version.split()[0] if caddy.version else "?"
    endpoints["h3"] = {
        "scheme": "https",
        "host": HOST,
        "port": caddy.port,
        "http2": True,
        "ca_file": tls.ca,
        "http3": True,
    }
    return None


# ---------------------------------------------------------------------------------------------
# One process, one run
# ---------------------------------------------------------------------------------------------


def measure(
    config: dict[str, Any], cpu: int | None, timeout: float, samples: list[Any] | None = None
) -> dict[str, Any]:
    """Run the worker with ``config``; its result (or ``error``). With ``samples``, the
    process's (seconds, RSS MB, descriptors) go there every second."""
    started = time.monotonic()

    def watch(pid: int) -> None:
        assert samples is not None
        samples.append((time.monotonic() - started, rss_mb(pid), fd_count(pid)))

    argv = [sys.executable, "-m", "benchmarks.scale_worker", json.dumps(config)]
    with tempfile.TemporaryDirectory(prefix="scale-run-") as tmp:
        done = spawn(
            argv, cpu, Path(tmp), timeout=timeout, watch=watch if samples is not None else None
        )
    line = next((x for x in reversed(done.out.splitlines()) if x.startswith(RESULT_TAG)), None)
    if line is None:
        tail = " | ".join(done.err.strip().splitlines()[-4:])
        return {"error": f"the process exited {done.status} without a result: {tail}"}
    result: dict[str, Any] = json.loads(line[len(RESULT_TAG) :])
    result["process_cpu_s"] = done.rusage.ru_utime + done.rusage.ru_stime
    return result


_TITLES = {"http/1.1": "HTTP/1.1", "h2": "HTTP/2", "h3": "HTTP/3"}


def skip_reason(
    client: str, protocol: str, endpoints: dict[str, Any], missing: dict[str, str]
) -> str | None:
    """Why ``client`` is not measured over ``protocol`` at all, or None."""
    from benchmarks.clients import ADAPTERS, H1, H2, H3

    if protocol in missing:
        return missing[protocol]
    cls = ADAPTERS[client]
    if (reason := cls.unavailable_reason()) is not None:
        return reason
    want = {"h1": H1, "h2": H2, "h3": H3}[protocol]
    if want not in cls.protocols:
        return cls.no_h2_reason if want == H2 else f"no {_TITLES[want]} support"
    return None


def run_bursts(
    args: argparse.Namespace,
    endpoints: dict[str, Any],
    missing: dict[str, str],
    client_cpu: int | None,
) -> list[dict[str, Any]]:
    """Every (protocol, case, client) of the run, in that order: one row each."""
    runs: list[dict[str, Any]] = []
    for protocol in args.protocols:
        # Per client: its last measured case, wall time and peak RSS (for --give-up and
        # --max-memory-mb), or why it stopped.
        last: dict[str, tuple[Case, float, float] | str] = {}
        for case in args.cases:
            for client in args.clients:
                row: dict[str, Any] = {
                    "protocol": protocol,
                    "client": client,
                    "case": case.name,
                    "calls": case.calls,
                    "connections": case.connections,
                }
                runs.append(row)
                reason = skip_reason(client, protocol, endpoints, missing)
                before = last.get(client)
                if reason is None and isinstance(before, str):
                    reason = before
                elif reason is None and isinstance(before, tuple):
                    reason = _too_much(args, case, *before)
                if reason is not None:
                    row.update(status="skipped", note=reason)
                    continue
                config = {
                    "mode": "burst",
                    "client": client,
                    "endpoint": endpoints[protocol],
                    "calls": case.calls,
                    "rounds": -(-args.min_calls // case.calls),
                    "budget": args.give_up,
                    "connections": case.connections,
                    "hard_limit": 3 * args.give_up,
                    "checkout": os.path.abspath(args.checkout),
                    "gc_threshold": args.gc_threshold,
                    "pause": args.pause,
                }
                result = measure(config, client_cpu, 3 * args.give_up + 30)
                _record(row, result)
                where = f"  {protocol} {case.name:>11} {client:14}"
                if row["status"] == "ok":
                    last[client] = (case, row["wall_s"], row["peak_rss_mb"])
                    _progress(
                        f"{where} {row['cpu_us_per_call']:8.1f} us/call  {row['wall_s']:7.2f} s"
                        f"  peak {row['peak_rss_mb']:7.1f} MB"
                    )
                else:
                    if row["status"] == "unavailable":
                        last[client] = row["note"]
                    else:
                        last[client] = f"not run: failed at {case.name} calls"
                    _progress(f"{where} {row['status']}: {row['note']}")
    return runs


def _too_much(
    args: argparse.Namespace, case: Case, seen: Case, wall: float, peak_mb: float
) -> str | None:
    """Why a client that took ``wall`` seconds a burst and ``peak_mb`` at case ``seen`` is
    not run at ``case`` (one burst of it, scaled by the calls, would take longer than
    ``--give-up`` or more memory than ``--max-memory-mb``), or None."""
    # One burst (the timed bursts of a case stop after --give-up seconds anyway).
    scale = case.calls / seen.calls
    guess = wall * scale
    if guess > args.give_up:
        return (
            f"not run: {wall:.1f} s at {seen.name} calls scales to {guess:.0f} s here "
            f"(--give-up {args.give_up:g})"
        )
    if peak_mb * scale > args.max_memory_mb:
        return (
            f"not run: {peak_mb:.0f} MB at {seen.name} calls scales to {peak_mb * scale:.0f} "
            f"MB here (--max-memory-mb {args.max_memory_mb:g})"
        )
    return None


def _record(row: dict[str, Any], result: dict[str, Any]) -> None:
    if "unavailable" in result:
        row.update(status="unavailable", note=result["unavailable"])
        return
    if "error" in result:
        row.update(status="failed", note=result["error"])
        return
    calls = result["calls"]
    gained = result["sockets_after"] - result["sockets_before"]
    per_conn = None
    if gained >= 100:
        per_conn = (result["rss_after_mb"] - result["rss_before_mb"]) * 1024 / gained
    row.update(
        status="ok" if result["errors"] == 0 else "failed",
        note=_failures(result),
        timed_calls=calls,
        cpu_us_per_call=result["cpu_s"] / calls * 1e6,
        system_us_per_call=result["system_s"] / calls * 1e6,
        gc_us_per_call=sum(result["gc_s"]) / calls * 1e6,
        gc_full_passes=result["gc_runs"][2],
        wall_s=result["wall_s"],
        peak_rss_mb=result["peak_rss_mb"],
        held_connections=result["sockets_after"],
        kib_per_connection=per_conn,
        errors=result["errors"],
        module=result["module"],
        gc_threshold=result["gc_threshold"],
    )


def _failures(result: dict[str, Any]) -> str:
    errors = result["errors"]
    return f"{errors} calls failed: {result['first_error']}" if errors else ""


def run_soaks(
    args: argparse.Namespace,
    endpoints: dict[str, Any],
    missing: dict[str, str],
    client_cpu: int | None,
) -> list[dict[str, Any]]:
    soaks = []
    protocol = args.soak_protocol
    for client in args.soak_clients:
        row: dict[str, Any] = {
            "protocol": protocol,
            "client": client,
            "rate": args.soak_rate,
            "seconds": args.soak_seconds,
            "lanes": args.soak_lanes,
        }
        soaks.append(row)
        reason = skip_reason(client, protocol, endpoints, missing)
        if reason is not None:
            row.update(status="skipped", note=reason)
            continue
        config = {
            "mode": "soak",
            "client": client,
            "endpoint": endpoints[protocol],
            "connections": args.soak_lanes,
            "rate": args.soak_rate,
            "seconds": args.soak_seconds,
            "lanes": args.soak_lanes,
            "hard_limit": args.soak_seconds + 120,
            "checkout": os.path.abspath(args.checkout),
        }
        samples: list[tuple[float, float, int]] = []
        _progress(f"  soak {protocol} {client}: {args.soak_rate:g}/s for {args.soak_seconds:g} s")
        result = measure(config, client_cpu, args.soak_seconds + 180, samples)
        # The first quarter is the warm-up (the pool fills, the heap finds its size).
        warmup = samples[0][0] + args.soak_seconds / 4 if samples else 0.0
        row["samples"] = [[round(t, 2), round(mb, 2), fds] for t, mb, fds in samples]
        row["rss_mb"] = drift([(t, mb) for t, mb, _ in samples], warmup)
        row["fds"] = drift([(t, float(fds)) for t, _, fds in samples], warmup)
        if "unavailable" in result or "error" in result:
            row.update(status="failed", note=result.get("unavailable") or result["error"])
            continue
        row.update(
            status="ok" if result["errors"] == 0 else "failed",
            note=_failures(result),
            calls=result["calls"],
            achieved_rate=result["rate"],
            cpu_us_per_call=result["cpu_s"] / max(1, result["calls"]) * 1e6,
            late_calls=result["late_calls"],
            late_max_s=result["late_max_s"],
        )
    return soaks


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    started_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    server_cpu, client_cpu, pin_note = choose_cpus(args.pin)
    checkout = os.path.abspath(args.checkout)
    revision = describe_checkout(checkout)
    mode = "smoke" if args.smoke else "full"
    what = "soak" if args.soak else ", ".join(case.name for case in args.cases)
    _progress(f"scale: {mode}, {what}; {pin_note}; trio_retry from {checkout} ({revision})")
    runs: list[dict[str, Any]] = []
    soaks: list[dict[str, Any]] = []
    interleaved: dict[str, Any] | None = None  # --rounds, --against (scale_rounds.py)
    try:
        with servers(args, server_cpu) as (endpoints, missing, versions):
            if args.soak or args.smoke:
                soaks = run_soaks(args, endpoints, missing, client_cpu)
            if not args.soak and (args.rounds > 1 or args.against):
                interleaved = run_rounds(
                    args, lambda one: run_bursts(one, endpoints, missing, client_cpu)
                )
            elif not args.soak:
                runs = run_bursts(args, endpoints, missing, client_cpu)
    except ServerUnavailable as exc:
        print(f"benchmarks.scale needs nginx: {exc}", file=sys.stderr)
        return 2
    rows = (
        summarise(runs, args.reference) if interleaved is None else interleaved["trees"][0]["rows"]
    )
    header = (
        f"scale ({mode}; nginx {versions.get('nginx', '-')} with {H2_STREAMS} streams per "
        f"HTTP/2 connection; caddy {versions.get('caddy', '-')}; {pin_note}); "
        f"trio_retry {revision}"
    )
    print(header)
    print(render_text(rows, soaks, args.reference))
    if interleaved is not None:
        print(render_rounds(interleaved, args.rounds))
    if args.chart:
        print(chart(rows, soaks, args.chart, header))
    print(f"total time {time.monotonic() - started:.1f}s")
    if args.json:
        document = {
            "mode": mode,
            "started_at": started_at,
            "finished_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(["python -m benchmarks.scale", *(argv or sys.argv[1:])]),
            "checkout": checkout,
            "revision": revision,
            "pinning": pin_note,
            "machine": machine_info(),
            "servers": versions,
            "h2_max_concurrent_streams": H2_STREAMS,
            "reference_calls": args.reference,
            "rows": rows,
            "soaks": soaks,
        }
        if interleaved is not None:
            document.update(rounds=args.rounds, trees=interleaved["trees"])
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(document, indent=1))
        print(f"JSON written to {path}")
    if interleaved is not None:
        rows = [row for tree in interleaved["trees"] for row in tree["rows"]]
    failed = [r for r in [*rows, *soaks] if r["status"] == "failed"]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
