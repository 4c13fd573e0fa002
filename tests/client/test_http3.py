"""The client over HTTP/3 (SPEC §16) against FaultServer(http3=True) on real loopback sockets:
routing (configured, Alt-Svc), fallback to TCP, the evidence HTTP/3 proves, early data.

QUIC's timers (loss recovery, idle) run on the run's clock, so these tests use the real clock
(an autojumping MockClock would fire them while a datagram is in flight); every wait is bounded
by ``trio.fail_after``.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from typing import cast

import pytest
import trio
import trio.testing

import trio_retry
from tests.conftest import FAST
from trio_retry import (
    Client,
    Evidence,
    FailureCategory,
    HttpAmbiguousExecutionError,
    RetryPolicy,
    StageTimeouts,
    Upstream,
)
from trio_retry.testing import (
    CloseAfterBody,
    FaultServer,
    GoAway,
    Handler,
    PartialBody,
    RecordedRequest,
    RefuseStream,
    Respond,
    Stall,
)

MIB = 1 << 20


@pytest.fixture
async def server(nursery: trio.Nursery) -> FaultServer:
    server = FaultServer(tls=True, http3=True)
    await nursery.start(server.serve)
    return server


def h3_client(server: FaultServer, **options: object) -> Client:
    """A client that reaches ``server`` over HTTP/3 from its first request."""
    options.setdefault("retry", FAST)
    return Client(
        upstreams={server.url: Upstream(http3=True, early_data=bool(options.pop("keyed", False)))},
        ssl_context=server.client_ssl_context(),
        **options,  # type: ignore[arg-type]
    )


async def test_get_and_post_with_a_mib_each_way(server: FaultServer) -> None:
    big = bytes(range(256)) * (MIB // 256)

    def echo(request: RecordedRequest) -> Respond:
        return Respond(200, body=request.body[::-1])

    server.route("PUT", "/echo", Handler(echo))
    server.route("GET", "/big", Respond(200, body=big))
    with trio.fail_after(20):
        async with h3_client(server) as client:
            got = await client.get(f"{server.url}/big")
            put = await client.put(f"{server.url}/echo", content=big)
    assert (got.http_version, got.content) == ("HTTP/3", big)
    assert (put.http_version, put.content) == ("HTTP/3", big[::-1])
    attempt = put.attempts[-1]
    assert (attempt.http_version, attempt.evidence) == ("HTTP/3", Evidence.RESPONSE_RECEIVED)
    assert attempt.bytes_sent > MIB  # the frames handed to QUIC, head and body
    assert [r.http_version for r in server.requests] == ["HTTP/3", "HTTP/3"]
    assert server.connections_accepted == 1


async def test_a_streamed_upload_of_unknown_length(server: FaultServer) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for i in range(40):
            yield bytes([i]) * 65536

    def size(request: RecordedRequest) -> Respond:
        return Respond(200, body=str(len(request.body)).encode())

    server.route("POST", "/upload", Handler(size))
    with trio.fail_after(20):
        async with h3_client(server) as client:
            response = await client.post(
                f"{server.url}/upload", content=chunks(), idempotency_key="u1"
            )
    assert (response.http_version, response.text) == ("HTTP/3", str(40 * 65536))


async def test_fifty_concurrent_streams_share_one_connection(server: FaultServer) -> None:
    statuses: list[int] = []
    with trio.fail_after(20):
        async with h3_client(server) as client:

            async def one(i: int) -> None:
                response = await client.get(f"{server.url}/items/{i}")
                statuses.append(response.status)

            async with trio.open_nursery() as nursery:
                for i in range(50):
                    nursery.start_soon(one, i)
            assert "1 idle" in repr(client._rt.pool)
    assert statuses == [200] * 50
    assert server.connections_accepted == 1
    assert len({r.stream_id for r in server.requests}) == 50


async def test_alt_svc_discovery(server: FaultServer) -> None:
    with trio.fail_after(20):
        async with Client(http3=True, ssl_context=server.client_ssl_context()) as client:
            versions = [(await client.get(f"{server.url}/{i}")).http_version for i in range(3)]
    assert versions == ["HTTP/2", "HTTP/3", "HTTP/3"]
    assert [r.http_version for r in server.requests] == ["HTTP/2", "HTTP/3", "HTTP/3"]


async def test_no_advertisement_no_http3(nursery: trio.Nursery) -> None:
    server = FaultServer(tls=True, http3=True, alt_svc=False)
    await nursery.start(server.serve)
    with trio.fail_after(20):
        async with Client(http3=True, ssl_context=server.client_ssl_context()) as client:
            versions = [(await client.get(f"{server.url}/{i}")).http_version for i in range(2)]
    assert versions == ["HTTP/2", "HTTP/2"]


async def test_a_closed_udp_port_falls_back_to_tcp_uncounted(nursery: trio.Nursery) -> None:
    server = FaultServer(tls=True)  # TCP only: nothing listens on the UDP port
    await nursery.start(server.serve)
    with trio.fail_after(20):
        async with h3_client(server, retry=RetryPolicy(max_attempts=1)) as client:
            first = await client.post(f"{server.url}/pay", content=b"x")
            second = await client.post(f"{server.url}/pay", content=b"y")
    assert first.http_version == "HTTP/2"
    quic, tcp = first.attempts
    assert (quic.evidence, quic.category, quic.decision) == (
        Evidence.NOT_SENT,
        FailureCategory.CONNECT,
        None,
    )
    assert "QUIC handshake" in str(quic.error)
    assert tcp.evidence is Evidence.RESPONSE_RECEIVED
    # The origin is now reached over TCP for a while: no second QUIC try.
    assert [a.http_version for a in second.attempts] == ["HTTP/2"]
    assert server.executed_count("POST", "/pay") == 2


async def test_a_silent_udp_port_falls_back_after_the_handshake_bound(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    server = FaultServer(tls=True)
    await nursery.start(server.serve)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as hole:
        hole.bind(("127.0.0.1", server.port))  # takes the datagrams, never answers
        timeouts = StageTimeouts(connect=5, tls=0.5, write=5, first_byte=5, read=5)
        with trio.fail_after(20):
            async with h3_client(server, stage_timeouts=timeouts) as client:
                started = trio.current_time()
                response = await client.get(f"{server.url}/")
                took = trio.current_time() - started
    assert response.http_version == "HTTP/2"
    quic = response.attempts[0]
    assert (quic.evidence, quic.category) == (Evidence.NOT_SENT, FailureCategory.TIMEOUT)
    assert took == pytest.approx(0.5)  # the tls bound (0.5 s), not the 3 s cap


async def test_a_rejected_stream_is_not_sent_and_a_post_is_retried(server: FaultServer) -> None:
    server.route("POST", "/transfers", RefuseStream(), Respond(201, body=b"done"))
    with trio.fail_after(20):
        async with h3_client(server) as client:
            response = await client.post(f"{server.url}/transfers", content=b"to=bob")
    refused, answered = response.attempts
    assert (refused.evidence, refused.category) == (
        Evidence.NOT_SENT,
        FailureCategory.REFUSED_STREAM,
    )
    assert refused.stage >= trio_retry.Stage.REQUEST_HEAD  # its bytes had left: the proof wins
    assert answered.status == 201
    assert server.executed_count("POST", "/transfers") == 1


async def test_a_stream_error_stays_on_its_stream(server: FaultServer) -> None:
    server.route("POST", "/refused", RefuseStream())
    server.route("GET", "/slow", Stall(0.3, then=Respond(200, body=b"fine")))
    results: dict[str, object] = {}
    with trio.fail_after(20):
        async with h3_client(server, retry=RetryPolicy(max_attempts=1)) as client:

            async def refused() -> None:
                try:
                    await client.post(f"{server.url}/refused", content=b"x")
                except trio_retry.RequestFailed as exc:
                    results["refused"] = exc.evidence

            async def slow() -> None:
                results["slow"] = (await client.get(f"{server.url}/slow")).content

            async with trio.open_nursery() as nursery:
                nursery.start_soon(slow)
                await trio.sleep(0.05)
                nursery.start_soon(refused)
    assert results == {"refused": Evidence.NOT_SENT, "slow": b"fine"}
    assert server.connections_accepted == 1


async def test_streams_above_a_goaway_are_sent_again_uncounted(server: FaultServer) -> None:
    server.route("GET", "/first", GoAway(last_stream_id=0))
    with trio.fail_after(20):
        async with h3_client(server, retry=RetryPolicy(max_attempts=1)) as client:
            first = await client.get(f"{server.url}/first")
            results = []
            async with trio.open_nursery() as nursery:

                async def later(i: int) -> None:
                    results.append(await client.get(f"{server.url}/later/{i}"))

                for i in range(3):
                    nursery.start_soon(later, i)
    assert first.status == 200
    for response in results:
        assert response.status == 200  # max_attempts=1: the re-sends were not counted
    assert server.executed_count("GET", "/first") == 1
    for i in range(3):
        assert server.executed_count("GET", f"/later/{i}") == 1


async def test_a_goaway_refuses_streams_in_flight(server: FaultServer) -> None:
    # Stream 0 is held; streams 4 and 8 arrive; a GOAWAY bounding the processed streams to 0
    # comes with /a's or /b's arrival: 4 and 8 were not processed and go again on a new
    # connection, uncounted, while stream 0 is answered.
    server.route("GET", "/hold", Stall(0.3))
    server.route("GET", "/a", GoAway(last_stream_id=0), Respond(200))
    with trio.fail_after(20):
        async with h3_client(server, retry=RetryPolicy(max_attempts=1)) as client:
            results: dict[str, trio_retry.Response] = {}

            async def get(path: str) -> None:
                results[path] = await client.get(f"{server.url}{path}")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(get, "/hold")
                await trio.sleep(0.05)
                nursery.start_soon(get, "/a")
                nursery.start_soon(get, "/b")
    assert results["/hold"].status == 200
    for path in ("/a", "/b"):
        attempts = results[path].attempts
        assert results[path].status == 200
        if len(attempts) == 2:  # it was on the connection that went away
            refused = attempts[0]
            assert (refused.evidence, refused.category, refused.decision) == (
                Evidence.NOT_SENT,
                FailureCategory.GOAWAY,
                None,
            )
        assert server.executed_count("GET", path) == 1
    assert server.connections_accepted == 2


async def test_a_broken_body_is_a_partial_response(server: FaultServer) -> None:
    server.route("GET", "/report", PartialBody(200, declared_length=5000, body=b"x" * 1000))
    with trio.fail_after(20):
        async with h3_client(server, retry=RetryPolicy(max_attempts=1)) as client:
            with pytest.raises(trio_retry.RequestFailed) as caught:
                await client.get(f"{server.url}/report")
    assert caught.value.evidence is Evidence.PARTIAL_RESPONSE


async def test_a_post_whose_connection_closed_after_it_ran_is_ambiguous(
    server: FaultServer,
) -> None:
    server.route("POST", "/pay", CloseAfterBody())
    with trio.fail_after(20):
        async with h3_client(server) as client:
            with pytest.raises(HttpAmbiguousExecutionError) as caught:
                await client.post(f"{server.url}/pay", content=b"1")
    assert caught.value.evidence is Evidence.SENT_NO_RESPONSE
    assert len(caught.value.attempts) == 1  # never retried
    assert server.executed_count("POST", "/pay") == 1


async def test_the_call_deadline_ends_a_stalled_stream(server: FaultServer) -> None:
    server.route("GET", "/slow", Stall(10))
    server.route("GET", "/fast", Respond(200))
    with trio.fail_after(20):
        async with h3_client(server, retry=RetryPolicy(max_attempts=1)) as client:
            started = trio.current_time()
            with pytest.raises(trio_retry.DeadlineExceeded) as caught:
                await client.get(f"{server.url}/slow", deadline=0.3)
            took = trio.current_time() - started
            after = await client.get(f"{server.url}/fast")  # the connection carries on
    assert caught.value.evidence is Evidence.SENT_NO_RESPONSE
    assert 0.3 <= took < 2
    assert after.status == 200
    assert server.connections_accepted == 1


async def test_cancelling_a_request_resets_its_stream_only(server: FaultServer) -> None:
    server.route("GET", "/slow", Stall(10))
    with trio.fail_after(20):
        async with h3_client(server) as client:
            with trio.move_on_after(0.2):
                await client.get(f"{server.url}/slow")
            response = await client.get(f"{server.url}/after")
    assert response.status == 200
    assert server.connections_accepted == 1


async def test_max_connections_counts_quic_connections(server: FaultServer) -> None:
    with trio.fail_after(20):
        async with h3_client(server, max_connections=1) as client:
            await client.get(f"{server.url}/")
            assert repr(client._rt.pool).startswith("<ConnectionPool 0 active, 1 idle")


# --- early data ------------------------------------------------------------------------------


def early_client(server: FaultServer, *, keyed: bool = False) -> Client:
    """Each request on a new connection, which resumes the previous one's session."""
    return h3_client(server, early_data=True, keepalive_expiry=0, keyed=keyed)


