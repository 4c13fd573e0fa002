"""The lab's network and working directory: a server namespace joined to ours by a veth pair,
the directory its servers use, and their teardown.

**One run, one name.** Each run draws a name, ``treox`` and six hex digits, which names the
namespace, the two veth ends (``<name>h`` ours, ``<name>n`` theirs) and the working directory
``/run/treo-lab/<name>/`` (the nginx configuration and logs, the ledger, the lab's CA and server
key). ``/run`` is cleared at boot, as the namespaces are. The addresses (``10.213.X.1/30`` on
our end, ``.2`` in the namespace) exist only on the pair; ``X`` is the first subnet no
interface has.

**Alive means locked.** A run holds an exclusive ``flock`` on ``<workdir>/run.lock`` for its
whole life; the kernel releases it when the process ends, however it ends. A run whose lock can
be taken is over, and what is left of it is removed at the next start (:func:`remove_stale`).
The earlier test, "the pid in the name is gone", was wrong twice: a run in another pid
namespace (a container, ``unshare --pid``) sees every other run's pid as gone and deleted their
namespaces, and a pid reused by another process kept a dead run's leftovers forever.

**Setup is serialized.** Removing stale runs, drawing a name, creating the directory and taking
its lock, and picking a free subnet happen under one lock (``/run/treo-lab/setup.lock``), so two
runs starting together never pick the same subnet or name, and a run never sees another's
directory before its lock is held. Only setup is serialized: the runs themselves overlap.

What is created, and how it goes away (:func:`destroy`, which never raises): the processes in
the namespace (``ip netns pids``: ``ip netns del`` does not end them), the namespace (its
iptables rules and ``tc`` qdiscs with it), our veth end (deleting the namespace deletes its end,
which deletes ours; ours is deleted too in case the namespace went first), and the directory.

Leftovers of the previous scheme (``treo<pid>`` names, ``/tmp/treo<pid>-*`` directories) are
removed when their pid is gone, the best that scheme allows; its runs never touch ``treox``
names.

Every command runs with a timeout; a command that fails raises :class:`LabError` with its
output.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

PREFIX = "treox"
BASE = Path("/run/treo-lab")
COMMAND_TIMEOUT = 10.0
#: how long a start waits for another run's setup (each of its commands is bounded)
SETUP_WAIT = 120.0
_NAME = re.compile(rf"{PREFIX}[0-9a-f]{{6}}")
_LEGACY = re.compile(r"treo(\d+)")  # the previous scheme: treo<pid>


class LabError(Exception):
    """A lab command failed, or the lab cannot run here (the message says why)."""


def why_not_available() -> str | None:
    """``None`` when this process can build the lab; otherwise the one-line reason."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root (network namespaces, iptables, tc): run it as root"
    for tool in ("ip", "iptables", "tc", "ss"):
        if shutil.which(tool) is None:
            return f"needs `{tool}` (the iproute2 and iptables packages)"
    return None


def run(argv: Sequence[str], *, check: bool = True, timeout: float = COMMAND_TIMEOUT) -> str:
    """Run a command; its stdout. Raises :class:`LabError` on failure when ``check``."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        if check:
            raise LabError(f"{' '.join(argv)}: {exc}") from exc
        return ""
    if check and proc.returncode != 0:
        raise LabError(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


@dataclass(frozen=True, kw_only=True)
class NetLab:
    """The names and addresses of one run's lab."""

    name: str
    subnet: int = 0  # X in 10.213.X.0/30; 0 until create() picked one

    @property
    def netns(self) -> str:
        return self.name

    @property
    def host_if(self) -> str:
        return f"{self.name}h"

    @property
    def ns_if(self) -> str:
        return f"{self.name}n"

    @property
    def workdir(self) -> Path:
        return BASE / self.name

    @property
    def host_addr(self) -> str:
        return f"10.213.{self.subnet}.1"

    @property
    def server_addr(self) -> str:
        return f"10.213.{self.subnet}.2"

    def in_ns(self, *argv: str) -> list[str]:
        """``argv`` run inside the server namespace."""
        return ["ip", "netns", "exec", self.netns, *argv]


@dataclass(kw_only=True)
class Reservation:
    """A run's name and working directory, and the lock that says the run is alive (held
    until :meth:`release`, or until the process ends)."""

    lab: NetLab
    lock: IO[bytes] = field(repr=False)

    def release(self) -> None:
        self.lock.close()


def _try_lock(file: IO[bytes]) -> bool:
    try:
        fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@contextlib.contextmanager
def setup_lock(wait: float = SETUP_WAIT) -> Iterator[None]:
    """Hold the lab's setup lock (see the module's docstring); :class:`LabError` after
    ``wait`` seconds of another run holding it."""
    BASE.mkdir(mode=0o711, parents=True, exist_ok=True)
    with open(BASE / "setup.lock", "ab") as file:
        end = time.monotonic() + wait
        while not _try_lock(file):
            if time.monotonic() > end:
                raise LabError(f"another run held {BASE / 'setup.lock'} for {wait:.0f} s")
            time.sleep(0.05)
        yield  # closing the file releases the lock


def _names_in_use() -> set[str]:
    listed = run(["ip", "netns", "list"], check=False) + run(["ip", "-o", "link"], check=False)
    return set(re.findall(_NAME.pattern, listed)) | {p.name for p in BASE.iterdir()}


