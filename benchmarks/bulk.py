"""Bulk transfers: ``python -m benchmarks.bulk [--size-mb 50] [--repeat 3] [--json PATH]``.

One large download (``GET /bulk/…``) and one large upload (``PUT /put/…``) per client over
HTTP/1.1 cleartext, HTTP/1.1 over TLS and HTTP/2 over TLS, against nginx started by the harness
(``benchmarks/servers.py``; its files and upload directory on a tmpfs when there is one, so
neither side waits on a disk). curl is the limit: a C client, in the same run. Each transfer
runs in a process of its own (``benchmarks/bulk_clients.py``, or curl itself), pinned to the
client CPU when the harness pins, and the runner reads that process's rusage from
``os.wait4``:

- **wall s**: from just before the request (connect and TLS handshake included) to the last
  byte, measured by the client process (curl: its ``time_total``); the median over repeats;
- **MB/s**: the size (MB = 10^6 bytes) over that median;
- **CPU s/MB**: the process's user + system time minus that of the same client's 1 KB transfer
  (interpreter start, imports, handshake), per MB: the cost of the bytes;
- **RSS MB**: the process's peak resident set (``ru_maxrss``) after the large transfer, and
  **1 KB RSS** after a 1 KB one: a client that streams keeps the two close;
- **busy**: that CPU (the bytes' share) over the wall time: far below 100 % means the client
  spent the transfer waiting (on flow control, on the server, on a thread);
- **x curl**: MB/s, and CPU per MB, over curl's in the same run and case.

Every download is checked (status 200, exactly the size received, the HTTP version asked for),
and every upload too: nginx stores a ``PUT`` body only once it read all of it, and the runner
checks the stored file's size before deleting it. A client that is not installed, or does not
speak the protocol, is a row saying so; a failed transfer is a row saying why (exit status 1).
``--checkout PATH`` measures the trio_retry of another tree with this harness.
See docs/benchmarks.md, "Bulk transfers".
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.bulk_cases import BY_NAME, CLIENTS, DIRECTIONS, MB, PROTOCOLS, SMALL
from benchmarks.bulk_clients import RESULT_TAG
from benchmarks.bulk_report import render_markdown, render_text, summarise
from benchmarks.checkout import describe_checkout
from benchmarks.child import spawn
from benchmarks.run import choose_cpus, machine_info
from benchmarks.servers import (
    PACKAGE_ROOT,
    RunningServer,
    ServerUnavailable,
    running_server,
)

RUN_TIMEOUT = 180.0  # seconds for one transfer process: a hang, never a slow client


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.bulk",
        description="Large downloads and uploads per client, curl as the limit "
        "(see docs/benchmarks.md, 'Bulk transfers').",
    )
    p.add_argument("--size-mb", type=float, default=50.0, help="transfer size in MB (default 50)")
    p.add_argument("--repeat", type=int, default=None, help="runs per case (default 3; smoke 1)")
    p.add_argument(
        "--smoke", action="store_true", help="1 MB, one run per case: checks the harness works"
    )
    p.add_argument("--json", metavar="PATH", help="write every run and the medians to PATH")
    p.add_argument("--markdown", action="store_true", help="also print the table as Markdown")
    p.add_argument(
        "--checkout",
        metavar="PATH",
        default=str(PACKAGE_ROOT),
        help="import trio_retry from this tree (default: the harness's own)",
    )
    p.add_argument(
        "--clients",
        type=_csv,
        default=[c.name for c in CLIENTS],
        metavar="A,B",
        help=f"subset of: {', '.join(BY_NAME)}",
    )
    p.add_argument(
        "--protocols",
        type=_csv,
        default=list(PROTOCOLS),
        metavar="P,Q",
        help=f"subset of: {', '.join(PROTOCOLS)}",
    )
    p.add_argument(
        "--directions",
        type=_csv,
        default=list(DIRECTIONS),
        metavar="D",
        help="subset of: download, upload",
    )
    p.add_argument(
        "--pin",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="pin nginx to the first CPU and each client to the second (default: 2+ CPUs)",
    )
    args = p.parse_args(argv)
    for value, known, option in (
        (args.clients, BY_NAME, "--clients"),
        (args.protocols, PROTOCOLS, "--protocols"),
        (args.directions, DIRECTIONS, "--directions"),
    ):
        for item in value:
            if item not in known:
                p.error(f"{option}: unknown {item!r}; choose from {', '.join(known)}")
    if not os.path.isfile(os.path.join(args.checkout, "trio_retry", "__init__.py")):
        p.error(f"--checkout: no trio_retry package in {os.path.abspath(args.checkout)}")
    if args.smoke:
        args.size_mb = 1.0
    if args.repeat is None:
        args.repeat = 1 if args.smoke else 3
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    if not args.size_mb > 0:
        p.error("--size-mb must be positive")
    return args


# ---------------------------------------------------------------------------------------------
# One transfer in a process of its own
# ---------------------------------------------------------------------------------------------


@dataclass
class Transfer:
    """What one process measured, with its rusage."""

    ok: bool
    note: str = ""
    wall_s: float = 0.0
    cpu_s: float = 0.0  # the whole process (wait4)
    cpu_transfer_s: float | None = None  # over the transfer only (Python clients)
    rss_mb: float = 0.0
    http_version: str = ""
    unavailable: bool = False
    module: str = ""  # trio_retry rows: the file of the trio_retry that ran

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Case:
    protocol: str
    direction: str
    endpoint: dict[str, Any]
    ca_file: str | None

    @property
    def base_url(self) -> str:
        e = self.endpoint
        return f"{e['scheme']}://{e['host']}:{e['port']}"

    @property
    def http2(self) -> bool:
        return bool(self.endpoint["http2"])


def _argv(
    client: str, case: Case, url: str, source: Path | None, target: Path | None, checkout: str
) -> list[str]:
    if client == "curl":
        argv = ["curl", "-s", "-S", "-o", "/dev/null", "--http2" if case.http2 else "--http1.1"]
        argv += ["-w", "%{http_code} %{http_version} %{size_download} %{time_total}"]
        if case.ca_file is not None:
            argv += ["--cacert", case.ca_file]
        if source is not None:
            argv += ["-T", str(source)]
        return [*argv, url]
    config = {
        "client": client,
        "method": "PUT" if source is not None else "GET",
        "url": url,
        "http2": case.http2,
        "ca_file": case.ca_file,
        "source": str(source) if source is not None else None,
        "target": str(target) if target is not None else None,
        "checkout": checkout,
    }
    return [sys.executable, "-m", "benchmarks.bulk_clients", json.dumps(config)]


def transfer(
    client: str,
    case: Case,
    size: int,
    server: RunningServer,
    workdir: Path,
    cpu: int | None,
    checkout: str,
) -> Transfer:
    """One transfer of ``size`` bytes by ``client``, checked; never raises for its failure."""
    assert server.upload_dir is not None
    name = f"{client}-{case.protocol}-{size}.bin"
    source = target = None
    if case.direction == "upload":
        source = workdir / f"{size}.bin"
        url = f"{case.base_url}/put/{name}"
    else:
        url = f"{case.base_url}/bulk/{size}.bin"
        if client == "trio_retry_file":
            target = workdir / name
    done = spawn(
        _argv(client, case, url, source, target, checkout), cpu, workdir, timeout=RUN_TIMEOUT
    )
    status, out, err, ru = done.status, done.out, done.err, done.rusage
    result = Transfer(ok=False, cpu_s=ru.ru_utime + ru.ru_stime, rss_mb=ru.ru_maxrss / 1024)
    try:
        problem = _check(client, case, size, status, out, err, result, server, name, target)
    finally:
        for leftover in (server.upload_dir / name, target):
            if leftover is not None and leftover.exists():
                leftover.unlink()
    result.ok = problem is None and not result.unavailable
    if problem is not None:
        result.note = problem
    return result


def _check(
    client: str,
    case: Case,
    size: int,
    status: int,
    out: str,
    err: str,
    result: Transfer,
    server: RunningServer,
    name: str,
    target: Path | None,
) -> str | None:
    """Fill ``result`` from the process's output; what went wrong, or None."""
    assert server.upload_dir is not None
    if client == "curl":
        if status != 0:
            return f"curl exited {status}: {err.strip()[-200:]}"
        code, version, received, total = out.split()
        http_status, got, result.wall_s = int(code), int(received), float(total)
        result.http_version = version
    else:
        line = next((x for x in reversed(out.splitlines()) if x.startswith(RESULT_TAG)), None)
        if line is None:
            return f"client exited {status}: " + " | ".join(err.strip().splitlines()[-4:])
        data = json.loads(line[len(RESULT_TAG) :])
        if "unavailable" in data:
            result.unavailable = True
            result.note = data["unavailable"]
            return None
        if "error" in data:
            return str(data["error"])
        http_status, got = data["status"], data["received"]
        result.wall_s, result.cpu_transfer_s = data["wall_s"], data["cpu_s"]
        result.http_version, result.note = data["http_version"], data["note"]
        result.module = data["module"]
    want_version = "2" if case.http2 else "1.1"
    if result.http_version != want_version:
        return f"spoke HTTP/{result.http_version}, not HTTP/{want_version}"
    if case.direction == "download":
        if http_status != 200 or got != size:
            return f"status {http_status}, {got} of {size} bytes"
        if target is not None and target.stat().st_size != size:
            return f"wrote {target.stat().st_size} of {size} bytes to the file"
        return None
    stored = server.upload_dir / name
    if http_status not in (201, 204):
        return f"PUT answered {http_status}"
    if not stored.exists() or stored.stat().st_size != size:
        kept = stored.stat().st_size if stored.exists() else 0
        return f"nginx stored {kept} of {size} bytes"
    return None


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _tmp_parent() -> str | None:
    """A tmpfs for the server's files and the client's sources, when the machine has one."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


def _write_file(path: Path, size: int) -> None:
    block = bytes(range(256)) * 4096  # 1 MiB, not all zeros
    with open(path, "wb") as f:
        left = size
        while left > 0:
            f.write(block[: min(left, len(block))])
            left -= len(block)


def plan(
    args: argparse.Namespace, endpoints: dict[str, dict[str, Any]], ca_file: str | None
) -> tuple[list[Case], dict[tuple[str, str, str], str]]:
    """The cases to run, and the (protocol, direction, client) rows that cannot run, why."""
    skipped: dict[tuple[str, str, str], str] = {}
    cases: list[Case] = []
    for p in args.protocols:
        for d in args.directions:
            if p not in endpoints:
                for c in args.clients:
                    skipped[(p, d, c)] = "no TLS here (trustme not installed)"
                continue
            case = Case(p, d, endpoints[p], ca_file if endpoints[p]["scheme"] == "https" else None)
            cases.append(case)
            for c in args.clients:
                client = BY_NAME[c]
                if c == "curl" and shutil.which("curl") is None:
                    skipped[(p, d, c)] = "not installed (apt-get install curl): no ratios"
                elif case.http2 and not client.h2:
                    skipped[(p, d, c)] = client.no_h2_reason
                elif d == "upload" and client.download_only:
                    skipped[(p, d, c)] = "a download case"
    return cases, skipped


def measure(
    args: argparse.Namespace,
    cases: list[Case],
    skipped: dict[tuple[str, str, str], str],
    server: RunningServer,
    workdir: Path,
    client_cpu: int | None,
) -> list[dict[str, Any]]:
    """Every transfer of every repeat (the large one, then the 1 KB one), with progress.

    A client found not installed is not started again: its other cases go into ``skipped``
    with the same reason, so that every case still has its row."""
    size = int(args.size_mb * MB)
    runs: list[dict[str, Any]] = []
    unavailable: dict[str, str] = {}
    checkout = os.path.abspath(args.checkout)
    for rep in range(args.repeat):
        # Rotate the order each repeat: no client always runs first or last.
        shift = rep % len(args.clients)
        order = args.clients[shift:] + args.clients[:shift]
        for case in cases:
            for c in order:
                key = (case.protocol, case.direction, c)
                if c in unavailable and key not in skipped:
                    skipped[key] = unavailable[c]
                if key in skipped:
                    continue
                for n in (size, SMALL):
                    t = transfer(c, case, n, server, workdir, client_cpu, checkout)
                    where = {"protocol": case.protocol, "direction": case.direction, "client": c}
                    runs.append({**where, "size": n, "repeat": rep, **t.to_json()})
                    if t.unavailable:
                        unavailable[c] = t.note
                        _progress(f"  {c}: {t.note}")
                        break
                    what = f"  {case.direction:8} {case.protocol:6} {c:16} {n:>9} B"
                    if t.ok:
                        figures = f"{t.wall_s:7.3f} s  cpu {t.cpu_s:6.3f} s  rss {t.rss_mb:6.1f} MB"
                        _progress(f"{what}  {figures}")
                    else:
                        _progress(f"{what}  FAILED: {t.note}")
    return runs


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    size = int(args.size_mb * MB)
    started = time.monotonic()
    server_cpu, client_cpu, pin_note = choose_cpus(args.pin)
    checkout = os.path.abspath(args.checkout)
    revision = describe_checkout(checkout)
    mode = "smoke" if args.smoke else "full"
    _progress(f"bulk: {mode}, {size / MB:g} MB, repeat {args.repeat}, {pin_note}")
    _progress(f"trio_retry from {checkout} ({revision})")
    try:
        with running_server("nginx", server_cpu, _tmp_parent()) as (server, ca_file):
            if server.bulk_dir is None:
                raise ServerUnavailable("this server has no /bulk/ location")
            server_info = server.describe()
            # Beside the server's files: on the same tmpfs, deleted with them.
            workdir = Path(tempfile.mkdtemp(prefix="bulk-", dir=server.bulk_dir.parent.parent))
            for n in (size, SMALL):
                _write_file(server.bulk_dir / f"{n}.bin", n)
                _write_file(workdir / f"{n}.bin", n)
            cases, skipped = plan(args, server.endpoints, ca_file)
            runs = measure(args, cases, skipped, server, workdir, client_cpu)
    except ServerUnavailable as exc:
        print(f"bulk benchmark needs nginx: {exc}", file=sys.stderr)
        return 2
    rows = summarise(runs, size, skipped)
    print(
        f"\nbulk transfers ({mode}; medians of {args.repeat} run(s); nginx "
        f"{server_info['version']}; {pin_note}); trio_retry {revision}"
    )
    print(render_text(rows, size))
    print(
        "\nwall s: request to last byte (median); x curl: MB/s over curl's (higher is better); "
        "CPU s/MB: process CPU minus its 1 KB run's, per MB;\nCPU x curl: over curl's "
        "(lower is better); busy: that CPU over the wall time (well below 100%: the client "
        "waited);\nRSS: peak resident set of the process; 1 KB RSS: the same after a 1 KB "
        "transfer."
    )
    if args.markdown:
        print()
        print(render_markdown(rows, size))
    print(f"total time {time.monotonic() - started:.1f}s")
    if args.json:
        document = {
            "mode": mode,
            "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "size_bytes": size,
            "repeat": args.repeat,
            "checkout": checkout,
            "revision": revision,
            "pinning": pin_note,
            "machine": machine_info(),
            "server": server_info,
            "rows": rows,
            "runs": runs,
        }
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(document, indent=2))
        print(f"JSON written to {path}")
    return 1 if any(r["status"] == "failed" for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
