"""Resumed downloads on FaultServer's `StaticFile`, over HTTP/1.1, HTTP/2 and HTTP/3 (SPEC §18):
a body broken mid-way is continued with Range/If-Range and the caller's iteration goes on, one
body byte for byte; an answer that is not the same representation is never spliced; each
continuation is an attempt in the trail, decided by the engine and counted."""

from __future__ import annotations

import gzip
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

import trio_retry
from tests.streams.conftest import serving as serve_route
from trio_retry import ConnectionBroken, DenyReason, Evidence, RetryPolicy, Upstream
from trio_retry._call.resumable import BUFFERED_FROM
from trio_retry.testing import FaultServer, PartialBody, StaticFile

BODY = bytes(range(256)) * 400  # 102,400 bytes, no two 256-byte windows alike in place
#: A buffered body is continued from BUFFERED_FROM bytes on (random: gzip leaves it as long).
LARGE = random.Random(44).randbytes(BUFFERED_FROM + 50_000)
LARGE_CHANGED = bytes(reversed(LARGE))
NO_WAIT = RetryPolicy(max_attempts=5, backoff=trio_retry.Backoff(initial=0.0, jitter="none"))


@asynccontextmanager
async def serving(
    protocol: str, static: StaticFile, **client_options: object
) -> AsyncIterator[tuple[FaultServer, trio_retry.Client]]:
    """A FaultServer with `static` at /file, and a client reaching it over `protocol`."""
    options: dict[str, object] = {"retry": NO_WAIT, **client_options}
    async with serve_route(protocol, "GET", "/file", static, **options) as pair:
        yield pair


def version(protocol: str) -> str:
    return {"h1": "HTTP/1.1", "h2": "HTTP/2", "h3": "HTTP/3"}[protocol]


async def read_into(
    got: bytearray, client: trio_retry.Client, url: str, method: str = "GET", **options: object
) -> trio_retry.Response:
    """Stream the body of ``method url`` into ``got`` (what arrived stays there if it fails)."""
    async with client.stream(method, url, **options) as response:  # type: ignore[arg-type]
        async for chunk in response.aiter_bytes():
            got += chunk
    return response


async def read_streamed(
    client: trio_retry.Client, url: str, **options: object
) -> tuple[trio_retry.Response, bytes]:
    got = bytearray()
    response = await read_into(got, client, url, **options)
    return response, bytes(got)


async def test_a_broken_body_goes_on_in_the_same_iteration(protocol: str) -> None:
    static = StaticFile(BODY)
    static.script(cut_after=30_000)
    static.script(cut_after=20_000)  # the continuation is cut too, 20,000 bytes into its 206
    async with serving(protocol, static) as (server, client):
        response, got = await read_streamed(client, server.url + "/file")
    assert got == BODY
    assert response.resumed == 2
    assert static.ranges == [None, "bytes=30000-", "bytes=50000-"]
    trail = [(a.number, a.evidence, a.status, a.range_start) for a in response.attempts]
    assert trail == [
        (1, Evidence.PARTIAL_RESPONSE, 200, None),
        (2, Evidence.PARTIAL_RESPONSE, 206, 30_000),
        (3, Evidence.RESPONSE_RECEIVED, 206, 50_000),
    ]
    assert all(a.http_version == version(protocol) for a in response.attempts)
    assert [type(a.decision).__name__ for a in response.attempts] == [
        "RetryAllowed",
        "RetryAllowed",
        "NoneType",
    ]


CHANGED = bytes(reversed(BODY))


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ({"change": CHANGED}, "answered 200 with a whole body"),
        ({"status": 416}, "answered 416"),
        ({"content_range": "bytes 29000-102399/102400"}, "starts at byte 29000"),
        ({"ignore_range": True}, "answered 200 with a whole body"),
    ],
    ids=["changed", "416", "wrong-content-range", "200-to-a-range"],
)
async def test_another_representation_is_never_spliced(
    protocol: str, fault: dict[str, object], reason: str
) -> None:
    static = StaticFile(BODY)
    static.script(cut_after=30_000)
    static.script(**fault)  # type: ignore[arg-type]
    got = bytearray()
    async with serving(protocol, static) as (server, client):
        with pytest.raises(ConnectionBroken) as caught:
            await read_into(got, client, server.url + "/file")
    assert bytes(got) == BODY[:30_000]  # nothing of the second answer reached the caller
    error = caught.value
    assert error.evidence is Evidence.PARTIAL_RESPONSE
    assert reason in str(error)
    assert "not continued" in str(error)
    assert static.ranges == [None, "bytes=30000-"]
    assert [(a.evidence, a.range_start) for a in error.attempts] == [
        (Evidence.PARTIAL_RESPONSE, None),
        (Evidence.RESPONSE_RECEIVED, 30_000),
    ]


