"""A hedged ``stream()`` call whose two copies answer at the same instant gives the loser's
connection and bulkhead permit back (issue #38 row 12; SPEC §15: losers are cancelled).

The race is forced: the first copy's answer is held (``delay``) until the hedge, sent after
``Hedging.delay``, answers at the same instant on the ``MockClock``; a response event hook then
lets neither copy finish before the other has its head, so both end with a response and one of
them loses. That copy held its connection and permit for good: the pool showed it active and
the bulkhead one permit short after the call. Now they are given back when the winner is
chosen (the loser's body unread: its HTTP/1.1 connection closed, its HTTP/2 stream reset).
Against the FaultServer on a MockClock, and nginx in front of it on the real clock (nginx's log
shows the loser's request cut short while the winner's body is still unread).
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

import trio_retry
from tests.support.fixtures import StartNginx
from tests.support.fixtures import nginx as nginx
from trio_retry import Evidence, Hedging, HookResponse, RetryPolicy, Upstream
from trio_retry._models import Origin
from trio_retry.testing import FaultServer, Respond

LIMIT = 20  # seconds: the bound of every test's network activity
BODY = b"b" * 100_000
THREE = RetryPolicy(max_attempts=3)


class Together:
    """A response event hook that holds each copy's head until ``n`` copies have one: no copy
    of the round can finish (and win) before the others have answered."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.heads = 0
        self.all_in = trio.Event()

    async def __call__(self, response: HookResponse) -> None:
        self.heads += 1
        if self.heads >= self.n:
            self.all_in.set()
        with trio.fail_after(LIMIT):
            await self.all_in.wait()


def _permits_in_use(client: trio_retry.Client, url: str) -> int:
    limiter = client._rt.upstreams.get(Origin.parse(url)).limiter
    assert limiter is not None
    return int(limiter.borrowed_tokens)


def _client(server: FaultServer, **options: Any) -> trio_retry.Client:
    return trio_retry.Client(
        retry=THREE,
        http2_prior_knowledge=server.http2,
        # max_concurrency=2: a permit for each copy (a hedge needs a free one).
        default_upstream=Upstream(hedging=Hedging(delay=0.5, max_share=1.0), max_concurrency=2),
        event_hooks={"response": [Together(2)]},
        **options,
    )


@pytest.mark.parametrize("protocol", ["http/1.1", "h2c"])
async def test_the_loser_of_a_tie_gives_its_connection_and_permit_back(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock, protocol: str
) -> None:
    server = FaultServer(http2=protocol == "h2c")
    await nursery.start(server.serve)
    # Sent at 0 and at the hedge (0.5 s): both answer at 1.0 s.
    server.script(Respond(200, body=BODY, delay=1.0), Respond(200, body=BODY, delay=0.5))
    url = server.url + "/item"
    async with _client(server) as client:
        with trio.fail_after(LIMIT):
            async with client.stream("GET", url) as response:
                assert trio.current_time() == pytest.approx(1.0)
                (loser, winner) = response.attempts  # the trail: the losers, then the winner
                assert winner.evidence is Evidence.RESPONSE_RECEIVED
                assert loser.evidence is Evidence.RESPONSE_RECEIVED  # it answered too
                assert loser.status == 200
                # Only the winner holds anything now: one permit, one connection (HTTP/1.1)
                # or one stream (HTTP/2, both copies on one connection).
                assert _permits_in_use(client, url) == 1
                assert client.pool.active_count == 1
                assert await response.aread() == BODY
            assert _permits_in_use(client, url) == 0
            assert (client.pool.active_count, client.pool.idle_count) == (0, 1)
            again = await client.get(url)  # the pool and the bulkhead still serve
    assert again.status == 200
    assert len(server.requests) == 3
    if protocol == "h2c":
        assert len({r.connection_id for r in server.requests}) == 1  # the loser's stream reset
    else:
        assert len({r.connection_id for r in server.requests}) == 2  # the loser's closed


async def test_cancelled_with_a_streamed_answer_in_hand_gives_everything_back(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """Outer cancellation while the copies are being recorded (an async ``on_attempt``):
    neither the winner nor the loser keeps its connection or permit."""
    server = FaultServer(http2=False)
    await nursery.start(server.serve)
    server.script(Respond(200, body=BODY, delay=1.0), Respond(200, body=BODY, delay=0.5))
    url = server.url + "/item"

    async def slow_on_attempt(attempt: trio_retry.Attempt) -> None:
        await trio.sleep(10)

    async with _client(server, on_attempt=slow_on_attempt) as client:
        with trio.move_on_after(5) as scope:  # the call waits on on_attempt: cancelled there
            async with client.stream("GET", url):
                pytest.fail("the call was to be cancelled before its response")
        assert scope.cancelled_caught
        assert _permits_in_use(client, url) == 0
        assert client.pool.active_count == 0


_PROXY = """
    server {
        listen {{host}}:{{front}};
        location / {
            proxy_pass http://{{host}}:{{backend_port}};
            proxy_buffering off;
        }
    }
"""


async def test_nginx_sees_the_losers_request_end_while_the_winner_is_unread(
    nginx: StartNginx, nursery: trio.Nursery
) -> None:
    """nginx in front of the FaultServer, on the real clock: both copies' heads come through
    nginx; the loser's connection is closed when the winner is chosen, so nginx logs the
    loser's request (its body cut short) while the winner's body is still unread."""
    backend = FaultServer(http2=False)
    await nursery.start(backend.serve)
    big = b"n" * (32 * 1024 * 1024)  # more than loopback buffers take in unread
    backend.script(Respond(200, body=big, delay=0.6), Respond(200, body=big, delay=0.4))
    port = int(backend.url.rsplit(":", 1)[1])
    server = nginx(servers=_PROXY, listeners=("front",), values={"backend_port": port})
    url = server.url("front", "/item")
    async with trio_retry.Client(
        retry=THREE,
        default_upstream=Upstream(hedging=Hedging(delay=0.2, max_share=1.0), max_concurrency=2),
        event_hooks={"response": [Together(2)]},
    ) as client:
        with trio.fail_after(LIMIT):
            async with client.stream("GET", url, headers={"x-request-id": "h"}) as response:
                assert len(response.attempts) == 2
                assert _permits_in_use(client, url) == 1
                assert client.pool.active_count == 1
                log = await trio.to_thread.run_sync(lambda: server.log(expect=1, timeout=10.0))
                (loser,) = log.entries
                assert loser.request_id == "h"
                assert loser.body_bytes_sent < len(big)  # cut short: the client closed it
            assert _permits_in_use(client, url) == 0
    assert len(backend.requests) == 2
