"""Does the fuzzing catch a broken client? Run it against deliberately broken ones.

``python -m tests.reliability.mutants [NAME ...] [--examples N]`` patches one fault into the
client at a time, runs the property-based fuzzing of ``test_fuzz.py`` on it, and reports
whether a violation was found (and hypothesis's shrunk example). Every mutant must be caught;
the exit status is 1 if one is not. By hand only: the suite runs the fuzzing on the real
client. Mutants:

- ``upgrade``: the wire calls any failure before the response head ``NOT_SENT``;
- ``retry-ambiguous``: the engine retries where it should answer ``AmbiguousFailure``;
- ``leak``: closing the pool leaves idle connections open;
- ``backoff``: the backoff sleeps past the call's deadline.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import trio

MUTANTS: dict[str, str] = {
    "upgrade": "wire claims NOT_SENT for every failure before the response head",
    "retry-ambiguous": "engine retries instead of answering AmbiguousFailure",
    "leak": "pool.close() leaves idle connections open",
    "backoff": "backoff sleeps past the deadline",
}


@contextmanager
def mutant(name: str) -> Iterator[None]:
    """Patch the client with mutant `name` for the duration of the block."""
    from trio_retry._call import loop
    from trio_retry._call.runtime import Runtime
    from trio_retry._core import engine
    from trio_retry._core.evidence import Evidence, Stage
    from trio_retry._wire import pool_book, progress

    undo: list[Callable[[], None]] = []

    def patch(owner: Any, attribute: str, value: Any) -> None:
        original = getattr(owner, attribute)
        setattr(owner, attribute, value)
        undo.append(lambda: setattr(owner, attribute, original))

    if name == "upgrade":
        real = getattr(progress, "evidence_for_stage")  # noqa: B009 - patched where it is used

        def upgraded(stage: Stage) -> Evidence:
            return Evidence.NOT_SENT if stage <= Stage.RESPONSE_HEAD else real(stage)

        patch(progress, "evidence_for_stage", upgraded)
    elif name == "retry-ambiguous":
        decide = engine.DefaultRetryEligibilityEngine.decide

        def retrying(self: Any, context: engine.RetryContext) -> engine.Decision:
            decision = decide(self, context)
            if isinstance(decision, engine.AmbiguousFailure):
                if context.attempt < context.max_attempts:
                    return engine.RetryAllowed(delay=0.0)
            return decision

        patch(engine.DefaultRetryEligibilityEngine, "decide", retrying)
    elif name == "leak":

        def leaky_close(self: pool_book.PoolBook) -> None:
            self.closed = True

        patch(pool_book.PoolBook, "close", leaky_close)
    elif name == "backoff":

        async def overslept(rt: Runtime, delay: float, deadline: float) -> bool:
            await trio.sleep(delay + 0.5)
            return True

        patch(loop, "_backoff", overslept)
    else:
        raise ValueError(f"unknown mutant {name!r}; known: {', '.join(MUTANTS)}")
    try:
        yield
    finally:
        for restore in reversed(undo):
            restore()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.reliability.mutants")
    parser.add_argument("names", nargs="*", default=list(MUTANTS), help="mutants to run")
    parser.add_argument("--examples", type=int, default=300, help="fuzz examples per mutant")
    args = parser.parse_args(argv)
    os.environ["TRIO_RETRY_FUZZ_EXAMPLES"] = str(args.examples)
    from tests.reliability import test_fuzz

    missed = []
    for name in args.names:
        with mutant(name):
            try:
                test_fuzz.run_fuzz(lambda stats, seconds: None)
            except Exception as exc:  # AssertionError, or a group of distinct failures
                first = str(exc).splitlines()[0]
                print(f"{name:16} CAUGHT  {first[:400]}")
                continue
        missed.append(name)
        print(f"{name:16} MISSED  ({MUTANTS[name]})")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
