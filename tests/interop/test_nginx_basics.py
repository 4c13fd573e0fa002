"""nginx as the peer: the helper itself, HPACK blocks kept, an early 413, a dead upstream, one
stream at a time."""

from __future__ import annotations

from typing import Any
from unittest import mock

import hpack
import pytest
import trio

import trio_retry
from tests.conftest import FAST
from tests.support.fixtures import StartNginx
from tests.support.nginx import RunningNginx


def _client(server: RunningNginx, **options: Any) -> trio_retry.Client:
    return trio_retry.Client(http2=True, ssl_context=server.ssl_context(), retry=FAST, **options)


async def test_every_listener_answers_and_is_logged(nginx: StartNginx) -> None:
    server = nginx()
    async with _client(server) as client:
        h1 = await client.get(server.h1_url("/get"), headers={"x-request-id": "h1"})
        h2 = await client.get(server.h2_url("/get"), headers={"x-request-id": "h2"})
        post = await client.post(
            server.h2_url("/post"), content=b"x" * 100_000, headers={"x-request-id": "p"}
        )
    assert (h1.http_version, h2.http_version) == ("HTTP/1.1", "HTTP/2")
    assert post.content == b"posted"
    log = server.log(expect=3)
    assert log.by_request_id() == {"h1": 1, "h2": 1, "p": 1}
    (posted,) = [entry for entry in log.entries if entry.request_id == "p"]
    assert posted.protocol == "HTTP/2.0"
    assert posted.request_length >= 100_000  # nginx read the whole body


async def test_repeated_requests_are_not_hpack_coded_again(nginx: StartNginx) -> None:
    """30 GETs on one HTTP/2 connection, the 16th with another header value: hpack codes a
    request again only after the table changed, and a response only when nginx's bytes
    change (its first block, and each new ``date``); every call is answered and executed once
    (``_wire/http2/hpack_memo.py``)."""
    server = nginx()
    coded = {"encode": 0, "decode": 0}
    encode, decode = hpack.Encoder.encode, hpack.Decoder.decode

    def counted_encode(self: hpack.Encoder, headers: Any, huffman: bool = True) -> bytes:
        coded["encode"] += 1
        return encode(self, headers, huffman)

    def counted_decode(self: hpack.Decoder, data: bytes, raw: bool = False) -> Any:
        coded["decode"] += 1
        return decode(self, data, raw)

    with (
        mock.patch.object(hpack.Encoder, "encode", counted_encode),
        mock.patch.object(hpack.Decoder, "decode", counted_decode),
    ):
        async with _client(server) as client:
            start = trio.current_time()
            for i in range(30):
                rid = "other" if i == 15 else "same"
                response = await client.get(server.h2_url("/get"), headers={"x-request-id": rid})
                assert (response.http_version, response.content) == ("HTTP/2", b"ok")
            seconds = trio.current_time() - start
    log = server.log(expect=30)
    assert log.by_request_id() == {"same": 29, "other": 1}
    assert len(log.connections()) == 1
    # Requests: the first (indexing), the second (indexed: kept), "other" and the one after.
    assert coded["encode"] == 4
    # Responses: the first (a table size update), the second, then one per date change.
    assert coded["decode"] <= 3 + int(seconds)


async def test_h2c_prior_knowledge(nginx: StartNginx) -> None:
    server = nginx()
    assert server.h2c, f"nginx {server.version} has no cleartext http2 listen"
    async with trio_retry.Client(http2_prior_knowledge=True, retry=FAST) as client:
        response = await client.get(server.h2c_url("/get"))
    assert (response.status, response.http_version) == (200, "HTTP/2")


async def test_early_413_during_a_large_upload(nginx: StartNginx) -> None:
    """nginx answers 413 from the declared length, before it reads the 4 MB body: the client
    gets the 413 (not a broken connection, not an ambiguous error), on both protocols, and the
    connection's next request works."""
    server = nginx(upload_max_body_size="64k")
    body = b"u" * (4 * 1024 * 1024)
    async with _client(server) as client:
        for url in (server.h2_url, server.h1_url):
            with trio.fail_after(20):
                response = await client.post(url("/upload"), content=body)
            assert response.status == 413
            assert len(response.attempts) == 1
            after = await client.get(url("/get"))
            assert after.status == 200


async def test_dead_upstream_behind_proxy_pass_is_a_502(nginx: StartNginx) -> None:
    """A 502 is a response (RESPONSE_RECEIVED): a GET is retried until attempts run out; a POST
    is not retried and, since a gateway's 502 may hide an upstream that ran it, is reported
    ambiguous with the 502 attached (SPEC §7). nginx's log shows each attempt it made."""
    server = nginx()
    async with _client(server) as client:
        get = await client.get(server.h2_url("/proxy"), headers={"x-request-id": "g"})
        with pytest.raises(trio_retry.HttpAmbiguousExecutionError) as info:
            await client.post(server.h2_url("/proxy"), content=b"p", headers={"x-request-id": "p"})
    assert get.status == 502
    assert [a.evidence for a in get.attempts] == [trio_retry.Evidence.RESPONSE_RECEIVED] * 3
    assert info.value.response is not None
    assert info.value.response.status == 502
    assert len(info.value.attempts) == 1
    # nginx is a gateway here, yet nothing in its 502 proves it: the message says either.
    assert "status 502, sent by the server or by a gateway" in str(info.value)
    log = server.log(expect=4)
    assert log.by_request_id() == {"g": 3, "p": 1}
    assert {entry.status for entry in log.entries} == {502}


async def test_max_concurrent_streams_1(nginx: StartNginx) -> None:
    """nginx allows one stream per connection: 20 concurrent calls either queue for the stream
    or open connections of their own; none fails, each is executed once."""
    server = nginx(http2_max_concurrent_streams=1)
    results: dict[int, int] = {}
    async with _client(server, max_connections_per_origin=4) as client:

        async def call(i: int) -> None:
            method = "POST" if i % 2 else "GET"
            url = server.h2_url("/post" if i % 2 else "/get")
            response = await client.request(
                method,
                url,
                content=b"b" * 1000 if i % 2 else None,
                headers={"x-request-id": f"r{i}"},
            )
            results[i] = response.status

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                for i in range(20):
                    nursery.start_soon(call, i)
    assert results == dict.fromkeys(range(20), 200)
    log = server.log(expect=20)
    assert log.by_request_id() == {f"r{i}": 1 for i in range(20)}
    assert len(log.connections()) <= 4