async def test_a_get_goes_in_early_data_a_post_never(server: FaultServer) -> None:
    with trio.fail_after(20):
        async with early_client(server) as client:
            warm = await client.get(f"{server.url}/warm")  # receives a session ticket
            get = await client.get(f"{server.url}/report")
            post = await client.post(f"{server.url}/orders", content=b"x")
            keyed = await client.post(f"{server.url}/orders", content=b"y", idempotency_key="k")
    assert warm.attempts[-1].early_data is None  # no ticket yet
    assert get.attempts[-1].early_data == "accepted"
    assert post.attempts[-1].early_data is None
    assert keyed.attempts[-1].early_data is None  # the upstream did not opt in
    arrived = {(r.method, r.path, r.body): r.early_data for r in server.requests}
    assert arrived == {
        ("GET", "/warm", b""): False,
        ("GET", "/report", b""): True,
        ("POST", "/orders", b"x"): False,
        ("POST", "/orders", b"y"): False,
    }


async def test_a_keyed_request_goes_early_where_the_upstream_opts_in(
    server: FaultServer,
) -> None:
    with trio.fail_after(20):
        async with early_client(server, keyed=True) as client:
            await client.get(f"{server.url}/warm")
            keyed = await client.put(f"{server.url}/doc", content=b"v1", idempotency_key="k1")
            await client.get(f"{server.url}/warm")
            unkeyed = await client.put(f"{server.url}/doc", content=b"v2")
            await client.get(f"{server.url}/warm")
            post = await client.post(f"{server.url}/pay", content=b"1")
    assert keyed.attempts[-1].early_data == "accepted"
    assert unkeyed.attempts[-1].early_data is None
    assert post.attempts[-1].early_data is None
    assert [r.early_data for r in server.requests if r.method != "GET"] == [True, False, False]


