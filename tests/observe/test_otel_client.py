"""OpenTelemetry end to end: a real client against a FaultServer on loopback, the SDK's
in-memory exporter and metric reader on the other side.

Each scenario asserts what a user's tracing backend would show: one CLIENT span per physical
attempt, the conventional attributes, ours (evidence, stage, decision), the propagation header
the server actually received, and the metric points.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

import trio_retry
from tests.conftest import FAST
from trio_retry import (
    Backoff,
    ConnectFailed,
    HttpAmbiguousExecutionError,
    RetryBudget,
    RetryPolicy,
    Upstream,
)
from trio_retry._observe.attributes import DURATION_BUCKETS
from trio_retry.testing import CloseAfterBody, FaultServer, Respond, Stall, refused_port

from .conftest import Otel


def _traceparent(span: ReadableSpan) -> str:
    ctx = span.get_span_context()
    assert ctx is not None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def _attrs(span: ReadableSpan) -> dict[str, object]:
    return dict(span.attributes or {})


async def test_503_then_200_get_is_two_spans_with_resend_count_and_evidence(
    server: FaultServer, otel: Otel
) -> None:
    server.script(Respond(503, headers=[("Retry-After", "0")]))
    server.default = Respond(200, body=b"ok")
    tracer = otel.tracer_provider.get_tracer("test")
    async with trio_retry.Client(retry=FAST, telemetry=otel.telemetry) as client:
        with tracer.start_as_current_span("caller") as caller:
            response = await client.get(server.url + "/items?sig=secret&page=2")
    assert response.status == 200
    first, second, parent = otel.spans()
    assert parent is not None
    assert parent.name == "caller"
    for span in (first, second):
        assert span.name == "GET"
        assert span.kind is SpanKind.CLIENT
        assert span.parent is not None
        assert span.parent.span_id == caller.get_span_context().span_id
        attrs = _attrs(span)
        assert attrs["http.request.method"] == "GET"
        assert attrs["url.full"] == server.url + "/items?sig=REDACTED&page=2"
        assert attrs["server.address"] == "127.0.0.1"
        assert attrs["server.port"] == int(server.url.rsplit(":", 1)[1])
        assert attrs["network.protocol.version"] == "1.1"
        assert attrs["trio_retry.evidence"] == "RESPONSE_RECEIVED"
        assert attrs["trio_retry.stage"] == "COMPLETE"
        assert attrs["trio_retry.idempotency"] == "SAFE"
        assert attrs["trio_retry.idempotency_key_present"] is False
    a, b = _attrs(first), _attrs(second)
    # Resend count 0 is written by leaving the attribute out (the conventions' rule).
    assert "http.request.resend_count" not in a
    assert b["http.request.resend_count"] == 1
    assert (a["trio_retry.attempt"], b["trio_retry.attempt"]) == (1, 2)
    assert a["http.response.status_code"] == 503
    assert a["error.type"] == "503"
    assert a["trio_retry.decision"] == "retry"
    assert a["trio_retry.backoff_delay"] == pytest.approx(0.01)
    assert a["trio_retry.connection_reused"] is False
    assert first.status.status_code is StatusCode.ERROR
    assert b["http.response.status_code"] == 200
    assert "error.type" not in b
    assert "trio_retry.decision" not in b
    assert b["trio_retry.connection_reused"] is True
    assert second.status.status_code is StatusCode.UNSET
    # Each attempt carried its own span's context to the server.
    assert [r.header("traceparent") for r in server.requests] == [
        _traceparent(first),
        _traceparent(second),
    ]


async def test_an_ambiguous_post_is_one_span_marked_ambiguous(
    server: FaultServer, otel: Otel
) -> None:
    server.script(CloseAfterBody())
    async with trio_retry.Client(retry=FAST, telemetry=otel.telemetry) as client:
        with pytest.raises(HttpAmbiguousExecutionError):
            await client.post(server.url + "/pay", content=b"{}")
    (span,) = otel.spans()
    attrs = _attrs(span)
    assert span.name == "POST"
    assert attrs["trio_retry.evidence"] == "SENT_NO_RESPONSE"
    assert attrs["trio_retry.decision"] == "ambiguous"
    assert attrs["trio_retry.idempotency"] == "NON_IDEMPOTENT"
    assert attrs["error.type"] == attrs["trio_retry.failure_category"] == "connection_broken"
    assert "http.response.status_code" not in attrs
    assert span.status.status_code is StatusCode.ERROR
    assert otel.value("trio_retry.client.ambiguous_outcomes") == 1
    assert server.requests[0].header("traceparent") == _traceparent(span)


async def test_the_ambiguous_outcomes_point_carries_the_request_identity(
    server: FaultServer, otel: Otel
) -> None:
    server.script(CloseAfterBody())
    async with trio_retry.Client(retry=FAST, telemetry=otel.telemetry) as client:
        with pytest.raises(HttpAmbiguousExecutionError):
            await client.post(server.url + "/pay?token=s3cr3t", content=b"{}")
    (point,) = otel.metrics()["trio_retry.client.ambiguous_outcomes"]
    assert point.value == 1
    identity = {
        "http.request.method": "POST",
        "server.address": "127.0.0.1",
        "server.port": server.port,
        "url.scheme": "http",
    }
    assert dict(point.attributes) == identity  # no URL, path or query: nothing secret
    (duration,) = otel.metrics()["http.client.request.duration"]
    assert {k: duration.attributes[k] for k in identity} == identity  # the same dimensions


async def test_a_post_with_an_idempotency_key_records_its_presence_not_its_value(
    server: FaultServer, otel: Otel
) -> None:
    server.default = Respond(201)
    async with trio_retry.Client(retry=FAST, telemetry=otel.telemetry) as client:
        await client.post(server.url + "/pay", content=b"{}", idempotency_key="k-7f3a-secret")
    (span,) = otel.spans()
    attrs = _attrs(span)
    assert attrs["trio_retry.idempotency_key_present"] is True
    assert attrs["trio_retry.idempotency"] == "IDEMPOTENT"
    assert not any("k-7f3a-secret" in str(value) for value in attrs.values())


async def test_a_refused_connect_is_not_sent_spans_and_nothing_propagated(otel: Otel) -> None:
    url = f"http://127.0.0.1:{refused_port()}/x"
    policy = RetryPolicy(max_attempts=2, backoff=Backoff(initial=0.0, jitter="none"))
    async with trio_retry.Client(retry=policy, telemetry=otel.telemetry) as client:
        with pytest.raises(ConnectFailed):
            await client.post(url, content=b"x")
    first, second = otel.spans()
    for span in (first, second):
        attrs = _attrs(span)
        assert attrs["trio_retry.evidence"] == "NOT_SENT"
        assert attrs["trio_retry.stage"] == "CONNECT"
        assert attrs["error.type"] == "connect"
        assert attrs["trio_retry.bytes_sent"] == 0
        assert "network.protocol.version" not in attrs  # no connection: version unknown
        assert span.status.status_code is StatusCode.ERROR
    assert _attrs(first)["trio_retry.decision"] == "retry"  # NOT_SENT: safe even for a POST
    assert _attrs(second)["trio_retry.decision"] == "deny"
    assert _attrs(second)["trio_retry.deny_reason"] == "max_attempts"
    assert _attrs(second)["http.request.resend_count"] == 1
    assert otel.value("trio_retry.client.attempts", **{"trio_retry.evidence": "NOT_SENT"}) == 2
    assert otel.value("trio_retry.client.ambiguous_outcomes") == 0


async def test_a_redirect_chain_counts_every_hop_as_a_resend(
    server: FaultServer, otel: Otel
) -> None:
    server.route("GET", "/a", Respond(302, headers=[("Location", "/b")]))
    server.route("GET", "/b", Respond(307, headers=[("Location", "/c?token=t0p")]))
    server.default = Respond(200, body=b"end")
    async with trio_retry.Client(
        retry=FAST, telemetry=otel.telemetry, follow_redirects=True
    ) as client:
        response = await client.get(server.url + "/a")
    assert response.content == b"end"
    spans = otel.spans()
    assert [_attrs(s).get("http.request.resend_count") for s in spans] == [None, 1, 2]
    assert [_attrs(s)["http.response.status_code"] for s in spans] == [302, 307, 200]
    assert [_attrs(s)["url.full"] for s in spans] == [
        server.url + "/a",
        server.url + "/b",
        server.url + "/c?token=REDACTED",
    ]
    assert all("error.type" not in _attrs(s) for s in spans)  # 3xx is not an error
    assert all(s.status.status_code is StatusCode.UNSET for s in spans)
    assert [r.header("traceparent") for r in server.requests] == [_traceparent(s) for s in spans]


async def test_a_cancelled_call_ends_its_span_marked_cancelled(
    server: FaultServer, otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    server.default = Stall(30.0)
    async with trio_retry.Client(retry=FAST, telemetry=otel.telemetry) as client:
        with trio.move_on_after(5.0) as scope:
            await client.get(server.url + "/slow")
        assert scope.cancelled_caught
    (span,) = otel.spans()
    attrs = _attrs(span)
    assert attrs["trio_retry.cancelled"] is True
    assert attrs["error.type"] == "cancelled"
    assert attrs["trio_retry.evidence"] == "SENT_NO_RESPONSE"
    assert attrs["trio_retry.stage"] in ("AWAITING_RESPONSE", "RESPONSE_HEAD")
    assert span.status.status_code is StatusCode.ERROR
    assert span.end_time is not None
    (point,) = otel.metrics()["http.client.request.duration"]
    assert point.attributes["error.type"] == "cancelled"
    assert point.sum == pytest.approx(5.0, abs=0.01)  # virtual time: the move_on_after


async def test_http2_attempts_each_carry_their_own_traceparent(
    h2_server: FaultServer, otel: Otel
) -> None:
    h2_server.script(Respond(503), Respond(502))
    h2_server.default = Respond(200)
    async with trio_retry.Client(
        retry=FAST, telemetry=otel.telemetry, ssl_context=h2_server.client_ssl_context()
    ) as client:
        await client.get(h2_server.url + "/")
    spans = otel.spans()
    assert len(spans) == 3
    assert {_attrs(s)["network.protocol.version"] for s in spans} == {"2"}
    sent = [r.header("traceparent") for r in h2_server.requests]
    assert sent == [_traceparent(s) for s in spans]
    assert len(set(sent)) == 3


async def test_the_global_propagator_is_used_when_none_is_given(
    server: FaultServer, otel: Otel
) -> None:
    telemetry = trio_retry.OpenTelemetry(
        tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider
    )
    async with trio_retry.Client(retry=FAST, telemetry=telemetry) as client:
        await client.get(server.url + "/")
    (span,) = otel.spans()
    # The API's default global propagator is W3C trace context (plus baggage).
    assert server.requests[0].header("traceparent") == _traceparent(span)


async def test_a_call_in_a_child_task_is_a_child_of_the_spawners_span(
    server: FaultServer, otel: Otel
) -> None:
    """Trio gives each task a copy of its spawner's contextvars: the current span travels."""
    tracer = otel.tracer_provider.get_tracer("test")
    async with trio_retry.Client(retry=FAST, telemetry=otel.telemetry) as client:
        with tracer.start_as_current_span("batch") as batch:
            async with trio.open_nursery() as nursery:
                for path in ("/1", "/2"):
                    nursery.start_soon(client.get, server.url + path)
        await client.get(server.url + "/outside")
    gets = [s for s in otel.spans() if s.name == "GET"]
    assert len(gets) == 3
    parents = [s.parent.span_id if s.parent is not None else None for s in gets]
    inside = batch.get_span_context().span_id
    assert parents.count(inside) == 2
    assert parents.count(None) == 1  # the call made after the batch span ended is a root


