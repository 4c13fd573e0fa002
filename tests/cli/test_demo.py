"""The demo, as the README's first command runs it: truthful at a glance."""

from __future__ import annotations

import trio

from .support import Ran, cli


async def test_demo_and_quick_demo() -> None:
    runs: dict[str, Ran] = {}

    async def demo(*flags: str) -> None:
        runs[" ".join(flags)] = await cli("demo", *flags)

    async with trio.open_nursery() as nursery:  # mostly sleeps: run both at once
        nursery.start_soon(demo)
        nursery.start_soon(demo, "--quick")
    full, quick = runs[""], runs["--quick"]
    assert (full.code, quick.code) == (0, 0)
    text = full.out.decode()
    key_case = text.split("== The same failure with idempotency_key=True")[1].split("\n==")[0]
    assert "server: 2 received, 1 executed" in key_case
    assert "2 attempts, 1 payment: the retry carried the same Idempotency-Key" in key_case
    assert "   #  stage              evidence           status  category           ms" in key_case
    dropped = text.split("== POST /payments: the server executed it")[1].split("\n==")[0]
    assert "server: 1 received, 1 executed" in dropped
    assert "CONNECTION_BROKEN" in dropped.split("status  category")[1]  # a category, not a status
    assert "== GET answered 503 with Retry-After: 1" in text
    assert "(1.22 per call" in text

    quick_text = quick.out.decode()
    assert "Retry-After: 1" not in quick_text  # the case that waits 1 s is left out, and said so
    assert "--quick left out the Retry-After case" in quick_text
    assert "server: 2 received, 1 executed" in quick_text
    assert "20 GETs" in quick_text
