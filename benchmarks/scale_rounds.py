"""Interleaved rounds of ``benchmarks/scale.py``: ``--rounds R`` and ``--against TREE``.

On a shared machine one measurement moves by ten per cent with the neighbours' load, more than
many a change it is meant to show. With ``--rounds R`` the runner measures every (tree,
protocol, case, client) ``R`` times, interleaved: round 1 of each tree (``--checkout``, then
each ``--against``), then round 2, and so on, so that a load that comes and goes falls on
every tree and case alike. A row's figures are the medians of its rounds; its **x ref** is the
median of the ratios each round measured (the two cases of one round are a minute apart at
most, the rounds of a tree may be many minutes apart), and **x ref range** the least and the
most of them. Every process is the same one-case worker as a single run's; nothing else
changes.

See docs/benchmarks.md, "Scale".
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
from collections.abc import Callable
from typing import Any

from benchmarks.checkout import describe_checkout
from benchmarks.scale_report import CPU_TARGET, summarise

__all__ = ["render_rounds", "run_rounds"]

#: The figures of a row that are medians over its rounds.
MEDIAN_OF = (
    "cpu_us_per_call",
    "system_us_per_call",
    "gc_us_per_call",
    "wall_s",
    "peak_rss_mb",
    "kib_per_connection",
)


def trees(args: argparse.Namespace) -> list[str]:
    """The trees measured: ``--checkout``'s, then each ``--against``."""
    return [os.path.abspath(args.checkout), *(os.path.abspath(t) for t in args.against)]


def run_rounds(
    args: argparse.Namespace,
    run_bursts: Callable[[argparse.Namespace], list[dict[str, Any]]],
) -> dict[str, Any]:
    """Every round of every tree, interleaved, each measured by ``run_bursts(args)`` (one
    tree's cases, ``scale.run_bursts``); the rows of each (with its ``x_ref``) and the
    medians: ``{"trees": [{"checkout", "revision", "rounds": [rows], "rows": [medians]}]}``."""
    measured: list[dict[str, Any]] = [
        {"checkout": tree, "revision": describe_checkout(tree), "rounds": []}
        for tree in trees(args)
    ]
    for number in range(1, args.rounds + 1):
        for tree in measured:
            print(
                f"round {number}/{args.rounds}: {tree['checkout']} ({tree['revision']})",
                file=sys.stderr,
                flush=True,
            )
            one = copy.copy(args)
            one.checkout = tree["checkout"]
            runs = run_bursts(one)
            tree["rounds"].append(summarise(runs, args.reference))
    for tree in measured:
        tree["rows"] = medians(tree["rounds"])
    return {"trees": measured}


def medians(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per (protocol, case, client): the first round's row, its figures the medians
    of the rounds where it was measured (``status`` ok only if it was in every round), with
    ``x_ref`` the median of the rounds' ratios and ``x_ref_range`` their least and most."""
    out = []
    for i, first in enumerate(rounds[0]):
        same = [r[i] for r in rounds]
        ok = [r for r in same if r.get("status") == "ok"]
        row = dict(first)
        row["rounds"] = len(same)
        if len(ok) < len(same):
            failed = next(r for r in same if r.get("status") != "ok")
            row.update(status=failed["status"], note=failed.get("note", ""))
            out.append(row)
            continue
        for key in MEDIAN_OF:
            values = [r[key] for r in ok if r.get(key) is not None]
            row[key] = statistics.median(values) if values else None
        ratios = [r["x_ref"] for r in ok if r.get("x_ref") is not None]
        row["x_ref"] = statistics.median(ratios) if ratios else None
        row["x_ref_range"] = [min(ratios), max(ratios)] if ratios else None
        row["cpu_us_per_call_rounds"] = [round(r["cpu_us_per_call"], 1) for r in ok]
        out.append(row)
    return out


def _cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "-"
    if row.get("status") != "ok":
        return str(row.get("status"))
    text = f"{row['cpu_us_per_call']:.1f} (gc {row['gc_us_per_call']:.1f})"
    if row.get("x_ref") is not None and row["x_ref_range"] is not None:
        low, high = row["x_ref_range"]
        text += f" {row['x_ref']:.2f}x [{low:.2f}-{high:.2f}]"
    return text


def render_rounds(result: dict[str, Any], rounds: int) -> str:
    """The trees side by side: per (protocol, case, client), each tree's median CPU µs per
    call, of it the collector's, and x ref with its range over the rounds."""
    measured = result["trees"]
    names = [f"{t['revision']} ({t['checkout']})" for t in measured]
    lines = [f"medians of {rounds} interleaved rounds; trees:"]
    lines += [f"  [{i}] {name}" for i, name in enumerate(names)]
    head = ["protocol", "case", "client", *(f"[{i}] us/call (gc) x ref [range]" for i in
                                           range(len(measured)))]  # fmt: skip
    table = [head]
    for i, row in enumerate(measured[0]["rows"]):
        table.append(
            [row["protocol"], row["case"], row["client"], *(_cell(t["rows"][i]) for t in measured)]
        )
    widths = [max(len(r[c]) for r in table) for c in range(len(head))]
    for r in table:
        lines.append("  " + "  ".join(f"{cell:<{w}}" for cell, w in zip(r, widths, strict=True)))
    for i, tree in enumerate(measured):
        for row in tree["rows"]:
            if (
                row["client"] == "trio_retry"
                and row.get("x_ref") is not None
                and row["calls"] >= 10_000
                and row["calls"] == row["connections"]
            ):
                verdict = "met" if row["x_ref"] <= CPU_TARGET else "NOT met"
                lines.append(
                    f"target [{i}] {row['protocol']} {row['case']}: {row['x_ref']:.2f}x "
                    f"(median of the rounds' ratios; <= {CPU_TARGET}x): {verdict}"
                )
    return "\n".join(lines)
