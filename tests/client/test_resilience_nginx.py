"""Hedging, throttling and breaking against a server we did not write: nginx on loopback.

nginx is started by the test from a generated configuration (127.0.0.1, a free port), with an
access log of ``method uri status`` per request, so what nginx itself says it handled is what
is counted:

- ``/limited``: ``limit_req`` at 5 requests/s, no burst, 429 above it (nginx's own throttling);
- ``/dead``: ``proxy_pass`` to a port nobody listens on: nginx answers 502 (a gateway in front
  of a dead upstream);
- ``/ok``: ``return 200``;
- ``/backend/``: ``proxy_pass`` to a ``FaultServer`` (for a stall behind a real proxy).

Real time (nginx keeps its own clock); every loop is bounded in count and each test in time.
Skipped when nginx is not installed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

import trio_retry
from trio_retry import (
    AdaptiveThrottle,
    AdmissionRejected,
    CircuitBreaker,
    CircuitState,
    Evidence,
    Hedging,
    RetryPolicy,
    Upstream,
)
from trio_retry.testing import FaultServer, Respond, refused_port

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
pytestmark = pytest.mark.skipif(NGINX is None, reason="nginx is not installed")
ONE = RetryPolicy(max_attempts=1)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class Nginx:
    def __init__(self, workdir: Path, backend: int) -> None:
        self.workdir = workdir
        self.backend = backend
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> list[tuple[str, str, int]]:
        """What nginx handled: (method, uri, status) per request, in order."""
        lines = (self.workdir / "access.log").read_text().splitlines()
        return [(m, u, int(s)) for m, u, s in (line.split() for line in lines)]

    def start(self) -> None:
        os.chmod(self.workdir, 0o755)
        (self.workdir / "tmp").mkdir(mode=0o777)
        (self.workdir / "html").mkdir(mode=0o755)
        (self.workdir / "html" / "limited").write_text("ok\n")
        for _ in range(3):  # a free port can be taken between probing and binding
            self.port = _free_port()
            conf = self.workdir / "nginx.conf"
            conf.write_text(
                "worker_processes 1;\ndaemon off;\n"
                f"pid {self.workdir / 'nginx.pid'};\n"
                f"error_log {self.workdir / 'error.log'} warn;\n"
                "events { worker_connections 256; }\n"
                "http {\n"
                "    log_format counted '$request_method $uri $status';\n"
                f"    access_log {self.workdir / 'access.log'} counted;\n"
                f"    client_body_temp_path {self.workdir / 'tmp'};\n"
                f"    proxy_temp_path {self.workdir / 'tmp'};\n"
                "    limit_req_zone $binary_remote_addr zone=per_server:1m rate=5r/s;\n"
                "    server {\n"
                f"        listen 127.0.0.1:{self.port};\n"
                # A static file: ``return`` would answer in the rewrite phase, before
                # limit_req (preaccess) ever runs.
                f"        location /limited {{ root {self.workdir / 'html'}; limit_req"
                " zone=per_server; limit_req_status 429; }\n"
                f"        location /dead {{ proxy_pass http://127.0.0.1:{refused_port()}; }}\n"
                '        location /ok { return 200 "ok\\n"; }\n'
                f"        location /backend/ {{ proxy_pass http://127.0.0.1:{self.backend}; }}\n"
                "    }\n}\n"
            )
            self.proc = subprocess.Popen(
                [str(NGINX), "-e", str(self.workdir / "error.log"), "-p", str(self.workdir),
                 "-c", str(conf)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self.proc.poll() is None:
                with (
                    contextlib.suppress(OSError),
                    socket.create_connection(("127.0.0.1", self.port), timeout=0.2),
                ):
                    return
                time.sleep(0.05)
            self.stop()
        pytest.skip("nginx did not start: " + (self.workdir / "error.log").read_text()[-400:])

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.proc = None


@contextlib.contextmanager
def running_nginx(tmp_path: Path, backend: int = 1) -> Iterator[Nginx]:
    nginx = Nginx(tmp_path, backend)
    nginx.start()
    try:
        yield nginx
    finally:
        nginx.stop()


async def test_adaptive_throttle_against_nginx_limit_req(tmp_path: Path) -> None:
    with running_nginx(tmp_path) as nginx:
        url = nginx.url + "/limited"
        async with trio_retry.Client(retry=ONE) as plain:
            statuses = [(await plain.get(url)).status for _ in range(12)]
        assert statuses.count(429) >= 6  # back to back, far above 5/s
        with trio.fail_after(20):
            await trio.sleep(1.0)  # nginx's bucket refills
            upstream = Upstream(throttle=AdaptiveThrottle())
            async with trio_retry.Client(retry=ONE, default_upstream=upstream) as adaptive:
                throttled = [(await adaptive.get(url, deadline=10)).status for _ in range(12)]
                rate = adaptive.upstream_status(nginx.url).send_rate
        handled = nginx.log()
    assert rate is not None
    assert rate < 5  # it settled below nginx's limit
    assert throttled.count(429) <= 4  # the first (to learn), and at most a few more
    # nginx's own log agrees with what the clients saw, call for call.
    assert [status for _, _, status in handled] == statuses + throttled


async def test_breaker_against_nginx_gateway_errors(tmp_path: Path) -> None:
    with running_nginx(tmp_path) as nginx:
        breaker = CircuitBreaker(consecutive_failures=3, cool_down=0.5, name="behind-nginx")
        upstream = Upstream(breaker=breaker)
        with trio.fail_after(20):
            async with trio_retry.Client(retry=ONE, default_upstream=upstream) as client:
                for _ in range(3):
                    assert (await client.get(nginx.url + "/dead")).status == 502
                rejected = 0
                for _ in range(10):
                    with pytest.raises(AdmissionRejected) as info:
                        await client.get(nginx.url + "/dead")
                    assert info.value.evidence is Evidence.NOT_SENT
                    rejected += 1
                assert "circuit breaker of behind-nginx is open" in str(info.value)
                await trio.sleep(0.6)  # the cool-down; the probe finds nginx healthy
                assert (await client.get(nginx.url + "/ok")).status == 200
                assert client.upstream_status(nginx.url).circuit is CircuitState.CLOSED
        handled = nginx.log()
    assert rejected == 10
    assert handled == [("GET", "/dead", 502)] * 3 + [("GET", "/ok", 200)]


async def test_hedging_through_nginx(tmp_path: Path, nursery: trio.Nursery) -> None:
    backend = FaultServer(http2=False)
    await nursery.start(backend.serve)
    with running_nginx(tmp_path, backend.port) as nginx:
        hedging = Hedging(delay=0.2, max_share=1.0)
        async with trio_retry.Client(default_upstream=Upstream(hedging=hedging)) as client:
            with trio.fail_after(20):
                backend.script(Respond(200, body=b"slow", delay=3.0), Respond(200, body=b"fast"))
                start = trio.current_time()
                response = await client.get(nginx.url + "/backend/item")
                took = trio.current_time() - start
                backend.script(Respond(201, delay=0.5))
                created = await client.post(nginx.url + "/backend/orders", content=b"{}")
                await trio.sleep(3.0)  # the backend ends the stalled copy; nginx logs it
        handled = nginx.log()
    assert response.content == b"fast"
    assert took < 2.0
    assert str(response.attempts[0].error) == "cancelled: attempt 2 answered first"
    assert len(created.attempts) == 1
    # nginx logged the loser as 499 (client closed the request), the winner as 200, and one
    # POST: the POST was never hedged.
    assert sorted(handled) == sorted(
        [("GET", "/backend/item", 499), ("GET", "/backend/item", 200),
         ("POST", "/backend/orders", 201)]
    )  # fmt: skip
    assert [r.method for r in backend.requests] == ["GET", "GET", "POST"]
