"""Calls without options reuse a prepared template (``prepare_plain``): what they send and
how they are bounded is exactly what a freshly prepared call would do."""

from __future__ import annotations

import dataclasses
import math

import pytest
import trio
import trio.testing

import trio_retry
from trio_retry._call.prepare import PreparedRequest, _renew, prepare
from trio_retry.testing import FaultServer, Respond, Stall


def _sent(server: FaultServer, index: int) -> dict[str, str]:
    return {k.lower(): v for k, v in server.requests[index].headers}


async def test_a_change_of_client_headers_reaches_the_next_plain_call(
    server: FaultServer,
) -> None:
    server.default = Respond(200)
    url = server.url + "/same"
    async with trio_retry.Client(headers={"X-One": "1"}) as client:
        await client.get(url)
        await client.get(url)  # from the template
        client.headers.set("X-Two", "2")
        await client.get(url)
        client.headers.remove("X-One")
        await client.get(url)
        client.headers = trio_retry.Headers({"X-Three": "3"})
        await client.get(url)
    assert [
        ("x-one" in h, "x-two" in h, "x-three" in h)
        for h in map(lambda i: _sent(server, i), range(5))
    ] == [
        (True, False, False),
        (True, False, False),
        (True, True, False),
        (False, True, False),
        (False, False, True),
    ]


async def test_each_plain_call_has_its_own_start_and_deadline(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    """A template's deadline is not reused: a call 3 s after the first, taking 4 s, fits its
    own 5 s deadline (it would not fit the first call's)."""
    server.route("GET", "/t", Respond(200), Stall(4.0))
    async with trio_retry.Client(deadline=5.0) as client:
        first = await client.get(server.url + "/t")
        await trio.sleep(3.0)
        second = await client.get(server.url + "/t")
    assert second.status == 200
    assert second.elapsed.total_seconds() == pytest.approx(4.0, abs=0.01)
    assert first.elapsed.total_seconds() < 0.5


def test_renew_is_replace_of_the_call_fields() -> None:
    config = trio_retry.Client(deadline=2.0).config
    request = prepare(config, trio_retry.Headers({"a": "b"}), "GET", "http://x/", lambda: 10.0)
    renewed = _renew(request, started=20.0, deadline=22.0, trace=None, auth=None)
    assert isinstance(renewed, PreparedRequest)
    assert renewed == dataclasses.replace(request, started=20.0, deadline=22.0)
    assert request.started == 10.0
    assert math.isclose(request.deadline, 12.0)  # the template is left as it was


async def test_a_call_with_only_deadline_uses_the_template_and_its_own_deadline(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.route("GET", "/t", Respond(200), Stall(2.0), Stall(2.0))
    async with trio_retry.Client(retry=trio_retry.RetryPolicy(max_attempts=1)) as client:
        await client.get(server.url + "/t", deadline=1.0)  # builds the template
        assert len(client._templates) == 1
        with pytest.raises(trio_retry.DeadlineExceeded):
            await client.get(server.url + "/t", deadline=1.0)  # from it, 1 s
        ok = await client.get(server.url + "/t", deadline=3.0)  # from it, 3 s
        assert ok.status == 200
        with pytest.raises(trio_retry.InvalidRequest, match="deadline must be a positive"):
            await client.get(server.url + "/t", deadline=-1)
    assert len(server.requests) == 3


# --- the template's wire form (``WireMemo``): what it may not freeze -----------------------------


@pytest.mark.parametrize("fast_path", [True, False])
async def test_template_calls_send_their_own_path_on_a_shared_connection(
    server: FaultServer, fast_path: bool
) -> None:
    """Two templates alternate on one keep-alive connection (with the h11 writer and with
    the fast path): each request carries its own target, and a client header added between
    calls reaches the next one of each."""
    server.default = Respond(200)
    async with trio_retry.Client(http1_fast_path=fast_path) as client:
        for path in ("/x", "/y", "/x", "/y"):
            await client.get(server.url + path)
        client.headers.set("X-Late", "1")
        for path in ("/x", "/y"):
            await client.get(server.url + path)
    assert [r.path for r in server.requests] == ["/x", "/y", "/x", "/y", "/x", "/y"]
    assert ["x-late" in _sent(server, i) for i in range(6)] == [False] * 4 + [True] * 2
    assert len({r.connection_id for r in server.requests}) == 1


async def test_template_calls_send_the_cookie_the_jar_learned_since(server: FaultServer) -> None:
    """With a cookie jar, each call's headers depend on what earlier responses set: the
    same URL called three times sends none, then the first cookie, then its new value."""
    url = server.url + "/same"
    server.route(
        "GET",
        "/same",
        Respond(200, headers=[("Set-Cookie", "session=one; Path=/")]),
        Respond(200, headers=[("Set-Cookie", "session=two; Path=/")]),
        Respond(200),
    )
    async with trio_retry.Client(cookies=True) as client:
        for _ in range(3):
            await client.get(url)
    assert [_sent(server, i).get("cookie") for i in range(3)] == [
        None,
        "session=one",
        "session=two",
    ]


async def test_a_redirect_from_a_template_call_goes_where_it_points(server: FaultServer) -> None:
    """A redirect hop is a request of its own: it never sends its template's wire form."""
    moved = Respond(302, headers=[("Location", "/to")])
    server.route("GET", "/from", moved, moved)
    server.route("GET", "/to", Respond(200, body=b"arrived"), Respond(200, body=b"arrived"))
    async with trio_retry.Client(follow_redirects=True) as client:
        first = await client.get(server.url + "/from")
        second = await client.get(server.url + "/from")  # from the template, memo filled
    assert (first.content, second.content) == (b"arrived", b"arrived")
    assert [r.path for r in server.requests] == ["/from", "/to", "/from", "/to"]
