"""The scale benchmark must not rot: a seconds-long run of ``python -m benchmarks.scale --smoke``.

It starts nginx (and caddy for HTTP/3 where it is installed), runs two small cases per protocol
and client and a 3-second soak, and checks the document's shape: a row per (protocol, case,
client), trio_retry measured over HTTP/1.1 and HTTP/2, the clients that cannot take part rows
saying why, the soak's samples, and the chart written. Speed is never asserted.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import scale, scale_rounds
from benchmarks.nginx import find_nginx
from benchmarks.scale_report import summarise

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 300  # ~15 s on 2 idle cores; stops a hang


def test_scale_smoke(tmp_path: Path) -> None:
    if find_nginx() is None:
        pytest.skip("nginx is not installed")
    out, svg = tmp_path / "scale.json", tmp_path / "scale.svg"
    options = ["--smoke", "--json", str(out), "--chart", str(svg), "--gc-threshold", "5000,10,10"]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.scale", *options],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data: dict[str, Any] = json.loads(out.read_text())
    assert data["mode"] == "smoke"
    cases = [case.name for case in scale.parse_cases(scale.SMOKE_CASES)]
    rows = {(r["protocol"], r["case"], r["client"]): r for r in data["rows"]}
    assert set(rows) == {(p, c, k) for p in scale.PROTOCOLS for c in cases for k in scale.CLIENTS}
    assert len(data["rows"]) == len(rows)
    for (protocol, case, client), row in rows.items():
        where = f"{protocol} {case} {client}: {row.get('note')}"
        if client == "trio_retry" and protocol in ("h1", "h2"):
            assert row["status"] == "ok", where
        if row["status"] != "ok":
            assert row["status"] in ("skipped", "unavailable"), where
            assert row["note"], where
            continue
        assert row["cpu_us_per_call"] > 0, where
        assert row["timed_calls"] == row["calls"], where  # the smoke times one burst
        assert row["wall_s"] >= 0, where
        assert row["peak_rss_mb"] > 0, where
        assert row["held_connections"] >= 1, where
        assert row["errors"] == 0, where
        assert row["gc_threshold"] == [5000, 10, 10], where  # set in the client's process
    # aiohttp speaks no HTTP/2; without the bench extra (.ci/run installs only the test one) it
    # is not there at all, and the row says which.
    from benchmarks.clients import ADAPTERS

    absent = ADAPTERS["aiohttp"].unavailable_reason()
    assert rows[("h2", "10", "aiohttp")]["note"] == (absent or "no HTTP/2 support")
    h3 = rows[("h3", "10", "trio_retry")]
    assert h3["status"] == "ok" or "caddy" in h3["note"] or "aioquic" in h3["note"], h3
    ours = [r for r in data["rows"] if r["client"] == "trio_retry" and r["status"] == "ok"]
    assert {r["module"] for r in ours} == {str(ROOT / "trio_retry" / "__init__.py")}
    (soak,) = data["soaks"]
    assert (soak["protocol"], soak["client"], soak["status"]) == ("h2", "trio_retry", "ok"), soak
    assert soak["calls"] > 0
    assert soak["samples"], soak
    assert all(len(sample) == 3 for sample in soak["samples"])
    assert "HTTP/2 over TLS (nginx)" in proc.stdout
    if importlib.util.find_spec("matplotlib") is None:  # the bench extra: not in .ci/run's
        assert "chart not written: matplotlib is not installed" in proc.stdout
    else:
        assert svg.read_text().lstrip().startswith("<?xml")


def test_cases_parse() -> None:
    assert scale.parse_cases("100, 20000@50") == [scale.Case(100, 100), scale.Case(20000, 50)]
    assert [case.name for case in scale.parse_cases("7,9@3")] == ["7", "9@3"]
    with pytest.raises(Exception, match="N or N@C"):
        scale.parse_cases("ten")


def test_gc_threshold_parses() -> None:
    assert scale.parse_args(["--gc-threshold", "10000,10,10"]).gc_threshold == (10000, 10, 10)
    assert scale.parse_args([]).gc_threshold is None  # the interpreter's own
    for wrong in ("10000", "a,b,c", "1,2,3,4"):
        with pytest.raises(SystemExit):
            scale.parse_args(["--gc-threshold", wrong])


def test_ratio_to_the_reference_case() -> None:
    """x ref is a client's CPU per call over its own at the reference, in the same protocol."""

    def run(protocol: str, client: str, calls: int, cpu: float, conns: int = 0) -> dict[str, Any]:
        connections = conns or calls
        return {
            "protocol": protocol,
            "client": client,
            "calls": calls,
            "connections": connections,
            "status": "ok",
            "cpu_us_per_call": cpu,
        }

    runs = [
        run("h2", "trio_retry", 1000, 100.0),
        run("h2", "trio_retry", 10000, 120.0),
        run("h2", "trio_retry", 20000, 150.0, conns=50),
        run("h1", "trio_retry", 10000, 90.0),  # no reference in h1
        run("h2", "niquests", 1000, 400.0),
        run("h2", "niquests", 10000, 800.0),
    ]
    ratios = [row["x_ref"] for row in summarise(runs, 1000)]
    assert ratios == [1.0, pytest.approx(1.2), pytest.approx(1.5), None, 1.0, 2.0]


def test_rounds_are_reported_as_medians() -> None:
    """--rounds: a row's figures are the medians of its rounds, its x ref the median of the
    ratios each round measured (with their range); a row failed in any round is failed."""

    def row(calls: int, cpu: float, gc: float, status: str = "ok") -> dict[str, Any]:
        return {
            "protocol": "h2",
            "client": "trio_retry",
            "case": str(calls),
            "calls": calls,
            "connections": calls,
            "status": status,
            "note": "" if status == "ok" else "boom",
            "cpu_us_per_call": cpu,
            "gc_us_per_call": gc,
        }

    rounds = [
        summarise([row(1000, 100.0, 10.0), row(10000, 150.0, 50.0)], 1000),
        summarise([row(1000, 80.0, 12.0), row(10000, 160.0, 40.0)], 1000),
        summarise([row(1000, 90.0, 11.0), row(10000, 117.0, 45.0, "failed")], 1000),
    ]
    low, high = scale_rounds.medians(rounds)
    assert (low["cpu_us_per_call"], low["gc_us_per_call"], low["x_ref"]) == (90.0, 11.0, 1.0)
    assert low["cpu_us_per_call_rounds"] == [100.0, 80.0, 90.0]
    assert (high["status"], high["note"]) == ("failed", "boom")
    ok = scale_rounds.medians(rounds[:2])[1]
    assert ok["cpu_us_per_call"] == 155.0
    assert ok["x_ref"] == pytest.approx((1.5 + 2.0) / 2)
    assert ok["x_ref_range"] == [1.5, 2.0]
    assert "1.75x [1.50-2.00]" in scale_rounds.render_rounds(
        {"trees": [{"checkout": "/a", "revision": "a", "rows": scale_rounds.medians(rounds[:2])}]},
        2,
    )


def test_rounds_and_trees_parse(tmp_path: Path) -> None:
    args = scale.parse_args(["--rounds", "3", "--against", str(ROOT), "--against", str(ROOT)])
    assert args.rounds == 3
    assert scale_rounds.trees(args) == [str(ROOT)] * 3
    with pytest.raises(SystemExit):
        scale.parse_args(["--against", str(tmp_path)])  # no trio_retry there
    with pytest.raises(SystemExit):
        scale.parse_args(["--rounds", "0"])
