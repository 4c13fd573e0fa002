"""One run of the lab, start to end: build it, run each client through the same faults, judge,
and take everything down again, whatever happens.

Order: refuse unless root with the tools (one line); under the setup lock, remove what runs
that are over left behind, reserve this run's name and directory, start its janitor and build
the namespace and veth pair; start the backend and nginx in it; then per client: a fresh fault
injector on the seed's schedule, the client's own process (bounded by a timeout), the faults
cleared, a pause so the requests still in flight reach the ledger. Then the ledger and the
access log are read and every client judged (:mod:`.checker`).

Teardown is in ``finally`` and runs to its end whatever arrives (:mod:`.lifeline`): SIGINT,
SIGTERM and SIGHUP end the run the same way, and any signal during the teardown waits for it.
The client's process, the injector, nginx and the backend are stopped, the namespace (with its
iptables rules and qdiscs) and the veth pair deleted, the working directory removed; if the
runner is killed outright, its children die with it and the janitor does the rest.
``benchmarks.exactly_once.netlab.leftovers`` checks it.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.exactly_once import faults, lifeline, netlab, servers
from benchmarks.exactly_once.checker import DEFAULT_TOLERANCE, check
from benchmarks.exactly_once.peers import PEERS, RESULT_TAG
from benchmarks.exactly_once.records import ClientRun, LedgerEntry, read_access_log, read_ledger
from benchmarks.exactly_once.workload import GRACE
from benchmarks.nginx import find_nginx, nginx_version

ROOT = Path(__file__).resolve().parents[2]
#: a client's process may take this long to import and start before its calls begin
STARTUP = 30.0


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    seed: int
    calls: int  # per client, at most
    seconds: float  # per client: no call starts after this
    concurrency: int
    deadline: float
    max_delay: float  # the backend's delay is uniform in [0, max_delay]
    keepalive_requests: int
    clients: tuple[str, ...]
    tolerance: float = DEFAULT_TOLERANCE
    #: False: the baseline, no fault at all (every column must then be 0: a harness check)
    faults: bool = True


def _run_client(
    name: str, cfg: RunConfig, lab: netlab.NetLab, srv: servers.Servers, log: Callable[[str], None]
) -> tuple[ClientRun, list[dict[str, Any]], list[str]]:
    config = {
        "client": name,
        "urls": {
            "h1": f"http://{lab.server_addr}:{servers.PORTS['h1']}",
            "h2": f"https://{lab.server_addr}:{servers.PORTS['h2']}",
            "h2c": f"http://{lab.server_addr}:{servers.PORTS['h2c']}",
        },
        "ca_file": str(srv.ca_file),
        "seed": cfg.seed,
        "calls": cfg.calls,
        "concurrency": cfg.concurrency,
        "deadline": cfg.deadline,
        "seconds": cfg.seconds,
    }
    srv.check_alive()
    injector = faults.Injector(
        lab=lab,
        servers=srv,
        faults=faults.schedule(cfg.seed, cfg.seconds) if cfg.faults else [],
        seed=cfg.seed,
    )
    proc = lifeline.child(
        [sys.executable, "-m", "benchmarks.exactly_once.peers", json.dumps(config)],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    injector.start()
    try:
        out, err = proc.communicate(timeout=STARTUP + cfg.seconds + cfg.deadline + GRACE)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate(timeout=10)
        err = "the client's process timed out and was killed\n" + err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        injector.stop()
    time.sleep(cfg.max_delay + 0.5)  # requests still on their way reach the ledger
    result = next(
        (line for line in reversed(out.splitlines()) if line.startswith(RESULT_TAG)), None
    )
    if result is None:
        tail = err.strip().splitlines()[-3:]
        log(f"  {name}: no result (exit {proc.returncode}): {' | '.join(tail)}")
        run = ClientRun(
            client=name,
            calls=(),
            sockets_left=0,
            available=False,
            note="crashed: " + " | ".join(tail),
        )
    else:
        run = ClientRun.from_json(json.loads(result[len(RESULT_TAG) :]))
    return run, injector.applied, injector.errors


def rescore(doc: dict[str, Any], *, tolerance: float | None = None) -> dict[str, Any]:
    """Judge a recorded run again (a document written with its calls and ledger) with this
    checker; the access-log figure is kept as recorded (the document has no access log)."""
    tolerance = (
        doc["config"].get("tolerance", DEFAULT_TOLERANCE) if tolerance is None else tolerance
    )
    clients = []
    for entry in doc["clients"]:
        entry = dict(entry)
        run = ClientRun.from_json(entry["run"])
        if run.available and "ledger" in entry:
            ledger = [LedgerEntry(**e) for e in entry["ledger"]]
            kept = entry.get("score", {}).get("info", {}).get("executed_without_access_log_line")
            score = check(run, ledger, tolerance=tolerance).to_json()
            if kept:
                score["info"]["executed_without_access_log_line"] = kept
            applied = entry.get("faults", [])
            for call in score["unsettled"]:  # as the run added them
                call["faults"] = faults.during(applied, call["started"], call["elapsed"])
            entry["score"] = score
        clients.append(entry)
    return {**doc, "clients": clients}


def _print(line: str) -> None:
    """A progress line, at once (a watcher waits for "lab up"); never raises (it is called
    during teardown, whose output may be gone)."""
    with contextlib.suppress(OSError, ValueError):
        print(line, flush=True)


def run_lab(cfg: RunConfig, log: Callable[[str], None] = _print) -> dict[str, Any]:
    """Run the lab; the document the report prints and writes. Raises
    :class:`~benchmarks.exactly_once.netlab.LabError` when the lab cannot run here."""
    reason = netlab.why_not_available() or (
        "needs nginx (`apt-get install nginx`)" if find_nginx() is None else None
    )
    if reason is not None:
        raise netlab.LabError(reason)
    unknown = [name for name in cfg.clients if name not in PEERS]
    if unknown:
        raise netlab.LabError(f"unknown client(s) {unknown}; known: {', '.join(PEERS)}")
    runs: list[tuple[ClientRun, list[dict[str, Any]], list[str]]] = []
    started = time.monotonic()
    reserved: netlab.Reservation | None = None
    janitor: lifeline.Janitor | None = None
    lab: netlab.NetLab | None = None
    srv: servers.Servers | None = None

    def teardown() -> None:
        log("taking the lab down")
        if srv is not None:
            srv.stop()
        if lab is not None:
            faults.clear(lab)
        if reserved is not None:
            netlab.destroy(reserved.lab.name)
            reserved.release()
        if janitor is not None:
            janitor.done()
        log("lab down")  # the runner's own teardown ended (the janitor was not needed)

    with lifeline.Interrupts() as interrupts:
        try:
            with netlab.setup_lock():
                stale = netlab.remove_stale()
                if stale:
                    log(f"removed what runs that are over left behind: {', '.join(stale)}")
                reserved = netlab.reserve()
                janitor = lifeline.Janitor(reserved.lab.name)
                lab = netlab.create(reserved.lab)
            srv = servers.start(
                lab,
                lab.workdir,
                seed=cfg.seed,
                max_delay=cfg.max_delay,
                keepalive_requests=cfg.keepalive_requests,
            )
            log(f"lab up: {lab.netns}, nginx at {lab.server_addr} (h1, h2 over TLS, h2c)")
            for name in cfg.clients:
                log(f"  {name} ...")
                runs.append(_run_client(name, cfg, lab, srv, log))
            ledger = read_ledger(srv.ledger)
            access = read_access_log(srv.access_log)
        finally:
            interrupts.teardown(teardown)
    logged = Counter(line.rid for line in access)
    clients = []
    for run, applied, errors in runs:
        rids = {call.rid for call in run.calls}
        entry: dict[str, Any] = {
            "run": run.to_json(),
            # the client's part of the ledger: the document is a recorded run, which the
            # checker can judge again (records.ClientRun.from_json, records.LedgerEntry)
            "ledger": [asdict(e) for e in ledger if e.rid in rids],
            "faults": applied,
            "fault_errors": errors,
        }
        if run.available:
            entry["score"] = check(run, ledger, tolerance=cfg.tolerance, logged=logged).to_json()
            for call in entry["score"]["unsettled"]:
                call["faults"] = faults.during(applied, call["started"], call["elapsed"])
        clients.append(entry)
    binary = find_nginx()
    return {
        "config": asdict(cfg),
        "command": " ".join(["python", "-m", "benchmarks.exactly_once", *sys.argv[1:]]),
        "machine": {
            "kernel": platform.release(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "nginx": nginx_version(binary)[0] if binary else None,
        },
        "netns": lab.netns,
        "wall": round(time.monotonic() - started, 1),
        "ledger_lines": len(ledger),
        "access_log_lines": len(access),
        "clients": clients,
    }
