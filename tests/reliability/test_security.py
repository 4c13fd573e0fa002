"""Security defaults: certificates and host names are verified unless the caller says otherwise,
and credentials (Authorization, Proxy-Authorization, Cookie, Set-Cookie) never show up in a
repr, an exception, a log record or the CLI's ``--explain`` output."""

from __future__ import annotations

import io
import logging
import socket
import ssl
from typing import Any

import pytest
import trio

import trio_retry
from tests.conftest import FAST, LIMIT, client_for
from trio_retry import (
    BasicAuth,
    BearerAuth,
    Evidence,
    FailureCategory,
    Headers,
    HttpAmbiguousExecutionError,
    RequestFailed,
    TLSFailed,
)
from trio_retry._cli import run as cli_run
from trio_retry.testing import CloseAfterBody, FaultServer, Respond, refused_port

from ..client.proxy import LoopbackProxy

SECRETS = ("s3cret-bearer", "s3cret-cookie", "s3cret-proxy", "s3cret-basic", "s3cret-set")
SECRET_HEADERS = {
    "Authorization": "Bearer s3cret-bearer",
    "Cookie": "session=s3cret-cookie",
    "Proxy-Authorization": "Basic s3cret-proxy",
}


def assert_no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} leaked into: {text[:500]}"


@pytest.fixture(params=[False, True], ids=["http/1.1", "h2"])
async def tls_server(request: pytest.FixtureRequest, nursery: trio.Nursery) -> FaultServer:
    server = FaultServer(tls=True, http2=bool(request.param))
    await nursery.start(server.serve)
    return server


