"""FaultServer on a fixed port, and a strict-mode failure as one clear error (issue #32)."""

from __future__ import annotations

import errno
import socket
import sys

import pytest
import trio

import trio_retry
from tests.conftest import FAST
from trio_retry.testing import FaultServer, Respond, ScriptError, UnusedScriptError

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


async def _serve_then_cancel(server: FaultServer) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        nursery.cancel_scope.cancel()


async def _serve_and_get(server: FaultServer, path: str) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        async with trio_retry.Client(retry=FAST) as client:
            with trio.fail_after(5):
                await client.get(server.url + path)
            await trio.sleep_forever()  # serve fails: the nursery cancels this


async def test_a_server_serves_on_the_port_asked_for_and_a_second_one_fails_clearly() -> None:
    port = _free_port()
    first = FaultServer(port=port)
    async with trio.open_nursery() as nursery:
        url = await nursery.start(first.serve)
        assert url == first.url == f"http://127.0.0.1:{port}"
        assert first.url.endswith(f":{port}")
        assert first.port == port == first.requested_port
        async with trio_retry.Client() as client:
            assert (await client.get(first.url + "/")).status == 200

        second = FaultServer(port=port)
        with pytest.raises(
            OSError, match=rf"cannot listen on 127\.0\.0\.1:{port}: port {port} is in use"
        ) as info:
            await nursery.start(second.serve)
        assert type(info.value) is OSError
        assert info.value.errno == errno.EADDRINUSE
        assert info.value.__cause__ is None
        assert info.value.__suppress_context__
        nursery.cancel_scope.cancel()


async def test_port_zero_is_the_default_any_free_port(nursery: trio.Nursery) -> None:
    server = FaultServer()
    assert server.requested_port == 0
    await nursery.start(server.serve)
    assert server.port != 0
    assert server.url.endswith(f":{server.port}")


@pytest.mark.parametrize("port", [-1, 65536, 1.5, "80", True])
def test_port_is_validated(port: object) -> None:
    with pytest.raises(ValueError, match=r"port must be an int in 0\.\.65535"):
        FaultServer(port=port)  # type: ignore[arg-type]


async def test_a_strict_failure_is_one_error_in_the_callers_nursery() -> None:
    # trio's strict exception groups: the caller's own nursery wraps what serve raises, so
    # the caller sees one group with exactly one leaf, the UnusedScriptError, unchained
    # (no Cancelled, no group of serve's own nursery).
    server = FaultServer(strict=True)
    server.route("GET", "/never", Respond(500))
    with pytest.raises(BaseExceptionGroup) as info:
        await _serve_then_cancel(server)
    assert len(info.value.exceptions) == 1
    leaf = info.value.exceptions[0]
    assert type(leaf) is UnusedScriptError
    assert not isinstance(leaf, BaseExceptionGroup)
    assert "1 scripted action(s) were never used" in str(leaf)
    assert "GET /never: Respond(status=500" in str(leaf)
    assert leaf.__cause__ is None
    assert leaf.__suppress_context__


async def test_strict_mode_does_not_hide_a_broken_script() -> None:
    def handler(request: object) -> object:
        raise RuntimeError("handler bug")

    server = FaultServer(strict=True)
    server.route("GET", "/boom", handler)  # type: ignore[arg-type]
    server.route("GET", "/never", Respond(500))  # unused: not what the failure reports
    with pytest.raises(BaseExceptionGroup) as info:
        await _serve_and_get(server, "/boom")
    leaves = _leaves(info.value)
    assert [type(leaf) for leaf in leaves] == [ScriptError]
