"""Zero-code instrumentation: ``trio_retry.instrumentation.TrioRetryInstrumentor`` (what
``opentelemetry-instrument`` loads through the ``opentelemetry_instrumentor`` entry point) gives
clients created without ``telemetry=`` their spans and metrics; ``telemetry=None`` opts one
out."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.trace import SpanKind

import trio_retry
from trio_retry.testing import FaultServer, Respond

from .conftest import Otel

pytest.importorskip("opentelemetry.instrumentation")

from trio_retry.instrumentation import TrioRetryInstrumentor

from ..support.without import without

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def instrumentor() -> Iterator[TrioRetryInstrumentor]:
    instrumentor = TrioRetryInstrumentor()
    yield instrumentor
    instrumentor.uninstrument()  # a no-op when a test already did


async def test_instrument_gives_clients_without_telemetry_a_span_and_uninstrument_stops_it(
    server: FaultServer, otel: Otel, instrumentor: TrioRetryInstrumentor
) -> None:
    server.default = Respond(200, body=b"ok")
    instrumentor.instrument(
        tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider
    )
    async with trio_retry.Client() as client:  # no telemetry=
        assert client.config.instrumentation is not None
        response = await client.get(server.url + "/a")
    assert response.status == 200
    (span,) = otel.spans()
    assert span.kind is SpanKind.CLIENT
    assert span.name == "GET"
    assert otel.value("trio_retry.client.attempts") == 1

    instrumentor.uninstrument()
    async with trio_retry.Client() as client:
        assert client.config.instrumentation is None
        await client.get(server.url + "/b")
    assert len(otel.spans()) == 1  # nothing more


async def test_telemetry_none_opts_one_client_out(
    server: FaultServer, otel: Otel, instrumentor: TrioRetryInstrumentor
) -> None:
    server.default = Respond(200, body=b"ok")
    instrumentor.instrument(
        tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider
    )
    async with trio_retry.Client(telemetry=None) as client:  # none, though instrumented
        assert client.config.instrumentation is None
        await client.get(server.url + "/out")
    assert otel.spans() == []
    async with trio_retry.Client() as client:  # not given: the instrumentor's
        await client.get(server.url + "/in")
    assert [span.attributes["url.full"] for span in otel.spans()] == [server.url + "/in"]
    with pytest.raises(TypeError, match="or None for none, got bool"):
        trio_retry.Client(telemetry=False)  # type: ignore[arg-type]


async def test_a_client_given_telemetry_keeps_its_own(
    server: FaultServer, otel: Otel, instrumentor: TrioRetryInstrumentor
) -> None:
    from opentelemetry.sdk.trace import TracerProvider

    server.default = Respond(200, body=b"ok")
    other = TracerProvider()  # the instrumentor's: no processor, so nothing is exported
    instrumentor.instrument(tracer_provider=other, meter_provider=otel.meter_provider)
    async with trio_retry.Client(telemetry=otel.telemetry) as client:
        await client.get(server.url + "/a")
    assert len(otel.spans()) == 1


def test_the_entry_point_is_registered() -> None:
    (found,) = [
        ep
        for ep in importlib.metadata.entry_points(group="opentelemetry_instrumentor")
        if ep.name == "trio_retry"
    ]
    assert found.load() is TrioRetryInstrumentor  # the public name
    # (The installed metadata may predate the move; what is declared is the public path.)
    assert (
        "[project.entry-points.opentelemetry_instrumentor]\n"
        'trio_retry = "trio_retry.instrumentation:TrioRetryInstrumentor"\n'
    ) in (ROOT / "pyproject.toml").read_text()


def test_without_the_instrumentation_package_the_error_names_the_extra() -> None:
    code = without("opentelemetry.instrumentation") + textwrap.dedent(
        """
        import trio_retry
        try:
            import trio_retry.instrumentation
        except trio_retry.MissingExtra as exc:
            assert isinstance(exc, ImportError)
            assert "install trio_retry[otel]" in str(exc), exc
        else:
            raise AssertionError("imported without opentelemetry-instrumentation")
        trio_retry.Client(telemetry=None)  # opting out needs nothing
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_importing_trio_retry_does_not_import_the_instrumentation_package() -> None:
    code = textwrap.dedent(
        """
        import sys, trio_retry
        assert not [m for m in sys.modules if m.startswith("opentelemetry")], sys.modules
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_opentelemetry_instrument_loads_it() -> None:
    """What ``opentelemetry-instrument`` does at start-up: load every instrumentor entry point
    (with the conflict check it applies) and call ``instrument()``."""
    code = textwrap.dedent(
        """
        from opentelemetry.instrumentation.auto_instrumentation._load import _load_instrumentors
        from opentelemetry.instrumentation.distro import DefaultDistro
        from trio_retry._observe import otel
        _load_instrumentors(DefaultDistro())
        assert isinstance(otel.default_telemetry(), otel.OpenTelemetry)
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
