"""``python -m trio_retry demo``: the failures that matter, on an embedded FaultServer.

Each case prints what was asked, the attempt table (attempt, stage, evidence, status or failure,
the engine's decision, milliseconds), what the caller got, and what the server really executed
— so the claim "after a failure, you know whether the server did it" can be checked by eye.
Loopback only, no network, a few seconds.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TextIO

import trio

from ._client import Client
from ._core.backoff import Backoff
from ._core.budget import RetryBudget
from ._core.policy import RetryPolicy, Upstream
from ._errors import HttpAmbiguousExecutionError, RequestFailed
from ._models import Response
from ._trail import attempt_table
from .testing import CloseAfterBody, FaultServer, RefuseStream, Respond, refused_port

POLICY = RetryPolicy(max_attempts=3, backoff=Backoff(initial=0.05, max=2.0, jitter="none"))


async def _case(
    out: TextIO,
    title: str,
    explanation: str,
    call: Callable[[], Awaitable[Response]],
    server: FaultServer | None = None,
    path: str | None = None,
) -> None:
    print(f"\n== {title}", file=out)
    print(f"   {explanation}", file=out)
    try:
        response = await call()
    except HttpAmbiguousExecutionError as exc:
        print(_indent(attempt_table(exc.attempts)), file=out)
        print(f"   -> HttpAmbiguousExecutionError ({exc.evidence}): may have run; not retried",
              file=out)  # fmt: skip
    except RequestFailed as exc:
        print(_indent(attempt_table(exc.attempts)), file=out)
        print(f"   -> {type(exc).__name__} ({exc.evidence}): {exc.decision}", file=out)
    else:
        print(_indent(attempt_table(response.attempts)), file=out)
        print(f"   -> {response.http_version} {response.status} {response.content!r}", file=out)
    if server is not None:
        executed = server.executed_count(path=path)
        received = sum(1 for r in server.requests if path is None or r.path == path)
        print(f"   server: {received} received, {executed} executed", file=out)


def _indent(text: str) -> str:
    return "\n".join("   " + line for line in text.splitlines())


async def run_demo(out: TextIO, quick: bool = False) -> int:
    """Run every case; return 0. Each case is bounded; the whole demo takes a few seconds."""
    print("trio_retry demo: every server below is a FaultServer on 127.0.0.1", file=out)
    h1 = FaultServer(http2=False)
    h2 = FaultServer(http2=True)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(h1.serve)
            await nursery.start(h2.serve)
            async with Client(retry=POLICY) as client:
                refused = f"http://127.0.0.1:{refused_port()}/payments"
                await _case(
                    out,
                    "POST to a port that refuses connections",
                    "Nothing was ever sent (NOT_SENT), so even a POST is retried safely.",
                    lambda: client.post(refused, json={"amount": 10}),
                )

                h1.route("POST", "/payments", CloseAfterBody())
                await _case(
                    out,
                    "POST that the server read, executed, then dropped",
                    "The request left (SENT_NO_RESPONSE): a retry could pay twice. Ambiguous.",
                    lambda: client.post(h1.url + "/payments", json={"amount": 10}),
                    h1,
                    "/payments",
                )

                h1.route("POST", "/orders", CloseAfterBody(), Respond(201, body=b"created"))
                await _case(
                    out,
                    "The same failure with idempotency_key=True",
                    "An Idempotency-Key makes the POST idempotent: one key, sent on every try.",
                    lambda: client.post(h1.url + "/orders", json={"item": 1}, idempotency_key=True),
                    h1,
                    "/orders",
                )

                h1.route("GET", "/report", Respond(503, headers=[("Retry-After", "1")]))
                h1.route("GET", "/report", Respond(200, body=b"report"))
                await _case(
                    out,
                    "GET answered 503 with Retry-After: 1",
                    "The server did not do it and asked us to wait: retried after 1 s.",
                    lambda: client.get(h1.url + "/report"),
                    h1,
                    "/report",
                )

            async with Client(retry=POLICY, http2_prior_knowledge=True) as client2:
                h2.route("POST", "/transfers", RefuseStream(), Respond(200, body=b"done"))
                await _case(
                    out,
                    "HTTP/2 POST refused with RST_STREAM(REFUSED_STREAM)",
                    "The server proved it did not process the stream: NOT_SENT, retried.",
                    lambda: client2.post(h2.url + "/transfers", json={"to": "bob"}),
                    h2,
                    "/transfers",
                )

            await _budget_case(out, h1, quick)
            nursery.cancel_scope.cancel()
    print("\nRead the tables: stage = how far the attempt got; evidence = what that proves.",
          file=out)  # fmt: skip
    return 0


async def _budget_case(out: TextIO, server: FaultServer, quick: bool) -> None:
    calls = 20 if quick else 50
    print(f"\n== A retry budget under an outage ({calls} GETs, every one answered 503)", file=out)
    print("   Naive 3-attempt loops triple the load on a sick upstream; a budget caps retries",
          file=out)  # fmt: skip
    print("   at 20% of first attempts (plus a small floor).", file=out)
    server.route("GET", "/down", *[Respond(503)] * (calls * 3))
    budget = RetryBudget(ratio=0.2, min_per_second=0.1, window=10.0)
    policy = RetryPolicy(max_attempts=3, backoff=Backoff(initial=0.001, max=0.01, jitter="none"))
    async with Client(retry=policy, upstreams={server.url: Upstream(budget=budget)}) as client:
        for _ in range(calls):
            await client.get(server.url + "/down")
    received = sum(1 for r in server.requests if r.path == "/down")
    print(f"   {calls} calls -> {received} requests reached the upstream "
          f"({received / calls:.2f} per call; a naive loop: 3.00)", file=out)  # fmt: skip
