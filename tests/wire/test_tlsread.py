"""``_wire/tlsread.py``: reads that take the TLS records already received in one go.

Against trio's own ``SSLStream`` over a memory stream pair (no sockets needed for what is
tested: what is in the TLS object's buffer): the bytes come out the same and in the same order
as one ``receive_some`` per record gives, records are really joined (fewer reads), a record
not fully received is left for later, the peer's close_notify stays the next read's EOF, a
broken record stays an error (never an EOF), and a stream that is not TLS is read as it is.
"""

from __future__ import annotations

import ssl

import pytest
import trio
import trio.testing
import trustme

from trio_retry._wire.tlsread import MORE_AFTER, Reads, reads_of


def _contexts() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    return client_ctx, server_ctx


Pair = tuple[
    trio.SSLStream[
        trio.StapledStream[trio.testing.MemorySendStream, trio.testing.MemoryReceiveStream]
    ],
    trio.SSLStream[
        trio.StapledStream[trio.testing.MemorySendStream, trio.testing.MemoryReceiveStream]
    ],
]


async def _pair() -> Pair:
    client_ctx, server_ctx = _contexts()
    client_raw, server_raw = trio.testing.memory_stream_pair()
    # As transport.py opens it: https_compatible (an EOF without close_notify reads as an end).
    client = trio.SSLStream(
        client_raw, client_ctx, server_hostname="localhost", https_compatible=True
    )
    server = trio.SSLStream(server_raw, server_ctx, server_side=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.do_handshake)
        nursery.start_soon(server.do_handshake)
    return client, server


@pytest.mark.parametrize("joined", [True, False])
async def test_the_same_bytes_in_fewer_reads(joined: bool) -> None:
    client, server = await _pair()
    records = [bytes([n % 256]) * (MORE_AFTER + 1000 * n) for n in range(12)]
    data = b"".join(records)
    reads = 0
    received = bytearray()
    more = reads_of(client, 1 << 20)
    with trio.fail_after(10):
        for record in records:  # each send_all: at least one TLS record
            await server.send_all(record)  # all in the client's buffer before it reads
        while len(received) < len(data):
            chunk = await client.receive_some(65536)
            if joined:
                chunk = more(chunk)
            received += chunk
            reads += 1
    assert bytes(received) == data
    if joined:
        assert reads < len(records) // 2
    else:
        assert reads >= len(records)


async def test_limit_partial_record_and_close_notify_are_left_for_later() -> None:
    client, server = await _pair()
    await server.send_all(b"a" * MORE_AFTER)
    await server.send_all(b"b" * 10_000)
    await server.send_all(b"c" * 10_000)
    await server.aclose()  # close_notify after the data
    more = reads_of(client, MORE_AFTER + 12_000)
    # The limit holds: no more than 12,000 bytes besides the first record; the rest stays.
    first = more(await client.receive_some(MORE_AFTER))
    assert first == b"a" * MORE_AFTER + b"b" * 10_000 + b"c" * 2_000
    assert more(await client.receive_some(65536)) == b"c" * 8_000
    assert more(await client.receive_some(65536)) == b""  # the close_notify: a clean EOF


async def test_short_records_received_together_are_joined() -> None:
    """Small records one socket read brought in (32 HTTP/2 responses, each in a record of its
    own) come out in one read; a short one with nothing behind it is returned as it is."""
    client, server = await _pair()
    for n in range(32):
        await server.send_all(bytes([65 + n % 26]) * (50 + n))
    more = reads_of(client, 1 << 20)
    joined = more(await client.receive_some(65536))
    assert joined == b"".join(bytes([65 + n % 26]) * (50 + n) for n in range(32))
    await server.send_all(b"x" * 100)
    small = await client.receive_some(65536)
    assert more(small) is small  # nothing behind it: no look after


async def test_short_reads_and_plain_streams_are_left_alone() -> None:
    client, server = await _pair()
    await server.send_all(b"x" * 100)
    small = await client.receive_some(65536)
    assert reads_of(client, 1 << 20)(small) is small  # nothing behind it: no look after
    plain, _ = trio.testing.memory_stream_pair()
    big = b"z" * (MORE_AFTER * 2)
    assert reads_of(plain, 1 << 20)(big) is big  # not TLS: as it is


def test_trio_sslstream_still_has_its_tls_object() -> None:
    """The speed-up reads trio's ``_ssl_object``; if trio renames it the join silently stops
    (correct, only slower): this test says so instead."""
    client_ctx, _ = _contexts()
    raw, _ = trio.testing.memory_stream_pair()
    stream = trio.SSLStream(raw, client_ctx, server_hostname="localhost")
    assert isinstance(getattr(stream, "_ssl_object", None), ssl.SSLObject)


async def test_a_broken_record_after_good_ones_is_an_error_not_an_end() -> None:
    """A record that fails its integrity check, after records that were taken with the first:
    the bytes before it arrive, then the next read raises (trio's ``BrokenResourceError``,
    the ``ssl.SSLError`` as its cause), as reading a record at a time would have."""
    client, server = await _pair()
    server_out = server.transport_stream.send_stream
    client_in = client.transport_stream.receive_stream
    server_out.send_all_hook = None  # the test carries the bytes, and spoils one record
    await server.send_all(b"a" * MORE_AFTER)
    await server.send_all(b"b" * 10_000)
    good = server_out.get_data_nowait()
    await server.send_all(b"c" * 10_000)
    bad = bytearray(server_out.get_data_nowait())
    bad[-20] ^= 0xFF  # inside the record's ciphertext or tag
    client_in.put_data(good + bytes(bad))
    more = reads_of(client, 1 << 20)
    assert more(await client.receive_some(65536)) == b"a" * MORE_AFTER + b"b" * 10_000
    with pytest.raises(trio.BrokenResourceError) as raised:
        more(await client.receive_some(65536))  # the read itself says only "the end"
    assert isinstance(raised.value.__cause__, ssl.SSLError)


async def test_reads_of_takes_more_from_tls_streams_only() -> None:
    client, _server = await _pair()
    assert isinstance(getattr(reads_of(client, 1 << 20), "__self__", None), Reads)
    plain, _ = trio.testing.memory_stream_pair()
    assert not isinstance(getattr(reads_of(plain, 1 << 20), "__self__", None), Reads)
