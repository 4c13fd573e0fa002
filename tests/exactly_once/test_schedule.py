"""The lab's randomness is the seed's: the fault schedule and the workload are pure functions of
it (what the kernel's ``statistic`` match and the clients' timing add is not, and the docs say
so). No root needed."""

from __future__ import annotations

import itertools

from benchmarks.exactly_once.faults import KINDS, schedule
from benchmarks.exactly_once.workload import plan


def test_the_same_seed_gives_the_same_faults() -> None:
    assert schedule(31, 30.0) == schedule(31, 30.0)
    assert schedule(31, 30.0) != schedule(7, 30.0)


def test_the_faults_are_bounded_and_of_every_kind() -> None:
    faults = [f for seed in range(20) for f in schedule(seed, 30.0)]
    assert {f.kind for f in faults} == set(KINDS)
    for fault in faults:
        assert 0.0 < fault.at < 30.0
        if fault.kind == "partition":
            assert 0.05 <= fault.duration <= 2.0
        if fault.kind in ("kill", "reload"):
            assert fault.duration == 0.0
    for seed in range(20):  # one at a time: each starts after the previous one ended
        one = schedule(seed, 30.0)
        assert all(b.at >= a.at + a.duration for a, b in itertools.pairwise(one))


def test_every_client_of_a_seed_makes_the_same_kinds_of_calls() -> None:
    a = plan("trio_retry", 31, 300, ("h1", "h2", "h2c"))
    b = plan("aiohttp", 31, 300, ("h1", "h1tls"))
    assert [c.kind for c in a] == [c.kind for c in b]
    assert len({c.rid for c in a}) == 300
    assert {c.kind for c in a} == {"get", "post", "post_key"}
    assert all(c.key == f"k-{c.rid}" for c in a if c.kind == "post_key")
