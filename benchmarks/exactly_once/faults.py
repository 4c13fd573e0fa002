"""Faults: a schedule drawn from a seed (pure), and the injector that applies it to the lab.

:func:`schedule` is a pure function of ``(seed, seconds)``: the same seed gives the same faults,
in the same order, with the same parameters and timing relative to the start of a client's run,
so every client meets the same weather. What the seed cannot fix is which packets a
probability rule hits (the kernel's ``statistic`` match draws its own randomness), which
connection a socket kill finds open, and how the clients' own timing interleaves with the faults.

The kinds, and how each is made (all inside the server namespace, on its veth end, except the
client-side socket kill and the rate limit of our end):

- ``loss_in`` / ``loss_out``: packets to / from nginx dropped with a probability
  (``iptables -m statistic --mode random -j DROP`` on INPUT / OUTPUT);
- ``reset``: packets of established connections (not SYNs) to nginx answered with a TCP reset,
  with a probability (``-j REJECT --reject-with tcp-reset``);
- ``partition``: every packet dropped both ways for 50-2000 ms;
- ``rate``: both directions throttled (``tc qdisc ... tbf``) to a few hundred kbit/s;
- ``kill``: one established connection destroyed (``ss -K``), on the server's side (nginx's
  socket: the kernel sends a reset) or on the client's (its socket errors at the next use);
- ``reload``: nginx reloaded (SIGHUP): new workers, the old ones close their idle connections.

Faults run one at a time, each reverted after its duration, with a pause between them. The
injector records what it applied and when (``applied``), which the report keeps.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from benchmarks.exactly_once.netlab import NetLab, run
from benchmarks.exactly_once.servers import PORTS, Servers

TCP_RESET = ("--reject-with", "tcp-reset")
KINDS = ("loss_in", "loss_out", "reset", "partition", "rate", "kill", "reload")


@dataclass(frozen=True, kw_only=True)
class Fault:
    at: float  # seconds after the client's start
    kind: str
    duration: float  # 0 for the instant ones (kill, reload)
    probability: float = 0.0  # loss_in, loss_out, reset
    rate_kbit: int = 0  # rate
    side: str = ""  # kill: "server" or "client"

    def describe(self) -> str:
        extra = {
            "loss_in": f" p={self.probability:.2f}",
            "loss_out": f" p={self.probability:.2f}",
            "reset": f" p={self.probability:.2f}",
            "rate": f" {self.rate_kbit} kbit/s",
            "kill": f" {self.side} side",
        }.get(self.kind, "")
        return f"{self.at:6.2f}s {self.kind}{extra} for {self.duration * 1000:.0f} ms"


def schedule(seed: int, seconds: float) -> list[Fault]:
    """The faults of a run of ``seconds``, drawn from ``seed`` alone."""
    rng = random.Random(f"faults:{seed}")
    faults: list[Fault] = []
    at = rng.uniform(0.2, 0.6)
    while at < seconds:
        kind = rng.choice(KINDS)
        if kind in ("loss_in", "loss_out"):
            fault = Fault(
                at=at, kind=kind, duration=rng.uniform(0.5, 2.5), probability=rng.uniform(0.05, 0.4)
            )
        elif kind == "reset":
            fault = Fault(
                at=at, kind=kind, duration=rng.uniform(0.3, 1.5), probability=rng.uniform(0.02, 0.2)
            )
        elif kind == "partition":
            fault = Fault(at=at, kind=kind, duration=rng.uniform(0.05, 2.0))
        elif kind == "rate":
            fault = Fault(
                at=at,
                kind=kind,
                duration=rng.uniform(0.5, 3.0),
                rate_kbit=rng.choice((64, 256, 1024)),
            )
        elif kind == "kill":
            fault = Fault(at=at, kind=kind, duration=0.0, side=rng.choice(("server", "client")))
        else:
            fault = Fault(at=at, kind=kind, duration=0.0)
        faults.append(fault)
        at += fault.duration + rng.uniform(0.1, 0.8)
    return faults


def _port_match(direction: str) -> list[str]:
    ports = ",".join(str(p) for p in PORTS.values())
    flag = "--dports" if direction == "in" else "--sports"
    return ["-p", "tcp", "-m", "multiport", flag, ports]


@dataclass
class Injector:
    """Applies a schedule in a thread of its own, from :meth:`start` until :meth:`stop`."""

    lab: NetLab
    servers: Servers
    faults: list[Fault]
    seed: int
    applied: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="fault-injector", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop injecting and remove every fault (idempotent; waits at most ~15 s)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
        clear(self.lab)

    def _run(self) -> None:
        rng = random.Random(f"injector:{self.seed}")
        start = time.monotonic()
        for fault in self.faults:
            if self._stop.wait(max(0.0, start + fault.at - time.monotonic())):
                return
            began = time.monotonic() - start
            try:
                undo = self._apply(fault, rng)
            except Exception as exc:  # a fault that could not be made is reported, not fatal
                self.errors.append(f"{fault.describe()}: {exc}")
                continue
            in_force = time.monotonic()  # its commands done (each a process: tens of ms)
            self._stop.wait(fault.duration)
            try:
                for argv in undo:
                    run(argv)
            except Exception as exc:
                self.errors.append(f"undo {fault.describe()}: {exc}")
                clear(self.lab)
            self.applied.append(
                {
                    **asdict(fault),
                    "began": round(began, 3),
                    "began_at": round(start + began, 3),
                    # when it was all in force, and when undone (its undo commands done)
                    "in_force_at": round(in_force, 3),
                    "ended_at": round(time.monotonic(), 3),
                }
            )

    def _apply(self, fault: Fault, rng: random.Random) -> list[list[str]]:
        """Apply ``fault``; the commands that undo it."""
        lab = self.lab
        ipt = ["ip", "netns", "exec", lab.netns, "iptables"]
        rules: list[list[str]] = []
        if fault.kind == "loss_in" or fault.kind == "reset":
            chain, iface = "INPUT", ["-i", lab.ns_if]
            match = _port_match("in")
        elif fault.kind == "loss_out":
            chain, iface, match = "OUTPUT", ["-o", lab.ns_if], _port_match("out")
        if fault.kind in ("loss_in", "loss_out"):
            stat = ["-m", "statistic", "--mode", "random", "--probability", f"{fault.probability}"]
            rules.append([chain, *iface, *match, *stat, "-j", "DROP"])
        elif fault.kind == "reset":
            stat = ["-m", "statistic", "--mode", "random", "--probability", f"{fault.probability}"]
            rules.append([chain, *iface, *match, "!", "--syn", *stat, "-j", "REJECT", *TCP_RESET])
        elif fault.kind == "partition":
            rules.append(["INPUT", "-i", lab.ns_if, "-j", "DROP"])
            rules.append(["OUTPUT", "-o", lab.ns_if, "-j", "DROP"])
        for rule in rules:
            run([*ipt, "-I", *rule])
        if rules:
            return [[*ipt, "-D", *rule] for rule in rules]
        if fault.kind == "rate":
            tbf = ["tbf", "rate", f"{fault.rate_kbit}kbit", "burst", "8kb", "latency", "200ms"]
            run(lab.in_ns("tc", "qdisc", "replace", "dev", lab.ns_if, "root", *tbf))
            run(["tc", "qdisc", "replace", "dev", lab.host_if, "root", *tbf])
            return [
                lab.in_ns("tc", "qdisc", "del", "dev", lab.ns_if, "root"),
                ["tc", "qdisc", "del", "dev", lab.host_if, "root"],
            ]
        if fault.kind == "kill":
            self._kill_one(fault.side, rng)
        elif fault.kind == "reload":
            self.servers.reload_nginx()
        return []

    def _kill_one(self, side: str, rng: random.Random) -> None:
        lab = self.lab
        # Our established connections to nginx, seen from the client's end: local port.
        out = run(["ss", "-Htn", "state", "established", "dst", lab.server_addr])
        ports = sorted(
            {line.split()[2].rsplit(":", 1)[1] for line in out.splitlines() if line.strip()}
        )
        if not ports:
            return
        port = rng.choice(ports)
        if side == "server":
            run(lab.in_ns("ss", "-K", "-tn", "dst", lab.host_addr, "dport", "=", f":{port}"))
        else:
            run(["ss", "-K", "-tn", "dst", lab.server_addr, "sport", "=", f":{port}"])


def during(applied: list[dict[str, Any]], started: float, elapsed: float) -> list[str]:
    """The faults of ``applied`` (:attr:`Injector.applied`) in force at some moment of
    [``started``, ``started + elapsed``] (the machine's monotonic clock), each as "kind for N
    ms, from T s before (or after) the call's start", and, where the run recorded them, when
    it was all in force and when it was undone, relative to the call's start (its commands
    take time: a partition drops packets until its undo commands are done)."""
    out = []
    for fault in applied:
        began = fault.get("began_at")
        if began is None:
            continue
        ended = fault.get("ended_at", began + fault["duration"])
        if began <= started + elapsed and ended >= started:
            ms, since = fault["duration"] * 1000, began - started
            said = f"{fault['kind']} {ms:.0f} ms from {since:+.2f} s"
            if "ended_at" in fault:
                in_force = fault["in_force_at"] - started
                said += f" (in force {in_force:+.2f}..{ended - started:+.2f} s)"
            out.append(said)
    return out


def clear(lab: NetLab) -> None:
    """Remove every fault: the namespace's iptables rules and both qdiscs. Never raises."""
    run(lab.in_ns("iptables", "-F"), check=False)
    run(lab.in_ns("tc", "qdisc", "del", "dev", lab.ns_if, "root"), check=False)
    run(["tc", "qdisc", "del", "dev", lab.host_if, "root"], check=False)