async def test_rejected_early_data_is_sent_once_after_the_handshake(
    server: FaultServer,
) -> None:
    with trio.fail_after(20):
        async with early_client(server) as client:
            await client.get(f"{server.url}/warm")
            server.accept_early_data = False
            response = await client.get(f"{server.url}/report")
    (attempt,) = response.attempts
    assert (response.status, attempt.early_data) == (200, "rejected")
    assert server.executed_count("GET", "/report") == 1
    assert [r.early_data for r in server.requests if r.path == "/report"] == [False]


async def test_too_early_is_sent_again_after_the_handshake_uncounted(
    server: FaultServer,
) -> None:
    server.route("GET", "/report", Respond(425), Respond(200, body=b"ready"))
    with trio.fail_after(20):
        async with h3_client(
            server, early_data=True, keepalive_expiry=0, retry=RetryPolicy(max_attempts=1)
        ) as client:
            await client.get(f"{server.url}/warm")
            response = await client.get(f"{server.url}/report")
    too_early, answered = response.attempts
    assert (too_early.status, too_early.early_data, too_early.evidence) == (
        425,
        "accepted",
        Evidence.RESPONSE_RECEIVED,
    )
    assert too_early.decision is None  # uncounted: max_attempts=1 still let it go again
    assert (answered.status, answered.early_data, response.content) == (200, None, b"ready")
    assert [r.early_data for r in server.requests if r.path == "/report"] == [True, False]


