"""Every NOT_SENT row of SPEC §3 and the transport rules of §6, end to end on loopback."""

from __future__ import annotations

import socket
import ssl
import sys
from typing import Any

import pytest
import trio

import trio_retry
from tests.conftest import FAST
from trio_retry import (
    ConnectFailed,
    Evidence,
    FailureCategory,
    HttpAmbiguousExecutionError,
    Stage,
)
from trio_retry.testing import (
    CloseAfterBody,
    CloseAfterHead,
    CloseBeforeRead,
    FaultServer,
    PartialBody,
    Respond,
    refused_port,
)

if sys.version_info < (3, 11):
    from exceptiongroup import ExceptionGroup


async def test_get_succeeds_and_reuses_the_connection(
    server: FaultServer, client: trio_retry.Client
) -> None:
    server.default = Respond(200, body=b"hello", headers=[("content-type", "text/plain")])
    first = await client.get(server.url + "/a")
    second = await client.get(server.url + "/b")
    assert (first.status, first.text, first.http_version) == (200, "hello", "HTTP/1.1")
    assert first.headers["Content-Type"] == "text/plain"
    assert [a.connection_reused for a in (*first.attempts, *second.attempts)] == [False, True]
    attempt = first.attempts[0]
    assert (attempt.stage, attempt.evidence, attempt.status) == (
        Stage.COMPLETE,
        Evidence.RESPONSE_RECEIVED,
        200,
    )
    assert attempt.decision is None
    assert attempt.bytes_sent > 0
    assert attempt.bytes_received > 0
    assert {"connect", "first_byte", "total"} <= attempt.timings.keys()
    assert server.connections_accepted == 1
    assert "0 active, 1 idle, 0 waiting" in repr(client)


async def test_connect_refused_post_is_retried_and_never_executed(
    client: trio_retry.Client,
) -> None:
    url = f"http://127.0.0.1:{refused_port()}/pay"
    with pytest.raises(ConnectFailed) as info:
        await client.post(url, content=b"{}")
    err = info.value
    assert err.evidence is Evidence.NOT_SENT
    assert err.category is FailureCategory.CONNECT
    assert [(a.stage, a.evidence) for a in err.attempts] == [(Stage.CONNECT, Evidence.NOT_SENT)] * 3
    assert isinstance(err.attempts[0].decision, trio_retry.RetryAllowed)
    assert err.decision == trio_retry.RetryDenied.max_attempts()
    assert isinstance(err.__cause__, Exception)


