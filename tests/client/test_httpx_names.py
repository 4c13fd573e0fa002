"""httpx's names on ``Response`` where the meaning is the same (SPEC §20, issue #38 row 10):
``reason_phrase``, ``is_success``/``is_error``/``is_client_error``/``is_server_error``/
``is_redirect``, ``links`` (RFC 8288), ``cookies`` (the response's ``Set-Cookie``) and
``num_bytes_downloaded`` (the body as it came, before decoding). Served by the FaultServer and
by nginx, whose log says how many body bytes it sent."""

from __future__ import annotations

import gzip

import pytest
import trio

import trio_retry
from tests.conftest import FAST
from tests.support.fixtures import StartNginx
from tests.support.fixtures import nginx as nginx
from trio_retry._response_views import parse_links
from trio_retry.testing import FaultServer, Respond

LIMIT = 10  # seconds: the bound of every test's network activity

#: status, headers -> (is_success, is_redirect, is_error, is_client_error, is_server_error)
STATUSES = [
    (200, [], (True, False, False, False, False)),
    (204, [], (True, False, False, False, False)),
    (301, [("Location", "/x")], (False, True, False, False, False)),
    (308, [("Location", "/x")], (False, True, False, False, False)),
    (302, [], (False, False, False, False, False)),  # no Location: nothing to follow
    (304, [], (False, False, False, False, False)),  # not a redirect to follow
    (404, [], (False, False, True, True, False)),
    (499, [], (False, False, True, True, False)),
    (500, [], (False, False, True, False, True)),
    (503, [], (False, False, True, False, True)),
]


async def test_status_names(server: FaultServer) -> None:
    for status, headers, expected in STATUSES:
        server.script(Respond(status, headers=headers))
        async with trio_retry.Client(retry=trio_retry.RetryPolicy(max_attempts=1)) as client:
            with trio.fail_after(LIMIT):
                response = await client.get(server.url + "/s")
        seen = (
            response.is_success,
            response.is_redirect,
            response.is_error,
            response.is_client_error,
            response.is_server_error,
        )
        assert seen == expected, status
        assert response.status_code == status
        assert response.reason_phrase == response.reason


LINKS = [
    ("", {}),
    (
        '<https://api.example/items?page=2>; rel="next", <https://api.example/items?page=9>; '
        "rel=last",
        {
            "next": {"url": "https://api.example/items?page=2", "rel": "next"},
            "last": {"url": "https://api.example/items?page=9", "rel": "last"},
        },
    ),
    # A quoted value may hold a comma and a semicolon; names are case-insensitive; no rel: the
    # target is the key; a parameter without a value is ""; of a repeated one, the first.
    (
        '</a>; REL="alternate"; title="a, b; c" ; hreflang=en, </b>; anchor="#x"; crossorigin; '
        'rel="prev"; rel="ignored"',
        {
            "alternate": {"url": "/a", "rel": "alternate", "title": "a, b; c", "hreflang": "en"},
            "prev": {"url": "/b", "anchor": "#x", "crossorigin": "", "rel": "prev"},
        },
    ),
    (r'</c>; title="say \"hi\""', {"/c": {"url": "/c", "title": 'say "hi"'}}),
    # A malformed element is skipped up to the next comma; the next link is kept.
    ("nonsense; rel=x, </ok>; rel=ok", {"ok": {"url": "/ok", "rel": "ok"}}),
]


@pytest.mark.parametrize(("header", "expected"), LINKS)
async def test_links(
    server: FaultServer, client: trio_retry.Client, header: str, expected: object
) -> None:
    server.script(Respond(200, headers=[("Link", header)] if header else []))
    with trio.fail_after(LIMIT):
        response = await client.get(server.url + "/l")
    assert response.links == expected


def test_links_over_several_fields() -> None:
    assert parse_links(["</1>; rel=a", "</2>; rel=b, </3>"]) == [
        {"url": "/1", "rel": "a"},
        {"url": "/2", "rel": "b"},
        {"url": "/3"},
    ]


async def test_cookies_are_those_the_response_sets(server: FaultServer) -> None:
    server.script(
        Respond(
            200,
            headers=[
                ("Set-Cookie", "session=abc123; Path=/; HttpOnly"),
                ("Set-Cookie", "theme=dark"),
                ("Set-Cookie", "gone=1; Max-Age=0"),  # expired at once: deleted, not set
                ("Set-Cookie", "foreign=1; Domain=other.example"),  # not this host's
            ],
        )
    )
    async with trio_retry.Client(retry=FAST) as client:  # no jar: cookies=False
        with trio.fail_after(LIMIT):
            response = await client.get(server.url + "/c")
            assert response.cookies == {"session": "abc123", "theme": "dark"}
            assert (await client.get(server.url + "/none")).cookies == {}
    assert "cookie" not in dict(server.requests[1].headers)  # shown, not kept


async def test_num_bytes_downloaded_counts_the_body_as_it_came(
    server: FaultServer, client: trio_retry.Client
) -> None:
    text = b"a line that compresses well\n" * 4000
    packed = gzip.compress(text)
    server.script(
        Respond(200, body=b"plain body"),
        Respond(200, headers=[("Content-Encoding", "gzip")], body=packed),
        Respond(200, headers=[("Content-Encoding", "gzip")], body=packed),
    )
    with trio.fail_after(LIMIT):
        plain = await client.get(server.url + "/p")
        assert plain.num_bytes_downloaded == len(b"plain body")
        decoded = await client.get(server.url + "/g")
        assert decoded.content == text
        assert decoded.num_bytes_downloaded == len(packed) < len(text)
        async with client.stream("GET", server.url + "/s") as streamed:
            assert streamed.num_bytes_downloaded == 0
            seen = []
            async for _chunk in streamed.aiter_raw():
                seen.append(streamed.num_bytes_downloaded)
            assert seen == sorted(seen)
            assert seen[-1] == len(packed)


async def test_nginx_reason_phrase_and_bytes(nginx: StartNginx) -> None:
    body = b"x" * 300_000
    server = nginx(files={"html/f.bin": body}, servers=_STATIC, listeners=("static",))
    async with trio_retry.Client(retry=FAST) as client:
        with trio.fail_after(LIMIT):
            found = await client.get(server.url("static", "/f.bin"), headers={"x-request-id": "f"})
            missing = await client.get(server.url("static", "/none"))
    assert (found.reason_phrase, found.is_success, found.is_error) == ("OK", True, False)
    assert (missing.reason_phrase, missing.is_client_error) == ("Not Found", True)
    (entry,) = [e for e in server.log(expect=2).entries if e.request_id == "f"]
    assert found.num_bytes_downloaded == entry.body_bytes_sent == len(body)


_STATIC = """
    server {
        listen {{host}}:{{static}};
        location / { root {{workdir}}/html; }
    }
"""
