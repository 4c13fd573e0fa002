"""Scenario registry.

A scenario module defines :class:`Scenario` objects and registers them with :func:`register`.
To add a suite, write ``benchmarks/scenarios/<suite>.py`` with a ``Scenario`` subclass whose
``run`` measures what it needs, and add the module name to ``SUITE_MODULES``. The runner, worker,
table, JSON and plot pick it up by name; the worker calls ``scenario.run`` in the client's own
subprocess.

The throughput suite uses the defaults below. A suite that measures something else (counts,
shares) describes its own table with :class:`Column` objects (``columns``), says how its runs
combine over repeats (``summary``), which clients it applies to (``skip_reason``), whether it
measures CPU time (``cpu_sensitive``: only then does the runner wait for quiet CPUs and re-run
disturbed runs) and whether repeating it helps (``max_repeats``).
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from benchmarks.adapter import Adapter, Endpoint
    from benchmarks.runtime import Runtime

# Modules imported (in order) to populate the registry.
SUITE_MODULES = (
    "benchmarks.scenarios.throughput",
    "benchmarks.scenarios.amplification",
    "benchmarks.scenarios.duplicates",
    "benchmarks.scenarios.engine_cost",
)


@dataclass(frozen=True)
class Column:
    """One column of a suite's table: ``median[key]`` (see ``Scenario.summary``), formatted
    with ``spec`` after multiplying by ``scale``, then ``suffix``."""

    title: str
    key: str
    spec: str = ",.0f"
    width: int = 9
    scale: float = 1.0
    suffix: str = ""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class RunParams:
    """How much work one run of a scenario does, and what the worker needs to account for it."""

    requests: int  # at least this many measured requests
    warmup: int  # unmeasured requests first
    min_time: float  # keep issuing requests until the measured phase lasted this long
    soft_limit: float  # stop issuing requests after this many seconds of measurement
    hard_limit: float  # abort the whole run (setup included) after this many seconds
    server_pids: tuple[int, ...] = ()
    server_cpu: int | None = None  # CPUs the server and the client are pinned to, if any
    client_cpu: int | None = None
    smoke: bool = False

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["server_pids"] = list(self.server_pids)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunParams:
        return cls(**{**data, "server_pids": tuple(data.get("server_pids", ()))})


class Scenario:
    """Base class. Subclasses are frozen dataclasses with at least these fields."""

    suite: ClassVar[str]
    # Measures client CPU time: wait for quiet CPUs first, re-run when disturbed.
    cpu_sensitive: ClassVar[bool] = True
    # At most this many runs per invocation whatever --repeat says (None: --repeat).
    max_repeats: ClassVar[int | None] = None
    # Table columns; None: the throughput table (r/s, latency, CPU, ratios to httpx/Trio).
    columns: ClassVar[tuple[Column, ...] | None] = None
    # How runs combine over repeats, key -> "median" | "max" | "min" | "sum" | "first";
    # None: the medians of the throughput keys (benchmarks.report.MEDIAN_KEYS).
    summary: ClassVar[dict[str, str] | None] = None
    # One line under the table explaining the columns (None: the throughput legend).
    legend: ClassVar[str | None] = None
    # Row labels for clients that this suite runs differently (e.g. inside a retry loop).
    client_labels: ClassVar[dict[str, str]] = {}
    name: str
    title: str
    description: str
    endpoint: str  # key into the server's endpoints: "h1", "h1_tls", "h2_tls"
    concurrency: int
    requests: int  # full mode
    warmup: int
    smoke_requests: int
    smoke_warmup: int

    def params(
        self,
        *,
        smoke: bool,
        scale: float,
        min_time: float,
        server_pids: tuple[int, ...],
        server_cpu: int | None,
        client_cpu: int | None,
    ) -> RunParams:
        requests, warmup = self.smoke_requests, self.smoke_warmup
        if not smoke:
            requests, warmup = max(1, round(self.requests * scale)), self.warmup
        return RunParams(
            requests=requests,
            warmup=warmup,
            min_time=0.0 if smoke else min_time,
            soft_limit=4.0 if smoke else 120.0,
            hard_limit=30.0 if smoke else 300.0,
            server_pids=server_pids,
            server_cpu=server_cpu,
            client_cpu=client_cpu,
            smoke=smoke,
        )

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name,
            "suite": self.suite,
            "title": self.title,
            "heading": self.heading(),
            "description": self.description,
            "endpoint": self.endpoint,
            "concurrency": self.concurrency,
            "requests": self.requests,
            "warmup": self.warmup,
        }
        if self.columns is not None:
            data["columns"] = [c.to_json() for c in self.columns]
        if self.summary is not None:
            data["summary"] = dict(self.summary)
        if self.legend is not None:
            data["legend"] = self.legend
        if self.client_labels:
            data["client_labels"] = dict(self.client_labels)
        return data

    def heading(self) -> str:
        """The line above this scenario's table."""
        return f"{self.title} (concurrency {self.concurrency})"

    def skip_reason(self, client: str) -> str | None:
        """Why this scenario does not run ``client`` (checked before any worker starts)."""
        return None

    def progress_line(self, entry: dict[str, Any]) -> str:
        """One line of progress for a finished run (status "ok")."""
        noise = entry.get("foreign_cpu_util")
        return (
            f"{entry['rps']:9,.0f} r/s  p50 {entry['p50_ms']:7.2f} ms"
            f"  p99 {entry['p99_ms']:7.2f} ms  cpu {entry['cpu_ms_per_req']:.3f} ms/req"
            + (f"  other load {noise:.0%}" if noise else "")
        )

    def run(
        self, adapter: Adapter, runtime: Runtime, params: RunParams
    ) -> dict[str, Any]:  # pragma: no cover - abstract
        """Run once in the worker process; return the measurement as a JSON-able dict."""
        raise NotImplementedError

    def make_adapter(self, adapter_cls: type[Adapter], endpoint: Endpoint) -> Adapter:
        return adapter_cls(endpoint, self.concurrency)


_REGISTRY: dict[str, Scenario] = {}


def register(*scenarios: Scenario) -> None:
    for scenario in scenarios:
        if scenario.name in _REGISTRY:
            raise ValueError(f"duplicate scenario name {scenario.name!r}")
        _REGISTRY[scenario.name] = scenario


def all_scenarios() -> dict[str, Scenario]:
    # Import every suite (a no-op once imported): another module may already have imported
    # one suite, e.g. benchmarks.servers imports the throughput suite's constants.
    for module in SUITE_MODULES:
        importlib.import_module(module)
    return dict(_REGISTRY)
