"""Transfer-Encoding and Content-Length never go out together, however the headers arrive:
the constructor, ``client.headers`` changed later, a call's own headers, ``auth``, redirects.

Each refused request is refused before any I/O (the server accepts no connection).
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

import trio_retry
from trio_retry import Evidence, InvalidRequest
from trio_retry.testing import FaultServer, RecordedRequest, Respond


def framing(request: RecordedRequest) -> list[str]:
    return [name.lower() for name, _ in request.headers
            if name.lower() in ("transfer-encoding", "content-length")]  # fmt: skip


async def test_transfer_encoding_added_to_client_headers_later_is_refused(
    server: FaultServer,
) -> None:
    async with trio_retry.Client() as client:
        await client.post(server.url + "/ok", content=b"hello")  # warms the headers' caches
        client.headers.add("Transfer-Encoding", "chunked")
        with pytest.raises(InvalidRequest, match="Transfer-Encoding") as info:
            await client.post(server.url + "/pay", content=b"hello")
        assert info.value.evidence is Evidence.NOT_SENT
        client.headers.remove("Transfer-Encoding")
        client.headers.set("Content-Length", "99")
        with pytest.raises(InvalidRequest, match="Content-Length"):
            await client.post(server.url + "/pay", content=b"hello")
    assert [r.path for r in server.requests] == ["/ok"]
    assert framing(server.requests[0]) == ["content-length"]


@pytest.mark.parametrize(
    "where", ["constructor", "call"], ids=["Client(headers=...)", "call headers"]
)
async def test_transfer_encoding_from_the_constructor_or_the_call_is_refused(
    server: FaultServer, where: str
) -> None:
    te = {"Transfer-Encoding": "chunked"}
    async with trio_retry.Client(headers=te if where == "constructor" else None) as client:
        with pytest.raises(InvalidRequest, match="Transfer-Encoding"):
            await client.post(
                server.url + "/pay", content=b"hello", headers=te if where == "call" else None
            )
    assert server.connections_accepted == 0


async def test_a_matching_content_length_is_sent_once_and_alone(server: FaultServer) -> None:
    async with trio_retry.Client() as client:
        await client.post(server.url + "/pay", content=b"hello", headers={"Content-Length": "5"})
    assert framing(server.requests[0]) == ["content-length"]


class FramingAuth:
    def __init__(self, headers: Mapping[str, str]) -> None:
        self._headers = headers

    async def headers(self) -> Mapping[str, str]:
        return self._headers

    async def refresh(self) -> None:
        return None


@pytest.mark.parametrize("name", ["Transfer-Encoding", "content-length"])
async def test_framing_headers_from_auth_are_refused(server: FaultServer, name: str) -> None:
    auth = FramingAuth({"Authorization": "Bearer t", name: "chunked"})
    async with trio_retry.Client(auth=auth) as client:
        with pytest.raises(InvalidRequest, match=name) as info:
            await client.post(server.url + "/pay", content=b"hello")
    assert info.value.evidence is Evidence.NOT_SENT
    assert len(info.value.attempts) == 1  # refused inside the attempt, never retried
    assert server.connections_accepted == 0


@pytest.mark.parametrize("status", [303, 307])
async def test_redirects_keep_one_framing_header_at_most(server: FaultServer, status: int) -> None:
    server.route("POST", "/old", Respond(status, headers={"Location": "/new"}))
    async with trio_retry.Client(follow_redirects=True) as client:
        await client.post(server.url + "/old", content=b"hello", headers={"Content-Length": "5"})
    first, second = server.requests
    assert framing(first) == ["content-length"]
    if status == 307:  # method and body replayed
        assert (second.method, second.body, framing(second)) == (
            "POST",
            b"hello",
            ["content-length"],
        )
    else:  # a GET without a body
        assert (second.method, second.body) == ("GET", b"")
        assert "transfer-encoding" not in framing(second)
