"""Which trio_retry a benchmark measures: import it from a given checkout, and describe one.

Shared by ``benchmarks/profile.py`` and ``benchmarks/bulk.py`` (both take ``--checkout``, so a
before/after comparison is one harness measuring two trees). Kept free of heavy imports: the
bulk benchmark's client processes import it, and their peak RSS is part of what is measured.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any


def import_trio_retry(checkout: str) -> Any:
    """Import trio_retry from ``checkout`` (ahead of any installed copy)."""
    root = os.path.abspath(checkout)
    if not os.path.isfile(os.path.join(root, "trio_retry", "__init__.py")):
        raise SystemExit(f"no trio_retry package in {root} (use --checkout)")
    if "trio_retry" in sys.modules:
        raise SystemExit("trio_retry was imported before --checkout could take effect")
    sys.path.insert(0, root)
    import trio_retry

    return trio_retry


def describe_checkout(root: str) -> str:
    """``"<branch> <git describe --always --dirty>"`` of ``root``, or "not a git checkout"."""
    try:
        rev = subprocess.run(
            ["git", "-C", root, "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        branch = subprocess.run(
            ["git", "-C", root, "rev-parse", "--abbrev-ref", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "not a git checkout"
    return f"{branch} {rev}" if rev else "not a git checkout"
