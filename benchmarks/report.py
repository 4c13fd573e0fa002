"""Aggregation (medians over repeats, ratios to the baseline), the text table and the plot."""

from __future__ import annotations

import math
import statistics
from typing import Any

MEDIAN_KEYS = (
    "rps",
    "p50_ms",
    "p90_ms",
    "p99_ms",
    "cpu_ms_per_req",
    "client_cpu_util",
    "server_cpu_util",
    "foreign_cpu_util",
    "requests",
    "wall_s",
)


def _median(values: list[float]) -> float | None:
    clean = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(clean) if clean else None


def aggregate(
    runs: dict[tuple[str, str], list[dict[str, Any]]],
    skipped: dict[tuple[str, str], str],
    scenario_names: list[str],
    client_names: list[str],
    labels: dict[str, str],
    baseline: str,
) -> list[dict[str, Any]]:
    """One result per (scenario, client) pair, in table order, with medians and ratios."""
    results: list[dict[str, Any]] = []
    for scenario in scenario_names:
        for client in client_names:
            key = (scenario, client)
            entry: dict[str, Any] = {
                "scenario": scenario,
                "client": client,
                "label": labels[client],
                "status": "skipped",
                "note": skipped.get(key, ""),
                "runs": runs.get(key, []),
                "median": None,
                "spread_rps": None,
                "ratio_rps": None,
                "ratio_cpu": None,
                "noisy_runs": 0,
            }
            measured = entry["runs"]
            if key in skipped or not measured:
                if not entry["note"]:
                    entry["note"] = "not run"
                results.append(entry)
                continue
            failed = [r for r in measured if r.get("status") != "ok"]
            entry["status"] = "failed" if failed else "ok"
            entry["note"] = failed[0].get("note", "failed") if failed else ""
            ok = [r for r in measured if r.get("status") == "ok"]
            clean = [r for r in ok if not r.get("noisy")]
            ok = clean or ok  # medians from undisturbed runs whenever there is one
            if ok:
                median = {k: _median([r.get(k) for r in ok]) for k in MEDIAN_KEYS}
                median["errors"] = sum(int(r.get("errors", 0)) for r in measured)
                median["runs"] = len(ok)
                entry["noisy_runs"] = sum(1 for r in ok if r.get("noisy"))
                entry["median"] = median
                rps = [r["rps"] for r in ok]
                if len(rps) > 1 and median["rps"]:
                    entry["spread_rps"] = (max(rps) - min(rps)) / median["rps"]
            results.append(entry)
    by_key = {(r["scenario"], r["client"]): r for r in results}
    for r in results:
        base = by_key.get((r["scenario"], baseline))
        if r["median"] and base and base["status"] == "ok" and base["median"]:
            if base["median"]["rps"]:
                r["ratio_rps"] = r["median"]["rps"] / base["median"]["rps"]
            if base["median"]["cpu_ms_per_req"]:
                r["ratio_cpu"] = r["median"]["cpu_ms_per_req"] / base["median"]["cpu_ms_per_req"]
    return results


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec) + suffix


COLUMNS = (
    ("client", "<", 17),
    ("r/s", ">", 8),
    ("x httpx/Trio", ">", 12),
    ("p50 ms", ">", 8),
    ("p99 ms", ">", 8),
    ("CPU ms/req", ">", 10),
    ("CPU x httpx", ">", 11),
    ("srv CPU", ">", 7),
    ("spread", ">", 6),
)


def _row_cells(r: dict[str, Any]) -> list[str]:
    m = r["median"]
    if r["status"] == "skipped" or m is None:
        what = "skipped" if r["status"] == "skipped" else "FAILED"
        return [r["label"], f"{what}: {r['note']}"]
    cells = [
        r["label"],
        _fmt(m["rps"], ",.0f") + ("*" if r.get("noisy_runs") else ""),
        _fmt(r["ratio_rps"], ".2f", "x"),
        _fmt(m["p50_ms"], ".2f"),
        _fmt(m["p99_ms"], ".2f"),
        _fmt(m["cpu_ms_per_req"], ".3f"),
        _fmt(r["ratio_cpu"], ".2f", "x"),
        _fmt(None if m["server_cpu_util"] is None else m["server_cpu_util"] * 100, ".0f", "%"),
        _fmt(None if r["spread_rps"] is None else r["spread_rps"] * 100, ".0f", "%"),
    ]
    if r["status"] == "failed":
        cells[0] += " (FAILED)"
    return cells


