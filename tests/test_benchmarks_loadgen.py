"""The C load generators' rows (benchmarks/loadgen.py): what their output parses to, which
scenarios they sit out, and a missing binary as a row. The parsers read the tools' real output
(captured from wrk 4.1.0 and h2load 1.52.0 against the harness's nginx); the smoke test in
tests/test_benchmarks_smoke.py runs the binaries themselves where they are installed."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.adapter import ClientUnavailable, Endpoint
from benchmarks.loadgen import H2loadAdapter, LoadGenerator, WrkAdapter
from benchmarks.scenarios import all_scenarios
from benchmarks.scenarios.throughput import LoadScenario

WRK_OUTPUT = """\
Running 1s test @ http://127.0.0.1:38411/small
  1 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   834.51us    1.67ms  12.23ms   87.38%
    Req/Sec   127.71k    57.13k  188.45k    50.00%
  Latency Distribution
     50%  133.00us
     75%  181.00us
     90%    3.11ms
     99%    7.88ms
  126986 requests in 1.01s, 18.65MB read
  Non-2xx or 3xx responses: 3
  Socket errors: connect 0, read 1, write 0, timeout 2
Requests/sec: 125843.47
Transfer/sec:     18.48MB
"""

H2LOAD_OUTPUT = """\
starting benchmark...
spawning thread #0: 1 total client(s). 2000 total requests
Application protocol: h2
progress: 100% done

finished in 51.86ms, 38569.09 req/s, 2.76MB/s
requests: 2000 total, 2000 started, 2000 done, 1999 succeeded, 1 failed, 0 errored, 0 timeout
status codes: 1998 2xx, 0 3xx, 1 4xx, 0 5xx
traffic: 146.53KB (150049) total, 85.94KB (88000) headers (space savings 52.17%)
"""


def _scenario(name: str) -> LoadScenario:
    scenario = all_scenarios()[name]
    assert isinstance(scenario, LoadScenario)
    return scenario


def _endpoint(http2: bool) -> Endpoint:
    return Endpoint(scheme="https" if http2 else "http", host="127.0.0.1", port=8, http2=http2)


def test_wrk_output() -> None:
    figures = WrkAdapter(_endpoint(False), 32).parse(WRK_OUTPUT, "unused")
    assert figures["requests"] == 126986
    assert figures["errors"] == 3 + 1 + 2  # non-2xx and socket errors
    assert figures["wall_s"] == pytest.approx(1.01)
    assert figures["p50_ms"] == pytest.approx(0.133)
    assert figures["p90_ms"] == pytest.approx(3.11)
    assert figures["p99_ms"] == pytest.approx(7.88)
    assert figures["mean_ms"] == pytest.approx(0.83451)
    assert figures["max_ms"] == pytest.approx(12.23)


def test_h2load_output(tmp_path: Path) -> None:
    log = tmp_path / "log"
    # start time (us since the epoch), status, microseconds until the end of the response
    log.write_text("".join(f"1796183096583299\t200\t{us}\n" for us in (100, 200, 300, 400, 5000)))
    figures = H2loadAdapter(_endpoint(True), 32).parse(H2LOAD_OUTPUT, str(log))
    assert figures["requests"] == 1998  # the 2xx
    assert figures["errors"] == 1 + 1  # the failed request, and the 4xx that "succeeded"
    assert figures["wall_s"] == pytest.approx(0.05186)
    assert figures["p50_ms"] == pytest.approx(0.3)
    assert figures["max_ms"] == pytest.approx(5.0)


def test_h2load_counts_a_2xx_head_cut_by_the_duration_as_neither(tmp_path: Path) -> None:
    """With -D, a request whose 2xx head arrived as the time ran out is in the status codes but
    not done (seen once in CI: 2xx one more than succeeded, which read as -1 errors)."""
    log = tmp_path / "log"
    log.write_text("1796183096583299\t200\t100\n")
    output = H2LOAD_OUTPUT.replace(
        "2000 done, 1999 succeeded, 1 failed", "1999 done, 1999 succeeded, 0 failed"
    ).replace("1998 2xx, 0 3xx, 1 4xx", "2000 2xx, 0 3xx, 0 4xx")
    figures = H2loadAdapter(_endpoint(True), 32).parse(output, str(log))
    assert (figures["requests"], figures["errors"]) == (1999, 0)


def test_unexpected_output_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="no request count"):
        WrkAdapter(_endpoint(False), 1).parse("unable to connect", "unused")
    with pytest.raises(RuntimeError, match="unexpected h2load output"):
        H2loadAdapter(_endpoint(False), 1).parse("", str(tmp_path / "log"))


def test_commands() -> None:
    seq = _scenario("get_sequential")
    wrk = WrkAdapter(_endpoint(False), 1).command(seq, 5, "LOG")
    assert wrk == ["wrk", "-t1", "-c", "1", "-d", "5s", "--latency", "http://127.0.0.1:8/small"]
    h2 = H2loadAdapter(_endpoint(True), 32).command(_scenario("h2_tls_streams_32"), 5, "LOG")
    assert h2[:3] == ["h2load", "-c1", "-m32"]
    h1 = H2loadAdapter(_endpoint(False), 32).command(_scenario("get_concurrent_32"), 5, "LOG")
    assert h1[:4] == ["h2load", "--h1", "-c32", "-m1"]


def test_only_get_scenarios() -> None:
    assert _scenario("upload_64k").skip_reason("wrk") is not None
    assert _scenario("upload_64k").skip_reason("h2load") is not None
    assert _scenario("get_concurrent_32").skip_reason("wrk") is None
    assert _scenario("upload_64k").skip_reason("trio_retry") is None


def test_missing_binary_is_a_row() -> None:
    class Missing(LoadGenerator):
        name = "missing"
        binary = "trio-retry-no-such-load-generator"
        package = "nothing"

    assert Missing.unavailable_reason() == "not installed (apt-get install nothing)"
    with pytest.raises(ClientUnavailable, match="not installed"):
        Missing.check_available()
