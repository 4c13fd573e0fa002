"""HTTP11Connection's one ``state`` field: every move the ConnectionState docstring allows, and
no other (each case with the fast path on and off)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio

from trio_retry._core.evidence import FailureCategory, Stage
from trio_retry._wire.exchange import WireRequest
from trio_retry._wire.http11 import ConnectionState, HTTP11Connection
from trio_retry._wire.progress import AttemptProgress, WireError
from trio_retry._wire.transport import Transport

IDLE, ACTIVE, CLOSED = ConnectionState.IDLE, ConnectionState.ACTIVE, ConnectionState.CLOSED
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"


def _request() -> WireRequest:
    return WireRequest("GET", "/", [(b"host", b"example")], b"", None)


Pair = tuple[HTTP11Connection, trio.socket.SocketType]


@pytest.fixture(params=[True, False], ids=["fast", "h11"])
async def pair(request: pytest.FixtureRequest) -> AsyncIterator[Pair]:
    """A connection (fast path on, then off) and the server's end of its socket."""
    a, b = trio.socket.socketpair()
    transport = Transport(trio.SocketStream(a), a, None)
    conn = HTTP11Connection(transport, "k", 65536, fast_path=request.param)
    yield conn, b
    conn.close()
    b.close()


def _states(conn: HTTP11Connection) -> tuple[ConnectionState, bool, bool, bool]:
    return conn.state, conn.closed, conn.is_available(), conn.is_reusable()


async def _exchange(
    conn: HTTP11Connection, server: trio.socket.SocketType, answer: bytes, body: bytes = b"hi"
) -> None:
    await server.send(answer)
    progress = AttemptProgress(0.0)
    response = await conn.send_request(_request(), progress)
    assert conn.state is ACTIVE
    assert not conn.is_available()
    assert not conn.is_reusable()
    assert await response.source.receive_all(progress, None) == [body]
    assert progress.stage is Stage.COMPLETE
    await server.recv(65536)  # the request


async def test_idle_active_idle_on_keep_alive(pair: Pair) -> None:
    conn, server = pair
    assert _states(conn) == (IDLE, False, True, True)
    await _exchange(conn, server, OK)
    assert _states(conn) == (IDLE, False, True, True)
    await _exchange(conn, server, OK)  # and again: the connection carried a second request
    assert (conn.state, conn.requests) == (IDLE, 2)
    assert "idle requests=2" in repr(conn)


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nhi",
        OK + b"HTTP/1.1",  # bytes past the response: not reused (a desync otherwise)
    ],
    ids=["connection-close", "trailing-bytes"],
)
async def test_active_closed_when_the_response_ends_the_connection(
    pair: Pair, answer: bytes
) -> None:
    conn, server = pair
    await _exchange(conn, server, answer)
    assert _states(conn) == (CLOSED, True, False, False)
    assert conn.peer_closed()
    assert "closed" in repr(conn)


async def test_closed_is_final(pair: Pair) -> None:
    conn, _ = pair
    conn.close()
    assert _states(conn) == (CLOSED, True, False, False)
    progress = AttemptProgress(0.0)
    with pytest.raises(WireError) as info:
        await conn.send_request(_request(), progress)
    assert info.value.category is FailureCategory.CONNECTION_BROKEN
    assert "closed by the client while sending" in str(info.value)
    assert conn.state is CLOSED  # send_request did not move it out of CLOSED
    conn.close()  # safe twice
    await conn.aclose()
    assert conn.state is CLOSED


async def test_cancelled_mid_exchange_is_closed(pair: Pair) -> None:
    conn, _ = pair
    progress = AttemptProgress(0.0)
    with trio.move_on_after(0.05) as scope:
        await conn.send_request(_request(), progress)  # the server never answers
    assert scope.cancelled_caught
    assert progress.stage is Stage.AWAITING_RESPONSE
    assert _states(conn) == (CLOSED, True, False, False)


async def test_cancelled_mid_body_is_closed(pair: Pair) -> None:
    conn, server = pair
    await server.send(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nhi")
    progress = AttemptProgress(0.0)
    response = await conn.send_request(_request(), progress)
    assert await response.source.receive_body(progress) == b"hi"
    with trio.move_on_after(0.05) as scope:
        await response.source.receive_body(progress)  # the other two bytes never come
    assert scope.cancelled_caught
    assert progress.stage is Stage.RESPONSE_BODY
    assert _states(conn) == (CLOSED, True, False, False)
