"""A streamed body read after it was closed raises ``StreamClosed`` (SPEC §20, issue #38 row 1).

Before, a body iterated after its ``async with client.stream()`` block yielded nothing and no
error, as if the response had been empty, even with a ``Content-Length`` of 50 MB; ``aread()``
then returned ``b""`` while ``.content`` said to call ``aread()``. Every way of reading it now
raises the same ``StreamClosed``, whose message says what closed the body. The FaultServer
(HTTP/1.1 and HTTP/2) and nginx (which says in its log how much it sent) serve the bodies.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import trio

import trio_retry
from tests.conftest import FAST
from tests.support.fixtures import StartNginx
from tests.support.fixtures import nginx as nginx
from trio_retry import StreamClosed
from trio_retry.testing import FaultServer, Respond

BODY = b"0123456789" * 100_000  # 1 MB, more than the socket buffers hold
#: nginx's file: larger than what loopback socket buffers take in before the client reads.
LARGE = b"n" * (32 * 1024 * 1024)
LIMIT = 10  # seconds: the bound of every test's network activity


async def _read_all(iterator: AsyncIterator[Any]) -> list[Any]:
    return [item async for item in iterator]


async def _content(response: trio_retry.Response) -> bytes:
    return response.content


async def _text(response: trio_retry.Response) -> str:
    return response.text


#: Every way of reading a body, each as an awaitable that reads it whole.
READERS: dict[str, Callable[[trio_retry.Response], Awaitable[object]]] = {
    "aiter_bytes": lambda r: _read_all(r.aiter_bytes()),
    "aiter_bytes(chunk_size)": lambda r: _read_all(r.aiter_bytes(chunk_size=1000)),
    "aiter_raw": lambda r: _read_all(r.aiter_raw()),
    "aiter_text": lambda r: _read_all(r.aiter_text()),
    "aiter_lines": lambda r: _read_all(r.aiter_lines()),
    "aread": lambda r: r.aread(),
    "content": _content,
    "text": _text,
}


async def _closed_messages(response: trio_retry.Response) -> set[str]:
    """The message of every way of reading ``response``, each of which must raise
    ``StreamClosed``."""
    messages = set()
    for name, read in READERS.items():
        with pytest.raises(StreamClosed) as info:
            await read(response)
        assert isinstance(info.value, trio_retry.TrioRetryError), name
        assert isinstance(info.value, RuntimeError), name  # as httpx's StreamClosed
        messages.add(str(info.value))
    return messages


@pytest.fixture(params=["http/1.1", "h2c"])
async def server(request: pytest.FixtureRequest, nursery: trio.Nursery) -> FaultServer:
    fault_server = FaultServer(http2=request.param == "h2c")
    await nursery.start(fault_server.serve)
    return fault_server


def _client(server: FaultServer) -> trio_retry.Client:
    return trio_retry.Client(retry=FAST, http2_prior_knowledge=server.http2)


async def test_reading_after_the_block_raises_stream_closed_in_every_way(
    server: FaultServer,
) -> None:
    server.default = Respond(200, body=BODY)  # with its Content-Length
    async with _client(server) as client:
        with trio.fail_after(LIMIT):
            async with client.stream("GET", server.url + "/big") as response:
                assert response.headers["content-length"] == str(len(BODY))
            messages = await _closed_messages(response)
            # One message from every way, saying what closed the body and what to do.
            assert len(messages) == 1, messages
            (message,) = messages
            assert "`async with client.stream(...)` block" in message
            assert "before it was read to the end" in message
            assert "read it inside the block" in message
            # The connection went with the block: closed, not pooled half-read.
            assert (client.pool.active_count, client.pool.idle_count) == (0, int(server.http2))


async def test_an_iterator_taken_inside_the_block_raises_after_it(server: FaultServer) -> None:
    server.default = Respond(200, body=BODY)
    async with _client(server) as client:
        with trio.fail_after(LIMIT):
            async with client.stream("GET", server.url + "/big") as response:
                chunks = response.aiter_bytes()
                first = await chunks.__anext__()
            assert first
            assert BODY.startswith(first)
            with pytest.raises(StreamClosed, match="block exited, before it was read"):
                await chunks.__anext__()


async def test_a_body_read_to_its_end_stays_readable_after_the_block(
    server: FaultServer,
) -> None:
    server.default = Respond(200, body=BODY)
    async with _client(server) as client:
        with trio.fail_after(LIMIT):
            async with client.stream("GET", server.url + "/a") as read:
                await read.aread()
            async with client.stream("GET", server.url + "/b") as iterated:
                chunks = iterated.aiter_bytes()
                assert b"".join(await _read_all(chunks)) == BODY
            assert read.content == BODY
            assert await read.aread() == BODY
            assert await _read_all(chunks) == []  # an ended iterator just ends
            # Iterated, not kept: .content and aread() agree that it is gone (no StreamClosed).
            with pytest.raises(RuntimeError, match="iterated, not kept") as content:
                _ = iterated.content
            assert not isinstance(content.value, StreamClosed)
            with pytest.raises(RuntimeError, match="already been consumed"):
                await iterated.aread()
            assert client.pool.idle_count == 1  # read to the end: kept alive


async def test_aclose_closes_the_body_and_gives_the_connection_back(
    server: FaultServer,
) -> None:
    server.default = Respond(200, body=BODY)
    async with _client(server) as client:
        with trio.fail_after(LIMIT):
            async with client.stream("GET", server.url + "/big") as response:
                chunks = response.aiter_raw()
                received = len(await chunks.__anext__())
                assert response.num_bytes_downloaded == received
                await response.aclose()
                assert client.pool.active_count == 0  # given back at aclose(), not later
                with pytest.raises(StreamClosed, match=r"closed by `await response.aclose\(\)`"):
                    await chunks.__anext__()
                messages = await _closed_messages(response)
                await response.aclose()  # again: nothing to do
            assert messages == {await _message(response.aread())}  # the block kept aclose's
            assert response.num_bytes_downloaded == received


async def _message(read: Awaitable[object]) -> str:
    with pytest.raises(StreamClosed) as info:
        await read
    return str(info.value)


async def test_a_followed_redirect_keeps_its_head_and_says_so(server: FaultServer) -> None:
    server.script(Respond(302, headers=[("Location", "/next")], body=b"moved"))
    server.default = Respond(200, body=b"here")
    async with _client(server) as client:
        with trio.fail_after(LIMIT):
            async with client.stream("GET", server.url + "/", follow_redirects=True) as response:
                assert await response.aread() == b"here"
            (redirect,) = response.history
            assert redirect.status == 302
            with pytest.raises(StreamClosed, match="redirect was closed when the client followed"):
                await redirect.aread()


#: nginx serving ``html/`` as static files: HTTP/1.1 cleartext and HTTP/2 over TLS.
_STATIC = """
    server {
        listen {{host}}:{{static}};
        location / { root {{workdir}}/html; }
    }
    server {
        listen {{host}}:{{static_tls}} ssl http2;
{{tls}}
        location / { root {{workdir}}/html; }
    }
"""


@pytest.mark.parametrize("listener", ["static", "static_tls"])
async def test_nginx_body_read_after_the_block(nginx: StartNginx, listener: str) -> None:
    """A static 32 MiB file from nginx: the read after the block raises, and nginx's log shows
    the one request, its body cut short when the block closed the connection (or reset the
    stream)."""
    server = nginx(
        files={"html/big.bin": LARGE}, servers=_STATIC, listeners=("static", "static_tls")
    )
    url = server.url(listener, "/big.bin")
    async with trio_retry.Client(retry=FAST, ssl_context=server.ssl_context()) as client:
        with trio.fail_after(LIMIT):
            async with client.stream("GET", url, headers={"x-request-id": "closed"}) as response:
                assert response.status == 200
                assert response.http_version == (
                    "HTTP/2" if listener == "static_tls" else "HTTP/1.1"
                )
                assert int(response.headers["content-length"]) == len(LARGE)
            assert len(await _closed_messages(response)) == 1
    (entry,) = server.log(expect=1).entries
    assert (entry.request_id, entry.status) == ("closed", 200)
    assert entry.body_bytes_sent < len(LARGE)  # the client closed it: never read whole
