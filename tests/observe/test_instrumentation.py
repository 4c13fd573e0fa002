"""The instrumentation objects against the SDK directly, without a client or a socket; and the
promise that a client without telemetry does not touch OpenTelemetry at all."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from opentelemetry.trace import SpanKind

import trio_retry
from trio_retry import Attempt, Evidence, FailureCategory, Idempotency, RetryAllowed, Stage
from trio_retry._wire.pool import ConnectionPool

from .conftest import Otel


def _start(otel: Otel, telemetry: trio_retry.OpenTelemetry | None = None) -> object:
    inst = (telemetry or otel.telemetry).instrument()
    return inst.call().attempt(
        method="PUT",
        url="https://api.example/v1/x?sig=s",
        scheme="https",
        host="api.example",
        port=443,
        number=1,
        idempotency=Idempotency.IDEMPOTENT,
        idempotency_key_present=False,
    )


def test_finish_ends_the_span_once_with_the_attempts_attributes(otel: Otel) -> None:
    trace = _start(otel)
    attempt = Attempt(
        number=1,
        stage=Stage.TLS,
        evidence=Evidence.NOT_SENT,
        category=FailureCategory.TLS_HANDSHAKE,
        error=OSError("handshake"),
        timings={"total": 0.02},
        decision=RetryAllowed(0.1),
    )
    trace.finish(attempt)  # type: ignore[attr-defined]
    trace.finish(attempt)  # type: ignore[attr-defined]  # a second end is ignored
    trace.interrupt(  # type: ignore[attr-defined]
        stage=Stage.TLS, evidence_name="NOT_SENT", duration=1.0, cancelled=True
    )
    (span,) = otel.spans()
    attrs = dict(span.attributes or {})
    assert span.kind is SpanKind.CLIENT
    assert span.name == "PUT"
    assert attrs["url.full"] == "https://api.example/v1/x?sig=REDACTED"
    assert attrs["trio_retry.stage"] == "TLS"
    assert attrs["error.type"] == "tls_handshake"
    assert attrs["trio_retry.backoff_delay"] == 0.1
    assert "trio_retry.cancelled" not in attrs
    (point,) = otel.metrics()["http.client.request.duration"]
    assert (point.count, point.sum) == (1, 0.02)


def test_inject_replaces_a_traceparent_the_caller_set(otel: Otel) -> None:
    trace = _start(otel)
    headers = [(b"traceparent", b"00-stale"), (b"accept", b"*/*")]
    trace.inject(headers)  # type: ignore[attr-defined]
    names = [name for name, _ in headers]
    assert names.count(b"traceparent") == 1
    assert b"accept" in names
    assert dict(headers)[b"traceparent"] != b"00-stale"


def test_traces_or_metrics_can_be_turned_off(otel: Otel) -> None:
    quiet = trio_retry.OpenTelemetry(
        tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider, traces=False
    )
    trace = _start(otel, quiet)
    headers: list[tuple[bytes, bytes]] = []
    trace.inject(headers)  # type: ignore[attr-defined]
    trace.finish(Attempt(number=1, stage=Stage.COMPLETE, evidence=Evidence.RESPONSE_RECEIVED,  # type: ignore[attr-defined]
                         status=200, timings={"total": 0.001}))  # fmt: skip
    assert otel.spans() == []
    assert headers == []
    assert otel.value("trio_retry.client.attempts") == 1


def test_two_clients_on_one_meter_share_the_instruments_and_both_pools_are_reported(
    otel: Otel,
) -> None:
    first, second = otel.telemetry.instrument(), otel.telemetry.instrument()
    pools = [ConnectionPool(), ConnectionPool()]
    first.watch_pool(pools[0])
    second.watch_pool(pools[1])
    # Stand-in counts: one origin with 2 connections (1 idle) in each pool.
    for pool in pools:
        pool.origin_counts = lambda: {("proxy", "p.example", 3128): (1, 1, 0)}  # type: ignore[method-assign]
    points = otel.metrics()["trio_retry.client.pool.active"]
    assert [(p.attributes["server.address"], p.value) for p in points] == [("p.example", 2)]
    second.forget_pool(pools[1])
    points = otel.metrics()["trio_retry.client.pool.idle"]
    assert [p.value for p in points] == [1]


def test_constructing_a_client_without_telemetry_imports_no_opentelemetry() -> None:
    code = textwrap.dedent(
        """
        import sys, trio, trio_retry
        async def main():
            async with trio_retry.Client() as client:
                assert client.config.instrumentation is None and client.config.hooks is None
        trio.run(main)
        assert not [m for m in sys.modules if m.startswith("opentelemetry")], sys.modules
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_without_the_api_installed_the_error_names_the_extra() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["opentelemetry"] = None  # as if opentelemetry-api were not installed
        import trio_retry
        try:
            trio_retry.OpenTelemetry()
        except trio_retry.MissingExtra as exc:
            assert isinstance(exc, ImportError) and isinstance(exc, trio_retry.TrioRetryError)
            assert "trio_retry[otel]" in str(exc), exc
        else:
            raise SystemExit("no error")
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_telemetry_must_be_an_opentelemetry_object() -> None:
    with pytest.raises(TypeError, match=r"telemetry must be a trio_retry\.OpenTelemetry"):
        trio_retry.Client(telemetry="otel")  # type: ignore[arg-type]
