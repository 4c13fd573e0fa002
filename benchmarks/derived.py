"""Figures derived from one run's medians: trio_retry against the floors and aiohttp, what each
option costs, and the performance issue's (#16) targets.

All figures compare medians measured in the same run (see docs/benchmarks.md, "Derived figures").
A ratio is ``a ÷ b`` of two rows of one scenario: in r/s (higher is better for ``a``) and in CPU
per request (lower is better for ``a``). An option's cost is the difference of two rows' CPU per
request, in microseconds: two medians of separate worker processes, so a few microseconds of it
can be noise; ``python -m benchmarks.profile`` measures such a difference A/B-interleaved in one
process when it matters.

Each r/s ratio also comes *paired by repeat*: the two rows' runs of the same repeat (which ran
one after the other, the client order rotating between repeats) give one ratio each, and their
range says how far the machine's drift moved the figure. A target's verdict is that of the
ratio of medians; ``paired_met`` says in how many repeats the paired ratio met it as well.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile of an already sorted list (q in [0, 100]); NaN when
    empty. Shared by the Python rows (:mod:`benchmarks.scenarios.throughput`) and the C load
    generators (:mod:`benchmarks.loadgen`), so both rows of a table are read the same way."""
    if not sorted_values:
        return float("nan")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] * (1 - frac) + sorted_values[hi] * frac


FLOOR_H1 = "h11_trio"
FLOOR_H2 = "h2_trio"
#: The raw Trio loop (HTTP/1.1 only): the floor under the floors, no parsing at all.
FLOOR_RAW = "trio_raw"


@dataclass(frozen=True)
class Ratio:
    """``num ÷ den`` in one scenario; ``den`` None means the scenario's floor."""

    key: str
    title: str  # column title
    num: str
    den: str | None
    h1_only: bool = False


RATIOS = (
    Ratio("trio_retry/floor", "ours/floor", "trio_retry", None),
    Ratio("trio_retry/aiohttp", "ours/aiohttp", "trio_retry", "aiohttp", h1_only=True),
    Ratio("no_fast/h11", "off/h11", "trio_retry_no_fast", FLOOR_H1, h1_only=True),
    Ratio("trio_retry/no_fast", "on/off", "trio_retry", "trio_retry_no_fast", h1_only=True),
    Ratio("trio_retry/raw", "ours/raw", "trio_retry", FLOOR_RAW, h1_only=True),
    Ratio("h11/raw", "h11/raw", FLOOR_H1, FLOOR_RAW, h1_only=True),
)

# Rows whose extra CPU per request over the trio_retry row is "what the option costs".
COSTS = (
    ("trio_retry_deadline", "+deadline"),
    ("trio_retry_call_deadline", "+get(dl)"),
    ("trio_retry_on_attempt", "+on_att"),
    ("trio_retry_bulkhead", "+bulkh"),
    ("trio_retry_no_fast", "fast off"),
    ("trio_retry_sslstream", "SSLStream"),
)

# The issue's four cases (sequential, 32 concurrent, TLS at 32; HTTP/2 at 32 streams).
ISSUE_H1_CASES = ("get_sequential", "get_concurrent_32", "h1_tls_concurrent_32")
ISSUE_H2_CASE = "h2_tls_streams_32"
DEADLINE_CASES = (*ISSUE_H1_CASES, ISSUE_H2_CASE)
DEADLINE_LIMIT_US = 5.0


def _is_h2(info: dict[str, Any]) -> bool:
    return str(info.get("endpoint", "")).startswith("h2")


