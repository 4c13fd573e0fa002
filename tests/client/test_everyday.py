"""Everyday features (SPEC §10): redirects, decoding, auth, cookies, proxies, stage timeouts,
forms, logging — each against the real FaultServer (and a real proxy) on loopback."""

from __future__ import annotations

import gzip
import logging
import zlib
from collections.abc import AsyncIterator, Mapping

import pytest
import trio
import trio.testing

import trio_retry
from tests.conftest import FAST
from trio_retry import DenyReason, Evidence, FailureCategory, Stage, StageTimeouts
from trio_retry._decoding import ACCEPT_ENCODING
from trio_retry.testing import FaultServer, Raw, Respond, Stall

from .proxy import LoopbackProxy


def redirect(status: int, location: str) -> Respond:
    return Respond(status, headers=[("Location", location)])


# --- redirects --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "method", "next_method", "body_kept"),
    [
        (301, "POST", "GET", False),
        (302, "POST", "GET", False),
        (303, "PUT", "GET", False),
        (307, "POST", "POST", True),
        (308, "PUT", "PUT", True),
        (302, "PUT", "PUT", True),
    ],
)
async def test_redirect_methods_and_bodies(
    server: FaultServer, status: int, method: str, next_method: str, body_kept: bool
) -> None:
    server.route(method, "/from", redirect(status, "/to"))
    server.default = Respond(200, body=b"arrived")
    async with trio_retry.Client(retry=FAST, follow_redirects=True) as client:
        response = await client.request(method, server.url + "/from", content=b"payload")
    assert response.content == b"arrived"
    assert [r.status for r in response.history] == [status]
    second = server.requests[1]
    assert (second.method, second.path) == (next_method, "/to")
    assert second.body == (b"payload" if body_kept else b"")
    assert ("content-length" in dict(second.headers)) == body_kept


async def test_redirects_are_not_followed_by_default(
    server: FaultServer, client: trio_retry.Client
) -> None:
    server.route("GET", "/", redirect(302, "/elsewhere"), redirect(302, "/elsewhere"))
    server.default = Respond(200, body=b"elsewhere")
    response = await client.get(server.url + "/")
    assert response.status == 302
    assert response.history == []
    assert len(server.requests) == 1
    followed = await client.get(server.url + "/", follow_redirects=True)  # per-call opt-in
    assert followed.content == b"elsewhere"
    assert [r.status for r in followed.history] == [302]


async def test_307_with_a_one_shot_body_cannot_be_replayed(server: FaultServer) -> None:
    async def once() -> AsyncIterator[bytes]:
        yield b"stream"

    server.default = redirect(307, "/again")
    async with trio_retry.Client(retry=FAST, follow_redirects=True) as client:
        with pytest.raises(trio_retry.RequestFailed, match="could not replay") as info:
            await client.post(server.url + "/", content=once())
    assert info.value.decision == trio_retry.RetryDenied.body_not_replayable()
    assert len(server.requests) == 1


async def test_too_many_redirects(server: FaultServer) -> None:
    server.default = redirect(302, "/loop")
    async with trio_retry.Client(retry=FAST, follow_redirects=True, max_redirects=3) as client:
        with pytest.raises(trio_retry.TooManyRedirects) as info:
            await client.get(server.url + "/loop")
    assert len(info.value.history) == 4
    assert len(server.requests) == 4  # max_redirects hops followed, one more refused


async def test_credentials_are_not_forwarded_to_another_origin(nursery: trio.Nursery) -> None:
    first, second = FaultServer(http2=False), FaultServer(http2=False)
    await nursery.start(first.serve)
    await nursery.start(second.serve)
    first.default = redirect(302, second.url + "/landing")
    async with trio_retry.Client(
        retry=FAST, follow_redirects=True, auth=trio_retry.BearerAuth("s3cret")
    ) as client:
        await client.get(first.url + "/", headers={"Cookie": "session=1"})
    sent_first = dict(first.requests[0].headers)
    sent_second = dict(second.requests[0].headers)
    assert sent_first["authorization"] == "Bearer s3cret"
    assert sent_first["cookie"] == "session=1"
    assert "authorization" not in sent_second
    assert "cookie" not in sent_second


class CountingAuth:
    def __init__(self) -> None:
        self.refreshes = 0

    async def headers(self) -> Mapping[str, str]:
        return {"Authorization": "Bearer s3cret"}

    async def refresh(self) -> None:
        self.refreshes += 1


