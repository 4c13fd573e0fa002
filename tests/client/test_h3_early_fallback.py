"""HTTP/3's trail and its fallback to TCP (SPEC §16, issue #39 item 5).

- Every QUIC try in a trail says ``HTTP/3``, also for the calls that waited for a connection
  another call was opening.

QUIC's timers run on the run's clock, so these tests use the real clock (an autojumping
MockClock would fire them while a datagram is in flight); every wait is bounded by
``trio.fail_after``.
"""

from __future__ import annotations

import trio

from trio_retry import Client, Evidence, Response, RetryPolicy, Upstream
from trio_retry.testing import FaultServer


async def test_calls_that_wait_for_a_quic_opening_say_http3_in_their_trail(
    nursery: trio.Nursery,
) -> None:
    """Five calls at once: one opens the QUIC connection, four wait for it (the pool's
    opening); the UDP port is closed, and each call's QUIC try says HTTP/3."""
    server = FaultServer(tls=True)  # TCP only: the UDP port answers ICMP unreachable
    await nursery.start(server.serve)
    responses: list[Response] = []
    with trio.fail_after(30):
        async with Client(
            upstreams={server.url: Upstream(http3=True)},
            ssl_context=server.client_ssl_context(),
            retry=RetryPolicy(max_attempts=1),
        ) as client:

            async def get(i: int) -> None:
                responses.append(await client.get(f"{server.url}/{i}"))

            async with trio.open_nursery() as calls:
                for i in range(5):
                    calls.start_soon(get, i)
    assert len(responses) == 5
    for response in responses:
        quic, tcp = response.attempts
        assert (quic.http_version, quic.evidence, quic.decision) == (
            "HTTP/3",
            Evidence.NOT_SENT,
            None,
        )
        assert (tcp.http_version, tcp.status) == ("HTTP/2", 200)
