"""Observability: event hooks, and OpenTelemetry traces and metrics (the ``otel`` extra).

- :mod:`.hooks`: ``Client(event_hooks=...)``, caller code before each attempt and on each
  response head;
- :mod:`.attributes`: pure, what an attempt looks like as span and metric attributes;
- :mod:`.otel`: ``OpenTelemetry``, the spans, the propagation and the instruments.

The client holds ``None`` for each feature it was not given, so either costs one ``is None``
check per attempt when unused.
"""
