"""Start-up time: ``python -m benchmarks.startup``.

Wall-clock time of whole processes, each started afresh (``subprocess.run``), the commands taking
turns so that a drift of the (shared) machine hits them all alike:

- ``python -c pass``: the interpreter alone;
- ``import trio``: the floor an import of trio_retry is measured against;
- ``import trio_retry``: ``import trio; import trio_retry``, so that the difference to the line
  above is what trio_retry adds;
- ``python -m trio_retry --help`` and the ``trio-retry --help`` console script (when installed
  next to this interpreter);
- ``curl --help``, a native HTTP client's start-up, for scale (when curl is on PATH).

Prints, for each command, the median of ``--runs`` runs in milliseconds and its ratio to
``import trio`` and to ``curl --help``; ``--json`` prints the same as JSON. Imports are not
cached between runs beyond what the OS caches; the ``.pyc`` files are written on the first run
(``PYTHONDONTWRITEBYTECODE`` is removed from the children's environment, so a checkout measures
what an installed wheel does), which the ``--warmup`` runs absorb.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any

__all__ = ["commands", "main", "measure"]


def commands() -> dict[str, list[str]]:
    """The commands measured, by label; those whose program is missing are left out."""
    python = sys.executable
    found: dict[str, list[str]] = {
        "python -c pass": [python, "-c", "pass"],
        "import trio": [python, "-c", "import trio"],
        "import trio; import trio_retry": [python, "-c", "import trio; import trio_retry"],
        "python -m trio_retry --help": [python, "-m", "trio_retry", "--help"],
    }
    script = os.path.join(os.path.dirname(python), "trio-retry")
    if os.path.exists(script):
        found["trio-retry --help"] = [script, "--help"]
    curl = shutil.which("curl")
    if curl is not None:
        found["curl --help"] = [curl, "--help"]
    return found


def _environment() -> dict[str, str]:
    # Bytecode caches are written and used, as for an installed wheel (pip compiles it): with
    # PYTHONDONTWRITEBYTECODE set (as in some shells and containers) an editable checkout would
    # compile every module of trio_retry from source at every start, which measures the compiler.
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _once(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(
        argv,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=_environment(),
    )
    return time.perf_counter() - start


def measure(cmds: dict[str, list[str]], runs: int, warmup: int) -> dict[str, list[float]]:
    """Seconds per run of each command: ``warmup`` rounds discarded, then ``runs`` rounds, each
    round running every command once, in turn."""
    for _ in range(warmup):
        for argv in cmds.values():
            _once(argv)
    samples: dict[str, list[float]] = {label: [] for label in cmds}
    for _ in range(runs):
        for label, argv in cmds.items():
            samples[label].append(_once(argv))
    return samples


def _summary(samples: dict[str, list[float]]) -> list[dict[str, Any]]:
    medians = {label: statistics.median(times) for label, times in samples.items()}
    trio_ms = medians.get("import trio")
    curl_ms = medians.get("curl --help")
    rows: list[dict[str, Any]] = []
    for label, median in medians.items():
        rows.append(
            {
                "command": label,
                "median_ms": round(median * 1000, 1),
                "min_ms": round(min(samples[label]) * 1000, 1),
                "vs_import_trio": round(median / trio_ms, 2) if trio_ms else None,
                "vs_curl": round(median / curl_ms, 1) if curl_ms else None,
            }
        )
    if trio_ms is not None and "import trio; import trio_retry" in medians:
        added = medians["import trio; import trio_retry"] - trio_ms
        rows.append(
            {"command": "trio_retry adds to import trio", "median_ms": round(added * 1000, 1)}
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.startup", description=__doc__)
    parser.add_argument("--runs", type=int, default=21, help="measured runs of each command")
    parser.add_argument("--warmup", type=int, default=2, help="discarded runs of each command")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.warmup < 0:
        parser.error("--runs must be at least 1 and --warmup at least 0")
    rows = _summary(measure(commands(), args.runs, args.warmup))
    if args.json:
        print(json.dumps({"runs": args.runs, "results": rows}, indent=2))
        return 0
    print(f"{'command':<34} {'median ms':>10} {'min ms':>8} {'/ trio':>7} {'/ curl':>7}")
    for row in rows:
        cells = [f"{row['command']:<34}", f"{row['median_ms']:>10.1f}"]
        if "min_ms" in row:
            vs_trio = row["vs_import_trio"]
            vs_curl = row["vs_curl"]
            cells.append(f"{row['min_ms']:>8.1f}")
            cells.append(f"{vs_trio:>7.2f}" if vs_trio is not None else f"{'-':>7}")
            cells.append(f"{vs_curl:>7.1f}" if vs_curl is not None else f"{'-':>7}")
        print(" ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
