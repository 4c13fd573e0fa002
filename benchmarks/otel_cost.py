"""What telemetry costs per request: ``python -m benchmarks.otel_cost``.

Client CPU (``time.process_time()`` of this process, the SDK's export thread included) per
sequential keep-alive ``GET /small`` against the benchmark server (nginx when installed, in a
process of its own), for three clients that take turns every ``--block`` calls in one process,
so that a drift of the (shared) machine hits all three alike (the server is pinned to CPU 1, the
measuring processes to CPU 0):

- ``plain``: ``Client()``, no telemetry (the default);
- ``otel``: ``Client(telemetry=OpenTelemetry(...))`` with the OpenTelemetry SDK: spans through
  a ``BatchSpanProcessor`` to an exporter that drops them, metrics into an
  ``InMemoryMetricReader`` (collected once, at the end);
- ``hooks``: ``Client(event_hooks=...)`` with one request hook that sets a header.

``--against PATH`` also runs the ``plain`` client of another checkout (e.g. ``main`` before the
feature) in alternating subprocesses, to show that the feature costs nothing when unused; each
subprocess is one sample, and a process's placement on the machine shifts all its figures
alike, so use many ``--rounds`` of few ``--blocks``.
Prints one line per client: the median of the per-block figures, in microseconds per request.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio

SMALL_PATH = "/small"


def _sdk_telemetry() -> Any:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    import trio_retry

    class Drop(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(Drop()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    return trio_retry.OpenTelemetry(
        tracer_provider=tracer_provider, meter_provider=meter_provider
    ), (tracer_provider, meter_provider)


def _sign(request: Any) -> None:
    request.headers.set("X-Signature", "s")


async def _measure(url: str, kinds: list[str], blocks: int, block: int) -> dict[str, list[float]]:
    import trio_retry

    options: dict[str, dict[str, Any]] = {"plain": {}}
    providers: Any = None
    if "otel" in kinds:
        telemetry, providers = _sdk_telemetry()
        options["otel"] = {"telemetry": telemetry}
    if "hooks" in kinds:
        options["hooks"] = {"event_hooks": {"request": [_sign]}}
    results: dict[str, list[float]] = {kind: [] for kind in kinds}
    try:
        async with contextlib.AsyncExitStack() as stack:
            clients = {
                kind: await stack.enter_async_context(trio_retry.Client(**options[kind]))
                for kind in kinds
            }
            for client in clients.values():  # warm up: connections open, caches filled
                for _ in range(200):
                    await client.get(url)
            gc.collect()
            for _ in range(blocks):
                for kind, client in clients.items():
                    started = time.process_time()
                    for _ in range(block):
                        response = await client.get(url)
                        assert response.status == 200
                    results[kind].append((time.process_time() - started) / block * 1e6)
    finally:
        if providers is not None:
            for provider in providers:
                provider.shutdown()
    return results


def _worker(args: argparse.Namespace) -> None:
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {0})  # the server is pinned to CPU 1
    results = trio.run(_measure, args.url, args.kinds.split(","), args.blocks, args.block)
    print(json.dumps(results))


def _run_worker(root: Path, url: str, kinds: str, blocks: int, block: int) -> dict[str, Any]:
    # This file runs as a script, with ``root`` first on the path: its trio_retry is imported.
    env = dict(os.environ, PYTHONPATH=str(root))
    out = subprocess.run(
        [sys.executable, __file__, "--worker", "--url", url,
         "--kinds", kinds, "--blocks", str(blocks), "--block", str(block)],
        cwd=root, env=env, check=False, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if out.returncode != 0:
        raise SystemExit(f"worker failed ({root}):\n{out.stderr}")
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=30)
    parser.add_argument("--block", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3, help="subprocess rounds")
    parser.add_argument("--against", type=Path, help="another checkout's plain client")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--kinds", default="plain,otel,hooks", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks.servers import running_server

    here = Path(__file__).resolve().parent.parent
    figures: dict[str, list[float]] = {}
    with running_server("auto", 1 if (os.cpu_count() or 1) > 1 else None) as (server, _):
        endpoint = server.endpoints["h1"]
        url = f"http://{endpoint['host']}:{endpoint['port']}{SMALL_PATH}"
        print(f"server: {server.kind} {server.version}; {url}")
        for round_no in range(args.rounds):
            # Which checkout goes first alternates, so that neither always runs after the other.
            order = [here, args.against] if args.against is not None else [here]
            for root in order if round_no % 2 == 0 else order[::-1]:
                if root == here:
                    for kind, values in _run_worker(
                        here, url, args.kinds, args.blocks, args.block
                    ).items():
                        figures.setdefault(kind, []).extend(values)
                else:
                    theirs = _run_worker(root, url, "plain", args.blocks, args.block)
                    figures.setdefault("plain@against", []).extend(theirs["plain"])
    base = statistics.median(figures["plain"])
    for kind, values in figures.items():
        median = statistics.median(values)
        print(
            f"{kind:>14}: {median:7.1f} us CPU/request (median of {len(values)} blocks of "
            f"{args.block}); {median - base:+6.1f} us vs plain ({median / base:.3f}x)"
        )


if __name__ == "__main__":
    main()
