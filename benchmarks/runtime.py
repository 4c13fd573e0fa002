"""The two event-loop runtimes a client can run under, behind one small interface.

Scenario drivers are written once against :class:`Runtime`; a Trio client is driven with Trio
primitives (a nursery) and an asyncio client with asyncio ones (``gather``), so neither pays for
a compatibility layer the other does not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

import trio

T = TypeVar("T")


class HardTimeout(Exception):
    """The whole scenario overran its hard time limit (a hang, not a slow client)."""


class Runtime(Protocol):
    name: str

    def run(self, main: Callable[[], Awaitable[T]], hard_limit: float) -> T:
        """Run ``main`` to completion in a fresh event loop, at most ``hard_limit`` seconds."""
        ...

    async def run_parallel(self, fn: Callable[[], Awaitable[None]], n: int) -> None:
        """Run ``n`` copies of ``fn`` concurrently and wait for all of them."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` (the soak's pacing, ``benchmarks/scale_worker.py``)."""
        ...


class TrioRuntime:
    name = "trio"

    def run(self, main: Callable[[], Awaitable[T]], hard_limit: float) -> T:
        async def wrapper() -> T:
            with trio.move_on_after(hard_limit):
                return await main()
            raise HardTimeout(f"scenario exceeded its hard limit of {hard_limit:.0f}s")

        return trio.run(wrapper)

    async def run_parallel(self, fn: Callable[[], Awaitable[None]], n: int) -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(n):
                nursery.start_soon(fn)

    async def sleep(self, seconds: float) -> None:
        await trio.sleep(seconds)


class AsyncioRuntime:
    name = "asyncio"

    def run(self, main: Callable[[], Awaitable[T]], hard_limit: float) -> T:
        async def wrapper() -> T:
            try:
                return await asyncio.wait_for(main(), hard_limit)
            except asyncio.TimeoutError:
                raise HardTimeout(
                    f"scenario exceeded its hard limit of {hard_limit:.0f}s"
                ) from None

        return asyncio.run(wrapper())

    async def run_parallel(self, fn: Callable[[], Awaitable[None]], n: int) -> None:
        if n == 1:
            await fn()
            return
        await asyncio.gather(*(fn() for _ in range(n)))

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def get_runtime(name: str) -> Runtime:
    if name == "trio":
        return TrioRuntime()
    if name == "asyncio":
        return AsyncioRuntime()
    raise ValueError(f"unknown runtime {name!r}")
