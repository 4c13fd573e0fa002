"""The HTTP/2 fast path (``_wire/http2/fast.py``) against nginx, on and off.

The same workload with ``http2_fast_path`` on and off: 64 concurrent GETs on one connection
(nginx's own SETTINGS, WINDOW_UPDATE and ACK), static files of several sizes (up to 10 MB:
DATA frames across the 1 MiB stream window, so WINDOW_UPDATEs go both ways), an upload read by
a proxied backend, a 404, and calls cancelled in the middle of their bodies (DATA arrives for
reset streams). Both runs must see the same statuses and bodies, nginx's log must count each request
once, and with the fast path on nginx's traffic must never have needed h2 (no hand-over).
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import Any

import pytest
import trio

import trio_retry
from tests.support.fixtures import StartNginx
from tests.support.nginx import NginxConfig, RunningNginx
from trio_retry._wire.http2.fast import FastMachine

ONE = trio_retry.RetryPolicy(max_attempts=1)
SIZES = (0, 1, 16_383, 16_385, 300_000, 2_000_000, 10_000_000)
FILES = {f"html/f{size}": bytes(i % 251 for i in range(size)) for size in SIZES}
SERVERS = """
    server {
        listen {{host}}:{{files_tls}} ssl http2;
{{tls}}
        location / { root {{workdir}}/html; }
    }
"""


async def _workload(
    server: RunningNginx, files: str, fast: bool, machines: list[FastMachine]
) -> tuple[list[Any], bool]:
    results: list[Any] = []
    handed_over = False
    async with trio_retry.Client(
        http2=True, ssl_context=server.ssl_context(), retry=ONE, http2_fast_path=fast
    ) as client:

        async def get(i: int) -> None:
            r = await client.get(server.h2_url("/get"), headers={"x-request-id": f"g{i}"})
            results.append(("get", i, r.status, r.content, r.http_version))

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                for i in range(64):
                    nursery.start_soon(get, i)
            for size in SIZES:
                r = await client.get(f"{files}/f{size}")
                results.append(("file", size, r.status, hashlib.sha256(r.content).hexdigest()))
            r = await client.post(
                server.h2_url("/post"), content=b"u" * 200_000, headers={"x-request-id": "p"}
            )
            results.append(("post", r.status, r.content))
            r = await client.get(server.h2_url("/missing"), headers={"x-request-id": "m"})
            results.append(("404", r.status))
            for n in range(3):  # read a little of a big body, then give it up
                async with client.stream("GET", f"{files}/f2000000") as streamed:
                    async for _chunk in streamed.aiter_bytes():
                        break
                results.append(("cancelled", n, streamed.status))
            r = await client.get(server.h2_url("/get"), headers={"x-request-id": "after"})
            results.append(("after", r.status, r.content))
        handed_over = any(m.handed_over for m in machines)
        assert all(m.fast for m in machines)
    return sorted(results, key=repr), handed_over


@pytest.mark.parametrize("fast", [True, False])
async def test_fast_path_on_and_off_against_nginx(
    nginx: StartNginx, fast: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    machines: list[FastMachine] = []
    engage = FastMachine.engage

    def engage_and_note(self: FastMachine) -> bool:
        machines.append(self)
        return engage(self)

    monkeypatch.setattr(FastMachine, "engage", engage_and_note)
    server = nginx(
        NginxConfig(
            client_max_body_size="1m", servers=SERVERS, listeners=("files_tls",), files=FILES
        )
    )
    files = server.url("files_tls", "").rstrip("/")
    results, handed_over = await _workload(server, files, fast, machines)
    assert len(machines) == (2 if fast else 0)  # a connection per origin, engaged when on
    assert not handed_over
    expected_gets = [("get", i, 200, b"ok", "HTTP/2") for i in range(64)]
    assert [r for r in results if r[0] == "get"] == sorted(expected_gets, key=repr)
    for size in SIZES:
        digest = hashlib.sha256(FILES[f"html/f{size}"]).hexdigest()
        assert ("file", size, 200, digest) in results
    assert ("post", 200, b"posted") in results
    assert ("404", 404) in results
    assert ("after", 200, b"ok") in results
    log = server.log(expect=64 + 2 + 1)
    counts = log.by_request_id()
    assert all(counts[f"g{i}"] == 1 for i in range(64))
    assert (counts["p"], counts["m"], counts["after"]) == (1, 1, 1)


async def test_many_large_responses_read_one_after_the_other(nginx: StartNginx) -> None:
    """12 streamed 2 MB responses open at once on one connection, read one after the other:
    the unread ones hold their stream windows, and must not starve the one being read of
    the connection's window (``connection.py``: the ratio of the two windows)."""
    server = nginx(NginxConfig(servers=SERVERS, listeners=("files_tls",), files=FILES))
    url = server.url("files_tls", "/f2000000")
    async with trio_retry.Client(http2=True, ssl_context=server.ssl_context(), retry=ONE) as client:
        with trio.fail_after(10):
            async with contextlib.AsyncExitStack() as stack:
                opened = [
                    await stack.enter_async_context(client.stream("GET", url)) for _ in range(12)
                ]
                sizes = []
                for response in opened:
                    sizes.append(sum([len(chunk) async for chunk in response.aiter_bytes()]))
    assert sizes == [2_000_000] * 12


async def test_fast_path_option_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(TypeError, match="http2_fast_path"):
        trio_retry.Client(http2_fast_path="no")  # type: ignore[arg-type]
    assert trio_retry.Client()._config.http2_fast_path is True
    assert trio_retry.Client(http2_fast_path=False)._config.http2_fast_path is False
    monkeypatch.setenv("TRIO_RETRY_HTTP2_FAST_PATH", "off")
    assert trio_retry.Client()._config.http2_fast_path is False
    assert trio_retry.Client()._config.http1_fast_path is True  # the other one is its own
    monkeypatch.setenv("TRIO_RETRY_HTTP2_FAST_PATH", "maybe")
    with pytest.raises(ValueError, match="TRIO_RETRY_HTTP2_FAST_PATH"):
        trio_retry.Client()
