"""Hostile input, from the caller and from the server: a clear error, true evidence, no hang.

The caller's side: malformed URLs and CR/LF/NUL in header names and values are refused before
anything is sent (no connection is even opened). The server's side: oversized heads, invalid
``Content-Length``, broken chunked encoding, garbage instead of HTTP, bodies without end, and
HTTP/2 peers that break the protocol. Each case checks the exception type and category, the
message, the evidence against what the server really received, and that the call ended well
inside its deadline (every test is bounded by ``trio.fail_after``).

Garbage that arrives after the server *executed* a non-idempotent request must come out as
``HttpAmbiguousExecutionError``: the server's record says it ran.
"""

from __future__ import annotations

import gzip
import ipaddress
import socket
import struct
from collections.abc import Mapping
from typing import Any

import hpack
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import trio_retry
from benchmarks.invariants import sockets_connected_to
from trio_retry import (
    ConnectFailed,
    DeadlineExceeded,
    Evidence,
    FailureCategory,
    HttpAmbiguousExecutionError,
    InvalidRequest,
    ProtocolFailed,
    RequestFailed,
    StageTimeouts,
    TrioRetryError,
)
from trio_retry.testing import EndlessBody, FaultServer, Raw, Respond, Stall, refused_port

from .conftest import LIMIT, client_for, server_for

FUZZ = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def h2_frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    """One HTTP/2 frame (RFC 9113 §4.1)."""
    header = struct.pack(">I", len(payload))[1:] + bytes((kind, flags))
    return header + struct.pack(">I", stream_id) + payload


def h2_headers(*fields: tuple[bytes, bytes], flags: int = 0x4, stream_id: int = 1) -> bytes:
    """A HEADERS frame (END_HEADERS, plus END_STREAM with ``flags=0x5``), HPACK-encoded."""
    return h2_frame(0x1, flags, stream_id, hpack.Encoder().encode(list(fields)))


# --- the caller's input -------------------------------------------------------------------------


class LoopbackResolver(trio.abc.HostnameResolver):
    """Resolves ``localhost`` to 127.0.0.1 and nothing else: a fuzzed host name can never send
    a packet off this machine (DNS included)."""

    async def getaddrinfo(
        self, host: bytes | None, port: bytes | str | int | None, *args: Any, **kwargs: Any
    ) -> Any:
        name = host.decode("ascii", "replace") if isinstance(host, bytes) else str(host)
        if name.lower() != "localhost":
            raise socket.gaierror(socket.EAI_NONAME, f"no such host {name!r} (loopback only)")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", int(port or 0)))]

    async def getnameinfo(self, *args: Any) -> Any:  # pragma: no cover - unused
        raise NotImplementedError


def _only_loopback(url: str) -> bool:
    """False when ``url`` names a numeric address other than 127.0.0.1 (numeric hosts never
    reach the resolver): such examples are skipped, so nothing leaves the machine."""
    from urllib.parse import urlsplit

    try:
        host = urlsplit(url.strip()).hostname
    except ValueError:
        return True
    if not host:
        return True
    try:
        return ipaddress.ip_address(host) == ipaddress.ip_address("127.0.0.1")
    except ValueError:
        pass
    try:
        return socket.inet_aton(host) == socket.inet_aton("127.0.0.1")  # "127.1", "0x7f.1"...
    except (OSError, ValueError):
        return True  # a name: the LoopbackResolver answers it


MALFORMED_URLS = [
    ("", "scheme"),
    ("127.0.0.1/path", "scheme"),
    ("ftp://127.0.0.1/file", "scheme"),
    ("javascript:alert(1)", "scheme"),
    ("http://", "host"),
    ("http:///path", "host"),
    ("http://127.0.0.1:99999/", "malformed"),
    ("http://127.0.0.1:port/", "malformed"),
    ("http://127.0.0.1:8080:80/", "malformed"),
    ("http://[::1/", "malformed"),
    ("http://☃.example/", "IDNA"),  # (userinfo is BasicAuth since #32: not malformed)
    ("http://127.0.0.1/a b", "whitespace"),
    ("http://127.0.0.1/a\r\nX-Injected: 1", "CR"),
    ("http://127.0.0.1/\x00", "NUL"),
    ("http://exa\nmple/", "LF"),
]


