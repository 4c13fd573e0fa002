"""An origin whose last pooled connection is dropped when taken (idle past keepalive_expiry,
or closed by the peer) gets a fresh connection, also on the path that waits in the pool
(a request hook sends a call there; a bulkhead or a deadline do when no permit or no
ready connection is free at once): regression for an AssertionError from
``release`` once the origin's state had been forgotten under the call."""

from __future__ import annotations

import pytest
import trio
import trio.testing

import trio_retry
from trio_retry.testing import FaultServer


@pytest.fixture
def fault_server_options() -> dict[str, object]:
    """The plugin's ``fault_server``, HTTP/1.1 only."""
    return {"http2": False}


@pytest.mark.parametrize(
    "options",
    [
        {"event_hooks": {"request": [lambda request: None]}},
        {"default_upstream": trio_retry.Upstream(max_concurrency=2)},
        {"deadline": 30.0},
    ],
    ids=["hook", "bulkhead", "deadline"],
)
async def test_a_call_after_the_idle_connection_expired_opens_a_new_one(
    fault_server: FaultServer, autojump_clock: trio.testing.MockClock, options: dict[str, object]
) -> None:
    async with trio_retry.Client(keepalive_expiry=0.2, **options) as client:  # type: ignore[arg-type]
        assert (await client.get(fault_server.url + "/a")).status == 200
        await trio.sleep(0.5)  # the idle connection expires
        again = await client.get(fault_server.url + "/b")
        assert again.status == 200
        assert again.attempts[0].connection_reused is False
        assert (await client.get(fault_server.url + "/c")).attempts[0].connection_reused
    assert len(fault_server.requests) == 3
