"""The charts of docs/benchmarks.md and the README, drawn again from the dated results in
docs/results/: ``python -m benchmarks.charts [--results DIR] [--out DIR] [--only NAME,...]``.

Nothing is measured here: each chart is drawn from recorded JSON only. The throughput and bulk
charts name the date and the revision of their run in their title (docs/benchmarks.md gives
the command beside each chart). The charts and their sources (:data:`CHARTS`):

- ``small-requests.svg``: client CPU per small request, trio_retry beside httpx, aiohttp,
  niquests and the bare h11/h2 loops (and the C limits, wrk and h2load, when the run has them),
  and beside aiohttp and the bare loops with more scenarios, from the throughput suite's JSON
  (``python -m benchmarks --json``);
- ``bulk-50mb.svg``: 50 MB transfers, each client's MB/s over curl's (x curl), trio_retry,
  httpx, aiohttp and niquests per protocol and direction, from the bulk figures;
- ``exactly-once-seed31.svg``, ``exactly-once-seed7.svg``: the exactly-once scoreboard, drawn
  by the lab's own :func:`benchmarks.exactly_once.report.chart` from the slim documents;
- ``scale-10k-calls.svg``: client CPU per call from 100 to 10,000 calls at once, per protocol
  and client, drawn by :func:`benchmarks.scale_report.figure` from ``benchmarks.scale``'s JSON.

When a benchmark is run again and its JSON saved under docs/results/ (named by its date and
what it measures), point :data:`CHARTS` at the new file and run this again. Redrawing from the
same file gives the same SVG (text stays text, element ids are salted with a fixed string, no
date in the metadata), so a chart's diff is its figures' diff. Without matplotlib (the
``bench`` extra) it exits with status 2 and says so; a source that is missing, or lacks what
its chart needs, is an error naming it (exit status 1), found before that chart is written.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["CHARTS", "draw", "main"]

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
OUT = ROOT / "docs"

SMALL_REQUESTS_PEERS = "2026-12-06-small-requests-peers-1.json"
#: chart file -> the result files it is drawn from (in docs/results/).
CHARTS: dict[str, tuple[str, ...]] = {
    "small-requests.svg": (
        SMALL_REQUESTS_PEERS,
        "2026-12-01-small-requests-variants-aiohttp-b63ebc2.json",
    ),
    "bulk-50mb.svg": ("2026-12-02-bulk-50mb-x-curl-3f14847.json",),
    "exactly-once-seed31.svg": ("2026-12-02-exactly-once-seed31.json",),
    "exactly-once-seed7.svg": ("2026-12-02-exactly-once-seed7.json",),
    "scale-10k-calls.svg": ("2026-12-06-scale-10k-calls-dd26e37.json",),
}

#: (run date, trio_retry's revision) of each throughput source: the runner's JSON records
#: neither the revision nor the command line (docs/benchmarks.md gives the command).
RUNS: dict[str, tuple[str, str]] = {
    SMALL_REQUESTS_PEERS: ("2026-12-06", "0a75674"),
    "2026-12-01-small-requests-variants-aiohttp-b63ebc2.json": ("2026-12-01", "b63ebc2"),
}

SCENARIO_LABELS = {
    "get_sequential": "HTTP/1.1, 1 connection",
    "get_concurrent_32": "HTTP/1.1, 32 connections",
    "get_concurrent_128": "HTTP/1.1, 128 connections",
    "download_64k": "HTTP/1.1, 64 KiB down",
    "upload_64k": "HTTP/1.1, 64 KiB up",
    "h1_tls_concurrent_32": "HTTP/1.1 TLS, 32 connections",
    "h2_tls_streams_32": "HTTP/2 TLS, 32 streams",
}
PROTOCOL_LABELS = {"h1": "HTTP/1.1", "h1_tls": "HTTP/1.1 over TLS", "h2_tls": "HTTP/2 over TLS"}
#: One colour per client on every chart.
COLOURS = {
    "trio_retry": "#1b6ca8",
    "httpx_trio": "#e07b39",
    "aiohttp": "#5a9e4b",
    "niquests": "#8e6bb8",
    "niquests_multiplexed": "#c4b0dd",
    "floor": "#9a9a9a",
    "limit": "#3d3d3d",
}


class ChartError(Exception):
    """A chart cannot be drawn: a source is missing or lacks what the chart needs."""


def _load(results: Path, name: str) -> dict[str, Any]:
    path = results / name
    if not path.is_file():
        raise ChartError(f"{path} not found (CHARTS names it as a source)")
    doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return doc


def _cpu_us(doc: dict[str, Any]) -> dict[tuple[str, str], float]:
    """(scenario, client) -> median client CPU per request in microseconds, for the rows that
    ran."""
    out: dict[tuple[str, str], float] = {}
    for row in doc["results"]:
        median = row.get("median") or {}
        cpu = median.get("cpu_ms_per_req")
        if row.get("status") == "ok" and cpu is not None:
            out[(row["scenario"], row["client"])] = cpu * 1000.0
    return out


def _floor(scenario: str) -> str:
    return "h2_trio" if scenario.startswith("h2_") else "h11_trio"


def _limit(scenario: str) -> str:
    return "h2load" if scenario.startswith("h2_") else "wrk"


def _bars(
    ax: Any,
    scenarios: list[str],
    series: list[tuple[str, str, list[float | None]]],
    *,
    fmt: str,
) -> None:
    """Grouped horizontal bars: one group per scenario, one bar per series (label, colour,
    values); a missing value leaves its slot empty."""
    height = 0.8 / len(series)
    for i, (_, colour, values) in enumerate(series):
        ys = [j + (i - (len(series) - 1) / 2) * height for j in range(len(scenarios))]
        shown = [(y, v) for y, v in zip(ys, values, strict=True) if v is not None]
        ax.barh([y for y, _ in shown], [v for _, v in shown], height=height, color=colour)
        for y, v in shown:
            ax.text(v, y, " " + fmt.format(v), va="center", fontsize=7)
    ax.set_yticks(range(len(scenarios)), [SCENARIO_LABELS.get(s, s) for s in scenarios])
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=8)
    _legend(ax, [(label, colour) for label, colour, _ in series])


def _legend(ax: Any, entries: list[tuple[str, str]]) -> None:
    """A legend under the axes, one coloured square per (label, colour)."""
    from matplotlib.patches import Patch

    ax.legend(
        handles=[Patch(color=colour, label=label) for label, colour in entries],
        fontsize=7,
        ncol=min(len(entries), 4),
        loc="upper center",
        bbox_to_anchor=(0.5, -0.13),
        frameon=False,
    )


def small_requests(plt: Any, sources: list[dict[str, Any]], names: tuple[str, ...]) -> Any:
    """Two panels: CPU per request against the peers (log scale), and against aiohttp and the
    bare loops, each titled with its run. A client the run did not measure has no bar and no
    legend entry."""
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.6))
    peers_doc, aiohttp_doc = sources
    cpu = _cpu_us(peers_doc)
    scenarios = [
        s
        for s in (
            "get_sequential",
            "get_concurrent_32",
            "h1_tls_concurrent_32",
            "h2_tls_streams_32",
        )
        if (s, "trio_retry") in cpu
    ]
    if not scenarios:
        raise ChartError(f"{names[0]} has no trio_retry row")
    peers = (
        ("trio_retry", "trio_retry"),
        ("httpx (Trio)", "httpx_trio"),
        ("aiohttp (no HTTP/2)", "aiohttp"),
        ("niquests", "niquests"),
        ("niquests multiplexed", "niquests_multiplexed"),
    )
    rows = [
        (label, COLOURS[name], [cpu.get((s, name)) for s in scenarios]) for label, name in peers
    ]
    rows.append(
        ("bare h11 / h2 loop", COLOURS["floor"], [cpu.get((s, _floor(s))) for s in scenarios])
    )
    rows.append(
        ("wrk / h2load (C)", COLOURS["limit"], [cpu.get((s, _limit(s))) for s in scenarios])
    )
    series = [row for row in rows if any(v is not None for v in row[2])]
    _bars(axes[0], scenarios, series, fmt="{:.0f}")
    axes[0].set_xscale("log")
    axes[0].set_xlabel("client CPU µs per request (log scale; lower is better)")
    date, revision = RUNS[names[0]]
    axes[0].set_title(f"against the peers\n{date}, trio_retry {revision}", fontsize=9)

    cpu = _cpu_us(aiohttp_doc)
    order = (
        "get_sequential",
        "get_concurrent_32",
        "get_concurrent_128",
        "download_64k",
        "upload_64k",
        "h1_tls_concurrent_32",
        "h2_tls_streams_32",
    )
    scenarios = [s for s in order if (s, "trio_retry") in cpu]
    if not scenarios:
        raise ChartError(f"{names[1]} has no trio_retry row")
    series = [
        ("trio_retry", COLOURS["trio_retry"], [cpu.get((s, "trio_retry")) for s in scenarios]),
        ("aiohttp (no HTTP/2)", COLOURS["aiohttp"], [cpu.get((s, "aiohttp")) for s in scenarios]),
        ("bare h11 / h2 loop", COLOURS["floor"], [cpu.get((s, _floor(s))) for s in scenarios]),
    ]
    _bars(axes[1], scenarios, series, fmt="{:.0f}")
    axes[1].set_xlabel("client CPU µs per request (lower is better)")
    date, revision = RUNS[names[1]]
    axes[1].set_title(
        f"against aiohttp and the bare loops\n{date}, trio_retry {revision}", fontsize=9
    )
    fig.suptitle(
        "Small GETs on loopback against nginx, medians of the runs (python -m benchmarks; "
        "2 vCPUs, server and client pinned)",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


def bulk(plt: Any, sources: list[dict[str, Any]], names: tuple[str, ...]) -> Any:
    """One group per protocol and direction, one bar per client: the mean of the runs' x curl,
    each run a dot; the line at 1.0 is curl."""
    (doc,) = sources
    cases = doc.get("cases") or []
    if not cases:
        raise ChartError(f"{names[0]} has no cases")
    clients = list(doc["clients"])
    fig, ax = plt.subplots(figsize=(11, 4.8))
    width = 0.8 / len(clients)
    for i, client in enumerate(clients):
        for j, case in enumerate(cases):
            runs = case["x_curl"].get(client)
            x = j + (i - (len(clients) - 1) / 2) * width
            if not runs:
                ax.text(x, 0.02, "no HTTP/2", rotation=90, fontsize=6, ha="center", va="bottom")
                continue
            mean = statistics.fmean(runs)
            ax.bar(x, mean, width=width, color=COLOURS[client])
            ax.plot([x] * len(runs), runs, "o", color="black", markersize=2.5)
            ax.text(x, max(runs) + 0.02, f"{mean:.2f}", ha="center", fontsize=6)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.text(len(cases) - 0.5, 1.01, "curl (C)", ha="right", va="bottom", fontsize=7)
    ax.set_xticks(
        range(len(cases)),
        [f"{c['direction']}\n{PROTOCOL_LABELS.get(c['protocol'], c['protocol'])}" for c in cases],
        fontsize=8,
    )
    ax.set_ylabel("MB/s over curl's in the same run (higher is better)", fontsize=8)
    _legend(ax, [(doc["clients"][client], COLOURS[client]) for client in clients])
    ax.set_title(
        f"50 MB in one request on loopback against nginx, {doc['date']}, trio_retry "
        f"{doc['revision']}\n{doc['command']}: bars the mean of {doc['runs']} runs, dots "
        "each run",
        fontsize=9,
    )
    fig.tight_layout()
    return fig


def scale(plt: Any, sources: list[dict[str, Any]], names: tuple[str, ...]) -> Any:
    """``benchmarks.scale``'s own figure (one panel per protocol), titled with its run."""
    from .scale_report import figure

    (doc,) = sources
    title = (
        f"{doc.get('started_at', doc.get('finished_at', ''))[:10]}, trio_retry "
        f"{doc['revision'].split()[-1]}: {doc['command']}"
    )
    fig = figure(plt, doc["rows"], doc["soaks"], title)
    if fig is None:
        raise ChartError(f"{names[0]} has no measured row")
    return fig


