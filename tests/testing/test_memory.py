"""The in-memory connection under MockTransport ends the way a TCP connection ends."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from trio_retry.testing._memory import memory_connection


async def test_bytes_flow_both_ways_and_a_fin_reads_as_end_of_stream() -> None:
    a, b = memory_connection()
    assert not b.readable()
    await a.send_all(b"hello")
    assert b.readable()
    assert await b.receive_some(3) == b"hel"
    assert await b.receive_some() == b"lo"
    await b.send_all(b"back")
    assert await a.receive_some() == b"back"
    await a.send_eof()
    assert b.readable()
    assert await b.receive_some() == b""
    await b.send_all(b"half-closed still sends")  # a FIN closes one direction only
    assert await a.receive_some() == b"half-closed still sends"
    with pytest.raises(trio.ClosedResourceError):
        await a.send_all(b"after eof")


async def test_a_reset_is_read_after_the_bytes_sent_before_it() -> None:
    a, b = memory_connection()
    await a.send_all(b"partial")
    a.reset()
    assert await b.receive_some() == b"partial"
    with pytest.raises(trio.BrokenResourceError) as info:
        await b.receive_some()
    assert isinstance(info.value.__cause__, ConnectionResetError)
    with pytest.raises(trio.BrokenResourceError):
        await b.send_all(b"x")
    with pytest.raises(trio.ClosedResourceError):
        await a.receive_some()


async def test_close_with_unread_bytes_resets_and_without_them_sends_a_fin() -> None:
    a, b = memory_connection()
    await b.send_all(b"never read")
    a.close()
    with pytest.raises(trio.BrokenResourceError):
        await b.receive_some()
    c, d = memory_connection()
    await c.aclose()
    assert await d.receive_some() == b""


async def test_a_write_to_a_closed_peer_is_lost_and_answered_with_a_reset() -> None:
    a, b = memory_connection()
    b.close()
    assert await a.receive_some() == b""  # the FIN
    await a.send_all(b"into the void")  # accepted once, as by TCP
    with pytest.raises(trio.BrokenResourceError):
        await a.send_all(b"again")


async def test_a_writer_waits_for_a_reader_beyond_the_buffer_limit() -> None:
    a, b = memory_connection(limit=10)
    done = trio.Event()

    async def write() -> None:
        await a.send_all(b"x" * 25)
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(write)
        await trio.testing.wait_all_tasks_blocked()
        assert not done.is_set()
        assert await b.receive_some(20) == b"x" * 20
        await done.wait()
    assert await b.receive_some() == b"x" * 5


async def test_a_blocked_reader_is_woken_by_a_local_close() -> None:
    a, _ = memory_connection()
    with pytest.RaisesGroup(trio.ClosedResourceError):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(a.receive_some)
            await trio.testing.wait_all_tasks_blocked()
            a.close()
    assert a.readable()


async def test_concurrent_use_is_refused() -> None:
    a, _ = memory_connection()
    with pytest.RaisesGroup(trio.BusyResourceError):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(a.receive_some)
            await trio.testing.wait_all_tasks_blocked()
            await a.receive_some()


async def _pair() -> tuple[trio.abc.HalfCloseableStream, trio.abc.HalfCloseableStream]:
    return memory_connection()


async def test_trio_stream_conformance() -> None:
    # No "clogged" variant: a writer here waits only for a full buffer, never for a reader.
    await trio.testing.check_half_closeable_stream(_pair, None)
