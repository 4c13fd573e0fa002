"""An attempt trail as a compact text table, for ``--explain`` and the demo.

Its own module so that the CLI and the demo both use it without importing each other.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._core.attempt import Attempt
from ._core.decision import Decision

__all__ = ["attempt_table"]


def _short(decision: Decision | None) -> str:
    if decision is None:
        return "-"
    text = str(decision)
    if text.startswith("retry allowed"):
        return text.replace("retry allowed after", "retry in")
    if text.startswith("retry denied"):
        return text.split(":")[0].replace("retry denied ", "denied ")
    return "AMBIGUOUS"


def attempt_table(attempts: Sequence[Attempt]) -> str:
    """A compact table of an attempt trail: one line per attempt (no header values shown)."""
    rows = [("#", "stage", "evidence", "status", "decision", "ms")]
    for a in attempts:
        status = str(a.status) if a.status is not None else (str(a.category) if a.category else "-")
        rows.append(
            (
                str(a.number),
                str(a.stage),
                str(a.evidence),
                status,
                _short(a.decision),
                f"{a.timings.get('total', 0.0) * 1000:.1f}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )
