"""``async with Client()`` always leaves its nurseries in order: when ``aclose()`` is
cancelled part-way (the caller's timeout fires while the client closes), when a step of
closing or opening fails, the caller sees that cancellation or that error, and trio never
reports its nursery stack corrupted."""

from __future__ import annotations

from typing import NoReturn

import pytest
import trio
import trio.testing

from trio_retry import Client


class _Boom(Exception):
    pass


async def _raises(connector: object) -> NoReturn:
    raise _Boom("the state file could not be written")


async def _hangs(connector: object) -> None:
    await trio.sleep_forever()


async def test_a_close_cancelled_part_way_still_ends_the_background(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = Client()
    monkeypatch.setattr(type(client._rt.connector), "settle", _hangs)
    with trio.move_on_after(5) as scope:
        async with client:
            pass
    assert scope.cancelled_caught
    assert client._background_done.is_set()
    await trio.sleep(1)  # (a corrupted nursery stack is reported at the next checkpoint)


@pytest.mark.parametrize("step", ["settle", "remember"])
async def test_a_step_of_closing_that_fails_is_the_callers_error(
    step: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = Client()
    monkeypatch.setattr(type(client._rt.connector), step, _raises)
    with pytest.raises(_Boom):
        async with client:
            pass
    assert client._background_done.is_set()
    await trio.sleep(0)


async def test_a_step_of_opening_that_fails_leaves_no_nursery_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = Client()
    monkeypatch.setattr(type(client._rt.connector), "recall", _raises)
    with pytest.raises(_Boom):
        async with client:
            raise AssertionError("the block must not run")
    assert client._background_done.is_set()
    await trio.sleep(0)
