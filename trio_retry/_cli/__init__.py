"""The command line (``python -m trio_retry``): ``main`` runs it, ``args`` parses it, ``output``
moves the bytes, ``progress`` draws the bar. See docs/cli.md."""

from .._trail import attempt_table as attempt_table
from .main import run as run

__all__ = ["attempt_table", "run"]
