"""The HTTP/3 benchmark must not rot: a seconds-long run of ``python -m benchmarks.http3``.

It starts caddy (skipped when caddy is not installed), runs every case over HTTP/2 and over
HTTP/3 on each QUIC library installed, with a few requests and a 1 MB file, and checks the
document: each case was measured over both protocols (each child checked every response's
status, size and protocol, and fails otherwise). Speed is never asserted.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.caddy import find_caddy

ROOT = Path(__file__).resolve().parents[1]


def test_http3_benchmark_smoke(tmp_path: Path) -> None:
    if find_caddy() is None:
        pytest.skip("caddy is not installed (apt-get install caddy)")
    pytest.importorskip("aioquic", reason="needs the http3 extra")
    out = tmp_path / "h3.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.http3",
            "--requests",
            "40",
            "--size-mb",
            "1",
            "--timeout",
            "60",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    document = json.loads(out.read_text())
    assert document["caddy"].startswith("2.")  # the version caddy printed
    installed = [name for name in ("qh3", "aioquic") if importlib.util.find_spec(name)]
    rows = {(row["case"], row["quic"]): row for row in document["rows"]}
    assert set(rows) == {
        (case, quic) for case in ("sequential", "concurrent", "download") for quic in installed
    }
    for row in rows.values():
        for key in ("h2_rate", "h3_rate", "h2_cpu", "h3_cpu"):
            assert row[key] > 0, (row["case"], row["quic"], key)
    for quic in installed:  # the server's CPU beside the client's (Linux /proc; in ticks)
        assert rows["download", quic]["h3_server_cpu"] is not None
    assert "HTTP/3" in proc.stdout
    try:
        import niquests  # noqa: F401
    except ImportError:  # (.ci/run's clean venv: no bench extra, no niquests row)
        assert all("niquests_rate" not in row for row in rows.values())
        assert "no niquests row" in proc.stdout
    else:
        for quic in installed:  # (its child checked size and protocol)
            assert rows["download", quic]["niquests_rate"] > 0
        assert "niquests' HTTP/3" in proc.stdout


def test_http3_benchmark_counts_datagrams(tmp_path: Path) -> None:
    """``--datagrams``: the download's datagrams each way, counted by iptables on caddy's UDP
    port, and the counting rules gone afterwards."""
    import os
    import shutil

    if find_caddy() is None:
        pytest.skip("caddy is not installed (apt-get install caddy)")
    if os.geteuid() != 0 or shutil.which("iptables") is None:
        pytest.skip("--datagrams needs root and iptables")
    pytest.importorskip("qh3", reason="needs the http3 extra")
    out = tmp_path / "h3.json"
    command = [sys.executable, "-m", "benchmarks.http3", "--requests", "5", "--size-mb", "1"]
    command += ["--quic", "qh3", "--datagrams", "--json", str(out)]
    proc = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=180, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (row,) = [row for row in json.loads(out.read_text())["rows"] if row["case"] == "download"]
    to_server, from_server = row["h3_datagrams_per_mb"]
    assert to_server > 0  # (its acknowledgements, at least one)
    assert from_server >= 1e6 / 1500  # (1 MB in datagrams of at most 1,500 bytes)
    assert "datagrams per MB" in proc.stdout
    rules = subprocess.run(["iptables", "-S", "OUTPUT"], capture_output=True, text=True).stdout
    assert "benchmarks.http3" not in rules