async def test_connect_keeps_the_error_of_each_address(client: trio_retry.Client) -> None:
    # Two addresses for one name, both refused: the error names each and why it failed, and
    # keeps each OSError (STYLE habit 18), not only the last address's.
    port = refused_port()
    addresses = [("127.0.0.1", port), ("127.0.0.2", port)]

    class TwoAddresses(trio.abc.HostnameResolver):
        async def getaddrinfo(self, host: Any, *args: Any, **kwargs: Any) -> Any:
            return [
                (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", addr)
                for addr in addresses
            ]

        async def getnameinfo(self, *args: Any) -> Any:  # pragma: no cover
            raise NotImplementedError

    trio.socket.set_custom_hostname_resolver(TwoAddresses())
    try:
        with pytest.raises(ConnectFailed) as info:
            await client.get(f"http://api.example.test:{port}/x")
    finally:
        trio.socket.set_custom_hostname_resolver(None)
    err = info.value
    assert (err.category, err.evidence) == (FailureCategory.CONNECT, Evidence.NOT_SENT)
    assert [a.stage for a in err.attempts] == [Stage.CONNECT] * 3
    assert f"127.0.0.1:{port} (Connection refused); 127.0.0.2:{port} (" in str(err)
    assert isinstance(err.__cause__, OSError)  # chained below the public error, as before
    group = err.__cause__.__cause__
    assert isinstance(group, ExceptionGroup)
    assert [type(e) for e in group.exceptions] == [ConnectionRefusedError] * 2


async def test_dns_failure_is_not_sent(client: trio_retry.Client) -> None:
    class NoSuchHost(trio.abc.HostnameResolver):
        async def getaddrinfo(self, host: Any, *args: Any, **kwargs: Any) -> Any:
            raise socket.gaierror(socket.EAI_NONAME, f"no such host {host!r}")

        async def getnameinfo(self, *args: Any) -> Any:  # pragma: no cover
            raise NotImplementedError

    trio.socket.set_custom_hostname_resolver(NoSuchHost())
    try:
        with pytest.raises(ConnectFailed) as info:
            await client.post("http://api.example.test/x", content=b"")
    finally:
        trio.socket.set_custom_hostname_resolver(None)
    assert info.value.category is FailureCategory.DNS
    assert [a.stage for a in info.value.attempts] == [Stage.DNS] * 3
    assert info.value.evidence is Evidence.NOT_SENT


async def test_tls_certificate_failure_is_permanent(tls_server: FaultServer) -> None:
    # The default context does not trust the trustme CA.
    async with trio_retry.Client(retry=FAST) as client:
        with pytest.raises(trio_retry.TLSFailed) as info:
            await client.get(tls_server.url + "/")
    err = info.value
    assert err.category is FailureCategory.TLS_CERTIFICATE
    assert len(err.attempts) == 1
    assert err.evidence is Evidence.NOT_SENT
    assert err.decision == trio_retry.RetryDenied.permanent_failure(FailureCategory.TLS_CERTIFICATE)
    assert "127.0.0.1" in str(err)
    assert "certificate" in str(err)
    assert tls_server.requests == []


async def test_tls_handshake_failure_is_not_sent_and_retried(server: FaultServer) -> None:
    # Speaking TLS to a cleartext server: the handshake fails before any request byte.
    https_url = server.url.replace("http://", "https://")
    async with trio_retry.Client(retry=FAST) as client:
        with pytest.raises(trio_retry.TLSFailed) as info:
            await client.post(https_url + "/pay", content=b"x")
    assert info.value.category is FailureCategory.TLS_HANDSHAKE
    assert [a.evidence for a in info.value.attempts] == [Evidence.NOT_SENT] * 3
    assert server.executed_count() == 0


async def test_tls_with_trustme(tls_server: FaultServer) -> None:
    tls_server.default = Respond(200, body=b"secure")
    async with trio_retry.Client(ssl_context=tls_server.client_ssl_context()) as client:
        response = await client.get(tls_server.url + "/s")
        again = await client.get(tls_server.url + "/s")
    assert response.content == b"secure"
    assert "tls" in response.attempts[0].timings
    assert again.attempts[0].connection_reused


async def test_stale_keepalive_connection_is_replaced_not_retried(
    server: FaultServer, client: trio_retry.Client
) -> None:
    server.script(Respond(200, body=b"one", close_after=True), Respond(200, body=b"two"))
    assert (await client.get(server.url + "/1")).content == b"one"
    with trio.fail_after(5):
        while server.connections_accepted < 1:  # pragma: no cover - already true
            await trio.sleep(0.01)
    await trio.sleep(0.05)  # let the server's close reach us
    response = await client.post(server.url + "/2", content=b"data")
    # The dead pooled connection was dropped before a byte was written: one attempt, fresh.
    assert [(a.connection_reused, a.evidence) for a in response.attempts] == [
        (False, Evidence.RESPONSE_RECEIVED)
    ]
    assert response.content == b"two"
    assert server.executed_count("POST") == 1
    assert server.connections_accepted == 2


async def test_post_read_then_closed_is_ambiguous_after_one_attempt(
    server: FaultServer, client: trio_retry.Client
) -> None:
    server.script(CloseAfterBody())
    with pytest.raises(HttpAmbiguousExecutionError) as info:
        await client.post(server.url + "/pay", content=b'{"amount": 5}')
    err = info.value
    assert not isinstance(err, trio_retry.RequestFailed)
    assert err.evidence is Evidence.SENT_NO_RESPONSE
    assert len(err.attempts) == 1
    assert err.attempts[0].stage in (Stage.AWAITING_RESPONSE, Stage.RESPONSE_HEAD)
    assert server.executed_count("POST", "/pay") == 1
    assert err.idempotency_key is None
    assert err.response is None
    assert err.__cause__ is not None
    assert "Idempotency-Key" in str(err)


async def test_ambiguous_error_carries_the_key_sent(
    server: FaultServer, client: trio_retry.Client
) -> None:
    # The caller overrides the key's effect: still non-idempotent, so ambiguous, with the key.
    server.script(CloseAfterBody())
    with pytest.raises(HttpAmbiguousExecutionError) as info:
        await client.post(
            server.url + "/pay",
            content=b"{}",
            idempotency_key="order-7",
            idempotency=trio_retry.Idempotency.NON_IDEMPOTENT,
        )
    assert info.value.idempotency_key == "order-7"
    assert dict(server.requests[0].headers)["idempotency-key"] == "order-7"


async def test_post_with_key_is_idempotent_and_retried_with_the_same_key(
    server: FaultServer, client: trio_retry.Client
) -> None:
    server.script(CloseAfterBody(), Respond(201, body=b"created"))
    response = await client.post(server.url + "/pay", content=b"{}", idempotency_key=True)
    assert response.status == 201
    keys = [dict(r.headers)["idempotency-key"] for r in server.requests]
    assert len(keys) == 2
    assert keys[0] == keys[1]
    assert len(keys[0]) == 38  # a UUID4 as an RFC 8941 sf-string (its quotes included)
    assert keys[0][0] == keys[0][-1] == '"'


@pytest.mark.parametrize(
    "fault", [CloseAfterBody(), CloseAfterBody(reset=True), CloseAfterHead(), CloseBeforeRead()]
)
async def test_get_sent_without_response_is_retried(
    server: FaultServer, client: trio_retry.Client, fault: object
) -> None:
    server.script(fault)  # type: ignore[arg-type]
    server.default = Respond(200, body=b"fine")
    response = await client.get(server.url + "/r")
    assert response.content == b"fine"
    first = response.attempts[0]
    assert first.evidence is Evidence.SENT_NO_RESPONSE
    assert first.category is FailureCategory.CONNECTION_BROKEN
    assert isinstance(first.decision, trio_retry.RetryAllowed)


async def test_partial_response_get_is_retried(
    server: FaultServer, client: trio_retry.Client
) -> None:
    server.script(PartialBody(declared_length=100, body=b"x" * 10))
    server.default = Respond(200, body=b"whole")
    response = await client.get(server.url + "/p")
    assert response.content == b"whole"
    assert response.attempts[0].evidence is Evidence.PARTIAL_RESPONSE
    assert response.attempts[0].stage is Stage.RESPONSE_BODY


@pytest.mark.parametrize("reset", [False, True])
async def test_partial_response_post_fails_plainly_and_is_not_retried(
    server: FaultServer, client: trio_retry.Client, reset: bool
) -> None:
    server.script(PartialBody(declared_length=100, body=b"x" * 10, reset=reset))
    with pytest.raises(trio_retry.ConnectionBroken) as info:
        await client.post(server.url + "/p", content=b"go")
    assert info.value.evidence is Evidence.PARTIAL_RESPONSE
    assert len(info.value.attempts) == 1
    assert info.value.decision == trio_retry.RetryDenied.not_retryable()
    assert server.executed_count("POST") == 1


async def test_invalid_headers_are_refused_before_anything_is_sent(
    server: FaultServer, client: trio_retry.Client
) -> None:
    for bad in ({"X-A": "1\r\nX-Injected: 1"}, {"X-A": "nul\x00"}, {"Bad Name": "v"}):
        with pytest.raises(trio_retry.InvalidRequest) as info:
            await client.get(server.url + "/", headers=bad)
        assert info.value.evidence is Evidence.NOT_SENT
        assert info.value.category is FailureCategory.INVALID_REQUEST
    assert server.requests == []


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://example.com/", "unsupported URL scheme"),
        ("http:///nohost", "no host"),
        ("http://exa mple.com/", "whitespace"),
        ("http://example.com:99999/", "malformed URL"),
        ("not a url", "whitespace"),
        ("/relative/only", "relative.*base_url="),
    ],
)
async def test_bad_urls_are_invalid_requests(
    client: trio_retry.Client, url: str, message: str
) -> None:
    with pytest.raises(trio_retry.InvalidRequest, match=message) as info:
        await client.get(url)
    assert info.value.evidence is Evidence.NOT_SENT


