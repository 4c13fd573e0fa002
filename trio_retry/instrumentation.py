"""Zero-code OpenTelemetry instrumentation (extra ``otel``): :class:`TrioRetryInstrumentor`.

``opentelemetry-instrument python app.py`` finds it through the ``opentelemetry_instrumentor``
entry point; by hand::

    from trio_retry.instrumentation import TrioRetryInstrumentor

    TrioRetryInstrumentor().instrument(tracer_provider=..., meter_provider=...)

Every :class:`~trio_retry.Client` created afterwards without ``telemetry=`` then gets spans and
metrics; ``Client(telemetry=None)`` opts one client out. A module of its own, not a name of
``trio_retry``: it imports ``opentelemetry-instrumentation`` (and raises
:class:`~trio_retry.MissingExtra` naming the ``otel`` extra without it), which ``import
trio_retry`` (and ``from trio_retry import *``) must not.
"""

from ._observe.instrumentor import TrioRetryInstrumentor as TrioRetryInstrumentor

__all__ = ["TrioRetryInstrumentor"]
