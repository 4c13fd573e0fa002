"""Zero-code instrumentation: ``opentelemetry-instrument python app.py`` (the ``otel`` extra).

``TrioRetryInstrumentor`` is found through the ``opentelemetry_instrumentor`` entry point, as
the contrib instrumentations are. Instrumenting makes every :class:`~trio_retry.Client`
created afterwards *without* ``telemetry=`` use ``OpenTelemetry(tracer_provider=...,
meter_provider=...)`` (the providers given to ``instrument()``, or the global ones); a client
given ``telemetry=`` keeps its own, and clients already created are left as they are.
Uninstrumenting stops that for clients created afterwards.

The public name is ``trio_retry.instrumentation.TrioRetryInstrumentor``. This module imports
``opentelemetry.instrumentation`` (package ``opentelemetry-instrumentation``), or raises
:class:`MissingExtra` naming the ``otel`` extra: ``import trio_retry`` never imports it.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from .otel import MissingExtra, OpenTelemetry, set_default_telemetry

try:
    # mypy does not see the class through the package's instrumentor module (it is Any to it).
    from opentelemetry.instrumentation.instrumentor import (  # type: ignore[attr-defined]
        BaseInstrumentor,
    )
except ImportError as exc:
    raise MissingExtra(
        "TrioRetryInstrumentor needs the opentelemetry-instrumentation package: install "
        "trio_retry[otel]"
    ) from exc

__all__ = ["TrioRetryInstrumentor"]

_INSTRUMENTS = ("trio_retry >= 0.1",)


class TrioRetryInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """``TrioRetryInstrumentor().instrument(tracer_provider=..., meter_provider=...)``: spans
    and metrics for clients created without ``telemetry=``; ``uninstrument()`` undoes it."""

    def instrumentation_dependencies(self) -> Collection[str]:
        return _INSTRUMENTS

    def _instrument(self, **kwargs: Any) -> None:
        set_default_telemetry(
            OpenTelemetry(
                tracer_provider=kwargs.get("tracer_provider"),
                meter_provider=kwargs.get("meter_provider"),
                propagator=kwargs.get("propagator"),
            )
        )

    def _uninstrument(self, **kwargs: Any) -> None:
        set_default_telemetry(None)
