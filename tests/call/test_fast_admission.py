"""A bulkhead permit free at once is taken without a wait or a cancel scope; the bulkhead
still bounds concurrency, and a permit is given back however the attempt ends."""

from __future__ import annotations

import pytest
import trio
import trio.testing

import trio_retry
from trio_retry.testing import FaultServer, RecordedRequest, Respond, Stall


async def test_a_bulkhead_of_one_serialises_calls_on_a_ready_connection(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    in_flight = peak = 0

    async def slow(_: RecordedRequest) -> Respond:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await trio.sleep(1.0)
        in_flight -= 1
        return Respond(200)

    server.route("GET", "/s", slow)
    upstream = trio_retry.Upstream(max_concurrency=1)
    async with trio_retry.Client(default_upstream=upstream) as client:
        await client.get(server.url + "/s")  # a ready connection for the next ones
        start = trio.current_time()
        with trio.fail_after(30):  # bounded, also when a permit is never given back
            async with trio.open_nursery() as nursery:
                for _ in range(3):
                    nursery.start_soon(client.get, server.url + "/s")
        assert trio.current_time() - start == pytest.approx(3.0, abs=0.05)
    assert peak == 1


async def test_a_cancelled_call_gives_its_permit_back(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.route("GET", "/stall", Stall(60))
    upstream = trio_retry.Upstream(max_concurrency=1, max_queue=0)
    async with trio_retry.Client(default_upstream=upstream) as client:
        await client.get(server.url + "/warm")
        with trio.move_on_after(1.0) as scope:
            await client.get(server.url + "/stall")  # on the ready connection, no scope
        assert scope.cancelled_caught
        # max_queue=0: a permit still held would reject this call at once.
        assert (await client.get(server.url + "/after")).status == 200
