"""A finished call leaves nothing for the cyclic garbage collector (issue #41): what a call
held dies by reference counting when it ends, over HTTP/1.1, HTTP/2 and HTTP/3.

Why it matters: at 10,000 calls in flight the collector's full passes, each a visit of every
object the process holds, were most of what made a call cost twice its price at 1,000
(docs/benchmarks.md, 'Thousands of calls at once'); an object in a reference cycle outlives
its call until such a pass finds it, and is visited by every pass until then.

The collector is switched off around the calls and the garbage it would have found is then
collected with ``gc.DEBUG_SAVEALL``, which keeps it in ``gc.garbage`` to look at. Against
FaultServer (in this process: its own objects, ``trio_retry.testing``'s, h2's and aioquic's
server side, are not the client's and are left out) and against caddy (HTTP/1.1, HTTP/2 and
HTTP/3 on one port, another process: every cycle left is the client's, its libraries'
included).
"""

from __future__ import annotations

import gc
from collections import Counter

import pytest
import trio

from tests.support.caddy import RunningCaddy
from tests.support.fixtures import caddy as caddy
from trio_retry import Client, RetryPolicy, Upstream
from trio_retry.testing import FaultServer, Respond

ONE = RetryPolicy(max_attempts=1)
CALLS = 20  # each protocol: some one after another, some at once
PROTOCOLS = ["h1", "h2", "h3"]


def _ours(obj: object) -> bool:
    """An object of the client's own code (not ``trio_retry.testing``'s server side)."""
    module = type(obj).__module__
    return module.startswith("trio_retry") and not module.startswith("trio_retry.testing")


class Garbage:
    """The objects in cycles made while it was entered (the collector off meanwhile)."""

    def __init__(self) -> None:
        self.objects: list[object] = []

    def kinds(self, keep: object = None) -> Counter[str]:
        """What is in cycles, by type (only the objects ``keep`` accepts, if given)."""
        chosen = [o for o in self.objects if keep is None or keep(o)]  # type: ignore[operator]
        return Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in chosen)


def _collect(found: Garbage) -> None:
    """Collect now, keeping what was found in ``found``."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        found.objects = list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def _client(protocol: str, url: str, context: object) -> Client:
    return Client(
        retry=ONE,
        http2=protocol != "h1",
        ssl_context=context,  # type: ignore[arg-type]
        upstreams={url: Upstream(http3=True)} if protocol == "h3" else None,
    )


async def _calls(client: Client, url: str, protocol: str) -> None:
    """``CALLS`` GETs, half in sequence and half at once, each checked."""
    versions = {"h1": "HTTP/1.1", "h2": "HTTP/2", "h3": "HTTP/3"}

    async def one() -> None:
        response = await client.get(url)
        assert (response.status, response.content) == (200, b"ok")
        assert response.http_version == versions[protocol]

    with trio.fail_after(20):
        for _ in range(CALLS // 2):
            await one()
        async with trio.open_nursery() as nursery:
            for _ in range(CALLS // 2):
                nursery.start_soon(one)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_finished_call_leaves_no_cycle_with_fault_server(
    protocol: str, nursery: trio.Nursery
) -> None:
    server = FaultServer(tls=protocol != "h1", http3=protocol == "h3")
    server.route("GET", "/small", lambda request: Respond(200, body=b"ok"))
    await nursery.start(server.serve)
    context = server.client_ssl_context(http2=protocol != "h1") if protocol != "h1" else None
    async with _client(protocol, server.url, context) as client:
        await _calls(client, server.url + "/small", protocol)  # warm: imports, the connection
        gc.collect()
        was_enabled = gc.isenabled()
        gc.disable()
        found = Garbage()
        try:
            await _calls(client, server.url + "/small", protocol)
            _collect(found)
        finally:
            if was_enabled:
                gc.enable()
    assert found.kinds(_ours) == Counter(), "the client's objects left in reference cycles"


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_finished_call_leaves_no_cycle_with_caddy(
    protocol: str, caddy: RunningCaddy
) -> None:
    url = caddy.url("/get")
    context = caddy.ssl_context(http2=protocol != "h1")
    async with _client(protocol, caddy.url(""), context) as client:
        await _calls(client, url, protocol)
        gc.collect()
        was_enabled = gc.isenabled()
        gc.disable()
        found = Garbage()
        try:
            await _calls(client, url, protocol)
            _collect(found)
        finally:
            if was_enabled:
                gc.enable()
    # Nothing at all, whoever's: caddy is another process.
    assert found.kinds() == Counter(), "objects left in reference cycles by the calls"
    served = [e for e in caddy.log(expect=4 * CALLS).entries if e.uri == "/get"]
    assert len(served) == 2 * CALLS  # caddy's own log: each call executed once
