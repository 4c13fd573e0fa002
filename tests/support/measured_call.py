"""One GET in a process of its own, with what it cost in memory: for the tests of the client's
limits against hostile servers, which run in the test's process (their allocations must not
count, and a limit that fails must not take the test's process with it).

Run as ``python -m tests.support.measured_call '<json>'`` (:func:`measured_call` does it) with
the keys of :class:`Call`. The process first makes a warm-up call with a client of its own
(imports, certificates, first-use caches), then the measured call with a fresh client, and
prints one JSON object (:class:`Measured`): the call's outcome, and the process's peak RSS above
its RSS before the call (the kernel's ``VmHWM``, reset through ``/proc/self/clear_refs``) and
the peak of Python's allocations (``tracemalloc``), both until the process has done its calls.
With ``after``, a second call on the same client follows (was the connection kept?).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import tracemalloc
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Call", "Measured", "measured_call"]

_ROOT = Path(__file__).resolve().parents[2]  # (where ``tests`` is a package)


@dataclass(frozen=True)
class Call:
    url: str
    warm_url: str
    protocol: str  # "HTTP/1.1", "HTTP/2" (h2c, prior knowledge) or "HTTP/3"
    deadline: float
    ca_file: str | None = None
    after: str | None = None
    #: The measured call's own deadline, when shorter than ``deadline``.
    first_deadline: float | None = None
    max_attempts: int = 3
    #: The measured call is made this many times, one after the other (the outcome is the
    #: last one's).
    repeat: int = 1
    max_header_bytes: int = 65536


@dataclass
class Measured:
    #: The response's status, or the error's class name.
    outcome: str
    category: str | None = None
    evidence: str | None = None
    message: str = ""
    #: Per attempt: (http_version, connection_reused, category).
    attempts: list[tuple[str | None, bool, str | None]] = field(default_factory=list)
    elapsed: float = 0.0
    #: The process's CPU time, over the calls.
    cpu: float = 0.0
    rss_growth: int = 0
    traced_peak: int = 0
    #: The ``after`` call: (status or error class, connection_reused of its last attempt).
    after: tuple[str, bool | None] | None = None


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(key):
                return int(line.split()[1])
    raise AssertionError(f"no {key} in /proc/self/status")


def _client(call: Call) -> Any:
    import ssl

    import trio_retry

    retry = trio_retry.RetryPolicy(max_attempts=call.max_attempts)
    limit = call.max_header_bytes
    if call.protocol == "HTTP/3":
        assert call.ca_file is not None
        return trio_retry.Client(
            upstreams={call.url.rsplit("/", 1)[0]: trio_retry.Upstream(http3=True)},
            ssl_context=ssl.create_default_context(cafile=call.ca_file),
            retry=retry,
            max_header_bytes=limit,
        )
    http2 = call.protocol == "HTTP/2"
    return trio_retry.Client(
        http2=http2, http2_prior_knowledge=http2, retry=retry, max_header_bytes=limit
    )


async def _run(call: Call) -> Measured:
    import trio

    import trio_retry

    async with _client(call) as warm:
        try:
            await warm.get(call.warm_url, deadline=call.deadline)
        except trio_retry.TrioRetryError:
            pass  # (an attack on every connection meets the warm-up too)
    async with _client(call) as client:
        rss = _status_kib("VmRSS:")
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")  # VmHWM := VmRSS
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        cpu = time.process_time()
        start = time.monotonic()
        try:
            for _ in range(call.repeat - 1):
                with contextlib.suppress(trio_retry.TrioRetryError):
                    await client.get(call.url, deadline=call.first_deadline or call.deadline)
            response = await client.get(call.url, deadline=call.first_deadline or call.deadline)
        except trio_retry.TrioRetryError as exc:
            measured = Measured(
                type(exc).__name__,
                getattr(exc, "category", None) and exc.category.name,
                getattr(exc, "evidence", None) and exc.evidence.name,
                str(exc),
                [
                    (a.http_version, a.connection_reused, a.category and a.category.name)
                    for a in exc.attempts
                ],
            )
        else:
            measured = Measured(
                str(response.status_code),
                attempts=[
                    (a.http_version, a.connection_reused, a.category and a.category.name)
                    for a in response.attempts
                ],
            )
        measured.elapsed = time.monotonic() - start
        if call.after is not None:
            with trio.fail_after(call.deadline):
                try:
                    after = await client.get(call.after, deadline=call.deadline)
                except trio_retry.TrioRetryError as exc:
                    measured.after = (type(exc).__name__, None)
                else:
                    reused = after.attempts[-1].connection_reused
                    measured.after = (str(after.status_code), reused)
        measured.cpu = time.process_time() - cpu
        measured.traced_peak = tracemalloc.get_traced_memory()[1] - before
        tracemalloc.stop()
        measured.rss_growth = (_status_kib("VmHWM:") - rss) * 1024
    return measured


async def measured_call(call: Call) -> Measured:
    """Run ``call`` in a new Python process (see the module docstring); bounded by twice its
    deadline and some seconds to start."""
    import trio

    with trio.fail_after(2 * call.deadline + 20):
        done = await trio.run_process(
            [sys.executable, "-m", "tests.support.measured_call", json.dumps(asdict(call))],
            stdin=subprocess.DEVNULL,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            cwd=_ROOT,
        )
    if done.returncode != 0:
        raise AssertionError(f"the measured call's process failed: {done.stderr.decode()[-3000:]}")
    fields = json.loads(done.stdout.decode().strip().splitlines()[-1])
    fields["attempts"] = [tuple(a) for a in fields["attempts"]]
    if fields["after"] is not None:
        fields["after"] = tuple(fields["after"])
    return Measured(**fields)


if __name__ == "__main__":
    import trio

    result = trio.run(_run, Call(**json.loads(sys.argv[1])))
    print(json.dumps(asdict(result)))
