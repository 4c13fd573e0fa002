"""The command line's ``--http3`` (curl's meaning: QUIC first, TCP if it fails) and the
protocol column of ``--explain``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import trio

from trio_retry.testing import FaultServer, Respond

from ..support.without import without
from .support import cli


async def test_http3_and_its_explanation(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = FaultServer(tls=True, http3=True)
    url = await nursery.start(server.serve)
    server.route("GET", "/r", Respond(200, body=b"over quic"))
    ca = tmp_path / "ca.pem"
    ca.write_bytes(server.ca_pem)
    ran = await cli("get", url + "/r", "--http3", "--cacert", str(ca), "--explain")
    assert (ran.code, ran.out) == (0, b"over quic")
    lines = ran.err_text.splitlines()
    header, row = lines[0].split(), lines[1].split()
    assert row[header.index("proto")] == "3"
    assert "HTTP/3 200" in lines
    assert [r.http_version for r in server.requests] == ["HTTP/3"]

    as_json = await cli("get", url + "/r", "--http3", "--cacert", str(ca), "--explain=json")
    [hop] = json.loads(as_json.err)["hops"]
    assert [(a["http_version"], a["early_data"]) for a in hop["attempts"]] == [("HTTP/3", None)]


async def test_http3_falls_back_to_tcp(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = FaultServer(tls=True)  # no QUIC: the UDP port is closed
    url = await nursery.start(server.serve)
    ca = tmp_path / "ca.pem"
    ca.write_bytes(server.ca_pem)
    ran = await cli("post", url + "/p", "-d", "x", "--http3", "--cacert", str(ca), "--explain")
    assert ran.code == 0
    lines = ran.err_text.splitlines()
    header = lines[0].split()
    quic, tcp = (line.split() for line in lines[1:3])
    assert quic[header.index("evidence")] == "NOT_SENT"
    assert quic[header.index("decision")] == "-"  # uncounted: the engine was not asked
    assert tcp[header.index("status")] == "200"
    assert server.executed_count("POST", "/p") == 1


async def test_http3_needs_https(nursery: trio.Nursery) -> None:
    server = FaultServer()
    url = await nursery.start(server.serve)  # http://: over HTTP/3 it cannot be reached
    for target in (url + "/r", url.removeprefix("http://") + "/r"):  # http:// is assumed
        ran = await cli("get", target, "--http3")
        assert (ran.code, ran.out) == (2, b"")
        assert ran.err_text == (
            "python -m trio_retry get: error: argument --http3: HTTP/3 needs an https:// URL, "
            "got http://\n"
        )
    assert server.requests == []  # refused before anything is sent


async def test_http3_without_the_extra_names_it() -> None:
    # A process in which aioquic cannot be imported, as if the extra were not installed.
    code = without("aioquic") + "from trio_retry.__main__ import main\nsys.exit(main())\n"
    with trio.fail_after(30):
        done = await trio.run_process(
            [sys.executable, "-c", code, "get", "--http3", "https://127.0.0.1:9/"],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert (done.returncode, done.stdout) == (2, b"")
    assert done.stderr.decode() == (
        "python -m trio_retry get: error: argument --http3: HTTP/3 needs aioquic, the 'http3' "
        "extra: pip install 'trio_retry[http3]'\n"
    )
