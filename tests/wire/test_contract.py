"""The connection contract HTTP/2 and HTTP/3 share (``_wire/contract.py``): the stream proof,
the idle check's PING and its limits, a request's field section.

The idle check runs here against a stand-in peer on ``MockClock``, so every bound is asserted
at its exact virtual time; each protocol's own wiring of it is tested over real sockets
(``test_h2_units.py`` for HTTP/2, ``tests/client/test_http3.py`` for HTTP/3).
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from trio_retry import Evidence, FailureCategory, Stage
from trio_retry._wire.clock import FIXED
from trio_retry._wire.contract import Failure, IdlePing, request_headers
from trio_retry._wire.exchange import WireRequest
from trio_retry._wire.progress import AttemptProgress, WireError


def progress_at_pool() -> AttemptProgress:
    progress = AttemptProgress(trio.current_time())
    progress.advance(Stage.POOL)
    return progress


class Peer:
    """A connection as the idle check sees it: PINGs recorded, answered when told."""

    def __init__(self, idle: IdlePing) -> None:
        self.idle = idle
        self.pings: list[int] = []
        self.closed = False
        self.unanswered: list[str] = []
        self.changed = trio.Event()

    def send_ping(self, uid: int) -> None:
        self.pings.append(uid)

    async def ping_wait(self) -> None:
        await self.changed.wait()

    def ping_unanswered(self, message: str) -> None:
        self.unanswered.append(message)
        self.closed = True

    def wake(self) -> None:
        self.changed.set()
        self.changed = trio.Event()


# --- the stream proof ---------------------------------------------------------------------------


def test_a_proof_of_not_sent_is_the_attempts_evidence_and_may_reconnect() -> None:
    progress = AttemptProgress(0.0)
    progress.advance(Stage.AWAITING_RESPONSE)  # past the head: SENT_NO_RESPONSE by its stage
    error = Failure(FailureCategory.GOAWAY, "not processed", not_sent=True, reconnect=True).error(
        progress
    )
    assert (error.evidence, error.category, error.reconnect) == (
        Evidence.NOT_SENT,
        FailureCategory.GOAWAY,
        True,
    )
    assert progress.proven_not_sent


def test_without_a_proof_the_stage_decides_and_reconnect_needs_the_proof() -> None:
    progress = AttemptProgress(0.0)
    progress.advance(Stage.AWAITING_RESPONSE)
    error = Failure(FailureCategory.CONNECTION_BROKEN, "gone", reconnect=True).error(progress)
    assert (error.evidence, error.reconnect) == (Evidence.SENT_NO_RESPONSE, False)
    assert not progress.proven_not_sent


def test_early_data_of_a_failed_handshake_reconnects_without_the_proof() -> None:
    """The one exception (the engine's essay): a request that went in the early data of a
    QUIC handshake that failed is SENT_NO_RESPONSE by its stage, and goes over TCP
    uncounted."""
    progress = AttemptProgress(0.0)
    progress.advance(Stage.AWAITING_RESPONSE)
    failure = Failure(FailureCategory.TIMEOUT, "no answer", unconfirmed_early=True)
    error = failure.error(progress)
    assert (error.evidence, error.category, error.reconnect) == (
        Evidence.SENT_NO_RESPONSE,
        FailureCategory.TIMEOUT,
        True,
    )
    assert not progress.proven_not_sent


# --- the idle check -----------------------------------------------------------------------------


def test_the_idle_limits_are_the_clocks() -> None:
    idle = IdlePing(10.0)
    assert (idle.after, idle.timeout) == (FIXED.ping_after_idle, FIXED.ping_timeout) == (2.0, 1.0)
    assert not idle.due(10.0 + 1.999)
    assert idle.due(12.0)
    idle.last_received = 11.0
    assert not idle.due(12.0)
    assert not IdlePing(0.0, after=None).due(1e9)  # a check turned off is never due


def test_an_answer_covers_every_ping_before_it() -> None:
    idle = IdlePing(0.0)
    idle.sent = 3
    idle.answer(2)
    assert idle.answered == 2
    idle.answer(1)  # late: never goes back
    assert idle.answered == 2
    idle.answer(9)  # not one of ours: no further than what was sent
    assert idle.answered == 3
    idle.sent = 5
    idle.answer()  # a protocol whose PINGs carry no number: every PING sent
    assert idle.answered == 5


async def test_an_answered_ping_lets_the_request_go_and_concurrent_checks_share_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    idle = IdlePing(trio.current_time())
    peer = Peer(idle)
    done: list[float] = []

    async def check() -> None:
        await idle.check(peer, progress_at_pool(), "HTTP/3")
        done.append(trio.current_time())

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(check)
            nursery.start_soon(check)
            await trio.sleep(0.25)
            assert peer.pings == [1]  # one PING for both
            idle.answer(1)
            peer.wake()
    assert done == [0.25, 0.25]
    assert not peer.closed


async def test_an_unanswered_ping_closes_the_connection_at_its_timeout_not_sent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    idle = IdlePing(trio.current_time(), timeout=0.5)
    peer = Peer(idle)
    progress = progress_at_pool()
    with trio.fail_after(5), pytest.raises(WireError) as info:
        await idle.check(peer, progress, "HTTP/3")
    assert trio.current_time() == 0.5
    assert peer.unanswered == ["the idle connection did not answer a PING within 0.5 s"]
    error = info.value
    assert (error.category, error.evidence, error.reconnect) == (
        FailureCategory.CONNECTION_BROKEN,
        Evidence.NOT_SENT,
        True,
    )
    assert "the idle HTTP/3 connection did not answer a PING within 0.5 s" in str(error)


async def test_a_connection_that_ends_during_the_check_fails_it_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    idle = IdlePing(trio.current_time())
    peer = Peer(idle)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:

            async def end() -> None:
                await trio.sleep(0.1)
                peer.closed = True
                peer.wake()

            nursery.start_soon(end)
            with pytest.raises(WireError, match="did not answer a PING") as info:
                await idle.check(peer, progress_at_pool(), "HTTP/2")
    assert trio.current_time() == 0.1
    assert info.value.reconnect


async def test_an_interrupted_attempt_stops_checking_and_leaves_the_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    idle = IdlePing(trio.current_time())
    peer = Peer(idle)
    progress = progress_at_pool()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:

            async def interrupt() -> None:
                await trio.sleep(0.1)
                progress.interrupted = True
                peer.wake()

            nursery.start_soon(interrupt)
            with pytest.raises(WireError) as info:
                await idle.check(peer, progress, "HTTP/2")
    assert (info.value.category, info.value.evidence) == (
        FailureCategory.TIMEOUT,
        Evidence.NOT_SENT,
    )
    assert not peer.closed  # a PING unanswered for 0.1 s is no proof of a dead peer
    assert idle.sent == 1  # a later check waits for the same answer


# --- a request's field section ------------------------------------------------------------------


def request(
    headers: list[tuple[bytes, bytes]], method: str = "GET", body: bytes = b""
) -> WireRequest:
    return WireRequest(method, "/p?q=1", headers, body, None)


def test_pseudo_headers_first_and_connection_specific_fields_left_out() -> None:
    fields = request_headers(
        request(
            [
                (b"Host", b"example.org"),
                (b"Host", b"second.example"),
                (b"Connection", b"keep-alive"),
                (b"Keep-Alive", b"5"),
                (b"Transfer-Encoding", b"chunked"),
                (b"Upgrade", b"h2c"),
                (b"Proxy-Connection", b"close"),
                (b"TE", b"gzip"),
                (b"X-Thing", b"1"),
            ]
        ),
        scheme=b"https",
        authority=b"origin.example",
    )
    assert fields == [
        (b":method", b"GET"),
        (b":scheme", b"https"),
        (b":authority", b"example.org"),  # the first Host wins over the origin's
        (b":path", b"/p?q=1"),
        (b"x-thing", b"1"),
    ]


def test_te_trailers_and_a_known_length_are_kept() -> None:
    fields = request_headers(
        request([(b"TE", b" Trailers ")], "POST", b"12345"), scheme=b"https", authority=b"a"
    )
    assert fields[4:] == [(b"te", b" Trailers "), (b"content-length", b"5")]
    given = request_headers(
        request([(b"Content-Length", b"5")], "POST", b"12345"), scheme=b"https", authority=b"a"
    )
    assert given[4:] == [(b"content-length", b"5")]  # not twice


def test_credentials_go_through_the_protocols_sensitive_form_only() -> None:
    class Sensitive(tuple[bytes, bytes]):
        def __new__(cls, name: bytes, value: bytes) -> Sensitive:
            return super().__new__(cls, (name, value))

    fields = request_headers(
        request(
            [
                (b"Authorization", b"Bearer t"),
                (b"Proxy-Authorization", b"Basic x"),
                (b"Cookie", b"short=1"),
                (b"Cookie", b"a-long-cookie=" + b"v" * 20),
                (b"Accept", b"*/*"),
            ]
        ),
        scheme=b"https",
        authority=b"a",
        sensitive=Sensitive,
    )
    kinds = [(name, type(field) is Sensitive) for field in fields[4:] for name in field[:1]]
    assert kinds == [
        (b"authorization", True),
        (b"proxy-authorization", True),
        (b"cookie", True),
        (b"cookie", False),
        (b"accept", False),
    ]
    plain = request_headers(request([(b"Authorization", b"x")]), scheme=b"https", authority=b"a")
    assert type(plain[4]) is tuple


def test_a_field_section_made_again_for_the_same_request_is_the_one_for_its_connection() -> None:
    """A template's calls share one WireRequest: its field section is kept, but only for the
    scheme, authority and credential form it was made for; each call gets its own list."""

    def never_indexed(name: bytes, value: bytes) -> tuple[bytes, bytes]:
        return (name, b"hidden:" + value)

    shared = request([(b"Authorization", b"Bearer t"), (b"Accept", b"*/*")])
    first = request_headers(shared, scheme=b"https", authority=b"a.example")
    first.append((b"x-mine", b"1"))  # a caller's list is its own
    again = request_headers(shared, scheme=b"https", authority=b"a.example")
    assert again == first[:-1]
    other = request_headers(shared, scheme=b"http", authority=b"b.example")
    assert other[1:3] == [(b":scheme", b"http"), (b":authority", b"b.example")]
    hidden = request_headers(
        shared, scheme=b"http", authority=b"b.example", sensitive=never_indexed
    )
    assert hidden[4] == (b"authorization", b"hidden:Bearer t")
    assert request_headers(shared, scheme=b"http", authority=b"b.example")[4] == (
        b"authorization",
        b"Bearer t",
    )
