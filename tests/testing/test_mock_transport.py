"""MockTransport with the real client: lifecycle, loud scripts, virtual time, big bodies."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

import trio_retry
from trio_retry._wire.dialer import ConnectTarget
from trio_retry._wire.transport import Transport
from trio_retry.testing import (
    EndlessBody,
    FaultServer,
    MockTransport,
    RefuseStream,
    Respond,
    ScriptError,
    Stall,
)
from trio_retry.testing._memory import MemoryEnd


def test_transport_arguments_are_checked() -> None:
    with pytest.raises(TypeError, match="transport must have an async connect"):
        trio_retry.Client(transport=object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="proxy= and transport= cannot be combined"):
        trio_retry.Client(transport=MockTransport(), proxy="http://127.0.0.1:1")
    with pytest.raises(ValueError, match="buffer_size"):
        MockTransport(buffer_size=0)


@pytest.mark.parametrize("h2c", [False, True], ids=["h1", "h2c"])
async def test_no_server_task_outlives_the_client(h2c: bool) -> None:
    transport = MockTransport()
    transport.server.default = Stall(3600.0)  # would hold its connection for an hour
    me = trio.lowlevel.current_task()
    before = len(list(me.child_nurseries))
    with trio.move_on_after(1.0):
        async with trio_retry.Client(transport=transport, http2_prior_knowledge=h2c) as client:
            await client.get("http://api.example/slow")
    assert len(list(me.child_nurseries)) == before  # the client's nursery, and its tasks, gone
    assert transport.server.connections_accepted == 1
    assert transport.server.requests[0].executed  # it was read; then the client left


@pytest.mark.parametrize("h2c", [False, True], ids=["h1", "h2c"])
async def test_time_is_virtual_and_exact(h2c: bool, autojump_clock: trio.testing.MockClock) -> None:
    transport = MockTransport()
    transport.server.script(Stall(7.0, then=Respond(200, body=b"late")))
    async with trio_retry.Client(transport=transport, http2_prior_knowledge=h2c) as client:
        start = trio.current_time()
        response = await client.get("http://api.example/")
        assert trio.current_time() - start == 7.0
    assert response.content == b"late"


async def test_an_impossible_script_fails_the_client_block_loudly() -> None:
    transport = MockTransport()
    transport.server.script(RefuseStream())  # HTTP/2 only; this client speaks HTTP/1.1
    with pytest.RaisesGroup(
        pytest.RaisesExc(ScriptError, match="HTTP/2-only"), flatten_subgroups=True
    ):
        async with trio_retry.Client(transport=transport) as client:
            with trio.fail_after(5):
                await client.get("http://api.example/")
            await trio.sleep_forever()  # the server's failure cancels the block


@pytest.mark.parametrize("h2c", [False, True], ids=["h1", "h2c"])
async def test_big_bodies_flow_both_ways_within_the_buffers(h2c: bool) -> None:
    transport = MockTransport(buffer_size=16384)
    body = bytes(range(256)) * 4096  # 1 MiB
    transport.server.route("PUT", "/blob", lambda request: Respond(200, body=request.body[::-1]))
    async with trio_retry.Client(transport=transport, http2_prior_knowledge=h2c) as client:
        with trio.fail_after(30):
            response = await client.put("http://api.example/blob", content=body)
    assert response.content == body[::-1]
    assert transport.server.requests[0].body == body


async def test_many_streams_share_one_http2_connection() -> None:
    transport = MockTransport()
    transport.server.route("GET", "/n/{i}", lambda r: Respond(200, body=r.params["i"].encode()))
    results: dict[int, bytes] = {}
    async with trio_retry.Client(transport=transport, http2_prior_knowledge=True) as client:

        async def one(i: int) -> None:
            results[i] = (await client.get(f"http://api.example/n/{i}")).content

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                for i in range(50):
                    nursery.start_soon(one, i)
    assert results == {i: str(i).encode() for i in range(50)}
    assert transport.server.connections_accepted == 1
    assert {r.stream_id for r in transport.server.requests} == set(range(1, 101, 2))


async def test_a_client_that_stops_reading_holds_the_server_up() -> None:
    transport = MockTransport(FaultServer(write_timeout=0.5), buffer_size=65536)
    transport.server.script(EndlessBody(chunk=b"x" * 16384))
    ends: list[MemoryEnd] = []
    connect = transport.connect

    async def spy(target: ConnectTarget, **kwargs: Any) -> Transport:
        opened = await connect(target, **kwargs)
        assert isinstance(opened.stream, MemoryEnd)
        ends.append(opened.stream)
        return opened

    transport.connect = spy  # type: ignore[method-assign]
    with trio.fail_after(10):  # real time: bounded even if the server ran away
        async with trio_retry.Client(transport=transport) as client:
            async with client.stream("GET", "http://api.example/") as response:
                async for chunk in response.aiter_bytes():
                    assert chunk
                    break
                await trio.sleep(1.0)  # stop reading: the server blocks, then gives up
                # Buffered: at most the limit plus the one write that crossed it.
                assert len(ends[0]._in.buffer) <= 65536 + 16384 + 64
                assert ends[0].readable()


async def test_the_same_server_serves_loopback_and_memory(nursery: trio.Nursery) -> None:
    server = FaultServer()
    await nursery.start(server.serve)
    server.route("GET", "/who", lambda r: Respond(200, body=r.header("host").encode()))  # type: ignore[union-attr]
    async with (
        trio_retry.Client() as real,
        trio_retry.Client(transport=MockTransport(server)) as mock,
    ):
        assert (await real.get(server.url + "/who")).content == server.url[7:].encode()
        assert (await mock.get("http://mock.example/who")).content == b"mock.example"
    assert [r.connection_id for r in server.requests] == [1, 2]
