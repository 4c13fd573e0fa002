"""RetryBudget (time passed in) and Backoff (RNG passed in), exactly."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_retry import Backoff, RetryBudget, parse_retry_after


class FixedRng:
    """Returns the interval's fraction ``f`` point, so tests assert exact values."""

    def __init__(self, f: float) -> None:
        self.f = f
        self.calls: list[tuple[float, float]] = []

    def uniform(self, a: float, b: float) -> float:
        self.calls.append((a, b))
        return a + (b - a) * self.f


def test_budget_floor_allows_min_per_second_times_window() -> None:
    budget = RetryBudget(ratio=0.2, min_per_second=1, window=10.0)
    taken = sum(budget.try_withdraw(0.0) for _ in range(50))
    assert taken == 10


def test_budget_deposits_add_ratio_per_first_attempt() -> None:
    budget = RetryBudget(ratio=0.5, min_per_second=0, window=10.0)
    assert not budget.available(0.0)
    for _ in range(4):
        budget.deposit(0.0)
    assert budget.allowance(0.0) == 2.0
    assert [budget.try_withdraw(1.0) for _ in range(3)] == [True, True, False]


def test_budget_deposits_and_withdrawals_expire_after_window() -> None:
    budget = RetryBudget(ratio=1.0, min_per_second=0, window=10.0)
    budget.deposit(0.0)
    assert budget.try_withdraw(5.0)
    assert not budget.try_withdraw(9.9)
    # At t=10 the deposit (t=0) has expired, the withdrawal (t=5) has not.
    budget.deposit(10.0)
    assert not budget.try_withdraw(10.0)
    # At t=15 the withdrawal has expired too: one deposit, no withdrawals.
    assert budget.try_withdraw(15.0)


def test_budget_fresh_is_independent() -> None:
    a = RetryBudget(ratio=0.1, min_per_second=0.1, window=10.0)
    b = a.fresh()
    assert a.try_withdraw(0.0)
    assert b.available(0.0)
    assert "1 retries" in repr(a)


def test_budget_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="window"):
        RetryBudget(window=0)


events = st.lists(
    st.tuples(st.floats(0, 5, allow_nan=False), st.booleans(), st.integers(1, 20)),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(
    events,
    st.floats(0, 1, allow_nan=False),
    st.floats(0, 5, allow_nan=False),
    st.floats(0.5, 20, allow_nan=False),
)
def test_budget_bound_holds_for_any_traffic(
    steps: list[tuple[float, bool, int]], ratio: float, mps: float, window: float
) -> None:
    """Over a history of span T: retries <= ratio*first + mps*(T + window) + rounding."""
    budget = RetryBudget(ratio=ratio, min_per_second=mps, window=window)
    now, firsts, retries = 0.0, 0, 0
    for gap, is_retry, count in steps:
        now += gap
        for _ in range(count):
            if is_retry:
                retries += budget.try_withdraw(now)
            else:
                budget.deposit(now)
                firsts += 1
    rounding = math.floor(now / window) + 1
    assert retries <= ratio * firsts + mps * (now + window) + rounding


def test_backoff_none_is_exponential_capped() -> None:
    b = Backoff(initial=0.1, max=1.0, multiplier=2.0, jitter="none")
    rng = random.Random(0)
    assert [b.delay(n, rng) for n in range(1, 6)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0])


def test_backoff_full_is_uniform_zero_to_ceiling() -> None:
    b = Backoff(initial=0.1, max=1.0, multiplier=2.0, jitter="full")
    rng = FixedRng(0.5)
    assert b.delay(3, rng) == pytest.approx(0.2)
    assert rng.calls == [(0.0, pytest.approx(0.4))]


def test_backoff_decorrelated_depends_on_previous() -> None:
    b = Backoff(initial=0.1, max=1.0, jitter="decorrelated")
    rng = FixedRng(1.0)
    first = b.delay(1, rng)
    assert first == pytest.approx(0.3)  # uniform(0.1, 0.1*3) at its top
    second = b.delay(2, rng, previous=first)
    assert second == pytest.approx(0.9)
    assert b.delay(3, rng, previous=second) == 1.0  # capped at max


def test_backoff_huge_retry_number_does_not_overflow() -> None:
    assert Backoff(jitter="none").delay(10_000, random.Random(1)) == 10.0


def test_backoff_validates_jitter() -> None:
    with pytest.raises(ValueError, match="jitter"):
        Backoff(jitter="exponential")  # type: ignore[arg-type]


@given(
    st.integers(1, 50),
    st.sampled_from(["full", "decorrelated", "none"]),
    st.floats(0, 5, allow_nan=False),
    st.floats(0, 30, allow_nan=False),
    st.integers(0, 2**32),
)
def test_backoff_delay_within_zero_and_max(
    n: int, jitter: str, initial: float, maximum: float, seed: int
) -> None:
    b = Backoff(initial=initial, max=maximum, jitter=jitter)  # type: ignore[arg-type]
    rng = random.Random(seed)
    previous = None
    for k in range(1, n + 1):
        previous = b.delay(k, rng, previous)
        assert 0 <= previous <= maximum


NOW = 784111777.0  # Sun, 06 Nov 1994 08:49:37 GMT


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120.0),
        (" 5 ", 5.0),
        ("0", 0.0),
        (b"7", 7.0),
        ("Sun, 06 Nov 1994 08:50:37 GMT", 60.0),
        ("Sunday, 06-Nov-94 08:51:37 GMT", 120.0),
        ("Sun Nov  6 08:49:47 1994", 10.0),
        ("Sat, 05 Nov 1994 08:49:37 GMT", 0.0),  # past: 0
        ("99999999999999999999999", 1e9),
        ("-5", None),
        ("1.5", None),
        ("soon", None),
        ("", None),
        (None, None),
        ("Sun, 06 Foo 1994 08:50:37 GMT", None),
        ("Sun, 31 Feb 1994 08:50:37 GMT", None),
        ("Sun, 06 Nov 1994 25:50:37 GMT", None),
        ("٣", None),  # a non-ASCII digit is not delta-seconds
    ],
)
def test_retry_after_parsing(value: str | bytes | None, expected: float | None) -> None:
    assert parse_retry_after(value, NOW) == expected


@given(st.text(max_size=60) | st.binary(max_size=60), st.floats(allow_nan=True))
def test_retry_after_never_raises(value: str | bytes, now: float) -> None:
    result = parse_retry_after(value, now)
    assert result is None or (0 <= result <= 1e9)