@pytest.mark.parametrize(("url", "says"), MALFORMED_URLS)
async def test_malformed_url_is_refused_before_anything_is_sent(
    any_server: FaultServer, url: str, says: str
) -> None:
    async with client_for(any_server) as client:
        with trio.fail_after(LIMIT), pytest.raises(InvalidRequest) as info:
            await client.get(url)
    error = info.value
    assert (error.evidence, error.category) == (Evidence.NOT_SENT, FailureCategory.INVALID_REQUEST)
    assert error.attempts == []
    assert says.lower() in str(error).lower()
    assert any_server.connections_accepted == 0


@pytest.mark.parametrize("url", [b"http://127.0.0.1/", None, 42])
async def test_a_url_that_is_not_a_string_is_refused(url: Any) -> None:
    async with trio_retry.Client() as client:
        with pytest.raises(InvalidRequest, match="str"):
            await client.get(url)


URL_PARTS = st.tuples(
    st.sampled_from(["http", "https", "HTTP", "ftp", "", "ht tp", "http\n", "h\x00"]),
    st.sampled_from(["://", ":/", ":", "//", ""]),
    st.sampled_from(["", "user@", "user:pw@", "@", ":@"]),
    st.sampled_from(
        [
            *("127.0.0.1", "localhost", "[::1", "", "exa mple", "ex\x00", "xn--nxasmq6b"),
            *("ünï.example", "%41", "a" * 300, "1.2.3.4.5", "[127.0.0.1]", "-", "."),
        ]
    ),
    st.sampled_from(["", ":", ":0", ":99999", ":-1", ":abc", ":8080:80", ":1"]),
    st.text(max_size=20),
)


@FUZZ
@given(url=st.one_of(st.text(max_size=60), URL_PARTS.map("".join)))
def test_any_url_text_ends_in_a_request_failed_never_anything_else(url: str) -> None:
    assume(_only_loopback(url))

    async def main() -> RequestFailed | None:
        trio.socket.set_custom_hostname_resolver(LoopbackResolver())
        async with trio_retry.Client(retry=trio_retry.RetryPolicy(max_attempts=1)) as client:
            with trio.fail_after(LIMIT):
                try:
                    await client.get(url, deadline=2.0)
                except RequestFailed as exc:
                    return exc
        # A response (from some local service) is fine too. Any exception that is not a
        # RequestFailed fails the test.
        return None

    error = trio.run(main)
    if error is not None:
        # Malformed, or a fine URL to nowhere (refused, unresolvable): nothing was sent.
        assert error.evidence is Evidence.NOT_SENT, error
        if isinstance(error, InvalidRequest):
            assert error.attempts == []


CRLF_HEADERS: list[Any] = [
    {"X-Test": "a\r\nX-Injected: 1"},
    {"X-Test": "a\nb"},
    {"X-Test": "a\rb"},
    {"X-Test": "a\x00b"},
    {"X-Test": "trailing\r\n"},
    {"X-Te\r\nst": "v"},
    {"X-Test\n": "v"},
    {"X-\x00Test": "v"},
    {"X Test": "v"},
    {"X:Test": "v"},
    {"": "v"},
    [("X-Test", "a\r\nb")],
    [(b"X-Test", b"a\r\nb")],
    {"Authorization": "Bearer s3cret\r\nX-Injected: 1"},
]


@pytest.mark.parametrize("headers", CRLF_HEADERS)
async def test_bad_header_bytes_are_refused_before_anything_is_sent(
    any_server: FaultServer, headers: Any
) -> None:
    async with client_for(any_server) as client:
        with trio.fail_after(LIMIT), pytest.raises(InvalidRequest) as info:
            await client.post(any_server.url + "/pay", headers=headers, content=b"amount=5")
    error = info.value
    assert (error.evidence, error.category) == (Evidence.NOT_SENT, FailureCategory.INVALID_REQUEST)
    assert "header" in str(error)
    assert "s3cret" not in str(error)  # a refused value is never echoed
    assert any_server.connections_accepted == 0
    assert any_server.requests == []


