"""``--state FILE``: a second run of the command line resumes the first one's QUIC session and
sends its GET in 0-RTT early data (``--early-data``), on caddy and on FaultServer; bad
``--state`` values are usage errors naming the option. Each run is a process of its own."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import trio

from tests.support.caddy import RunningCaddy
from tests.support.fixtures import caddy as caddy
from trio_retry.testing import FaultServer, Respond

from .support import Ran, cli

__all__ = ["caddy"]


def _attempts(ran: Ran) -> list[tuple[str, str | None]]:
    """``(http_version, early_data)`` of each attempt of ``--explain=json``'s one hop."""
    [hop] = json.loads(ran.err)["hops"]
    return [(a["http_version"], a["early_data"]) for a in hop["attempts"]]


async def test_second_run_sends_its_get_in_early_data_on_caddy(
    caddy: RunningCaddy, tmp_path: Path
) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(caddy.ca_pem)
    state = tmp_path / "state"
    args = ("--http3", "--early-data", "--cacert", str(ca), "--state", str(state))
    url = caddy.url("/echo/zero")

    first = await cli("get", url, *args, "-H", "X-Request-Id: first", "--explain=json")
    assert (first.code, first.out) == (0, b"executed 1")
    assert _attempts(first) == [("HTTP/3", None)]  # no ticket yet: a full handshake
    assert stat.S_IMODE(state.stat().st_mode) == 0o600

    second = await cli("get", url, *args, "-H", "X-Request-Id: second", "--explain")
    assert (second.code, second.out) == (0, b"executed 2")  # (the backend counts every GET)
    header, row = (line.split() for line in second.err_text.splitlines()[:2])
    assert row[header.index("proto")] == "3"
    assert "early:accepted" in row  # the table's words for Attempt.early_data == "accepted"

    third = await cli("get", url, *args, "-H", "X-Request-Id: third", "--explain=json")
    assert _attempts(third) == [("HTTP/3", "accepted")]  # the second run kept a new ticket
    # caddy (its backend) executed each GET once, every one over HTTP/3.
    ids = ("first", "second", "third")
    assert [caddy.backend.count(request_id=i) for i in ids] == [1, 1, 1]
    assert {e.client_proto for e in caddy.backend.executions} == {"HTTP/3.0"}


async def test_second_run_sends_its_get_in_early_data_on_fault_server(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = FaultServer(tls=True, http3=True)
    url = await nursery.start(server.serve)
    server.route("GET", "/r", Respond(200, body=b"ok"))
    ca = tmp_path / "ca.pem"
    ca.write_bytes(server.ca_pem)
    state = tmp_path / "state"
    args = ("--http3", "--early-data", "--cacert", str(ca), "--state", str(state), "--explain=json")
    runs = [await cli("get", url + "/r", *args) for _ in range(2)]
    assert [(r.code, r.out) for r in runs] == [(0, b"ok"), (0, b"ok")]
    assert [_attempts(r) for r in runs] == [[("HTTP/3", None)], [("HTTP/3", "accepted")]]
    assert server.executed_count("GET", "/r") == 2
    # Without --state, nothing carries over: the next run starts cold again.
    cold = await cli("get", url + "/r", *args[:4], "--explain=json")
    assert _attempts(cold) == [("HTTP/3", None)]


async def test_an_ignored_file_is_one_warning_line(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = FaultServer(tls=True, http3=True)
    url = await nursery.start(server.serve)
    server.route("GET", "/r", Respond(200, body=b"ok"))
    ca = tmp_path / "ca.pem"
    ca.write_bytes(server.ca_pem)
    notes = tmp_path / "notes.txt"
    notes.write_bytes(b"my notes\n")
    args = ("get", url + "/r", "--http3", "--cacert", str(ca), "--state", str(notes))
    ran = await cli(*args)
    assert (ran.code, ran.out) == (0, b"ok")
    assert ran.err_text == (
        f"warning: state file '{notes}': ignored: it is not a trio_retry state file (left as "
        "it is); going on without it\n"
    )
    assert notes.read_bytes() == b"my notes\n"
    silent = await cli(*args, "-s")
    assert (silent.code, silent.out, silent.err) == (0, b"ok", b"")


async def test_bad_state_values_are_usage_errors(tmp_path: Path) -> None:
    url = "https://127.0.0.1:9/"
    missing = tmp_path / "nowhere" / "state"
    cases = {
        str(tmp_path): f"'{tmp_path}' is a directory; give the path of a file (e.g. "
        f"'{tmp_path / 'trio_retry.state'}')",
        str(missing): f"the directory '{missing.parent}' of '{missing}' does not exist",
        "/proc/trio_retry.state": "cannot create a file in '/proc' (",
    }
    for value, expected in cases.items():
        ran = await cli("get", url, "--state", value)
        assert (ran.code, ran.out) == (2, b"")
        assert ran.err_text.startswith(
            f"python -m trio_retry get: error: argument --state: {expected}"
        ), ran.err_text
    early = await cli("get", url, "--early-data")
    assert (early.code, early.err_text) == (
        2,
        "python -m trio_retry get: error: argument --early-data: needs --http3\n",
    )
    assert os.listdir(tmp_path) == []  # nothing created, no probe file left behind
