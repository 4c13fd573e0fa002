"""drain() ends the calls still waiting to be admitted — for a bulkhead permit or a pooled
connection — at once, NOT_SENT, category ADMISSION; attempts already on the wire finish."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

import trio_retry
from tests.support.loopback import connects_waiting
from trio_retry import Evidence, FailureCategory, RetryPolicy, Stage, Upstream
from trio_retry.testing import FaultServer, Stall

SINGLE = RetryPolicy(max_attempts=1)


#: A call deadline, or none: the attempt then waits in the pool with no cancel scope of its own,
#: and drain() and aclose() end it through the pool (issue #41).
DEADLINES = pytest.mark.parametrize("deadline", [30.0, None], ids=["deadline", "no-deadline"])


async def run_holder_and_queued(
    server: FaultServer, client: trio_retry.Client, *, drain_at: float, deadline: float | None
) -> tuple[dict[str, Any], dict[str, float]]:
    outcomes: dict[str, Any] = {}
    ended: dict[str, float] = {}

    async def call(name: str, delay: float) -> None:
        await trio.sleep(delay)
        try:
            outcomes[name] = await client.get(server.url + "/" + name, deadline=deadline)
        except trio_retry.TrioRetryError as exc:
            outcomes[name] = exc
        ended[name] = trio.current_time()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call, "holder", 0.0)  # on the wire for 1 s
        nursery.start_soon(call, "queued", 0.1)  # waits behind it
        await trio.sleep(drain_at)
        client.drain()
    return outcomes, ended


@DEADLINES
@pytest.mark.parametrize("waiting_for", ["bulkhead permit", "pooled connection"])
async def test_drain_ends_waiting_calls_at_once(
    server: FaultServer,
    autojump_clock: trio.testing.MockClock,
    waiting_for: str,
    deadline: float | None,
) -> None:
    server.default = Stall(1.0)
    if waiting_for == "bulkhead permit":
        options: dict[str, Any] = {"upstreams": {server.url: Upstream(max_concurrency=1)}}
        stage = Stage.ADMISSION
    else:
        options = {"max_connections": 1}
        stage = Stage.POOL
    async with trio_retry.Client(retry=SINGLE, **options) as client:
        outcomes, ended = await run_holder_and_queued(
            server, client, drain_at=0.3, deadline=deadline
        )
        assert client.pool.waiting == 0
    queued = outcomes["queued"]
    assert isinstance(queued, trio_retry.AdmissionRejected), queued
    assert (queued.evidence, queued.category) == (Evidence.NOT_SENT, FailureCategory.ADMISSION)
    assert [a.stage for a in queued.attempts] == [stage]
    assert "draining" in str(queued)
    assert queued.reason is trio_retry.RejectReason.DRAINING
    assert ended["queued"] == pytest.approx(0.3, abs=0.001)  # at once, not after the holder
    # The attempt already on the wire finished as it would have.
    assert isinstance(outcomes["holder"], trio_retry.Response)
    assert ended["holder"] == pytest.approx(1.0, abs=0.01)
    assert [r.path for r in server.requests] == ["/holder"]


@DEADLINES
@pytest.mark.parametrize("waiting_for", ["bulkhead permit", "pooled connection"])
async def test_closing_refuses_waiting_calls_as_closed(
    server: FaultServer,
    autojump_clock: trio.testing.MockClock,
    waiting_for: str,
    deadline: float | None,
) -> None:
    server.default = Stall(1.0)
    if waiting_for == "bulkhead permit":
        options: dict[str, Any] = {"upstreams": {server.url: Upstream(max_concurrency=1)}}
    else:
        options = {"max_connections": 1}
    outcomes: dict[str, Any] = {}

    async def call(client: trio_retry.Client, name: str, delay: float) -> None:
        await trio.sleep(delay)
        try:
            outcomes[name] = await client.get(server.url + "/" + name, deadline=deadline)
        except trio_retry.TrioRetryError as exc:
            outcomes[name] = exc

    async with trio.open_nursery() as nursery:
        async with trio_retry.Client(retry=SINGLE, **options) as client:
            nursery.start_soon(call, client, "holder", 0.0)
            nursery.start_soon(call, client, "queued", 0.1)
            await trio.sleep(0.3)
        # (the client closed under both calls)
    queued = outcomes["queued"]
    assert isinstance(queued, trio_retry.AdmissionRejected), queued
    assert queued.reason is trio_retry.RejectReason.CLOSED
    assert queued.evidence is Evidence.NOT_SENT
    assert "the client is closed" in str(queued)
    assert not isinstance(outcomes["holder"], trio_retry.AdmissionRejected)
    assert [r.path for r in server.requests] == ["/holder"]


@DEADLINES
async def test_drain_leaves_a_connecting_attempt_to_finish(
    server: FaultServer, autojump_clock: trio.testing.MockClock, deadline: float | None
) -> None:
    # Past the pool (connecting, then on the wire), an attempt is in flight: drain() lets it
    # finish, and the connection goes back to the pool as usual.
    server.default = Stall(1.0)
    async with trio_retry.Client(retry=SINGLE) as client:
        async with trio.open_nursery() as nursery:
            results: list[trio_retry.Response] = []

            async def call() -> None:
                results.append(await client.get(server.url + "/", deadline=deadline))

            nursery.start_soon(call)
            await trio.sleep(0.5)
            client.drain()
        assert results[0].status == 200
        assert trio.current_time() == pytest.approx(1.0, abs=0.01)
        assert client.pool.idle_count == 1


@DEADLINES
async def test_closing_ends_a_connecting_call_at_once(deadline: float | None) -> None:
    """aclose() ends a call still connecting, at once, as closed in flight: in the attempt's
    scope, or (no call deadline: the attempt has no scope of its own) in the one its opening
    runs in. A listener whose backlog is full leaves the connect waiting for its handshake."""
    with connects_waiting() as port:
        outcomes: list[BaseException] = []
        async with trio_retry.Client(retry=SINGLE) as client:

            async def call() -> None:
                try:
                    await client.get(f"http://127.0.0.1:{port}/", deadline=deadline)
                except trio_retry.TrioRetryError as exc:
                    outcomes.append(exc)

            with trio.fail_after(5):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(call)
                    await trio.sleep(0.3)
                    assert client.pool.active_count == 1  # (its slot: connecting)
                    closed = trio.current_time()
                    await client.aclose()
        (error,) = outcomes
        assert trio.current_time() - closed < 0.5
        assert isinstance(error, trio_retry.RequestFailed), error
        assert "closed while the request was in flight" in str(error)
        assert error.evidence is Evidence.NOT_SENT
        assert [a.stage for a in error.attempts] == [Stage.CONNECT]