async def test_bad_header_bytes_from_every_other_source_are_refused(
    any_server: FaultServer,
) -> None:
    url = any_server.url + "/pay"
    # A wrong constructor argument is a ValueError (#15: TypeError/ValueError at construction).
    with pytest.raises(ValueError, match="header"):
        client_for(any_server, headers={"X-Default": "a\r\nb"})

    class InjectingAuth:
        async def headers(self) -> Mapping[str, str]:
            return {"Authorization": "Bearer x\r\nX-Injected: 1"}

        async def refresh(self) -> None:
            return None

    async with client_for(any_server) as client:
        with trio.fail_after(LIMIT):
            with pytest.raises(InvalidRequest, match="header"):
                await client.post(url, content=b"x", idempotency_key="key\r\nX-Injected: 1")
            with pytest.raises(InvalidRequest, match="method"):
                await client.request("GET\r\nX-Injected: 1", url)
            with pytest.raises(InvalidRequest, match="method"):
                await client.request("GE T", url)
    async with client_for(any_server, auth=InjectingAuth()) as client:
        with trio.fail_after(LIMIT), pytest.raises(InvalidRequest, match="header") as info:
            await client.get(url)
    assert info.value.evidence is Evidence.NOT_SENT
    assert any_server.connections_accepted == 0


LATIN1 = st.characters(max_codepoint=255)


@FUZZ
@given(
    name=st.sampled_from(["X-Fuzz", "x-fuzz", "X_Fuzz", "X.F~z!"]),
    value=st.text(LATIN1, max_size=12),
    http2=st.booleans(),
)
def test_any_header_value_is_sent_as_is_or_refused_before_anything_is_sent(
    name: str, value: str, http2: bool
) -> None:
    must_refuse = any(c in value for c in "\r\n\x00")  # SPEC §10
    # The other control characters (but tab) are refused too, the same on both protocols.
    refused = must_refuse or any((c < " " and c != "\t") or c == "\x7f" for c in value)

    async def main() -> tuple[object, FaultServer]:
        server = FaultServer(http2=http2)
        result: object
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve)
            async with client_for(server, retry=trio_retry.RetryPolicy(max_attempts=1)) as client:
                with trio.fail_after(LIMIT):
                    try:
                        result = await client.get(server.url + "/h", headers={name: value})
                    except RequestFailed as exc:
                        result = exc
            nursery.cancel_scope.cancel()
        return result, server

    result, server = trio.run(main)
    if refused:
        assert isinstance(result, InvalidRequest), f"{value!r} was not refused: {result!r}"
        assert (result.evidence, result.category) == (
            Evidence.NOT_SENT,
            FailureCategory.INVALID_REQUEST,
        )
        assert server.connections_accepted == 0
    else:
        assert isinstance(result, trio_retry.Response), result
        assert result.status == 200
        # Surrounding spaces and tabs are not part of a field value (RFC 9110 §5.5): they are
        # removed before sending, on HTTP/1.1 as HTTP/2 strips them (RFC 9113 §8.2.1).
        assert server.requests[-1].header(name) == value.strip(" \t")


async def test_a_header_value_outside_latin1_is_an_invalid_request(
    any_server: FaultServer,
) -> None:
    async with client_for(any_server) as client:
        with trio.fail_after(LIMIT), pytest.raises(InvalidRequest):
            await client.get(any_server.url + "/", headers={"X-Price": "5 €"})
    assert any_server.connections_accepted == 0


async def test_a_request_never_carries_both_transfer_encoding_and_content_length(
    nursery: trio.Nursery,
) -> None:
    server = server_for("h1")
    await nursery.start(server.serve)
    async with client_for(server) as client:
        with trio.fail_after(LIMIT):
            try:
                await client.post(
                    server.url + "/te", headers={"Transfer-Encoding": "chunked"}, content=b"abc"
                )
            except InvalidRequest:
                return  # refusing it is fine too
    [record] = server.requests
    assert not (record.header("transfer-encoding") and record.header("content-length"))


async def test_a_contradicting_content_length_is_refused_before_sending(
    nursery: trio.Nursery,
) -> None:
    server = server_for("h2c")
    await nursery.start(server.serve)
    async with client_for(server) as client:
        with trio.fail_after(LIMIT), pytest.raises(RequestFailed) as info:
            await client.post(server.url + "/cl", headers={"Content-Length": "5"}, content=b"abc")
    assert info.value.evidence is Evidence.NOT_SENT
    assert server.requests == []


# --- hostile servers: HTTP/1.1 -------------------------------------------------------------------


