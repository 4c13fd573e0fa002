"""The retry loop: status rules, Retry-After, deadlines, budget, bulkhead, drain, auth.

Timing tests run on ``trio.testing.MockClock`` (the ``autojump_clock`` fixture) over real
loopback sockets, so virtual times are asserted exactly.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
import trio
import trio.testing

import trio_retry
from tests.conftest import FAST
from trio_retry import (
    AmbiguousFailure,
    Backoff,
    DenyReason,
    Evidence,
    FailureCategory,
    HttpAmbiguousExecutionError,
    Idempotency,
    RetryAllowed,
    RetryBudget,
    RetryDenied,
    RetryPolicy,
    Stage,
    Upstream,
)
from trio_retry.testing import CloseAfterBody, FaultServer, Respond, Stall

NO_JITTER = RetryPolicy(max_attempts=3, backoff=Backoff(initial=1.0, max=10.0, jitter="none"))


@pytest.mark.parametrize(
    ("status", "method", "retried"),
    [
        (408, "POST", True),
        (429, "POST", True),
        (425, "POST", True),
        (502, "GET", True),
        (503, "PUT", True),
        (504, "DELETE", True),
        (500, "GET", False),
        (404, "GET", False),
        (400, "PUT", False),
        (409, "POST", False),
    ],
)
async def test_status_rules_end_to_end(
    server: FaultServer, client: trio_retry.Client, status: int, method: str, retried: bool
) -> None:
    server.script(Respond(status, body=b"first"))
    server.default = Respond(200, body=b"second")
    response = await client.request(method, server.url + "/s", content=b"b")
    assert len(server.requests) == (2 if retried else 1)
    if retried:
        assert response.status == 200
        assert response.attempts[0].status == status
        assert isinstance(response.attempts[0].decision, RetryAllowed)
        assert response.retry_decision is None
    else:
        assert response.status == status
        assert response.content == b"first"
        assert response.retry_decision == RetryDenied.not_retryable()
        assert response.attempts[0].decision == response.retry_decision


@pytest.mark.parametrize("status", [502, 503, 504])
async def test_gateway_errors_on_post_are_ambiguous_with_the_response(
    server: FaultServer, client: trio_retry.Client, status: int
) -> None:
    server.script(Respond(status, body=b"bad gateway"))
    with pytest.raises(HttpAmbiguousExecutionError) as info:
        await client.post(server.url + "/pay", content=b"x")
    err = info.value
    assert err.response is not None
    assert err.response.status == status
    assert err.response.content == b"bad gateway"
    assert err.evidence is Evidence.RESPONSE_RECEIVED
    assert isinstance(err.decision, AmbiguousFailure)
    assert len(server.requests) == 1
    # The FaultServer is the origin: the message says what is known, not "from a gateway".
    assert "from a gateway" not in str(err)
    assert f"status {status}, sent by the server or by a gateway in front of it" in str(err)
    assert "may have been executed" in str(err)


async def test_transient_500_retried_only_when_registered(server: FaultServer) -> None:
    upstreams = {server.url: Upstream(transient_500=True)}
    async with trio_retry.Client(retry=FAST, upstreams=upstreams) as client:
        server.script(Respond(500), Respond(200, body=b"ok"))
        assert (await client.get(server.url + "/")).status == 200
        server.script(Respond(500))
        post = await client.post(server.url + "/", content=b"")
        assert post.status == 500  # not safely idempotent: denied
    assert len(server.requests) == 3


async def test_425_is_retried_once_only(server: FaultServer, client: trio_retry.Client) -> None:
    server.script(Respond(425), Respond(425), Respond(200))
    response = await client.post(server.url + "/early", content=b"")
    assert response.status == 425
    assert len(response.attempts) == 2
    assert response.retry_decision == RetryDenied.not_retryable()


async def test_retry_after_is_honoured_exactly(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.script(Respond(429, headers=[("Retry-After", "3")]), Respond(200))
    async with trio_retry.Client(retry=NO_JITTER) as client:
        start = trio.current_time()
        response = await client.post(server.url + "/limited", content=b"")
    assert response.status == 200
    assert response.attempts[0].decision == RetryAllowed(3.0)
    gap = server.requests[1].time - server.requests[0].time
    assert gap == pytest.approx(3.0, abs=0.01)
    assert trio.current_time() - start == pytest.approx(3.0, abs=0.01)


async def test_retry_after_longer_than_backoff_max_is_denied(
    server: FaultServer, client: trio_retry.Client
) -> None:
    server.script(Respond(503, headers=[("Retry-After", "120")]))
    response = await client.get(server.url + "/")
    decision = response.retry_decision
    assert isinstance(decision, RetryDenied)
    assert decision.reason is DenyReason.RETRY_AFTER_TOO_LONG
    assert decision.retry_after == 120.0


async def test_retry_after_beyond_the_deadline_is_denied_as_deadline(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.script(Respond(503, headers=[("Retry-After", "8")]))
    async with trio_retry.Client(retry=NO_JITTER, deadline=5.0) as client:
        response = await client.get(server.url + "/")
    assert response.retry_decision == RetryDenied.deadline()
    assert response.retry_decision.retry_after == 8.0  # type: ignore[union-attr]


async def test_backoff_is_exact_and_permit_free(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.script(Respond(503), Respond(503), Respond(200))
    async with trio_retry.Client(retry=NO_JITTER) as client:
        response = await client.get(server.url + "/")
    assert response.status == 200
    times = [r.time - server.requests[0].time for r in server.requests]
    assert times == pytest.approx([0.0, 1.0, 3.0], abs=0.01)  # 1 s, then 2 s


async def test_deadline_mid_flight_gives_the_stage_reached(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.script(Stall(30.0))
    async with trio_retry.Client(retry=NO_JITTER) as client:
        start = trio.current_time()
        with pytest.raises(trio_retry.DeadlineExceeded) as info:
            await client.get(server.url + "/slow", deadline=2.5)
        elapsed = trio.current_time() - start
    assert elapsed == pytest.approx(2.5, abs=0.01)
    err = info.value
    assert err.category is FailureCategory.TIMEOUT
    assert err.evidence is Evidence.SENT_NO_RESPONSE
    assert err.attempts[-1].stage is Stage.AWAITING_RESPONSE
    # No time left for another attempt: denied by the deadline rule, not retried.
    assert err.decision == RetryDenied.deadline()
    assert len(err.attempts) == 1


async def test_deadline_mid_flight_on_post_is_ambiguous(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.script(Stall(30.0))
    async with trio_retry.Client(retry=NO_JITTER) as client:
        with pytest.raises(HttpAmbiguousExecutionError) as info:
            await client.post(server.url + "/pay", content=b"1", deadline=2.0)
    assert info.value.evidence is Evidence.SENT_NO_RESPONSE
    assert isinstance(info.value.__cause__, Exception)
    assert server.executed_count("POST") == 1


async def test_outer_deadline_is_respected(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.default = Respond(503)
    async with trio_retry.Client(retry=NO_JITTER) as client:
        with trio.move_on_after(2.5) as outer:
            response = await client.get(server.url + "/")
        # The backoff (1 s, then 2 s) would cross the caller's deadline: the loop stops first.
        assert not outer.cancelled_caught
        assert response.status == 503
        assert response.retry_decision == RetryDenied.deadline()
        assert len(response.attempts) == 2


async def test_outer_cancellation_propagates_and_the_pool_stays_consistent(
    server: FaultServer, client: trio_retry.Client, autojump_clock: trio.testing.MockClock
) -> None:
    server.script(Stall(30.0))
    with trio.move_on_after(1.0) as outer:
        await client.post(server.url + "/pay", content=b"x")
    assert outer.cancelled_caught  # trio.Cancelled reached our scope untouched
    assert client.pool.active_count == 0
    assert client.pool.idle_count == 0
    server.default = Respond(200, body=b"after")
    assert (await client.get(server.url + "/")).content == b"after"


async def test_budget_stops_retries_under_an_outage(server: FaultServer) -> None:
    server.default = Respond(503)
    budget = RetryBudget(ratio=0.0, min_per_second=0.2, window=10.0)  # 2 retries in the window
    upstreams = {server.url: Upstream(budget=budget)}
    async with trio_retry.Client(retry=FAST, upstreams=upstreams) as client:
        responses = [await client.get(server.url + "/") for _ in range(3)]
    assert [len(r.attempts) for r in responses] == [3, 1, 1]
    assert responses[-1].retry_decision == RetryDenied.budget_exhausted()
    assert len(server.requests) == 5


async def test_default_upstream_gives_each_origin_its_own_budget(nursery: trio.Nursery) -> None:
    a, b = FaultServer(http2=False), FaultServer(http2=False)
    await nursery.start(a.serve)
    await nursery.start(b.serve)
    a.default = b.default = Respond(503)
    default = Upstream(budget=RetryBudget(ratio=0.0, min_per_second=0.1, window=10.0))
    async with trio_retry.Client(retry=FAST, default_upstream=default) as client:
        assert len((await client.get(a.url + "/")).attempts) == 2
        assert len((await client.get(b.url + "/")).attempts) == 2  # not drained by a's retry


async def test_bulkhead_permit_is_released_during_backoff(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.route("GET", "/first", Respond(503), Respond(200, body=b"first"))
    server.route("GET", "/second", Respond(200, body=b"second"))
    upstreams = {server.url: Upstream(max_concurrency=1)}
    finished: dict[str, float] = {}
    async with trio_retry.Client(retry=NO_JITTER, upstreams=upstreams) as client:

        async def call(path: str, delay: float) -> None:
            await trio.sleep(delay)
            await client.get(server.url + path)
            finished[path] = trio.current_time()

        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, "/first", 0.0)
            nursery.start_soon(call, "/second", 0.1)
    # /first waits 1 s in backoff without its permit; /second completes meanwhile.
    assert finished["/second"] - start == pytest.approx(0.1, abs=0.01)
    assert finished["/first"] - start == pytest.approx(1.0, abs=0.01)


async def test_a_full_bulkhead_queue_rejects_at_once_without_sending(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.default = Stall(1.0)  # each call holds its permit for 1 s
    upstream = Upstream(max_concurrency=1, max_queue=1)
    single = RetryPolicy(max_attempts=1)
    outcomes: dict[str, object] = {}
    ended: dict[str, float] = {}
    async with trio_retry.Client(retry=single, upstreams={server.url: upstream}) as client:

        async def call(name: str, delay: float) -> None:
            await trio.sleep(delay)
            try:
                outcomes[name] = await client.get(server.url + "/" + name)
            except trio_retry.RequestFailed as exc:
                outcomes[name] = exc
            ended[name] = trio.current_time()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, "holder", 0.0)  # takes the permit
            nursery.start_soon(call, "queued", 0.1)  # waits: the queue holds one
            nursery.start_soon(call, "shed", 0.2)  # rejected: the queue is full
    shed = outcomes["shed"]
    assert isinstance(shed, trio_retry.AdmissionRejected), shed
    assert (shed.evidence, shed.category) == (Evidence.NOT_SENT, FailureCategory.ADMISSION)
    assert shed.attempts[0].stage is Stage.ADMISSION
    assert "bulkhead" in str(shed)
    assert "max_queue=1" in str(shed)
    assert shed.reason is trio_retry.RejectReason.BULKHEAD_FULL
    assert ended["shed"] == pytest.approx(0.2, abs=0.01)  # at once, not after a wait
    assert isinstance(outcomes["holder"], trio_retry.Response)
    assert isinstance(outcomes["queued"], trio_retry.Response)
    assert ended["queued"] == pytest.approx(2.0, abs=0.01)  # after the holder's second
    assert sorted(r.path for r in server.requests) == ["/holder", "/queued"]


def test_max_queue_needs_a_bulkhead_and_a_sane_size() -> None:
    with pytest.raises(ValueError, match="max_concurrency"):
        Upstream(max_queue=3)
    with pytest.raises(ValueError, match="max_queue"):
        Upstream(max_concurrency=2, max_queue=-1)
    fresh = Upstream(max_concurrency=2, max_queue=0).fresh()
    assert (fresh.max_concurrency, fresh.max_queue) == (2, 0)


async def test_drain_ends_calls_in_backoff_and_refuses_new_ones(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.default = Respond(503)
    async with trio_retry.Client(retry=NO_JITTER) as client:
        result: list[trio_retry.Response] = []

        async def call() -> None:
            result.append(await client.get(server.url + "/"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            await trio.sleep(0.5)  # the call is now in its 1 s backoff
            client.drain()
        with pytest.raises(trio_retry.AdmissionRejected) as info:
            await client.get(server.url + "/")
    assert trio.current_time() == pytest.approx(0.5, abs=0.01)
    assert result[0].status == 503
    assert result[0].retry_decision == RetryDenied.runtime_draining()
    assert info.value.evidence is Evidence.NOT_SENT
    assert info.value.category is FailureCategory.ADMISSION
    assert info.value.reason is trio_retry.RejectReason.DRAINING
    assert len(server.requests) == 1


class TokenAuth:
    def __init__(self) -> None:
        self.token = "old"
        self.refreshes = 0

    async def headers(self) -> Mapping[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    async def refresh(self) -> None:
        self.refreshes += 1
        self.token = "new"


async def test_401_refreshes_once_and_replays(server: FaultServer) -> None:
    server.script(Respond(401), Respond(200, body=b"welcome"))
    auth = TokenAuth()
    async with trio_retry.Client(retry=FAST, auth=auth) as client:
        response = await client.get(server.url + "/me")
        assert response.content == b"welcome"
        server.script(Respond(401), Respond(401))
        denied = await client.get(server.url + "/me")
    assert auth.refreshes == 2
    sent = [dict(r.headers)["authorization"] for r in server.requests]
    assert sent == ["Bearer old", "Bearer new", "Bearer new", "Bearer new"]
    assert denied.status == 401
    assert denied.retry_decision == RetryDenied.not_retryable()
    assert "Bearer" not in repr(denied.headers)


async def test_401_without_auth_or_on_post_is_not_replayed(
    server: FaultServer, client: trio_retry.Client
) -> None:
    server.default = Respond(401)
    assert len((await client.get(server.url + "/")).attempts) == 1
    async with trio_retry.Client(retry=FAST, auth=TokenAuth()) as authed:
        assert len((await authed.post(server.url + "/", content=b"")).attempts) == 1


async def test_on_attempt_sees_every_attempt_with_its_decision(server: FaultServer) -> None:
    seen: list[trio_retry.Attempt] = []

    async def record(attempt: trio_retry.Attempt) -> None:
        seen.append(attempt)

    server.script(Respond(503), CloseAfterBody())
    server.default = Respond(200)
    async with trio_retry.Client(retry=FAST, on_attempt=record) as client:
        response = await client.get(server.url + "/")
    assert [a.number for a in seen] == [1, 2, 3]
    assert seen == response.attempts
    assert [a.status for a in seen] == [503, None, 200]
    assert seen[1].evidence is Evidence.SENT_NO_RESPONSE
    assert seen[2].decision is None


async def test_idempotency_override_decides_over_method(
    server: FaultServer, client: trio_retry.Client
) -> None:
    server.script(CloseAfterBody())
    server.default = Respond(200)
    response = await client.post(server.url + "/", content=b"x", idempotency=Idempotency.IDEMPOTENT)
    assert len(response.attempts) == 2
    server.script(CloseAfterBody())
    with pytest.raises(HttpAmbiguousExecutionError):
        await client.put(server.url + "/", content=b"x", idempotency=Idempotency.NON_IDEMPOTENT)


async def test_waiting_for_a_bulkhead_permit_past_the_deadline_is_not_sent(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.route("GET", "/slow", Stall(10.0))
    upstreams = {server.url: Upstream(max_concurrency=1)}
    async with trio_retry.Client(retry=NO_JITTER, upstreams=upstreams) as client:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.get, server.url + "/slow")
            await trio.sleep(0.1)
            with pytest.raises(trio_retry.DeadlineExceeded) as info:
                await client.post(server.url + "/pay", content=b"x", deadline=0.5)
            nursery.cancel_scope.cancel()
    err = info.value
    assert err.evidence is Evidence.NOT_SENT  # a POST, yet plainly failed: it never left
    assert [a.stage for a in err.attempts] == [Stage.ADMISSION]
    assert server.executed_count("POST") == 0
