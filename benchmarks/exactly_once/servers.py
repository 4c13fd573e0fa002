"""The server side of the lab: nginx (the OS package) in front of the ledger backend, both
inside the server namespace.

nginx listens on the namespace's address only: HTTP/1.1 cleartext (``h1``), TLS with ALPN
``h2`` and ``http/1.1`` (``h2``; a client without HTTP/2 gets HTTP/1.1 there) and h2c with prior
knowledge (``h2c``). ``keepalive_requests`` is small, so HTTP/1.1 connections are closed and
HTTP/2 connections sent GOAWAY every few requests: the rotation a client must survive.
``proxy_pass`` forwards every request to the backend (:mod:`.backend`) on the namespace's
loopback, once nginx has read the whole request body.

The access log is the second witness (:func:`read_access_log`): one line per request nginx
finished, with the request id and attempt headers, the status and the upstream's status. A
request nginx never read (lost, reset, cut by a partition before the head arrived) leaves no
line, and neither does one still in flight when the log is read.

nginx's workers, which handle the traffic, run as ``nobody`` (its master, which reads the key
and opens the logs, as root): the working directory lets them through (0711) to the temporary
directories nginx creates for them, and the key is readable by root only (0600). Both servers
are children of the runner that die with it (:mod:`.lifeline`).
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import nginx
from benchmarks.exactly_once.lifeline import child
from benchmarks.exactly_once.netlab import LabError, NetLab, run

PORTS = {"h1": 8080, "h2": 8443, "h2c": 8081}
BACKEND_PORT = 9000
_LOG_FORMAT = (
    "$http_x_request_id\\t$http_x_attempt\\t$request_method\\t$server_protocol\\t$status\\t"
    "$upstream_status\\t$connection\\t$connection_requests\\t$request_time"
)


@dataclass
class Servers:
    """nginx and the backend, running in the lab's namespace."""

    workdir: Path
    ca_file: Path
    nginx: subprocess.Popen[bytes]
    backend: subprocess.Popen[bytes]

    @property
    def ledger(self) -> Path:
        return self.workdir / "ledger.jsonl"

    @property
    def access_log(self) -> Path:
        return self.workdir / "access.log"

    def reload_nginx(self) -> None:
        """``nginx -s reload``: new workers, old ones finish their connections gracefully."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.nginx.pid, signal.SIGHUP)

    def check_alive(self) -> None:
        for name, proc in (("nginx", self.nginx), ("backend", self.backend)):
            if proc.poll() is not None:
                raise LabError(f"{name} exited with status {proc.returncode}")

    def stop(self) -> None:
        """Stop both (SIGTERM, then SIGKILL after 5 s). Idempotent; never raises; the
        directory stays (the runner removes it once it has read the ledger and the log)."""
        for proc in (self.nginx, self.backend):
            if proc.poll() is None:
                proc.terminate()
        for proc in (self.nginx, self.backend):
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)


def _unprivileged() -> str:
    """nginx's ``user`` directive: ``nobody`` and its own group (``nogroup`` on Debian)."""
    user = pwd.getpwnam("nobody")
    return f"user {user.pw_name} {grp.getgrgid(user.pw_gid).gr_name};\n"


def _config(lab: NetLab, workdir: Path, version: tuple[int, ...], keepalive_requests: int) -> str:
    addr = lab.server_addr
    certs = nginx.tls_lines(workdir / "server.pem", workdir / "server.key", protocols=False)
    location = (
        "        location / {\n"
        f"            proxy_pass http://127.0.0.1:{BACKEND_PORT};\n"
        "            proxy_read_timeout 30s;\n"
        "        }\n"
    )
    return nginx.config(
        workdir,
        generated_by="benchmarks/exactly_once/servers.py for one lab run",
        main=_unprivileged(),
        http=(
            f"    log_format lab '{_LOG_FORMAT}';\n"
            f"    access_log {workdir / 'access.log'} lab;\n"
            f"    keepalive_requests {keepalive_requests};\n"
            "    keepalive_timeout 30s;\n"
        ),
        servers=[
            nginx.server(nginx.listen(f"{addr}:{PORTS['h1']}", version), location),
            nginx.server(
                nginx.listen(f"{addr}:{PORTS['h2']}", version, ssl=True, http2=True),
                certs,
                location,
            ),
            nginx.server(nginx.listen(f"{addr}:{PORTS['h2c']}", version, http2=True), location),
        ],
    )


def _wait_listening(
    lab: NetLab, ports: list[int], procs: dict[str, subprocess.Popen[bytes]]
) -> None:
    end = time.monotonic() + 10
    while True:
        for name, proc in procs.items():
            if proc.poll() is not None:
                raise LabError(f"{name} exited with status {proc.returncode}")
        out = run(lab.in_ns("ss", "-Htln"), check=False)
        if all(f":{port} " in out for port in ports):
            return
        if time.monotonic() > end:
            raise LabError(f"the servers did not listen on {ports} within 10 s")
        time.sleep(0.05)


def start(
    lab: NetLab, workdir: Path, *, seed: int, max_delay: float, keepalive_requests: int
) -> Servers:
    """Start the backend and nginx in the lab's namespace; both listening when it returns."""
    import trustme

    binary = nginx.find_nginx()
    if binary is None:
        raise LabError("needs nginx (`apt-get install nginx`)")
    _, version = nginx.nginx_version(binary)
    (workdir / "tmp").mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    cert = ca.issue_cert(lab.server_addr)
    key = workdir / "server.key"
    key.touch(mode=0o600)  # before the bytes: never readable by others, not even for a moment
    cert.private_key_pem.write_to_path(str(key))
    cert.cert_chain_pems[0].write_to_path(str(workdir / "server.pem"))
    ca.cert_pem.write_to_path(str(workdir / "ca.pem"))
    conf = workdir / "nginx.conf"
    conf.write_text(_config(lab, workdir, version, keepalive_requests))
    ledger = workdir / "ledger.jsonl"
    ledger.touch()
    backend = child(
        lab.in_ns(
            sys.executable,
            "-m",
            "benchmarks.exactly_once.backend",
            str(BACKEND_PORT),
            str(ledger),
            str(seed),
            str(max_delay),
        ),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        cwd=Path(__file__).resolve().parents[2],
    )
    proxy = child(
        lab.in_ns(binary, "-p", str(workdir), "-c", str(conf)),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    servers = Servers(workdir=workdir, ca_file=workdir / "ca.pem", nginx=proxy, backend=backend)
    try:
        _wait_listening(lab, [BACKEND_PORT, *PORTS.values()], {"backend": backend, "nginx": proxy})
    except BaseException:
        servers.stop()
        raise
    return servers
