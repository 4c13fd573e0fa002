"""What a long run's samples say about growth: resident memory and file descriptors over time.

Shared by ``benchmarks/soak.py`` (the fault soak samples its own RSS) and
``benchmarks/scale.py`` (its soak mode samples a client process's RSS and descriptors from
``/proc``). A leak shows as growth after the warm-up; flat is the target.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

__all__ = ["drift", "fd_count", "memory_summary", "rss_mb"]


def rss_mb(pid: int | str = "self") -> float:
    """The resident set size of process ``pid`` (this one by default), in MiB; NaN if gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as file:
            for line in file:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return math.nan


def fd_count(pid: int | str = "self") -> int:
    """How many file descriptors process ``pid`` has open (-1 if it is gone)."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def drift(samples: Sequence[tuple[float, float]], warmup: float) -> dict[str, Any]:
    """``(seconds, value)`` samples summarised: the value at the end of the warm-up against
    the end of the run (each averaged over a tenth of the samples after the warm-up), the
    growth between the two, per minute, and one value every 10 s."""
    after = [(t, v) for t, v in samples if t >= warmup]
    if len(after) < 4:
        return {"samples": len(samples), "note": "run too short to judge growth"}
    window = max(2, len(after) // 10)
    first = sum(v for _, v in after[:window]) / window
    last = sum(v for _, v in after[-window:]) / window
    minutes = (after[-1][0] - after[0][0]) / 60
    return {
        "samples": len(samples),
        "start": round(samples[0][1], 1),
        "after_warmup": round(first, 1),
        "end": round(last, 1),
        "max": round(max(v for _, v in samples), 1),
        "growth_after_warmup": round(last - first, 1),
        "growth_per_min": round((last - first) / minutes, 2) if minutes else 0.0,
        "every_10s": [round(v) for t, v in samples if t % 10 < 0.5],
    }


def memory_summary(samples: Sequence[tuple[float, float]], warmup: float) -> dict[str, Any]:
    """:func:`drift` of RSS samples in MB, its keys named so (``end_mb``,
    ``growth_after_warmup_mb``, ``every_10s_mb``)."""
    summary = drift(samples, warmup)
    if "note" in summary:
        return summary
    renamed = {"growth_per_min": "growth_mb_per_min"}
    return {
        (key if key == "samples" else renamed.get(key, f"{key}_mb")): value
        for key, value in summary.items()
    }
