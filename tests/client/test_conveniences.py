"""Conveniences (SPEC §12): Client(params=), per-call cookies= and auth=, Response.elapsed,
.request and .url, Digest auth, an auth that sees the request, and netrc under trust_env."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path

import pytest
import trio

import trio_retry
from tests.conftest import FAST
from trio_retry import AuthRequest, DigestAuth, Stage
from trio_retry.testing import FaultServer, Respond

from .digest_server import DigestServer

LIMIT = 10


def _header(server: FaultServer, index: int, name: str) -> str | None:
    return dict(server.requests[index].headers).get(name)


async def test_client_params_merge_with_call_params_and_keep_the_urls_query(
    server: FaultServer,
) -> None:
    async with trio_retry.Client(retry=FAST, params={"key": "k1", "lang": "en"}) as client:
        await client.get(server.url + "/s?q=trio&lang=fr")
        await client.get(server.url + "/s?q=trio", params={"lang": "de", "page": 2})
    assert server.requests[0].path == "/s?q=trio&lang=fr&key=k1&lang=en"
    # A name the call gives replaces the client's; the URL's own query stays first.
    assert server.requests[1].path == "/s?q=trio&key=k1&lang=de&page=2"


async def test_per_call_cookies_join_and_override_the_jar(server: FaultServer) -> None:
    server.route("GET", "/login", Respond(200, headers=[("Set-Cookie", "session=abc; Path=/")]))
    async with trio_retry.Client(retry=FAST, cookies=True) as client:
        await client.get(server.url + "/login")
        await client.get(server.url + "/a", cookies={"theme": "dark"})
        await client.get(server.url + "/b", cookies={"session": "mine"})
        await client.get(server.url + "/c")
    assert _header(server, 1, "cookie") == "session=abc; theme=dark"
    assert _header(server, 2, "cookie") == "session=mine"
    assert _header(server, 3, "cookie") == "session=abc"  # per call: not stored


async def test_per_call_cookies_without_a_jar_and_bad_values(server: FaultServer) -> None:
    async with trio_retry.Client(retry=FAST) as client:
        await client.get(server.url + "/", cookies={"a": "1", "b": "2"})
        with pytest.raises(trio_retry.InvalidRequest, match="cookies="):
            await client.get(server.url + "/", cookies={"a": "x; admin=1"})
    assert _header(server, 0, "cookie") == "a=1; b=2"
    assert len(server.requests) == 1


async def test_per_call_auth_replaces_the_clients(server: FaultServer) -> None:
    async with trio_retry.Client(retry=FAST, auth=("client", "pw")) as client:
        await client.get(server.url + "/")
        await client.get(server.url + "/", auth=trio_retry.BearerAuth("call-token"))
        await client.get(server.url + "/", auth=("call", "pw2"))
    assert _header(server, 0, "authorization") == "Basic Y2xpZW50OnB3"
    assert _header(server, 1, "authorization") == "Bearer call-token"
    assert _header(server, 2, "authorization") == "Basic Y2FsbDpwdzI="


async def test_response_request_elapsed_and_final_url(server: FaultServer) -> None:
    server.route("GET", "/old", Respond(302, headers=[("Location", "/new?x=1")]))
    server.route("GET", "/new", Respond(200, body=b"here"))
    async with trio_retry.Client(retry=FAST, follow_redirects=True, auth=("u", "p")) as client:
        response = await client.get(server.url + "/old", headers={"X-Trace": "t1"})
    assert str(response.url) == server.url + "/new?x=1"
    assert [str(r.url) for r in response.history] == [server.url + "/old"]
    sent = response.request
    assert (sent.method, str(sent.url)) == ("GET", server.url + "/new?x=1")
    assert sent.headers["x-trace"] == "t1"
    assert sent.headers["host"] == server.url.removeprefix("http://")
    assert sent.headers["authorization"].startswith("Basic ")
    assert "Basic" not in repr(sent)  # credentials stay out of reprs
    assert isinstance(response.elapsed, timedelta)
    assert response.elapsed >= response.history[0].elapsed >= timedelta(0)


async def test_elapsed_spans_retries_in_virtual_time(server: FaultServer) -> None:
    server.script(Respond(503), Respond(200))
    policy = trio_retry.RetryPolicy(
        max_attempts=2, backoff=trio_retry.Backoff(initial=0.5, max=0.5, jitter="none")
    )
    async with trio_retry.Client(retry=policy) as client:
        response = await client.get(server.url + "/")
    assert response.elapsed >= timedelta(seconds=0.5)


# --- Digest ----------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["MD5", "SHA-256"])
async def test_digest_answers_the_challenge_once_and_signs_later_requests(
    nursery: trio.Nursery, algorithm: str
) -> None:
    digest = DigestServer("Mufasa", "Circle of Life", algorithm=algorithm)
    await nursery.start(digest.serve)
    url = f"http://127.0.0.1:{digest.port}/dir/index.html?a=1"
    auth = DigestAuth("Mufasa", "Circle of Life")
    assert "Circle" not in repr(auth)
    async with trio_retry.Client(retry=FAST, auth=auth) as client:
        with trio.fail_after(LIMIT):
            first = await client.post(url, content=b"payload")
            second = await client.get(url)
    assert first.status == second.status == 200
    # The challenge round is in the trail: a 401, then the signed request.
    assert [a.status for a in first.attempts] == [401, 200]
    assert first.attempts[0].stage is Stage.COMPLETE
    assert [a.status for a in second.attempts] == [200]  # signed at once
    assert digest.executed == [("POST", "/dir/index.html?a=1", b"payload"),
                               ("GET", "/dir/index.html?a=1", b"")]  # fmt: skip
    assert digest.challenged == 1
    assert digest.seen_nc == ["00000001", "00000002"]


async def test_digest_with_wrong_credentials_ends_on_the_401(nursery: trio.Nursery) -> None:
    digest = DigestServer("Mufasa", "Circle of Life")
    await nursery.start(digest.serve)
    async with trio_retry.Client(retry=FAST, auth=DigestAuth("Mufasa", "wrong")) as client:
        with trio.fail_after(LIMIT):
            response = await client.get(f"http://127.0.0.1:{digest.port}/")
    assert response.status == 401
    assert [a.status for a in response.attempts] == [401, 401]
    assert digest.executed == []


async def test_digest_never_resends_a_one_shot_body(nursery: trio.Nursery) -> None:
    digest = DigestServer("Mufasa", "Circle of Life")
    await nursery.start(digest.serve)

    async def once() -> object:
        yield b"streamed"

    async with trio_retry.Client(retry=FAST, auth=DigestAuth("Mufasa", "Circle of Life")) as c:
        with trio.fail_after(LIMIT):
            response = await c.post(f"http://127.0.0.1:{digest.port}/", content=once())
    assert response.status == 401
    assert len(response.attempts) == 1
    assert digest.executed == []


# --- an auth that sees the request ------------------------------------------------------------


class HmacAuth:
    """Signs method, target and body with a shared key (the shape of SigV4-style schemes)."""

    def __init__(self, key: bytes) -> None:
        self.key = key
        self.seen: list[AuthRequest] = []

    async def sign(self, request: AuthRequest) -> Mapping[str, str]:
        self.seen.append(request)
        message = f"{request.method}\n{request.url.target}\n".encode() + (request.body or b"")
        return {"X-Signature": hmac.new(self.key, message, hashlib.sha256).hexdigest()}


async def test_a_signing_auth_sees_method_url_headers_and_body(server: FaultServer) -> None:
    auth = HmacAuth(b"k")
    async with trio_retry.Client(retry=FAST, auth=auth) as client:
        await client.post(server.url + "/x?y=1", content=b"body", headers={"X-A": "1"})
    expected = hmac.new(b"k", b"POST\n/x?y=1\nbody", hashlib.sha256).hexdigest()
    assert _header(server, 0, "x-signature") == expected
    assert auth.seen[0].headers["x-a"] == "1"
    assert isinstance(auth, trio_retry.RequestAuth)


async def test_refreshable_auth_still_refreshes_after_a_401(server: FaultServer) -> None:
    tokens = iter(["old", "new"])

    async def provider() -> str:
        return next(tokens)

    server.script(Respond(401), Respond(200))
    async with trio_retry.Client(retry=FAST, auth=trio_retry.BearerAuth(provider=provider)) as c:
        response = await c.get(server.url + "/")
    assert response.status == 200
    assert [_header(server, i, "authorization") for i in (0, 1)] == ["Bearer old", "Bearer new"]


# --- netrc -------------------------------------------------------------------------------------


async def test_netrc_is_used_only_with_trust_env(
    server: FaultServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login alice password s3cret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    async with trio_retry.Client(retry=FAST) as client:
        await client.get(server.url + "/")
    async with trio_retry.Client(retry=FAST, trust_env=True) as client:
        await client.get(server.url + "/")
        await client.get(server.url + "/", auth=("bob", "x"))  # an explicit auth wins
    assert _header(server, 0, "authorization") is None
    assert _header(server, 1, "authorization") == "Basic YWxpY2U6czNjcmV0"
    assert _header(server, 2, "authorization") == "Basic Ym9iOng="
    netrc.write_text("machine 127.0.0.1 bogus token\n")
    async with trio_retry.Client(retry=FAST, trust_env=True) as client:
        with pytest.raises(trio_retry.InvalidRequest, match="netrc"):
            await client.get(server.url + "/")
