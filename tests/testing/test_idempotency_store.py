"""``IdempotencyStore``: the draft's semantics (draft-ietf-httpapi-idempotency-key-header) as a
FaultServer handler, and its request-status route. Asked with a client that never retries
(each answer is the store's own), over loopback, on the MockClock."""

from __future__ import annotations

from functools import partial

import pytest
import trio
import trio.testing

import trio_retry
from trio_retry import RetryPolicy
from trio_retry.testing import FaultServer, IdempotencyStore, Respond

ONCE = RetryPolicy(max_attempts=1)


@pytest.fixture
async def store_server(nursery: trio.Nursery) -> tuple[FaultServer, IdempotencyStore]:
    store = IdempotencyStore(Respond(201, body=b'{"id": 1}'), processing=1.0, expires_after=60)
    server = FaultServer(http2=False)
    server.route("POST", "/pay", store)
    server.route("GET", "/requests/{id}", store.status)
    await nursery.start(server.serve)
    return server, store


async def test_the_drafts_answers(
    store_server: tuple[FaultServer, IdempotencyStore], autojump_clock: trio.testing.MockClock
) -> None:
    server, store = store_server
    url = server.url + "/pay"
    key = {"Idempotency-Key": '"k-1"'}
    async with trio_retry.Client(retry=ONCE) as c:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(c.post, url, content=b"a", headers=key))  # 1 s of work
            await trio.sleep(0.5)
            busy = await c.post(url, content=b"a", headers=key)
            running = await c.get(server.url + "/requests/k-1")
        first = await c.get(server.url + "/requests/k-1")
        replay = await c.post(url, content=b"a", headers=key)
        async with trio_retry.Client(retry=ONCE) as elsewhere:  # (this client would refuse)
            with pytest.raises(trio_retry.RequestFailed, match="reused") as reused:
                await elsewhere.post(url, content=b"b", headers=key)
        unknown = await c.get(server.url + "/requests/k-2")
        await trio.sleep(61)  # the key expires: the same request runs again
        again = await c.post(url, content=b"a", headers=key)
    assert (busy.status, busy.headers["retry-after"]) == (409, "1")
    assert running.json()["state"] == "in progress"
    assert (first.status, first.json()["state"], first.json()["status"]) == (200, "executed", 201)
    assert (replay.status, replay.replayed, replay.content) == (201, True, b'{"id": 1}')
    cause = reused.value.__cause__
    assert isinstance(cause, trio_retry.HTTPStatusError)
    assert cause.response.status == 422
    assert b"another payload" in cause.response.content
    assert (unknown.status, unknown.json()["state"]) == (404, "not found")
    assert (again.status, again.replayed) == (201, False)
    assert store.executions == ["k-1", "k-1"]
    assert store.executed("k-1") == 2


async def test_no_key_and_the_scripted_faults(
    store_server: tuple[FaultServer, IdempotencyStore], autojump_clock: trio.testing.MockClock
) -> None:
    server, store = store_server
    store.processing = 0.0
    url = server.url + "/pay"
    async with trio_retry.Client(retry=ONCE) as c:
        plain = await c.post(url, content=b"a", headers={"X-Request-Id": "r-1"})
        store.lose_answers()
        with pytest.raises(trio_retry.HttpAmbiguousExecutionError):
            await c.post(url, content=b"a", headers={"X-Request-Id": "r-2"})
        store.refuse()
        with pytest.raises(trio_retry.HttpAmbiguousExecutionError):
            await c.post(url, content=b"a", headers={"X-Request-Id": "r-3"})
        lost = await c.get(server.url + "/requests/r-2")
        refused = await c.get(server.url + "/requests/r-3")
        store.require_key = True
        missing = await c.post(url, content=b"a")
    assert plain.status == 201
    assert lost.json()["state"] == "executed"  # it ran: only its answer was lost
    assert refused.status == 404
    assert missing.status == 400
    with pytest.raises(trio_retry.HTTPStatusError, match="idempotency_key=True"):
        missing.raise_for_status()
    assert store.executions == ["r-1", "r-2"]
    posts = [r.executed for r in server.requests if r.method == "POST"]
    assert posts[:3] == [True, True, False]  # (the 400 is an answer: "executed" to FaultServer)
