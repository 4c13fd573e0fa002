"""The HTTP/2 fast path turned off by its probe (``_wire/http2/h2_private.py``), as an h2 that
lacks one of the private names it uses would turn it off; and the machines the connections made.

A conftest or test module imports the fixtures::

    from tests.support.h2_fast_path import fast_path_off as fast_path_off
    from tests.support.h2_fast_path import machines_made as machines_made
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from trio_retry._wire.http2 import h2_private
from trio_retry._wire.http2.fast import FastMachine

__all__ = ["MISSING", "fast_path_off", "machines_made"]

#: The name the probe is told to look for, which no h2 has.
MISSING = ("connection", "_renamed_in_a_later_h2")


@pytest.fixture
def fast_path_off(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[FastMachine]]:
    """Probe with :data:`MISSING` listed (its warning logged in the test's setup), then yield
    the list each ``FastMachine.engage`` call adds its machine to; the probe's table and
    verdict are as they were once the test ends."""
    monkeypatch.setattr(h2_private, "USABLE", h2_private.USABLE)
    monkeypatch.setattr(h2_private, "NAMES", (*h2_private.NAMES, MISSING))
    assert h2_private.probe() is False
    machines: list[FastMachine] = []
    engage = FastMachine.engage

    def engage_and_note(self: FastMachine) -> bool:
        machines.append(self)
        return engage(self)

    monkeypatch.setattr(FastMachine, "engage", engage_and_note)
    yield machines
    monkeypatch.undo()
    h2_private.probe()


@pytest.fixture
def machines_made(monkeypatch: pytest.MonkeyPatch) -> list[FastMachine]:
    """The list each HTTP/2 connection's :class:`FastMachine` is added to as it is made (with
    the fast path or without: every connection has one), in order."""
    machines: list[FastMachine] = []
    init = FastMachine.__init__

    def init_and_note(self: FastMachine, machine: Any) -> None:
        init(self, machine)
        machines.append(self)

    monkeypatch.setattr(FastMachine, "__init__", init_and_note)
    return machines