def _div(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0 or math.isnan(a) or math.isnan(b):
        return None
    return a / b


def derive(results: list[dict[str, Any]], scenarios: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``{"scenarios": {name: figures}, "targets": [...]}`` for the throughput-like scenarios.

    Per scenario: ``floor`` (the bare loop of its protocol), ``ratios`` (key -> {"num", "den",
    "rps", "cpu"}: r/s and CPU-per-request ratios, None when a row is missing) and ``cost_us``
    (row -> its CPU us/request minus trio_retry's). Missing rows give None, never an error."""
    medians: dict[tuple[str, str], dict[str, Any]] = {
        (r["scenario"], r["client"]): r["median"]
        for r in results
        if r["status"] == "ok" and r.get("median")
    }
    # r/s of each repeat, by (scenario, client) -> {repeat: rps}
    by_repeat: dict[tuple[str, str], dict[int, float]] = {}
    for r in results:
        if r["status"] == "ok":
            for run in r.get("runs") or ():
                rps, rep = run.get("rps"), run.get("repeat")
                if (
                    run.get("status", "ok") == "ok"
                    and isinstance(rps, int | float)
                    and rep is not None
                ):
                    by_repeat.setdefault((r["scenario"], r["client"]), {})[int(rep)] = rps

    def paired(scenario: str, num: str, den: str) -> list[float]:
        a, b = by_repeat.get((scenario, num), {}), by_repeat.get((scenario, den), {})
        return [a[rep] / b[rep] for rep in sorted(a.keys() & b.keys()) if b[rep]]

    def value(scenario: str, client: str, key: str) -> float | None:
        m = medians.get((scenario, client))
        v = None if m is None else m.get(key)
        return v if isinstance(v, int | float) else None

    out: dict[str, Any] = {}
    for name, info in scenarios.items():
        if info.get("columns") is not None:
            continue  # another suite: no r/s
        h2 = _is_h2(info)
        floor = FLOOR_H2 if h2 else FLOOR_H1
        ratios: dict[str, Any] = {}
        for ratio in RATIOS:
            if ratio.h1_only and h2:
                continue
            den = ratio.den or floor
            ratios[ratio.key] = {
                "num": ratio.num,
                "den": den,
                "rps": _div(value(name, ratio.num, "rps"), value(name, den, "rps")),
                "cpu": _div(
                    value(name, ratio.num, "cpu_ms_per_req"), value(name, den, "cpu_ms_per_req")
                ),
                "rps_by_repeat": paired(name, ratio.num, den),
            }
        base = value(name, "trio_retry", "cpu_ms_per_req")
        costs: dict[str, float | None] = {}
        for client, _title in COSTS:
            cpu = value(name, client, "cpu_ms_per_req")
            if cpu is not None or (name, client) in medians:
                costs[client] = None if cpu is None or base is None else (cpu - base) * 1e3
        out[name] = {"floor": floor, "http2": h2, "ratios": ratios, "cost_us": costs}
    return {"scenarios": out, "targets": targets(out)}


def _target(
    what: str,
    scenario: str,
    measured: float | None,
    limit: float,
    at_least: bool,
    unit: str,
    by_repeat: list[float] | None = None,
) -> dict[str, Any]:
    def meets(v: float) -> bool:
        return v >= limit if at_least else v <= limit

    repeats = by_repeat or []
    return {
        "target": what,
        "scenario": scenario,
        "measured": measured,
        "limit": limit,
        "at_least": at_least,
        "unit": unit,
        "met": None if measured is None else meets(measured),
        "by_repeat": repeats,
        "paired_met": sum(map(meets, repeats)),
    }


def targets(derived: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets, one row per (target, scenario) present in the run."""
    rows: list[dict[str, Any]] = []

    def ratio(what: str, scenario: str, key: str, limit: float) -> dict[str, Any]:
        r = derived[scenario]["ratios"].get(key)
        measured = None if r is None else r["rps"]
        repeats = None if r is None else r.get("rps_by_repeat")
        return _target(what, scenario, measured, limit, True, "x", repeats)

    for s in ISSUE_H1_CASES:
        if s in derived:
            rows.append(ratio(">= 0.9x bare h11, fast path off (r/s)", s, "no_fast/h11", 0.9))
    for s, d in derived.items():
        if not d["http2"]:
            rows.append(ratio(">= 1.0x aiohttp, fast path on (r/s)", s, "trio_retry/aiohttp", 1.0))
    if ISSUE_H2_CASE in derived:
        rows.append(ratio(">= 0.95x bare h2 (r/s)", ISSUE_H2_CASE, "trio_retry/floor", 0.95))
    for client, how in (
        ("trio_retry_deadline", "Client(deadline=30)"),
        ("trio_retry_call_deadline", "get(url, deadline=30)"),
    ):
        for s in DEADLINE_CASES:
            if s in derived and client in derived[s]["cost_us"]:
                what = f"deadline <= 5 us/req, {how} (CPU over defaults)"
                cost = derived[s]["cost_us"][client]
                rows.append(_target(what, s, cost, DEADLINE_LIMIT_US, False, "us"))
    return rows


def _fmt(v: float | None, spec: str, suffix: str = "") -> str:
    return "-" if v is None else format(v, spec) + suffix


def _pair(r: dict[str, Any] | None) -> str:
    if r is None:
        return ""
    return f"{_fmt(r['rps'], '.2f', 'x')} {_fmt(r['cpu'], '.2f', 'x')}"


def _verdict(t: dict[str, Any]) -> str:
    return {True: "met", False: "NOT met", None: "not measured"}[t["met"]]


def _measured(t: dict[str, Any]) -> str:
    if t["unit"] == "x":
        return _fmt(t["measured"], ".2f", "x")
    return _fmt(t["measured"], "+.1f", " us")


def _by_repeat(t: dict[str, Any]) -> str:
    """The paired ratios' range and how many repeats met the target: ``0.80-1.13x, 2/3``."""
    repeats = t.get("by_repeat") or []
    if not repeats:
        return "-"
    return f"{min(repeats):.2f}-{max(repeats):.2f}x, {t['paired_met']}/{len(repeats)}"


def render_text(derived: dict[str, Any]) -> str:
    scen = derived["scenarios"]
    if not scen:
        return ""
    lines = [
        "",
        "derived (issue #16), from this run's medians: ratios as 'r/s-ratio CPU-ratio' (a/b: r/s "
        "higher is better for a, CPU lower);",
        "floor = bare h11, or bare h2 over HTTP/2; off = trio_retry fast path off; raw = the raw "
        "Trio loop (no parsing);",
        "last columns: CPU us/req over the trio_retry row",
    ]
    head = f"  {'scenario':22}" + "".join(f"{r.title:>14}" for r in RATIOS)
    head += "".join(f"{title:>10}" for _, title in COSTS)
    lines.append(head)
    for name, d in scen.items():
        row = f"  {name:22}" + "".join(f"{_pair(d['ratios'].get(r.key)):>14}" for r in RATIOS)
        row += "".join(
            f"{(_fmt(d['cost_us'][c], '+.1f') if c in d['cost_us'] else ''):>10}" for c, _ in COSTS
        )
        lines.append(row)
    if derived["targets"]:
        lines.append("")
        lines.append(
            "issue #16 targets (benchmarks, not tests); by repeat: the paired ratios' range, "
            "repeats that met it"
        )
        for t in derived["targets"]:
            lines.append(
                f"  {t['target']:63} {t['scenario']:22} {_measured(t):>10}  "
                f"{_by_repeat(t):>16}  {_verdict(t)}"
            )
    return "\n".join(lines)


def render_markdown(derived: dict[str, Any]) -> str:
    scen = derived["scenarios"]
    if not scen:
        return ""
    head = ["scenario", *(f"{r.title} (r/s, CPU)" for r in RATIOS)]
    head += [f"{title} (us)" for _, title in COSTS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, d in scen.items():
        cells = [name]
        for r in RATIOS:
            ratio = d["ratios"].get(r.key)
            cells.append(
                ""
                if ratio is None
                else f"{_fmt(ratio['rps'], '.2f', 'x')}, {_fmt(ratio['cpu'], '.2f', 'x')}"
            )
        for c, _ in COSTS:
            cells.append(_fmt(d["cost_us"][c], "+.1f") if c in d["cost_us"] else "")
        lines.append("| " + " | ".join(cells) + " |")
    out = "\n".join(lines)
    if derived["targets"]:
        rows = ["| target | scenario | measured | by repeat | |", "|---|---|---|---|---|"]
        for t in derived["targets"]:
            rows.append(
                f"| {t['target']} | {t['scenario']} | {_measured(t)} | {_by_repeat(t)} "
                f"| {_verdict(t)} |"
            )
        out += "\n\n" + "\n".join(rows)
    return out
