"""Running the command line as a user would: a subprocess, with pipes or a terminal (a pty).

Every run is bounded in time (``LIMIT``); a pty's master is read to the end in a thread, so a
child that writes a lot to its terminal never blocks on a full buffer.
"""

from __future__ import annotations

import errno
import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import trio

LIMIT = 30
ROOT = Path(__file__).resolve().parents[2]
COMMAND = [sys.executable, "-m", "trio_retry"]


@dataclass(frozen=True)
class Ran:
    code: int
    out: bytes
    err: bytes

    @property
    def err_text(self) -> str:
        return self.err.decode("utf-8", errors="replace")


def _env(extra: Mapping[str, str] | None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k.upper() not in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(extra or {})
    return env


async def cli(
    *args: str,
    stdin: bytes = b"",
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Ran:
    """``python -m trio_retry ARGS`` with pipes for stdin, stdout and stderr."""
    with trio.fail_after(LIMIT):
        done = await trio.run_process(
            [*COMMAND, *args],
            stdin=stdin,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=_env(env),
            cwd=cwd,
        )
    return Ran(done.returncode, done.stdout, done.stderr)


def _terminal(columns: int) -> tuple[int, int]:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    return master, slave


def _drain(fd: int) -> bytes:
    chunks = []
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError as exc:  # EIO: every slave end is closed
            if exc.errno == errno.EIO:
                break
            raise
        if not data:
            break
        chunks.append(data)
    os.close(fd)
    return b"".join(chunks)


async def cli_on_terminal(
    *args: str,
    stdout_tty: bool = False,
    stderr_tty: bool = True,
    columns: int = 100,
    env: Mapping[str, str] | None = None,
) -> Ran:
    """Like :func:`cli`, with stdout and/or stderr each on a terminal of its own (a pty).

    What the child drew on a terminal is returned with the terminal's ``\\r\\n`` turned back
    into ``\\n``.
    """
    fds: dict[str, tuple[int, int]] = {}
    if stdout_tty:
        fds["out"] = _terminal(columns)
    if stderr_tty:
        fds["err"] = _terminal(columns)
    with trio.fail_after(LIMIT):
        proc = await trio.lowlevel.open_process(
            [*COMMAND, *args],
            stdin=subprocess.DEVNULL,
            stdout=fds["out"][1] if stdout_tty else subprocess.PIPE,
            stderr=fds["err"][1] if stderr_tty else subprocess.PIPE,
            env=_env(env),
        )
        for _, slave in fds.values():
            os.close(slave)
        captured: dict[str, bytes] = {}
        async with trio.open_nursery() as nursery:

            async def drain_tty(name: str, fd: int) -> None:
                captured[name] = await trio.to_thread.run_sync(_drain, fd)

            async def drain_pipe(name: str, stream: trio.abc.ReceiveStream) -> None:
                chunks = []
                while data := await stream.receive_some():
                    chunks.append(data)
                captured[name] = b"".join(chunks)

            for name in ("out", "err"):
                if name in fds:
                    nursery.start_soon(drain_tty, name, fds[name][0])
                else:
                    pipe = proc.stdout if name == "out" else proc.stderr
                    assert pipe is not None
                    nursery.start_soon(drain_pipe, name, pipe)
            code = await proc.wait()
    tty = {name: captured[name].replace(b"\r\n", b"\n") for name in fds}
    return Ran(code, tty.get("out", captured["out"]), tty.get("err", captured["err"]))


_MEASURED = """
import runpy, sys
sys.argv = ["trio_retry", *sys.argv[1:]]
try:
    runpy.run_module("trio_retry", run_name="__main__", alter_sys=True)
finally:
    with open("/proc/self/status") as status:
        peak = next(line for line in status if line.startswith("VmHWM:"))
    print(peak.strip(), file=sys.stderr)
"""


async def cli_peak_rss(*args: str, capture: bool = False) -> tuple[int, int, bytes]:
    """Run the command; its exit code, its peak RSS in KiB and its stdout (with ``capture``;
    otherwise stdout goes to /dev/null).

    The peak is the kernel's ``VmHWM`` of the command's own process, read as it exits. (Not
    ``wait4``'s ``ru_maxrss``: Linux carries the parent's high-water mark across fork and
    exec, so a child of a big test process would report the parent's size.)
    """
    where = {"capture_stdout": True} if capture else {"stdout": subprocess.DEVNULL}
    with trio.fail_after(LIMIT):
        done = await trio.run_process(
            [sys.executable, "-c", _MEASURED, *args],
            stdin=subprocess.DEVNULL,
            capture_stderr=True,
            check=False,
            env=_env(None),
            **where,
        )
    last = done.stderr.decode().strip().splitlines()[-1]
    assert re.fullmatch(r"VmHWM:\s+\d+ kB", last), done.stderr
    return done.returncode, int(last.split()[1]), done.stdout or b""
