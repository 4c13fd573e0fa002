"""``client.sse(url)`` against FaultServer's `EventSource`, over HTTP/1.1, HTTP/2 and HTTP/3
(SPEC §18): every event exactly once and in order across drops, ``Last-Event-ID`` on every
reopening, ``204`` ends it, a wrong answer fails with its evidence, a stalled stream is
reopened, a ``POST`` stream only when its replay is harmless, and a server that drops every
stream at once is not hammered."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

import trio_retry
from tests.streams.conftest import serving as serve_route
from trio_retry import Evidence, ProtocolFailed, RetryPolicy, SSEEvent, StageTimeouts
from trio_retry.testing import EventSource, FaultServer

EVENTS = [SSEEvent(data=f"event {i}\nline two", id=str(i)) for i in range(1, 12)]
QUICK = RetryPolicy(max_attempts=3, backoff=trio_retry.Backoff(initial=0.001, jitter="none"))


@asynccontextmanager
async def serving(
    protocol: str, source: EventSource, method: str = "GET", **client_options: object
) -> AsyncIterator[tuple[FaultServer, trio_retry.Client]]:
    options: dict[str, object] = {"retry": QUICK, **client_options}
    async with serve_route(protocol, method, "/events", source, **options) as pair:
        yield pair


async def collect(
    client: trio_retry.Client, url: str, got: list[SSEEvent], **options: object
) -> trio_retry.EventStream:
    async with client.sse(url, **options) as events:  # type: ignore[arg-type]
        async for event in events:
            got.append(event)
    return events


@pytest.mark.parametrize("end", ["break", "finish", "reset"])
async def test_every_event_once_in_order_across_drops(protocol: str, end: str) -> None:
    source = EventSource(EVENTS, per_connection=2, end=end, torn=end == "break")
    got: list[SSEEvent] = []
    async with serving(protocol, source) as (server, client):
        events = await collect(client, server.url + "/events", got)
    assert [(e.id, e.data) for e in got] == [(e.id, e.data) for e in EVENTS]
    # six streams of two events (the last one), then the 204 that says there is no more
    assert source.last_event_ids == [None, "2", "4", "6", "8", "10", "11"]
    assert events.reconnects == 6
    assert events.last_event_id == "11"
    assert len(events.attempts) == 7
    assert [a.evidence for a in events.attempts[:-1]] == [Evidence.PARTIAL_RESPONSE] * 6
    assert events.attempts[-1].status == 204
    assert [a.number for a in events.attempts] == list(range(1, 8))


@pytest.mark.parametrize(
    ("options", "what"),
    [({"status": 404}, "status 404"), ({"content_type": "text/plain"}, "'text/plain'")],
)
async def test_not_an_event_stream_fails_with_its_evidence(
    options: dict[str, object], what: str
) -> None:
    source = EventSource(EVENTS, **options)  # type: ignore[arg-type]
    async with serving("h1", source) as (server, client):
        with pytest.raises(ProtocolFailed) as caught:
            await collect(client, server.url + "/events", [])
    assert what in str(caught.value)
    assert caught.value.evidence is Evidence.RESPONSE_RECEIVED
    assert source.last_event_ids == [None]


async def test_a_stalled_stream_is_reopened() -> None:
    source = EventSource(EVENTS[:4], per_connection=2, end="hang", seconds=20)
    got: list[SSEEvent] = []
    bound = StageTimeouts(read=0.3)
    async with serving("h1", source, stage_timeouts=bound) as (server, client):
        start = trio.current_time()
        events = await collect(client, server.url + "/events", got)
    assert [e.id for e in got] == ["1", "2", "3", "4"]
    assert source.last_event_ids == [None, "2", "4"]
    assert trio.current_time() - start < 5  # the read bound ended the silence, not the server
    assert events.attempts[0].category is trio_retry.FailureCategory.TIMEOUT


async def test_the_servers_retry_is_the_wait() -> None:
    source = EventSource(EVENTS[:3], per_connection=1, retry=200)
    got: list[SSEEvent] = []
    async with serving("h1", source) as (server, client):
        start = trio.current_time()
        await collect(client, server.url + "/events", got)
        took = trio.current_time() - start
    assert [e.id for e in got] == ["1", "2", "3"]
    assert took >= 0.6  # three waits of 200 ms: two reopenings, and the one that got 204


async def test_a_server_that_drops_at_once_is_not_hammered() -> None:
    source = EventSource(EVENTS, per_connection=0, end="break")  # a head, then the break
    async with serving("h1", source) as (server, client):
        with pytest.raises(trio_retry.ConnectionBroken) as caught:
            await collect(client, server.url + "/events", [])
    assert len(source.last_event_ids) == 3  # max_attempts, since no event ever arrived
    decision = caught.value.decision
    assert isinstance(decision, trio_retry.RetryDenied)
    assert decision.reason is trio_retry.DenyReason.MAX_ATTEMPTS


@pytest.mark.parametrize("key", [None, "stream-1"])
async def test_a_post_stream_is_reopened_only_when_replay_safe(key: str | None) -> None:
    source = EventSource(EVENTS[:4], per_connection=2)
    got: list[SSEEvent] = []
    async with serving("h1", source, method="POST") as (server, client):
        url = server.url + "/events"
        if key is None:
            with pytest.raises(trio_retry.ConnectionBroken) as caught:
                await collect(client, url, got, method="POST", content=b"{}")
            assert caught.value.evidence is Evidence.PARTIAL_RESPONSE
        else:
            await collect(client, url, got, method="POST", content=b"{}", idempotency_key=key)
    assert [e.id for e in got] == (["1", "2"] if key is None else ["1", "2", "3", "4"])
    assert source.last_event_ids == ([None] if key is None else [None, "2", "4"])


async def test_bad_options_fail_before_anything_is_sent() -> None:
    async with trio_retry.Client() as client:
        with pytest.raises(trio_retry.InvalidRequest, match="deadline"):
            client.sse("http://127.0.0.1:9/events", deadline=-1)
