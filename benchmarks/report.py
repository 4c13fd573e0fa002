"""Aggregation (medians over repeats, ratios to the baseline), the text table and the plot.

The throughput suite's table is fixed (``COLUMNS``). Other suites describe theirs in their
scenario JSON (``columns``: title, key into the summary, format), and how their runs combine
(``summary``: key -> "median", "max", "min", "sum" or "first").
"""

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


def _combine(how: str, values: list[Any]) -> Any:
    if how == "first":
        return next((v for v in values if v is not None), None)
    clean = [v for v in values if isinstance(v, int | float) and not math.isnan(v)]
    if not clean:
        return None
    if how == "max":
        return max(clean)
    if how == "min":
        return min(clean)
    if how == "sum":
        return sum(clean)
    return statistics.median(clean)


def aggregate(
    runs: dict[tuple[str, str], list[dict[str, Any]]],
    skipped: dict[tuple[str, str], str],
    scenario_names: list[str],
    client_names: list[str],
    labels: dict[str, str],
    baseline: str,
    summaries: dict[str, dict[str, str]] | None = None,
) -> list[dict[str, Any]]:
    """One result per (scenario, client) pair, in table order, with medians and ratios.

    ``summaries`` maps a scenario to how its keys combine over runs (default: the medians of
    ``MEDIAN_KEYS``); the combined values are the result's ``median`` either way.
    """
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
            summary = (summaries or {}).get(scenario)
            if ok and summary is not None:
                median = {k: _combine(how, [r.get(k) for r in ok]) for k, how in summary.items()}
                median["errors"] = sum(int(r.get("errors", 0)) for r in measured)
                median["runs"] = len(ok)
                entry["noisy_runs"] = sum(1 for r in ok if r.get("noisy"))
                entry["median"] = median
            elif ok:
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
            if base["median"].get("rps") and r["median"].get("rps") is not None:
                r["ratio_rps"] = r["median"]["rps"] / base["median"]["rps"]
            if (
                base["median"].get("cpu_ms_per_req")
                and r["median"].get("cpu_ms_per_req") is not None
            ):
                r["ratio_cpu"] = r["median"]["cpu_ms_per_req"] / base["median"]["cpu_ms_per_req"]
    return results


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec) + suffix


COLUMNS = (
    ("client", "<", 25),
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


LABEL_WIDTH = 33  # suites with their own columns label rows "httpx + tenacity-style loop" etc.


def _columns(info: dict[str, Any]) -> tuple[tuple[str, str, int], ...]:
    """(title, alignment, width) of each column of a scenario's table."""
    custom = info.get("columns")
    if custom is None:
        return COLUMNS
    return (("client", "<", LABEL_WIDTH), *((c["title"], ">", c["width"]) for c in custom))


def _label(r: dict[str, Any], info: dict[str, Any]) -> str:
    label: str = info.get("client_labels", {}).get(r["client"], r["label"])
    return label


def _custom_cells(r: dict[str, Any], info: dict[str, Any]) -> list[str]:
    m = r["median"]
    if r["status"] == "skipped" or m is None:
        what = "skipped" if r["status"] == "skipped" else "FAILED"
        return [_label(r, info), f"{what}: {r['note']}"]
    cells = [_label(r, info) + (" (FAILED)" if r["status"] == "failed" else "")]
    for c in info["columns"]:
        value = m.get(c["key"])
        if isinstance(value, str):
            cells.append(value)
        elif isinstance(value, int | float) and not math.isnan(value):
            cells.append(format(value * c["scale"], c["spec"]) + c["suffix"])
        else:
            cells.append("-")
    if r.get("noisy_runs") and len(cells) > 1:
        cells[1] += "*"
    return cells


def _cells(r: dict[str, Any], info: dict[str, Any]) -> list[str]:
    return _custom_cells(r, info) if info.get("columns") is not None else _row_cells(r)


def _shown(rows: list[dict[str, Any]], info: dict[str, Any]) -> list[dict[str, Any]]:
    """A suite with its own columns shows only the clients it applies to."""
    if info.get("columns") is None or "clients" not in info:
        return rows
    return [r for r in rows if r["client"] in info["clients"]]


def _details(rows: list[dict[str, Any]], info: dict[str, Any]) -> list[str]:
    """Extra lines a suite attached to its runs (``details``), from each row's first run."""
    out: list[str] = []
    for r in rows:
        runs = r["runs"]
        which = f" (run 1 of {len(runs)})" if len(runs) > 1 else ""
        for run in runs[:1]:
            for line in run.get("details") or ():
                out.append(f"{_label(r, info)}{which}: {line}")
    return out


def render_text(results: list[dict[str, Any]], scenarios: dict[str, dict[str, Any]]) -> str:
    lines: list[str] = []
    for name, info in scenarios.items():
        rows = _shown([r for r in results if r["scenario"] == name], info)
        if not rows:
            continue
        columns = _columns(info)
        label_width = columns[0][2]
        heading = info.get("heading") or f"{info['title']} (concurrency {info['concurrency']})"
        lines.append("")
        lines.append(f"{name}: {heading}")
        lines.append("  " + "  ".join(f"{title:{align}{width}}" for title, align, width in columns))
        for r in rows:
            cells = _cells(r, info)
            if len(cells) == 2:
                lines.append(f"  {cells[0]:<{label_width}}  {cells[1]}")
                continue
            pairs = zip(cells, columns, strict=True)
            lines.append("  " + "  ".join(f"{c:{align}{width}}" for c, (_, align, width) in pairs))
        lines.extend("  " + line for line in _details(rows, info))
    return "\n".join(lines)


def render_markdown(results: list[dict[str, Any]], scenarios: dict[str, dict[str, Any]]) -> str:
    """One Markdown table for the throughput suite, then one per scenario of other suites."""
    tables: list[str] = []
    plain = [r for r in results if scenarios.get(r["scenario"], {}).get("columns") is None]
    if plain:
        head = ["scenario"] + [c[0] for c in COLUMNS]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in plain:
            cells = _row_cells(r)
            if len(cells) == 2:
                cells = [cells[0], cells[1]] + [""] * (len(COLUMNS) - 2)
            lines.append("| " + " | ".join([r["scenario"], *cells]) + " |")
        tables.append("\n".join(lines))
    for name, info in scenarios.items():
        if info.get("columns") is None:
            continue
        rows = _shown([r for r in results if r["scenario"] == name], info)
        if not rows:
            continue
        head = [c[0] for c in _columns(info)]
        lines = [f"`{name}`: {info.get('heading') or info['title']}", ""]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in rows:
            cells = _custom_cells(r, info)
            if len(cells) == 2:
                cells = [cells[0], cells[1]] + [""] * (len(head) - 2)
            lines.append("| " + " | ".join(cells) + " |")
        lines += [""] + [f"- {line}" for line in _details(rows, info)]
        tables.append("\n".join(lines).rstrip())
    return "\n\n".join(tables)


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
    # Only scenarios measured in requests per second (the throughput suite).
    scenario_names = [
        s
        for s in scenario_names
        if any((by_key[(s, c)]["median"] or {}).get("rps") is not None for c in client_names)
    ]
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