def render_text(results: list[dict[str, Any]], scenarios: dict[str, dict[str, Any]]) -> str:
    lines: list[str] = []
    header = "  ".join(f"{name:{align}{width}}" for name, align, width in COLUMNS)
    for name, info in scenarios.items():
        rows = [r for r in results if r["scenario"] == name]
        if not rows:
            continue
        lines.append("")
        lines.append(f"{name}: {info['title']} (concurrency {info['concurrency']})")
        lines.append("  " + header)
        for r in rows:
            cells = _row_cells(r)
            if len(cells) == 2:
                lines.append(f"  {cells[0]:<17}  {cells[1]}")
                continue
            lines.append(
                "  "
                + "  ".join(
                    f"{c:{align}{width}}"
                    for c, (_, align, width) in zip(cells, COLUMNS, strict=True)
                )
            )
    return "\n".join(lines)


def render_markdown(results: list[dict[str, Any]], scenarios: dict[str, dict[str, Any]]) -> str:
    head = ["scenario"] + [c[0] for c in COLUMNS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        cells = _row_cells(r)
        if len(cells) == 2:
            cells = [cells[0], cells[1]] + [""] * (len(COLUMNS) - 2)
        lines.append("| " + " | ".join([r["scenario"], *cells]) + " |")
    return "\n".join(lines)


def plot(
    results: list[dict[str, Any]],
    scenario_names: list[str],
    client_names: list[str],
    labels: dict[str, str],
    path: str,
    title: str,
) -> str:
    """Draw grouped bars (r/s and CPU ms/request). Returns a message for the user."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return (
            f"plot not written: matplotlib is not installed "
            f"(pip install -e '.[bench]'); wanted {path}"
        )
    by_key = {(r["scenario"], r["client"]): r for r in results}
    clients = [c for c in client_names if any(by_key[(s, c)]["median"] for s in scenario_names)]
    scenarios = [s for s in scenario_names if any(by_key[(s, c)]["median"] for c in clients)]
    if not clients or not scenarios:
        return "plot not written: nothing was measured"
    fig, axes = plt.subplots(1, 2, figsize=(15, 1.1 * len(scenarios) + 2.5), sharey=True)
    height = 0.8 / len(clients)
    colours = {name: f"C{i}" for i, name in enumerate(labels)}  # stable across runs
    for i, client in enumerate(clients):
        ys = [j + (i - (len(clients) - 1) / 2) * height for j in range(len(scenarios))]
        rps = []
        cpu = []
        for s in scenarios:
            m = by_key[(s, client)]["median"]
            rps.append(m["rps"] if m else 0.0)
            cpu.append(m["cpu_ms_per_req"] if m else 0.0)
        colour = colours[client]
        axes[0].barh(ys, rps, height=height, label=labels[client], color=colour)
        axes[1].barh(ys, cpu, height=height, label=labels[client], color=colour)
        for y, s in zip(ys, scenarios, strict=True):
            ratio = by_key[(s, client)]["ratio_rps"]
            m = by_key[(s, client)]["median"]
            if ratio is not None and m:
                axes[0].text(m["rps"], y, f" {ratio:.2f}x", va="center", fontsize=7)
    axes[0].set_yticks(range(len(scenarios)))
    axes[0].set_yticklabels(scenarios)
    axes[0].invert_yaxis()
    axes[0].set_xscale("log")
    axes[0].set_xlabel("requests/s (log; labels: ratio to httpx on Trio)")
    axes[1].set_xlabel("client CPU ms per request (= CPU s per 1000 requests)")
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=len(clients), fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot written to {path}"
