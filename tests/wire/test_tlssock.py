"""``TLSSocketStream`` against ``trio.SSLStream``: the same bytes and the same errors.

Each scenario is played twice on real loopback sockets by the scripted server of
``tests/support/tls_peer.py``, once against each client stream (``trio.SSLStream(...,
https_compatible=True)`` over a ``RawSocketStream``, as before, and ``TLSSocketStream``), over
TLS 1.2 and TLS 1.3; what the client saw must be equal, and equal to what the scenario means.
What the stream adds on its own (its waits, cancellation, the write-progress reports) follows.
"""

from __future__ import annotations

import os
import socket
import ssl

import pytest
import trio

from tests.support.loopback import socket_pair
from tests.support.tls_peer import (
    KINDS,
    Certs,
    ClientStream,
    Peer,
    describe,
    outcome,
    read_all,
)
from trio_retry._wire.tlssock import PIECE, TLSSocketStream

VERSIONS = [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3]
PAYLOAD = os.urandom(200_000)


@pytest.fixture(scope="module")
def certs() -> Certs:
    return Certs()


async def both(
    certs: Certs,
    version: ssl.TLSVersion,
    server: object,
    client: object = read_all,
    **options: object,
) -> list[object]:
    """The outcome against each client kind; asserts they are equal and returns it."""
    seen = [
        await outcome(
            kind,
            certs.server_context(version),
            certs.client_context(),
            server,  # type: ignore[arg-type]
            client,  # type: ignore[arg-type]
            **options,  # type: ignore[arg-type]
        )
        for kind in KINDS
    ]
    assert seen[0] == seen[1], (
        f"trio.SSLStream: {seen[0]!r:.400}\nTLSSocketStream: {seen[1]!r:.400}"
    )
    return seen[1]


@pytest.mark.parametrize("version", VERSIONS, ids=["tls1.2", "tls1.3"])
@pytest.mark.parametrize("record", [1, 100, 5000, 16384])
async def test_the_same_bytes_in_records_of_any_size_then_close_notify(
    certs: Certs, version: ssl.TLSVersion, record: int
) -> None:
    async def server(peer: Peer) -> None:
        await peer.send(PAYLOAD[: 20_000 if record == 1 else None], record=record)
        await peer.close_notify()

    size = 20_000 if record == 1 else len(PAYLOAD)
    # close_notify is b"", and stays b"" (not an error) on the next read.
    assert await both(certs, version, server) == [PAYLOAD[:size], "end", ("again", b"")]


@pytest.mark.parametrize("version", VERSIONS, ids=["tls1.2", "tls1.3"])
@pytest.mark.parametrize("size", [100, 50_000], ids=["one-record", "many-records"])
async def test_close_notify_with_the_connection_left_open_is_b_empty_at_once(
    certs: Certs, version: ssl.TLSVersion, size: int
) -> None:
    """The peer says close_notify but keeps TCP open (it waits for our close): every read
    after it is ``b""`` at once, with nothing more arriving on the socket."""

    async def server(peer: Peer) -> None:
        await peer.send(PAYLOAD[:size], record=5000)
        await peer.close_notify()
        await peer.receive(1)  # until the client closes (both() bounds it at 20 s)

    assert await both(certs, version, server) == [PAYLOAD[:size], "end", ("again", b"")]


@pytest.mark.parametrize("version", VERSIONS, ids=["tls1.2", "tls1.3"])
async def test_records_split_at_every_byte(certs: Certs, version: ssl.TLSVersion) -> None:
    async def server(peer: Peer) -> None:
        await peer.send(PAYLOAD[:2000], record=700, split=True)
        await peer.close_notify()

    seen = await both(certs, version, server, split_handshake=True)
    assert seen == [PAYLOAD[:2000], "end", ("again", b"")]


@pytest.mark.parametrize("version", VERSIONS, ids=["tls1.2", "tls1.3"])
async def test_an_end_without_close_notify_is_an_end_then_broken(
    certs: Certs, version: ssl.TLSVersion
) -> None:
    async def server(peer: Peer) -> None:
        await peer.send(PAYLOAD[:50_000])
        await peer.stream.send_eof()

    # suppress_ragged_eofs: b"" (HTTP's framing tells a cut body), after which it is broken.
    seen = await both(certs, version, server)
    assert seen == [PAYLOAD[:50_000], "end", ("again", "BrokenResourceError", "-")]


