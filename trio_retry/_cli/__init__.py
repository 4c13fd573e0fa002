"""The command line (``python -m trio_retry``): ``main`` runs it, ``args`` parses it, ``output``
moves the bytes, ``progress`` draws the bar. See docs/cli.md.

:func:`run` answers ``--help`` from the parser alone: the client, trio and the protocol
modules are imported only for a command that makes a request (or the demo), so help is as
quick as an interpreter that imports ``argparse``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

__all__ = ["run"]


def run(argv: Sequence[str], out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run the command line; return the exit code. Never raises except for a bug."""
    if "-h" in argv or "--help" in argv:
        from .args import UsageError, parse

        try:
            parse(argv)
        except SystemExit as exc:  # the help was printed
            return exc.code if isinstance(exc.code, int) else 0
        except UsageError:
            pass  # reported by main.run, which parses again, as for any command
    from .main import run as run_command

    return run_command(argv, out, err)
