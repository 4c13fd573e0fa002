"""Scenario registry.

A scenario module defines :class:`Scenario` objects and registers them with :func:`register`.
To add a suite (the planned retry-amplification, duplicate-side-effect and engine-cost suites),
write ``benchmarks/scenarios/<suite>.py`` with a ``Scenario`` subclass whose ``run`` measures what
it needs, and add the module name to ``SUITE_MODULES``. The runner, worker, table, JSON and plot
pick it up by name; the worker calls ``scenario.run`` in the client's own subprocess.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from benchmarks.clients import Adapter, Endpoint
    from benchmarks.runtime import Runtime

# Modules imported (in order) to populate the registry.
SUITE_MODULES = ("benchmarks.scenarios.throughput",)


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
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "suite": self.suite,
            "title": self.title,
            "description": self.description,
            "endpoint": self.endpoint,
            "concurrency": self.concurrency,
            "requests": self.requests,
            "warmup": self.warmup,
        }

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
    if not _REGISTRY:
        for module in SUITE_MODULES:
            importlib.import_module(module)
    return dict(_REGISTRY)