async def test_a_streamed_response_span_ends_when_the_head_is_handed_over(
    server: FaultServer, otel: Otel
) -> None:
    server.default = Respond(200, body=b"x" * 1000)
    async with (
        trio_retry.Client(retry=FAST, telemetry=otel.telemetry) as client,
        client.stream("GET", server.url + "/big") as response,
    ):
        assert len(otel.spans()) == 1  # ended before the body is read
        assert len(await response.aread()) == 1000
    assert _attrs(otel.spans()[0])["http.response.status_code"] == 200


async def test_metric_values_after_a_scripted_scenario(server: FaultServer, otel: Otel) -> None:
    """One retried GET, one ambiguous POST, one GET whose retry the budget denies, one call
    rejected by the bulkhead: every counter says so, and the histogram has one point per
    attempt with the conventional buckets."""
    port = int(server.url.rsplit(":", 1)[1])
    starved = f"http://localhost:{port}"  # its own origin, with an empty budget
    upstreams = {starved: Upstream(budget=RetryBudget(ratio=0.0, min_per_second=0.0))}
    server.route("GET", "/retried", Respond(503))
    server.route("POST", "/pay", CloseAfterBody())
    server.route("GET", "/starved", Respond(503))
    server.default = Respond(200)
    async with trio_retry.Client(
        retry=FAST, telemetry=otel.telemetry, upstreams=upstreams
    ) as client:
        await client.get(server.url + "/retried")
        with pytest.raises(HttpAmbiguousExecutionError):
            await client.post(server.url + "/pay", content=b"{}")
        response = await client.get(starved + "/starved")
        assert response.status == 503
        gauges = otel.metrics()
    assert otel.value("trio_retry.client.attempts") == 4
    assert otel.value("trio_retry.client.attempts", **{"trio_retry.evidence": "NOT_SENT"}) == 0
    assert (
        otel.value("trio_retry.client.attempts", **{"trio_retry.evidence": "SENT_NO_RESPONSE"}) == 1
    )
    assert otel.value("trio_retry.client.retry_decisions", **{"trio_retry.decision": "retry"}) == 1
    assert (
        otel.value("trio_retry.client.retry_decisions", **{"trio_retry.decision": "ambiguous"}) == 1
    )
    denied = {"trio_retry.decision": "deny", "trio_retry.deny_reason": "budget_exhausted"}
    assert otel.value("trio_retry.client.retry_decisions", **denied) == 1
    assert otel.value("trio_retry.client.budget_exhausted", **{"server.address": "localhost"}) == 1
    assert otel.value("trio_retry.client.ambiguous_outcomes") == 1
    points = otel.metrics()["http.client.request.duration"]
    assert sum(p.count for p in points) == 4
    assert all(tuple(p.explicit_bounds) == DURATION_BUCKETS for p in points)
    by_status: dict[tuple[object, object], int] = {}
    for p in points:
        key = (p.attributes.get("http.response.status_code"), p.attributes.get("error.type"))
        by_status[key] = by_status.get(key, 0) + p.count
    assert by_status == {(503, "503"): 2, (200, None): 1, (None, "connection_broken"): 1}
    # Pool gauges, read while the client was open: 127.0.0.1's one connection (reused by the
    # POST) was closed under it, so only localhost's is idle.
    idle = {p.attributes["server.address"]: p.value for p in gauges["trio_retry.client.pool.idle"]}
    assert idle == {"localhost": 1}
    assert {p.value for p in gauges["trio_retry.client.pool.active"]} == {0}