async def call(
    client: trio_retry.Client, method: str, url: str, **options: Any
) -> tuple[BaseException | trio_retry.Response, float]:
    """The call's response or exception, and how long it took; bounded by LIMIT."""
    start = trio.current_time()
    with trio.fail_after(LIMIT):
        try:
            result: BaseException | trio_retry.Response = await client.request(
                method, url, content=b"amount=5" if method == "POST" else None, **options
            )
        except TrioRetryError as exc:
            result = exc
    return result, trio.current_time() - start


def expect_failure(
    result: object,
    kind: type[TrioRetryError],
    category: FailureCategory,
    evidence: Evidence,
    says: str,
) -> Any:
    assert isinstance(result, kind), result
    assert getattr(result, "category", None) is category, result
    assert getattr(result, "evidence", None) is evidence, result
    assert says.lower() in str(result).lower(), result
    return result


async def test_oversized_head_is_a_protocol_failure(any_server: FaultServer) -> None:
    any_server.default = Respond(200, headers={"X-Big": "a" * 70_000})
    async with client_for(any_server) as client:
        result, _ = await call(client, "GET", any_server.url + "/big")
        error = expect_failure(
            result,
            ProtocolFailed,
            FailureCategory.REMOTE_PROTOCOL,
            Evidence.SENT_NO_RESPONSE,
            "max_header_bytes",
        )
        # On a fresh connection: not retried, the same server would answer the same way.
        assert len(error.attempts) == 1
        # It ended on the oversized head itself, never by waiting for a timeout (a behaviour
        # check: how long that took is for benchmarks/, not a test).
        assert {a.category for a in error.attempts} == {FailureCategory.REMOTE_PROTOCOL}
        assert any_server.executed_count("GET", "/big") == 1
        result, _ = await call(client, "POST", any_server.url + "/pay")
    error = expect_failure(
        result,
        HttpAmbiguousExecutionError,
        FailureCategory.REMOTE_PROTOCOL,
        Evidence.SENT_NO_RESPONSE,
        "may have executed",
    )
    assert len(error.attempts) == 1
    assert any_server.executed_count("POST", "/pay") == 1  # it did run


async def test_many_small_headers_count_against_the_limit(any_server: FaultServer) -> None:
    any_server.default = Respond(200, headers=[(f"X-H{i}", "v" * 30) for i in range(600)])
    async with client_for(any_server, max_header_bytes=16_384) as client:
        result, _ = await call(client, "GET", any_server.url + "/many")
    error = expect_failure(
        result,
        ProtocolFailed,
        FailureCategory.REMOTE_PROTOCOL,
        Evidence.SENT_NO_RESPONSE,
        "max_header_bytes",
    )
    assert {a.category for a in error.attempts} == {FailureCategory.REMOTE_PROTOCOL}


BAD_HEADS = [
    b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\nabc",
    b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
    b"HTTP/1.1 200 OK\r\nContent-Length: 1e3\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
    b"SSH-2.0-OpenSSH_9.6\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 32,
    b"HTTP/1.1 999999 Nope\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nBad Header Name: x\r\n\r\n",
    b"\r\n\r\n\r\n",
]


@pytest.mark.parametrize("data", BAD_HEADS)
async def test_not_http_instead_of_a_response(h1_server: FaultServer, data: bytes) -> None:
    h1_server.default = Raw(data)
    async with client_for(h1_server) as client:
        result, elapsed = await call(client, "GET", h1_server.url + "/garbage")
        expect_failure(
            result,
            ProtocolFailed,
            FailureCategory.REMOTE_PROTOCOL,
            Evidence.SENT_NO_RESPONSE,
            "not valid HTTP/1.1",
        )
        assert elapsed < 2
        result, _ = await call(client, "POST", h1_server.url + "/pay")
    expect_failure(
        result,
        HttpAmbiguousExecutionError,
        FailureCategory.REMOTE_PROTOCOL,
        Evidence.SENT_NO_RESPONSE,
        "may have executed",
    )
    assert h1_server.executed_count("POST", "/pay") == 1


