"""HTTP/2 end to end: multiplexing, flow control, and per-stream evidence against the FaultServer.

Every test runs twice: h2c with prior knowledge, and TLS with ALPN ``h2`` (the server's trustme
CA). Every wait is bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from functools import partial

import pytest
import trio

import trio_retry
from tests.conftest import FAST, client_for
from trio_retry import (
    ConnectionBroken,
    Evidence,
    FailureCategory,
    HttpAmbiguousExecutionError,
    ProtocolFailed,
    Stage,
)
from trio_retry.testing import (
    CloseAfterBody,
    FaultServer,
    GoAway,
    PartialBody,
    RefuseStream,
    Respond,
)

MiB = 1024 * 1024
LIMIT = 10  # seconds: the bound of every test's network activity

MakeClient = Callable[..., trio_retry.Client]


@pytest.fixture(params=["h2c", "tls"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def h2_server(nursery: trio.Nursery, mode: str) -> FaultServer:
    server = FaultServer(tls=mode == "tls")
    await nursery.start(server.serve)
    return server


def reader_tasks() -> list[trio.lowlevel.Task]:
    """Every HTTP/2 reader task currently alive in this trio run."""
    found: list[trio.lowlevel.Task] = []

    def walk(task: trio.lowlevel.Task) -> None:
        if "_read_loop" in task.name:
            found.append(task)
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                walk(child)

    walk(trio.lowlevel.current_root_task())
    return found


async def test_fifty_concurrent_gets_share_one_connection(h2_server: FaultServer) -> None:
    responses: dict[int, trio_retry.Response] = {}

    async with client_for(h2_server) as client:

        async def get(i: int) -> None:
            responses[i] = await client.get(f"{h2_server.url}/item/{i}")

        with trio.fail_after(LIMIT):
            async with trio.open_nursery() as nursery:
                for i in range(50):
                    nursery.start_soon(get, i)

    assert h2_server.connections_accepted == 1
    assert len(responses) == 50
    for response in responses.values():
        assert (response.status, response.content, response.http_version) == (
            200,
            b"ok",
            "HTTP/2",
        )
        assert len(response.attempts) == 1
        attempt = response.attempts[0]
        assert (attempt.stage, attempt.evidence, attempt.http_version) == (
            Stage.COMPLETE,
            Evidence.RESPONSE_RECEIVED,
            "HTTP/2",
        )
        assert "first_byte" in attempt.timings
    assert {r.stream_id for r in h2_server.requests} == set(range(1, 100, 2))


async def test_one_mebibyte_upload_and_download(h2_server: FaultServer) -> None:
    payload = bytes(range(256)) * (MiB // 256)
    h2_server.route("GET", "/download", *[Respond(200, body=payload)] * 3)

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(payload), 100_000):
            yield payload[start : start + 100_000]

    async with client_for(h2_server) as client:
        with trio.fail_after(LIMIT):
            upload = await client.post(h2_server.url + "/upload", content=payload)
            streamed = await client.put(h2_server.url + "/upload", content=chunks())
            download = await client.get(h2_server.url + "/download")
            async with client.stream("GET", h2_server.url + "/download") as response:
                received = b"".join([chunk async for chunk in response.aiter_bytes()])
            again = await client.get(h2_server.url + "/download")

    assert upload.status == streamed.status == 200
    assert [r.body == payload for r in h2_server.requests if r.method != "GET"] == [True, True]
    assert upload.attempts[0].bytes_sent > MiB
    assert download.content == received == again.content == payload
    assert download.attempts[0].bytes_received == MiB
    assert h2_server.connections_accepted == 1


async def test_refused_stream_on_a_post_is_retried_and_executed_once(
    h2_server: FaultServer,
) -> None:
    h2_server.route("POST", "/pay", RefuseStream())
    async with client_for(h2_server) as client:
        with trio.fail_after(LIMIT):
            response = await client.post(h2_server.url + "/pay", content=b"x" * 100_000)

    assert response.status == 200
    first, second = response.attempts
    assert (first.evidence, first.category) == (Evidence.NOT_SENT, FailureCategory.REFUSED_STREAM)
    assert first.stage >= Stage.REQUEST_HEAD  # bytes left, and still provably not processed
    assert (second.evidence, second.connection_reused) == (Evidence.RESPONSE_RECEIVED, True)
    assert h2_server.executed_count("POST", "/pay") == 1
    assert len(h2_server.requests) == 2
    assert h2_server.connections_accepted == 1  # a refused stream leaves the connection usable


async def test_goaway_in_flight_finishes_streams_below_and_retries_streams_above(
    h2_server: FaultServer,
) -> None:
    # Stream 1 answers slowly; stream 3 triggers GOAWAY(last_stream_id=3) and is answered too;
    # streams 5, 7, 9 are above the last id: never processed, so retried even though POST.
    h2_server.script(
        Respond(200, body=b"below", delay=0.2),
        GoAway(then=Respond(200, body=b"below", delay=0.2)),
    )
    h2_server.default = Respond(200, body=b"retried")
    responses: dict[int, trio_retry.Response] = {}

    async with client_for(h2_server) as client:

        async def post(i: int) -> None:
            responses[i] = await client.post(f"{h2_server.url}/op/{i}", content=b"payload")

        with trio.fail_after(LIMIT):
            async with trio.open_nursery() as nursery:
                for i in range(5):
                    nursery.start_soon(post, i)

    below = [r for r in responses.values() if r.content == b"below"]
    retried = [r for r in responses.values() if r.content == b"retried"]
    assert (len(below), len(retried)) == (2, 3)
    assert all(len(r.attempts) == 1 for r in below)
    for response in retried:
        first, second = response.attempts
        assert (first.evidence, first.category) == (Evidence.NOT_SENT, FailureCategory.GOAWAY)
        assert second.evidence is Evidence.RESPONSE_RECEIVED
    for i in range(5):
        assert h2_server.executed_count("POST", f"/op/{i}") == 1
    executed = [r for r in h2_server.requests if r.executed]
    assert sorted(r.connection_id for r in executed) == [1, 1, 2, 2, 2]
    assert h2_server.connections_accepted == 2


async def test_cancelling_one_stream_leaves_the_connection_and_other_streams_healthy(
    nursery: trio.Nursery, mode: str
) -> None:
    # max_concurrent_streams=2 also proves the RST_STREAM(CANCEL) reached the server: had it
    # not, the server would still count the cancelled stream and reject the later ones.
    server = FaultServer(tls=mode == "tls", max_concurrent_streams=2)
    await nursery.start(server.serve)
    server.route("GET", "/victim", Respond(200, delay=30))
    server.route("GET", "/slow-deadline", Respond(200, delay=30))
    server.default = Respond(200, body=b"fine", delay=0.1)

    async with client_for(server, max_connections_per_origin=1) as client:
        with trio.fail_after(LIMIT):
            others: list[trio_retry.Response] = []
            async with trio.open_nursery() as inner:
                victim_scope = trio.CancelScope()

                async def victim() -> None:
                    with victim_scope:
                        await client.get(server.url + "/victim")
                    assert victim_scope.cancelled_caught

                async def other() -> None:
                    others.append(await client.get(server.url + "/other"))

                inner.start_soon(victim)
                # The victim's stream must be open on the connection (not still connecting,
                # which a loaded machine can stretch past any fixed sleep) before it is cut.
                while not any(r.path == "/victim" for r in server.requests):
                    await trio.sleep(0.005)  # bounded by fail_after(LIMIT)
                inner.start_soon(other)
                await trio.sleep(0.04)
                victim_scope.cancel()

            # The call deadline cancels a stream the same way.
            with pytest.raises(trio_retry.DeadlineExceeded) as info:
                await client.get(server.url + "/slow-deadline", deadline=0.1)
            assert info.value.attempts[-1].evidence is Evidence.SENT_NO_RESPONSE

            after = [await client.get(server.url + "/after") for _ in range(3)]

    assert [r.content for r in (*others, *after)] == [b"fine"] * 4
    assert all(r.attempts[-1].connection_reused for r in after)
    assert server.connections_accepted == 1


async def test_max_concurrent_streams_of_one_is_honoured(nursery: trio.Nursery, mode: str) -> None:
    server = FaultServer(tls=mode == "tls", max_concurrent_streams=1)
    await nursery.start(server.serve)
    server.default = Respond(200, body=b"one at a time", delay=0.03)
    responses: list[trio_retry.Response] = []

    async with client_for(server, max_connections_per_origin=1) as client:

        async def get(i: int) -> None:
            responses.append(await client.get(f"{server.url}/{i}"))

        with trio.fail_after(LIMIT):
            async with trio.open_nursery() as inner:
                for i in range(8):
                    inner.start_soon(get, i)

    assert [len(r.attempts) for r in responses] == [1] * 8
    assert all(r.content == b"one at a time" for r in responses)
    assert server.connections_accepted == 1
    # One stream at a time: each request arrived after the previous one's delayed answer.
    times = sorted(r.time for r in server.requests)
    assert all(later - earlier >= 0.025 for earlier, later in itertools.pairwise(times))


async def test_partial_body_on_a_get_is_retried_with_partial_response(
    h2_server: FaultServer,
) -> None:
    h2_server.script(PartialBody(declared_length=5000, body=b"x" * 1000))
    async with client_for(h2_server) as client:
        with trio.fail_after(LIMIT):
            response = await client.get(h2_server.url + "/doc")

    assert response.status == 200
    first = response.attempts[0]
    assert (first.stage, first.evidence, first.category) == (
        Stage.RESPONSE_BODY,
        Evidence.PARTIAL_RESPONSE,
        FailureCategory.CONNECTION_BROKEN,
    )
    assert first.bytes_received == 1000
    assert h2_server.connections_accepted == 1  # only the stream was reset


async def test_partial_body_on_a_post_is_connection_broken_and_not_retried(
    h2_server: FaultServer,
) -> None:
    h2_server.script(PartialBody())
    async with client_for(h2_server) as client:
        with trio.fail_after(LIMIT), pytest.raises(ConnectionBroken) as info:
            await client.post(h2_server.url + "/pay", content=b"x")

    assert info.value.evidence is Evidence.PARTIAL_RESPONSE
    assert info.value.category is FailureCategory.CONNECTION_BROKEN
    assert len(info.value.attempts) == 1
    assert h2_server.executed_count("POST") == 1


async def test_tcp_reset_mid_body_on_a_get_is_retried_on_a_new_connection(
    h2_server: FaultServer,
) -> None:
    h2_server.script(PartialBody(reset=True))
    async with client_for(h2_server) as client:
        with trio.fail_after(LIMIT):
            response = await client.get(h2_server.url + "/doc")

    assert response.status == 200
    assert response.attempts[0].evidence is Evidence.PARTIAL_RESPONSE
    assert response.attempts[1].connection_reused is False
    assert h2_server.connections_accepted == 2


async def test_close_after_body_on_a_post_is_ambiguous_and_executed_once(
    h2_server: FaultServer,
) -> None:
    h2_server.script(CloseAfterBody())
    async with client_for(h2_server) as client:
        with trio.fail_after(LIMIT), pytest.raises(HttpAmbiguousExecutionError) as info:
            await client.post(h2_server.url + "/pay", content=b"x")

    assert info.value.evidence is Evidence.SENT_NO_RESPONSE
    assert info.value.category is FailureCategory.CONNECTION_BROKEN
    assert len(info.value.attempts) == 1
    assert h2_server.executed_count("POST") == 1


async def test_an_idle_connection_the_server_closed_is_not_reused(h2_server: FaultServer) -> None:
    # close_after on HTTP/2: GOAWAY(NO_ERROR) after the response, then the server closes.
    h2_server.script(Respond(200, body=b"bye", close_after=True))
    async with client_for(h2_server) as client:
        with trio.fail_after(LIMIT):
            await client.get(h2_server.url + "/a")
            await trio.sleep(0.05)
            response = await client.get(h2_server.url + "/b")

    assert len(response.attempts) == 1
    assert response.attempts[0].connection_reused is False
    assert h2_server.connections_accepted == 2


async def test_oversized_response_head_is_a_protocol_failure(h2_server: FaultServer) -> None:
    h2_server.default = Respond(200, headers=[("x-big", "a" * 4000)])
    async with client_for(h2_server, max_header_bytes=1024) as client:
        with trio.fail_after(LIMIT), pytest.raises(ProtocolFailed) as info:
            await client.get(h2_server.url + "/big")

    assert info.value.category is FailureCategory.REMOTE_PROTOCOL
    assert "max_header_bytes" in str(info.value)


async def test_leaving_the_client_leaves_no_reader_task(h2_server: FaultServer) -> None:
    h2_server.route("GET", "/slow", Respond(200, delay=30))
    failures: list[BaseException] = []

    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as outer:
            async with client_for(h2_server) as client:
                assert (await client.get(h2_server.url + "/")).http_version == "HTTP/2"
                assert len(reader_tasks()) == 1

                async def in_flight() -> None:
                    try:
                        await client.get(h2_server.url + "/slow")
                    except trio_retry.TrioRetryError as exc:
                        failures.append(exc)

                outer.start_soon(in_flight)
                await trio.sleep(0.05)
            assert reader_tasks() == []

    assert reader_tasks() == []
    # The call in flight ended promptly, with the evidence of its stage (a GET: not ambiguous).
    assert len(failures) == 1
    assert isinstance(failures[0], trio_retry.RequestFailed)
    assert failures[0].evidence is Evidence.SENT_NO_RESPONSE


async def test_http2_false_speaks_http11_over_tls(nursery: trio.Nursery) -> None:
    server = FaultServer(tls=True)
    await nursery.start(server.serve)
    context = server.client_ssl_context(http2=False)
    async with trio_retry.Client(ssl_context=context, http2=False) as client:
        with trio.fail_after(LIMIT):
            response = await client.get(server.url + "/")
    assert response.http_version == "HTTP/1.1"


async def test_an_idle_http2_connection_expires_after_keepalive_expiry(
    h2_server: FaultServer,
) -> None:
    async with client_for(h2_server, keepalive_expiry=0.05) as client:
        with trio.fail_after(LIMIT):
            await client.get(h2_server.url + "/a")
            reused = await client.get(h2_server.url + "/b")
            await trio.sleep(0.1)
            fresh = await client.get(h2_server.url + "/c")
            # An HTTP/2 connection with no stream open is idle: the pool may close it for room.
            assert "0 active, 1 idle, 0 waiting" in repr(client)

    assert reused.attempts[0].connection_reused is True
    assert fresh.attempts[0].connection_reused is False
    assert h2_server.connections_accepted == 2


async def test_prior_knowledge_against_an_http11_only_server_is_not_sent(
    nursery: trio.Nursery,
) -> None:
    server = FaultServer(http2=False)
    await nursery.start(server.serve)
    async with trio_retry.Client(http2_prior_knowledge=True, retry=FAST) as client:
        with trio.fail_after(LIMIT), pytest.raises(trio_retry.RequestFailed) as info:
            await client.post(server.url + "/pay", content=b"x")

    # The server answers the preface with a 400 or just closes: either way nothing was sent.
    assert info.value.evidence is Evidence.NOT_SENT
    assert "h2c" in str(info.value)
    assert all(a.evidence is Evidence.NOT_SENT for a in info.value.attempts)
    assert server.executed_count("POST") == 0


async def test_credentials_are_sent_never_indexed(nursery: trio.Nursery) -> None:
    """h2's own outbound normalisation is off (the client normalises once itself), so the
    client must itself keep credentials out of HPACK's tables (RFC 7541 §7.1.3)."""
    import h2.config
    import h2.connection
    import h2.events
    from hpack import NeverIndexedHeaderTuple

    received: list[tuple[bytes, bytes]] = []

    async def serve(stream: trio.SocketStream) -> None:
        conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        conn.initiate_connection()
        await stream.send_all(conn.data_to_send())
        while not received:
            data = await stream.receive_some(65536)
            if not data:
                return
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    received.extend(event.headers)
                    conn.send_headers(event.stream_id, [(":status", "204")], end_stream=True)
            await stream.send_all(conn.data_to_send())

    listeners = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
    port = listeners[0].socket.getsockname()[1]
    async with trio_retry.Client(http2_prior_knowledge=True) as client:
        with trio.fail_after(LIMIT):
            response = await client.get(
                f"http://127.0.0.1:{port}/",
                headers={"Authorization": "Bearer secret", "Cookie": "s=1", "X-Plain": "v"},
            )
    assert response.status == 204
    never_indexed = {bytes(f[0]): isinstance(f, NeverIndexedHeaderTuple) for f in received}
    assert never_indexed == {
        b":method": False,
        b":scheme": False,
        b":authority": False,
        b":path": False,
        b"user-agent": False,
        b"accept": False,
        b"accept-encoding": False,
        b"authorization": True,
        b"cookie": True,
        b"x-plain": False,
    }
