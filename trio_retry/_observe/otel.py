"""OpenTelemetry traces and metrics for each attempt (the ``otel`` extra: ``opentelemetry-api``).

``Client(telemetry=trio_retry.OpenTelemetry())`` turns it on. A client without it holds
``None`` and its hot path pays one ``is None`` check per attempt; OpenTelemetry is not even
imported (the package imports it only when :class:`OpenTelemetry` is constructed).

The interface the client uses is three small objects, so the call loop needs no knowledge of
spans or instruments:

- :class:`Instrumentation` (one per client): ``call()`` for each logical call, and the pool
  gauges, registered while the client is open;
- :class:`CallTrace` (one per call, across its redirect hops): ``attempt(...)`` starts an
  attempt's span and counts resends; ``ended(error)`` counts ambiguous outcomes;
- :class:`AttemptTrace` (one per physical attempt): ``inject(headers)`` adds the propagation
  headers, then exactly one of ``finish(attempt)`` (the recorded :class:`~trio_retry.Attempt`,
  with the engine's decision) or ``interrupt(...)`` (cancellation, or an exception from the
  caller's own body or auth code) ends the span and records the metrics.

Context and Trio tasks: OpenTelemetry keeps the current span in a ``contextvars`` variable, and
every Trio task runs in a copy of the context of the task that spawned it (taken at
``start_soon``). The attempt span's parent is read from the *calling* task's context when the
attempt starts, so a call made in a child task is the child of whatever span was current where
that task was spawned (or set inside it). The attempt span itself is never *attached* (made
current): attaching and detaching must happen in one task, and the client's HTTP/2 reader tasks
spawned during an attempt would otherwise inherit the attempt span for the connection's whole
life. Propagation uses an explicit context instead (``propagator.inject(carrier, context=...)``).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from .._core.attempt import Attempt
from .._core.decision import Decision, DenyReason, RetryDenied
from .._core.errors import MissingExtra as MissingExtra
from .._core.evidence import Stage
from .._core.idempotency import Idempotency
from .attributes import (
    DURATION_BUCKETS,
    METRIC_NAMES,
    Attributes,
    attempt_end_attributes,
    attempt_start_attributes,
    decision_attributes,
    duration_attributes,
    interrupted_attributes,
    is_bulkhead_rejection,
    method_attribute,
    span_name,
)

if TYPE_CHECKING:
    from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation
    from opentelemetry.propagators.textmap import TextMapPropagator
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from .._wire.pool import ConnectionPool

__all__ = ["AttemptTrace", "CallTrace", "Instrumentation", "MissingExtra", "OpenTelemetry"]

_SCOPE = "trio_retry"


def _version() -> str:
    """The instrumentation scope's version: the installed distribution's ("" if unknown)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("trio_retry")
    except PackageNotFoundError:
        return ""


class OpenTelemetry:
    """Traces and metrics through the OpenTelemetry API: ``Client(telemetry=OpenTelemetry())``.

    With no arguments it uses the global tracer provider, meter provider and propagator, looked
    up when used (so configuring the SDK after creating the client works). Each may be given
    instead. ``traces=False`` or ``metrics=False`` turns one half off;
    ``sensitive_query_parameters`` adds exact names whose values ``url.full`` redacts.

    Raises :class:`MissingExtra` (an ``ImportError``) naming the ``otel`` extra when
    ``opentelemetry-api`` is not installed.
    """

    __slots__ = (
        "_meter_provider",
        "_propagator",
        "_sensitive",
        "_tracer_provider",
        "metrics",
        "traces",
    )

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        propagator: TextMapPropagator | None = None,
        traces: bool = True,
        metrics: bool = True,
        sensitive_query_parameters: Iterable[str] = (),
    ) -> None:
        try:
            import opentelemetry.metrics
            import opentelemetry.propagate
            import opentelemetry.trace  # noqa: F401
        except ImportError as exc:
            raise MissingExtra(
                "OpenTelemetry() needs the opentelemetry-api package: install trio_retry[otel]"
            ) from exc
        if isinstance(sensitive_query_parameters, str):
            raise TypeError(
                "sensitive_query_parameters must be a list of parameter names, not a str"
            )
        self._tracer_provider = tracer_provider
        self._meter_provider = meter_provider
        self._propagator = propagator
        self.traces = bool(traces)
        self.metrics = bool(metrics)
        self._sensitive = frozenset(sensitive_query_parameters)

    def instrument(self) -> Instrumentation:
        """The per-client instrumentation (the client calls this when it is created)."""
        return Instrumentation(self)

    def __repr__(self) -> str:
        return f"<OpenTelemetry traces={self.traces} metrics={self.metrics}>"


