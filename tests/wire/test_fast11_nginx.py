"""The HTTP/1.1 fast path against a server we did not write: nginx on loopback.

With the fast path on (the default), sequential requests over kept-alive connections get
nginx's Content-Length responses, its chunked ones (gzip of a static file: nginx does not know
the length, so it sends ``Transfer-Encoding: chunked``), and, every ``keepalive_requests``-th
request, a response with ``Connection: close``: the client must then open a new connection
(nginx's ``$connection`` changes exactly there) and never send a request on the closed one. The
access log counts what nginx executed: each request exactly once. The same run with the fast
path off must see the same statuses, bodies and connection pattern.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

import trio_retry
from tests.support.fixtures import StartNginx
from tests.support.fixtures import nginx as nginx
from trio_retry import RetryPolicy
from trio_retry._wire.http11_reader import ResponseReader

ONE = RetryPolicy(max_attempts=1)
TEXT = b"".join(b"line %d of a text nginx gzips on the fly\n" % i for i in range(400))
SERVERS = """
    server {
        listen {{host}}:{{fast}};
        keepalive_requests 4;
        location /small { return 200 "small body\\n"; }
        location /text { root {{workdir}}/html; gzip on; gzip_min_length 1;
                         gzip_types text/plain; default_type text/plain; }
    }
"""


async def _run(base: str, fast: bool, paths: list[str]) -> list[tuple[Any, ...]]:
    out = []
    async with trio_retry.Client(retry=ONE, http1_fast_path=fast) as client:
        for i, path in enumerate(paths):
            with trio.fail_after(10):
                r = await client.get(base + path, headers={"x-request-id": f"{fast}-{i}"})
            out.append(
                (
                    r.status,
                    r.content,
                    r.headers.get("transfer-encoding"),
                    r.headers.get("connection"),
                    r.attempts[-1].connection_reused,
                )
            )
    return out


@pytest.mark.parametrize("fast", [True, False])
async def test_nginx_keepalive_chunked_and_connection_close(
    nginx: StartNginx, fast: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    deferrals = [0]
    real_handover = ResponseReader.handover

    def counting_handover(self: ResponseReader) -> None:
        deferrals[0] += 1
        real_handover(self)

    monkeypatch.setattr(ResponseReader, "handover", counting_handover)
    server = nginx(servers=SERVERS, listeners=("fast",), files={"html/text": TEXT})
    base = server.url("fast", "")
    paths = ["/small", "/text", "/small", "/text"] * 3  # 12 requests, 4 per connection
    seen = await _run(base, fast, paths)
    assert deferrals[0] == 0  # nginx's responses are all the canonical shape
    for (status, content, te, _, _), path in zip(seen, paths, strict=True):
        assert status == 200
        assert content == (b"small body\n" if path == "/small" else TEXT)
        assert te == ("chunked" if path == "/text" else None)
    # every 4th response says "close"; the next request is on a new connection
    assert [conn for *_, conn, _ in seen] == ["keep-alive", "keep-alive", "keep-alive", "close"] * 3
    assert [reused for *_, reused in seen] == [False, True, True, True] * 3
    entries = [
        e for e in server.log().entries if e.request_id and e.request_id.startswith(str(fast))
    ]
    assert sorted(e.request_id or "" for e in entries) == sorted(
        f"{fast}-{i}" for i in range(len(paths))
    )  # each executed exactly once
    assert [e.connection_requests for e in entries] == [1, 2, 3, 4] * 3
    assert len({e.connection for e in entries}) == 3
