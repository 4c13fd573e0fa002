"""nginx as the witness of the client's goodbye (issue #41, RFC 9113 §6.8): every HTTP/2
connection the client closes reaches nginx with a GOAWAY(NO_ERROR) before the close — at the
client's exit, over TLS and h2c, when the pool drops an expired connection, and from the command
line. nginx says so itself: its debug log (nginx here is built ``--with-debug``; the level is
set for this test's server only) has one ``http2 GOAWAY frame: last sid 0, error 0`` line per
connection, and its access log (``$connection``) names the connections that carried requests.
"""

from __future__ import annotations

import re
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import trio

import trio_retry
from tests.support.fixtures import StartNginx
from tests.support.nginx import RunningNginx

DEBUG = "error_log {{workdir}}/h2debug.log debug;"
#: ``*N http2 GOAWAY frame: last sid L, error E``: what nginx logs for a GOAWAY it received.
GOAWAY = re.compile(r"\*(\d+) http2 GOAWAY frame: last sid (\d+), error:? (\d+)")
CLOSED = re.compile(r"\*(\d+) close http connection")


def _debug_log(server: RunningNginx, closed: set[int], timeout: float = 5.0) -> str:
    """nginx's debug log, once it logged the close of every connection in ``closed``."""
    path = server.workdir / "h2debug.log"
    end = time.monotonic() + timeout
    while True:
        text = path.read_text(errors="replace") if path.exists() else ""
        if closed <= {int(n) for n in CLOSED.findall(text)} or time.monotonic() > end:
            return text
        time.sleep(0.05)


def goaways_by_connection(server: RunningNginx, connections: set[int]) -> Counter[tuple[int, str]]:
    """For each of ``connections`` (nginx's numbers), the GOAWAY frames nginx received on it,
    as ``(connection, "last=L error=E")``."""
    text = _debug_log(server, connections)
    return Counter(
        (int(conn), f"last={last} error={error}")
        for conn, last, error in GOAWAY.findall(text)
        if int(conn) in connections
    )


def said_goodbye(server: RunningNginx, requests: int) -> None:
    log = server.log(expect=requests)
    connections = log.connections()
    assert connections, "nginx logged no request"
    assert {e.protocol for e in log.entries} == {"HTTP/2.0"}
    assert goaways_by_connection(server, connections) == Counter(
        {(conn, "last=0 error=0"): 1 for conn in connections}
    )


@pytest.mark.parametrize("tls", [pytest.param(True, id="tls"), pytest.param(False, id="h2c")])
async def test_each_connection_ends_with_goaway_at_the_client_exit(
    nginx: StartNginx, tls: bool
) -> None:
    server = nginx(extra_http=DEBUG)
    if tls:
        client = trio_retry.Client(http2=True, ssl_context=server.ssl_context())
        url = server.h2_url
    else:
        client = trio_retry.Client(http2_prior_knowledge=True)
        url = server.h2c_url
    async with client:
        with trio.fail_after(10):
            async with trio.open_nursery() as calls:
                for i in range(8):
                    calls.start_soon(client.get, url(f"/get?{i}"))
    said_goodbye(server, 8)


async def test_an_expired_connection_ends_with_goaway(nginx: StartNginx) -> None:
    server = nginx(extra_http=DEBUG)
    async with trio_retry.Client(
        http2=True, ssl_context=server.ssl_context(), keepalive_expiry=0.05
    ) as client:
        with trio.fail_after(10):
            await client.get(server.h2_url("/get?1"))
            await trio.sleep(0.2)
            await client.get(server.h2_url("/get?2"))  # on a new connection
        log = server.log(expect=2)
        first = log.entries[0].connection
        assert len(log.connections()) == 2
        # The expired one was told before the client left.
        assert goaways_by_connection(server, {first}) == Counter({(first, "last=0 error=0"): 1})
    said_goodbye(server, 2)


async def test_the_command_line_ends_with_goaway(nginx: StartNginx, tmp_path: Path) -> None:
    server = nginx(extra_http=DEBUG)
    (tmp_path / "ca.pem").write_bytes(server.ca_pem)
    args = [sys.executable, "-m", "trio_retry", "get", server.h2_url("/get"), "--http2"]
    with trio.fail_after(30):
        done = await trio.run_process(
            [*args, "--cacert", str(tmp_path / "ca.pem")],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert (done.returncode, done.stdout) == (0, b"ok"), done.stderr
    said_goodbye(server, 1)
