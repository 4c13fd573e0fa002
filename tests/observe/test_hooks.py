"""Event hooks end to end: request hooks change each attempt's headers, response hooks see each
head, and a hook that raises fails the call without bending its evidence."""

from __future__ import annotations

import pytest
import trio
import trio.testing

import trio_retry
from tests.conftest import FAST
from trio_retry import Evidence, FailureCategory, HookRequest, HookResponse, Stage
from trio_retry.testing import CloseAfterBody, FaultServer, Respond

from .conftest import Otel


async def test_request_hooks_add_and_change_headers_on_every_attempt(server: FaultServer) -> None:
    seen: list[tuple[int, str]] = []

    def sign(request: HookRequest) -> None:
        seen.append((request.attempt, request.method))
        request.headers.set("X-Signature", f"sig-{request.attempt}")
        request.headers.set("X-Team", "replaced")

    async def trace(request: HookRequest) -> None:
        await trio.lowlevel.checkpoint()
        request.headers.add("X-Async", request.headers["X-Signature"])

    server.script(Respond(503))
    server.default = Respond(200)
    async with trio_retry.Client(
        retry=FAST, headers={"X-Team": "original"}, event_hooks={"request": [sign, trace]}
    ) as client:
        response = await client.get(server.url + "/r")
        plain = await client.get(server.url + "/plain")  # hooks run for every call
    assert response.status == plain.status == 200
    assert seen == [(1, "GET"), (2, "GET"), (1, "GET")]
    sent = [(r.header("x-signature"), r.header("x-async"), r.header("x-team")) for r in
            server.requests]  # fmt: skip
    assert sent == [
        ("sig-1", "sig-1", "replaced"),
        ("sig-2", "sig-2", "replaced"),
        ("sig-1", "sig-1", "replaced"),
    ]
    # The change was the attempt's: the client's own headers are untouched.
    assert client.headers["X-Team"] == "original"


async def test_response_hooks_see_each_attempts_head(server: FaultServer) -> None:
    heads: list[tuple[int, int, str | None]] = []

    async def look(response: HookResponse) -> None:
        heads.append((response.attempt, response.status, response.headers.get("x-n")))

    server.script(Respond(503, headers=[("X-N", "1")]))
    server.default = Respond(200, headers=[("X-N", "2")], body=b"done")
    async with trio_retry.Client(retry=FAST, event_hooks={"response": [look]}) as client:
        response = await client.get(server.url + "/")
    assert response.content == b"done"
    assert heads == [(1, 503, "1"), (2, 200, "2")]


async def test_a_raising_request_hook_fails_the_call_not_sent_and_is_not_retried(
    server: FaultServer, otel: Otel
) -> None:
    class Boom(Exception):
        pass

    def broken(request: HookRequest) -> None:
        raise Boom("no signing key")

    async with trio_retry.Client(
        retry=FAST, telemetry=otel.telemetry, event_hooks={"request": [broken]}
    ) as client:
        with pytest.raises(trio_retry.InvalidRequest) as info:
            await client.post(server.url + "/pay", content=b"{}")
    err = info.value
    assert isinstance(err.__cause__, Boom)
    assert err.evidence is Evidence.NOT_SENT
    assert err.category is FailureCategory.INVALID_REQUEST
    assert "broken" in str(err)
    assert "nothing was sent" in str(err)
    (attempt,) = err.attempts  # recorded once, never retried
    assert (attempt.stage, attempt.bytes_sent, attempt.decision) == (Stage.ADMISSION, 0, None)
    assert server.requests == []
    assert server.connections_accepted == 0
    (span,) = otel.spans()
    assert dict(span.attributes or {})["trio_retry.evidence"] == "NOT_SENT"
    assert dict(span.attributes or {})["error.type"] == "invalid_request"


async def test_a_hook_may_not_set_framing_headers(server: FaultServer) -> None:
    def frame(request: HookRequest) -> None:
        request.headers.set("Transfer-Encoding", "chunked")

    async with trio_retry.Client(retry=FAST, event_hooks={"request": [frame]}) as client:
        with pytest.raises(trio_retry.InvalidRequest, match="transfer-encoding"):
            await client.post(server.url + "/", content=b"abc")
    assert server.requests == []


