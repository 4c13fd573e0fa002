"""The soak must not rot: a few seconds of it, in a subprocess, judged like the full run.

``python -m benchmarks.soak --duration 5 --concurrency 100 --quarantine 1`` (about 8 s of wall
time): every call is judged on the server's record, and at the end the clients must have left
no socket, file descriptor or task behind. Memory growth is not judged on a run this short;
the full two-minute run and its figures are in docs/reliability.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 90  # the run takes about 8 s; this only stops a hang

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_soak_smoke(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    argv = ["--duration", "5", "--concurrency", "100", "--quarantine", "1", "--seed", "8"]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.soak", *argv, "--max-growth-mb", "1000", "--json", out],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    figures: dict[str, Any] = json.loads(out.read_text())
    assert figures["violations"] == 0, figures["violation_examples"]
    assert figures["calls"] > 300
    assert figures["faults_injected"] > 100
    assert len(figures["server_faults"]) >= 10  # many kinds of fault, not one
    assert set(figures["outcomes"]) >= {"response", "failed", "ambiguous"}
    assert figures["fds_leaked"] == 0
    assert figures["tasks_leaked"] == 0
