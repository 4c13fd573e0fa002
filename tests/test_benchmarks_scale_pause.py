"""The scale benchmark's bursts: each by a fresh client, with ``pause`` seconds after each
client closed and before the next one's burst (``benchmarks/scale_worker.py`` says why: the
closed connections' ports reusable again), never inside what is timed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from benchmarks import scale_worker
from benchmarks.runtime import TrioRuntime


class _Recorded(TrioRuntime):
    def __init__(self, events: list[str]) -> None:
        self.events = events

    async def run_parallel(self, fn: Callable[[], Awaitable[None]], n: int) -> None:
        self.events.append(f"burst {n}")
        await super().run_parallel(fn, n)

    async def sleep(self, seconds: float) -> None:
        self.events.append(f"pause {seconds:g}")


class _Adapter:
    """A client answering every call at once as the benchmark's servers do."""

    def __init__(self, events: list[str]) -> None:
        self.events = events

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        self.events.append("open")
        yield
        self.events.append("closed")

    async def get(self, path: str) -> tuple[int, int]:
        return 200, scale_worker.BODY_SIZE


async def test_each_burst_comes_a_pause_after_the_previous_client_closed() -> None:
    events: list[str] = []
    figures = await scale_worker.burst(
        lambda: _Adapter(events), _Recorded(events), 3, 2, 60.0, pause=1.5
    )
    one = ["open", "burst 3", "closed"]  # (the warm-up's call is not a burst)
    assert events == [*one, "pause 1.5", *one, "pause 1.5", *one]  # memory round, 2 timed
    assert (figures["rounds"], figures["calls"], figures["ok"], figures["errors"]) == (2, 6, 9, 0)


async def test_no_pause_after_the_last_burst_nor_when_the_budget_is_spent() -> None:
    events: list[str] = []
    figures = await scale_worker.burst(
        lambda: _Adapter(events), _Recorded(events), 2, 5, -1.0, pause=0.5
    )
    assert figures["rounds"] == 1  # the budget was spent by the first (at least one is made)
    assert events == ["open", "burst 2", "closed", "pause 0.5", "open", "burst 2", "closed"]
