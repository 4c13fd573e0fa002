"""The benchmark harness must not rot: run its smoke mode end to end.

Runs ``python -m benchmarks --smoke --json FILE`` in a subprocess, once with the default server
choice (nginx when installed) and once forcing the pure-Python fallback server, so both paths
stay exercised. It must pass where nginx, httpx, aiohttp or matplotlib are absent: those are
skipped with a note, and the bare h11 loop still runs.

Besides the throughput suite, the smoke covers the amplification, duplicates and engine-cost
suites. Their smoke numbers are too small to mean much, except two invariants that hold at any
size: trio_retry never makes the server execute a POST twice, and never reports a plain failure
for a POST the server executed.
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
THROUGHPUT = {
    "get_sequential",
    "get_concurrent_32",
    "get_concurrent_128",
    "download_64k",
    "upload_64k",
    "h2_tls_streams_32",
}
RESILIENCE = {"outage_503", "outage_refused", "faults_post_h2", "faults_post_h1"}
ENGINE_COST = {"engine_cost_200", "engine_cost_404", "engine_cost_503"}


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
    scenarios = {s["name"]: s for s in data["scenarios"]}
    assert THROUGHPUT | RESILIENCE | ENGINE_COST <= scenarios.keys()
    client_names = {c["name"] for c in data["clients"]}
    assert {"trio_retry", "httpx_trio", "httpx_asyncio", "aiohttp", "h11_trio", "h2_trio"} <= (
        client_names
    )
    assert len(data["results"]) == len(scenarios) * len(client_names)
    for result in data["results"]:
        assert RESULT_KEYS <= result.keys(), result
        where = f"{result['scenario']} / {result['client']}: {result['note']}"
        if result["status"] == "skipped":
            assert result["note"], where
            assert result["median"] is None, where
            continue
        assert result["status"] == "ok", where
        summary = scenarios[result["scenario"]].get("summary")
        if summary is not None:  # a suite with its own table: its own keys
            assert summary.keys() <= result["median"].keys(), where
            assert all(run["status"] == "ok" for run in result["runs"]), where
            continue
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
    _check_resilience(data)


def _check_resilience(data: dict[str, Any]) -> None:
    results = {(r["scenario"], r["client"]): r for r in data["results"]}
    available = {c["name"]: c["available"] for c in data["clients"]}
    if not available["trio_retry"]:
        return  # the suites need trio_retry.testing.FaultServer
    # The urllib3-style loop over bare h11 needs only runtime dependencies: always measured.
    for name in ("outage_503", "outage_refused"):
        naive = results[(name, "h11_trio")]
        assert naive["status"] == "ok", naive["note"]
        assert naive["median"]["amplification"] == 4.0  # 4 attempts for every call
        ours = results[(name, "trio_retry")]
        assert ours["status"] == "ok", ours["note"]
        assert 1.0 <= ours["median"]["amplification"] <= 4.0
    assert results[("faults_post_h1", "h11_trio")]["status"] == "ok"
    assert results[("faults_post_h2", "h11_trio")]["status"] == "skipped"  # HTTP/1.1 only
    for name in ("faults_post_h2", "faults_post_h1"):
        ours = results[(name, "trio_retry")]
        assert ours["status"] == "ok", ours["note"]
        median = ours["median"]
        assert median["calls"] > 0
        assert median["faulted"] > 0
        # The invariants: no POST executed twice, no executed POST reported as a plain failure.
        assert median["duplicates"] == 0, ours["runs"][0].get("examples")
        assert median["false_failed"] == 0, ours["runs"][0].get("examples")
        httpx_loop = results[(name, "httpx_trio")]
        assert httpx_loop["status"] in ("ok", "skipped"), httpx_loop["note"]
    for name in ENGINE_COST:
        row = results[(name, "trio_retry")]
        assert row["status"] == "ok", row["note"]
        assert row["median"]["trio_retry_us"] > 0
        assert row["median"]["h11_us"] > 0
        assert 0 < row["median"]["share"] < 1


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