def _scoreboard(results: Path, out: Path, name: str, source: str) -> None:
    from .exactly_once.report import chart

    message = chart(_load(results, source), out / name)
    if message:
        raise ChartError(message)


DRAWERS: dict[str, Callable[[Any, list[dict[str, Any]], tuple[str, ...]], Any]] = {
    "small-requests.svg": small_requests,
    "bulk-50mb.svg": bulk,
    "scale-10k-calls.svg": scale,
}


def draw(name: str, results: Path = RESULTS, out: Path = OUT) -> Path:
    """Draw chart ``name`` (a key of :data:`CHARTS`) into ``out`` from its sources in
    ``results`` and return its path. Raises :class:`ChartError` when a source is missing or
    lacks what the chart needs (nothing is written then), ImportError without matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: small, diffable
    matplotlib.rcParams["svg.hashsalt"] = "trio_retry"  # the same ids on every redraw
    import matplotlib.pyplot as plt

    sources = CHARTS[name]
    path = out / name
    if name not in DRAWERS:
        _scoreboard(results, out, name, sources[0])
        return path
    docs = [_load(results, source) for source in sources]
    fig = DRAWERS[name](plt, docs, sources)
    try:
        out.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, metadata={"Date": None})
    finally:
        plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.charts",
        description="Draw the charts of docs/benchmarks.md from the results in docs/results/.",
    )
    p.add_argument("--results", type=Path, default=RESULTS, help="where the JSON results are")
    p.add_argument("--out", type=Path, default=OUT, help="where the charts go (default: docs/)")
    p.add_argument("--only", default="", help=f"a subset of: {', '.join(CHARTS)}")
    args = p.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or list(CHARTS)
    unknown = [n for n in names if n not in CHARTS]
    if unknown:
        p.error(f"--only: unknown chart {', '.join(unknown)}; known: {', '.join(CHARTS)}")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[bench]'): no chart", file=sys.stderr)
        return 2
    for name in names:
        try:
            print(draw(name, args.results, args.out))
        except ChartError as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
