"""The workload: which calls a client makes (pure, from the seed), and the loop that makes them
at a fixed concurrency within a bound of calls and seconds, on Trio or on asyncio.

Every call has a unique request id (``x-request-id``: client, seed, index) and carries the
attempt number in ``x-attempt`` (1 unless the client's retry loop, or trio_retry's request
hook, says otherwise). A third are GETs, a third POSTs without a key and a third POSTs with an
``Idempotency-Key`` (``k-`` and the request id, the same on every attempt), spread over the
protocols the client speaks. Each call has the run's deadline; the harness cancels a call
still running ``GRACE`` seconds after it (recorded as ``hung``), so a run is bounded even when a
client is not.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import trio

from benchmarks.exactly_once.records import GET, POST, POST_KEY, CallRecord

GRACE = 10.0
BODY = b"x" * 512


@dataclass(frozen=True, kw_only=True)
class Call:
    rid: str
    kind: str
    proto: str

    @property
    def method(self) -> str:
        return "GET" if self.kind == GET else "POST"

    @property
    def key(self) -> str | None:
        return f"k-{self.rid}" if self.kind == POST_KEY else None

    def headers(self, attempt: int = 1) -> dict[str, str]:
        headers = {"x-request-id": self.rid, "x-attempt": str(attempt)}
        if self.key is not None:
            headers["idempotency-key"] = self.key
        return headers


def plan(client: str, seed: int, calls: int, protocols: Sequence[str]) -> list[Call]:
    """The calls of one client's run: the same kinds in the same order for every client of a
    seed (the protocol is drawn separately, from the client's own list)."""
    kinds = random.Random(f"kinds:{seed}")
    protos = random.Random(f"protos:{seed}:{','.join(protocols)}")
    return [
        Call(
            rid=f"{client}-{seed}-{i:05d}",
            kind=kinds.choice((GET, POST, POST_KEY)),
            proto=protos.choice(list(protocols)),
        )
        for i in range(calls)
    ]


#: What a client does for one call: returns the record (the adapter classifies errors).
CallFn = Callable[[Call], Awaitable[CallRecord]]


def hung(call: Call, deadline: float, started: float) -> CallRecord:
    return CallRecord(
        rid=call.rid,
        kind=call.kind,
        proto=call.proto,
        outcome="hung",
        elapsed=time.monotonic() - started,
        deadline=deadline,
        error="harness timeout",
    )


async def run_trio(
    calls: Sequence[Call], one: CallFn, *, concurrency: int, deadline: float, seconds: float
) -> list[CallRecord]:
    """Make ``calls`` with ``concurrency`` workers; no call starts after ``seconds``."""
    records: list[CallRecord] = []
    queue = iter(calls)
    stop_at = time.monotonic() + seconds

    async def worker() -> None:
        for call in queue:
            if time.monotonic() > stop_at:
                return
            started = time.monotonic()
            record = None
            with trio.move_on_after(deadline + GRACE):
                record = await one(call)
            records.append(record or hung(call, deadline, started))

    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(worker)
    return records


async def run_asyncio(
    calls: Sequence[Call], one: CallFn, *, concurrency: int, deadline: float, seconds: float
) -> list[CallRecord]:
    """:func:`run_trio` for asyncio clients."""
    records: list[CallRecord] = []
    queue = iter(calls)
    stop_at = time.monotonic() + seconds

    async def worker() -> None:
        for call in queue:
            if time.monotonic() > stop_at:
                return
            started = time.monotonic()
            try:
                record = await asyncio.wait_for(one(call), deadline + GRACE)
            except asyncio.TimeoutError:
                record = hung(call, deadline, started)
            records.append(record)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return records
