"""Dark connections through the client (issue #41; ``contract.DarkWatch``, Go's
``ReadIdleTimeout``/``PingTimeout``): a multiplexed connection with a call waiting that receives
nothing for ``FIXED.read_idle`` seconds takes no new call and is PINGed; anything received
lifts that; nothing within ``FIXED.read_idle_ping`` more closes it, and its calls fail with the
evidence each has (a GET then goes again on another connection).

HTTP/2 on FaultServer (h2c and TLS), whose ``StopReading`` script makes it read and send
nothing once a request's head arrived: a dark peer. On ``MockClock``: exact virtual times.
HTTP/3 on FaultServer over QUIC, on the real clock (QUIC's own timers; the watch's limits made
short), the path made dark by a UDP relay that drops everything. The
real partition (iptables in a network namespace, nginx) is
``tests/interop/test_nginx_partition.py``."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import trio
import trio.testing

import trio_retry
from tests.conftest import client_for
from trio_retry import Evidence, FailureCategory, RetryPolicy, Upstream
from trio_retry._wire import clock
from trio_retry.testing import FaultServer, Respond, Stall
from trio_retry.testing._script import StopReading

from ..support.udp_relay import Faults, UdpRelay

IDLE, PING = clock.FIXED.read_idle, clock.FIXED.read_idle_ping
FOREVER = 10_000.0
LIMIT = 200.0  # virtual seconds: every wait here ends long before


@pytest.fixture
async def server(h2_server: FaultServer) -> FaultServer:
    """Each HTTP/2 server of ``tests/conftest.py`` (h2c, and over TLS)."""
    return h2_server


def connection_of(server: FaultServer, path: str) -> list[int]:
    return [r.connection_id for r in server.requests if r.path == path]


async def test_a_dark_connection_takes_no_new_call_and_its_call_goes_again(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.route("GET", "/dark", StopReading(seconds=FOREVER), Respond(200, body=b"again"))
    outcome: dict[str, Any] = {}
    async with client_for(server, retry=RetryPolicy()) as client:
        assert (await client.get(server.url + "/warm")).status == 200
        start = trio.current_time()

        async def dark() -> None:
            outcome["dark"] = await client.get(server.url + "/dark")
            outcome["dark_at"] = trio.current_time() - start

        with trio.fail_after(LIMIT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(dark)
                await trio.sleep(IDLE + 0.5)  # silent, a call waiting: it takes no new call
                later = await client.get(server.url + "/later")
                outcome["later_at"] = trio.current_time() - start
    # The call made then went on a new connection at once, not into the dark.
    assert later.status == 200
    assert not later.attempts[0].connection_reused
    assert outcome["later_at"] == pytest.approx(IDLE + 0.5, abs=0.05)
    (warm,) = connection_of(server, "/warm")
    (fresh,) = connection_of(server, "/later")
    assert fresh != warm
    # The dark call's first attempt ended when the PING went unanswered; the GET went again.
    response = outcome["dark"]
    first, second = response.attempts
    assert (first.evidence, first.category) == (
        Evidence.SENT_NO_RESPONSE,
        FailureCategory.CONNECTION_BROKEN,
    )
    assert "went dark" in str(first.error)
    assert (second.status, response.content) == (200, b"again")
    assert outcome["dark_at"] == pytest.approx(IDLE + PING, abs=0.5)  # (with the backoff)
    dark_first, dark_again = connection_of(server, "/dark")
    assert dark_first == warm
    assert dark_again != warm


async def test_a_post_on_a_dark_connection_is_ambiguous_not_sent_again(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    """A POST whose request left before the connection went dark may have run: the client
    says so (``HttpAmbiguousExecutionError``) and sends it nowhere else."""
    server.route("POST", "/order", StopReading(seconds=FOREVER))
    async with client_for(server, retry=RetryPolicy()) as client:
        await client.get(server.url + "/warm")
        start = trio.current_time()
        with trio.fail_after(LIMIT), pytest.raises(trio_retry.HttpAmbiguousExecutionError) as info:
            await client.post(server.url + "/order", content=b"buy")
        elapsed = trio.current_time() - start
    (attempt,) = info.value.attempts
    assert attempt.evidence is Evidence.SENT_NO_RESPONSE
    assert "went dark" in str(attempt.error)
    assert elapsed == pytest.approx(IDLE + PING, abs=0.05)
    assert len(connection_of(server, "/order")) == 1


async def test_a_slow_server_that_answers_pings_keeps_its_connection(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    """A server slow to answer a call (its application thinks for 20 s) still answers a PING:
    the connection is never closed, and a call made after a silence goes on it."""
    server.route("GET", "/slow", Stall(20.0))
    async with client_for(server, retry=RetryPolicy(max_attempts=1)) as client:
        await client.get(server.url + "/warm")
        with trio.fail_after(LIMIT):
            async with trio.open_nursery() as nursery:
                slow: list[trio_retry.Response] = []

                async def call() -> None:
                    slow.append(await client.get(server.url + "/slow"))

                nursery.start_soon(call)
                await trio.sleep(IDLE + PING + 1.5)  # PINGed, answered
                later = await client.get(server.url + "/later")
    assert slow[0].status == 200
    assert later.attempts[0].connection_reused
    assert {r.connection_id for r in server.requests} == {1}


async def test_a_request_that_gave_up_in_silence_leaves_its_connection_to_no_one(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    """A POST waits 1 s (``first_byte``) for its answer on a connection that then says nothing
    at all: the connection is doubted at once (``DarkWatch.doubt``: no new stream, PINGed),
    not after ``FIXED.read_idle``, so the reconciler's look-up goes on a new connection and
    answers within the call's deadline; the silent connection, PINGed in vain, is closed."""
    server.route("POST", "/order", StopReading(seconds=FOREVER))
    server.route("GET", "/requests/o-1", Respond(200, body=b"paid"))
    timeouts = trio_retry.StageTimeouts(first_byte=1.0)
    async with client_for(server, retry=RetryPolicy(), stage_timeouts=timeouts) as client:
        await client.get(server.url + "/warm")
        start = trio.current_time()

        async def look_up(report: trio_retry.AmbiguityReport) -> trio_retry.Reconciled:
            found = await client.get(f"{server.url}/requests/{report.request_id}")
            return trio_retry.Reconciled.executed(found)

        with trio.fail_after(LIMIT):
            response = await client.post(
                server.url + "/order",
                content=b"buy",
                headers={"x-request-id": "o-1"},
                deadline=3.0,
                reconcile=look_up,
            )
        elapsed = trio.current_time() - start
        await trio.sleep(PING + 1.0)  # the PING is not answered either: closed
        after = await client.get(server.url + "/after")
    assert response.content == b"paid"
    assert elapsed == pytest.approx(1.0, abs=0.05)
    (warm,) = connection_of(server, "/warm")
    assert connection_of(server, "/order") == [warm]
    (looked,) = connection_of(server, "/requests/o-1")
    assert looked != warm
    assert after.status == 200
    assert connection_of(server, "/after") != [warm]  # the doubted one is gone


