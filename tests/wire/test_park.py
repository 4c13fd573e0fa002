"""A task parked on one of our objects (``_wire/park.py``): woken with a value or an error,
cancelled through the object's abort function, parked again; the same through trio's public
``wait_task_rescheduled`` (the path when the probe finds trio's message class missing); and
nothing of trio's held while it sleeps (issue #41). No other module names trio's private
``trio._core``."""

from __future__ import annotations

import gc
from pathlib import Path

import outcome
import pytest
import trio

import trio_retry
from trio_retry._wire import park

PARKED = 40  # tasks parked at once in the census


class Spot(park.Parking):
    """A task parks here; ``aborted`` counts its abort function's calls."""

    __slots__ = ("aborted", "task")

    def __init__(self) -> None:
        self.task: trio.lowlevel.Task | None = None
        self.aborted = 0

    def __call__(self, _: object) -> trio.lowlevel.Abort:
        self.task = None
        self.aborted += 1
        return trio.lowlevel.Abort.SUCCEEDED

    async def wait(self) -> object:
        self.task = trio.lowlevel.current_task()
        return await self

    def wake(self, resumed: outcome.Outcome[object] | None = None) -> None:
        task, self.task = self.task, None
        assert task is not None
        trio.lowlevel.reschedule(task, resumed or outcome.Value(None))


@pytest.fixture(params=["own", "trio's"])
def way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Parks yielding trio's message themselves, or through ``wait_task_rescheduled``."""
    if request.param == "trio's":
        monkeypatch.setattr(park, "_MESSAGE", None)
    return str(request.param)


def test_the_installed_trio_has_the_message_class() -> None:
    assert park.USABLE
    assert park.probe() is not None


async def _parked(spot: Spot) -> None:
    """Until ``spot`` holds a parked task (bounded)."""
    for _ in range(100):
        if spot.task is not None:
            return
        await trio.lowlevel.checkpoint()
    raise AssertionError("the task never parked")


async def test_woken_with_a_value_returns_it_and_parks_again(way: str) -> None:
    spot = Spot()
    got: list[object] = []

    async def sleeper() -> None:
        got.append(await spot.wait())
        got.append(await spot.wait())

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sleeper)
            await _parked(spot)
            spot.wake(outcome.Value("first"))
            await trio.lowlevel.checkpoint()
            await _parked(spot)
            assert got == ["first"]
            spot.wake(outcome.Value(2))
    assert got == ["first", 2]
    assert spot.aborted == 0


async def test_woken_with_an_error_raises_it(way: str) -> None:
    spot = Spot()
    raised: list[BaseException] = []
    error = LookupError("from the waker")

    async def sleeper() -> None:
        try:
            await spot.wait()
        except LookupError as exc:
            raised.append(exc)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sleeper)
            await _parked(spot)
            spot.wake(outcome.Error(error))
    assert raised == [error]


async def test_a_cancelled_park_calls_its_abort_function_once_and_raises_cancelled(
    way: str,
) -> None:
    spot = Spot()
    ended: list[str] = []

    async def sleeper() -> None:
        try:
            await spot.wait()
        except trio.Cancelled:
            ended.append("cancelled")
            raise

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sleeper)
            await _parked(spot)
            nursery.cancel_scope.cancel()
    assert ended == ["cancelled"]
    assert spot.aborted == 1
    assert spot.task is None  # a later waker finds nobody to wake


async def test_a_parked_task_holds_nothing_of_trios() -> None:
    """Only the objects the tasks themselves hold: no coroutine or generator of trio's trap,
    no message (and its ``__dict__``) per parked task."""
    spots = [Spot() for _ in range(PARKED)]
    seen: dict[str, int] = {}

    def census() -> dict[str, int]:
        gc.collect()
        counts: dict[str, int] = {}
        for obj in gc.get_objects():
            name = type(obj).__qualname__
            if name in ("coroutine", "generator", "WaitTaskRescheduled"):
                name = f"{name} {getattr(obj, '__qualname__', '')}"
            counts[name] = counts.get(name, 0) + 1
        return counts

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            before = census()
            for spot in spots:
                nursery.start_soon(spot.wait)
            for spot in spots:
                await _parked(spot)
            seen = {
                name: count - before.get(name, 0)
                for name, count in census().items()
                if count > before.get(name, 0)
            }
            for spot in spots:
                spot.wake()
    assert seen.get("coroutine Spot.wait") == PARKED  # every task is parked in its own frame
    trios = {name: count for name, count in seen.items() if "WaitTaskRescheduled" in name}
    trios.update({n: c for n, c in seen.items() if "wait_task_rescheduled" in n})
    trios.update({n: c for n, c in seen.items() if n.startswith("generator")})
    assert trios == {}, seen
    assert seen.get("dict", 0) < PARKED, seen  # (no message's __dict__ each)


def test_no_other_module_names_trios_private_core() -> None:
    package = Path(trio_retry.__file__).parent
    naming = [
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if "trio._core" in path.read_text(encoding="utf-8")
    ]
    assert naming == ["_wire/park.py"]