async def test_another_origins_401_does_not_refresh_the_auth(nursery: trio.Nursery) -> None:
    first, second = FaultServer(http2=False), FaultServer(http2=False)
    await nursery.start(first.serve)
    await nursery.start(second.serve)
    first.default = redirect(302, second.url + "/landing")
    second.default = Respond(401)
    auth = CountingAuth()
    async with trio_retry.Client(retry=FAST, follow_redirects=True, auth=auth) as client:
        response = await client.get(first.url + "/")
    assert response.status == 401
    assert str(response.url).startswith(second.url)
    assert auth.refreshes == 0
    assert len(second.requests) == 1
    assert "authorization" not in dict(second.requests[0].headers)


async def test_a_callers_host_is_not_sent_to_another_origin(nursery: trio.Nursery) -> None:
    first, second = FaultServer(http2=False), FaultServer(http2=False)
    await nursery.start(first.serve)
    await nursery.start(second.serve)
    first.route("POST", "/", redirect(307, first.url + "/same"))
    first.route("POST", "/same", redirect(307, second.url + "/landing"))
    async with trio_retry.Client(retry=FAST, follow_redirects=True) as client:
        response = await client.post(
            first.url + "/", headers={"Host": "tenant-a.example"}, content=b"payload"
        )
    assert response.status == 200
    assert [r.header("host") for r in first.requests] == ["tenant-a.example"] * 2
    [landed] = second.requests
    assert landed.header("host") == f"127.0.0.1:{second.port}"
    assert landed.body == b"payload"


