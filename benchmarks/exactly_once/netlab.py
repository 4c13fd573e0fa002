"""The lab's network: a server namespace joined to ours by a veth pair, and its teardown.

Names carry the pid of the run (``treo<pid>`` for the namespace, ``treo<pid>h``/``treo<pid>n``
for the two veth ends), so two runs never share anything, and a leftover of a crashed run is
recognised by its dead pid and removed at the next start (:func:`remove_stale`). The addresses
(``10.213.X.1/30`` on our end, ``.2`` in the namespace) exist only on the pair: ``X`` is derived
from the pid and moved on while some interface already has that subnet.

What is created, and how it goes away: the namespace (``ip netns del``), the veth pair
(deleting the namespace deletes its end, which deletes ours; we delete ours too in case the
namespace went first), and everything that lives inside the namespace: its iptables rules and
its ``tc`` qdiscs vanish with it. Processes started in the namespace are *not* ended by
``ip netns del``; :func:`remove_stale` and the lab's runner kill them first
(``ip netns pids``).

Every command runs with a timeout; a command that fails raises :class:`LabError` with its
output.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

PREFIX = "treo"
COMMAND_TIMEOUT = 10.0


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

    pid: int
    subnet: int  # X in 10.213.X.0/30

    @property
    def netns(self) -> str:
        return f"{PREFIX}{self.pid}"

    @property
    def host_if(self) -> str:
        return f"{PREFIX}{self.pid}h"

    @property
    def ns_if(self) -> str:
        return f"{PREFIX}{self.pid}n"

    @property
    def host_addr(self) -> str:
        return f"10.213.{self.subnet}.1"

    @property
    def server_addr(self) -> str:
        return f"10.213.{self.subnet}.2"

    def in_ns(self, *argv: str) -> list[str]:
        """``argv`` run inside the server namespace."""
        return ["ip", "netns", "exec", self.netns, *argv]


def _subnets_in_use() -> set[int]:
    out = run(["ip", "-o", "-4", "addr", "show"], check=False)
    return {int(m) for m in re.findall(r"inet 10\.213\.(\d+)\.", out)}


def create(pid: int | None = None) -> NetLab:
    """Build the namespace and the veth pair; return the lab. On failure what was built is
    removed before the error propagates."""
    pid = os.getpid() if pid is None else pid
    used = _subnets_in_use()
    subnet = next(x for x in ((pid + i) % 250 + 1 for i in range(250)) if x not in used)
    lab = NetLab(pid=pid, subnet=subnet)
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
        destroy(lab)
        raise
    return lab


def _kill_namespace_pids(netns: str) -> None:
    for word in run(["ip", "netns", "pids", netns], check=False).split():
        with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
            os.kill(int(word), 9)


def destroy(lab: NetLab) -> None:
    """Remove the lab: processes still in the namespace, the namespace, our veth end. Never
    raises (it runs in ``finally`` and on signals)."""
    _kill_namespace_pids(lab.netns)
    run(["ip", "netns", "del", lab.netns], check=False)
    run(["ip", "link", "del", lab.host_if], check=False)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale() -> list[str]:
    """Remove the namespaces and veth ends of runs whose process is gone; their names."""
    removed = []
    for line in run(["ip", "netns", "list"], check=False).splitlines():
        match = re.match(rf"{PREFIX}(\d+)\b", line)
        if match and not _alive(int(match.group(1))):
            name = match.group(0)
            _kill_namespace_pids(name)
            run(["ip", "netns", "del", name], check=False)
            removed.append(name)
    links = run(["ip", "-o", "link", "show"], check=False)
    for match in re.finditer(rf"\d+: ({PREFIX}(\d+)h)[@:]", links):
        if not _alive(int(match.group(2))):
            run(["ip", "link", "del", match.group(1)], check=False)
            removed.append(match.group(1))
    return removed


def leftovers(pid: int) -> list[str]:
    """What of run ``pid``'s lab still exists (empty after a clean teardown)."""
    found = []
    name = f"{PREFIX}{pid}"
    if re.search(rf"^{name}\b", run(["ip", "netns", "list"], check=False), re.M):
        found.append(f"namespace {name}")
    if re.search(rf"\d+: {name}h[@:]", run(["ip", "-o", "link", "show"], check=False)):
        found.append(f"veth {name}h")
    return found
