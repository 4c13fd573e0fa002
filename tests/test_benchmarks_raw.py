"""The raw Trio loop (``benchmarks/bare.py``, the floor row ``trio_raw``) reads responses by a
length learnt once: a response of another length must be an error, never a silent desync."""

from __future__ import annotations

import trio

from benchmarks.adapter import Endpoint
from benchmarks.bare import TrioRawAdapter

HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"


async def _serve(listener: trio.SocketListener, bodies: list[bytes], seen: list[bytes]) -> None:
    stream = await listener.accept()
    async with stream:
        for body in bodies:
            request = b""
            while not request.endswith(b"\r\n\r\n"):
                request += await stream.receive_some(4096)
            seen.append(request)
            await stream.send_all(body)


async def _exchange(bodies: list[bytes]) -> tuple[list[object], list[bytes]]:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    seen: list[bytes] = []
    results: list[object] = []
    adapter = TrioRawAdapter(Endpoint("http", "127.0.0.1", port, http2=False), 1)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_serve, listeners[0], bodies, seen)
            async with adapter.lifespan():
                for _ in bodies:
                    try:
                        results.append(await adapter.get("/small"))
                    except RuntimeError as exc:
                        results.append(str(exc))
                        break
            nursery.cancel_scope.cancel()
    await listeners[0].aclose()
    return results, seen


async def test_learns_the_length_then_reads_by_count() -> None:
    results, seen = await _exchange([HEAD + b"hello"] * 3)
    assert results == [(200, 5)] * 3
    assert seen == [seen[0]] * 3  # the same prebaked bytes each time
    assert seen[0].startswith(b"GET /small HTTP/1.1\r\nhost: 127.0.0.1:")


async def test_a_longer_response_is_an_error() -> None:
    longer = HEAD.replace(b"5", b"6") + b"hello!"
    results, _ = await _exchange([HEAD + b"hello", longer])
    assert results[0] == (200, 5)
    assert "longer than learnt" in str(results[1])


async def test_a_status_other_than_200_is_an_error() -> None:
    results, _ = await _exchange([HEAD + b"hello", HEAD.replace(b"200", b"503") + b"hello"])
    assert "unexpected response" in str(results[1])
