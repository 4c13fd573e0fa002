"""Per-upstream runtime state, and the admission step every attempt passes first.

Each origin a client talks to has one :class:`UpstreamState`: its ``Upstream`` settings, its own
retry budget and its bulkhead (``Upstream(max_concurrency=N)``, a ``trio.CapacityLimiter``).
:func:`admit` is the one place an attempt may be turned away before it touches the pool; a
rejection is a ``WireError`` at ``Stage.ADMISSION`` (``NOT_SENT``, category ``ADMISSION``), so
the loop and the engine treat it like any other unsent failure. Checks that reject per upstream
(a circuit breaker, a throttle) run first: ``UpstreamState.guard`` (:mod:`.resilience`),
before the bulkhead, so a call the breaker rejects never takes a permit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import trio

from .._core.errors import RejectReason
from .._core.evidence import Evidence, FailureCategory, Stage
from .._core.policy import Upstream
from .._models import Origin
from .._wire.progress import WireError

__all__ = ["Permit", "UpstreamState", "Upstreams", "admit", "release"]

#: The token a bulkhead permit is held under (``None``: no bulkhead, nothing held).
Permit = object


class UpstreamState:
    """One origin's settings, its own budget, its bulkhead and how many attempts wait on it,
    and its breaker / throttle / hedging state (``guard``)."""

    __slots__ = ("budget", "guard", "guarded", "limiter", "upstream", "waiting")

    def __init__(self, upstream: Upstream, origin: str = "") -> None:
        self.upstream = upstream
        self.budget = upstream.budget
        # (breakers, throttles, hedging: imported with the first origin's state, once per
        # process, not by ``from trio_retry import Client``: tests/test_startup.py)
        from .resilience import Guard

        self.guard = Guard(upstream, origin)
        # Admission has work to do (a breaker or a throttle): no unscoped fast path then.
        self.guarded = upstream.breaker is not None or upstream.throttle is not None
        self.waiting = 0  # attempts waiting for a bulkhead permit
        self.limiter = (
            trio.CapacityLimiter(upstream.max_concurrency)
            if upstream.max_concurrency is not None
            else None
        )


class Upstreams:
    """The state of every origin seen so far: configured ones, else a fresh ``default``."""

    __slots__ = ("_config", "_default", "_states")

    def __init__(self, config: Mapping[Origin, Upstream], default: Upstream) -> None:
        self._config = config
        self._default = default
        self._states: dict[Origin, UpstreamState] = {}

    def get(self, origin: Origin) -> UpstreamState:
        """The state of ``origin``, created on first use (each default origin its own budget)."""
        state = self._states.get(origin)
        if state is None:
            config = self._config.get(origin)
            upstream = config if config is not None else self._default.fresh()
            state = UpstreamState(upstream, str(origin))
            self._states[origin] = state
        return state


def try_admit(state: UpstreamState) -> Permit | None:
    """A bulkhead permit if one is free now (never waits), else ``None``. The upstream must
    have a bulkhead."""
    limiter = state.limiter
    assert limiter is not None
    token = object()
    try:
        limiter.acquire_on_behalf_of_nowait(token)
    except trio.WouldBlock:
        return None
    return token


async def admit(state: UpstreamState, what: Callable[[], str], origin: Origin) -> Permit | None:
    """Admit one attempt to ``origin``: a bulkhead permit when the upstream has a bulkhead.

    ``what()`` names the request in a rejection ("GET https://..."). Waits for a permit unless
    ``Upstream.max_queue`` attempts already wait: then raises at once (``ADMISSION``, nothing
    was sent). Cancellation while waiting leaves nothing held.
    """
    limiter = state.limiter
    if limiter is None:
        return None
    token = try_admit(state)
    if token is not None:
        return token
    token = object()
    queue = state.upstream.max_queue
    if queue is not None and state.waiting >= queue:
        raise WireError(
            f"{what()} not admitted: the bulkhead of {origin} is full "
            f"({limiter.total_tokens} calls in flight, {state.waiting} waiting, "
            f"Upstream(max_queue={queue}))",
            stage=Stage.ADMISSION,
            evidence=Evidence.NOT_SENT,
            category=FailureCategory.ADMISSION,
            reason=RejectReason.BULKHEAD_FULL,
        )
    state.waiting += 1
    try:
        await limiter.acquire_on_behalf_of(token)
    finally:
        state.waiting -= 1
    return token


def release(state: UpstreamState, permit: Permit | None) -> None:
    """Give back a permit taken by :func:`admit` (``None``: nothing to give back)."""
    if permit is not None and state.limiter is not None:
        state.limiter.release_on_behalf_of(permit)
