"""C load generators as limit rows of the throughput suite: wrk and h2load.

They answer "how fast can a client go on this machine, against this server?": a row of each
sits under the Python clients of the small-request scenarios, with the same columns. They run
inside the row's worker process (pinned to the client CPU like every other row; the binary
inherits the pinning), which starts the binary, waits for it with ``os.wait4`` and takes its
CPU time (user + system, all its threads) from that rusage; server CPU and other load come from
the same ``/proc`` snapshots as the Python rows.

- **wrk** (HTTP/1.1, cleartext or TLS): ``wrk -t1 -cN -dS --latency URL``, N the scenario's
  concurrency (one connection per task, as the Python pools), S = 5 s (1 s in smoke). Its
  latency percentiles are its own (``--latency``).
- **h2load** (nghttp2): ``h2load -c1 -m32 -D S URL`` for HTTP/2 (one connection, 32 streams),
  ``h2load --h1 -cN -m1 -D S URL`` for HTTP/1.1. Timing-based (``-D``) rather than ``-n COUNT``:
  a fixed count would last from a fraction of a second to many seconds depending on the
  scenario, and without ``--warm-up-time`` the CPU time and the requests cover the same span.
  Percentiles come from its ``--log-file`` (one line per request).

Neither checks the body's length (both count non-2xx responses and socket errors as errors),
neither verifies the server's certificate, and neither runs a warm-up: connection setup is in
the measured span, which over seconds of requests is noise. Missing binaries make the row
"not installed". Only GETs: the upload scenario skips them.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
import tempfile
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from benchmarks.adapter import H1, H2, Adapter, ClientUnavailable
from benchmarks.derived import percentile

if TYPE_CHECKING:
    from benchmarks.scenarios import RunParams


class LoadScenario(Protocol):
    """What a load generator reads of a scenario (the throughput suite's ``LoadScenario``
    is one): a Protocol rather than an import, so the scenarios may know the generators and
    not the other way round (``tests/test_layers.py`` keeps ``benchmarks/`` free of circles)."""

    @property
    def method(self) -> str: ...

    @property
    def path(self) -> str: ...

    @property
    def concurrency(self) -> int: ...


FULL_SECONDS = 5
SMOKE_SECONDS = 1


class LoadGenerator(Adapter):
    """A C load generator: the scenario runs :meth:`command` instead of Python requests."""

    runtime = "trio"  # the worker needs one; a load generator's row never enters it
    binary: ClassVar[str]
    package: ClassVar[str]  # the Debian package that has it

    @classmethod
    def unavailable_reason(cls) -> str | None:
        if shutil.which(cls.binary) is None:
            return f"not installed (apt-get install {cls.package})"
        return None

    @classmethod
    def check_available(cls) -> None:
        reason = cls.unavailable_reason()
        if reason is not None:
            raise ClientUnavailable(reason)

    @classmethod
    def skip_for(cls, scenario: LoadScenario) -> str | None:
        """Why this generator sits out ``scenario`` (its rows are GET limits), or None."""
        if scenario.method != "GET":
            return "C load generators are limit rows of the GET scenarios"
        return None

    def command(self, scenario: LoadScenario, seconds: int, log: str) -> list[str]:
        raise NotImplementedError

    def parse(self, output: str, log: str) -> dict[str, Any]:
        """``requests``, ``errors`` and whichever latency figures (ms) the tool gives."""
        raise NotImplementedError

    def url(self, scenario: LoadScenario) -> str:
        return self.endpoint.base_url + scenario.path

    def execute(
        self, scenario: LoadScenario, params: RunParams
    ) -> tuple[dict[str, Any], resource.struct_rusage]:
        """Run the tool to its end: (parsed figures, its rusage). Raises on a failed run."""
        seconds = SMOKE_SECONDS if params.smoke else FULL_SECONDS
        with tempfile.TemporaryDirectory(prefix="loadgen-") as tmp:
            log = os.path.join(tmp, "requests.log")
            out_path = os.path.join(tmp, "out.txt")
            argv = self.command(scenario, seconds, log)
            with open(out_path, "wb") as out:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            # wait4, not Popen.wait: the child's own rusage (its CPU time, all threads).
            _, status, rusage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            with open(out_path, errors="replace") as f:
                output = f.read()
            if proc.returncode != 0:
                tail = " | ".join(output.strip().splitlines()[-3:])
                raise RuntimeError(f"{self.binary} exited {proc.returncode}: {tail}")
            figures = self.parse(output, log)
        figures["command"] = " ".join(argv).replace(log, "LOG")
        return figures, rusage


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


def _ms(text: str) -> float:
    """wrk's and h2load's durations ("133.00us", "7.88ms", "1.2s") in milliseconds."""
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text.strip())
    if m is None:
        raise ValueError(f"not a duration: {text!r}")
    return float(m.group(1)) * _UNITS[m.group(2)]


_WRK_SOCKET_ERRORS = r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)"


class WrkAdapter(LoadGenerator):
    name = "wrk"
    label = "wrk (C, limit)"
    protocols = frozenset({H1})
    no_h2_reason = "wrk has no HTTP/2 (h2load is the HTTP/2 limit)"
    binary = "wrk"
    package = "wrk"
    description = "wrk -t1 -cN -d5s --latency: the HTTP/1.1 limit on this machine (C, epoll)"

    def command(self, scenario: LoadScenario, seconds: int, log: str) -> list[str]:
        conns = str(scenario.concurrency)
        return ["wrk", "-t1", "-c", conns, "-d", f"{seconds}s", "--latency", self.url(scenario)]

    def parse(self, output: str, log: str) -> dict[str, Any]:
        done = re.search(r"(\d+) requests in ([\d.]+\w+),", output)
        if done is None:
            raise RuntimeError(f"no request count in wrk's output: {output[-300:]!r}")
        errors = 0
        non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
        if non2xx:
            errors += int(non2xx.group(1))
        sock = re.search(_WRK_SOCKET_ERRORS, output)
        if sock:
            errors += sum(int(g) for g in sock.groups())
        pct = {int(p): _ms(v) for p, v in re.findall(r"^\s+(50|90|99)%\s+(\S+)$", output, re.M)}
        lat = re.search(r"Latency\s+(\S+)\s+\S+\s+(\S+)", output)
        return {
            "requests": int(done.group(1)),
            "errors": errors,
            "wall_s": _ms(done.group(2)) / 1e3,
            "p50_ms": pct.get(50),
            "p90_ms": pct.get(90),
            "p99_ms": pct.get(99),
            "mean_ms": _ms(lat.group(1)) if lat else None,
            "max_ms": _ms(lat.group(2)) if lat else None,
        }


class H2loadAdapter(LoadGenerator):
    name = "h2load"
    label = "h2load (C, limit)"
    protocols = frozenset({H1, H2})
    binary = "h2load"
    package = "nghttp2-client"
    description = "h2load (nghttp2) -c1 -m32 -D5 over HTTP/2, --h1 -cN over HTTP/1.1: the C limit"

    def command(self, scenario: LoadScenario, seconds: int, log: str) -> list[str]:
        if self.endpoint.http2:
            shape = ["-c1", f"-m{scenario.concurrency}"]
        else:
            shape = ["--h1", f"-c{scenario.concurrency}", "-m1"]
        return ["h2load", *shape, "-D", str(seconds), "--log-file", log, self.url(scenario)]

    def parse(self, output: str, log: str) -> dict[str, Any]:
        done = re.search(
            r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed",
            output,
        )
        finished = re.search(r"finished in ([\d.]+\w+),", output)
        codes = re.search(r"status codes: (\d+) 2xx", output)
        if done is None or finished is None or codes is None:
            raise RuntimeError(f"unexpected h2load output: {output[-300:]!r}")
        # "failed" counts the requests that broke (errored and timed out included); a
        # response with any status "succeeded", so a non-2xx one is an error of ours too.
        # With -D, a response whose 2xx head arrived as the duration ran out is counted in the
        # status codes but not as done: the 2xx count can exceed "succeeded" by such requests,
        # which are neither successes nor errors.
        succeeded = int(done.group(2))
        ok = min(int(codes.group(1)), succeeded)
        errors = int(done.group(3)) + succeeded - ok
        with open(log) as f:
            durations = sorted(int(line.split("\t")[2]) / 1e3 for line in f if line.strip())
        return {
            "requests": ok,
            "errors": errors,
            "wall_s": _ms(finished.group(1)) / 1e3,
            "p50_ms": percentile(durations, 50),
            "p90_ms": percentile(durations, 90),
            "p99_ms": percentile(durations, 99),
            "mean_ms": sum(durations) / len(durations) if durations else None,
            "max_ms": durations[-1] if durations else None,
        }


LOAD_GENERATORS: tuple[type[LoadGenerator], ...] = (WrkAdapter, H2loadAdapter)