class NamesToLoopback(trio.abc.HostnameResolver):
    """Every name resolves to 127.0.0.1: the client connects to the test server under a name
    its certificate does not carry."""

    async def getaddrinfo(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", int(port)))]

    async def getnameinfo(self, *args: Any) -> Any:  # pragma: no cover - unused
        raise NotImplementedError


# --- verification ---------------------------------------------------------------------------


async def test_certificates_are_verified_by_default(tls_server: FaultServer) -> None:
    # No ssl_context: the system's trust store, which does not know the test CA.
    async with trio_retry.Client(retry=FAST, http2=tls_server.http2) as client:
        with trio.fail_after(LIMIT), pytest.raises(TLSFailed) as info:
            await client.post(tls_server.url + "/pay", content=b"amount=5")
    error = info.value
    assert (error.category, error.evidence) == (
        FailureCategory.TLS_CERTIFICATE,
        Evidence.NOT_SENT,
    )
    assert len(error.attempts) == 1  # permanent: never retried
    assert "certificate" in str(error)
    assert tls_server.requests == []


async def test_host_names_are_verified_by_default(tls_server: FaultServer) -> None:
    trio.socket.set_custom_hostname_resolver(NamesToLoopback())
    # Trusts the CA, but the certificate is for 127.0.0.1 and localhost only.
    async with client_for(tls_server) as client:
        with trio.fail_after(LIMIT):
            ok = await client.get(f"https://localhost:{tls_server.port}/")
            with pytest.raises(TLSFailed) as info:
                await client.get(f"https://impostor.example:{tls_server.port}/")
    assert ok.status == 200
    error = info.value
    assert (error.category, error.evidence) == (
        FailureCategory.TLS_CERTIFICATE,
        Evidence.NOT_SENT,
    )
    assert "impostor.example" in str(error)
    assert [r.path for r in tls_server.requests] == ["/"]


async def test_a_callers_context_is_not_weakened(tls_server: FaultServer) -> None:
    context = tls_server.client_ssl_context()
    async with client_for(tls_server, ssl_context=context) as client:
        with trio.fail_after(LIMIT):
            await client.get(tls_server.url + "/")
    assert context.verify_mode is ssl.CERT_REQUIRED
    assert context.check_hostname


# --- redaction ------------------------------------------------------------------------------------


def test_headers_repr_redacts_credentials() -> None:
    headers = Headers(
        [
            ("authorization", "Bearer s3cret-bearer"),
            ("COOKIE", "session=s3cret-cookie"),
            ("Proxy-Authorization", "Basic s3cret-proxy"),
            ("Set-Cookie", "id=s3cret-set"),
            ("X-Visible", "shown"),
        ]
    )
    text = repr(headers)
    assert_no_secret(text)
    assert text.count("[redacted]") == 4
    assert "shown" in text
    assert_no_secret(repr(headers.copy()))


def test_auth_objects_hide_their_secrets() -> None:
    for auth in (BasicAuth("user", "s3cret-basic"), BearerAuth("s3cret-bearer")):
        assert_no_secret(repr(auth))
        assert_no_secret(str(auth))


def own_log(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Every message logged in the process, hpack's included (held at INFO by trio_retry:
    at DEBUG it logs every header value it encodes or decodes)."""
    return [r.getMessage() for r in caplog.records]


def texts_of(error: BaseException) -> list[str]:
    """Every text an exception shows: str, repr, its cause, its attempts."""
    texts = [str(error), repr(error), str(error.__cause__), repr(error.__cause__)]
    for attempt in getattr(error, "attempts", []):
        texts += [str(attempt), repr(attempt)]
    return texts


async def test_responses_errors_and_attempts_never_show_credentials(
    any_server: FaultServer, caplog: pytest.LogCaptureFixture
) -> None:
    any_server.route("GET", "/ok", Respond(200, headers={"Set-Cookie": "id=s3cret-set"}))
    any_server.route("POST", "/lost", CloseAfterBody())
    any_server.default = Respond(503)
    caplog.set_level(logging.DEBUG)
    texts: list[str] = []
    auth = BasicAuth("user", "s3cret-basic")
    defaults = {"Cookie": "a=s3cret-cookie"}
    async with client_for(any_server, auth=auth, headers=defaults) as client:
        texts.append(repr(client))
        with trio.fail_after(LIMIT):
            response = await client.get(any_server.url + "/ok", headers=SECRET_HEADERS)
            texts += [repr(response), repr(response.headers), str(response.attempts)]
            with pytest.raises(HttpAmbiguousExecutionError) as ambiguous:
                await client.post(any_server.url + "/lost", headers=SECRET_HEADERS, content=b"x")
            texts += texts_of(ambiguous.value)
            gone = await client.get(any_server.url + "/gone", headers=SECRET_HEADERS)
            with pytest.raises(trio_retry.HTTPStatusError) as status:
                gone.raise_for_status()
            texts += [*texts_of(status.value), repr(gone), str(gone.retry_decision)]
            refused = f"http://127.0.0.1:{refused_port()}/"
            with pytest.raises(RequestFailed) as failed:
                await client.get(refused, headers=SECRET_HEADERS)
            texts += texts_of(failed.value)
    texts += own_log(caplog)
    assert any("attempt" in text for text in own_log(caplog))  # it did log
    for text in texts:
        assert_no_secret(text)
    # The credentials did reach the server, where they belong.
    assert any_server.requests[0].header("authorization") == "Bearer s3cret-bearer"
    assert response.headers["set-cookie"] == "id=s3cret-set"


async def test_proxy_credentials_never_show(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    server = FaultServer(tls=True, http2=False)
    await nursery.start(server.serve)
    proxy = LoopbackProxy(require_auth="Basic something-else")  # our credentials are refused
    await nursery.start(proxy.serve)
    caplog.set_level(logging.DEBUG)
    async with trio_retry.Client(
        retry=FAST,
        proxy=f"http://user:s3cret-proxy@127.0.0.1:{proxy.port}",
        ssl_context=server.client_ssl_context(),
    ) as client:
        with trio.fail_after(LIMIT), pytest.raises(RequestFailed) as info:
            await client.get(server.url + "/through")
        texts = [repr(client), *texts_of(info.value)]
    assert info.value.evidence is Evidence.NOT_SENT  # the tunnel was refused: nothing sent
    assert "407" in str(info.value)
    texts += own_log(caplog)
    for text in texts:
        assert_no_secret(text)


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli_run(argv, out, err)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("mode", ["h1", "h2c"])
async def test_explain_output_never_shows_credentials(nursery: trio.Nursery, mode: str) -> None:
    server = FaultServer(http2=mode == "h2c")
    await nursery.start(server.serve)
    server.route("GET", "/ok", Respond(200, headers={"Set-Cookie": "id=s3cret-set"}, body=b"hi"))
    server.route("POST", "/lost", CloseAfterBody())
    flags = ["--http2-prior-knowledge"] if mode == "h2c" else []
    secrets = [arg for name, value in SECRET_HEADERS.items() for arg in ("-H", f"{name}: {value}")]
    runs = [
        ["get", server.url + "/ok", *secrets, *flags, "--explain"],
        ["post", server.url + "/lost", "-d", "x", *secrets, *flags, "--explain"],
        ["get", f"http://127.0.0.1:{refused_port()}/", *secrets, "--explain", "--attempts", "1"],
    ]
    codes = []
    for argv in runs:
        with trio.fail_after(LIMIT):
            code, out, err = await trio.to_thread.run_sync(run_cli, argv)
        codes.append(code)
        assert "NOT_SENT" in err or "RESPONSE_RECEIVED" in err or "SENT_NO_RESPONSE" in err
        assert_no_secret(out + err)
    assert codes == [0, 3, 1]  # ok, ambiguous, failed
    assert server.requests[0].header("cookie") == "session=s3cret-cookie"


@pytest.mark.parametrize(
    "url",
    [
        "http://user:s3cret-basic@127.0.0.1:99999/",
        "ftp://user:s3cret-basic@127.0.0.1/",
        "http://user:s3cret-basic@127.0.0.1/a b",
    ],
)
async def test_errors_never_echo_a_password_in_the_url(url: str) -> None:
    async with trio_retry.Client() as client:
        with pytest.raises(trio_retry.InvalidRequest) as info:
            await client.get(url)
    for text in texts_of(info.value):
        assert_no_secret(text)
