"""Start-up time: ``python -m benchmarks.startup``.

Wall-clock time of whole processes, each started afresh (``subprocess.run``), the commands taking
turns so that a drift of the (shared) machine hits them all alike:

- ``python -c pass``: the interpreter alone;
- ``import trio``: the floor an import of trio_retry is measured against;
- ``import trio; import trio_retry``, so that the difference to the line above is what
  trio_retry adds (printed last);
- ``import trio; from trio_retry import Client``: the same, as a program that makes requests
  writes it (no different unless the package's ``__init__`` defers the name);
- ``python -m trio_retry --help`` and the ``trio-retry --help`` console script (when installed
  next to this interpreter);
- ``curl --help``, a native HTTP client's start-up, for scale (when curl is on PATH);
- with ``--first-response``: process start to first response, a GET of ``/small`` from a
  loopback nginx started for the run (:mod:`benchmarks.servers`), each process importing its
  client, sending the one request over HTTP/1.1 and reading the body: trio_retry (``Client``
  under ``trio.run``), httpx (``httpx.get``, its shortest path) and aiohttp (a
  ``ClientSession`` under ``asyncio.run``), those installed, in the same rounds. The row
  "first response: trio_retry / httpx" is the ratio of the medians (wall, then CPU).

Every command runs from a scratch directory, with this checkout first on ``PYTHONPATH`` (the
``trio_retry`` measured is this one, whatever is installed). ``--against CHECKOUT`` also runs
the trio_retry commands with another checkout first instead (e.g. a ``git worktree`` of
``main`` before a change), labelled ``[against]``, in the same rounds, so that before and
after see the same machine.

Prints, for each command, the median of ``--runs`` runs in milliseconds, the fastest run, the
median CPU time (user + system, of the child alone: less moved by other work on a shared
machine than wall time), and the median's ratio to ``import trio`` and to ``curl --help``;
``--json`` prints the same as JSON. Bytecode caches are written and used, as for an installed
wheel (pip compiles it): ``PYTHONDONTWRITEBYTECODE`` is removed from the children's
environment, since with it set (as in some shells and containers) an editable checkout would
compile every module of trio_retry from source at every start, which measures the compiler.
The ``--warmup`` rounds write the caches.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["commands", "main", "measure"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: argv, and the variables added to the environment.
Command = tuple[list[str], dict[str, str]]

_AGAINST = " [against]"
_IMPORT = "import trio; import trio_retry"
_CLIENT = "import trio; from trio_retry import Client"
_FIRST = "first response: "

#: One GET of ``sys.argv[1]``, body read, per client; each fails loudly on anything but 200.
_FIRST_RESPONSE = {
    "trio_retry": (
        "import sys, trio\n"
        "from trio_retry import Client\n"
        "async def main(url):\n"
        "    async with Client() as client:\n"
        "        response = await client.get(url)\n"
        "    assert response.status_code == 200 and response.content, response\n"
        "trio.run(main, sys.argv[1])\n"
    ),
    "httpx": (
        "import sys, httpx\n"
        "response = httpx.get(sys.argv[1])\n"
        "assert response.status_code == 200 and response.content, response\n"
    ),
    "aiohttp": (
        "import asyncio, sys, aiohttp\n"
        "async def main(url):\n"
        "    async with aiohttp.ClientSession() as session, session.get(url) as response:\n"
        "        assert response.status == 200 and await response.read(), response\n"
        "asyncio.run(main(sys.argv[1]))\n"
    ),
}


def commands(against: str | None = None, url: str | None = None) -> dict[str, Command]:
    """The commands measured, by label; those whose program is missing are left out. With
    ``url``, also each installed client's process start to first response from it."""
    python = sys.executable
    argvs: dict[str, list[str]] = {
        "python -c pass": [python, "-c", "pass"],
        "import trio": [python, "-c", "import trio"],
        _IMPORT: [python, "-c", "import trio; import trio_retry"],
        _CLIENT: [python, "-c", _CLIENT],
        "python -m trio_retry --help": [python, "-m", "trio_retry", "--help"],
    }
    if url is not None:
        for name, code in _FIRST_RESPONSE.items():
            if name == "trio_retry" or importlib.util.find_spec(name) is not None:
                argvs[_FIRST + name] = [python, "-c", code, url]
    script = os.path.join(os.path.dirname(python), "trio-retry")
    if os.path.exists(script):
        argvs["trio-retry --help"] = [script, "--help"]
    curl = shutil.which("curl")
    if curl is not None:
        argvs["curl --help"] = [curl, "--help"]
    found: dict[str, Command] = {
        label: (argv, {"PYTHONPATH": ROOT}) for label, argv in argvs.items()
    }
    if against is not None:
        path = os.path.abspath(against)
        if not os.path.isfile(os.path.join(path, "trio_retry", "__init__.py")):
            raise SystemExit(f"--against: {path} has no trio_retry package")
        for label, argv in argvs.items():
            if "trio_retry" in label or "trio-retry" in label:
                found[label + _AGAINST] = (argv, {"PYTHONPATH": path})
    return found


