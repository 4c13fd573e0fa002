"""The bulk-transfer benchmark must not rot: run its smoke mode (1 MB per case).

Runs ``python -m benchmarks.bulk --smoke --json FILE`` in a subprocess against the nginx it
starts, and checks the document: every case has a row per client, curl (the limit) and
trio_retry were measured in each, uploads were stored whole by nginx (the runner checks the
stored size, so an "ok" upload row is that proof), and clients that cannot take part are rows
saying why. Skips where nginx or curl is missing. Speed is never asserted.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import bulk, bulk_clients
from benchmarks.bulk_report import summarise
from benchmarks.nginx import find_nginx

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 300  # ~15 s on 2 idle cores; stops a hang


def test_bulk_smoke(tmp_path: Path) -> None:
    if find_nginx() is None:
        pytest.skip("nginx is not installed")
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    out = tmp_path / "bulk.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.bulk", "--smoke", "--json", str(out), "--markdown"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data: dict[str, Any] = json.loads(out.read_text())
    assert data["mode"] == "smoke"
    assert data["size_bytes"] == 1_000_000
    rows = {(r["protocol"], r["direction"], r["client"]): r for r in data["rows"]}
    cases = {(p, d) for p in bulk.PROTOCOLS for d in bulk.DIRECTIONS}
    assert {(p, d) for p, d, _ in rows} == cases
    assert len(rows) == len(cases) * len(bulk.CLIENTS)
    for (protocol, direction, client), row in rows.items():
        where = f"{protocol} {direction} {client}: {row['note']}"
        if client in ("curl", "trio_retry") or (
            client == "trio_retry_file" and direction == "download"
        ):
            assert row["status"] == "ok", where
        if row["status"] == "skipped":
            assert row["note"], where
            continue
        assert row["status"] == "ok", where
        assert row["mb_s"] > 0, where
        assert row["rss_mb"] > 0, where
        assert row["rss_1k_mb"] > 0, where
        assert row["x_curl_mb_s"] is not None, where
    assert rows[("h2_tls", "download", "aiohttp")]["note"] == "aiohttp has no HTTP/2"
    assert rows[("h1", "upload", "trio_retry_file")]["status"] == "skipped"
    # Every measured run of an HTTP/2 case spoke HTTP/2 (a silent fallback would be a failure).
    for run in data["runs"]:
        if run["ok"]:
            assert run["http_version"] == ("2" if run["protocol"] == "h2_tls" else "1.1"), run
    # trio_retry came from the checkout given (by default the harness's own tree).
    ours = [run for run in data["runs"] if run["client"].startswith("trio_retry")]
    assert {run["module"] for run in ours} == {str(ROOT / "trio_retry" / "__init__.py")}
    assert "download of 1 MB, HTTP/2 over TLS" in proc.stdout
    assert "| case | client |" in proc.stdout


def test_bulk_client_not_installed(tmp_path: Path) -> None:
    """A client whose package is missing is a row saying so in every case, and the run goes
    on (a package shadowed here by one that fails to import, as a missing one would)."""
    if find_nginx() is None:
        pytest.skip("nginx is not installed")
    shim = tmp_path / "shim" / "niquests"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text(
        "raise ModuleNotFoundError('No module named niquests', name='niquests')\n"
    )
    out = tmp_path / "bulk.json"
    args = ["--smoke", "--clients", "trio_retry,niquests", "--protocols", "h1", "--json", str(out)]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.bulk", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(shim.parent)},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(out.read_text())["rows"]
    status = {(r["direction"], r["client"]): (r["status"], r["note"]) for r in rows}
    assert status[("download", "niquests")] == ("skipped", "not installed (niquests)")
    assert status[("upload", "niquests")] == ("skipped", "not installed (niquests)")
    assert status[("download", "trio_retry")][0] == "ok"
    assert status[("upload", "trio_retry")][0] == "ok"


def _run(protocol: str, direction: str, client: str, size: int, **figures: Any) -> dict[str, Any]:
    base = {"ok": True, "unavailable": False, "note": "", "cpu_transfer_s": None, "repeat": 0}
    return {"protocol": protocol, "direction": direction, "client": client, "size": size} | (
        base | figures
    )


def test_summarise_medians_and_ratios() -> None:
    """Per-MB CPU is the large run's minus the 1 KB run's; ratios are to curl in the case."""
    size = 10_000_000
    runs = [
        _run("h1", "download", "curl", size, wall_s=0.01, cpu_s=0.03, rss_mb=10.0),
        _run("h1", "download", "curl", bulk.SMALL, wall_s=0.001, cpu_s=0.01, rss_mb=9.0),
        *(
            _run("h1", "download", "trio_retry", size, wall_s=w, cpu_s=c, rss_mb=40.0)
            for w, c in ((0.05, 0.50), (0.04, 0.40), (0.09, 0.90))
        ),
        _run("h1", "download", "trio_retry", bulk.SMALL, wall_s=0.001, cpu_s=0.20, rss_mb=30.0),
        _run(
            "h1", "download", "niquests", size, ok=False, note="boom", wall_s=0, cpu_s=0, rss_mb=1
        ),
    ]
    skipped = {("h1", "download", "aiohttp"): "not installed (aiohttp)"}
    rows = {r["client"]: r for r in summarise(runs, size, skipped)}
    assert [r["client"] for r in summarise(runs, size, skipped)] == [
        "curl", "trio_retry", "aiohttp", "niquests",
    ]  # fmt: skip
    ours = rows["trio_retry"]
    assert ours["wall_s"] == pytest.approx(0.05)  # the median of three
    assert ours["mb_s"] == pytest.approx(200.0)
    assert ours["cpu_s_per_mb"] == pytest.approx((0.50 - 0.20) / 10)
    assert ours["x_curl_mb_s"] == pytest.approx(200.0 / 1000.0)
    assert ours["x_curl_cpu"] == pytest.approx(0.03 / 0.002)
    assert ours["busy"] == pytest.approx(0.3 / 0.05)  # CPU of the bytes over the wall time
    assert ours["rss_mb"] == 40.0
    assert ours["rss_1k_mb"] == 30.0
    assert rows["aiohttp"]["status"] == "skipped"
    assert rows["niquests"]["status"] == "failed"
    assert rows["niquests"]["note"] == "boom"
    assert rows["niquests"]["x_curl_mb_s"] is None


def test_missing_client_is_a_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client whose package is missing reports "not installed", never a traceback."""

    def missing(job: bulk_clients.Job) -> None:
        import benchmarks_no_such_client  # type: ignore[import-not-found]  # noqa: F401

    monkeypatch.setitem(bulk_clients.RUNNERS, "niquests", missing)
    config = {"client": "niquests", "method": "GET", "url": "http://127.0.0.1:9/", "http2": False}
    result = bulk_clients.run(config)
    assert result == {"unavailable": "not installed (benchmarks_no_such_client)"}
