"""SPEC §17: internationalised host names on the wire (IDNA A-labels), and a URL's userinfo."""

from __future__ import annotations

import base64

import pytest
import trio
import trio.testing

import trio_retry
from tests.conftest import FAST
from trio_retry.testing import CloseBeforeRead, FaultServer, MockTransport, Respond

from .proxy import LoopbackProxy


@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_an_international_host_is_sent_as_its_a_label(scheme: str) -> None:
    transport = MockTransport()
    transport.server.default = Respond(200, body=b"ok")
    async with trio_retry.Client(transport=transport) as client:
        response = await client.get(f"{scheme}://bücher.example:8080/p")
    [request] = transport.server.requests
    authority = request.header("host") or request.header(":authority")  # HTTP/2 over TLS
    assert authority == "xn--bcher-kva.example:8080"  # never raw UTF-8
    [target] = transport.connects
    assert target.host == "xn--bcher-kva.example"  # what DNS, SNI and the certificate check see
    assert str(response.url) == f"{scheme}://xn--bcher-kva.example:8080/p"


async def test_a_host_that_cannot_be_encoded_sends_nothing() -> None:
    transport = MockTransport()
    async with trio_retry.Client(transport=transport) as client:
        with pytest.raises(trio_retry.InvalidRequest) as caught:
            await client.get("http://☃.net/")
    assert caught.value.evidence is trio_retry.Evidence.NOT_SENT
    assert transport.connects == []


# -- userinfo: BasicAuth for that origin, never sent in the target, forwarded or shown ----------

BASIC = "Basic " + base64.b64encode(b"us er:p@ss:word").decode()


async def test_userinfo_is_basic_auth_and_not_in_the_target(server: FaultServer) -> None:
    url = server.url.replace("http://", "http://us%20er:p%40ss%3Aword@") + "/p?q=1"
    async with trio_retry.Client(retry=FAST) as client:
        response = await client.get(url)
    [request] = server.requests
    assert request.header("authorization") == BASIC
    assert request.path == "/p?q=1"
    assert request.header("host") == server.url.removeprefix("http://")
    assert str(response.url) == url  # the caller's own URL, in full
    assert "p%40ss" not in repr(response)
    assert "p%40ss" not in repr(response.url)


async def test_an_auth_of_the_call_or_the_client_wins_over_userinfo(server: FaultServer) -> None:
    url = server.url.replace("http://", "http://u:p@") + "/"
    async with trio_retry.Client(retry=FAST) as client:
        await client.get(url, auth=trio_retry.BearerAuth("call"))
    async with trio_retry.Client(retry=FAST, auth=trio_retry.BearerAuth("client")) as client:
        await client.get(url)
    assert [r.header("authorization") for r in server.requests] == ["Bearer call", "Bearer client"]


async def test_userinfo_is_not_forwarded_to_another_origin(nursery: trio.Nursery) -> None:
    first, second = FaultServer(http2=False), FaultServer(http2=False)
    await nursery.start(first.serve)
    await nursery.start(second.serve)
    first.route("GET", "/", Respond(302, headers={"Location": first.url + "/same"}))
    first.route("GET", "/same", Respond(302, headers={"Location": second.url + "/other"}))
    async with trio_retry.Client(retry=FAST, follow_redirects=True) as client:
        response = await client.get(first.url.replace("http://", "http://u:p@") + "/")
    assert response.status_code == 200
    basic = "Basic " + base64.b64encode(b"u:p").decode()
    assert [r.header("authorization") for r in first.requests] == [basic, basic]
    assert [r.header("authorization") for r in second.requests] == [None]


async def test_a_failed_call_never_shows_the_password(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.default = CloseBeforeRead()
    async with trio_retry.Client(retry=FAST) as client:
        with pytest.raises(trio_retry.TrioRetryError) as caught:
            await client.post(server.url.replace("http://", "http://user:s3cret@") + "/x")
    shown = f"{caught.value} {caught.value!r} {caught.value.attempts!r}"
    assert "s3cret" not in shown
    assert "[redacted]@" in str(caught.value)


async def test_userinfo_is_not_in_a_proxy_absolute_form_target(
    server: FaultServer, nursery: trio.Nursery
) -> None:
    proxy = LoopbackProxy()
    port = await nursery.start(proxy.serve)
    async with trio_retry.Client(retry=FAST, proxy=f"http://127.0.0.1:{port}") as client:
        await client.get(server.url.replace("http://", "http://u:s3cret@") + "/x")
    assert proxy.seen == [f"GET {server.url}/x HTTP/1.1"]
    assert (
        server.requests[0].header("authorization")
        == "Basic " + base64.b64encode(b"u:s3cret").decode()
    )