async def test_garbage_is_refused_at_once_even_if_the_connection_stays_open(
    h1_server: FaultServer,
) -> None:
    h1_server.default = Raw(b"SSH-2.0-OpenSSH_9.6\r\n", close=False)
    async with client_for(h1_server) as client:
        result, elapsed = await call(client, "GET", h1_server.url + "/ssh", deadline=5)
    error = expect_failure(
        result,
        ProtocolFailed,
        FailureCategory.REMOTE_PROTOCOL,
        Evidence.SENT_NO_RESPONSE,
        "SSH-2.0",
    )
    assert len(error.attempts) == 1  # a fresh connection: not retried
    assert elapsed < 1  # not the deadline: the first bytes cannot start an HTTP response


BROKEN_CHUNKS = [
    b"zz\r\nhello\r\n0\r\n\r\n",  # not a hex size
    b"5\r\nhello world\r\n0\r\n\r\n",  # more data than the size said
    b"-5\r\nhello\r\n0\r\n\r\n",  # a negative size
]


@pytest.mark.parametrize("chunks", BROKEN_CHUNKS)
async def test_broken_chunked_encoding(h1_server: FaultServer, chunks: bytes) -> None:
    h1_server.default = Raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks)
    async with client_for(h1_server) as client:
        result, elapsed = await call(client, "GET", h1_server.url + "/chunks")
        expect_failure(
            result,
            ProtocolFailed,
            FailureCategory.REMOTE_PROTOCOL,
            Evidence.PARTIAL_RESPONSE,
            "not valid HTTP/1.1",
        )
        assert elapsed < 2
        result, _ = await call(client, "POST", h1_server.url + "/pay")
    # The head arrived: the request ran and that is known. Not ambiguous, and not retried.
    error = expect_failure(
        result, ProtocolFailed, FailureCategory.REMOTE_PROTOCOL, Evidence.PARTIAL_RESPONSE, ""
    )
    assert len(error.attempts) == 1
    assert h1_server.executed_count("POST", "/pay") == 1


async def test_a_chunked_body_cut_short_is_a_broken_connection(h1_server: FaultServer) -> None:
    h1_server.default = Raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nonly")
    async with client_for(h1_server) as client:
        result, _ = await call(client, "GET", h1_server.url + "/short")
    expect_failure(
        result,
        trio_retry.ConnectionBroken,
        FailureCategory.CONNECTION_BROKEN,
        Evidence.PARTIAL_RESPONSE,
        "closed the connection",
    )


async def test_a_head_that_never_ends_is_cut_at_the_limit(h1_server: FaultServer) -> None:
    # Header lines without end, the connection held open: the limit, not the deadline, ends it.
    h1_server.default = Raw(b"HTTP/1.1 200 OK\r\n" + b"X-More: y\r\n" * 10_000, close=False)
    async with client_for(h1_server) as client:
        result, elapsed = await call(client, "GET", h1_server.url + "/slowloris", deadline=5)
    expect_failure(
        result,
        ProtocolFailed,
        FailureCategory.REMOTE_PROTOCOL,
        Evidence.SENT_NO_RESPONSE,
        "max_header_bytes",
    )
    assert elapsed < 2


async def test_a_head_that_stops_halfway_is_bounded_by_the_first_byte_timeout(
    h1_server: FaultServer,
) -> None:
    h1_server.default = Raw(b"HTTP/1.1 200 OK\r\nX-Half: ", close=False)
    timeouts = StageTimeouts(first_byte=0.3)
    async with client_for(h1_server, stage_timeouts=timeouts) as client:
        result, elapsed = await call(client, "GET", h1_server.url + "/half", deadline=5)
        expect_failure(
            result,
            DeadlineExceeded,
            FailureCategory.TIMEOUT,
            Evidence.SENT_NO_RESPONSE,
            "no response head within first_byte=0.3 s",
        )
        assert 0.9 <= elapsed < 2.5  # three attempts of 0.3 s, plus backoff
        result, elapsed = await call(client, "POST", h1_server.url + "/pay", deadline=0.5)
    assert isinstance(result, HttpAmbiguousExecutionError)
    assert elapsed < 1


