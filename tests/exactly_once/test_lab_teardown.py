"""The lab leaves nothing behind, whatever ends it, and runs never touch each other's labs.

Each test starts real smoke runs (root, ``ip netns``, iptables, nginx; skipped elsewhere) and
ends them the hard way: a burst of signals during the teardown, SIGHUP, SIGKILL of the runner,
a second run started from another pid namespace. "Nothing behind" is checked outside the
runner: no namespace, veth, working directory or process of the run
(:func:`benchmarks.exactly_once.netlab.leftovers`, and ``/proc`` for every process that was
below the runner).
"""

from __future__ import annotations

import pwd
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from benchmarks.exactly_once import netlab

from .support import (
    INTERRUPTS,
    LONG,
    Run,
    command,
    descendants,
    gone_within,
    skip_unless_lab,
    uid,
)


def test_signals_during_teardown_wait_for_it() -> None:
    skip_unless_lab()
    run = Run.start(*LONG)
    time.sleep(1.0)  # the client is running, faults are being applied
    below = descendants(run.proc.pid)
    assert run.signal(signal.SIGINT)
    run.wait_for("taking the lab down")
    # While the lab is taken down: Ctrl-C again, a kill, a closed terminal (each raised out
    # of the teardown and cut it short, leaving the namespace, nginx and the keys).
    delivered = 0
    for signum in (*INTERRUPTS, *INTERRUPTS, *INTERRUPTS):
        delivered += run.signal(signum)
        time.sleep(0.02)
    assert delivered >= 2, "the teardown ended before the signals: nothing was tested"
    run.wait_for("lab down")  # the runner's own teardown ran to its end
    assert run.finish() == 130, run.stderr()
    assert gone_within(below, run.name, 5) == (set(), [])


def test_sighup_ends_a_run_like_sigint() -> None:
    skip_unless_lab()
    run = Run.start(*LONG)
    time.sleep(0.5)
    below = descendants(run.proc.pid)
    assert run.signal(signal.SIGHUP)  # the terminal closed: it killed the runner outright
    run.wait_for("taking the lab down")
    run.wait_for("lab down")
    assert run.finish() == 130, run.stderr()
    assert gone_within(below, run.name, 5) == (set(), [])


def test_servers_are_unprivileged_and_die_with_a_killed_runner() -> None:
    skip_unless_lab()
    run = Run.start(*LONG)
    time.sleep(1.0)
    below = descendants(run.proc.pid) | {
        int(pid) for pid in netlab.run(["ip", "netns", "pids", run.name]).split()
    }
    workers = [pid for pid in below if command(pid).startswith("nginx: worker")]
    assert workers, [command(pid) for pid in below]
    nobody = pwd.getpwnam("nobody").pw_uid
    assert {uid(pid) for pid in workers} == {nobody}  # was `user root`
    key = netlab.BASE / run.name / "server.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    peer = [pid for pid in below if "benchmarks.exactly_once.peers" in command(pid)]
    assert peer, "the client's process was not running"

    run.kill()  # SIGKILL: no teardown at all; children die with it, the janitor does the rest
    assert run.finish() == -signal.SIGKILL
    alive, left = gone_within(below, run.name, 15)
    assert not alive, [command(pid) for pid in alive]
    assert left == []


def test_runs_never_touch_each_others_labs() -> None:
    skip_unless_lab()
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux)")
    first = Run.start(*LONG)
    # A second run, in a pid namespace of its own (as in a container): the first run's pid
    # means nothing there, so "the pid in the name is gone" took its lab for a crashed run's
    # and deleted it. It also starts while the first is up: both pick a subnet.
    second = Run.start(before=("unshare", "--pid", "--fork"))
    assert second.name != first.name
    assert second.subnet != first.subnet
    assert second.finish() == 0, second.stderr()
    assert gone_within(set(), second.name, 5) == (set(), [])
    left = netlab.leftovers(first.name)
    assert f"namespace {first.name}" in left, left  # the first run's lab is still there
    assert f"directory {netlab.BASE / first.name}" in left, left
    below = descendants(first.proc.pid)
    assert first.signal(signal.SIGINT)
    assert first.finish() == 130, first.stderr()
    assert gone_within(below, first.name, 5) == (set(), [])


def test_what_runs_that_are_over_left_is_removed_at_start() -> None:
    skip_unless_lab()
    with netlab.setup_lock():
        over = netlab.reserve()
        lab = netlab.create(over.lab)
        live = netlab.reserve()
    over.release()  # as a crashed run's lock is released: its lab stays behind
    server_key = lab.workdir / "server.key"
    server_key.write_bytes(b"a key left behind")
    # A working directory of the previous scheme (/tmp/treo<pid>-*) whose pid is gone.
    dead = subprocess.Popen(["true"])
    dead.wait()
    legacy = Path(tempfile.gettempdir()) / f"treo{dead.pid}-stale"
    legacy.mkdir()
    try:
        with netlab.setup_lock():
            removed = netlab.remove_stale()
        assert over.lab.name in removed
        assert str(legacy) in removed
        assert netlab.leftovers(over.lab.name) == []
        assert not server_key.exists()
        assert not legacy.exists()
        assert live.lab.workdir.exists()  # its lock is held: alive, untouched
        assert live.lab.name not in removed
    finally:
        netlab.destroy(over.lab.name)
        netlab.destroy(live.lab.name)
        live.release()
        shutil.rmtree(legacy, ignore_errors=True)
    assert netlab.leftovers(live.lab.name) == []


def test_setup_is_serialized() -> None:
    # Picking a subnet is "the first one no interface has": two runs picking at once would
    # both take it. A run does its setup under a lock; while this test holds it, a run waits.
    skip_unless_lab()
    with netlab.setup_lock():
        waiting = Run.start(wait=False)
        time.sleep(2.0)  # far longer than a setup takes (~0.3 s)
        assert not [line for line in waiting.printed() if line.startswith("lab up")]
        held = netlab.reserve()
        lab = netlab.create(held.lab)
    try:
        waiting.up()  # once the lock is free, on another subnet than the one it waited for
        assert (waiting.name, waiting.subnet) != (lab.name, lab.subnet)
        assert waiting.subnet != lab.subnet
        assert waiting.finish() == 0, waiting.stderr()
    finally:
        waiting.finish(timeout=0)
        netlab.destroy(lab.name)
        held.release()
    assert netlab.leftovers(lab.name) == []
    assert netlab.leftovers(waiting.name) == []