# --- HTTP/3 ------------------------------------------------------------------------------------


@pytest.fixture
def quick_watch(monkeypatch: pytest.MonkeyPatch) -> tuple[float, float]:
    """The watch's limits, made short for the real clock (read when a client is made)."""
    quick = dataclasses.replace(clock.FIXED, read_idle=0.4, read_idle_ping=0.4)
    monkeypatch.setattr(clock, "FIXED", quick)
    return quick.read_idle, quick.read_idle_ping


async def _behind_a_relay(
    nursery: trio.Nursery, **options: Any
) -> tuple[FaultServer, UdpRelay, str, trio_retry.Client]:
    """A FaultServer over HTTP/3 (``/slow`` stalls) behind a UDP relay that also pipes TCP,
    and a client of it that tries each call once (``options`` added)."""
    server = FaultServer(tls=True, http3=True)
    await nursery.start(server.serve)
    relay = UdpRelay(("127.0.0.1", server.port), tcp=True)
    await nursery.start(relay.run)
    url = f"https://127.0.0.1:{relay.port}"
    server.route("GET", "/slow", Stall(30.0))
    client = trio_retry.Client(
        ssl_context=server.client_ssl_context(),
        upstreams={url: Upstream(http3=True)},
        retry=RetryPolicy(max_attempts=1),
        **options,
    )
    return server, relay, url, client


