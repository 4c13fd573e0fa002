"""The benchmark harness must not rot: run its smoke mode end to end.

Runs ``python -m benchmarks --smoke --json FILE`` in a subprocess, once with the default server
choice (nginx when installed) and once forcing the pure-Python fallback server, so both paths
stay exercised. It must pass where nginx, httpx, aiohttp or matplotlib are absent: those are
skipped with a note, and the bare h11 loop still runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 180  # smoke takes ~10 s on 2 cores; this only stops a hang

RESULT_KEYS = {
    "scenario",
    "client",
    "label",
    "status",
    "note",
    "runs",
    "median",
    "ratio_rps",
    "ratio_cpu",
}
MEDIAN_KEYS = {"rps", "p50_ms", "p99_ms", "cpu_ms_per_req", "requests", "errors"}


def _run_smoke(tmp_path: Path, *extra: str) -> tuple[dict[str, Any], str]:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke", "--json", str(out), *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    data: dict[str, Any] = json.loads(out.read_text())
    return data, output


def _check_document(data: dict[str, Any]) -> None:
    assert data["schema"] == 1
    assert data["mode"] == "smoke"
    assert data["baseline"] == "httpx_trio"
    assert {"nproc", "cpu_model", "python", "packages"} <= data["machine"].keys()
    assert data["server"]["kind"] in ("nginx", "fallback")
    scenario_names = {s["name"] for s in data["scenarios"]}
    assert {
        "get_sequential",
        "get_concurrent_32",
        "get_concurrent_128",
        "download_64k",
        "upload_64k",
        "h2_tls_streams_32",
    } <= scenario_names
    client_names = {c["name"] for c in data["clients"]}
    assert {"trio_retry", "httpx_trio", "httpx_asyncio", "aiohttp", "h11_trio", "h2_trio"} <= (
        client_names
    )
    assert len(data["results"]) == len(scenario_names) * len(client_names)
    for result in data["results"]:
        assert RESULT_KEYS <= result.keys(), result
        where = f"{result['scenario']} / {result['client']}: {result['note']}"
        if result["status"] == "skipped":
            assert result["note"], where
            assert result["median"] is None, where
            continue
        assert result["status"] == "ok", where
        median = result["median"]
        assert MEDIAN_KEYS <= median.keys(), where
        assert median["requests"] > 0, where
        assert median["errors"] == 0, where
        assert median["rps"] > 0, where
        for run in result["runs"]:
            assert run["status"] == "ok", where
            assert run["errors"] == 0, where
            assert run["requests"] > 0, where
    # The floor always runs: it needs only trio and h11 (runtime dependencies).
    bare = {r["scenario"]: r for r in data["results"] if r["client"] == "h11_trio"}
    assert bare["get_sequential"]["status"] == "ok"
    assert bare["upload_64k"]["status"] == "ok"
    assert bare["h2_tls_streams_32"]["status"] == "skipped"


@pytest.mark.parametrize("server", ["auto", "fallback"])
def test_benchmarks_smoke(tmp_path: Path, server: str) -> None:
    data, output = _run_smoke(tmp_path, "--server", server)
    _check_document(data)
    if server == "fallback":
        assert data["server"]["kind"] == "fallback"
    assert "get_sequential" in output  # the table was printed
    trio_retry = next(c for c in data["clients"] if c["name"] == "trio_retry")
    if not trio_retry["available"]:
        assert "trio_retry: not available" in output


def test_benchmarks_list() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--list"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    assert "h11_trio" in proc.stdout
    assert "get_sequential" in proc.stdout
