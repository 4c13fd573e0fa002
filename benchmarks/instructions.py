"""Instructions per request under valgrind: ``python -m benchmarks.instructions``.

CPU time on a shared machine moves by 10-15 % between runs minutes apart, more than most single
changes to the hot path are worth. The number of machine instructions a request executes does
not: valgrind's callgrind counts them exactly (its "Collected" total), the same on a quiet or a
busy machine. This tool counts them for each selected client against the harness's server
(nginx when installed):

- the server runs in this process's care, natively; only the client runs under valgrind
  (``--trace-children=no``), about 50 times slower than natively;
- each client runs twice, ``--base`` requests and ``--base + --n`` requests (after the same
  warm-up); the difference of the two totals divided by ``--n`` is the cost of a request, with
  start-up, imports and the connection set-up cancelled out.

What it does not see: time in the kernel (system calls are counted as the instructions that
make them), cache misses and branch mispredictions (instructions are not cycles), and waits.
Under valgrind the client is so slow that every response is there when it reads, so the
blocking-wait path (see ``benchmarks.profile``'s "blocking I/O waits") is not exercised. Read
it beside ``benchmarks.profile``, not instead of it.

``--h3`` counts HTTP/3 instead (QUIC on loopback, against caddy: ``benchmarks/caddy.py``); the
client row checks that its requests went over HTTP/3 from the first to the last.

Needs valgrind (``apt-get install valgrind``). Example (the figures of docs/benchmarks.md)::

    python -m benchmarks.instructions --clients trio_retry_no_fast,h11_trio --n 1000
    python -m benchmarks.instructions --tls --conc 32 --clients trio_retry,trio_raw --n 1000
    python -m benchmarks.instructions --h3 --conc 32 --clients trio_retry --n 1000
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__" and not __package__:
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    sys.path.insert(0, os.path.dirname(_here))

import argparse
import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.adapter import H3, Adapter, Endpoint
from benchmarks.clients import ADAPTERS
from benchmarks.runtime import get_runtime
from benchmarks.scenarios.throughput import SMALL_BODY, SMALL_PATH
from benchmarks.servers import running_server

__all__ = ["collected", "main", "per_request"]

WARMUP = 100
_COLLECTED = re.compile(r"Collected\s*:\s*([\d,]+)")


def collected(valgrind_output: str) -> int:
    """The instruction total of callgrind's summary ("Collected : N"); ``ValueError`` if the
    output has none (valgrind failed, or the client did)."""
    match = _COLLECTED.search(valgrind_output)
    if match is None:
        raise ValueError("no 'Collected' line in valgrind's output")
    return int(match.group(1).replace(",", ""))


def per_request(small: int, large: int, n: int) -> float:
    """Instructions per request from the totals of two runs ``n`` requests apart."""
    if n < 1:
        raise ValueError("n must be at least 1")
    return (large - small) / n


def drive(name: str, endpoint: Endpoint, requests: int, conc: int) -> None:
    """Run ``WARMUP`` then ``requests`` GETs of /small with client ``name`` (the child)."""
    cls = ADAPTERS[name]
    os.environ.update(cls.env)
    cls.check_available()
    adapter: Adapter = cls(endpoint, conc)
    expected = len(SMALL_BODY)
    done = 0

    async def main() -> None:
        async with adapter.lifespan():
            for count in (WARMUP, requests):
                left = count

                async def worker() -> None:
                    nonlocal left, done
                    while left > 0:
                        left -= 1
                        status, received = await adapter.get(SMALL_PATH)
                        if status != 200 or received != expected:
                            raise RuntimeError(f"unexpected response: {status}, {received}")
                        done += 1

                await runtime.run_parallel(worker, min(conc, max(count, 1)))

    runtime = get_runtime(cls.runtime)
    runtime.run(main, hard_limit=3600)
    print(f"{name}: {done} requests ({WARMUP} warm-up), each a 200 with the expected body")


def _count(name: str, endpoint: Endpoint, requests: int, conc: int) -> int:
    cmd = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        "--trace-children=no",
        sys.executable,
        "-m",
        "benchmarks.instructions",
        "--drive",
        name,
        "--requests",
        str(requests),
        "--conc",
        str(conc),
        "--endpoint",
        json.dumps(endpoint.to_json()),
    ]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=root, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"{name}: the client under valgrind failed:\n{proc.stderr[-2000:]}")
    return collected(proc.stderr)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.instructions",
        description="Instructions per request of each client, counted by valgrind's callgrind "
        "(see docs/benchmarks.md).",
    )
    p.add_argument("--clients", default="trio_retry,trio_retry_no_fast,h11_trio")
    p.add_argument("--n", type=int, default=1000, help="requests between the two runs (1000)")
    p.add_argument("--base", type=int, default=200, help="requests of the smaller run (200)")
    p.add_argument("--conc", type=int, default=1, help="concurrent tasks (1)")
    p.add_argument("--tls", action="store_true", help="HTTP/1.1 over TLS")
    p.add_argument("--h2", action="store_true", help="HTTP/2 over TLS")
    p.add_argument("--h3", action="store_true", help="HTTP/3 over QUIC (caddy)")
    p.add_argument("--server", choices=["auto", "nginx", "fallback"], default="auto")
    p.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    # The child's options (one client, one run, under valgrind).
    p.add_argument("--drive", metavar="CLIENT", help=argparse.SUPPRESS)
    p.add_argument("--requests", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--endpoint", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.n < 1 or args.base < 0 or args.conc < 1:
        p.error("--n and --conc must be at least 1, --base at least 0")
    names = [c.strip() for c in args.clients.split(",") if c.strip()]
    unknown = [c for c in names if c not in ADAPTERS]
    if unknown:
        p.error(f"unknown client(s): {', '.join(unknown)}; known: {', '.join(sorted(ADAPTERS))}")
    if args.h3:
        if args.h2 or args.tls:
            p.error("--h3 is a protocol of its own: not with --h2 or --tls")
        no_h3 = [c for c in names if H3 not in ADAPTERS[c].protocols]
        if no_h3:
            p.error(f"--h3: client(s) without HTTP/3: {', '.join(no_h3)}")
    args.names = names
    return args


@contextmanager
def _endpoint(key: str, server_kind: str) -> Iterator[Endpoint]:
    """The endpoint ``key`` of a server started for the run (stopped after it): the harness's
    (nginx or the fallback) for HTTP/1.1 and HTTP/2, caddy for HTTP/3."""
    if key != "h3":
        with running_server(server_kind, None) as (server, ca_file):
            if key not in server.endpoints:
                raise SystemExit(f"endpoint {key} unavailable (TLS needs trustme)")
            d = server.endpoints[key]
            yield Endpoint.from_json({**d, "ca_file": ca_file if d["scheme"] == "https" else None})
        return
    from benchmarks.caddy import CaddyUnavailable, start_caddy
    from benchmarks.processes import HOST
    from benchmarks.servers import make_tls_files

    with tempfile.TemporaryDirectory(prefix="trio-retry-bench-h3-") as tmp:
        tls = make_tls_files(Path(tmp))
        if tls is None:
            raise SystemExit("endpoint h3 unavailable (TLS needs trustme)")
        try:
            caddy = start_caddy(Path(tmp), tls.cert_chain, tls.key)
        except CaddyUnavailable as exc:
            raise SystemExit(f"endpoint h3 unavailable: {exc}") from None
        try:
            yield Endpoint("https", HOST, caddy.port, http2=True, ca_file=tls.ca, http3=True)
        finally:
            caddy.stop()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.drive:
        drive(args.drive, Endpoint.from_json(json.loads(args.endpoint)), args.requests, args.conc)
        return 0
    if shutil.which("valgrind") is None:
        raise SystemExit(
            "benchmarks.instructions needs valgrind (Debian/Ubuntu: apt-get install valgrind)"
        )
    key = "h3" if args.h3 else "h2_tls" if args.h2 else ("h1_tls" if args.tls else "h1")
    results: dict[str, Any] = {}
    with _endpoint(key, args.server) as endpoint:
        print(
            f"GET {SMALL_PATH} over {endpoint.base_url}{' (HTTP/3)' if endpoint.http3 else ''}, "
            f"{args.conc} task(s); {args.base} and "
            f"{args.base + args.n} requests per client under callgrind"
        )
        for name in args.names:
            small = _count(name, endpoint, args.base, args.conc)
            large = _count(name, endpoint, args.base + args.n, args.conc)
            results[name] = per_request(small, large, args.n)
            print(f"  {name:28} {results[name]:>12,.0f} instructions per request", flush=True)
    for floor in (n for n in ("h11_trio", "h2_trio", "trio_raw") if n in results):
        for name, value in results.items():
            print(f"  {name:28} {value / results[floor]:>12.3f}x {floor}")
    if args.json:
        figures = {"n": args.n, "base": args.base, "conc": args.conc, "endpoint": key}
        with open(args.json, "w") as f:
            json.dump({**figures, "instructions_per_request": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
