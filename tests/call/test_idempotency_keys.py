"""Idempotency keys as draft-ietf-httpapi-idempotency-key-header says (SPEC §19): a generated
key is one RFC 8941 sf-string reused by every attempt of its call; a key is never sent again
with another payload; 409 is "still in progress" (sent again, same key), 422 "the key was
reused"; a replay marker is on the response; a key past its lifetime is not sent again.

Scripted on a FaultServer over loopback, on the MockClock."""

from __future__ import annotations

import re
from typing import Any

import pytest
import trio
import trio.testing

import trio_retry
from trio_retry import (
    Backoff,
    Evidence,
    HttpAmbiguousExecutionError,
    HTTPStatusError,
    InvalidRequest,
    RequestFailed,
    RetryPolicy,
    Upstream,
)
from trio_retry.testing import CloseAfterBody, FaultServer, Respond

QUICK = RetryPolicy(max_attempts=3, backoff=Backoff(initial=0.5, max=5.0, jitter="none"))
#: A UUID4 as an RFC 8941 sf-string: quoted, lowercase hex, version 4, variant 10.
SF_UUID4 = re.compile(r'"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"')


def keys(server: FaultServer) -> list[str | None]:
    """The Idempotency-Key of every request the server received, in order."""
    return [r.header("idempotency-key") for r in server.requests]


def client(server: FaultServer, **upstream: Any) -> trio_retry.Client:
    return trio_retry.Client(retry=QUICK, upstreams={server.url: Upstream(**upstream)})