async def test_nothing_arrived_so_a_changed_body_restarts(protocol: str) -> None:
    static = StaticFile(BODY)
    static.script(cut_after=0)  # the head, then the break: no body byte reached the caller
    static.script(change=CHANGED)
    async with serving(protocol, static) as (server, client):
        response, got = await read_streamed(client, server.url + "/file")
    assert got == CHANGED
    assert response.resumed == 0
    assert static.ranges == [None, "bytes=0-"]


@pytest.mark.parametrize("where", ["call", "upstream"])
async def test_resume_false_turns_it_off(where: str) -> None:
    static = StaticFile(BODY)
    static.script(cut_after=30_000)
    async with serving("h1", static) as (server, client):
        if where == "upstream":
            client_options = {"upstreams": {server.url: Upstream(resume=False)}}
            async with trio_retry.Client(retry=NO_WAIT, **client_options) as off:  # type: ignore[arg-type]
                with pytest.raises(ConnectionBroken) as caught:
                    await read_streamed(off, server.url + "/file")
        else:
            with pytest.raises(ConnectionBroken) as caught:
                await read_streamed(client, server.url + "/file", resume=False)
    assert static.ranges == [None]
    assert caught.value.evidence is Evidence.PARTIAL_RESPONSE
    assert caught.value.decision == trio_retry.RetryDenied.response_already_delivered()


async def test_resumes_count_against_max_attempts() -> None:
    static = StaticFile(BODY)
    static.script(cut_after=10_000)
    static.script(cut_after=10_000)
    policy = RetryPolicy(max_attempts=2, backoff=trio_retry.Backoff(initial=0.0, jitter="none"))
    async with serving("h1", static, retry=policy) as (server, client):
        with pytest.raises(ConnectionBroken) as caught:
            await read_streamed(client, server.url + "/file")
    assert static.ranges == [None, "bytes=10000-"]
    error = caught.value
    assert error.evidence is Evidence.PARTIAL_RESPONSE
    assert isinstance(error.decision, trio_retry.RetryDenied)
    assert error.decision.reason is DenyReason.MAX_ATTEMPTS
    assert [a.range_start for a in error.attempts] == [None, 10_000]


async def test_resumes_draw_on_the_retry_budget() -> None:
    static = StaticFile(BODY)
    static.script(cut_after=10_000)
    empty = trio_retry.RetryBudget(ratio=0.0, min_per_second=0.0)
    async with serving("h1", static) as (server, _):
        options = {"upstreams": {server.url: Upstream(budget=empty)}, "retry": NO_WAIT}
        async with trio_retry.Client(**options) as client:  # type: ignore[arg-type]
            with pytest.raises(ConnectionBroken) as caught:
                await read_streamed(client, server.url + "/file")
    assert static.ranges == [None]
    decision = caught.value.decision
    assert isinstance(decision, trio_retry.RetryDenied)
    assert decision.reason is DenyReason.BUDGET_EXHAUSTED


