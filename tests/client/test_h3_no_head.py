"""HTTP/3: a response stream the server ends before any final head is a malformed response
(RFC 9114 §4.1.2), failed at once as a stream error (H3_MESSAGE_ERROR), never waited on until
the first-byte bound. FaultServer made hostile (``tests/support/hostile_h3.py``): no real
server ends a request stream with no head. (The reset it then sends, and the same bytes read
alike by the fast path and the generic one: ``tests/wire/test_h3_whole.py``.)"""

from __future__ import annotations

import pytest
import trio

import trio_retry
from trio_retry import Evidence, FailureCategory, Upstream
from trio_retry.testing import FaultServer, Respond, Stall
from trio_retry.testing._h3_frames import frame

from ..support.hostile_h3 import H3Attack, hostile_h3


@pytest.mark.parametrize(
    "written", [b"", frame(0x21, b"grease")], ids=["nothing", "an unknown frame only"]
)
async def test_a_stream_ended_with_no_head_fails_at_once_and_alone(
    written: bytes, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    hostile_h3(monkeypatch, {"/attack": H3Attack(request=written, end_stream=True)})
    server = FaultServer(tls=True, http3=True)
    server.route("GET", "/attack", Stall(60))
    server.default = Respond(200, body=b"fine")
    await nursery.start(server.serve)
    async with trio_retry.Client(
        upstreams={server.url: Upstream(http3=True)},
        ssl_context=server.client_ssl_context(),
        retry=trio_retry.RetryPolicy(max_attempts=1),
    ) as client:
        await client.get(server.url + "/warm")
        started = trio.current_time()
        with trio.fail_after(10), pytest.raises(trio_retry.RequestFailed) as info:
            await client.get(server.url + "/attack")
        waited = trio.current_time() - started
        with trio.fail_after(10):
            after = await client.get(server.url + "/after")
    (attempt,) = info.value.attempts
    assert (attempt.category, attempt.evidence, attempt.http_version) == (
        FailureCategory.REMOTE_PROTOCOL,
        Evidence.SENT_NO_RESPONSE,
        "HTTP/3",
    )
    assert "the stream ended with no response head" in str(info.value)
    assert waited < 2  # (not the first-byte bound: 30 s)
    assert (after.status, after.content, after.attempts[0].connection_reused) == (
        200,
        b"fine",
        True,
    )
    assert server.executed_count("GET", "/attack") == 1