async def test_a_slow_reader_bounds_what_is_buffered(
    server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aioquic credits flow control on receipt: the driver stops reading datagrams while more
    than BUFFER_LIMIT body bytes wait for their callers, and the body still arrives whole.

    The bound is the code's own: a round reads datagrams only while what it read is below the
    room left (``DatagramPump.receive``), and a datagram carries at most its own size of body,
    so a round delivers less than the room plus the one read that crossed it: one datagram or
    GRO buffer (at most 64 KiB, ``udp._DATAGRAM``), or one ``recvmmsg`` of qh3's (at most 32
    datagrams: 38,400 bytes here, of 1,200 each). A round that begins with the buffers full
    (QUIC's timer, or a kick, woke it) reads nothing. Before that, each round
    read up to ``BATCH`` (256) datagrams whatever the room, and every round the timer woke
    while full as many again: 692,871 bytes were buffered over a limit of 262,144, once,
    under load."""
    from trio_retry._wire.http3 import driver
    from trio_retry._wire.http3.datagrams import DatagramPump

    limit = 256 * 1024
    monkeypatch.setattr(driver, "BUFFER_LIMIT", limit)
    seen: list[int] = []
    full_at_start = [False]  # the current round began with the callers' buffers full
    while_full: list[int] = []  # body bytes delivered in rounds that began full
    received = driver.QuicDriver.received
    receive = DatagramPump.receive

    def note(self: driver.QuicDriver, size: int) -> None:
        received(self, size)
        seen.append(self.buffered)
        if full_at_start[0]:
            while_full.append(size)

    def noted(self: DatagramPump, now: float, woken: bool, room: int) -> None:
        full_at_start[0] = cast(driver.QuicDriver, self._owner).buffered > limit
        receive(self, now, woken, room)

    monkeypatch.setattr(driver.QuicDriver, "received", note)
    monkeypatch.setattr(DatagramPump, "receive", noted)
    body = bytes(range(256)) * (8 * MIB // 256)
    server.route("GET", "/big", Respond(200, body=body))
    with trio.fail_after(30):
        async with h3_client(server) as client:
            async with client.stream("GET", f"{server.url}/big") as response:
                got = bytearray()
                async for chunk in response.aiter_raw():
                    if not got:
                        await trio.sleep(1.0)  # a reader that stops for a while
                    got += chunk
    assert bytes(got) == body
    assert max(seen) > limit  # (the reader's pause filled the buffers)
    assert sum(while_full) == 0
    assert max(seen) < limit + 64 * 1024


@pytest.fixture
def quick_idle_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """The idle check (``contract.IdlePing``) after 0.2 s of silence, answered within 0.3 s."""
    from trio_retry._wire.contract import IdlePing
    from trio_retry._wire.http3 import driver

    def quick(now: float) -> IdlePing:
        return IdlePing(now, after=0.2, timeout=0.3)

    monkeypatch.setattr(driver, "IdlePing", quick)


def count_pings(monkeypatch: pytest.MonkeyPatch, *, answered: bool) -> list[int]:
    """The PINGs our QUIC connections send (dropped before they leave when not ``answered``:
    a peer that answers nothing more)."""
    from trio_retry._wire.http3.backend import CheckedQuicConnection

    pings: list[int] = []
    send_ping = CheckedQuicConnection.send_ping

    def counted(self: CheckedQuicConnection, uid: int) -> None:
        pings.append(uid)
        if answered:
            send_ping(self, uid)

    monkeypatch.setattr(CheckedQuicConnection, "send_ping", counted)
    return pings


@pytest.mark.usefixtures("quick_idle_check")
async def test_an_idle_connection_answers_a_ping_and_is_reused(
    server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    pings = count_pings(monkeypatch, answered=True)
    with trio.fail_after(20):
        async with h3_client(server, retry=RetryPolicy(max_attempts=1)) as client:
            await client.get(f"{server.url}/first")
            for _ in range(3):  # each within 0.2 s of the last answer: not idle, no PING
                await trio.sleep(0.1)
                await client.get(f"{server.url}/soon")
            assert pings == []
            await trio.sleep(0.3)
            response = await client.get(f"{server.url}/after-idle")
    assert pings == [1]
    assert (response.status, len(response.attempts)) == (200, 1)
    assert server.connections_accepted == 1


@pytest.mark.usefixtures("quick_idle_check")
async def test_an_idle_connection_that_does_not_answer_is_replaced_uncounted(
    server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    pings = count_pings(monkeypatch, answered=False)
    with trio.fail_after(20):
        async with h3_client(server, retry=RetryPolicy(max_attempts=1)) as client:
            await client.get(f"{server.url}/first")
            await trio.sleep(0.3)
            started = trio.current_time()
            response = await client.get(f"{server.url}/after-idle")
            waited = trio.current_time() - started
    assert pings == [1]
    assert waited >= 0.3  # the check's timeout, then a fresh connection
    unanswered, answered = response.attempts
    assert unanswered.evidence is Evidence.NOT_SENT
    assert "the idle HTTP/3 connection did not answer a PING within 0.3 s" in str(unanswered.error)
    assert (answered.status, answered.http_version) == (200, "HTTP/3")
    assert server.connections_accepted == 2
    assert server.executed_count("GET", "/after-idle") == 1
