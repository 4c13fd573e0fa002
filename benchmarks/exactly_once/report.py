"""The scoreboard: printed as a table, written as JSON, drawn as one chart.

The chart is a grid, a row per client and a column per kind of lie or leak: a cell is green
at 0 and red (darker with the count) otherwise, with the count written in it, so "who told the
caller a falsehood, and how often" is read at a glance. A last column, in grey, "left
unknown", gives the calls the client said it could not know about (trio_retry's ambiguous
errors, what a reconciler did not settle: hand work for the caller) and how many of them the
ledger shows executed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

COLUMNS = (
    ("post_twice", "POST\nexecuted twice"),
    ("false_failure", "reported failed,\nbut executed"),
    ("false_not_sent", "NOT_SENT\ncontradicted"),
    ("false_reconciled", "reconciler's\nfalse answers"),
    ("deadline_overrun", "deadline\noverruns"),
    ("socket_leak", "sockets left\nafter close"),
    ("foreign_exception", "foreign\nexceptions"),
)


def _value(score: dict[str, Any], key: str) -> int:
    if key == "socket_leak":
        return int(score["sockets_left"])
    return int(score["violations"].get(key, 0))  # a document from before the column: 0


def table(doc: dict[str, Any]) -> str:
    head = (
        f"{'client':<16}{'calls':>6}{'ok':>6}{'fail':>6}{'ambig':>6}  "
        f"{'POST 2x':>8}{'false fail':>11}{'ambig exec/dedup/not':>22}{'false NOT_SENT':>15}"
        f"{'overrun max/p99 s':>19}{'sockets':>8}{'foreign':>8}{'unknown':>8}"
        f"{'reconciled e/n/u':>17}{'false rec.':>11}"
    )
    lines = [head, "-" * len(head)]
    for entry in doc["clients"]:
        run = entry["run"]
        if "score" not in entry:
            lines.append(f"{run['client']:<16} not run: {run['note']}")
            continue
        s = entry["score"]
        out, v, fails, ambiguous = _figures(s)
        amb = "/".join(ambiguous)
        overrun = f"{s['overrun_max']:.2f}/{s['overrun_p99']:.2f}"
        lines.append(
            f"{run['client']:<16}{s['calls']:>6}{out.get('ok', 0):>6}{fails:>6}"
            f"{out.get('ambiguous', 0):>6}  {v['post_twice']:>8}{v['false_failure']:>11}"
            f"{amb:>22}{v['false_not_sent']:>15}{overrun:>19}{s['sockets_left']:>8}"
            f"{v['foreign_exception']:>8}{_unknown(s):>8}{'/'.join(_answers(s)):>17}"
            f"{v.get('false_reconciled', 0):>11}"
        )
    return "\n".join(lines)


def _unknown(score: dict[str, Any]) -> int:
    """The calls left unknown (a document from before the column: its ambiguous calls)."""
    return int(score.get("left_unknown", score["outcomes"].get("ambiguous", 0)))


def _answers(score: dict[str, Any]) -> list[str]:
    """The reconciler's answers: executed, not executed, unknown."""
    answers = score.get("reconciled") or {}
    return [str(answers.get(k, 0)) for k in ("EXECUTED", "NOT_EXECUTED", "UNKNOWN")]


def _figures(score: dict[str, Any]) -> tuple[dict[str, int], dict[str, int], int, list[str]]:
    """What a row shows of a client's score: its outcomes, its violations, the calls that
    failed (failed, foreign or hung) and the ambiguous calls' split (executed, deduplicated,
    not executed)."""
    out, split = score["outcomes"], score["ambiguous_split"]
    fails = out.get("failed", 0) + out.get("foreign", 0) + out.get("hung", 0)
    ambiguous = [str(split.get(k, 0)) for k in ("executed", "deduplicated", "not_executed")]
    return out, score["violations"], fails, ambiguous


