"""The pool against a server we did not write: one nginx on loopback listening on 40 ports (40
origins), the client limited to 10 connections, HTTP/1.1 and h2c. nginx's own access log says
what it executed and on how many connections. Skipped when nginx is not installed.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

import trio_retry

NGINX = shutil.which("nginx") or next(
    (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if Path(p).exists()), None
)
pytestmark = pytest.mark.skipif(NGINX is None, reason="nginx is not installed")

ORIGINS = 40
MAX_CONNECTIONS = 10
CONFIG = """
daemon off;
master_process off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 512; }}
http {{
    log_format pool '$server_port $connection $status';
    access_log {dir}/access.log pool;
    client_body_temp_path {dir}/tmp;
    proxy_temp_path {dir}/tmp;
    fastcgi_temp_path {dir}/tmp;
    uwsgi_temp_path {dir}/tmp;
    scgi_temp_path {dir}/tmp;
    keepalive_timeout 30s;
    server {{
{listens}
        location / {{ return 200 "ok"; }}
    }}
}}
"""


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for sock in socks:
            sock.close()


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
        return True
    return False


@pytest.fixture(params=[False, True], ids=["http11", "h2c"])
def nginx(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[list[int], Path, bool]]:
    assert NGINX is not None
    h2c: bool = request.param
    (tmp_path / "tmp").mkdir()
    for _ in range(3):  # a free port can be taken between probing and binding
        ports = _free_ports(ORIGINS)
        suffix = " http2" if h2c else ""
        listens = "\n".join(f"        listen 127.0.0.1:{p}{suffix};" for p in ports)
        conf = tmp_path / "nginx.conf"
        conf.write_text(CONFIG.format(dir=tmp_path, listens=listens))
        proc = subprocess.Popen(
            [NGINX, "-p", str(tmp_path), "-c", str(conf), "-e", str(tmp_path / "error.log")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while proc.poll() is None and not _listening(ports[-1]) and time.monotonic() < deadline:
            time.sleep(0.02)
        if proc.poll() is None and _listening(ports[-1]):
            break
        proc.kill()
        proc.wait(5)
    else:
        pytest.fail("nginx did not start: " + (tmp_path / "error.log").read_text()[-500:])
    try:
        yield ports, tmp_path / "access.log", h2c
    finally:
        proc.terminate()
        proc.wait(10)


async def test_many_origins_on_nginx_under_the_global_limit(
    nginx: tuple[list[int], Path, bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    ports, log, h2c = nginx
    sockets: list[Any] = []
    peak = 0
    real = trio.socket.socket

    def counting_socket(*args: Any, **kwargs: Any) -> Any:
        nonlocal peak, sockets
        sock = real(*args, **kwargs)
        sockets = [s for s in sockets if s.fileno() != -1]
        sockets.append(sock)
        peak = max(peak, len(sockets))
        return sock

    monkeypatch.setattr(trio.socket, "socket", counting_socket)
    statuses: list[int] = []

    async def one(c: trio_retry.Client, port: int) -> None:
        response = await c.get(f"http://127.0.0.1:{port}/")
        statuses.append(response.status)

    with trio.fail_after(60):
        async with trio_retry.Client(
            max_connections=MAX_CONNECTIONS, http2_prior_knowledge=h2c, deadline=30.0
        ) as c:
            async with trio.open_nursery() as nursery:
                for port in ports * 3:
                    nursery.start_soon(one, c, port)
            opened = c.pool.opened
    assert statuses == [200] * (3 * ORIGINS)
    assert peak <= MAX_CONNECTIONS
    for _ in range(50):  # nginx writes its log line after the response
        lines = log.read_text().splitlines() if log.exists() else []
        if len(lines) >= 3 * ORIGINS:
            break
        await trio.sleep(0.05)
    executed = [line.split() for line in lines]
    assert len(executed) == 3 * ORIGINS  # each call executed once
    assert {int(port) for port, _, _ in executed} == set(ports)
    connections = {serial for _, serial, _ in executed}
    print(f"nginx: {len(executed)} requests on {len(connections)} connections, peak {peak}")
    # Every origin needs a connection of its own; the pool opened exactly what nginx accepted.
    assert ORIGINS <= len(connections) == opened