def _environment(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # see the module's docstring
    env.update(extra)
    return env


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _once(command: Command, cwd: str) -> tuple[float, float]:
    """Wall time and CPU time of one run (the CPU of the children reaped meanwhile: this one;
    a server started for the run is reaped only at its end)."""
    argv, extra = command
    env = _environment(extra)
    cpu = _children_cpu()
    start = time.perf_counter()
    done = subprocess.run(
        argv, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        error = done.stderr.decode(errors="replace").strip()[-600:]
        raise SystemExit(f"{argv[:3]} exited with {done.returncode}: {error}")
    return wall, _children_cpu() - cpu


def measure(
    cmds: dict[str, Command], runs: int, warmup: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Seconds per run of each command, wall and CPU: ``warmup`` rounds discarded, then
    ``runs`` rounds, each round running every command once, in turn. They run in a scratch
    directory: ``python -c`` puts the current directory first on ``sys.path``, where a
    checkout would shadow the ``PYTHONPATH`` chosen."""
    walls: dict[str, list[float]] = {label: [] for label in cmds}
    cpus: dict[str, list[float]] = {label: [] for label in cmds}
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(warmup):
            for command in cmds.values():
                _once(command, scratch)
        for _ in range(runs):
            for label, command in cmds.items():
                wall, cpu = _once(command, scratch)
                walls[label].append(wall)
                cpus[label].append(cpu)
    return walls, cpus


def summary(
    samples: dict[str, list[float]], cpu: dict[str, list[float]] | None = None
) -> list[dict[str, Any]]:
    """One row per command (milliseconds and ratios), then what trio_retry adds to ``import
    trio`` (the difference of the medians), for this checkout and the one ``--against``, and
    trio_retry's first response over httpx's and aiohttp's (the ratio of the medians)."""
    medians = {label: statistics.median(times) for label, times in samples.items()}
    trio_s = medians.get("import trio")
    curl_s = medians.get("curl --help")
    rows: list[dict[str, Any]] = []
    for label, median in medians.items():
        rows.append(
            {
                "command": label,
                "median_ms": round(median * 1000, 1),
                "min_ms": round(min(samples[label]) * 1000, 1),
                "cpu_ms": round(statistics.median(cpu[label]) * 1000, 1) if cpu else None,
                "vs_import_trio": round(median / trio_s, 2) if trio_s else None,
                "vs_curl": round(median / curl_s, 1) if curl_s else None,
            }
        )
    # What a program that makes requests pays: ``from trio_retry import Client`` (the package's
    # own ``import trio_retry`` imports nothing until a name is used, so it alone says little).
    # Each also in CPU time (the difference and the ratio of the CPU medians).
    cpus = {label: statistics.median(times) for label, times in (cpu or {}).items()}
    for suffix in ("", _AGAINST):
        for what, label in (("trio_retry", _IMPORT), ("its Client", _CLIENT)):
            if trio_s is not None and label + suffix in medians:
                added = round((medians[label + suffix] - trio_s) * 1000, 1)
                command = f"{what} adds to import trio{suffix}"
                row: dict[str, Any] = {"command": command, "median_ms": added}
                if cpus:
                    row["cpu_ms"] = round((cpus[label + suffix] - cpus["import trio"]) * 1000, 1)
                rows.append(row)
    for suffix in ("", _AGAINST):
        ours = _FIRST + "trio_retry" + suffix
        for peer in ("httpx", "aiohttp"):
            theirs = _FIRST + peer
            if ours in medians and theirs in medians:
                command = f"{ours} / {peer}"
                row = {"command": command, "ratio": round(medians[ours] / medians[theirs], 2)}
                if cpus:
                    row["cpu_ratio"] = round(cpus[ours] / cpus[theirs], 2)
                rows.append(row)
    return rows


def _table(rows: list[dict[str, Any]]) -> str:
    columns = f"{'median ms':>10} {'min ms':>8} {'cpu ms':>8} {'/ trio':>7} {'/ curl':>7}"
    lines = [f"{'command':<54} {columns}"]
    for row in rows:
        if "ratio" in row:
            cpu_ratio = f"{row['cpu_ratio']:>17.2f}x" if "cpu_ratio" in row else ""
            lines.append(f"{row['command']:<54} {row['ratio']:>9.2f}x{cpu_ratio}")
            continue
        cells = [f"{row['command']:<54}", f"{row['median_ms']:>10.1f}"]
        if "min_ms" not in row and row.get("cpu_ms") is not None:
            cells.append(f"{'-':>8} {row['cpu_ms']:>8.1f}")
        if "min_ms" in row:
            vs_trio, vs_curl, cpu = row["vs_import_trio"], row["vs_curl"], row["cpu_ms"]
            cells.append(f"{row['min_ms']:>8.1f}")
            cells.append(f"{cpu:>8.1f}" if cpu is not None else f"{'-':>8}")
            cells.append(f"{vs_trio:>7.2f}" if vs_trio is not None else f"{'-':>7}")
            cells.append(f"{vs_curl:>7.1f}" if vs_curl is not None else f"{'-':>7}")
        lines.append(" ".join(cells))
    return "\n".join(lines)


@contextlib.contextmanager
def _server(wanted: bool) -> Iterator[str | None]:
    """The URL of ``/small`` on a loopback nginx for the run's length, or ``None`` unless
    ``wanted``."""
    if not wanted:
        yield None
        return
    from .servers import ServerUnavailable, running_server

    try:
        with running_server("nginx", cpu=None) as (server, _ca):
            endpoint = server.endpoints["h1"]
            yield f"http://{endpoint['host']}:{endpoint['port']}/small"
    except ServerUnavailable as exc:
        raise SystemExit(f"--first-response needs nginx: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.startup", description=__doc__)
    parser.add_argument("--runs", type=int, default=21, help="measured runs of each command")
    parser.add_argument("--warmup", type=int, default=2, help="discarded runs of each command")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--against", metavar="CHECKOUT", help="also run the trio_retry commands of CHECKOUT"
    )
    parser.add_argument(
        "--first-response",
        action="store_true",
        help="also time process start to first response from a loopback nginx, per client",
    )
    args = parser.parse_args(argv)
    if args.runs < 1 or args.warmup < 0:
        parser.error("--runs must be at least 1 and --warmup at least 0")
    with _server(args.first_response) as url:
        walls, cpus = measure(commands(args.against, url), args.runs, args.warmup)
    rows = summary(walls, cpus)
    if args.json:
        print(json.dumps({"runs": args.runs, "url": url, "results": rows}, indent=2))
    else:
        print(_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
