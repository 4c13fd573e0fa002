"""Hedging, adaptive throttling and circuit breaking, decided from values: exact and properties."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_retry._core.breaker import (
    BreakerState,
    BreakerVerdict,
    CircuitBreaker,
    CircuitState,
    Health,
    health_of,
)
from trio_retry._core.evidence import FailureCategory
from trio_retry._core.hedging import (
    RULES,
    HedgeContext,
    HedgeDenial,
    HedgeLedger,
    Hedging,
    decide_hedge,
    percentile,
)
from trio_retry._core.idempotency import Idempotency
from trio_retry._core.replay import Replayability
from trio_retry._core.throttle import AdaptiveThrottle, ThrottleState, is_throttling

# --- configuration values ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("factory", "field", "error"),
    [
        (lambda: Hedging(delay=-1), "Hedging.delay", ValueError),
        (lambda: Hedging(delay=math.inf), "Hedging.delay", ValueError),
        (lambda: Hedging(delay="1"), "Hedging.delay", TypeError),  # type: ignore[arg-type]
        (lambda: Hedging(0.1, max_hedges=0), "Hedging.max_hedges", ValueError),
        (lambda: Hedging(0.1, max_hedges=5), "Hedging.max_hedges", ValueError),
        (lambda: Hedging(0.1, max_hedges=1.5), "Hedging.max_hedges", TypeError),  # type: ignore[arg-type]
        (lambda: Hedging(0.1, max_share=0), "Hedging.max_share", ValueError),
        (lambda: Hedging(0.1, max_share=1.5), "Hedging.max_share", ValueError),
        (lambda: Hedging(0.1, percentile=1.0), "Hedging.percentile", ValueError),
        (lambda: Hedging(0.1, window=0), "Hedging.window", ValueError),
        (lambda: Hedging(0.1, samples=5), "Hedging.samples", ValueError),
        (lambda: AdaptiveThrottle(beta=1.0), "AdaptiveThrottle.beta", ValueError),
        (lambda: AdaptiveThrottle(scale=0), "AdaptiveThrottle.scale", ValueError),
        (lambda: AdaptiveThrottle(min_rate=-1), "AdaptiveThrottle.min_rate", ValueError),
        (lambda: AdaptiveThrottle(max_rate=0.1), "AdaptiveThrottle.max_rate", ValueError),
        (lambda: AdaptiveThrottle(max_wait=-1), "AdaptiveThrottle.max_wait", ValueError),
        (lambda: AdaptiveThrottle(smoothing=True), "AdaptiveThrottle.smoothing", TypeError),  # type: ignore[arg-type]
        (lambda: CircuitBreaker(consecutive_failures=0), "consecutive_failures", ValueError),
        (lambda: CircuitBreaker(failure_ratio=2), "CircuitBreaker.failure_ratio", ValueError),
        (lambda: CircuitBreaker(cool_down=0), "CircuitBreaker.cool_down", ValueError),
        (lambda: CircuitBreaker(max_cool_down=1), "CircuitBreaker.max_cool_down", ValueError),
        (lambda: CircuitBreaker(multiplier=0.5), "CircuitBreaker.multiplier", ValueError),
        (lambda: CircuitBreaker(probes=0), "CircuitBreaker.probes", ValueError),
        (lambda: CircuitBreaker(name=3), "CircuitBreaker.name", TypeError),  # type: ignore[arg-type]
    ],
)
def test_bad_settings_name_the_field(factory: object, field: str, error: type) -> None:
    with pytest.raises(error, match=field.replace(".", r"\.")):
        factory()  # type: ignore[operator]


def test_settings_are_frozen_values() -> None:
    hedging = Hedging(0.05)
    assert hedging == Hedging(delay=0.05, max_hedges=1, max_share=0.05)
    with pytest.raises(AttributeError):
        hedging.delay = 1  # type: ignore[misc]
    assert replace(CircuitBreaker(), probes=2).probes == 2
    assert AdaptiveThrottle() == AdaptiveThrottle(beta=0.7, scale=0.4)


# --- hedging -------------------------------------------------------------------------------


def _ctx(**changes: object) -> HedgeContext:
    base = HedgeContext(
        idempotency=Idempotency.SAFE,
        replayability=Replayability.REPLAYABLE,
        hedges_sent=0,
        max_hedges=1,
        attempts_started=1,
        max_attempts=3,
        remaining_deadline=None,
        min_attempt_budget=0.05,
        hedges_in_window=0,
        calls_in_window=100,
        max_share=0.05,
        budget_available=True,
        bulkhead_free=True,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, None),
        ({"idempotency": Idempotency.IDEMPOTENT}, None),
        ({"idempotency": Idempotency.NON_IDEMPOTENT}, HedgeDenial.NOT_IDEMPOTENT),
        ({"replayability": Replayability.REOPENABLE}, None),
        ({"replayability": Replayability.ONE_SHOT}, HedgeDenial.BODY_NOT_REPLAYABLE),
        ({"hedges_sent": 1}, HedgeDenial.MAX_HEDGES),
        ({"attempts_started": 3}, HedgeDenial.MAX_ATTEMPTS),
        ({"remaining_deadline": 0.04}, HedgeDenial.DEADLINE),
        ({"remaining_deadline": 0.05}, None),
        ({"hedges_in_window": 4}, None),  # 4 < 0.05 * 100
        ({"hedges_in_window": 5}, HedgeDenial.SHARE),
        ({"calls_in_window": 1, "hedges_in_window": 0}, None),  # the ceiling: one per window
        ({"calls_in_window": 1, "hedges_in_window": 1}, HedgeDenial.SHARE),
        ({"budget_available": False}, HedgeDenial.BUDGET),
        ({"bulkhead_free": False}, HedgeDenial.BULKHEAD),
        # The order: the first rule wins, whatever the later ones say.
        (
            {"idempotency": Idempotency.NON_IDEMPOTENT, "budget_available": False},
            HedgeDenial.NOT_IDEMPOTENT,
        ),
        ({"hedges_in_window": 9, "budget_available": False}, HedgeDenial.SHARE),
    ],
)
def test_hedge_rules(changes: dict[str, object], expected: HedgeDenial | None) -> None:
    assert decide_hedge(_ctx(**changes)) is expected


def test_hedge_rules_are_data_in_the_documented_order() -> None:
    assert [rule.__name__ for rule in RULES] == [
        "_idempotent", "_replayable", "_per_call", "_attempts", "_deadline", "_share",
        "_budget", "_bulkhead",
    ]  # fmt: skip
    assert str(HedgeDenial.SHARE) == (
        "no hedge: hedges would exceed max_share of the upstream's calls"
    )


def test_ledger_counts_expire_after_window() -> None:
    ledger = HedgeLedger(Hedging(0.1, window=10.0))
    ledger.record_call(0.0)
    ledger.record_call(5.0)
    ledger.record_hedge(5.0)
    assert ledger.counts(9.9) == (2, 1)
    assert ledger.counts(10.0) == (1, 1)
    assert ledger.counts(15.0) == (0, 0)
    assert ledger.counts(1.0) == (0, 0)  # time never goes backwards


def test_percentile_delay_uses_observed_latencies_never_below_delay() -> None:
    assert percentile([5.0, 1.0, 3.0, 2.0, 4.0], 0.5) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.95) == 4.0
    assert percentile([7.0], 0.01) == 7.0
    ledger = HedgeLedger(Hedging(0.01, percentile=0.9, min_samples=20, samples=100))
    for i in range(19):
        ledger.observe_latency(i / 100)
    assert ledger.delay() == 0.01  # too few samples: the fixed delay
    ledger.observe_latency(0.19)
    # 20 samples 0.00..0.19; the 90th percentile by nearest rank is the 18th: 0.17.
    assert ledger.delay() == pytest.approx(0.17)
    floor = HedgeLedger(Hedging(0.5, percentile=0.9, min_samples=1, samples=10))
    floor.observe_latency(0.1)
    assert floor.delay() == 0.5


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0, 3.0), st.booleans(), st.integers(0, 3)),
        min_size=1,
        max_size=200,
    ),
    st.sampled_from([0.01, 0.05, 0.2, 1.0]),
)
def test_hedges_never_exceed_their_share(
    events: list[tuple[float, bool, int]], share: float
) -> None:
    """Calls arrive; some ask to hedge (several times). At every hedge, the hedges of the
    window ending there are <= ceil(share x calls in it); so in any window of length W,
    hedges <= ceil(share x calls in the 2W ending with it)."""
    window = 1.0
    ledger = HedgeLedger(Hedging(0.0, max_share=share, window=window, max_hedges=4))
    now = 0.0
    calls: list[float] = []
    hedges: list[float] = []
    for step, wants, tries in events:
        now += step
        ledger.record_call(now)
        calls.append(now)
        for _ in range(tries if wants else 0):
            n_calls, n_hedges = ledger.counts(now)
            ctx = _ctx(
                calls_in_window=n_calls,
                hedges_in_window=n_hedges,
                max_share=share,
                max_hedges=4,
                max_attempts=9,
            )
            if decide_hedge(ctx) is None:
                ledger.record_hedge(now)
                hedges.append(now)

    def count(times: list[float], low: float, high: float) -> int:
        return sum(low < t <= high for t in times)

    for t in hedges:
        assert count(hedges, t - window, t) <= math.ceil(share * count(calls, t - window, t))
    for end in {*calls, *hedges}:
        in_window = count(hedges, end - window, end)
        assert in_window <= math.ceil(share * count(calls, end - 2 * window, end))


# --- throttling ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "retry_after", "expected"),
    [(429, None, True), (429, 1.0, True), (503, 2.0, True), (503, None, False),
     (200, None, False), (502, 1.0, False), (None, None, False)],
)  # fmt: skip
def test_what_throttles(status: int | None, retry_after: float | None, expected: bool) -> None:
    assert is_throttling(status, retry_after) is expected


def test_throttle_is_off_until_the_first_throttling_response() -> None:
    state = ThrottleState(AdaptiveThrottle())
    assert state.rate is None
    assert all(state.acquire(0.0).wait == 0.0 for _ in range(1000))
    state.observe(0.1, throttled=False)
    assert state.rate is None
    assert repr(state) == "ThrottleState(off)"


def test_throttle_cuts_to_beta_of_measured_rate_then_grows_along_the_cubic() -> None:
    config = AdaptiveThrottle(beta=0.7, scale=0.4, smoothing=1.0, min_rate=0.5)
    state = ThrottleState(config)
    # 10 responses per half-second bucket for 1 s: measured 20/s.
    for i in range(20):
        state.observe(i * 0.05, throttled=False)
    state.observe(1.0, throttled=False)  # closes the bucket [0.5, 1.0)
    assert state.measured_rate == pytest.approx(20.0)
    state.observe(1.0, throttled=True)
    assert state.last_max_rate == pytest.approx(20.0)
    assert state.rate == pytest.approx(14.0)  # beta x 20
    k = (20.0 * 0.3 / 0.4) ** (1 / 3)  # seconds back to W_max
    assert state._window() == pytest.approx(k)
    state.observe(1.0 + k, throttled=False)
    # At t = K the cubic is back at W_max (capped by 2 x measured only when lower).
    assert state.rate == pytest.approx(min(20.0, 2 * state.measured_rate))


def test_throttle_waits_for_a_token_or_rejects_past_the_deadline() -> None:
    state = ThrottleState(AdaptiveThrottle(min_rate=2.0, max_rate=2.0))
    state.observe(0.0, throttled=True)
    assert state.rate == 2.0
    assert state.capacity == pytest.approx(1.4)  # max(beta x 2, 1)
    first = state.acquire(0.0)
    assert (first.wait, first.rejected) == (0.5, False)  # the bucket starts empty
    second = state.acquire(0.0)
    assert second.wait == 1.0
    rejected = state.acquire(0.0, remaining=1.2)
    assert rejected.rejected
    assert rejected.wait == 1.5
    assert "1.500s away at 2/s" in str(rejected)
    assert state.tat == pytest.approx(1.7)  # the rejection took no slot
    # At t=2 the schedule is behind: one call goes now, the next 0.5 s - burst 0.2 s later.
    assert state.acquire(2.0).wait == 0.0
    assert state.acquire(2.0).wait == pytest.approx(0.3)
    limited = ThrottleState(AdaptiveThrottle(min_rate=2.0, max_rate=2.0, max_wait=0.1))
    limited.observe(0.0, throttled=True)
    assert limited.acquire(0.0).rejected


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0.0, 0.3), st.booleans(), st.booleans()),
        min_size=1,
        max_size=300,
    )
)
def test_the_rate_never_exceeds_its_bound(events: list[tuple[float, bool, bool]]) -> None:
    """Whatever the responses, the fill rate stays within [min_rate, max_rate], and for any
    two admissions i < j: j - i <= r_max x (send_j - send_i) + r_max x burst_max."""
    config = AdaptiveThrottle(min_rate=1.0, max_rate=50.0)
    state = ThrottleState(config)
    now = 0.0
    sends: list[float] = []
    top_rate = config.min_rate
    top_burst = 0.0
    for step, respond, throttled in events:
        now += step
        bucket_on = state.enabled
        verdict = state.acquire(now, remaining=5.0)
        if not verdict.rejected and bucket_on:  # only the bucket's admissions are bounded
            sends.append(now + verdict.wait)
        if respond:
            state.observe(now, throttled=throttled)
        if state.rate is not None:
            assert config.min_rate <= state.rate <= 50.0
            top_rate = max(top_rate, state.rate)
            top_burst = max(top_burst, state.burst)
    for i in range(len(sends)):
        for j in range(i + 1, len(sends)):
            assert j - i <= top_rate * (sends[j] - sends[i]) + top_rate * top_burst + 1e-6


# --- circuit breaking ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "category", "expected"),
    [
        (502, None, Health.UNHEALTHY),
        (503, None, Health.UNHEALTHY),
        (504, None, Health.UNHEALTHY),
        (500, None, Health.HEALTHY),
        (404, None, Health.HEALTHY),
        (429, None, Health.HEALTHY),
        (400, None, Health.HEALTHY),
        (200, None, Health.HEALTHY),
        (None, FailureCategory.CONNECT, Health.UNHEALTHY),
        (None, FailureCategory.DNS, Health.UNHEALTHY),
        (None, FailureCategory.TLS_HANDSHAKE, Health.UNHEALTHY),
        (None, FailureCategory.TIMEOUT, Health.UNHEALTHY),
        (None, FailureCategory.TLS_CERTIFICATE, Health.NEUTRAL),
        (None, FailureCategory.INVALID_REQUEST, Health.NEUTRAL),
        (None, FailureCategory.ADMISSION, Health.NEUTRAL),
        (None, FailureCategory.POOL_TIMEOUT, Health.NEUTRAL),
        (None, FailureCategory.CONNECTION_BROKEN, Health.NEUTRAL),
        (503, FailureCategory.CONNECTION_BROKEN, Health.NEUTRAL),  # a broken body
        (None, None, Health.NEUTRAL),
    ],
)
def test_only_unhealthy_evidence_counts(
    status: int | None, category: FailureCategory | None, expected: Health
) -> None:
    assert health_of(status, category) is expected


def test_breaker_opens_after_consecutive_failures_and_4xx_resets_nothing_bad() -> None:
    breaker = BreakerState(CircuitBreaker(consecutive_failures=3, cool_down=1.0))
    for health in (Health.UNHEALTHY, Health.UNHEALTHY, Health.HEALTHY, Health.UNHEALTHY,
                   Health.NEUTRAL, Health.UNHEALTHY):  # fmt: skip
        assert breaker.admit(0.0).admitted
        breaker.record(0.0, health)
    assert breaker.state is CircuitState.CLOSED
    assert breaker.consecutive == 2  # the neutral one neither counted nor reset
    breaker.record(0.5, Health.UNHEALTHY)
    assert breaker.state is CircuitState.OPEN
    verdict = breaker.admit(0.75)
    assert (verdict.admitted, verdict.retry_in) == (False, 0.75)
    assert str(verdict) == "rejected: the breaker is open for 0.75s more"


def test_breaker_half_open_probes_close_or_reopen_with_a_growing_cool_down() -> None:
    breaker = BreakerState(
        CircuitBreaker(
            consecutive_failures=1,
            cool_down=1.0,
            multiplier=2.0,
            max_cool_down=3.0,
            probes=2,
            window=10.0,
        )
    )
    breaker.record(0.0, Health.UNHEALTHY)
    assert (breaker.state, breaker.open_until) == (CircuitState.OPEN, 1.0)
    assert breaker.current(1.0) is CircuitState.HALF_OPEN
    first, second, third = breaker.admit(1.0), breaker.admit(1.0), breaker.admit(1.0)
    assert (first.probe, second.probe, third.admitted) == (True, True, False)
    assert str(third) == "rejected: the breaker is half-open and its probes are in flight"
    breaker.record(1.05, Health.HEALTHY, second)  # one passed, one in flight: still full
    assert not breaker.admit(1.05).admitted
    breaker.record(1.1, Health.UNHEALTHY, first)
    assert (breaker.state, breaker.open_until, breaker.level) == (CircuitState.OPEN, 3.1, 2)
    assert breaker.current(3.1) is CircuitState.HALF_OPEN
    breaker.record(3.1, Health.UNHEALTHY, second)  # the earlier period's probe: ignored
    assert breaker.state is CircuitState.HALF_OPEN
    a, b = breaker.admit(3.1), breaker.admit(3.1)
    breaker.record(3.2, Health.UNHEALTHY, a)
    assert (breaker.open_until, breaker.level) == (6.2, 3)  # 4 s capped at 3 s
    assert breaker.current(6.2) is CircuitState.HALF_OPEN
    c, d = breaker.admit(6.2), breaker.admit(6.2)
    breaker.record(6.3, Health.NEUTRAL, c)  # gives its slot back
    e = breaker.admit(6.3)
    assert e.probe
    breaker.record(6.4, Health.HEALTHY, d)
    assert breaker.state is CircuitState.HALF_OPEN
    breaker.record(6.5, Health.HEALTHY, e)
    assert breaker.state is CircuitState.CLOSED
    assert b.probe
    # The level decays by one per whole window closed: 25.5 s later, 3 - 2 = 1, so the
    # next opening is at level 2 (2 s).
    breaker.record(32.0, Health.UNHEALTHY)
    assert (breaker.level, breaker.open_until) == (2, 34.0)
    assert breaker.openings == 4


def test_breaker_opens_on_failure_ratio_in_window() -> None:
    breaker = BreakerState(
        CircuitBreaker(consecutive_failures=100, failure_ratio=0.5, min_calls=4, window=10.0)
    )
    for i, health in enumerate([Health.UNHEALTHY, Health.HEALTHY, Health.UNHEALTHY]):
        breaker.record(float(i), health)
    assert breaker.state is CircuitState.CLOSED  # 3 results < min_calls
    breaker.record(3.0, Health.HEALTHY)
    assert breaker.state is CircuitState.CLOSED  # only an unhealthy result can open
    breaker.record(20.0, Health.UNHEALTHY)
    assert breaker.state is CircuitState.CLOSED  # the old results expired: 1 result
    for t in (21.0, 22.0, 23.0):
        breaker.record(t, Health.UNHEALTHY if t != 22.0 else Health.HEALTHY)
    assert breaker.state is CircuitState.OPEN  # 3 of 4 unhealthy


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 3),
    st.lists(
        st.tuples(st.floats(0, 2.0), st.sampled_from(["admit", "ok", "bad", "neutral", "drop"])),
        max_size=200,
    ),
)
def test_a_breaker_never_admits_more_probes_than_configured(
    probes: int, events: list[tuple[float, str]]
) -> None:
    breaker = BreakerState(CircuitBreaker(consecutive_failures=1, cool_down=1.0, probes=probes))
    now = 0.0
    in_flight: list[BreakerVerdict] = []  # the verdicts of admitted, unfinished calls
    for step, event in events:
        now += step
        before = breaker.current(now)
        if event == "admit":
            verdict = breaker.admit(now)
            if verdict.admitted:
                in_flight.append(verdict)
                assert verdict.probe == (before is CircuitState.HALF_OPEN)
            elif before is CircuitState.CLOSED:
                pytest.fail("a closed breaker rejected a call")
        elif in_flight:
            probe = in_flight.pop(0)
            if event == "drop":
                breaker.release(probe)
            else:
                health = {"ok": Health.HEALTHY, "bad": Health.UNHEALTHY}.get(event, Health.NEUTRAL)
                breaker.record(now, health, probe)
        if breaker.state is CircuitState.HALF_OPEN:
            assert breaker.probes_in_flight + breaker.probes_passed <= probes
            # Seen from outside: the unfinished probes of this half-open period.
            current = [v for v in in_flight if v.probe and v.phase == breaker.phase]
            assert len(current) <= probes
