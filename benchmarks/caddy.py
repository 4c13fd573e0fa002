"""caddy from the OS packages, started on loopback: the HTTP/3 server of the benchmarks.

``start_caddy(workdir, tls)`` writes a Caddyfile and runs ``caddy run`` with it: one site on
``https://127.0.0.1:PORT`` speaking HTTP/1.1, HTTP/2 (TCP) and HTTP/3 (UDP, the same port
number), with the given certificate, serving

- ``/small``: the answer every benchmark server gives there (``SMALL_BODY``, 13 bytes), written
  by caddy itself;
- ``/bulk/NAME``: the files of ``workdir/bulk`` (``file_server``);
- a JSON access log (``workdir/access.log``) with the protocol of each request.

The site binds 127.0.0.1 explicitly: without it caddy's QUIC listener is on ``::``, and a
client that sends no SNI (an IP address is never sent as SNI) gets no certificate over QUIC
(caddy picks the certificate by the local address then). Admin API off, no automatic HTTPS.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .processes import HOST, accepts, free_tcp_udp_port, stop_process, wait_ready
from .scenarios.throughput import SMALL_BODY

__all__ = ["CaddyUnavailable", "RunningCaddy", "find_caddy", "start_caddy"]


class CaddyUnavailable(RuntimeError):
    """caddy is not installed, or did not start (the message says which)."""


@dataclass
class RunningCaddy:
    process: subprocess.Popen[bytes]
    port: int
    version: str
    access_log: Path
    bulk_dir: Path

    @property
    def url(self) -> str:
        return f"https://{HOST}:{self.port}"

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 5 s."""
        stop_process(self.process)


def find_caddy() -> str | None:
    """The caddy binary on PATH (Debian's package: /usr/bin/caddy), or None."""
    return shutil.which("caddy")


def _caddyfile(port: int, cert: str, key: str, workdir: Path) -> str:
    return f"""{{
    admin off
    auto_https off
    servers {{
        protocols h1 h2 h3
    }}
}}
https://{HOST}:{port} {{
    bind {HOST}
    tls {cert} {key}
    log {{
        output file {workdir / "access.log"}
        format json
    }}
    respond /small "{SMALL_BODY.decode()}" 200
    handle_path /bulk/* {{
        root * {workdir / "bulk"}
        file_server
    }}
}}
"""


def start_caddy(workdir: Path, cert_chain: str, key: str, *, timeout: float = 10.0) -> RunningCaddy:
    """Start caddy serving ``workdir/bulk`` (created); raises :class:`CaddyUnavailable`."""
    binary = find_caddy()
    if binary is None:
        raise CaddyUnavailable("caddy is not installed (apt-get install caddy)")
    version = subprocess.run(
        [binary, "version"], capture_output=True, text=True, timeout=10, check=False
    ).stdout.strip()
    (workdir / "bulk").mkdir(parents=True, exist_ok=True)
    try:
        port = free_tcp_udp_port()
    except OSError as exc:
        raise CaddyUnavailable(str(exc)) from exc
    config = workdir / "Caddyfile"
    config.write_text(_caddyfile(port, cert_chain, key, workdir))
    with open(workdir / "caddy.log", "wb") as log:  # (the child keeps its own descriptor)
        process = subprocess.Popen(
            [binary, "run", "--config", str(config), "--adapter", "caddyfile"],
            stdout=subprocess.DEVNULL,
            stderr=log,
            cwd=workdir,
        )
    running = RunningCaddy(process, port, version, workdir / "access.log", workdir / "bulk")
    try:
        wait_ready(
            process,
            lambda: accepts(port),
            name="caddy",
            waiting_for=f"{HOST}:{port}",
            timeout=timeout,
            unavailable=CaddyUnavailable,
        )
    except CaddyUnavailable as exc:
        running.stop()
        tail = (workdir / "caddy.log").read_text(errors="replace")[-2000:]
        raise CaddyUnavailable(f"{exc}: {tail}") from None
    time.sleep(0.2)  # the UDP listener starts just after the TCP one
    return running
