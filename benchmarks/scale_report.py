"""The figures of ``benchmarks/scale.py``: the ratio to the reference case, the text table, the
chart (matplotlib, SVG). No measuring here."""

from __future__ import annotations

from typing import Any

__all__ = ["PROTOCOL_TITLES", "chart", "figure", "render_text", "summarise"]

PROTOCOL_TITLES = {
    "h1": "HTTP/1.1 (nginx)",
    "h2": "HTTP/2 over TLS (nginx)",
    "h3": "HTTP/3 (caddy)",
}
#: issue #41's targets: CPU per call at 10,000 at most this many times that at 1,000.
CPU_TARGET = 1.3


def summarise(runs: list[dict[str, Any]], reference: int) -> list[dict[str, Any]]:
    """The rows, each measured one with ``x_ref``: its CPU per call over the same client's at
    ``reference`` calls (through as many connections) in the same protocol, or None."""
    refs = {
        (r["protocol"], r["client"]): r["cpu_us_per_call"]
        for r in runs
        if r.get("status") == "ok" and r["calls"] == reference == r["connections"]
    }
    rows = []
    for run in runs:
        row = dict(run)
        ref = refs.get((run["protocol"], run["client"]))
        ok = run.get("status") == "ok" and ref
        row["x_ref"] = run["cpu_us_per_call"] / ref if ok else None
        rows.append(row)
    return rows


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else format(value, spec) + suffix


def _cells(row: dict[str, Any]) -> list[str]:
    return [
        row["case"],
        row["client"],
        _fmt(row.get("cpu_us_per_call"), ",.1f"),
        _fmt(row.get("system_us_per_call"), ",.1f"),
        _fmt(row.get("gc_us_per_call"), ",.1f"),
        _fmt(row.get("x_ref"), ".2f", "x"),
        _fmt(row.get("wall_s"), ".2f"),
        _fmt(row.get("peak_rss_mb"), ".1f"),
        _fmt(row.get("kib_per_connection"), ".1f"),
        _fmt(row.get("held_connections"), "d"),
    ]


HEAD = (
    "calls",
    "client",
    "CPU us/call",
    "of it sys",
    "of it gc",
    "x ref",
    "wall s",
    "peak RSS MB",
    "KiB/conn",
    "held",
)
WIDTHS = (11, 14, 11, 9, 8, 7, 8, 11, 8, 6)


def _line(cells: list[str]) -> str:
    return "  " + "  ".join(
        f"{c:<{w}}" if i < 2 else f"{c:>{w}}"
        for i, (c, w) in enumerate(zip(cells, WIDTHS, strict=True))
    )


def render_text(rows: list[dict[str, Any]], soaks: list[dict[str, Any]], reference: int) -> str:
    lines: list[str] = []
    for protocol, title in PROTOCOL_TITLES.items():
        mine = [r for r in rows if r["protocol"] == protocol]
        if not mine:
            continue
        lines += ["", title, _line(list(HEAD))]
        for r in mine:
            if r["status"] == "ok":
                lines.append(_line(_cells(r)))
            else:
                lines.append(f"  {r['case']:<11}  {r['client']:<14}  {r['status']}: {r['note']}")
    lines += [
        "",
        "CPU us/call: the client process's CPU time over the bursts, per call (of it: in the "
        "kernel, in the cyclic garbage collector);",
        f"x ref: over the same client's at {reference:,} calls; wall s: one burst's;",
        "KiB/conn: RSS with the connections idle in the pool, less RSS before the burst, per "
        "socket gained (100 or more).",
    ]
    lines += _targets(rows)
    for soak in soaks:
        lines += ["", _soak_line(soak)]
    return "\n".join(lines)


def _targets(rows: list[dict[str, Any]]) -> list[str]:
    """issue #41's targets, as this run measured them (trio_retry)."""
    out: list[str] = []
    for r in rows:
        if r["client"] == "trio_retry" and r["x_ref"] is not None and r["calls"] >= 10_000:
            if r["calls"] == r["connections"]:
                verdict = "met" if r["x_ref"] <= CPU_TARGET else "NOT met"
                out.append(
                    f"target {r['protocol']} {r['case']}: {r['x_ref']:.2f}x the CPU per call of "
                    f"the reference (<= {CPU_TARGET}x): {verdict}"
                )
    ours = {r["case"]: r for r in rows if r["protocol"] == "h1" and r["client"] == "trio_retry"}
    theirs = {r["case"]: r for r in rows if r["protocol"] == "h1" and r["client"] == "aiohttp"}
    for case, mine in ours.items():
        other = theirs.get(case)
        a = mine.get("kib_per_connection")
        b = other.get("kib_per_connection") if other else None
        if a is not None and b is not None and mine["calls"] >= 10_000:
            verdict = "met" if a <= b else "NOT met"
            out.append(
                f"target h1 {case}: {a:.1f} KiB per held connection, aiohttp {b:.1f}: {verdict}"
            )
    return ["", *out] if out else []


