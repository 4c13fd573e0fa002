"""Resumed downloads against a real nginx serving a static file (SPEC §18): a relay in front of
it resets each connection after a number of bytes (benchmarks/cut_relay.py), so the body breaks
mid-way on nginx's own connections; the client continues it with Range/If-Range against
nginx's strong ETag. nginx's access log is the witness: one 200 and a 206 per continuation.
When the file changes between the break and the continuation, nginx answers If-Range with a
whole 200, and nothing of it is spliced."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import trio

import trio_retry
from benchmarks.cut_relay import CutRelay
from tests.streams.test_resume import read_into
from tests.support.fixtures import StartNginx
from tests.support.nginx import RunningNginx
from trio_retry import ConnectionBroken, Evidence

SIZE = 3 * 1024 * 1024 + 12345
CUT = 700_000  # about five cuts over the file
FILE = bytes((i * 7 + i // 251) % 256 for i in range(SIZE))
SERVERS = """
    server {
        listen {{host}}:{{files}};
        location / { root {{workdir}}/html; }
    }
    server {
        listen {{host}}:{{files_tls}} ssl http2;
{{tls}}
        location / { root {{workdir}}/html; }
    }
"""
POLICY = trio_retry.RetryPolicy(
    max_attempts=12, backoff=trio_retry.Backoff(initial=0.0, jitter="none")
)


def start(nginx: StartNginx) -> RunningNginx:
    """nginx serving ``file.bin`` from its html/ directory (``files``: HTTP/1.1, ``files_tls``:
    HTTP/2 over TLS)."""
    return nginx(servers=SERVERS, listeners=("files", "files_tls"), files={"html/file.bin": FILE})


@pytest.mark.parametrize("listener", ["files", "files_tls"])
@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "buffered"])
async def test_a_file_cut_every_700_kb_arrives_whole(
    nginx: StartNginx, listener: str, streamed: bool
) -> None:
    server = start(nginx)
    relay = CutRelay(server.ports[listener], CUT)
    options: dict[str, object] = {"retry": POLICY}
    if listener == "files_tls":
        options.update(http2=True, ssl_context=server.ssl_context())
    scheme = "https" if listener == "files_tls" else "http"
    async with trio.open_nursery() as nursery:
        port = await nursery.start(relay.serve)
        url = f"{scheme}://127.0.0.1:{port}/file.bin"
        with trio.fail_after(60):
            async with trio_retry.Client(**options) as client:  # type: ignore[arg-type]
                if streamed:
                    got = bytearray()
                    async with client.stream("GET", url) as response:
                        async for chunk in response.aiter_bytes():
                            got += chunk
                    body = bytes(got)
                else:
                    response = await client.get(url)
                    body = response.content
        nursery.cancel_scope.cancel()
    assert hashlib.sha256(body).digest() == hashlib.sha256(FILE).digest()
    cuts = relay.cuts
    assert cuts == SIZE // CUT  # (a head and a TLS handshake fit in any cut)
    assert cuts >= 4
    assert response.resumed == cuts
    assert [a.range_start is not None for a in response.attempts] == [False] + [True] * cuts
    starts = [a.range_start for a in response.attempts[1:]]
    assert starts == sorted(set(starts))  # each from further on: nothing asked twice
    log = server.log(expect=cuts + 1)
    statuses = [entry.status for entry in log.entries if entry.uri == "/file.bin"]
    assert statuses.count(206) == cuts  # nginx's word: each continuation was a range
    assert statuses.count(200) == 1
    assert relay.downstream < SIZE * 1.05  # nothing sent twice but heads (and TLS)


async def test_a_file_changed_before_the_continuation_is_never_spliced(
    nginx: StartNginx,
) -> None:
    server = start(nginx)
    path = Path(server.workdir) / "html" / "file.bin"
    changed = bytes(reversed(FILE))

    def change() -> None:  # the file is rewritten while the connection is being cut
        path.write_bytes(changed)
        stat = path.stat()
        os.utime(path, (stat.st_atime, stat.st_mtime + 10))  # a new ETag, whatever the clock

    relay = CutRelay(server.ports["files"], CUT, on_cut=change)
    got = bytearray()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(relay.serve)
        with trio.fail_after(30):
            async with trio_retry.Client(retry=POLICY) as client:
                with pytest.raises(ConnectionBroken) as caught:
                    await read_into(got, client, f"http://127.0.0.1:{port}/file.bin")
        nursery.cancel_scope.cancel()
    assert FILE.startswith(bytes(got))  # only the first representation reached the caller
    error = caught.value
    assert error.evidence is Evidence.PARTIAL_RESPONSE
    assert "representation changed" in str(error)
    statuses = [e.status for e in server.log(expect=2).entries if e.uri == "/file.bin"]
    assert statuses == [200, 200]  # If-Range did not match: nginx sent the whole new file