async def test_a_generated_key_is_one_sf_string_reused_by_every_attempt(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.script(CloseAfterBody(), Respond(201))
    async with client(server) as c:
        response = await c.post(server.url + "/pay", content=b"{}", idempotency_key=True)
    assert response.status == 201
    first, second = keys(server)
    assert first is not None
    assert SF_UUID4.fullmatch(first), first
    assert second == first
    for record in server.requests:
        assert [n for n, _ in record.headers].count("idempotency-key") == 1


async def test_auto_keys_give_each_non_idempotent_call_its_own(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    """``Upstream(idempotency_keys="auto")``: every POST gets a fresh key (a call without
    options too, which is prepared from a template), a PUT or GET none; the key makes the POST
    safe to send again after SENT_NO_RESPONSE."""
    server.script(CloseAfterBody())
    server.default = Respond(201)
    async with client(server, idempotency_keys="auto") as c:
        retried = await c.post(server.url + "/pay")
        await c.post(server.url + "/pay")
        await c.post(server.url + "/pay", json={"amount": 1})
        await c.put(server.url + "/pay", content=b"x")
        await c.get(server.url + "/pay")
    assert [a.evidence for a in retried.attempts] == [
        Evidence.SENT_NO_RESPONSE,
        Evidence.RESPONSE_RECEIVED,
    ]
    sent = keys(server)
    assert sent[0] == sent[1]  # one call, two attempts
    posts = sent[1:4]
    assert all(k is not None and SF_UUID4.fullmatch(k) for k in posts), posts
    assert len(set(posts)) == 3
    assert sent[4:] == [None, None]


async def test_a_key_is_never_sent_again_with_another_payload(server: FaultServer) -> None:
    server.default = Respond(201)
    url = server.url + "/pay"
    async with trio_retry.Client() as c:
        await c.post(url, json={"amount": 10}, idempotency_key="order-7")
        await c.post(url, json={"amount": 10}, idempotency_key="order-7")  # the same: a replay
        with pytest.raises(InvalidRequest, match="another body") as body:
            await c.post(url, json={"amount": 20}, idempotency_key="order-7")
        with pytest.raises(InvalidRequest, match="another target"):
            await c.post(server.url + "/refund", json={"amount": 10}, idempotency_key="order-7")
        with pytest.raises(InvalidRequest, match="another method"):
            await c.patch(url, json={"amount": 10}, idempotency_key="order-7")
    assert body.value.evidence is Evidence.NOT_SENT
    assert "order-7" not in str(body.value)  # a key is not shown
    assert len(server.requests) == 2


async def test_409_on_a_keyed_request_goes_again_with_the_same_key_after_retry_after(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.script(Respond(409, headers=[("retry-after", "2")]), Respond(201))
    async with client(server) as c:
        response = await c.post(server.url + "/pay", content=b"{}", idempotency_key=True)
    assert [a.status for a in response.attempts] == [409, 201]
    first, second = keys(server)
    assert first == second
    assert server.requests[1].time - server.requests[0].time >= 2.0


async def test_409_without_a_key_is_the_answer(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.script(Respond(409))
    async with client(server) as c:
        response = await c.post(server.url + "/pay", content=b"{}")
    assert response.status == 409
    assert len(server.requests) == 1


async def test_422_on_a_keyed_request_says_the_key_was_reused(server: FaultServer) -> None:
    server.script(Respond(422), Respond(422))
    async with trio_retry.Client() as c:
        with pytest.raises(RequestFailed, match="reused with another payload") as caught:
            await c.post(server.url + "/pay", content=b"{}", idempotency_key="order-8")
        plain = await c.post(server.url + "/pay", content=b"{}")  # no key: the 422 is the answer
    assert caught.value.evidence is Evidence.RESPONSE_RECEIVED
    assert isinstance(caught.value.__cause__, HTTPStatusError)
    assert caught.value.__cause__.response.status == 422
    assert "order-8" not in str(caught.value)
    assert plain.status == 422
    assert len(server.requests) == 2


async def test_a_400_naming_the_missing_key_says_which_option_adds_one(
    server: FaultServer,
) -> None:
    problem = b'{"title": "Idempotency-Key is missing", "status": 400}'
    server.script(Respond(400, body=problem), Respond(400, body=b"bad amount"))
    async with trio_retry.Client() as c:
        missing = await c.post(server.url + "/pay", content=b"{}")
        other = await c.post(server.url + "/pay", content=b"{}")
    with pytest.raises(HTTPStatusError, match=r'idempotency_key=True.*idempotency_keys="auto"'):
        missing.raise_for_status()
    with pytest.raises(HTTPStatusError) as plain:
        other.raise_for_status()
    assert "idempotency_key" not in str(plain.value)


async def test_a_replayed_answer_is_marked(server: FaultServer) -> None:
    server.script(Respond(201, headers=[("idempotent-replayed", "true")]), Respond(201))
    async with trio_retry.Client() as c:
        replayed = await c.post(server.url + "/pay", content=b"{}", idempotency_key="k-1")
        first = await c.post(server.url + "/pay", content=b"{}", idempotency_key="k-2")
    assert replayed.replayed is True
    assert first.replayed is False


@pytest.mark.parametrize("ttl", [1.0, 60.0])
async def test_a_keyed_request_is_not_sent_again_once_its_key_may_have_expired(
    server: FaultServer, autojump_clock: trio.testing.MockClock, ttl: float
) -> None:
    """The 503 arrives 0.8 s in and the backoff is 0.5 s: with a key that lives 1 s, the next
    attempt would go after it may have expired (the server would run it again), so the call is
    ambiguous with that reason; with 60 s it goes again with the same key."""
    server.script(Respond(503, delay=0.8), Respond(201))
    async with client(server, idempotency_key_ttl=ttl) as c:
        if ttl > 1.0:
            response = await c.post(server.url + "/pay", content=b"{}", idempotency_key=True)
            assert response.status == 201
            assert len(server.requests) == 2
            return
        with pytest.raises(HttpAmbiguousExecutionError, match="idempotency_key_ttl") as caught:
            await c.post(server.url + "/pay", content=b"{}", idempotency_key=True)
    assert len(server.requests) == 1
    assert caught.value.response is not None
    assert caught.value.response.status == 503


async def test_a_keyed_call_that_failed_says_its_key_so_it_can_be_sent_again(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    """A keyed POST whose deadline ran out while the server held it (it may have run) fails
    with ``DeadlineExceeded`` (the key made it retryable, so it is not ambiguous) and says the
    key it generated: sent again with that key, the server can deduplicate it."""
    server.script(Respond(201, delay=10.0), Respond(201, headers=[("idempotent-replayed", "true")]))
    async with client(server) as c:
        with pytest.raises(RequestFailed) as caught:
            await c.post(server.url + "/pay", content=b"{}", idempotency_key=True, deadline=1.0)
        assert caught.value.evidence is Evidence.SENT_NO_RESPONSE
        key = caught.value.idempotency_key
        assert key is not None
        assert SF_UUID4.fullmatch(key), key
        again = await c.post(server.url + "/pay", content=b"{}", idempotency_key=key)
    assert again.replayed is True
    assert keys(server) == [key, key]