async def test_a_compressed_body_goes_on_through_the_same_decoder(protocol: str) -> None:
    encoded = gzip.compress(BODY, compresslevel=1, mtime=0)
    static = StaticFile(encoded, content_encoding="gzip")
    static.script(cut_after=len(encoded) // 2)
    async with serving(protocol, static) as (server, client):
        response, got = await read_streamed(client, server.url + "/file")
    assert got == BODY
    assert response.resumed == 1
    assert static.ranges == [None, f"bytes={len(encoded) // 2}-"]


async def test_aiter_raw_goes_on_too() -> None:
    static = StaticFile(BODY)
    static.script(cut_after=1)
    async with serving("h1", static) as (server, client):
        async with client.stream("GET", server.url + "/file") as response:
            got = b"".join([chunk async for chunk in response.aiter_raw()])
    assert got == BODY
    assert response.resumed == 1


STRONG = (("ETag", '"v1"'), ("Accept-Ranges", "bytes"))


@pytest.mark.parametrize(
    ("headers", "method", "key"),
    [
        ((("ETag", 'W/"v1"'), ("Accept-Ranges", "bytes")), "GET", None),
        ((("ETag", '"v1"'),), "GET", None),
        (STRONG, "POST", None),
        (STRONG, "PUT", None),  # IDEMPOTENT without a key: not replay-safe enough
        (STRONG, "POST", "k1"),  # replay-safe, but ranges are for GET alone (RFC 9110 §14.2)
    ],
    ids=["weak-etag", "no-accept-ranges", "post", "put-without-key", "post-with-key"],
)
async def test_what_cannot_be_continued_is_not(
    headers: tuple[tuple[str, str], ...], method: str, key: str | None
) -> None:
    """The same break, on a response that promises nothing or to a request whose replay is not
    known to be harmless: one request, the break reported as it happened."""
    static = StaticFile(BODY)  # (the route's handler is replaced: only its ranges matter)
    async with serving("h1", static) as (server, client):
        server.replace(
            method,
            "/file",
            PartialBody(200, headers=headers, declared_length=1000, body=b"x" * 100),
        )
        with pytest.raises(ConnectionBroken) as caught:
            await read_into(bytearray(), client, server.url + "/file", method, idempotency_key=key)
        assert server.executed_count(method, "/file") == 1
    assert caught.value.evidence is Evidence.PARTIAL_RESPONSE
    assert [a.range_start for a in caught.value.attempts] == [None]


async def test_a_buffered_body_is_continued_too(protocol: str) -> None:
    static = StaticFile(LARGE)
    static.script(cut_after=40_000)
    async with serving(protocol, static) as (server, client):
        response = await client.get(server.url + "/file")
    assert response.content == LARGE
    assert response.status == 200
    assert response.headers["content-length"] == str(len(LARGE))
    assert response.resumed == 1
    assert response.num_bytes_downloaded == len(LARGE)
    assert static.ranges == [None, "bytes=40000-"]
    assert [(a.evidence, a.status, a.range_start) for a in response.attempts] == [
        (Evidence.PARTIAL_RESPONSE, 200, None),
        (Evidence.RESPONSE_RECEIVED, 206, 40_000),
    ]


async def test_a_buffered_body_of_another_representation_restarts(protocol: str) -> None:
    """Nothing of a buffered body reached the caller: a 200 to the continuation (the file
    changed) is the body, whole, with its own head."""
    static = StaticFile(LARGE)
    static.script(cut_after=40_000)
    static.script(change=LARGE_CHANGED)
    async with serving(protocol, static) as (server, client):
        response = await client.get(server.url + "/file")
    assert response.content == LARGE_CHANGED
    assert response.headers["etag"] == static.etag
    assert response.resumed == 0
    assert static.ranges == [None, "bytes=40000-"]


async def test_a_buffered_compressed_body_is_decoded_once_whole() -> None:
    encoded = gzip.compress(LARGE, compresslevel=1, mtime=0)
    static = StaticFile(encoded, content_encoding="gzip")
    static.script(cut_after=len(encoded) // 3)
    async with serving("h1", static) as (server, client):
        response = await client.get(server.url + "/file")
    assert response.content == LARGE
    assert response.num_bytes_downloaded == len(encoded)
    assert response.resumed == 1


async def test_a_buffered_body_starts_again_after_a_416(protocol: str) -> None:
    """The file shrank (416 to the range): nothing of a buffered body reached the caller, so it
    starts again with the request as it was, one more attempt the engine allowed."""
    static = StaticFile(LARGE)
    static.script(cut_after=40_000)
    static.script(status=416)
    async with serving(protocol, static) as (server, client):
        response = await client.get(server.url + "/file")
    assert response.content == LARGE
    assert response.resumed == 0
    assert static.ranges == [None, "bytes=40000-", None]
    trail = [(a.status, a.range_start, type(a.decision).__name__) for a in response.attempts]
    assert trail == [
        (200, None, "RetryAllowed"),
        (416, 40_000, "RetryAllowed"),
        (200, None, "NoneType"),
    ]


async def test_no_continuation_past_the_deadline() -> None:
    static = StaticFile(BODY)
    static.script(cut_after=10_000)
    slow = RetryPolicy(max_attempts=5, backoff=trio_retry.Backoff(initial=1.0, jitter="none"))
    async with serving("h1", static, retry=slow) as (server, client):
        with pytest.raises(ConnectionBroken) as caught:
            await read_streamed(client, server.url + "/file", deadline=0.5)
    assert static.ranges == [None]  # a backoff of 1 s does not fit in what is left of 0.5 s
    decision = caught.value.decision
    assert isinstance(decision, trio_retry.RetryDenied)
    assert decision.reason is DenyReason.DEADLINE
    assert caught.value.evidence is Evidence.PARTIAL_RESPONSE


async def test_a_short_buffered_body_is_sent_again_whole() -> None:
    """Below BUFFERED_FROM a buffered body is read whole by its attempt, and a break sends the
    GET again (nothing of it had reached the caller): no range asked for."""
    static = StaticFile(BODY)
    static.script(cut_after=40_000)
    async with serving("h1", static) as (server, client):
        response = await client.get(server.url + "/file")
    assert response.content == BODY
    assert response.resumed == 0
    assert static.ranges == [None, None]