def reserve() -> Reservation:
    """Draw a name no run uses, create its working directory and take its lock. Call it under
    :func:`setup_lock`."""
    used = _names_in_use()
    name = next(n for n in iter(lambda: PREFIX + secrets.token_hex(3), None) if n not in used)
    lab = NetLab(name=name)
    # 0711: nginx's workers (user nobody) reach their temporary directories below it, without
    # listing it; the keys in it are 0600.
    lab.workdir.mkdir(mode=0o711)
    lock = open(lab.workdir / "run.lock", "ab")  # held for the run's life: no `with`
    if not _try_lock(lock):  # nobody else knows the name yet
        lock.close()
        raise LabError(f"could not lock {lab.workdir / 'run.lock'}")
    return Reservation(lab=lab, lock=lock)


def _subnets_in_use() -> set[int]:
    out = run(["ip", "-o", "-4", "addr", "show"], check=False)
    return {int(m) for m in re.findall(r"inet 10\.213\.(\d+)\.", out)}


def create(reserved: NetLab) -> NetLab:
    """Build the namespace and the veth pair of a reserved name, on the first free subnet;
    return the lab. Call it under :func:`setup_lock`. On failure what was built is removed
    (the directory stays: the caller's teardown removes it)."""
    used = _subnets_in_use()
    subnet = next((x for x in range(1, 255) if x not in used), None)
    if subnet is None:
        raise LabError("every subnet 10.213.1-254.0/30 is in use")
    lab = NetLab(name=reserved.name, subnet=subnet)
    try:
        run(["ip", "netns", "add", lab.netns])
        run(["ip", "link", "add", lab.host_if, "type", "veth", "peer", "name", lab.ns_if])
        run(["ip", "link", "set", lab.ns_if, "netns", lab.netns])
        run(["ip", "addr", "add", f"{lab.host_addr}/30", "dev", lab.host_if])
        run(["ip", "link", "set", lab.host_if, "up"])
        run(lab.in_ns("ip", "addr", "add", f"{lab.server_addr}/30", "dev", lab.ns_if))
        run(lab.in_ns("ip", "link", "set", lab.ns_if, "up"))
        run(lab.in_ns("ip", "link", "set", "lo", "up"))
    except BaseException:
        _destroy_network(lab.name)
        raise
    return lab


def _kill_namespace_pids(netns: str) -> None:
    for word in run(["ip", "netns", "pids", netns], check=False).split():
        with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
            os.kill(int(word), 9)


def _destroy_network(name: str) -> None:
    _kill_namespace_pids(name)
    run(["ip", "netns", "del", name], check=False)
    run(["ip", "link", "del", f"{name}h"], check=False)


def destroy(name: str) -> None:
    """Remove run ``name``'s lab: the processes in its namespace, the namespace, our veth end,
    the working directory. Idempotent; never raises (it runs in teardown, in the janitor and
    for stale runs)."""
    _destroy_network(name)
    shutil.rmtree(BASE / name, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _is_stale(name: str) -> bool:
    """A run is stale when its lock can be taken (or its directory, or its lock file, is
    gone: a live run has both from setup to the end of its teardown)."""
    try:
        file = open(BASE / name / "run.lock", "rb")
    except OSError:
        return True
    with file:
        return _try_lock(file)


def remove_stale() -> list[str]:
    """Remove what runs that are over left behind (namespace, veth, processes, directory);
    their names. Call it under :func:`setup_lock`."""
    links = run(["ip", "-o", "link"], check=False)
    names = set(re.findall(_NAME.pattern, run(["ip", "netns", "list"], check=False)))
    names |= set(re.findall(rf"\d+: ({_NAME.pattern})h[@:]", links))
    names |= {p.name for p in BASE.iterdir() if _NAME.fullmatch(p.name)}
    removed = sorted(name for name in names if _is_stale(name))
    for name in removed:
        destroy(name)
    return removed + _remove_legacy()


def _remove_legacy() -> list[str]:
    """The previous scheme's leftovers (``treo<pid>``) whose pid is gone."""
    removed = []
    for line in run(["ip", "netns", "list"], check=False).splitlines():
        match = _LEGACY.match(line)
        if match and not _alive(int(match.group(1))):
            _destroy_network(match.group(0))
            removed.append(match.group(0))
    for match in re.finditer(r"\d+: (treo(\d+))h[@:]", run(["ip", "-o", "link"], check=False)):
        if not _alive(int(match.group(2))) and match.group(1) not in removed:
            run(["ip", "link", "del", f"{match.group(1)}h"], check=False)
            removed.append(f"{match.group(1)}h")
    for path in Path(tempfile.gettempdir()).glob("treo*-*"):
        match = re.fullmatch(r"treo(\d+)-\w+", path.name)
        if match and path.is_dir() and not _alive(int(match.group(1))):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(str(path))
    return removed


def leftovers(name: str) -> list[str]:
    """What of run ``name``'s lab still exists (empty after a clean teardown)."""
    found = []
    if re.search(rf"^{name}\b", run(["ip", "netns", "list"], check=False), re.M):
        found.append(f"namespace {name}")
        pids = run(["ip", "netns", "pids", name], check=False).split()
        found += [f"process {pid}" for pid in pids]
    if re.search(rf"\d+: {name}h[@:]", run(["ip", "-o", "link", "show"], check=False)):
        found.append(f"veth {name}h")
    if (BASE / name).exists():
        found.append(f"directory {BASE / name}")
    return found
