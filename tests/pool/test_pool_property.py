"""Property test: random acquire / release / close / cancel / GOAWAY / open-outcome sequences
over several origins, the pool's invariants checked after every step (see fakes.py); calls
wait in ``acquire`` or, as the attempt runner's, parked by themselves (``queue``)."""

from __future__ import annotations

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trio_retry._wire.pool import ConnectionPool

from .fakes import Driver

ORIGINS = ("h2-a", "h2-b", "h1-c", "h1-d", "alpn-h1-e", "h3-f")
H2 = frozenset({"h2-a", "h2-b"})
H3 = frozenset({"h3-f"})  # multiplexed, one connection per origin (RFC 9114 §3.3)
EXPECTS_H2 = frozenset({"h2-a", "h2-b", "alpn-h1-e", "h3-f"})  # e expects h2, gets HTTP/1.1

step = st.one_of(
    st.tuples(st.just("call"), st.sampled_from(ORIGINS)),
    st.tuples(
        st.sampled_from(["release", "discard", "die", "goaway", "cancel"]), st.integers(0, 30)
    ),
    st.tuples(st.sampled_from(["open-ok", "open-fail"]), st.integers(0, 30)),
)


async def run_steps(
    steps: list[tuple[str, object]],
    max_connections: int,
    per_origin: int | None,
    limit: int,
    queued: bool,
) -> None:
    pool = ConnectionPool(
        max_connections=max_connections,
        max_connections_per_origin=per_origin,
        keepalive_expiry=None,
    )
    async with trio.open_nursery() as nursery:
        pool.bind(nursery)
        driver = Driver(
            pool, nursery, answers_h2=H2, stream_limit=limit, one_per_origin=H3, queued=queued
        )
        for kind, arg in steps:
            if kind == "call":
                driver.start(arg, multiplexed=arg in EXPECTS_H2)
            elif kind in ("release", "discard", "die", "goaway"):
                holders = driver.holders()
                if holders:
                    call = holders[int(arg) % len(holders)]  # type: ignore[call-overload]
                    if kind == "goaway":
                        assert call.conn is not None
                        if call.conn.multiplexed:
                            driver.goaway(call.conn)
                    else:
                        driver.end(call, kind)
            elif kind == "cancel":
                waiting = driver.acquiring()
                if waiting:
                    waiting[int(arg) % len(waiting)].scope.cancel()  # type: ignore[call-overload]
            else:
                openings = driver.openings
                if openings:
                    opening = openings[int(arg) % len(openings)]  # type: ignore[call-overload]
                    driver.finish_opening(opening, "ok" if kind == "open-ok" else "fail")
            await driver.settle()
            driver.check_invariants()
        # Wind down: every call ends, every opening finishes; nothing is left waiting and every
        # connection still open is idle in the pool.
        for _ in range(200):
            if not driver.acquiring() and not driver.holders() and not driver.openings:
                break
            for opening in list(driver.openings):
                driver.finish_opening(opening, "ok")
            for call in driver.holders():
                driver.end(call, "release")
            await driver.settle()
            driver.check_invariants()
        assert not driver.acquiring(), pool.describe()
        assert pool.waiting == 0
        assert pool.active_count == 0, pool.describe()
        pool.close()
        assert pool.total == 0
        assert all(c.closed for c in driver.connections)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    steps=st.lists(step, max_size=60),
    max_connections=st.integers(1, 4),
    per_origin=st.one_of(st.none(), st.integers(1, 3)),
    limit=st.integers(1, 3),
    queued=st.booleans(),  # calls wait in acquire(), or parked by their caller (queue())
)
def test_pool_invariants_hold_after_every_step(
    steps: list[tuple[str, object]],
    max_connections: int,
    per_origin: int | None,
    limit: int,
    queued: bool,
) -> None:
    trio.run(run_steps, steps, max_connections, per_origin, limit, queued)
