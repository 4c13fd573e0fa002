"""Hostile input from the caller: refused before anything is sent, with a clear error.

Malformed URLs and CR/LF/NUL in header names and values (from the call, the client's defaults,
an auth hook, the idempotency key, the method) are refused before a connection is even opened:
``InvalidRequest``, ``NOT_SENT``, the server never sees a connection. Fuzzed URLs and header
values end in a ``RequestFailed`` or are sent as they are, never anything else. The hostile
*servers* are :mod:`tests.reliability.test_hostile`'s table.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import trio_retry
from tests.conftest import LIMIT, client_for, server_for
from trio_retry import Evidence, FailureCategory, InvalidRequest, RequestFailed
from trio_retry.testing import FaultServer

FUZZ = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


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
