"""Propagation against a server we did not write: nginx, started here on loopback, logs the
``traceparent`` of every request it executed; each must be the context of one of our spans.

Skipped when nginx is not installed (``.ci/run`` installs it).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import trio_retry
from trio_retry import Backoff, RetryPolicy

from .conftest import Otel

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)

pytestmark = pytest.mark.skipif(NGINX is None, reason="nginx is not installed")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _config(workdir: Path, port: int) -> str:
    tmp = workdir / "tmp"
    return f"""
worker_processes 1;
daemon off;
pid {workdir / "nginx.pid"};
error_log {workdir / "error.log"} warn;
events {{ worker_connections 64; }}
http {{
    log_format traced '$request_method $uri $status "$http_traceparent"';
    access_log {workdir / "access.log"} traced;
    client_body_temp_path {tmp / "body"};
    proxy_temp_path {tmp / "proxy"};
    fastcgi_temp_path {tmp / "fastcgi"};
    uwsgi_temp_path {tmp / "uwsgi"};
    scgi_temp_path {tmp / "scgi"};
    server {{
        listen 127.0.0.1:{port};
        location /busy {{ return 503 "busy\\n"; }}
        location / {{ return 200 "ok\\n"; }}
    }}
}}
"""


@pytest.fixture
def nginx(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """``(base URL, access log)`` of an nginx serving /busy (503) and / (200)."""
    assert NGINX is not None
    os.chmod(tmp_path, 0o755)  # workers run unprivileged when we are root
    (tmp_path / "tmp").mkdir()
    for _ in range(3):  # a free port can be taken between probing and binding
        port = _free_port()
        conf = tmp_path / "nginx.conf"
        conf.write_text(_config(tmp_path, port))
        proc = subprocess.Popen(
            [NGINX, "-e", str(tmp_path / "error.log"), "-p", str(tmp_path), "-c", str(conf)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        if proc.poll() is None:
            break
    else:
        pytest.fail("nginx did not start: " + (tmp_path / "error.log").read_text())
    try:
        yield f"http://127.0.0.1:{port}", tmp_path / "access.log"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _logged(log: Path, expected: int) -> list[list[str]]:
    for _ in range(100):  # bounded: nginx writes each line as the request ends
        lines = log.read_text().splitlines() if log.exists() else []
        if len(lines) >= expected:
            break
        time.sleep(0.02)
    return [line.split(" ", 3) for line in lines]


async def test_nginx_logs_one_traceparent_per_attempt(nginx: tuple[str, Path], otel: Otel) -> None:
    url, log = nginx
    policy = RetryPolicy(max_attempts=3, backoff=Backoff(initial=0.0, jitter="none"))
    async with trio_retry.Client(retry=policy, telemetry=otel.telemetry) as client:
        busy = await client.get(url + "/busy")
        fine = await client.get(url + "/")
    assert (busy.status, fine.status) == (503, 200)
    spans = otel.spans()
    assert [dict(s.attributes or {})["http.response.status_code"] for s in spans] == [
        503,
        503,
        503,
        200,
    ]
    logged = _logged(log, 4)
    assert [(method, path, status) for method, path, status, _ in logged] == [
        ("GET", "/busy", "503"),
        ("GET", "/busy", "503"),
        ("GET", "/busy", "503"),
        ("GET", "/", "200"),
    ]
    sent = [parent.strip('"').split("-") for *_, parent in logged]
    ours = [(f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}") for s in spans]
    assert [(trace_id, span_id) for _, trace_id, span_id, _ in sent] == ours
    assert len({span_id for _, span_id in ours}) == 4
