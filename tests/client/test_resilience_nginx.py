"""Hedging, throttling and breaking against a server we did not write: nginx on loopback.

nginx is started by the test (:mod:`tests.support.nginx`: a generated configuration, 127.0.0.1,
a free port), and what its own access log says it handled is what is counted:

- ``/limited``: ``limit_req`` at 5 requests/s, no burst, 429 above it (nginx's own throttling);
- ``/dead``: ``proxy_pass`` to a port nobody listens on: nginx answers 502 (a gateway in front
  of a dead upstream);
- ``/ok``: ``return 200``;
- ``/backend/``: ``proxy_pass`` to a ``FaultServer`` (for a stall behind a real proxy).

Real time (nginx keeps its own clock); every loop is bounded in count and each test in time.
Skipped when nginx is not installed.
"""

from __future__ import annotations

import pytest
import trio

import trio_retry
from tests.support.fixtures import StartNginx
from tests.support.fixtures import nginx as nginx
from tests.support.nginx import RunningNginx
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

ONE = RetryPolicy(max_attempts=1)
LIMIT_ZONE = "    limit_req_zone $binary_remote_addr zone=per_server:1m rate=5r/s;\n"
SERVER = """
    server {
        listen {{host}}:{{resil}};
        # A static file: ``return`` would answer in the rewrite phase, before limit_req
        # (preaccess) ever runs.
        location /limited { root {{workdir}}/html; limit_req zone=per_server;
                            limit_req_status 429; }
        location /dead { proxy_pass http://{{host}}:{{refused}}; }
        location /ok { return 200 "ok\\n"; }
        location /backend/ { proxy_pass http://{{host}}:{{backend}}; }
    }
"""


def _start(nginx: StartNginx, backend: int = 1) -> tuple[RunningNginx, str]:
    """nginx with the routes above, and its base URL."""
    server = nginx(
        extra_http=LIMIT_ZONE,
        servers=SERVER,
        listeners=("resil",),
        values={"backend": backend, "refused": refused_port()},
        files={"html/limited": b"ok\n"},
    )
    return server, server.url("resil", "")


def _handled(server: RunningNginx) -> list[tuple[str, str, int]]:
    """What nginx handled: (method, uri, status) per request, in order."""
    return [(e.method, e.uri, e.status) for e in server.log().entries]


async def test_adaptive_throttle_against_nginx_limit_req(nginx: StartNginx) -> None:
    server, base = _start(nginx)
    url = base + "/limited"
    async with trio_retry.Client(retry=ONE) as plain:
        statuses = [(await plain.get(url)).status for _ in range(12)]
    assert statuses.count(429) >= 6  # back to back, far above 5/s
    with trio.fail_after(20):
        await trio.sleep(1.0)  # nginx's bucket refills
        upstream = Upstream(throttle=AdaptiveThrottle())
        async with trio_retry.Client(retry=ONE, default_upstream=upstream) as adaptive:
            throttled = [(await adaptive.get(url, deadline=10)).status for _ in range(12)]
            rate = adaptive.upstream_status(base).send_rate
    handled = _handled(server)
    assert rate is not None
    assert rate < 5  # it settled below nginx's limit
    assert throttled.count(429) <= 4  # the first (to learn), and at most a few more
    # nginx's own log agrees with what the clients saw, call for call.
    assert [status for _, _, status in handled] == statuses + throttled


async def test_breaker_against_nginx_gateway_errors(nginx: StartNginx) -> None:
    server, base = _start(nginx)
    breaker = CircuitBreaker(consecutive_failures=3, cool_down=0.5, name="behind-nginx")
    upstream = Upstream(breaker=breaker)
    with trio.fail_after(20):
        async with trio_retry.Client(retry=ONE, default_upstream=upstream) as client:
            for _ in range(3):
                assert (await client.get(base + "/dead")).status == 502
            rejected = 0
            for _ in range(10):
                with pytest.raises(AdmissionRejected) as info:
                    await client.get(base + "/dead")
                assert info.value.evidence is Evidence.NOT_SENT
                rejected += 1
            assert "circuit breaker of behind-nginx is open" in str(info.value)
            await trio.sleep(0.6)  # the cool-down; the probe finds nginx healthy
            assert (await client.get(base + "/ok")).status == 200
            assert client.upstream_status(base).circuit is CircuitState.CLOSED
    handled = _handled(server)
    assert rejected == 10
    assert handled == [("GET", "/dead", 502)] * 3 + [("GET", "/ok", 200)]


async def test_hedging_through_nginx(nginx: StartNginx, nursery: trio.Nursery) -> None:
    backend = FaultServer(http2=False)
    await nursery.start(backend.serve)
    server, base = _start(nginx, backend.port)
    hedging = Hedging(delay=0.2, max_share=1.0)
    async with trio_retry.Client(default_upstream=Upstream(hedging=hedging)) as client:
        with trio.fail_after(20):
            backend.script(Respond(200, body=b"slow", delay=3.0), Respond(200, body=b"fast"))
            start = trio.current_time()
            response = await client.get(base + "/backend/item")
            took = trio.current_time() - start
            backend.script(Respond(201, delay=0.5))
            created = await client.post(base + "/backend/orders", content=b"{}")
            await trio.sleep(3.0)  # the backend ends the stalled copy; nginx logs it
    handled = _handled(server)
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