# The telemetry of clients created without ``telemetry=``: None unless
# ``TrioRetryInstrumentor().instrument()`` (``opentelemetry-instrument``, zero-code) set it.
# The client reads it once, when it is created; a plain attribute keeps ``import trio_retry``
# free of OpenTelemetry.
_default_telemetry: OpenTelemetry | None = None


def default_telemetry() -> OpenTelemetry | None:
    """What a client created without ``telemetry=`` uses (set by the instrumentor)."""
    return _default_telemetry


def set_default_telemetry(telemetry: OpenTelemetry | None) -> None:
    """Make clients created from now on without ``telemetry=`` use ``telemetry`` (or none)."""
    global _default_telemetry
    if telemetry is not None and not isinstance(telemetry, OpenTelemetry):
        raise TypeError(f"expected an OpenTelemetry(...), got {type(telemetry).__name__}")
    _default_telemetry = telemetry


class _Instruments:
    """The instruments of one meter, created once however many clients share the meter (the
    SDK returns the first instrument of a name again, and would drop a second one's callbacks:
    so the pool gauges read every registered pool from one callback)."""

    def __init__(self, meter: Meter) -> None:
        self.duration = meter.create_histogram(
            "http.client.request.duration",
            unit="s",
            description="Duration of HTTP client requests (each attempt).",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )
        names = METRIC_NAMES
        self.attempts = meter.create_counter(
            "trio_retry.client.attempts",
            unit=names["trio_retry.client.attempts"][1],
            description=names["trio_retry.client.attempts"][2],
        )
        self.decisions = meter.create_counter(
            "trio_retry.client.retry_decisions",
            unit=names["trio_retry.client.retry_decisions"][1],
            description=names["trio_retry.client.retry_decisions"][2],
        )
        self.budget_exhausted = meter.create_counter(
            "trio_retry.client.budget_exhausted",
            unit=names["trio_retry.client.budget_exhausted"][1],
            description=names["trio_retry.client.budget_exhausted"][2],
        )
        self.ambiguous = meter.create_counter(
            "trio_retry.client.ambiguous_outcomes",
            unit=names["trio_retry.client.ambiguous_outcomes"][1],
            description=names["trio_retry.client.ambiguous_outcomes"][2],
        )
        self.bulkhead = meter.create_counter(
            "trio_retry.client.bulkhead_rejections",
            unit=names["trio_retry.client.bulkhead_rejections"][1],
            description=names["trio_retry.client.bulkhead_rejections"][2],
        )
        self.pools: weakref.WeakSet[ConnectionPool] = weakref.WeakSet()
        for index, which in enumerate(("active", "idle", "waiting")):
            name = f"trio_retry.client.pool.{which}"
            meter.create_observable_gauge(
                name,
                callbacks=[self._observer(index)],
                unit=names[name][1],
                description=names[name][2],
            )

    def _observer(self, index: int) -> Any:
        def observe(options: CallbackOptions) -> Iterator[Observation]:
            from opentelemetry.metrics import Observation

            del options
            totals: dict[tuple[str, str, int], int] = {}
            for pool in list(self.pools):
                for key, counts in pool.origin_counts().items():
                    where = _pool_key_attributes(key)
                    totals[where] = totals.get(where, 0) + counts[index]
            for (scheme, host, port), value in totals.items():
                yield Observation(
                    value, {"url.scheme": scheme, "server.address": host, "server.port": port}
                )

        return observe


def _pool_key_attributes(key: object) -> tuple[str, str, int]:
    """(scheme, host, port) of a pool key: an Origin, or ("proxy", host, port)."""
    if isinstance(key, tuple):
        _, host, port = key
        return ("http", str(host), int(port))
    return (str(key.scheme), str(key.host), int(key.port))  # type: ignore[attr-defined]


# One set of instruments per meter provider (the global one under the key None), so that
# every client of a provider shares them: the meter is asked for once per provider.
_INSTRUMENTS: weakref.WeakKeyDictionary[Any, _Instruments] = weakref.WeakKeyDictionary()
_GLOBAL_INSTRUMENTS: list[_Instruments] = []


