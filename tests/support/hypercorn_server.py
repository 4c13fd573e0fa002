"""A real hypercorn (with its ``h3`` extra, aioquic underneath) for HTTP/3 tests: started by
the test itself on loopback, as a subprocess, serving :mod:`tests.support.h3_app`.

Use the ``hypercorn`` fixture from :mod:`tests.support.fixtures`, or :func:`start_hypercorn`::

    server = hypercorn()
    async with open_h3_client(server.port, ca_pem=server.ca_pem) as client:
        await client.request("POST", "/x", [("x-request-id", "p1")], b"body")
    assert server.ledger().count(request_id="p1") == 1

It listens on one free 127.0.0.1 port number, TCP (``--bind``: HTTP/1.1 and HTTP/2 over TLS,
with ``Alt-Svc`` advertising HTTP/3) and UDP (``--quic-bind``: HTTP/3), with a ``trustme``
certificate (valid for 127.0.0.1 and localhost). The application answers ``GET`` with ``ok``
and echoes any body; it writes one ledger line per request it executed (:meth:`ledger`), with
the HTTP version it saw (``"3"`` for HTTP/3).

When hypercorn (or its aioquic) is not importable the fixture skips with the reason (the
``test`` extra installs ``hypercorn[h3]``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from .procs import (
    HOST,
    RequestLog,
    free_tcp_udp_port,
    issue_certificate,
    logged_and_accepts,
    read_lines,
    stop_process,
    tail,
    wait_ready,
)

__all__ = [
    "HypercornUnavailable",
    "Ledger",
    "LedgerEntry",
    "RunningHypercorn",
    "hypercorn_missing",
    "start_hypercorn",
]

_REPO = Path(__file__).resolve().parents[2]  # so the subprocess imports tests.support.h3_app


class HypercornUnavailable(Exception):
    """hypercorn is not installed here, or would not start; the message says which."""


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One request the application executed (its whole body read)."""

    method: str
    path: str
    #: ASGI's ``http_version``: ``"1.1"``, ``"2"`` or ``"3"``.
    http_version: str
    body_length: int
    request_id: str | None


class Ledger(RequestLog[LedgerEntry]):
    """What the application executed, one entry per request."""


@dataclass
class RunningHypercorn:
    """A started hypercorn. :meth:`stop` ends it (the fixture does, even if the test failed)."""

    port: int
    workdir: Path
    ca_pem: bytes
    process: subprocess.Popen[bytes]

    def url(self, path: str) -> str:
        return f"https://{HOST}:{self.port}{path}"

    def ledger(self, *, expect: int | None = None, timeout: float = 5.0) -> Ledger:
        """What the application executed; with ``expect``, wait (at most ``timeout`` seconds)
        for at least that many entries."""
        path = self.workdir / "ledger.jsonl"
        lines = read_lines(path, expect=expect, timeout=timeout, settle=False)
        return Ledger(tuple(LedgerEntry(**json.loads(line)) for line in lines))

    def error_log(self) -> str:
        return tail(self.workdir / "error.log")

    def stop(self) -> None:
        stop_process(self.process)
        shutil.rmtree(self.workdir, ignore_errors=True)


def hypercorn_missing() -> str | None:
    """Why hypercorn with HTTP/3 cannot run here, or None when it can."""
    for module in ("hypercorn", "aioquic"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed: pip install 'hypercorn[h3]' (the test extra has it)"
    return None


def _command(workdir: Path, port: int, log: Path) -> list[str]:
    return [
        *(sys.executable, "-m", "hypercorn"),
        *("--certfile", str(workdir / "server.pem"), "--keyfile", str(workdir / "server.key")),
        *("--bind", f"{HOST}:{port}", "--quic-bind", f"{HOST}:{port}"),
        *("--error-logfile", str(log), "--log-level", "INFO"),
        "tests.support.h3_app:app",
    ]


def start_hypercorn() -> RunningHypercorn:
    """Start hypercorn; raises :class:`HypercornUnavailable` (not installed, or it failed to
    start three times: the message carries its log)."""
    missing = hypercorn_missing()
    if missing is not None:
        raise HypercornUnavailable(missing)
    workdir = Path(tempfile.mkdtemp(prefix="trio-retry-hypercorn-"))
    ca = issue_certificate(workdir)
    env = {
        **os.environ,
        "TRIO_RETRY_LEDGER": str(workdir / "ledger.jsonl"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(_REPO), os.environ.get("PYTHONPATH")])),
    }
    error = "no attempt"
    for _ in range(3):  # a free port may be taken between probing and binding
        port = free_tcp_udp_port()
        log = workdir / "error.log"
        log.unlink(missing_ok=True)
        # stdout and stderr to a file: nothing reads a pipe while the test runs.
        with open(workdir / "stderr.log", "wb") as stderr:
            proc = subprocess.Popen(
                _command(workdir, port, log),
                stdin=subprocess.DEVNULL,
                stdout=stderr,
                stderr=stderr,
                env=env,
                cwd=workdir,
            )
        try:
            # Its log says the QUIC listener is up, and it accepts TCP.
            wait_ready(
                proc,
                partial(logged_and_accepts, log, "(QUIC)", port),
                name="hypercorn",
                waiting_for=port,
                timeout=15,
                unavailable=HypercornUnavailable,
            )
        except HypercornUnavailable as exc:
            stop_process(proc)
            error = f"{exc}: {tail(workdir / 'stderr.log')} {tail(log)}"
            continue
        pem = ca.cert_pem.bytes()
        return RunningHypercorn(port=port, workdir=workdir, ca_pem=pem, process=proc)
    shutil.rmtree(workdir, ignore_errors=True)
    raise HypercornUnavailable(f"hypercorn failed to start: {error}")
