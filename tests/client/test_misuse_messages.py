"""Issue #38 row 11: a common mistake gets a message that names the fix, and sends nothing.

A relative URL without ``base_url``, an ``upstreams`` key written as ``host:port``, and
``client.stream(...)`` used other than with ``async with``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

import trio_retry
from tests.conftest import FAST
from trio_retry.testing import FaultServer, Respond


@pytest.mark.parametrize("url", ["/x", "x/y?page=2", ""])
async def test_a_relative_url_without_base_url_names_base_url(
    server: FaultServer, url: str
) -> None:
    async with trio_retry.Client(retry=FAST) as client:
        with pytest.raises(trio_retry.InvalidRequest, match="relative") as caught:
            await client.get(url)
    message = str(caught.value)
    assert "base_url=" in message
    assert "http:// or https://" in message
    assert caught.value.evidence is trio_retry.Evidence.NOT_SENT
    assert server.requests == []


async def test_a_host_and_port_without_a_scheme_gets_the_url_it_needs() -> None:
    async with trio_retry.Client(retry=FAST) as client:
        with pytest.raises(trio_retry.InvalidRequest) as caught:
            await client.get("localhost:19044/x")
    assert "'http://localhost:19044/x'" in str(caught.value)


@pytest.mark.parametrize("key", ["localhost:19044", "api.example", "ftp://api.example"])
def test_an_upstreams_key_error_names_the_expected_form(key: str) -> None:
    with pytest.raises(ValueError, match="upstreams key") as caught:
        trio_retry.Client(upstreams={key: trio_retry.Upstream()})
    message = str(caught.value)
    assert '"https://host:port"' in message
    assert '"https://host"' in message


async def _await(call: Any) -> None:
    await call


async def _async_for(call: Any) -> None:
    async for _ in call:
        pass


async def _with(call: Any) -> None:
    with call:
        pass


async def _for(call: Any) -> None:
    for _ in call:
        pass


#: Each use of ``client.stream(...)`` other than ``async with``, and words its message holds.
STREAM_MISUSES: dict[str, tuple[Callable[[Any], Awaitable[None]], str]] = {
    "await": (_await, "cannot be awaited"),
    "async for": (_async_for, "not iterable"),
    "with": (_with, "not `with`"),
    "for": (_for, "not iterable"),
}


@pytest.mark.parametrize("misuse", STREAM_MISUSES)
async def test_stream_used_without_async_with_says_how(server: FaultServer, misuse: str) -> None:
    server.default = Respond(200, body=b"ok")
    use, says = STREAM_MISUSES[misuse]
    async with trio_retry.Client(retry=FAST) as client:
        with pytest.raises(TypeError) as caught:
            await use(client.stream("GET", server.url + "/"))
        message = str(caught.value)
        assert "async with client.stream(" in message
        assert says in message
        assert "_AsyncGeneratorContextManager" not in message
        await trio.testing.wait_all_tasks_blocked()
        assert server.requests == []  # a misuse sends nothing
        async with client.stream("GET", server.url + "/") as response:  # the right way works
            assert await response.aread() == b"ok"
    assert len(server.requests) == 1


async def test_a_stream_call_is_entered_once(server: FaultServer) -> None:
    server.default = Respond(200, body=b"ok")
    async with trio_retry.Client(retry=FAST) as client:
        call = client.stream("GET", server.url + "/")
        async with call as response:
            await response.aread()
        with pytest.raises(RuntimeError, match="entered once"):
            async with call:
                pass
    assert len(server.requests) == 1