async def test_tls_context_is_verifying_by_default() -> None:
    async with trio_retry.Client() as client:
        context = client.config.ssl_context
    assert context.verify_mode is ssl.CERT_REQUIRED
    assert context.check_hostname


async def test_control_characters_and_non_ascii_urls(
    server: FaultServer, client: trio_retry.Client
) -> None:
    with pytest.raises(trio_retry.InvalidRequest, match="control characters"):
        await client.get(server.url + "/", headers={"X-A": "bell\x07"})
    with pytest.raises(trio_retry.InvalidRequest, match="control characters"):
        await client.get(server.url + "/a\x01b")
    assert server.requests == []
    await client.get(server.url + "/caf\u00e9?q=\u00fc")
    assert server.requests[0].path == "/caf%C3%A9?q=%C3%BC"


async def test_header_values_lose_surrounding_whitespace_on_the_wire(
    server: FaultServer, client: trio_retry.Client
) -> None:
    # HTTP/1.1 headers are written without a second validation pass, so the values the
    # client keeps must already be what may be sent (RFC 9110 §5.5: no surrounding OWS).
    headers = trio_retry.Headers({"X-Pad": " \tpadded value\t "})
    assert headers["x-pad"] == "padded value"
    await client.get(server.url + "/", headers={"X-Pad": "  a\tb  ", "X-Empty": " "})
    assert server.requests[0].header("x-pad") == "a\tb"
    assert server.requests[0].header("x-empty") == ""
