"""Request bodies of every kind, streaming responses, limits, and the client's lifecycle."""

from __future__ import annotations

import contextlib
import io
import pathlib
from collections.abc import AsyncIterator, Iterator

import pytest
import trio
import trio.testing

import trio_retry
from tests.conftest import FAST
from trio_retry import (
    DenyReason,
    Evidence,
    Multipart,
    Reopenable,
    RetryDenied,
    StreamFactory,
)
from trio_retry._models import Origin
from trio_retry.testing import FaultServer, PartialBody, Respond


async def test_json_and_params(server: FaultServer, client: trio_retry.Client) -> None:
    server.default = Respond(200, body=b'{"ok": true}')
    response = await client.post(
        server.url + "/j?x=1", json={"a": [1, 2]}, params={"y": "two words", "z": [3, 4]}
    )
    assert response.json() == {"ok": True}
    request = server.requests[0]
    assert request.path == "/j?x=1&y=two+words&z=3&z=4"
    assert request.body == b'{"a":[1,2]}'
    assert dict(request.headers)["content-type"] == "application/json"


async def test_reopenable_body_is_reopened_for_each_attempt(
    server: FaultServer, client: trio_retry.Client
) -> None:
    opened = 0

    def factory() -> Iterator[bytes]:
        nonlocal opened
        opened += 1
        yield b"part1-"
        yield b"part2"

    server.script(Respond(503))
    server.default = Respond(200)
    response = await client.put(server.url + "/r", content=Reopenable(factory))
    assert response.status == 200
    assert opened == 2
    assert [r.body for r in server.requests] == [b"part1-part2"] * 2
    assert dict(server.requests[0].headers)["transfer-encoding"] == "chunked"


async def test_one_shot_body_is_never_retried(
    server: FaultServer, client: trio_retry.Client
) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"only"
        yield b"-once"

    server.script(Respond(503))
    response = await client.put(server.url + "/o", content=chunks())
    assert response.status == 503
    assert response.retry_decision == RetryDenied.body_not_replayable()
    assert server.requests[0].body == b"only-once"


async def test_path_and_file_bodies(
    server: FaultServer, client: trio_retry.Client, tmp_path: pathlib.Path
) -> None:
    path = tmp_path / "upload.bin"
    path.write_bytes(b"z" * 100_000)
    server.script(Respond(503))
    server.default = Respond(200)
    response = await client.put(server.url + "/f", content=path)
    assert len(response.attempts) == 2  # a path is reopenable
    assert server.requests[1].body == b"z" * 100_000
    assert dict(server.requests[1].headers)["content-length"] == "100000"
    await client.post(server.url + "/g", content=io.BytesIO(b"file object"))
    assert server.requests[-1].body == b"file object"


async def test_multipart(server: FaultServer, client: trio_retry.Client) -> None:
    form = Multipart(
        [("field", "value"), ("file", ("a.txt", b"hello", "text/plain"))], boundary="XyZ"
    )
    await client.post(server.url + "/m", content=form)
    request = server.requests[0]
    assert dict(request.headers)["content-type"] == "multipart/form-data; boundary=XyZ"
    assert request.body == (
        b'--XyZ\r\nContent-Disposition: form-data; name="field"\r\n\r\nvalue\r\n'
        b'--XyZ\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n'
        b"Content-Type: text/plain\r\n\r\nhello\r\n--XyZ--\r\n"
    )
    assert dict(request.headers)["content-length"] == str(len(request.body))


async def test_stream_factory_declared_one_shot(
    server: FaultServer, client: trio_retry.Client
) -> None:
    server.script(Respond(503))
    body = StreamFactory(lambda: [b"a"], replayability=trio_retry.Replayability.ONE_SHOT)
    response = await client.put(server.url + "/", content=body)
    assert response.retry_decision == RetryDenied.body_not_replayable()


async def test_unsupported_body_type_is_an_invalid_request(
    server: FaultServer, client: trio_retry.Client
) -> None:
    with pytest.raises(trio_retry.InvalidRequest, match="accepted kinds"):
        await client.post(server.url + "/", content=[b"a", b"b"])
    assert server.requests == []


async def test_streaming_response(server: FaultServer, client: trio_retry.Client) -> None:
    server.default = Respond(200, body=b"abc" * 50_000)
    async with client.stream("GET", server.url + "/big") as response:
        assert response.status == 200
        received = b"".join([chunk async for chunk in response.aiter_bytes()])
    assert received == b"abc" * 50_000
    assert "0 active, 1 idle" in repr(client.pool)  # fully read: kept alive


async def test_streaming_left_early_closes_the_connection(
    server: FaultServer, client: trio_retry.Client
) -> None:
    server.default = Respond(200, body=b"x" * 500_000)
    async with client.stream("GET", server.url + "/big") as response:
        async for _chunk in response.aiter_bytes():
            break
    assert client.pool.active_count == 0
    assert client.pool.idle_count == 0


async def test_streaming_retries_before_delivery_but_not_after(
    server: FaultServer, client: trio_retry.Client
) -> None:
    server.script(Respond(503), PartialBody(declared_length=1000, body=b"y" * 10))
    async with client.stream("GET", server.url + "/s") as response:
        assert response.status == 200
        assert len(response.attempts) == 2
        with pytest.raises(trio_retry.ConnectionBroken) as info:
            async for _chunk in response.aiter_bytes():
                pass
    err = info.value
    assert err.evidence is Evidence.PARTIAL_RESPONSE
    assert isinstance(err.decision, RetryDenied)
    assert err.decision.reason is DenyReason.RESPONSE_ALREADY_DELIVERED
    assert len(server.requests) == 2


