"""``Attempt.connection_reused`` of calls multiplexed on one new connection (issue #38 row 10).

Calls started together on a fresh client wait for the one HTTP/2 (or HTTP/3) connection being
opened and then share it. Every one of them said ``connection_reused=False``, as if each had a
new connection of its own. Now the attempt whose opening it was says ``False`` (and carries
the connect and TLS timings), every other one ``True``: it shared a connection another call
opened. Checked against the FaultServer (h2c, HTTP/2 over TLS, HTTP/3: it counts the
connections it accepted) and nginx (its log gives each request's connection).
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

import trio_retry
from tests.support.fixtures import StartNginx
from tests.support.fixtures import nginx as nginx
from trio_retry import Attempt, Upstream
from trio_retry.testing import FaultServer, Respond

CALLS = 8
LIMIT = 20  # seconds: the bound of every test's network activity
ONE = trio_retry.RetryPolicy(max_attempts=1)


async def _together(client: trio_retry.Client, url: str) -> list[Attempt]:
    """``CALLS`` GETs started at once; the attempt of each."""
    attempts: list[Attempt] = []

    async def get(i: int) -> None:
        response = await client.get(url, headers={"x-request-id": f"r{i}"})
        assert response.status == 200
        (attempt,) = response.attempts
        attempts.append(attempt)

    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            for i in range(CALLS):
                nursery.start_soon(get, i)
    return attempts


def _assert_one_opened_the_rest_shared(attempts: list[Attempt], tls: bool) -> None:
    opened = [a for a in attempts if not a.connection_reused]
    assert len(opened) == 1, [a.connection_reused for a in attempts]
    assert len(attempts) == CALLS
    assert "connect" in opened[0].timings  # the opening's own figures
    assert ("tls" in opened[0].timings) is tls
    for shared in attempts:
        if shared.connection_reused:
            assert "connect" not in shared.timings  # they waited for it in the pool


@pytest.mark.parametrize("mode", ["h2c", "h2", "h3"])
async def test_calls_sharing_a_new_connection(nursery: trio.Nursery, mode: str) -> None:
    server = FaultServer(tls=mode != "h2c", http3=mode == "h3")
    server.default = Respond(200, body=b"ok", delay=0.05)  # the streams overlap
    await nursery.start(server.serve)
    options: dict[str, Any] = {"retry": ONE}
    if mode == "h2c":
        options["http2_prior_knowledge"] = True
    else:
        options["ssl_context"] = server.client_ssl_context()
    if mode == "h3":
        options["upstreams"] = {server.url: Upstream(http3=True)}
    async with trio_retry.Client(**options) as client:
        attempts = await _together(client, server.url + "/")
    assert server.connections_accepted == 1
    assert {a.http_version for a in attempts} == {"HTTP/3" if mode == "h3" else "HTTP/2"}
    _assert_one_opened_the_rest_shared(attempts, tls=mode != "h2c")


async def test_a_later_call_on_the_connection_is_reused_too(nursery: trio.Nursery) -> None:
    server = FaultServer()
    await nursery.start(server.serve)
    async with trio_retry.Client(retry=ONE, http2_prior_knowledge=True) as client:
        first = await _together(client, server.url + "/")
        later = (await client.get(server.url + "/")).attempts[0]
    assert sum(not a.connection_reused for a in first) == 1
    assert later.connection_reused
    assert server.connections_accepted == 1


async def test_nginx_streams_on_one_new_connection(nginx: StartNginx) -> None:
    server = nginx()
    async with trio_retry.Client(retry=ONE, ssl_context=server.ssl_context()) as client:
        attempts = await _together(client, server.h2_url("/get"))
    log = server.log(expect=CALLS)
    assert log.by_request_id() == {f"r{i}": 1 for i in range(CALLS)}
    assert len(log.connections()) == 1  # nginx saw one connection carry them all
    _assert_one_opened_the_rest_shared(attempts, tls=True)