def _instruments_for(provider: MeterProvider | None) -> _Instruments:
    from opentelemetry import metrics

    if provider is None:
        if not _GLOBAL_INSTRUMENTS:  # the API's proxy meter follows the provider set later
            _GLOBAL_INSTRUMENTS.append(_Instruments(metrics.get_meter(_SCOPE, _version())))
        return _GLOBAL_INSTRUMENTS[0]
    found = _INSTRUMENTS.get(provider)
    if found is None:
        found = _INSTRUMENTS[provider] = _Instruments(provider.get_meter(_SCOPE, _version()))
    return found


class Instrumentation:
    """One client's instrumentation: a tracer, the shared instruments, the propagator."""

    __slots__ = ("_instruments", "_propagator", "_sensitive", "_tracer")

    def __init__(self, config: OpenTelemetry) -> None:
        from opentelemetry import trace

        self._sensitive = config._sensitive
        self._propagator = config._propagator
        self._tracer: Tracer | None = None
        if config.traces:
            provider = config._tracer_provider
            self._tracer = (
                provider.get_tracer(_SCOPE, _version())
                if provider is not None
                else trace.get_tracer(_SCOPE, _version())
            )
        self._instruments: _Instruments | None = None
        if config.metrics:
            self._instruments = _instruments_for(config._meter_provider)

    def watch_pool(self, pool: ConnectionPool) -> None:
        """Report ``pool`` in the pool gauges until :meth:`forget_pool` (or it is collected)."""
        if self._instruments is not None:
            self._instruments.pools.add(pool)

    def forget_pool(self, pool: ConnectionPool) -> None:
        if self._instruments is not None:
            self._instruments.pools.discard(pool)

    def call(self) -> CallTrace:
        """The trace of one logical call (all its attempts and redirect hops)."""
        return CallTrace(self)

    def inject(self, span: Span | None, parent: Any, headers: list[tuple[bytes, bytes]]) -> None:
        from opentelemetry import propagate, trace

        context = trace.set_span_in_context(span, parent) if span is not None else parent
        carrier: dict[str, str] = {}
        if self._propagator is not None:
            self._propagator.inject(carrier, context=context)
        else:
            propagate.inject(carrier, context=context)
        if not carrier:
            return
        names = {name.lower().encode("latin-1") for name in carrier}
        headers[:] = [(k, v) for k, v in headers if k.lower() not in names]
        for name, value in carrier.items():
            headers.append((name.lower().encode("latin-1"), value.encode("latin-1")))


class CallTrace:
    """The trace of one call: counts the attempts sent so far (``http.request.resend_count``
    runs across retries and redirect hops alike, as the conventions say)."""

    __slots__ = ("_inst", "current", "started")

    def __init__(self, inst: Instrumentation) -> None:
        self._inst = inst
        self.started = 0
        #: The attempt in progress (the client injects its headers and finishes it).
        self.current: AttemptTrace | None = None

    def attempt(
        self,
        *,
        method: str,
        url: str,
        scheme: str,
        host: str,
        port: int,
        number: int,
        idempotency: Idempotency,
        idempotency_key_present: bool,
    ) -> AttemptTrace:
        """Start one physical attempt: its span (child of the caller's current span)."""
        resend_count = self.started
        self.started += 1
        inst = self._inst
        span = None
        parent = None
        if inst._tracer is not None:
            from opentelemetry import context as otel_context
            from opentelemetry.trace import SpanKind

            parent = otel_context.get_current()
            span = inst._tracer.start_span(
                span_name(method),
                context=parent,
                kind=SpanKind.CLIENT,
                attributes=attempt_start_attributes(
                    method=method,
                    url=url,
                    scheme=scheme,
                    host=host,
                    port=port,
                    resend_count=resend_count,
                    attempt_number=number,
                    idempotency=idempotency,
                    idempotency_key_present=idempotency_key_present,
                    extra_sensitive=inst._sensitive,
                ),
            )
        return AttemptTrace(inst, span, parent, method, scheme, host, port)

    def ended_ambiguous(self) -> None:
        """The call is ending with ``HttpAmbiguousExecutionError`` (counted once per call),
        with the identifying attributes of ``http.client.request.duration`` (method, server,
        scheme) of the call's last attempt: the one whose outcome is unknown."""
        instruments = self._inst._instruments
        if instruments is None:
            return
        last = self.current
        instruments.ambiguous.add(1, last.identity() if last is not None else None)