@pytest.mark.parametrize("version", VERSIONS, ids=["tls1.2", "tls1.3"])
async def test_a_record_cut_in_the_middle_is_an_end_too(
    certs: Certs, version: ssl.TLSVersion
) -> None:
    async def server(peer: Peer) -> None:
        await peer.send(PAYLOAD[:1000])
        peer.tls.write(PAYLOAD[1000:3000])
        record = peer.outgoing.read()
        await peer.raw(record[: len(record) // 2])
        await peer.stream.send_eof()

    seen = await both(certs, version, server)
    assert seen == [PAYLOAD[:1000], "end", ("again", "BrokenResourceError", "-")]


@pytest.mark.parametrize("version", VERSIONS, ids=["tls1.2", "tls1.3"])
async def test_a_reset_is_an_error_not_an_end(certs: Certs, version: ssl.TLSVersion) -> None:
    async def server(peer: Peer) -> None:
        await peer.send(PAYLOAD[:10_000])
        await peer.receive(2)  # the client read it all: the reset loses nothing unread
        peer.reset()

    async def client(stream: ClientStream) -> list[object]:
        data = b""
        while len(data) < 10_000:
            data += await stream.receive_some()
        await stream.send_all(b"ok")
        return [data, *(await read_all(stream))[1:]]

    seen = await both(certs, version, server, client)
    # (Then the socket reads as ended, and so does the stream, as trio.SSLStream's does.)
    assert seen == [
        PAYLOAD[:10_000],
        ("error", "BrokenResourceError", "ConnectionResetError"),
        ("again", b""),
    ]


@pytest.mark.parametrize("version", VERSIONS, ids=["tls1.2", "tls1.3"])
async def test_bytes_that_are_no_record_are_a_tls_error(
    certs: Certs, version: ssl.TLSVersion
) -> None:
    async def server(peer: Peer) -> None:
        await peer.send(b"fine")
        await peer.raw(b"\x17\x03\x03\x00\x20" + b"\x00" * 32)  # a forged application record

    seen = await both(certs, version, server)
    assert seen == [b"fine", ("error", "BrokenResourceError", "SSLError"), seen[-1]]
    assert seen[-1] == ("again", "BrokenResourceError", "-")


@pytest.mark.parametrize("version", VERSIONS, ids=["tls1.2", "tls1.3"])
async def test_the_same_bytes_both_ways_at_once(certs: Certs, version: ssl.TLSVersion) -> None:
    """A writer task and a reader task on one stream (HTTP/2's shape): an echo of 200 KB."""

    async def server(peer: Peer) -> None:
        echoed = 0
        for _ in range(10_000):  # bounded
            if echoed >= len(PAYLOAD):
                break
            data = await peer.receive(min(8192, len(PAYLOAD) - echoed))
            if not data:
                break
            await peer.send(data)
            echoed += len(data)
        await peer.close_notify()

    async def client(stream: ClientStream) -> list[object]:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream.send_all, PAYLOAD)
            return await read_all(stream)

    assert await both(certs, version, server, client) == [PAYLOAD, "end", ("again", b"")]


@pytest.mark.parametrize("version", VERSIONS, ids=["tls1.2", "tls1.3"])
async def test_sending_after_the_peer_closed(certs: Certs, version: ssl.TLSVersion) -> None:
    async def server(peer: Peer) -> None:
        await peer.close_notify()
        await peer.receive(5)

    async def client(stream: ClientStream) -> list[object]:
        seen: list[object] = [await stream.receive_some()]
        try:
            await stream.send_all(b"after")
            seen.append("sent")
        except trio.BrokenResourceError as exc:
            seen.append(describe(exc))
        return seen

    assert (await both(certs, version, server, client))[0] == b""


# --- what the stream adds on its own -----------------------------------------------------------


async def _pair(certs: Certs, buffer: int | None = None) -> tuple[TLSSocketStream, trio.SSLStream]:
    client_raw, server_raw = await socket_pair(buffer)
    client = TLSSocketStream(client_raw, certs.client_context(), "localhost")
    server = trio.SSLStream(server_raw, certs.server_context(), server_side=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.do_handshake)
        await client.do_handshake()
    return client, server


async def test_a_cancelled_receive_leaves_the_stream_usable(certs: Certs) -> None:
    client, server = await _pair(certs)
    with trio.fail_after(10):
        with trio.move_on_after(0.05):
            await client.receive_some()  # nothing comes: cancelled while it waits
        await server.send_all(b"later")
        assert await client.receive_some() == b"later"
        await client.send_all(b"still")
        assert await server.receive_some() == b"still"
    await client.aclose()
    await server.aclose()


async def test_a_cancelled_send_breaks_the_stream(certs: Certs) -> None:
    """A send that waits for room and is cancelled may have left part of a record in
    OpenSSL: no later write may follow (as trio.SSLStream's)."""
    client, server = await _pair(certs, buffer=16 * 1024)
    with trio.fail_after(10):
        with trio.move_on_after(0.2):
            await client.send_all(PAYLOAD * 5)  # the server reads nothing: it waits
        with pytest.raises(trio.BrokenResourceError):
            await client.send_all(b"more")
    await client.aclose()
    await server.aclose()


@pytest.mark.skipif(not hasattr(socket, "TCP_CORK"), reason="TCP_CORK is Linux's")
async def test_a_write_of_many_records_corks_the_socket_only_while_it_runs(
    certs: Certs,
) -> None:
    """The records of one ``send_all`` leave in full segments (``TCP_CORK``), and the cork
    is off once it returns, whether it finished or was cancelled (tests/client/
    test_tls_segments.py counts the segments)."""
    client, server = await _pair(certs, buffer=16 * 1024)
    raw = client.transport_stream.raw_socket

    def corked() -> int:
        return raw.getsockopt(socket.IPPROTO_TCP, socket.TCP_CORK)

    seen: list[int] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:

            async def read_later() -> None:
                await trio.sleep(0.05)  # the send waits for room meanwhile
                seen.append(corked())
                got = 0
                while got < len(PAYLOAD):  # bounded by the fail_after
                    got += len(await server.receive_some())

            nursery.start_soon(read_later)
            await client.send_all(PAYLOAD)
        seen.append(corked())
        await client.send_all(b"small")  # one record: never corked
        assert await server.receive_some() == b"small"
        with trio.move_on_after(0.1):
            await client.send_all(PAYLOAD * 5)  # nobody reads: cancelled while corked
        seen.append(corked())
    assert seen == [1, 0, 0]
    await client.aclose()
    await server.aclose()


async def test_a_read_that_finds_nothing_after_one_that_found_bytes_waits(certs: Certs) -> None:
    """A read after one that found bytes at once tries OpenSSL first (no ``poll``); when
    nothing came, it waits, and a cancellation there consumed nothing."""
    client, server = await _pair(certs)
    with trio.fail_after(10):
        await server.send_all(b"first")
        await trio.sleep(0.05)  # (received before the read)
        assert await client.receive_some() == b"first"
        with trio.move_on_after(0.05) as waited:
            await client.receive_some()  # nothing comes: cancelled while it waits
        assert waited.cancelled_caught
        await server.send_all(b"second")
        assert await client.receive_some() == b"second"
        await client.send_all(b"still")
        assert await server.receive_some() == b"still"
    await client.aclose()
    await server.aclose()


async def test_a_read_after_a_send_asks_the_socket_before_reading(certs: Certs) -> None:
    """After a send, the next read asks the socket first (``poll``) even when the read before
    found bytes at once: the answer to what was just sent is, as a rule, not there yet, and a
    read that finds nothing costs an ``SSLWantReadError`` (about five times a ``poll``)."""
    client, server = await _pair(certs)
    attempts: list[str] = []
    decrypt = client._decrypt

    def recorded(size: int) -> bytes:
        try:
            data = decrypt(size)
        except ssl.SSLWantReadError:
            attempts.append("nothing")
            raise
        attempts.append("bytes")
        return data

    client._decrypt = recorded
    with trio.fail_after(10):
        await server.send_all(b"first")
        await trio.sleep(0.05)  # (received before the read: it finds bytes at once)
        assert await client.receive_some() == b"first"
        async with trio.open_nursery() as nursery:

            async def answer() -> None:
                assert await server.receive_some() == b"request"
                await trio.sleep(0.05)
                await server.send_all(b"answer")

            nursery.start_soon(answer)
            await client.send_all(b"request")
            assert await client.receive_some() == b"answer"
    assert attempts == ["bytes", "bytes"]
    await client.aclose()
    await server.aclose()


@pytest.mark.parametrize("alpn", [None, "http/1.1", "h2"])
async def test_short_records_already_received_are_joined_over_http2_only(
    certs: Certs, alpn: str | None
) -> None:
    """Over HTTP/2 a read takes every record already received (each stream's response
    comes in records of its own); otherwise a short record ends a read, as a response sent
    at once ends there (and a full one is followed: see the same-bytes tests)."""

    async def server(peer: Peer) -> None:
        await peer.send(b"r" * 300, record=100)  # three records, one send
        await trio.sleep(1)

    async def client(stream: ClientStream) -> list[object]:
        sizes: list[object] = []
        got = 0
        while got < 300:  # bounded by the fail_after
            got += len(chunk := await stream.receive_some())
            sizes.append(len(chunk))
        return sizes

    protocols = None if alpn is None else [alpn]
    seen = await outcome(
        "socket",
        certs.server_context(alpn=protocols),
        certs.client_context(alpn=protocols),
        server,
        client,
    )
    assert seen == ([300] if alpn == "h2" else [100, 100, 100])


async def test_a_socket_closed_under_a_wait_is_closed(certs: Certs) -> None:
    client, server = await _pair(certs)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:

            async def close_soon() -> None:
                await trio.sleep(0.05)
                client.transport_stream.socket.close()  # as a connection closes it

            nursery.start_soon(close_soon)
            with pytest.raises(trio.ClosedResourceError):
                await client.receive_some()
        with pytest.raises(trio.ClosedResourceError):
            await client.send_all(b"x")
    await server.aclose()


async def test_two_receivers_at_once_are_refused(certs: Certs) -> None:
    client, server = await _pair(certs)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.receive_some)
            await trio.sleep(0.05)
            with pytest.raises(trio.BusyResourceError):
                await client.receive_some()
            await server.send_all(b"x")
    await client.aclose()
    await server.aclose()


