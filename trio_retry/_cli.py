"""The command line: ``demo`` (more commands arrive with the client)."""

from __future__ import annotations

import argparse

from ._core.engine import DefaultRetryEligibilityEngine, RetryContext
from ._core.evidence import Evidence, FailureCategory
from ._core.idempotency import Idempotency
from ._core.replay import Replayability


def _engine_tour() -> None:
    engine = DefaultRetryEligibilityEngine()
    cases = [
        ("POST, connection refused (never sent)", dict(
            failure=FailureCategory.CONNECT, evidence=Evidence.NOT_SENT,
            idempotency=Idempotency.NON_IDEMPOTENT, status=None)),
        ("POST, server read it and closed", dict(
            failure=FailureCategory.CONNECTION_BROKEN, evidence=Evidence.SENT_NO_RESPONSE,
            idempotency=Idempotency.NON_IDEMPOTENT, status=None)),
        ("GET, 503 with Retry-After: 2", dict(status=503, retry_after=2.0)),
        ("POST with a one-shot body, 503", dict(
            status=503, replayability=Replayability.ONE_SHOT,
            idempotency=Idempotency.NON_IDEMPOTENT)),
        ("GET, retry budget empty", dict(status=503, budget_available=False)),
    ]  # fmt: skip
    for title, fields in cases:
        ctx = RetryContext(attempt=1, max_attempts=3, proposed_delay=0.1, **fields)  # type: ignore[arg-type]
        print(f"{title:40} -> {engine.decide(ctx)}")


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m trio_retry")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="walk through the retry decisions that matter")
    args = parser.parse_args(argv)
    if args.command == "demo":
        _engine_tour()
    return 0