async def test_a_redirect_chain_shares_the_call_deadline(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.route("GET", "/a", Respond(302, headers=[("Location", "/b")], delay=1.5))
    server.route("GET", "/b", Stall(10.0))
    async with trio_retry.Client(retry=FAST, follow_redirects=True) as client:
        start = trio.current_time()
        with pytest.raises(trio_retry.DeadlineExceeded):
            await client.get(server.url + "/a", deadline=2.0)
    assert trio.current_time() - start == pytest.approx(2.0, abs=0.01)


# --- decoding ----------------------------------------------------------------------------------


async def test_gzip_and_deflate_are_decoded(server: FaultServer, client: trio_retry.Client) -> None:
    text = b"compressible " * 500
    server.script(
        Respond(200, headers=[("Content-Encoding", "gzip")], body=gzip.compress(text)),
        Respond(200, headers=[("Content-Encoding", "deflate")], body=zlib.compress(text)),
    )
    assert (await client.get(server.url + "/g")).content == text
    assert (await client.get(server.url + "/d")).content == text
    assert dict(server.requests[0].headers)["accept-encoding"] == ACCEPT_ENCODING


async def test_streaming_decode_and_raw(server: FaultServer, client: trio_retry.Client) -> None:
    text = b"stream me " * 20_000
    packed = gzip.compress(text)
    server.default = Respond(200, headers=[("Content-Encoding", "gzip")], body=packed)
    async with client.stream("GET", server.url + "/") as response:
        decoded = b"".join([chunk async for chunk in response.aiter_bytes()])
    assert decoded == text
    async with client.stream("GET", server.url + "/") as response:
        raw = b"".join([chunk async for chunk in response.aiter_raw()])
    assert raw == packed


async def test_decompression_bomb_is_refused(server: FaultServer) -> None:
    bomb = gzip.compress(b"\0" * 5_000_000)
    server.default = Respond(200, headers=[("Content-Encoding", "gzip")], body=bomb)
    async with trio_retry.Client(retry=FAST, max_body_bytes=100_000) as client:
        with pytest.raises(trio_retry.ProtocolFailed, match="decompression bomb"):
            await client.get(server.url + "/")
        async with client.stream("GET", server.url + "/") as response:
            with pytest.raises(trio_retry.ProtocolFailed, match="max_body_bytes"):
                async for _chunk in response.aiter_bytes():
                    pass
    assert len(server.requests) == 2  # never retried: the same body would come back


async def test_corrupt_gzip_is_a_protocol_failure(
    server: FaultServer, client: trio_retry.Client
) -> None:
    server.default = Respond(200, headers=[("Content-Encoding", "gzip")], body=b"not gzip")
    with pytest.raises(trio_retry.ProtocolFailed, match="not valid"):
        await client.get(server.url + "/")


# --- cookies -----------------------------------------------------------------------------------


async def test_cookie_jar_is_opt_in(server: FaultServer) -> None:
    server.script(Respond(200, headers=[("Set-Cookie", "session=abc; Path=/")]))
    async with trio_retry.Client(retry=FAST, cookies=True) as client:
        await client.get(server.url + "/login")
        await client.get(server.url + "/me")
    assert dict(server.requests[1].headers)["cookie"] == "session=abc"
    server.script(Respond(200, headers=[("Set-Cookie", "other=1")]))
    async with trio_retry.Client(retry=FAST) as plain:
        await plain.get(server.url + "/login")
        await plain.get(server.url + "/me")
    assert "cookie" not in dict(server.requests[-1].headers)


# --- proxies -----------------------------------------------------------------------------------


async def test_http_proxy_absolute_form(server: FaultServer, nursery: trio.Nursery) -> None:
    proxy = LoopbackProxy()
    port = await nursery.start(proxy.serve)
    server.default = Respond(200, body=b"via proxy")
    async with trio_retry.Client(retry=FAST, proxy=f"http://user:pw@127.0.0.1:{port}") as client:
        response = await client.get(server.url + "/p?q=1")
        assert "pw" not in repr(client)
    assert response.content == b"via proxy"
    assert proxy.seen == [f"GET {server.url}/p?q=1 HTTP/1.1"]
    assert server.requests[0].path == "/p?q=1"
    assert "proxy-authorization" not in dict(server.requests[0].headers)


async def test_connect_tunnel_for_tls(tls_server: FaultServer, nursery: trio.Nursery) -> None:
    proxy = LoopbackProxy()
    port = await nursery.start(proxy.serve)
    tls_server.default = Respond(200, body=b"tunnelled")
    async with trio_retry.Client(
        retry=FAST, proxy=f"http://127.0.0.1:{port}", ssl_context=tls_server.client_ssl_context()
    ) as client:
        response = await client.get(tls_server.url + "/secure")
    assert response.content == b"tunnelled"
    assert proxy.seen == [f"CONNECT 127.0.0.1:{tls_server.port} HTTP/1.1"]


async def test_connect_refused_by_the_proxy_is_not_sent(
    tls_server: FaultServer, nursery: trio.Nursery
) -> None:
    proxy = LoopbackProxy(refuse_connect=True)
    port = await nursery.start(proxy.serve)
    async with trio_retry.Client(
        retry=FAST, proxy=f"http://127.0.0.1:{port}", ssl_context=tls_server.client_ssl_context()
    ) as client:
        with pytest.raises(trio_retry.ConnectFailed, match="refused CONNECT") as info:
            await client.post(tls_server.url + "/pay", content=b"x")
    assert [a.evidence for a in info.value.attempts] == [Evidence.NOT_SENT] * 3
    assert info.value.attempts[0].stage is Stage.CONNECT
    assert tls_server.requests == []


async def test_unreachable_proxy_is_not_sent(server: FaultServer) -> None:
    from trio_retry.testing import refused_port

    async with trio_retry.Client(retry=FAST, proxy=f"http://127.0.0.1:{refused_port()}") as c:
        with pytest.raises(trio_retry.ConnectFailed, match="proxy") as info:
            await c.post(server.url + "/", content=b"")
    assert info.value.evidence is Evidence.NOT_SENT


async def test_proxy_from_the_environment(
    server: FaultServer, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = LoopbackProxy()
    port = await nursery.start(proxy.serve)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    async with trio_retry.Client(retry=FAST) as ignoring:
        await ignoring.get(server.url + "/direct")
    assert proxy.seen == []
    async with trio_retry.Client(retry=FAST, trust_env=True) as trusting:
        await trusting.get(server.url + "/proxied")
    assert len(proxy.seen) == 1
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    async with trio_retry.Client(retry=FAST, trust_env=True) as bypassing:
        await bypassing.get(server.url + "/bypassed")
    assert len(proxy.seen) == 1


# --- stage timeouts ------------------------------------------------------------------------------


async def test_first_byte_and_read_timeouts(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.route("POST", "/slow-head", Stall(5.0))
    server.route("GET", "/slow-body", *[Respond(200, body=b"x" * 100, body_rate=1.0)] * 3)
    server.default = Respond(200, body=b"fine")
    timeouts = StageTimeouts(first_byte=1.0, read=0.5)
    async with trio_retry.Client(retry=FAST, stage_timeouts=timeouts) as client:
        with pytest.raises(trio_retry.HttpAmbiguousExecutionError) as ambiguous:
            await client.post(server.url + "/slow-head", content=b"")
        with pytest.raises(trio_retry.DeadlineExceeded) as slow:
            await client.get(server.url + "/slow-body")
    assert ambiguous.value.attempts[0].category is FailureCategory.TIMEOUT
    assert ambiguous.value.attempts[0].evidence is Evidence.SENT_NO_RESPONSE
    assert slow.value.attempts[0].evidence is Evidence.PARTIAL_RESPONSE


async def test_tls_timeout_is_not_sent(nursery: trio.Nursery) -> None:
    # A listener that accepts and never answers the TLS handshake.
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]

    async def silent(stream: trio.SocketStream) -> None:
        await trio.sleep(10)

    nursery.start_soon(trio.serve_listeners, silent, listeners)
    async with trio_retry.Client(retry=FAST, stage_timeouts=StageTimeouts(tls=0.2)) as client:
        with pytest.raises(trio_retry.DeadlineExceeded) as info:
            await client.post(f"https://127.0.0.1:{port}/", content=b"")
    assert [a.stage for a in info.value.attempts] == [Stage.TLS] * 3
    assert info.value.evidence is Evidence.NOT_SENT


# --- forms, json, auth, logging ------------------------------------------------------------


async def test_form_fields_and_files(server: FaultServer, client: trio_retry.Client) -> None:
    await client.post(server.url + "/form", data={"a": "1 2", "b": ["x", "y"]})
    request = server.requests[0]
    assert request.body == b"a=1+2&b=x&b=y"
    assert dict(request.headers)["content-type"] == "application/x-www-form-urlencoded"
    await client.post(
        server.url + "/upload", data={"k": "v"}, files={"f": ("a.txt", b"hi", "text/plain")}
    )
    upload = server.requests[1]
    assert dict(upload.headers)["content-type"].startswith("multipart/form-data; boundary=")
    assert b'filename="a.txt"' in upload.body
    assert b'name="k"\r\n\r\nv\r\n' in upload.body


async def test_custom_json_encoder(server: FaultServer) -> None:
    def dumps(value: object) -> str:
        return "ENCODED:" + repr(value)

    async with trio_retry.Client(retry=FAST, json_dumps=dumps) as client:
        await client.post(server.url + "/", json={"a": 1})
    assert server.requests[0].body == b"ENCODED:{'a': 1}"


async def test_basic_auth(server: FaultServer) -> None:
    async with trio_retry.Client(retry=FAST, auth=trio_retry.BasicAuth("ada", "pw")) as client:
        await client.get(server.url + "/")
    assert dict(server.requests[0].headers)["authorization"] == "Basic YWRhOnB3"


async def test_debug_log_shows_the_trail_without_credentials(
    server: FaultServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.script(Respond(503))
    server.default = Respond(200)
    with caplog.at_level(logging.DEBUG, logger="trio_retry"):
        async with trio_retry.Client(retry=FAST, auth=trio_retry.BearerAuth("tok-123")) as c:
            await c.get(server.url + "/", headers={"Cookie": "id=42"})
    lines = [r.getMessage() for r in caplog.records if r.name == "trio_retry"]
    assert len(lines) == 2
    assert "attempt 1" in lines[0]
    assert "503" in lines[0]
    assert "retry allowed" in lines[0]
    assert all("tok-123" not in line and "id=42" not in line for line in lines)


async def test_partial_response_keeps_its_status(
    server: FaultServer, client: trio_retry.Client
) -> None:
    from trio_retry.testing import PartialBody

    server.script(PartialBody(status=201, declared_length=50, body=b"x"))
    with pytest.raises(trio_retry.ConnectionBroken) as info:
        await client.post(server.url + "/", content=b"")
    assert info.value.attempts[0].status == 201
    assert info.value.decision is not None
    assert info.value.decision.reason is DenyReason.NOT_RETRYABLE  # type: ignore[union-attr]


# --- HTTP/1.0 servers --------------------------------------------------------------------------


@pytest.mark.parametrize("fast_path", [True, False])
@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello",
        b"HTTP/1.0 200 OK\r\n\r\nhello",  # delimited by the close
    ],
    ids=["content-length", "close-delimited"],
)
async def test_an_http10_response_says_http10(
    server: FaultServer, raw: bytes, fast_path: bool
) -> None:
    # Before: "HTTP/1.1", the connection's protocol, whatever the server answered.
    server.route("GET", "/old", Raw(raw))
    server.route("GET", "/new", Respond(200, body=b"hi"))
    async with trio_retry.Client(retry=FAST, http1_fast_path=fast_path) as client:
        old = await client.get(server.url + "/old")
        assert (old.http_version, old.content) == ("HTTP/1.0", b"hello")
        assert [a.http_version for a in old.attempts] == ["HTTP/1.0"]
        new = await client.get(server.url + "/new")  # a new connection: HTTP/1.0 closes
        assert (new.http_version, new.content) == ("HTTP/1.1", b"hi")
        assert [a.http_version for a in new.attempts] == ["HTTP/1.1"]
    assert server.connections_accepted == 2
