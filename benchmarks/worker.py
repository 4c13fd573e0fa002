"""Worker process: runs one client through one or more scenarios and prints JSON.

Started by the runner as ``python -m benchmarks.worker CONFIG_JSON``; never imported by it. Each
client runs in its own process so its CPU time is its own, its event loop is fresh and a crash or
hang cannot take the runner down. The result is the last stdout line, prefixed by ``RESULT_TAG``.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

RESULT_TAG = "BENCH-RESULT "


def _pin(cpu: int | None) -> str | None:
    if cpu is None or not hasattr(os, "sched_setaffinity"):
        return None
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError as exc:
        return f"could not pin to CPU {cpu}: {exc}"
    return None


def run_worker(config: dict[str, Any]) -> dict[str, Any]:
    from benchmarks.clients import ADAPTERS, ClientUnavailable, Endpoint
    from benchmarks.runtime import HardTimeout, get_runtime
    from benchmarks.scenarios import RunParams, all_scenarios

    client_name: str = config["client"]
    adapter_cls = ADAPTERS[client_name]
    out: dict[str, Any] = {"client": client_name, "available": True, "results": []}
    notes = [_pin(config.get("client_cpu"))]
    # Before check_available() imports the client's package: it may read them at import.
    os.environ.update(adapter_cls.env)
    try:
        adapter_cls.check_available()
    except ClientUnavailable as exc:
        out["available"] = False
        out["reason"] = str(exc)
        return out
    notes.append(adapter_cls.setup_note())
    if any(notes):
        out["note"] = "; ".join(n for n in notes if n)

    runtime = get_runtime(adapter_cls.runtime)
    scenarios = all_scenarios()
    endpoints = {k: Endpoint.from_json(v) for k, v in config["endpoints"].items()}
    for item in config["scenarios"]:
        scenario = scenarios[item["name"]]
        params = RunParams.from_json(item["params"])
        entry: dict[str, Any] = {"scenario": scenario.name}
        adapter = scenario.make_adapter(adapter_cls, endpoints[scenario.endpoint])
        try:
            entry.update(scenario.run(adapter, runtime, params))
        except HardTimeout as exc:
            entry.update(status="failed", note=str(exc))
        except Exception as exc:
            tb = traceback.format_exc(limit=8)
            entry.update(status="failed", note=f"{type(exc).__name__}: {exc}", traceback=tb)
        out["results"].append(entry)
    return out


def serve_config(
    argv: list[str], module: str, tag: str, run: Callable[[dict[str, Any]], dict[str, Any]]
) -> int:
    """A measuring child process's protocol, shared by ``benchmarks.worker`` and
    ``benchmarks.bulk_clients``: one argument, the configuration as JSON; the result is the
    last line of stdout, ``tag`` then JSON. Returns the exit status."""
    if len(argv) != 1:
        print(f"usage: python -m {module} CONFIG_JSON", file=sys.stderr)
        return 2
    result = run(json.loads(argv[0]))
    sys.stdout.write("\n" + tag + json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


def main(argv: list[str]) -> int:
    return serve_config(argv, "benchmarks.worker", RESULT_TAG, run_worker)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