async def test_oversized_response_head_is_a_protocol_failure(server: FaultServer) -> None:
    server.default = Respond(200, headers=[("X-Big", "v" * 5000)])
    async with trio_retry.Client(retry=FAST, max_header_bytes=1024) as client:
        with pytest.raises(trio_retry.ProtocolFailed, match="max_header_bytes") as info:
            await client.get(server.url + "/")
        # On a POST the same failure leaves "did it run?" open: ambiguous, not "failed".
        with pytest.raises(trio_retry.HttpAmbiguousExecutionError, match="max_header_bytes"):
            await client.post(server.url + "/", content=b"")
    assert info.value.category is trio_retry.FailureCategory.REMOTE_PROTOCOL
    assert info.value.evidence is Evidence.SENT_NO_RESPONSE


async def test_body_limit(server: FaultServer) -> None:
    server.default = Respond(200, body=b"b" * 10_000)
    async with trio_retry.Client(retry=FAST, max_body_bytes=1000) as client:
        with pytest.raises(trio_retry.ProtocolFailed, match="max_body_bytes") as info:
            await client.get(server.url + "/")
    assert info.value.evidence is Evidence.PARTIAL_RESPONSE
    assert len(info.value.attempts) == 1
    assert len(server.requests) == 1


async def test_pool_timeout(server: FaultServer, autojump_clock: trio.testing.MockClock) -> None:
    from trio_retry.testing import Stall

    server.route("GET", "/slow", Stall(10.0))
    async with trio_retry.Client(retry=FAST, max_connections=1, pool_timeout=0.5) as client:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.get, server.url + "/slow")
            await trio.sleep(0.1)
            with pytest.raises(trio_retry.PoolTimeout) as info:
                await client.post(server.url + "/pay", content=b"")
            nursery.cancel_scope.cancel()
    err = info.value
    assert err.evidence is Evidence.NOT_SENT
    assert [a.stage for a in err.attempts] == [trio_retry.Stage.POOL] * 3
    assert "max_connections=1" in str(err)
    assert server.executed_count("POST") == 0


async def test_client_outside_async_with_is_a_clear_error() -> None:
    client = trio_retry.Client()
    with pytest.raises(trio_retry.ClientStateError, match="async with"):
        await client.get("http://127.0.0.1:1/")
    async with client:
        pass
    with pytest.raises(trio_retry.ClientStateError, match="closed"):
        await client.get("http://127.0.0.1:1/")


async def test_exception_in_the_block_is_not_wrapped(server: FaultServer) -> None:
    from trio_retry.testing import CloseAfterBody

    server.script(CloseAfterBody())
    with pytest.raises(trio_retry.HttpAmbiguousExecutionError):
        async with trio_retry.Client() as client:
            await client.post(server.url + "/", content=b"")


async def test_closing_the_client_ends_in_flight_calls_with_evidence(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    from trio_retry.testing import Stall

    server.default = Stall(30.0)
    errors: list[BaseException] = []
    client = trio_retry.Client(retry=FAST)

    async def call() -> None:
        try:
            await client.get(server.url + "/")
        except trio_retry.TrioRetryError as exc:
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        async with client:
            nursery.start_soon(call)
            await trio.sleep(1.0)
    assert trio.current_time() == pytest.approx(1.0, abs=0.01)
    assert len(errors) == 1
    assert isinstance(errors[0], trio_retry.ConnectionBroken)
    assert errors[0].evidence is Evidence.SENT_NO_RESPONSE
    assert client.pool.total == 0


@pytest.mark.parametrize("way", ["raises", "cancelled"])
async def test_a_streamed_answer_not_handed_over_gives_its_connection_and_permit_back(
    server: FaultServer, autojump_clock: trio.testing.MockClock, way: str
) -> None:
    """``on_attempt`` runs before the response is handed over; when it raises, or the call is
    cancelled while it runs, nobody will read the body: its connection and bulkhead permit
    go back (they were held until the client closed)."""
    server.default = Respond(200, body=b"s" * 100_000)

    async def on_attempt(attempt: trio_retry.Attempt) -> None:
        if way == "raises":
            raise RuntimeError("the caller's callback failed")
        await trio.sleep(10)

    upstream = trio_retry.Upstream(max_concurrency=1)
    async with trio_retry.Client(default_upstream=upstream, on_attempt=on_attempt) as client:
        raised: contextlib.AbstractContextManager[object] = (
            pytest.raises(RuntimeError, match="callback failed")
            if way == "raises"
            else contextlib.nullcontext()
        )
        with trio.move_on_after(5) as scope, raised:
            async with client.stream("GET", server.url + "/s"):
                pytest.fail("the response was not to be handed over")
        assert scope.cancelled_caught is (way == "cancelled")
        assert client.pool.active_count == 0  # closed: its body was never read
        limiter = client._rt.upstreams.get(Origin.parse(server.url)).limiter
        assert limiter is not None
        assert limiter.borrowed_tokens == 0
