"""The client's mutable state that a call reads: lifecycle, drain, pool, upstreams, scopes.

One :class:`Runtime` per client, created by ``Client()``; the facade changes the lifecycle,
the call modules only read it (and register the cancel scopes ``aclose()`` must cancel).
"""

from __future__ import annotations

import enum
from http.cookiejar import CookieJar

import trio

from .._wire.pool import ConnectionPool
from .config import ClientConfig
from .connect import Connector
from .upstream import Upstreams

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
        "draining",
        "lifecycle",
        "pool",
        "scopes",
        "upstreams",
    )

    def __init__(self, config: ClientConfig, cookies: CookieJar | None) -> None:
        self.config = config
        self.cookies = cookies
        self.connector = Connector(config)
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
        #: The cancel scopes of attempts in flight, cancelled by ``aclose()``.
        self.scopes: set[trio.CancelScope] = set()
        self.calls = 0

    @property
    def closed(self) -> bool:
        return self.lifecycle is Lifecycle.CLOSED

    def drain(self) -> None:
        """Stop admitting calls and wake every call waiting in backoff."""
        self.draining = True
        self.drain_event.set()
