"""The resume benchmark must not rot: run its smoke mode (8 MB through nginx, a reset every
1 MB) and check what holds at any size: trio_retry's download arrives whole with every byte
sent about once; a client that starts again from byte 0 does not finish. Speed is never
asserted. Clients that are not installed (a clean venv without the bench extra) are rows
that say so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.nginx import find_nginx

ROOT = Path(__file__).resolve().parents[1]


def test_resume_benchmark_smoke(tmp_path: Path) -> None:
    if find_nginx() is None:
        pytest.skip("nginx is not installed")
    out = tmp_path / "resume.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.resume", "--smoke", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data: dict[str, Any] = json.loads(out.read_text())
    rows = {row["client"]: row for row in data["rows"]}
    assert set(rows) == {
        "trio_retry", "httpx (restart)", "aiohttp (restart)", "niquests (restart)", "curl -C -"
    }  # fmt: skip
    ours = rows["trio_retry"]
    assert ours["complete"] is True
    assert ours["cuts"] == data["size"] // data["cut"]
    assert 1.0 <= ours["wire_per_file"] <= 1.05
    for name in ("httpx (restart)", "aiohttp (restart)", "niquests (restart)"):
        row = rows[name]
        assert "note" in row or row["complete"] is False, row  # a reset every MB: never whole