async def test_a_hook_setting_a_bad_header_value_fails_not_sent(server: FaultServer) -> None:
    def smuggle(request: HookRequest) -> None:
        request.headers.set("X-Evil", "a\r\nHost: elsewhere")

    async with trio_retry.Client(retry=FAST, event_hooks={"request": [smuggle]}) as client:
        with pytest.raises(trio_retry.InvalidRequest) as info:
            await client.get(server.url + "/")
    assert isinstance(info.value.__cause__, trio_retry.InvalidRequest)  # the header check
    assert server.requests == []


async def test_a_raising_response_hook_fails_with_the_response_received(
    server: FaultServer,
) -> None:
    def reject(response: HookResponse) -> None:
        raise ValueError(f"unexpected {response.status}")

    server.default = Respond(200, body=b"body")
    async with trio_retry.Client(retry=FAST, event_hooks={"response": [reject]}) as client:
        with pytest.raises(trio_retry.ProtocolFailed) as info:
            await client.post(server.url + "/pay", content=b"{}")
    err = info.value
    assert isinstance(err.__cause__, ValueError)
    # The server answered: not ambiguous, whatever the method; not retried.
    assert err.evidence is Evidence.RESPONSE_RECEIVED
    assert len(err.attempts) == 1
    assert err.attempts[0].status == 200
    assert server.executed_count("POST") == 1


async def test_a_hook_cancelled_from_outside_propagates_cancelled(server: FaultServer) -> None:
    async def slow(request: HookRequest) -> None:
        await trio.sleep_forever()

    async with trio_retry.Client(retry=FAST, event_hooks={"request": [slow]}) as client:
        with trio.move_on_after(0.05) as scope:
            await client.get(server.url + "/")
    assert scope.cancelled_caught
    assert server.requests == []


async def test_hooks_do_not_change_the_evidence_of_an_ambiguous_post(server: FaultServer) -> None:
    calls: list[int] = []
    server.script(CloseAfterBody())
    async with trio_retry.Client(
        retry=FAST, event_hooks={"request": [lambda r: calls.append(r.attempt)]}
    ) as client:
        with pytest.raises(trio_retry.HttpAmbiguousExecutionError):
            await client.post(server.url + "/pay", content=b"{}")
    assert calls == [1]


@pytest.mark.parametrize(
    ("value", "error", "words"),
    [
        ([print], TypeError, "must be a dict"),
        ({"requests": []}, ValueError, "unknown keys ['requests']"),
        ({"request": print}, TypeError, "event_hooks['request'] must be a list"),
        ({"response": ["x"]}, TypeError, "not callable"),
    ],
)
def test_bad_event_hooks_are_refused_by_the_constructor(
    value: object, error: type[Exception], words: str
) -> None:
    with pytest.raises(error) as info:
        trio_retry.Client(event_hooks=value)  # type: ignore[arg-type]
    assert words in str(info.value)


async def test_closing_the_client_ends_a_call_waiting_in_a_hook(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    """A hook may wait, so hooked attempts always run in a scope aclose() can cancel, even on
    a ready pooled connection with no deadline (the path that otherwise skips the scope)."""
    block = trio.Event()

    async def gate(request: HookRequest) -> None:
        if request.url.target == "/blocked":
            await block.wait()

    errors: list[BaseException] = []

    async def blocked(client: trio_retry.Client) -> None:
        try:
            await client.get(server.url + "/blocked")
        except trio_retry.RequestFailed as exc:
            errors.append(exc)

    server.default = Respond(200)
    with trio.fail_after(10):
        async with trio_retry.Client(retry=FAST, event_hooks={"request": [gate]}) as client:
            await client.get(server.url + "/warm")  # leaves an idle pooled connection
            async with trio.open_nursery() as nursery:
                nursery.start_soon(blocked, client)
                await trio.sleep(1.0)
                await client.aclose()
    (error,) = errors
    # Not yet admitted (a hook runs before the connection is asked for): refused, CLOSED.
    assert isinstance(error, trio_retry.AdmissionRejected)
    assert error.reason is trio_retry.RejectReason.CLOSED
    assert error.evidence is Evidence.NOT_SENT
    assert len(server.requests) == 1
