"""``python -m benchmarks.instructions`` (instructions per request under valgrind).

valgrind itself is not needed here: what the tool adds around it is tested: reading
callgrind's total, the per-request difference, the options, and the child's run (the part
valgrind would trace), natively against the harness's server.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.adapter import Endpoint
from benchmarks.caddy import find_caddy
from benchmarks.instructions import _endpoint, collected, parse_args, per_request
from benchmarks.servers import running_server

ROOT = Path(__file__).resolve().parents[1]

CALLGRIND_TAIL = """\
==4242== Events    : Ir
==4242== Collected : 1,411,992,237
==4242==
==4242== I   refs:      1,411,992,237
"""


def test_collected_reads_callgrinds_total() -> None:
    assert collected(CALLGRIND_TAIL) == 1_411_992_237
    with pytest.raises(ValueError, match="Collected"):
        collected("==1== valgrind: failed to start tool\n")


def test_per_request_is_the_difference_over_the_requests_between() -> None:
    assert per_request(1_000_000, 1_530_000, 1000) == 530.0
    with pytest.raises(ValueError, match="at least 1"):
        per_request(1, 2, 0)


def test_options_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_args(["--clients", "trio_retry_no_fast, h11_trio"]).names == [
        "trio_retry_no_fast",
        "h11_trio",
    ]
    with pytest.raises(SystemExit):
        parse_args(["--clients", "trio_retyr"])
    assert "unknown client(s): trio_retyr" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--n", "0"])
    assert parse_args(["--h3", "--clients", "trio_retry"]).h3
    with pytest.raises(SystemExit):
        parse_args(["--h3", "--clients", "trio_retry,h11_trio"])
    assert "--h3: client(s) without HTTP/3: h11_trio" in capsys.readouterr().err


@pytest.mark.parametrize("client", ["trio_retry_no_fast", "h11_trio"])
def test_the_child_run_makes_its_requests(client: str) -> None:
    """What runs under valgrind: the warm-up, then the requests asked, against the server; an
    unexpected response would fail it (the count would then be of something else)."""
    with running_server("auto", None) as (server, _ca):
        endpoint = Endpoint.from_json({**server.endpoints["h1"], "ca_file": None})
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.instructions", "--drive", client,
             "--requests", "7", "--endpoint", json.dumps(endpoint.to_json())],
            cwd=ROOT, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert f"{client}: 107 requests (100 warm-up)" in proc.stdout


def test_the_child_run_over_http3_checks_its_protocol() -> None:
    """The HTTP/3 row (``--h3``): against caddy, the requests asked, the first and the last of
    them checked to have gone over HTTP/3 (a fallback to TCP would count HTTP/2)."""
    if find_caddy() is None:
        pytest.skip("caddy is not installed (apt-get install caddy)")
    pytest.importorskip("aioquic", reason="needs the http3 extra")
    with _endpoint("h3", "auto") as endpoint:
        assert endpoint.http3
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.instructions", "--drive", "trio_retry",
             "--requests", "7", "--conc", "4", "--endpoint", json.dumps(endpoint.to_json())],
            cwd=ROOT, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "trio_retry: 107 requests (100 warm-up)" in proc.stdout
