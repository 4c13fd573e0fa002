"""SPEC §20: ``base_url`` joins as httpx does: its path is a prefix of every relative URL.

What the server received is the proof: the FaultServer records each request's target, and
nginx (started by the test, on loopback) logs the path it served.
"""

from __future__ import annotations

import pytest
import trio

import trio_retry
from tests.conftest import FAST
from tests.support.fixtures import StartNginx
from tests.support.fixtures import nginx as nginx
from trio_retry.testing import FaultServer, Respond

#: (base path, the call's URL, the target the server must receive).
MERGES = [
    ("/api/", "/items/0", "/api/items/0"),
    ("/api", "/items/0", "/api/items/0"),  # no trailing slash: the same
    ("/api/", "items/0", "/api/items/0"),
    ("/api", "", "/api/"),
    ("/api/v1", "/items?page=2&tag=a", "/api/v1/items?page=2&tag=a"),
    ("/api/", "?page=2", "/api/?page=2"),
    ("/api/v1/", "../v2/items", "/api/v2/items"),  # dot segments resolved, as httpx does
    ("/api/", "/items:batch", "/api/items:batch"),  # not a scheme
    ("/api/", "/a%2Fb", "/api/a%2Fb"),  # an encoded slash stays encoded
    ("/api/", "//other.example/x", "/api/other.example/x"),  # never another host
    ("/api/", "/next?url=http://x.example/", "/api/next?url=http://x.example/"),
    ("", "/items/0", "/items/0"),
]


@pytest.mark.parametrize(("base_path", "url", "target"), MERGES)
async def test_the_base_path_is_a_prefix_of_every_relative_url(
    server: FaultServer, base_path: str, url: str, target: str
) -> None:
    server.default = Respond(200, body=b"ok")
    async with trio_retry.Client(retry=FAST, base_url=server.url + base_path) as client:
        response = await client.get(url)
    [request] = server.requests
    assert request.path == target
    assert str(response.url) == server.url + target


async def test_queries_merge_with_params_and_absolute_urls_pass_through(
    server: FaultServer, nursery: trio.Nursery
) -> None:
    other = FaultServer(http2=False)
    await nursery.start(other.serve)
    server.default = other.default = Respond(200)
    async with trio_retry.Client(
        retry=FAST, base_url=server.url + "/api", params={"v": "2"}
    ) as client:
        await client.get("/items?page=1", params={"sort": "name"})
        await client.get(other.url + "/elsewhere?x=1")
    assert [r.path for r in server.requests] == ["/api/items?page=1&v=2&sort=name"]
    assert [r.path for r in other.requests] == ["/elsewhere?x=1&v=2"]


@pytest.mark.parametrize("base", ["http://h.example/api?key=1", "http://h.example/api#top"])
def test_a_base_url_with_a_query_or_fragment_is_refused(base: str) -> None:
    with pytest.raises(ValueError, match=r"base_url must not have a query.*params=") as caught:
        trio_retry.Client(base_url=base)
    assert "key=1" not in str(caught.value)  # a query value is never shown


NGINX_API = """
    server {
        listen {{host}}:{{api}};
        location /api/ { return 200 "served $uri\\n"; }
        location / { return 404; }
    }
"""


@pytest.mark.parametrize("base_path", ["/api", "/api/"])
async def test_nginx_serves_the_prefixed_path(nginx: StartNginx, base_path: str) -> None:
    server = nginx(servers=NGINX_API, listeners=("api",))
    async with trio_retry.Client(retry=FAST, base_url=server.url("api", base_path)) as client:
        response = await client.get("/items/0", headers={"x-request-id": "b1"})
    assert (response.status, response.text) == (200, "served /api/items/0\n")
    [entry] = server.log(expect=1).entries
    assert (entry.uri, entry.status, entry.request_id) == ("/api/items/0", 200, "b1")
