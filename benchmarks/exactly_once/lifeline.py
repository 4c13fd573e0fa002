"""What ties the lab to the runner's life: the signals that end a run, the children that must
not outlive it, and the janitor that takes the lab down if the runner cannot.

- :class:`Interrupts`: SIGINT, SIGTERM and SIGHUP (a closed terminal) all end a run the same
  way. The first raises ``KeyboardInterrupt`` in the main thread, so whatever the run waits on
  ends and its ``finally`` runs; from then on, and during any teardown, a signal is only
  recorded: a second Ctrl-C, or a ``kill`` while the lab is taken down, cannot cut the
  teardown short (it left the namespace, nginx and the keys behind). A signal that arrived
  during the teardown of a run that was *not* interrupted ends the program after it
  (``KeyboardInterrupt`` once the teardown is done). Once interrupted, the program is ending
  (status 130): the signals are then ignored, so one on the way out changes nothing.
- :func:`die_with_runner`: every process the runner starts (nginx, the backend, each client)
  gets ``PR_SET_PDEATHSIG`` = SIGKILL (``prctl`` through ctypes): the kernel kills it when the
  runner dies, SIGKILL included. It is set in the child between ``fork`` and ``exec``, is kept
  across ``exec`` (of ``ip netns exec`` and then of the server), and is tied to the *thread*
  that started the child, so children are started from the main thread only. The children also
  get a session of their own, so a Ctrl-C on the terminal reaches the runner alone, which ends
  them in order.
- :class:`Janitor`: a process that watches a pipe from the runner. The runner writes ``done``
  after its own teardown; if the pipe closes without it (the runner was killed, SIGKILL
  included), the janitor takes the lab down itself (:func:`netlab.destroy`: what is in the
  namespace, nginx's workers too, which ``PR_SET_PDEATHSIG`` does not reach since nginx forks
  them; the namespace, the veth pair, the working directory with the keys). It ignores the
  signals that end the runner and lives in a session of its own.

The alternatives rejected: a PID namespace per server (``unshare --pid --kill-child``) ends
nginx's workers with their master, but puts a process between the runner and nginx, whose
reload signal and pid file then no longer match; masking signals around the teardown
(``pthread_sigmask``) leaves the first signal's window open just the same and is inherited by
every command the teardown runs.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from benchmarks.exactly_once import netlab

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded here: never in a child after fork
ROOT = Path(__file__).resolve().parents[2]
DONE = b"done"


class Interrupts:
    """``with Interrupts() as interrupts:`` around a run; ``interrupts.teardown(steps)`` in its
    ``finally`` (see the module's docstring)."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._stopping = False
        self._previous: dict[int, object] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)
        if not self._stopping:
            self._stopping = True  # before the raise: a second signal finds it set
            raise KeyboardInterrupt(f"signal {signum}")

    def __enter__(self) -> Interrupts:
        self._previous = {s: signal.signal(s, self._handle) for s in SIGNALS}
        return self

    def teardown(self, steps: Callable[[], None]) -> None:
        """Run ``steps`` (idempotent, never raising) to their end, whatever arrives.

        A signal that arrives while they run is recorded, never raised. One exception: the
        first signal of a run, arriving in the instant between the end of the run and this
        call, raises in here; ``steps`` then start again (at most once more: that signal
        set the flag that keeps every later one from raising).
        """
        while True:
            try:
                self._stopping = True
                steps()
                return
            except KeyboardInterrupt:
                continue

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self.received:
            for signum, handler in self._previous.items():
                signal.signal(signum, handler)  # type: ignore[arg-type]
            return
        # Interrupted: the program is ending (exit status 130), and later signals are ignored;
        # restoring the defaults would let one kill it on its way out. (Ignored, not left to
        # this handler: the interpreter puts back the default of a signal with a Python
        # handler when it shuts down.)
        for signum in SIGNALS:
            signal.signal(signum, signal.SIG_IGN)
        if kind is None:
            # A signal deferred during the teardown of a run that was not interrupted.
            raise KeyboardInterrupt(f"signal {self.received[0]}")


def die_with_runner() -> Callable[[], None]:
    """A ``preexec_fn``: the child is killed (SIGKILL) when the runner's thread that starts
    it dies; a runner already gone when it runs makes the child exit at once."""
    runner = os.getpid()

    def preexec() -> None:
        if _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            os._exit(126)
        if os.getppid() != runner:  # the runner died before the prctl took effect
            os._exit(125)

    return preexec


def child(argv: list[str], **popen: Any) -> subprocess.Popen[Any]:
    """Start a child of the runner: in a session of its own, killed when the runner dies."""
    return subprocess.Popen(argv, start_new_session=True, preexec_fn=die_with_runner(), **popen)


class Janitor:
    """The runner's side of the janitor (see the module's docstring)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.exactly_once.lifeline", name],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def done(self) -> None:
        """The runner took the lab down itself: the janitor exits without touching it.
        Idempotent (a teardown may run twice)."""
        assert self._proc.stdin is not None
        if not self._proc.stdin.closed:
            try:
                self._proc.stdin.write(DONE)
                self._proc.stdin.close()
            except OSError:
                pass  # it died: then nothing needs telling
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()


def janitor(name: str) -> int:
    """The janitor's process: wait for the runner's word or its end."""
    for signum in SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    if sys.stdin.buffer.read() != DONE:  # the pipe closed without "done": the runner died
        netlab.destroy(name)
    return 0


if __name__ == "__main__":
    raise SystemExit(janitor(sys.argv[1]))
