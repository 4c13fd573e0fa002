"""The command line, run as a user would (a subprocess) against a FaultServer."""

from __future__ import annotations

import subprocess
import sys

import trio

from trio_retry.testing import CloseAfterBody, FaultServer, Respond, refused_port


async def cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(30):
        return await trio.run_process(
            [sys.executable, "-m", "trio_retry", *args], capture_stdout=True, capture_stderr=True,
            check=False,
        )  # fmt: skip


async def test_exit_codes_and_explain(nursery: trio.Nursery) -> None:
    server = FaultServer(http2=False)
    url = await nursery.start(server.serve)
    server.route("GET", "/ok", Respond(200, body=b"hello"))
    server.route("GET", "/missing", Respond(404, body=b"nope"))
    server.route("POST", "/pay", CloseAfterBody())

    ok = await cli("get", url + "/ok", "--explain", "-H", "Authorization: Bearer SECRET-1")
    assert ok.returncode == 0
    assert ok.stdout == b"hello\n"
    assert b"COMPLETE" in ok.stderr
    assert b"RESPONSE_RECEIVED" in ok.stderr
    assert b"SECRET-1" not in ok.stderr + ok.stdout
    assert server.requests[0].header("authorization") == "Bearer SECRET-1"

    missing = await cli("get", url + "/missing")
    assert missing.returncode == 4

    ambiguous = await cli("post", url + "/pay", "--data", "x", "--explain")
    assert ambiguous.returncode == 3
    assert b"AMBIGUOUS" in ambiguous.stderr
    assert b"SENT_NO_RESPONSE" in ambiguous.stderr
    assert server.executed_count("POST", "/pay") == 1

    failed = await cli(
        "post", f"http://127.0.0.1:{refused_port()}/", "--json", '{"a": 1}', "--attempts", "2"
    )
    assert failed.returncode == 1
    assert b"ConnectFailed" in failed.stderr
    assert b"NOT_SENT" in failed.stderr

    usage = await cli("get")
    assert usage.returncode == 2
    bad_json = await cli("post", url + "/ok", "--json", "{nope")
    assert bad_json.returncode == 2
