"""nginx's routine HTTP/2 rotation (``keepalive_requests``: GOAWAY after N streams) is
invisible: every POST executed exactly once, none ambiguous, no GET failing."""

from __future__ import annotations

from collections import Counter

import trio

import trio_retry
from tests.support.fixtures import StartNginx

CALLS = 250


async def test_rotation_every_10_streams_250_mixed_calls(nginx: StartNginx) -> None:
    server = nginx(keepalive_requests=10)
    outcomes: Counter[str] = Counter()
    failures: list[str] = []
    rotations: list[int] = []

    async with trio_retry.Client(
        http2=True,
        ssl_context=server.ssl_context(),
        retry=trio_retry.RetryPolicy(
            max_attempts=3, backoff=trio_retry.Backoff(initial=0.01, max=0.05)
        ),
    ) as client:

        async def call(i: int, limiter: trio.CapacityLimiter) -> None:
            post = i % 2 == 0
            async with limiter:
                try:
                    response = await client.request(
                        "POST" if post else "GET",
                        server.h2_url("/post" if post else "/get"),
                        content=b"p" * 2048 if post else None,
                        headers={"x-request-id": f"r{i}"},
                    )
                except trio_retry.HttpAmbiguousExecutionError as exc:
                    outcomes["ambiguous"] += 1
                    failures.append(f"r{i}: {exc!r}")
                    return
                except trio_retry.TrioRetryError as exc:
                    outcomes["failed"] += 1
                    failures.append(f"r{i}: {exc!r}")
                    return
            outcomes[f"{response.status}"] += 1
            rotations.append(len(response.attempts))

        limiter = trio.CapacityLimiter(50)
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for i in range(CALLS):
                    nursery.start_soon(call, i, limiter)

    assert failures == []
    assert outcomes == {"200": CALLS}
    log = server.log(expect=CALLS)
    assert {entry.protocol for entry in log.entries} == {"HTTP/2.0"}
    executed = log.by_request_id()
    posts = {f"r{i}" for i in range(0, CALLS, 2)}
    assert {rid: n for rid, n in executed.items() if rid in posts} == dict.fromkeys(posts, 1)
    assert len(log.connections()) >= CALLS // 10  # nginx did rotate
