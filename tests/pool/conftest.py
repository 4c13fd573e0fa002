"""The pool's scenario tests run twice: calls waiting in ``acquire``, and calls parked by
themselves after ``queue`` as the attempt runner's are (``fakes.Driver.queued_default``): the
two ways a call waits must give the same outcomes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .fakes import Driver


@pytest.fixture(params=[False, True], ids=["in-acquire", "queued"])
def driver_mode(request: pytest.FixtureRequest) -> Iterator[bool]:
    Driver.queued_default = request.param
    try:
        yield request.param
    finally:
        Driver.queued_default = False
