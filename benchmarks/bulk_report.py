"""The table of ``python -m benchmarks.bulk``: one row per protocol, direction and client, from
the medians of its runs (CPU per MB, ratios to curl), as text and as Markdown."""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks.bulk_cases import (
    BASELINE,
    BY_NAME,
    DIRECTIONS,
    MB,
    PROTOCOL_TITLES,
    PROTOCOLS,
    SMALL,
)


def _median(values: list[float | None]) -> float | None:
    clean = [v for v in values if v is not None]
    return statistics.median(clean) if clean else None


def summarise(
    runs: list[dict[str, Any]], size: int, skipped: dict[tuple[str, str, str], str]
) -> list[dict[str, Any]]:
    """One row per (protocol, direction, client): medians, per-MB CPU, ratios to curl."""
    rows: list[dict[str, Any]] = []
    keys = sorted(
        {(r["protocol"], r["direction"], r["client"]) for r in runs} | set(skipped),
        key=lambda k: (PROTOCOLS.index(k[0]), DIRECTIONS.index(k[1]), list(BY_NAME).index(k[2])),
    )
    for protocol, direction, client in keys:
        row: dict[str, Any] = {
            "protocol": protocol,
            "direction": direction,
            "client": client,
            "label": BY_NAME[client].label,
            "status": "skipped",
            "note": skipped.get((protocol, direction, client), ""),
        }
        rows.append(row)
        mine = [
            r
            for r in runs
            if (r["protocol"], r["direction"], r["client"]) == (protocol, direction, client)
        ]
        if not mine:
            continue
        big = [r for r in mine if r["size"] == size]
        small = [r for r in mine if r["size"] == SMALL]
        failed = [r for r in mine if not r["ok"]]
        if any(r["unavailable"] for r in mine):
            row["note"] = next(r["note"] for r in mine if r["unavailable"])
            continue
        row["status"] = "failed" if failed else "ok"
        row["note"] = failed[0]["note"] if failed else big[0]["note"] if big else ""
        good_big = [r for r in big if r["ok"]]
        good_small = [r for r in small if r["ok"]]
        wall = _median([r["wall_s"] for r in good_big])
        cpu_big = _median([r["cpu_s"] for r in good_big])
        cpu_small = _median([r["cpu_s"] for r in good_small])
        cpu_per_mb = (
            (cpu_big - cpu_small) / (size / MB)
            if cpu_big is not None and cpu_small is not None
            else None
        )
        busy = cpu_per_mb * size / MB / wall if cpu_per_mb is not None and wall else None
        row.update(
            busy=busy,
            wall_s=wall,
            mb_s=size / MB / wall if wall else None,
            cpu_s_per_mb=cpu_per_mb,
            cpu_transfer_s=_median([r["cpu_transfer_s"] for r in good_big]),
            rss_mb=_median([r["rss_mb"] for r in good_big]),
            rss_1k_mb=_median([r["rss_mb"] for r in good_small]),
            runs=len(good_big),
        )
    base = {
        (r["protocol"], r["direction"]): r
        for r in rows
        if r["client"] == BASELINE and r["status"] == "ok"
    }
    for r in rows:
        b = base.get((r["protocol"], r["direction"]))
        ok = b is not None and r["status"] == "ok"
        r["x_curl_mb_s"] = _ratio(r.get("mb_s"), b.get("mb_s")) if ok and b else None
        r["x_curl_cpu"] = _ratio(r.get("cpu_s_per_mb"), b.get("cpu_s_per_mb")) if ok and b else None
    return rows


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else format(value, spec) + suffix


COLUMNS = (
    ("client", 22),
    ("wall s", 7),
    ("MB/s", 7),
    ("x curl", 7),
    ("CPU s/MB", 9),
    ("CPU x curl", 10),
    ("busy", 5),
    ("RSS MB", 7),
    ("1 KB RSS", 8),
)


def _cells(r: dict[str, Any]) -> list[str]:
    if r["status"] != "ok":
        what = "skipped" if r["status"] == "skipped" else "FAILED"
        return [r["label"], f"{what}: {r['note']}"]
    return [
        r["label"],
        _fmt(r["wall_s"], ".3f"),
        _fmt(r["mb_s"], ",.0f"),
        _fmt(r["x_curl_mb_s"], ".2f", "x"),
        _fmt(r["cpu_s_per_mb"], ".5f"),
        _fmt(r["x_curl_cpu"], ".1f", "x"),
        _fmt(None if r["busy"] is None else r["busy"] * 100, ".0f", "%"),
        _fmt(r["rss_mb"], ".1f"),
        _fmt(r["rss_1k_mb"], ".1f"),
    ]


def _text_line(cells: list[str]) -> str:
    """The label left-aligned, the figures right-aligned, in the widths of ``COLUMNS``."""
    first, *rest = zip(cells, COLUMNS, strict=True)
    return "  " + "  ".join(
        [f"{first[0]:<{first[1][1]}}", *(f"{c:>{width}}" for c, (_, width) in rest)]
    )


def render_text(rows: list[dict[str, Any]], size: int) -> str:
    lines: list[str] = []
    for protocol in PROTOCOLS:
        for direction in DIRECTIONS:
            mine = [r for r in rows if (r["protocol"], r["direction"]) == (protocol, direction)]
            if not mine:
                continue
            lines += ["", f"{direction} of {size / MB:g} MB, {PROTOCOL_TITLES[protocol]}"]
            lines.append(_text_line([title for title, _ in COLUMNS]))
            for r in mine:
                cells = _cells(r)
                if len(cells) == 2:
                    lines.append(f"  {cells[0]:<{COLUMNS[0][1]}}  {cells[1]}")
                else:
                    lines.append(_text_line(cells))
            notes = {r["label"]: r["note"] for r in mine if r["status"] == "ok" and r["note"]}
            lines += [f"  {label}: {note}" for label, note in notes.items()]
    return "\n".join(lines)


def render_markdown(rows: list[dict[str, Any]], size: int) -> str:
    head = ["case", *(t for t, _ in COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        case = f"{r['direction']} {PROTOCOL_TITLES[r['protocol']]}"
        cells = _cells(r)
        if len(cells) == 2:
            cells += [""] * (len(COLUMNS) - 2)
        lines.append("| " + " | ".join([case, *cells]) + " |")
    return "\n".join(lines)