def markdown(doc: dict[str, Any]) -> str:
    """The scoreboard as a Markdown table (docs/benchmarks.md)."""
    lines = [
        "| client | calls | ok / failed / ambiguous | POST executed twice | reported failed, "
        "but executed | ambiguous: executed / dedup. / not executed | NOT_SENT contradicted "
        "| overrun max / p99 (s) | sockets left | foreign exceptions | left unknown "
        "| reconciled: executed / not executed / unknown | reconciler's false answers |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for entry in doc["clients"]:
        s = entry.get("score")
        if s is None:
            lines.append(f"| {entry['run']['client']} | not run: {entry['run']['note']} |")
            continue
        out, v, fails, ambiguous = _figures(s)
        amb = " / ".join(ambiguous)
        lines.append(
            f"| {s['client']} | {s['calls']:,} | {out.get('ok', 0):,} / {fails:,} / "
            f"{out.get('ambiguous', 0)} | {v['post_twice']} | {v['false_failure']} | {amb} | "
            f"{v['false_not_sent']} | {s['overrun_max']:.2f} / {s['overrun_p99']:.2f} | "
            f"{s['sockets_left']} | {v['foreign_exception']} | {_unknown(s)} | "
            f"{' / '.join(_answers(s))} | {v.get('false_reconciled', 0)} |"
        )
    return "\n".join(lines)


def details(doc: dict[str, Any]) -> str:
    """The violations behind the counts (a few per client), the foreign exception types."""
    lines = []
    for entry in doc["clients"]:
        score = entry.get("score")
        if not score:
            continue
        if score["foreign_types"]:
            kinds = ", ".join(f"{k} x{n}" for k, n in score["foreign_types"].items())
            lines.append(f"{score['client']}: foreign exceptions: {kinds}")
        levels = score.get("false_not_sent_by_level") or {}
        if levels:
            said = ", ".join(f"{n} at {level} level" for level, n in sorted(levels.items()))
            lines.append(f"{score['client']}: NOT_SENT contradicted by the ledger: {said}")
        for example in score["examples"][:5]:
            lines.append(f"{score['client']}: {example}")
        for call in score.get("unsettled", ()):
            lines.append(
                f"{score['client']}: left unknown {call['rid']} {call['kind']} {call['proto']} "
                f"({call['ledger']}, {call['elapsed']:.2f} s; faults: "
                f"{', '.join(call.get('faults', ())) or 'none'}): {' | '.join(call['attempts'])}"
            )
        if entry["fault_errors"]:
            lines.append(f"{score['client']}: faults that failed: {entry['fault_errors'][:3]}")
    return "\n".join(lines)


def write_json(doc: dict[str, Any], path: Path, *, slim: bool = False) -> None:
    """The document; ``slim`` leaves out each client's calls and ledger (the recorded run),
    keeping the configuration, the faults and the scores: the size to commit."""
    if slim:
        doc = {
            **doc,
            "clients": [
                {k: v for k, v in entry.items() if k != "ledger"}
                | {"run": {k: v for k, v in entry["run"].items() if k != "calls"}}
                for entry in doc["clients"]
            ],
        }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")


def chart(doc: dict[str, Any], path: Path) -> str | None:
    """Draw the scoreboard to ``path`` (SVG or PNG by its suffix); a message instead when
    matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: small, diffable
        import matplotlib.pyplot as plt
        from matplotlib.colors import to_rgb
        from matplotlib.patches import Rectangle
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[bench]'): no chart"
    rows = [e for e in doc["clients"] if "score" in e]
    names = [f"{e['score']['client']}  ({e['score']['calls']} calls)" for e in rows]
    fig_h = 1.2 + 0.42 * len(rows)
    fig, ax = plt.subplots(figsize=(11, fig_h))
    ncols = len(COLUMNS) + 1
    for i, entry in enumerate(rows):
        score = entry["score"]
        for j, (key, _) in enumerate(COLUMNS):
            value = _value(score, key)
            if value == 0:
                color = to_rgb("#cfe8cf")
            else:
                strength = min(1.0, 0.35 + 0.65 * value / max(1, score["calls"]) * 10)
                base = to_rgb("#d73027")
                color = tuple(1 - strength * (1 - c) for c in base)
            ax.add_patch(Rectangle((j, i), 0.96, 0.9, color=color))
            ax.text(j + 0.48, i + 0.45, str(value), ha="center", va="center", fontsize=10)
        split = score["ambiguous_split"]
        amb = _unknown(score)
        ax.add_patch(Rectangle((len(COLUMNS), i), 0.96, 0.9, color="#e6e6e6"))
        label = f"{amb} ({split.get('executed', 0)} ran)" if amb else "0"
        ax.text(len(COLUMNS) + 0.48, i + 0.45, label, ha="center", va="center", fontsize=9)
    ax.set_xlim(0, ncols)
    ax.set_ylim(len(rows), -0.1)
    ax.set_yticks([i + 0.45 for i in range(len(rows))], names)
    ax.set_xticks(
        [j + 0.48 for j in range(ncols)],
        [label for _, label in COLUMNS] + ['left unknown\n(said "cannot know")'],
        fontsize=8,
    )
    ax.xaxis.tick_top()
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    cfg = doc["config"]
    ax.set_title(
        f"exactly-once scoreboard: {cfg['seconds']:.0f} s of seeded faults per client (seed "
        f"{cfg['seed']}), {cfg['concurrency']} concurrent calls, {cfg['deadline']:.1f} s deadline"
        "\ngreen: never; red: the caller was told a falsehood, waited too long, or got a leak",
        fontsize=9,
        pad=34,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, metadata={"Date": None} if path.suffix == ".svg" else None)
    plt.close(fig)
    return None