class AttemptTrace:
    """One attempt's span and metric attributes; ended exactly once."""

    __slots__ = ("_done", "_inst", "_parent", "_server", "method", "span")

    def __init__(
        self,
        inst: Instrumentation,
        span: Span | None,
        parent: Any,
        method: str,
        scheme: str,
        host: str,
        port: int,
    ) -> None:
        self._inst = inst
        self.span = span
        self._parent = parent
        self.method = method
        self._server = (scheme, host, port)
        self._done = False

    def identity(self) -> Attributes:
        """What identifies this attempt's request in a metric point: ``http.request.method``,
        ``server.address``, ``server.port``, ``url.scheme`` (no URL, no path: nothing secret
        and nothing high-cardinality)."""
        scheme, host, port = self._server
        return {
            "http.request.method": method_attribute(self.method),
            "server.address": host,
            "server.port": port,
            "url.scheme": scheme,
        }

    def inject(self, headers: list[tuple[bytes, bytes]]) -> None:
        """Add the propagator's headers (``traceparent``...) for this attempt's span to
        ``headers`` (the wire list), replacing any of the same name."""
        if self.span is not None:
            self._inst.inject(self.span, self._parent, headers)

    def finish(self, attempt: Attempt) -> None:
        """End the span with the recorded attempt (its evidence, stage, decision) and record
        the attempt's metrics. A second call (or one after :meth:`interrupt`) does nothing."""
        if self._done:
            return
        self._done = True
        span = self.span
        attrs = attempt_end_attributes(attempt)
        if span is not None:
            span.set_attributes(attrs)
            if "error.type" in attrs:
                from opentelemetry.trace import StatusCode

                # No description when the status code says it (the conventions' advice); a
                # failure's message is not used: it may quote the URL's query.
                text = None if attempt.category is None else str(attrs["error.type"])
                span.set_status(StatusCode.ERROR, text)
            span.end()
        instruments = self._inst._instruments
        if instruments is None:
            return
        scheme, host, port = self._server
        instruments.duration.record(
            attempt.timings.get("total", 0.0),
            duration_attributes(
                method=self.method, scheme=scheme, host=host, port=port, attempt=attempt
            ),
        )
        server: Attributes = {"server.address": host, "server.port": port}
        instruments.attempts.add(1, {**server, "trio_retry.evidence": attempt.evidence.name})
        decision = attempt.decision
        if decision is not None:
            decided = {**server, **_decision_metric_attributes(decision)}
            instruments.decisions.add(1, decided)
            if isinstance(decision, RetryDenied) and decision.reason is DenyReason.BUDGET_EXHAUSTED:
                instruments.budget_exhausted.add(1, server)
        if is_bulkhead_rejection(attempt):
            instruments.bulkhead.add(1, server)

    def interrupt(
        self, *, stage: Stage, evidence_name: str, duration: float, cancelled: bool
    ) -> None:
        """End the span of an attempt that did not finish: cancelled (outer cancellation), or
        an exception from the caller's own code (a body iterator, an auth object). The span
        is marked (``trio_retry.cancelled``, ``error.type``) with the stage reached."""
        if self._done:
            return
        self._done = True
        attrs = interrupted_attributes(stage, evidence_name)
        if not cancelled:
            attrs["error.type"] = "_OTHER"
            del attrs["trio_retry.cancelled"]
        span = self.span
        if span is not None:
            from opentelemetry.trace import StatusCode

            span.set_attributes(attrs)
            span.set_status(StatusCode.ERROR, str(attrs["error.type"]))
            span.end()
        instruments = self._inst._instruments
        if instruments is None:
            return
        scheme, host, port = self._server
        point = duration_attributes(
            method=self.method, scheme=scheme, host=host, port=port, attempt=None
        )
        point["error.type"] = attrs["error.type"]
        instruments.duration.record(duration, point)
        server: Attributes = {"server.address": host, "server.port": port}
        instruments.attempts.add(1, {**server, "trio_retry.evidence": evidence_name})


def _decision_metric_attributes(decision: Decision) -> Attributes:
    attrs = decision_attributes(decision)
    attrs.pop("trio_retry.backoff_delay", None)  # a value, not a dimension
    return attrs