async def test_a_bulkhead_rejection_is_counted(
    server: FaultServer, otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    server.default = Stall(1.0)
    upstream = Upstream(max_concurrency=1, max_queue=0)
    async with trio_retry.Client(
        retry=RetryPolicy(max_attempts=1), telemetry=otel.telemetry, default_upstream=upstream
    ) as client:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.get, server.url + "/held")
            await trio.sleep(0.1)
            with pytest.raises(trio_retry.AdmissionRejected):
                await client.get(server.url + "/turned-away")
    assert otel.value("trio_retry.client.bulkhead_rejections") == 1
    rejected = [s for s in otel.spans() if _attrs(s)["trio_retry.stage"] == "ADMISSION"]
    assert len(rejected) == 1
    assert _attrs(rejected[0])["error.type"] == "admission"
    assert len(server.requests) == 1  # the rejected call sent nothing


async def test_pool_gauges_report_a_waiting_attempt_per_origin(
    server: FaultServer, otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    server.default = Stall(1.0)
    async with trio_retry.Client(
        retry=RetryPolicy(max_attempts=1), telemetry=otel.telemetry, max_connections=1
    ) as client:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.get, server.url + "/one")
            nursery.start_soon(client.get, server.url + "/two")
            await trio.sleep(0.5)
            gauges = otel.metrics()
    waiting = [p.value for p in gauges["trio_retry.client.pool.waiting"]]
    active = [p.value for p in gauges["trio_retry.client.pool.active"]]
    assert (waiting, active) == ([1], [1])
    # Once the client is closed its pool is no longer reported.
    assert not otel.metrics().get("trio_retry.client.pool.waiting")


async def test_spans_and_propagation_over_the_in_memory_transport(otel: Otel) -> None:
    """The same instrumentation with ``Client(transport=MockTransport())``: no socket."""
    from trio_retry.testing import MockTransport

    transport = MockTransport()
    transport.server.script(Respond(503))
    transport.server.default = Respond(200)
    async with trio_retry.Client(
        retry=FAST, telemetry=otel.telemetry, transport=transport
    ) as client:
        await client.get("http://api.example/orders")
    spans = otel.spans()
    assert [_attrs(s)["server.address"] for s in spans] == ["api.example", "api.example"]
    assert [_attrs(s).get("http.request.resend_count") for s in spans] == [None, 1]
    assert [r.header("traceparent") for r in transport.server.requests] == [
        _traceparent(s) for s in spans
    ]
