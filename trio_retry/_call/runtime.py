"""The client's mutable state that a call reads: lifecycle, drain, pool, upstreams, scopes.

One :class:`Runtime` per client, created by ``Client()``; the facade changes the lifecycle,
the call modules only read it (and register the cancel scopes ``aclose()`` must cancel).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from .._core.errors import RejectReason
from .._core.evidence import Stage
from .._wire.pool import ConnectionPool
from .._wire.pool_ledger import not_admitted
from .._wire.progress import AttemptProgress, WireError
from .._wire.timekeeper import Timekeeper
from .config import ClientConfig
from .connect import Connector
from .keys import KeyLedger
from .upstream import Upstreams

if TYPE_CHECKING:
    from http.cookiejar import CookieJar

__all__ = ["Lifecycle", "Runtime"]


class Lifecycle(enum.Enum):
    """``NEW`` until ``async with`` enters the client, ``OPEN`` inside, ``CLOSED`` after."""

    NEW = "new"
    OPEN = "open"
    CLOSED = "closed"

    def __str__(self) -> str:
        return self.value


class Runtime:
    """Everything one client's calls share that changes while it runs."""

    __slots__ = (
        "calls",
        "config",
        "connector",
        "cookies",
        "drain_event",
        "drained",
        "draining",
        "keys",
        "lifecycle",
        "now",
        "pool",
        "scopes",
        "timekeeper",
        "upstreams",
    )

    def __init__(self, config: ClientConfig, cookies: CookieJar | None) -> None:
        self.config = config
        self.cookies = cookies
        self.connector = Connector(config)
        #: The one owner of time (``_wire/clock.py``): the limits of every wait, kept on its
        #: lanes by its task in the client's background nursery.
        self.timekeeper = Timekeeper(config.stage_timeouts, config.pool_timeout)
        self.connector.timekeeper = self.timekeeper
        self.upstreams = Upstreams(config.upstreams, config.default_upstream)
        self.pool = ConnectionPool(
            max_connections=config.max_connections,
            max_connections_per_origin=config.max_connections_per_origin,
            keepalive_expiry=config.keepalive_expiry,
            pool_timeout=config.pool_timeout,
        )
        self.lifecycle = Lifecycle.NEW
        self.draining = False
        self.drain_event = trio.Event()
        #: The cancel scopes of attempts in flight (with their progress): ``aclose()`` cancels
        #: them all, ``drain()`` those not yet past the pool (see :meth:`drain`).
        self.scopes: dict[trio.CancelScope, AttemptProgress] = {}
        #: The progress of each attempt ``drain()`` cancelled (see :meth:`drain`).
        self.drained: set[AttemptProgress] = set()
        self.calls = 0
        #: The Idempotency-Keys sent, with what each was sent with (``keys.py``).
        self.keys = KeyLedger()
        #: The clock calls read: the run's own once the client is entered (:meth:`open`;
        #: ``trio.current_time()`` is three calls to it).
        self.now: Callable[[], float] = trio.current_time

    def open(self, nursery: trio.Nursery) -> None:
        """The client was entered: its background work runs in ``nursery``, and the clock is
        this run's."""
        self.connector.nursery = nursery
        self.timekeeper.start(nursery)
        self.pool.bind(nursery, self.timekeeper)  # HTTP/2 openings outlive their attempt
        self.now = trio.lowlevel.current_clock().current_time
        self.lifecycle = Lifecycle.OPEN

    @property
    def closed(self) -> bool:
        return self.lifecycle is Lifecycle.CLOSED

    def drain(self) -> None:
        """Stop admitting calls, wake every call waiting in backoff, and end the attempts
        still waiting to be admitted (a bulkhead permit) or for a pooled connection.

        An attempt at ``Stage.ADMISSION`` or ``Stage.POOL`` has sent nothing and is not yet
        on a connection, so cancelling its scope ends it ``NOT_SENT`` at once (the attempt
        reports it as ``ADMISSION``: see ``attempt.AttemptRun``). One that is connecting or
        exchanging is left to finish. The stage read here is exact: ``drain()`` is synchronous
        and the attempts' tasks are parked at an await.
        """
        self.draining = True
        self.drain_event.set()
        for scope, progress in self.scopes.items():
            if progress.stage <= Stage.POOL:
                self.drained.add(progress)
                scope.cancel()
        # The attempts waiting in the pool with no scope of their own (``AttemptRun._ready``):
        # each sees an error it reports as drained. (After the scopes: an attempt whose scope
        # was just cancelled is no longer parked, and reports its cancellation.)
        self.pool.fail_waiters(_drained_wait)


def _drained_wait() -> WireError:
    """What ``drain()`` ends a wait in the pool with: nothing was sent (the attempt reports
    it with its own request's words, ``attempt._drained``)."""
    return not_admitted("the client is draining", RejectReason.DRAINING)
