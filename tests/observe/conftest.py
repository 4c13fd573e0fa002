"""Fixtures: the OpenTelemetry SDK wired to in-memory exporters, a FaultServer, fast retries.

Each test gets its own tracer and meter providers (never the global ones), so tests cannot
see each other's spans or metric points.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import trio

import trio_retry
from trio_retry.testing import FaultServer

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace.propagation.tracecontext import (
    TraceContextTextMapPropagator,
)


@dataclass
class Otel:
    """The SDK side of one test: what was exported, and the telemetry option for a client."""

    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    telemetry: trio_retry.OpenTelemetry

    def spans(self) -> list[ReadableSpan]:
        """Finished spans, in the order they ended."""
        return list(self.exporter.get_finished_spans())

    def metrics(self) -> dict[str, list[Any]]:
        """``{metric name: [data points]}`` of a fresh collection."""
        found: dict[str, list[Any]] = {}
        data = self.reader.get_metrics_data()
        if data is None:
            return found
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found.setdefault(metric.name, []).extend(metric.data.data_points)
        return found

    def value(self, name: str, **attributes: object) -> float:
        """The sum of a counter's (or gauge's) points whose attributes include ``attributes``."""
        total = 0.0
        for point in self.metrics().get(name, []):
            if all(point.attributes.get(k) == v for k, v in attributes.items()):
                total += point.value
        return total


@pytest.fixture
def otel() -> Iterator[Otel]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    telemetry = trio_retry.OpenTelemetry(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        propagator=TraceContextTextMapPropagator(),
    )
    yield Otel(exporter, reader, tracer_provider, meter_provider, telemetry)
    tracer_provider.shutdown()
    meter_provider.shutdown()


@pytest.fixture
async def h2_server(nursery: trio.Nursery) -> FaultServer:
    fault_server = FaultServer(tls=True, http2=True)
    await nursery.start(fault_server.serve)
    return fault_server