def _soak_line(soak: dict[str, Any]) -> str:
    head = f"soak {soak['protocol']} {soak['client']}: "
    if soak["status"] != "ok":
        return head + f"{soak['status']}: {soak['note']}"
    rss, fds = soak["rss_mb"], soak["fds"]
    growth = (
        f"RSS {rss['after_warmup']} -> {rss['end']} MB ({rss['growth_per_min']:+} MB/min), "
        f"fds {fds['after_warmup']:.0f} -> {fds['end']:.0f}"
        if "end" in rss and "end" in fds
        else rss.get("note", "")
    )
    return (
        head + f"{soak['calls']:,} calls at {soak['achieved_rate']:.0f}/s "
        f"({soak['cpu_us_per_call']:.0f} us CPU each, {soak['late_calls']} late, at most "
        f"{soak['late_max_s']:.2f} s); {growth}"
    )


def figure(plt: Any, rows: list[dict[str, Any]], soaks: list[dict[str, Any]], title: str) -> Any:
    """CPU per call against calls, one panel per protocol (a case through few connections, the
    20,000@50 kind, as a hollow marker), and, after a soak, its RSS and descriptors over time;
    ``None`` when nothing was measured."""
    protocols = [p for p in PROTOCOL_TITLES if any(r["protocol"] == p for r in rows)]
    measured = [s for s in soaks if s["status"] == "ok" and s.get("samples")]
    panels = len(protocols) + (1 if measured else 0)
    if not panels:
        return None
    fig, axes = plt.subplots(1, panels, figsize=(4.2 * panels, 3.8), squeeze=False)
    clients = list(dict.fromkeys(r["client"] for r in rows))
    colours = {c: f"C{i}" for i, c in enumerate(clients)}
    for ax, protocol in zip(axes[0], protocols, strict=False):
        for client in clients:
            ok = [
                r
                for r in rows
                if r["protocol"] == protocol and r["client"] == client and r["status"] == "ok"
            ]
            points = sorted((r["calls"], r["cpu_us_per_call"], r["connections"]) for r in ok)
            wide = [(x, y) for x, y, c in points if c == x]
            narrow = [(x, y) for x, y, c in points if c != x]
            if wide:
                ax.plot(*zip(*wide, strict=True), "o-", color=colours[client], label=client)
            if narrow:
                ax.plot(*zip(*narrow, strict=True), "o", mfc="none", color=colours[client])
        ax.set_xscale("log")
        ax.set_ylim(bottom=0)
        ax.set_title(PROTOCOL_TITLES[protocol], fontsize=9)
        ax.set_xlabel("calls at once (hollow: through 50 connections)", fontsize=8)
        ax.set_ylabel("client CPU µs per call", fontsize=8)
        ax.legend(fontsize=7)
    if measured:
        ax = axes[0][-1]
        other = ax.twinx()
        for i, soak in enumerate(measured):
            times = [s[0] for s in soak["samples"]]
            ax.plot(times, [s[1] for s in soak["samples"]], color=f"C{i}", label=soak["client"])
            other.plot(times, [s[2] for s in soak["samples"]], ":", color=f"C{i}")
        ax.set_title(f"soak over {measured[0]['protocol']}: RSS (solid), fds (dotted)", fontsize=9)
        ax.set_xlabel("seconds", fontsize=8)
        ax.set_ylabel("RSS MB", fontsize=8)
        ax.set_ylim(bottom=0)
        other.set_ylim(bottom=0)
        other.set_ylabel("file descriptors", fontsize=8)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    return fig


def chart(rows: list[dict[str, Any]], soaks: list[dict[str, Any]], path: str, title: str) -> str:
    """:func:`figure`, written to ``path`` (SVG: text stays text, no date: a redraw from the
    same figures is the same file). Returns a message."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        matplotlib.rcParams["svg.fonttype"] = "none"
        matplotlib.rcParams["svg.hashsalt"] = "trio_retry"
        import matplotlib.pyplot as plt
    except ImportError:
        return f"chart not written: matplotlib is not installed (the bench extra); wanted {path}"
    fig = figure(plt, rows, soaks, title)
    if fig is None:
        return "chart not written: nothing was measured"
    try:
        fig.savefig(path, metadata={"Date": None} if path.endswith(".svg") else None)
    finally:
        plt.close(fig)
    return f"chart written to {path}"