async def test_bytes_after_a_response_are_never_taken_for_the_next_one(
    h1_server: FaultServer,
) -> None:
    # A response with a wrong Content-Length: the rest looks like a second response. It must
    # not be handed to the next request as if the server had answered it (a desync).
    smuggled = b"HTTP/1.1 201 Created\r\nContent-Length: 5\r\n\r\nforgd"
    h1_server.script(Raw(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" + smuggled, close=False))
    h1_server.default = Respond(200, body=b"real")
    async with client_for(h1_server) as client:
        with trio.fail_after(LIMIT):
            first = await client.get(h1_server.url + "/one")
            second = await client.post(h1_server.url + "/two", content=b"pay")
    assert (first.status, first.content) == (200, b"ok")
    assert (second.status, second.content) == (200, b"real")
    assert not second.attempts[0].connection_reused
    assert h1_server.executed_count("POST", "/two") == 1


# --- bodies without end ---------------------------------------------------------------------


async def test_endless_body_beyond_max_body_bytes(any_server: FaultServer) -> None:
    any_server.default = EndlessBody()
    async with client_for(any_server, max_body_bytes=1_000_000) as client:
        result, elapsed = await call(client, "GET", any_server.url + "/endless")
        error = expect_failure(
            result,
            ProtocolFailed,
            FailureCategory.REMOTE_PROTOCOL,
            Evidence.PARTIAL_RESPONSE,
            "max_body_bytes",
        )
        assert len(error.attempts) == 1  # fetching it again would fetch the same body
        assert elapsed < 3
        with trio.fail_after(LIMIT):
            async with client.stream("GET", any_server.url + "/endless") as response:
                with pytest.raises(ProtocolFailed, match="max_body_bytes") as info:
                    await response.aread()
        assert info.value.evidence is Evidence.PARTIAL_RESPONSE
    assert sockets_connected_to({any_server.port}) == []


async def test_endless_body_without_a_limit_ends_at_the_deadline(
    any_server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    any_server.default = EndlessBody(chunk=b"e" * 1000, rate=100_000)
    async with client_for(any_server) as client:
        result, elapsed = await call(client, "GET", any_server.url + "/endless", deadline=2.0)
    expect_failure(
        result, DeadlineExceeded, FailureCategory.TIMEOUT, Evidence.PARTIAL_RESPONSE, "deadline"
    )
    assert elapsed == pytest.approx(2.0)


async def test_a_decompression_bomb_stops_at_max_body_bytes(any_server: FaultServer) -> None:
    bomb = gzip.compress(b"\0" * 20_000_000)  # 20 MB of zeros in about 20 KB
    any_server.default = Respond(200, headers={"Content-Encoding": "gzip"}, body=bomb)
    async with client_for(any_server, max_body_bytes=1_000_000) as client:
        result, elapsed = await call(client, "GET", any_server.url + "/bomb")
    error = expect_failure(
        result,
        ProtocolFailed,
        FailureCategory.REMOTE_PROTOCOL,
        Evidence.RESPONSE_RECEIVED,  # the whole compressed body arrived
        "max_body_bytes",
    )
    assert len(error.attempts) == 1
    assert elapsed < 3


# --- hostile servers: HTTP/2 ----------------------------------------------------------------

H2_VIOLATIONS = {
    "DATA on stream 0": (h2_frame(0x0, 0x1, 0, b"data"), "stream id"),
    "zero WINDOW_UPDATE": (h2_frame(0x8, 0x0, 0, struct.pack(">I", 0)), "non-compliant"),
    "window overflow": (h2_frame(0x8, 0x0, 0, struct.pack(">I", 0x7FFFFFFF)), "flow control"),
    "SETTINGS of a bad size": (h2_frame(0x4, 0x0, 0, b"\x00" * 7), "invalid"),
    "PUSH_PROMISE with push off": (
        h2_frame(0x5, 0x4, 1, struct.pack(">I", 2) + hpack.Encoder().encode([(":status", "200")])),
        "pushed",
    ),
    "frame over the size limit": (h2_frame(0x0, 0x0, 1, b"\x00" * 20_000), "max_frame_size"),
    "upper-case header name": (
        h2_headers((b":status", b"200"), (b"X-Upper", b"v"), flags=0x5),
        "uppercase",
    ),
    "no :status": (h2_headers((b"x", b"v"), flags=0x5), ":status"),
    "connection-specific header": (
        h2_headers((b":status", b"200"), (b"connection", b"close"), flags=0x5),
        "connection-specific",
    ),
    "undecodable HPACK": (h2_frame(0x1, 0x5, 1, b"\xff\xff\xff\xff"), "decod"),
    "RST_STREAM on stream 0": (h2_frame(0x3, 0x0, 0, struct.pack(">I", 1)), "stream id"),
    "GOAWAY too short": (h2_frame(0x7, 0x0, 0, b"\x00" * 4), "goaway"),
    "GOAWAY on a stream": (h2_frame(0x7, 0x0, 1, b"\x00" * 8), "goaway"),
    "HTTP/1.1 instead of frames": (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "frame"),
}


@pytest.mark.parametrize("case", H2_VIOLATIONS, ids=list(H2_VIOLATIONS))
async def test_http2_protocol_violation(h2_server: FaultServer, case: str) -> None:
    data, says = H2_VIOLATIONS[case]
    h2_server.default = Raw(data, close=False)
    async with client_for(h2_server) as client:
        result, elapsed = await call(client, "GET", h2_server.url + "/get")
        expect_failure(
            result,
            ProtocolFailed,
            FailureCategory.REMOTE_PROTOCOL,
            Evidence.SENT_NO_RESPONSE,
            says,
        )
        assert elapsed < 2
        result, _ = await call(client, "POST", h2_server.url + "/pay")
    expect_failure(
        result,
        HttpAmbiguousExecutionError,
        FailureCategory.REMOTE_PROTOCOL,
        Evidence.SENT_NO_RESPONSE,
        "may have executed",
    )
    assert h2_server.executed_count("POST", "/pay") == 1
    assert sockets_connected_to({h2_server.port}) == []


async def test_a_violation_after_the_head_is_a_partial_response(h2_server: FaultServer) -> None:
    # A head, 80 KiB of body (more than one read, so the head is surely seen first), then
    # DATA on stream 0.
    head = h2_headers((b":status", b"200"))
    body = h2_frame(0x0, 0x0, 1, b"b" * 16_384) * 5
    h2_server.default = Raw(head + body + h2_frame(0x0, 0x1, 0, b"boom"), close=False)
    async with client_for(h2_server) as client:
        result, _ = await call(client, "POST", h2_server.url + "/pay")
    error = expect_failure(
        result,
        ProtocolFailed,
        FailureCategory.REMOTE_PROTOCOL,
        Evidence.PARTIAL_RESPONSE,
        "stream id",
    )
    assert len(error.attempts) == 1  # the side effect is known: not retried, not ambiguous
    assert h2_server.executed_count() == 1


async def test_the_next_call_gets_a_fresh_connection(h2_server: FaultServer) -> None:
    h2_server.script(Raw(h2_frame(0x0, 0x1, 0, b"data"), close=False))
    async with client_for(h2_server) as client:
        with trio.fail_after(LIMIT):
            # On a fresh connection: not retried (the same server would answer the same way).
            with pytest.raises(ProtocolFailed) as info:
                await client.get(h2_server.url + "/broken")
            response = await client.get(h2_server.url + "/next")
    (broken,) = info.value.attempts
    assert (broken.category, broken.evidence, broken.connection_reused) == (
        FailureCategory.REMOTE_PROTOCOL,
        Evidence.SENT_NO_RESPONSE,
        False,
    )
    (attempt,) = response.attempts
    assert (attempt.status, attempt.connection_reused) == (200, False)
    assert h2_server.connections_accepted == 2


async def test_neighbours_of_a_violation_keep_true_evidence(h2_server: FaultServer) -> None:
    # Stream 1 has run and is stalled when stream 3 gets a frame that kills the connection:
    # stream 1's POST ran, so it must come out ambiguous, never NOT_SENT.
    h2_server.route("POST", "/slow", Stall(1.0))
    h2_server.route("GET", "/bad", Raw(h2_frame(0x0, 0x1, 0, b"data"), close=False))
    outcomes: dict[str, object] = {}
    async with client_for(h2_server) as client:

        async def post() -> None:
            outcomes["post"], _ = await call(client, "POST", h2_server.url + "/slow")

        with trio.fail_after(LIMIT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(post)
                await trio.sleep(0.2)
                outcomes["get"], _ = await call(client, "GET", h2_server.url + "/bad")
    assert isinstance(outcomes["get"], trio_retry.Response)  # retried on a new connection
    expect_failure(
        outcomes["post"],
        HttpAmbiguousExecutionError,
        FailureCategory.REMOTE_PROTOCOL,
        Evidence.SENT_NO_RESPONSE,
        "may have executed",
    )
    assert h2_server.executed_count("POST", "/slow") == 1


async def test_a_malformed_response_fails_only_its_own_stream(h2_server: FaultServer) -> None:
    # RFC 9113 §8.1.1: a malformed response is a stream error. Stream 1 (a POST) is being
    # served when stream 3 gets a head with an upper-case field name: only stream 3 fails
    # (and is retried on the same connection); the POST is not made ambiguous by it. The
    # fields are sent never-indexed so the client's HPACK table stays in step with the
    # server's own encoder.
    fields = [hpack.NeverIndexedHeaderTuple(b":status", b"200"),
              hpack.NeverIndexedHeaderTuple(b"X-Upper", b"v")]  # fmt: skip
    bad_head = h2_frame(0x1, 0x5, 3, hpack.Encoder().encode(fields))
    h2_server.route("POST", "/slow", Stall(1.0))
    h2_server.route("GET", "/bad", Raw(bad_head, close=False), Respond(200, body=b"good"))
    outcomes: dict[str, object] = {}
    async with client_for(h2_server) as client:

        async def post() -> None:
            outcomes["post"], _ = await call(client, "POST", h2_server.url + "/slow")

        with trio.fail_after(LIMIT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(post)
                await trio.sleep(0.2)
                outcomes["get"], _ = await call(client, "GET", h2_server.url + "/bad")
    post, get = outcomes["post"], outcomes["get"]
    assert isinstance(post, trio_retry.Response), post
    assert post.status == 200
    assert isinstance(get, trio_retry.Response), get
    assert get.content == b"good"
    first, second = get.attempts
    assert (first.category, first.evidence) == (
        FailureCategory.REMOTE_PROTOCOL,
        Evidence.SENT_NO_RESPONSE,
    )
    assert "uppercase header name" in str(first.error)
    assert second.connection_reused
    assert h2_server.connections_accepted == 1
    assert h2_server.executed_count("POST", "/slow") == 1


async def test_an_unknown_frame_type_is_ignored_as_the_rfc_requires(
    h2_server: FaultServer,
) -> None:
    unknown = h2_frame(0xFA, 0x0, 0, b"extension")
    answer = h2_headers((b":status", b"200")) + h2_frame(0x0, 0x1, 1, b"fine")
    h2_server.default = Raw(unknown + answer, close=False)
    async with client_for(h2_server) as client:
        with trio.fail_after(LIMIT):
            response = await client.get(h2_server.url + "/ext")
    assert (response.status, response.content) == (200, b"fine")


async def test_h2c_to_a_server_without_http2_fails_at_once(nursery: trio.Nursery) -> None:
    server = server_for("h1")  # answers the HTTP/2 preface with HTTP/1.1
    await nursery.start(server.serve)
    async with trio_retry.Client(http2_prior_knowledge=True) as client:
        result, elapsed = await call(client, "POST", server.url + "/pay", deadline=5)
    expect_failure(
        result,
        ProtocolFailed,
        FailureCategory.REMOTE_PROTOCOL,
        Evidence.NOT_SENT,  # the handshake failed: no request was sent
        "h2c",
    )
    assert elapsed < 2


async def test_a_refused_port_is_not_sent_and_quick() -> None:
    async with trio_retry.Client() as client:
        result, elapsed = await call(client, "POST", f"http://127.0.0.1:{refused_port()}/")
    expect_failure(result, ConnectFailed, FailureCategory.CONNECT, Evidence.NOT_SENT, "connect")
    assert elapsed < 2


@pytest.mark.parametrize(
    "body",
    [b"<html>not json</html>", b"", b'{"a": ', b"\xff\xfe\x00garbage"],
    ids=["html", "empty", "truncated", "not-utf8"],
)
async def test_a_body_that_is_not_json_is_a_trio_retry_error(
    nursery: trio.Nursery, body: bytes
) -> None:
    server = server_for("h1")
    server.default = Respond(200, body=body, headers={"Content-Type": "application/json"})
    await nursery.start(server.serve)
    async with trio_retry.Client() as client:
        response = await client.get(server.url + "/api")
    with pytest.raises(trio_retry.ResponseNotJSON, match="is not JSON") as info:
        response.json()
    assert isinstance(info.value, trio_retry.TrioRetryError)
    assert isinstance(info.value, ValueError)  # as json.JSONDecodeError is
    assert isinstance(info.value.__cause__, ValueError)