async def test_a_send_that_waits_reports_progress_through_the_socket_stream(
    certs: Certs,
) -> None:
    """``RawSocketStream.on_progress`` (the write bounds' renewals) hears of a TLS write
    that waits for a slow reader, a piece at a time; a write that does not wait, never."""
    client, server = await _pair(certs, buffer=16 * 1024)
    reports: list[float] = []
    client.transport_stream.on_progress = lambda: reports.append(trio.current_time())
    with trio.fail_after(20):
        await client.send_all(b"small")
        assert await server.receive_some() == b"small"
        assert reports == []
        size = 40 * PIECE
        got = 0
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.send_all, (PAYLOAD * 4)[:size])
            for _ in range(10_000):  # bounded
                if got >= size:
                    break
                got += len(await server.receive_some(4096))
                await trio.sleep(0.001)
    assert got == size
    assert 4 <= len(reports) < 40  # after each piece once it had to wait, never the last
    await client.aclose()
    await server.aclose()


async def test_aclose_sends_no_close_notify(certs: Certs) -> None:
    client, server = await _pair(certs)
    await client.aclose()
    with trio.fail_after(10):
        # https_compatible's close: the server sees a TCP end, not a close_notify.
        with pytest.raises(trio.BrokenResourceError):
            await server.receive_some()
    with pytest.raises(trio.ClosedResourceError):
        await client.receive_some()
    await server.aclose()


async def test_two_of_its_tasks_waiting_one_way_share_the_wait(certs: Certs) -> None:
    """A read that must write (a renegotiation, a KeyUpdate's answer) while the writer waits
    for room, or a write that must read while the reader waits: Trio allows one waiter per
    direction and socket, so the second waits for the first's wake-up, then tries again."""
    client, server = await _pair(certs)
    woke: list[str] = []

    async def wait(name: str) -> None:
        await client._wait(ssl.SSLWantReadError)
        woke.append(name)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait, "first")
            await trio.sleep(0.05)
            nursery.start_soon(wait, "second")  # would be trio.BusyResourceError
            await trio.sleep(0.05)
            assert woke == []
            await server.send_all(b"x")  # readable: both wake
    assert sorted(woke) == ["first", "second"]
    assert await client.receive_some() == b"x"
    await client.aclose()
    await server.aclose()
