"""A measured child process: run one command to its end and read its own rusage.

Shared by ``benchmarks/bulk.py`` (one transfer per process) and ``benchmarks/scale.py`` (one
burst of calls, or one soak, per process). ``os.wait4`` instead of ``Popen.wait``: it returns
the child's own rusage (CPU time and peak RSS of that process alone), which
``resource.RUSAGE_CHILDREN`` would sum over every child so far. Output goes to files, not
pipes, so nothing can fill up and block.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.servers import PACKAGE_ROOT, child_preexec

__all__ = ["Finished", "spawn"]


@dataclass(frozen=True)
class Finished:
    """How a child ended: its exit status, its output, and its own rusage."""

    status: int
    out: str
    err: str
    rusage: resource.struct_rusage


def _preexec(cpu: int | None) -> Callable[[], None]:
    die_with_parent = child_preexec()

    def preexec() -> None:
        if die_with_parent is not None:
            die_with_parent()
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})

    return preexec


def spawn(
    argv: list[str],
    cpu: int | None,
    workdir: Path,
    *,
    timeout: float,
    watch: Callable[[int], None] | None = None,
    every: float = 1.0,
) -> Finished:
    """Run ``argv`` (pinned to ``cpu`` if given, the harness's tree first on ``PYTHONPATH``)
    to its end; it is killed after ``timeout`` seconds. ``watch(pid)``, if given, is called
    about every ``every`` seconds while the child runs (the soak samples its RSS and file
    descriptors from ``/proc`` this way, without running anything inside it)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH", "")) if p
    )
    out_path, err_path = workdir / "out.txt", workdir / "err.txt"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(
            argv,
            cwd=PACKAGE_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            preexec_fn=_preexec(cpu),
        )
    timer = threading.Timer(timeout, os.kill, (proc.pid, signal.SIGKILL))
    timer.start()
    try:
        if watch is None:
            _, status, rusage = os.wait4(proc.pid, 0)
        else:
            while True:
                pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                watch(proc.pid)
                time.sleep(every)
    finally:
        timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped: Popen must not wait again
    return Finished(
        proc.returncode,
        out_path.read_text(errors="replace"),
        err_path.read_text(errors="replace"),
        rusage,
    )
