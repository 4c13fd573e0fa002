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
- ``curl --help``, a native HTTP client's start-up, for scale (when curl is on PATH).

Every command runs from a scratch directory, with this checkout first on ``PYTHONPATH`` (the
``trio_retry`` measured is this one, whatever is installed). ``--against CHECKOUT`` also runs
the trio_retry commands with another checkout first instead (e.g. a ``git worktree`` of
``main`` before a change), labelled ``[against]``, in the same rounds, so that before and
after see the same machine.

Prints, for each command, the median of ``--runs`` runs in milliseconds, the fastest run, and
the median's ratio to ``import trio`` and to ``curl --help``; ``--json`` prints the same as
JSON. Bytecode caches are written and used, as for an installed wheel (pip compiles it):
``PYTHONDONTWRITEBYTECODE`` is removed from the children's environment, since with it set (as in
some shells and containers) an editable checkout would compile every module of trio_retry from
source at every start, which measures the compiler. The ``--warmup`` rounds write the caches.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

__all__ = ["commands", "main", "measure"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: argv, and the variables added to the environment.
Command = tuple[list[str], dict[str, str]]

_AGAINST = " [against]"
_IMPORT = "import trio; import trio_retry"
_CLIENT = "import trio; from trio_retry import Client"


def commands(against: str | None = None) -> dict[str, Command]:
    """The commands measured, by label; those whose program is missing are left out."""
    python = sys.executable
    argvs: dict[str, list[str]] = {
        "python -c pass": [python, "-c", "pass"],
        "import trio": [python, "-c", "import trio"],
        _IMPORT: [python, "-c", "import trio; import trio_retry"],
        _CLIENT: [python, "-c", _CLIENT],
        "python -m trio_retry --help": [python, "-m", "trio_retry", "--help"],
    }
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


def _once(command: Command, cwd: str) -> float:
    argv, extra = command
    env = _environment(extra)
    start = time.perf_counter()
    subprocess.run(
        argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd
    )
    return time.perf_counter() - start


def measure(cmds: dict[str, Command], runs: int, warmup: int) -> dict[str, list[float]]:
    """Seconds per run of each command: ``warmup`` rounds discarded, then ``runs`` rounds, each
    round running every command once, in turn. They run in a scratch directory: ``python -c``
    puts the current directory first on ``sys.path``, where a checkout would shadow the
    ``PYTHONPATH`` chosen."""
    samples: dict[str, list[float]] = {label: [] for label in cmds}
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(warmup):
            for command in cmds.values():
                _once(command, scratch)
        for _ in range(runs):
            for label, command in cmds.items():
                samples[label].append(_once(command, scratch))
    return samples


def summary(samples: dict[str, list[float]]) -> list[dict[str, Any]]:
    """One row per command (milliseconds and ratios), then what trio_retry adds to ``import
    trio`` (the difference of the medians), for this checkout and the one ``--against``."""
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
                "vs_import_trio": round(median / trio_s, 2) if trio_s else None,
                "vs_curl": round(median / curl_s, 1) if curl_s else None,
            }
        )
    # What a program that makes requests pays: ``from trio_retry import Client`` (the package's
    # own ``import trio_retry`` imports nothing until a name is used, so it alone says little).
    for suffix in ("", _AGAINST):
        for what, label in (("trio_retry", _IMPORT), ("its Client", _CLIENT)):
            if trio_s is not None and label + suffix in medians:
                added = round((medians[label + suffix] - trio_s) * 1000, 1)
                command = f"{what} adds to import trio{suffix}"
                rows.append({"command": command, "median_ms": added})
    return rows


def _table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'command':<54} {'median ms':>10} {'min ms':>8} {'/ trio':>7} {'/ curl':>7}"]
    for row in rows:
        cells = [f"{row['command']:<54}", f"{row['median_ms']:>10.1f}"]
        if "min_ms" in row:
            vs_trio, vs_curl = row["vs_import_trio"], row["vs_curl"]
            cells.append(f"{row['min_ms']:>8.1f}")
            cells.append(f"{vs_trio:>7.2f}" if vs_trio is not None else f"{'-':>7}")
            cells.append(f"{vs_curl:>7.1f}" if vs_curl is not None else f"{'-':>7}")
        lines.append(" ".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.startup", description=__doc__)
    parser.add_argument("--runs", type=int, default=21, help="measured runs of each command")
    parser.add_argument("--warmup", type=int, default=2, help="discarded runs of each command")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--against", metavar="CHECKOUT", help="also run the trio_retry commands of CHECKOUT"
    )
    args = parser.parse_args(argv)
    if args.runs < 1 or args.warmup < 0:
        parser.error("--runs must be at least 1 and --warmup at least 0")
    rows = summary(measure(commands(args.against), args.runs, args.warmup))
    if args.json:
        print(json.dumps({"runs": args.runs, "results": rows}, indent=2))
    else:
        print(_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
