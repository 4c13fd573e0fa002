"""``python -m trio_retry demo``: the failures that matter, on servers embedded on loopback.

Each case prints what was asked, the attempt table (attempt, stage, evidence, status, failure
category, milliseconds, the engine's decision), what the caller got, and what the server really
received and executed -- so the claim "after a failure, you know whether the server did it"
can be checked by eye. The payments cases run against :class:`PaymentAPI`, which deduplicates
on ``Idempotency-Key`` as a real payment API does; the others against a ``FaultServer``.
Loopback only, no network, about a second (``--quick``: a quarter of that).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TextIO

import trio

from .. import (
    Backoff,
    Client,
    HttpAmbiguousExecutionError,
    RequestFailed,
    Response,
    RetryBudget,
    RetryPolicy,
    Upstream,
)
from .._trail import attempt_table
from ..testing import FaultServer, RefuseStream, Respond, refused_port
from .payments import PaymentAPI

POLICY = RetryPolicy(max_attempts=3, backoff=Backoff(initial=0.05, max=2.0, jitter="none"))
Counter = Callable[[], tuple[int, int]]  # () -> (requests received, requests executed)


def _fault_counter(server: FaultServer, path: str) -> Counter:
    def count() -> tuple[int, int]:
        received = sum(1 for r in server.requests if r.path == path)
        return received, server.executed_count(path=path)

    return count


async def _case(
    out: TextIO,
    title: str,
    explanation: str,
    call: Callable[[], Awaitable[Response]],
    counter: Counter | None = None,
    verdict: Callable[[int, int], str] | None = None,
) -> None:
    """One case: the call, its trail, what the caller got, what the server did (in words)."""
    print(f"\n== {title}", file=out)
    print(f"   {explanation}", file=out)
    try:
        response = await call()
    except HttpAmbiguousExecutionError as exc:
        print(_indent(attempt_table(exc.attempts, wide=False)), file=out)
        print(f"   -> HttpAmbiguousExecutionError ({exc.evidence}): may have run; not retried",
              file=out)  # fmt: skip
    except RequestFailed as exc:
        print(_indent(attempt_table(exc.attempts, wide=False)), file=out)
        print(f"   -> {type(exc).__name__} ({exc.evidence}): {exc.decision}", file=out)
    else:
        print(_indent(attempt_table(response.attempts, wide=False)), file=out)
        print(f"   -> {response.http_version} {response.status} {response.content!r}", file=out)
    if counter is not None:
        received, executed = counter()
        print(f"   server: {received} received, {executed} executed", file=out)
        if verdict is not None:
            print(f"   => {verdict(received, executed)}", file=out)


def _indent(text: str) -> str:
    return "\n".join("   " + line for line in text.splitlines())


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


async def run_demo(out: TextIO, quick: bool = False) -> int:
    """Run every case; return 0. Each case is bounded; the whole demo takes about a second
    (``quick``: the Retry-After case, which waits 1 s, is left out, the budget case is shorter).
    """
    print("trio_retry demo: every server below runs on 127.0.0.1", file=out)
    h1 = FaultServer(http2=False)
    h2 = FaultServer(http2=True)
    payments = PaymentAPI()

    def ledger() -> tuple[int, int]:
        return payments.received, payments.executed

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(h1.serve)
            await nursery.start(h2.serve)
            await nursery.start(payments.serve)
            async with Client(retry=POLICY) as client:
                refused = f"http://127.0.0.1:{refused_port()}/payments"
                await _case(
                    out,
                    "POST to a port that refuses connections",
                    "Nothing was ever sent (NOT_SENT), so even a POST is retried safely.",
                    lambda: client.post(refused, json={"amount": 10}),
                )

                payments.crash_after_execute = 1
                await _case(
                    out,
                    "POST /payments: the server executed it, then the connection dropped",
                    "The request left (SENT_NO_RESPONSE): a retry could pay twice. Ambiguous.",
                    lambda: client.post(payments.url + "/payments", json={"amount": 10}),
                    ledger,
                    lambda received, executed: (
                        f"paid {_times(executed)}, and the caller was told it may have run "
                        "(reconcile), not that it failed"
                    ),
                )

                payments.crash_after_execute = 1
                before = ledger()
                await _case(
                    out,
                    "The same failure with idempotency_key=True",
                    "The key makes the POST idempotent: the same key on every attempt, and "
                    "the API deduplicates on it.",
                    lambda: client.post(
                        payments.url + "/payments", json={"amount": 20}, idempotency_key=True
                    ),
                    lambda: (ledger()[0] - before[0], ledger()[1] - before[1]),
                    lambda received, executed: (
                        f"{received} attempts, {executed} payment: the retry carried the same "
                        "Idempotency-Key,\n      so the API answered it with the first attempt's "
                        "result instead of paying again"
                    ),
                )

                if not quick:
                    h1.route("GET", "/report", Respond(503, headers=[("Retry-After", "1")]))
                    h1.route("GET", "/report", Respond(200, body=b"report"))
                    await _case(
                        out,
                        "GET answered 503 with Retry-After: 1",
                        "The server did not do it and asked us to wait: retried after 1 s.",
                        lambda: client.get(h1.url + "/report"),
                        _fault_counter(h1, "/report"),
                    )

            async with Client(retry=POLICY, http2_prior_knowledge=True) as client2:
                h2.route("POST", "/transfers", RefuseStream(), Respond(200, body=b"done"))
                await _case(
                    out,
                    "HTTP/2 POST refused with RST_STREAM(REFUSED_STREAM)",
                    "The server proved it did not process the stream: NOT_SENT, retried.",
                    lambda: client2.post(h2.url + "/transfers", json={"to": "bob"}),
                    _fault_counter(h2, "/transfers"),
                    lambda received, executed: "the refused stream never ran; the retry did",
                )

            await _budget_case(out, h1, quick)
            nursery.cancel_scope.cancel()
    print("\nRead the tables: stage = how far the attempt got; evidence = what that proves;",
          file=out)  # fmt: skip
    print("status = the response status, category = the failure's kind when there was none.",
          file=out)  # fmt: skip
    if quick:
        print("(--quick left out the Retry-After case, which waits 1 s.)", file=out)
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