async def test_http3_a_dark_connection_takes_no_new_call_then_closes(
    nursery: trio.Nursery, quick_watch: tuple[float, float], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through a UDP relay that drops everything once the connection is warm (TCP passes: the
    path to the origin over TCP is fine). The call waiting fails when the PING goes unanswered;
    the call made during the silence waits for the one connection the origin may have (RFC 9114
    §3.3) to be closed, never going into the dark, then for a successor: QUIC gets through no
    more, so that goes over TCP (HTTP/2).

    The silence is timed from the last datagram the client received (``QuicDriver.arrived``),
    as the watch times it, not from the moment the relay went dark: the watch is armed when the
    connection's task starts waiting after its last datagram, which may come a few
    milliseconds before the test's clock reading (0.798 s measured from there, once, under
    load). On the real clock: over QUIC on ``MockClock`` the driver livelocks (c1736df)."""
    pytest.importorskip("aioquic", reason="needs the http3 extra")
    from trio_retry._wire.http3 import driver

    idle, ping = quick_watch
    heard: list[float] = []  # when the client's QUIC connections received datagrams
    arrived = driver.QuicDriver.arrived

    def noted(self: driver.QuicDriver, now: float) -> None:
        arrived(self, now)
        heard.append(now)

    monkeypatch.setattr(driver.QuicDriver, "arrived", noted)
    server, relay, url, client = await _behind_a_relay(nursery)
    outcome: dict[str, Any] = {}
    with trio.fail_after(20):
        async with client:
            assert (await client.get(url + "/warm")).http_version == "HTTP/3"
            relay.faults = Faults(blackhole=True)
            start = trio.current_time()

            async def slow() -> None:
                with pytest.raises(trio_retry.RequestFailed) as info:
                    await client.get(url + "/slow")
                outcome["slow"] = info.value
                now = trio.current_time()
                outcome["slow_at"] = now - start
                outcome["silent_for"] = now - heard[-1]

            async with trio.open_nursery() as calls:
                calls.start_soon(slow)
                await trio.sleep(idle + ping / 2)  # silent, PINGed, not answered yet
                outcome["later"] = await client.get(url + "/later")
    (attempt,) = outcome["slow"].attempts
    assert (attempt.http_version, attempt.evidence, attempt.category) == (
        "HTTP/3",
        Evidence.SENT_NO_RESPONSE,
        FailureCategory.CONNECTION_BROKEN,
    )
    assert "went dark" in str(attempt.error)
    # Never before idle + ping of silence; not much later than the relay went dark.
    assert outcome["silent_for"] >= idle + ping
    assert outcome["slow_at"] < idle + ping + 2
    later = outcome["later"]
    assert (later.status, later.http_version) == (200, "HTTP/2")
    assert {r.path: r.http_version for r in server.requests}["/later"] == "HTTP/2"


async def test_http3_a_reader_that_stops_with_its_buffers_full_keeps_its_connection(
    nursery: trio.Nursery, quick_watch: tuple[float, float], monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the callers' buffers are full (``driver.BUFFER_LIMIT``) the connection reads no
    datagram, so it hears nothing: a silence of the client's own making, which proves nothing
    of the path, and the watch is off meanwhile. A reader that stops for three times
    ``read_idle + read_idle_ping`` gets its body whole, on its one attempt. Without that, the
    PING's answer waits unread in the socket and the connection is closed as dark."""
    from trio_retry._wire.http3 import driver

    idle, ping = quick_watch
    monkeypatch.setattr(driver, "BUFFER_LIMIT", 256 * 1024)
    server = FaultServer(tls=True, http3=True)
    await nursery.start(server.serve)
    body = bytes(range(256)) * (4 * 1024 * 1024 // 256)
    server.route("GET", "/big", Respond(200, body=body))
    client = trio_retry.Client(
        ssl_context=server.client_ssl_context(),
        upstreams={server.url: Upstream(http3=True)},
        retry=RetryPolicy(max_attempts=1),
    )
    got = bytearray()
    with trio.fail_after(20):
        async with client, client.stream("GET", server.url + "/big") as response:
            assert response.http_version == "HTTP/3"
            async for chunk in response.aiter_raw():
                if not got:
                    await trio.sleep(3 * (idle + ping))  # the buffers fill, and stay full
                got += chunk
    assert bytes(got) == body


async def test_http3_a_request_that_gave_up_in_silence_leaves_its_connection_to_no_one(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTP/3 as HTTP/2 above: a GET gives up waiting for its answer (``first_byte``, 1 s) with
    not a datagram received since it was sent (the relay drops everything once the connection
    is warm): the connection is doubted at once (``DarkWatch.doubt``), not after ``read_idle``'s
    5 s, so the next call waits for its PING to go unanswered (0.4 s here) and then goes on a
    successor (QUIC gets through no more: HTTP/2 over TCP). Without the doubt it went on the
    dark connection and timed out there too."""
    pytest.importorskip("aioquic", reason="needs the http3 extra")
    monkeypatch.setattr(clock, "FIXED", dataclasses.replace(clock.FIXED, read_idle_ping=0.4))
    server, relay, url, client = await _behind_a_relay(
        nursery, stage_timeouts=trio_retry.StageTimeouts(first_byte=1.0)
    )
    with trio.fail_after(20):
        async with client:
            assert (await client.get(url + "/warm")).http_version == "HTTP/3"
            relay.faults = Faults(blackhole=True)
            # What the relay passed before (the warm-up's last acknowledgements) is read
            # first: received after /slow was sent, it would count as hearing from the server.
            await trio.sleep(0.2)
            with pytest.raises(trio_retry.RequestFailed) as info:
                await client.get(url + "/slow")
            later = await client.get(url + "/later")
    (attempt,) = info.value.attempts
    assert (attempt.http_version, attempt.category) == ("HTTP/3", FailureCategory.TIMEOUT)
    assert (later.status, later.http_version) == (200, "HTTP/2")
    assert {r.path: r.http_version for r in server.requests}["/later"] == "HTTP/2"


async def test_http3_a_deadline_finds_its_stream_without_looking_at_the_others(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """60 calls on one QUIC connection, each with a deadline that passes while its stream
    waits: each expiry finds its own stream at once (``QuicDriver.attempts``), not by a look at
    every stream (issue #41: O(streams) per event; counted, not timed)."""
    pytest.importorskip("aioquic", reason="needs the http3 extra")
    from trio_retry._wire.http3 import driver
    from trio_retry._wire.http3.stream import H3Stream

    reads = 0

    class Counting(H3Stream):
        @property  # type: ignore[override]
        def progress(self) -> Any:
            nonlocal reads
            reads += 1
            return self._counted

        @progress.setter
        def progress(self, value: Any) -> None:
            self._counted = value

    monkeypatch.setattr(driver, "H3Stream", Counting)
    server = FaultServer(tls=True, http3=True)
    await nursery.start(server.serve)
    calls = 60
    server.route("GET", "/slow", *[Stall(30.0)] * calls)  # (one script per request)
    client = trio_retry.Client(
        ssl_context=server.client_ssl_context(),
        upstreams={server.url: Upstream(http3=True)},
        retry=RetryPolicy(max_attempts=1),
    )
    failed = 0
    with trio.fail_after(20):
        async with client:
            assert (await client.get(server.url + "/warm")).http_version == "HTTP/3"
            reads = 0

            async def call() -> None:
                nonlocal failed
                with pytest.raises(trio_retry.DeadlineExceeded):
                    await client.get(server.url + "/slow", deadline=1.0)
                failed += 1

            async with trio.open_nursery() as calls_nursery:
                for _ in range(calls):
                    calls_nursery.start_soon(call)
    assert failed == calls
    assert {r.connection_id for r in server.requests} == {1}
    assert reads <= 4 * calls, reads  # a scan per expiry: about 1,800
