"""Retry policy and per-upstream settings: plain configuration values."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from .backoff import Backoff
from .budget import RetryBudget
from .checks import check_flag, check_instance, check_number, check_whole

if TYPE_CHECKING:
    from .breaker import CircuitBreaker
    from .hedging import Hedging
    from .reconcile import Reconciler
    from .throttle import AdaptiveThrottle

__all__ = ["RetryPolicy", "Upstream"]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How many attempts a call may make, how long to wait between them, and the least time an
    attempt needs to be worth starting (``min_attempt_budget``, seconds)."""

    max_attempts: int = 3
    backoff: Backoff = field(default_factory=Backoff)
    min_attempt_budget: float = 0.05

    def __post_init__(self) -> None:
        check_whole(self.max_attempts, "RetryPolicy.max_attempts", "a whole number >= 1")
        check_instance(
            self.backoff, Backoff, "RetryPolicy.backoff", "a Backoff (e.g. Backoff(initial=0.5))"
        )
        check_number(
            self.min_attempt_budget, "RetryPolicy.min_attempt_budget", "a number of seconds >= 0"
        )
        if self.max_attempts < 1:
            raise ValueError(f"RetryPolicy.max_attempts must be >= 1, got {self.max_attempts}")
        if not self.min_attempt_budget >= 0:  # (NaN too)
            raise ValueError(
                f"RetryPolicy.min_attempt_budget must be >= 0, got {self.min_attempt_budget}"
            )


@dataclass(frozen=True, slots=True)
class Upstream:
    """Per-origin settings.

    ``transient_500``: the upstream's 500s are known to be transient (retried for safely
    idempotent operations). ``budget``: the origin's retry budget (the client gives each origin
    that falls back to ``default_upstream`` a fresh copy). ``max_concurrency``: a bulkhead — at
    most this many calls to the origin hold a permit at once (``None``: unlimited).
    ``max_queue``: with a bulkhead, at most this many attempts wait for a permit; one more is
    rejected at once (``ADMISSION``, ``NOT_SENT``; ``0``: never wait). ``None``: no limit, an
    attempt waits as long as its deadline allows.

    Tail latency and overload (SPEC §15, each off by default): ``hedging`` sends extra copies
    of slow, safely idempotent requests; ``throttle`` lowers the sending rate when the origin
    throttles (429, 503 with Retry-After); ``breaker`` rejects calls at once while the origin
    shows itself unhealthy. Each origin gets state of its own from these settings.

    HTTP/3 (SPEC §16, extra ``http3``): ``http3=True`` reaches this ``https://`` origin over
    HTTP/3 without waiting for an ``Alt-Svc`` advertisement (falling back to TCP when QUIC does
    not get through). ``early_data=True``: with ``Client(early_data=True)``, an ``IDEMPOTENT``
    request carrying an ``Idempotency-Key`` may go in 0-RTT early data too (``SAFE`` ones may
    without it; ``NON_IDEMPOTENT`` ones never).

    ``resume`` (SPEC §18, on by default): a body of this origin that breaks mid-way is
    continued with a range request when the request is replay-safe and the response promised
    the same bytes again (a strong validator, ``Accept-Ranges: bytes``); ``False`` turns it
    off for the origin (``resume=`` per call overrides it).

    After ambiguity (SPEC §19): ``reconcile``, an async function the client asks, where it
    would otherwise raise ``HttpAmbiguousExecutionError``, whether the request in doubt ran
    (a call's own ``reconcile=`` wins). ``idempotency_keys="auto"``: every non-idempotent call
    to the origin carries a fresh ``Idempotency-Key`` (as ``idempotency_key=True``).
    ``idempotency_key_ttl``: how long the origin remembers a key, in seconds (Stripe: 24 h);
    a keyed request is not sent again once its key may have expired (the call is ambiguous
    instead). ``None``: keys do not expire.
    """

    transient_500: bool = False
    budget: RetryBudget = field(default_factory=RetryBudget)
    max_concurrency: int | None = None
    max_queue: int | None = None
    hedging: Hedging | None = None
    throttle: AdaptiveThrottle | None = None
    breaker: CircuitBreaker | None = None
    http3: bool = False
    early_data: bool = False
    resume: bool = True
    reconcile: Reconciler | None = None
    idempotency_keys: Literal["auto"] | None = None
    idempotency_key_ttl: float | None = None

    def __post_init__(self) -> None:
        if self.hedging is not None or self.throttle is not None or self.breaker is not None:
            # Imported only when one is set: the three modules are ~5 ms of start-up that a
            # program without hedging, throttling or breaking never needs.
            from .breaker import CircuitBreaker
            from .hedging import Hedging
            from .throttle import AdaptiveThrottle

            for name, kind in (
                ("hedging", Hedging),
                ("throttle", AdaptiveThrottle),
                ("breaker", CircuitBreaker),
            ):
                value = getattr(self, name)
                if value is not None and not isinstance(value, kind):
                    raise TypeError(
                        f"Upstream.{name} must be a {kind.__name__} or None, got {value!r}"
                    )
        for name in ("transient_500", "http3", "early_data", "resume"):
            check_flag(getattr(self, name), f"Upstream.{name}")
        check_instance(
            self.budget,
            RetryBudget,
            "Upstream.budget",
            "a RetryBudget (e.g. RetryBudget(ratio=0.1))",
        )
        for name in ("max_concurrency", "max_queue"):
            check_whole(
                getattr(self, name), f"Upstream.{name}", "a whole number or None", optional=True
            )
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError(
                f"Upstream.max_concurrency must be None or >= 1, got {self.max_concurrency}"
            )
        if self.reconcile is not None and not callable(self.reconcile):
            raise TypeError(
                "Upstream.reconcile must be an async function (report) -> Reconciled, or None, "
                f"got {self.reconcile!r}"
            )
        if self.idempotency_keys not in (None, "auto"):
            raise ValueError(
                'Upstream.idempotency_keys must be "auto" (a key for every non-idempotent call) '
                f"or None, got {self.idempotency_keys!r}"
            )
        if self.idempotency_key_ttl is not None:
            check_number(
                self.idempotency_key_ttl, "Upstream.idempotency_key_ttl", "seconds > 0, or None"
            )
            if not self.idempotency_key_ttl > 0:
                raise ValueError(
                    "Upstream.idempotency_key_ttl must be seconds > 0 (how long the origin "
                    f"remembers a key), or None, got {self.idempotency_key_ttl}"
                )
        if self.max_queue is not None:
            if self.max_queue < 0:
                raise ValueError(f"Upstream.max_queue must be None or >= 0, got {self.max_queue}")
            if self.max_concurrency is None:
                raise ValueError(
                    "Upstream.max_queue bounds the wait for a bulkhead permit: set "
                    "max_concurrency too"
                )

    def fresh(self) -> Upstream:
        """The same settings with a budget of its own."""
        return Upstream(
            self.transient_500,
            self.budget.fresh(),
            self.max_concurrency,
            self.max_queue,
            self.hedging,
            self.throttle,
            self.breaker,
            self.http3,
            self.early_data,
            self.resume,
            self.reconcile,
            self.idempotency_keys,
            self.idempotency_key_ttl,
        )
