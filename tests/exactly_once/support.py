"""Running the exactly-once lab from a test: skip where it cannot run, start a run and wait for
its lines, find its processes, wait until they are gone. Every wait is bounded."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from benchmarks.exactly_once import netlab
from benchmarks.nginx import find_nginx

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 60  # a smoke run takes ~3 s on two idle cores; this only stops a hang
LAB = [sys.executable, "-m", "benchmarks.exactly_once", "--smoke"]
#: a smoke run that would go on for 30 s: the tests end it long before
LONG = ("--seconds", "30", "--calls", "100000")
_UP = re.compile(r"lab up: (\S+), nginx at 10\.213\.(\d+)\.2 ")


def skip_unless_lab() -> None:
    reason = netlab.why_not_available()
    if reason is None and find_nginx() is None:
        reason = "needs nginx"
    if reason is None and subprocess.run(["ip", "netns", "list"], capture_output=True).returncode:
        reason = "needs `ip netns`, which does not work here"
    if reason is not None:
        pytest.skip(f"the exactly-once lab {reason}")


@dataclass
class Run:
    """A lab run in a process of its own, its stdout read line by line in a thread."""

    proc: subprocess.Popen[str]
    lines: queue.Queue[str | None] = field(default_factory=queue.Queue)
    seen: list[str] = field(default_factory=list)
    name: str = ""
    subnet: int = 0
    err: str = ""
    _reader: threading.Thread = field(init=False)

    @classmethod
    def start(cls, *argv: str, before: tuple[str, ...] = (), wait: bool = True) -> Run:
        """``before`` the interpreter (``unshare ...``), ``argv`` after ``--smoke``. Returns
        once the lab is up (its name and subnet known; at once without ``wait``: then
        :meth:`up` waits)."""
        proc = subprocess.Popen(
            [*before, *LAB, *argv],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        run = cls(proc)
        run._reader = threading.Thread(target=run._read, daemon=True)
        run._reader.start()
        if wait:
            run.up()
        return run

    def up(self) -> None:
        """Wait until the lab is up; its name and subnet."""
        try:
            match = _UP.match(self.wait_for("lab up"))
            assert match, self.seen
            self.name, self.subnet = match.group(1), int(match.group(2))
        except BaseException:
            self.finish(timeout=0)
            raise

    def printed(self) -> list[str]:
        """The lines printed so far (without waiting)."""
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                return self.seen
            if line is None:
                self.lines.put(None)  # for a later wait_for
                return self.seen
            self.seen.append(line)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_for(self, prefix: str, timeout: float = TIMEOUT) -> str:
        """The first line (from now) starting with ``prefix``."""
        end = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"no line {prefix!r} within {timeout} s: {self.seen}")
            if line is None:
                pytest.fail(f"the run ended before {prefix!r}: {self.seen}")
            self.seen.append(line)
            if line.startswith(prefix):
                return line

    def finish(self, timeout: float = TIMEOUT) -> int:
        """Wait for the run's end (killed after ``timeout``); its exit status. Its pipes are
        closed and its stderr kept (:meth:`stderr`). Idempotent."""
        assert self.proc.stdout is not None
        if self.proc.stdout.closed:
            return self.proc.returncode
        try:
            self.proc.wait(timeout=timeout)
        finally:
            self.kill()
            self._reader.join(timeout=10)
            assert self.proc.stderr is not None
            self.err = self.proc.stderr.read()[-2000:]
            self.proc.stdout.close()
            self.proc.stderr.close()
        return self.proc.returncode

    def stderr(self) -> str:
        return self.err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def signal(self, signum: int) -> bool:
        """Send ``signum``; whether the run was still there to receive it."""
        alive = self.proc.poll() is None
        if alive:
            os.kill(self.proc.pid, signum)
        return alive


def _status(pid: int) -> dict[str, str]:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (children, their children...), from ``/proc``."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            ppid = _status(int(entry.name)).get("PPid")
            if ppid is not None:
                parents[int(entry.name)] = int(ppid)
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def running(pids: set[int]) -> set[int]:
    """Those of ``pids`` still running (a zombie has ended: nothing reaps it here when its
    parent was killed)."""
    return {pid for pid in pids if _status(pid).get("State", "Z").split()[0] not in ("Z", "X")}


def uid(pid: int) -> int:
    return int(_status(pid)["Uid"].split()[1])  # the effective uid


def command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def gone_within(pids: set[int], name: str, seconds: float) -> tuple[set[int], list[str]]:
    """Wait up to ``seconds`` until ``pids`` ended and nothing of run ``name`` is left; what
    is still there then."""
    end = time.monotonic() + seconds
    while True:
        alive, left = running(pids), netlab.leftovers(name)
        if (not alive and not left) or time.monotonic() > end:
            return alive, left
        time.sleep(0.1)


INTERRUPTS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
