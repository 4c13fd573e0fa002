"""No splice of two representations, ever (SPEC §18), as a property of the client on the wire:
whatever the body, where it breaks, and what the server does at the continuation (the same
representation, a changed one, a 200 to the range, a 416, a wrong Content-Range, another cut),
what a caller reads of a resumed download (streamed or buffered) is a prefix of one
representation, and the whole of one when the call succeeds."""

from __future__ import annotations

import random
from typing import Any

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trio_retry
from trio_retry._call.resumable import BUFFERED_FROM
from trio_retry.testing import FaultServer, StaticFile

POLICY = trio_retry.RetryPolicy(
    max_attempts=4, backoff=trio_retry.Backoff(initial=0.0, jitter="none")
)


def _body(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    streamed = draw(st.booleans())
    # A buffered body is continued from BUFFERED_FROM bytes on; a shorter one is sent again.
    size = draw(st.integers(min_value=2, max_value=40_000))
    if not streamed and draw(st.booleans()):
        size += BUFFERED_FROM
    cut = draw(st.integers(min_value=0, max_value=size - 1))
    then = draw(
        st.sampled_from(["same", "change", "ignore_range", "416", "wrong_range", "cut_again"])
    )
    again = draw(st.integers(min_value=0, max_value=size - cut - 1))
    return {"size": size, "cut": cut, "then": then, "again": again, "streamed": streamed}


async def _run(scenario: dict[str, Any]) -> tuple[bytes, bool, bytes, bytes]:
    first = _body(1, scenario["size"])
    second = _body(2, scenario["size"])  # the same length: a changed file, not a shorter one
    static = StaticFile(first)
    static.script(cut_after=scenario["cut"])
    then = scenario["then"]
    if then == "change":
        static.script(change=second)
    elif then == "ignore_range":
        static.script(ignore_range=True)
    elif then == "416":
        static.script(status=416)
    elif then == "wrong_range":
        static.script(content_range=f"bytes 0-{scenario['size'] - 1}/{scenario['size']}")
    elif then == "cut_again":
        static.script(cut_after=scenario["again"])
    server = FaultServer()
    server.route("GET", "/file", static)
    got = bytearray()
    ok = False
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve)
            async with trio_retry.Client(retry=POLICY) as client:
                try:
                    if scenario["streamed"]:
                        async with client.stream("GET", server.url + "/file") as response:
                            async for chunk in response.aiter_bytes():
                                got += chunk
                    else:
                        response = await client.get(server.url + "/file")
                        got += response.content
                    # (a short buffered body is sent again whole: its answer may be the 416)
                    ok = response.status == 200
                    if not ok:
                        got.clear()  # an error's body, not a representation
                except trio_retry.RequestFailed:
                    pass
            nursery.cancel_scope.cancel()
    return bytes(got), ok, first, second


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_what_the_caller_reads_is_one_representation(scenario: dict[str, Any]) -> None:
    got, ok, first, second = trio.run(_run, scenario)
    assert first.startswith(got) or second.startswith(got), scenario
    if ok:
        assert got in (first, second), scenario
    if ok and got == second:  # started again: only when nothing of the first was read
        assert scenario["cut"] == 0 or not scenario["streamed"], scenario
