"""The pool against a server we did not write: one nginx on loopback (:mod:`tests.support.nginx`)
listening on 40 ports (40 origins), the client limited to 10 connections, HTTP/1.1 and h2c.
nginx's own access log says what it executed and on how many connections. Skipped when nginx is
not installed.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

import trio_retry
from tests.support.fixtures import StartNginx
from tests.support.fixtures import nginx as nginx
from tests.support.nginx import RunningNginx

ORIGINS = 40
MAX_CONNECTIONS = 10
NAMES = tuple(f"origin{i}" for i in range(ORIGINS))


@pytest.fixture(params=[False, True], ids=["http11", "h2c"])
def origins(request: pytest.FixtureRequest, nginx: StartNginx) -> tuple[RunningNginx, bool]:
    """nginx answering 200 on 40 ports, h2c (prior knowledge) on all of them or on none."""
    h2c: bool = request.param
    suffix = " http2" if h2c else ""
    listens = "".join(f"        listen {{{{host}}}}:{{{{{name}}}}}{suffix};\n" for name in NAMES)
    server = f'    server {{\n{listens}        location / {{ return 200 "ok"; }}\n    }}\n'
    return nginx(keepalive_timeout="30s", servers=server, listeners=NAMES), h2c


async def test_many_origins_on_nginx_under_the_global_limit(
    origins: tuple[RunningNginx, bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, h2c = origins
    ports = [server.ports[name] for name in NAMES]
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
    # nginx writes its log line after the response
    executed = server.log(expect=3 * ORIGINS).entries
    assert len(executed) == 3 * ORIGINS  # each call executed once
    assert {entry.server_port for entry in executed} == set(ports)
    connections = {entry.connection for entry in executed}
    print(f"nginx: {len(executed)} requests on {len(connections)} connections, peak {peak}")
    # Every origin needs a connection of its own; the pool opened exactly what nginx accepted.
    assert ORIGINS <= len(connections) == opened
