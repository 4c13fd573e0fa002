"""The client's configuration: one frozen value, built (and checked) once by ``Client()``.

Everything a call needs from the client that does not change while it runs lives in
:class:`ClientConfig`. The only client-wide inputs that may change later are ``client.headers``
(a mutable :class:`Headers`, read afresh by every call) and ``client.cookies`` (a jar the
client fills); both are passed to a call separately, never cached here.
"""

from __future__ import annotations

import random
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias, runtime_checkable

from .._auth import RequestAuth
from .._core.attempt import Attempt
from .._core.engine import RetryEligibilityEngine
from .._core.policy import RetryPolicy, Upstream
from .._models import URL, Origin, StageTimeouts
from .._observe.hooks import Hooks
from .._observe.otel import Instrumentation
from .._proxy import ProxyConfig
from .._tls import CertTypes, VerifyTypes
from .._wire.dialer import Dialer

__all__ = ["AttemptCallback", "AuthTypes", "ClientConfig", "JsonDumps", "RefreshableAuth"]


@runtime_checkable
class RefreshableAuth(Protocol):
    """Credentials applied to every attempt, refreshed once after a 401.

    ``headers()`` is awaited before each attempt; ``refresh()`` is awaited once when a 401 on a
    safe, replayable request is to be replayed (SPEC §6).
    """

    async def headers(self) -> Mapping[str, str]: ...

    async def refresh(self) -> None: ...


#: ``auth=``: refreshable credentials, or credentials that sign each request (``RequestAuth``).
AuthTypes: TypeAlias = "RefreshableAuth | RequestAuth"

#: ``on_attempt=``: called with each finished attempt, in the calling task; may be async.
AttemptCallback = Callable[[Attempt], Awaitable[None] | None]
#: ``json_dumps=``: the encoder of ``json=`` bodies.
JsonDumps = Callable[[Any], str | bytes]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientConfig:
    """What ``Client(...)`` was told, normalised: defaults filled in, URLs and origins parsed.

    Built once in ``Client.__init__``; every call reads it and none changes it.
    """

    retry: RetryPolicy
    default_upstream: Upstream
    upstreams: Mapping[Origin, Upstream]
    deadline: float | None
    auth: AuthTypes | None
    engine: RetryEligibilityEngine
    wall_clock: Callable[[], float]
    on_attempt: AttemptCallback | None
    rng: random.Random
    base_url: URL | None
    max_header_bytes: int
    max_body_bytes: int | None
    stage_timeouts: StageTimeouts
    follow_redirects: bool
    max_redirects: int
    proxy: ProxyConfig | None
    trust_env: bool
    json_dumps: JsonDumps | None
    http2: bool
    http2_prior_knowledge: bool
    ssl_context: ssl.SSLContext
    #: Whether ``ssl_context`` was built by the client (``verify=``/``cert=``) rather than
    #: given by the caller (used as is, never changed: see ``trio_retry._tls``).
    owns_ssl_context: bool
    verify: VerifyTypes
    cert: CertTypes
    #: ``Client(params=...)``: appended to every URL's query, under a call's own params.
    params: tuple[tuple[str, Any], ...]
    #: Every connection goes to this Unix domain socket (no DNS, no proxy).
    uds: str | None
    max_connections: int
    max_connections_per_origin: int | None
    keepalive_expiry: float | None
    pool_timeout: float | None
    #: ``transport=``: opens connections instead of DNS/TCP/TLS (e.g. testing.MockTransport).
    transport: Dialer | None = None
    #: ``event_hooks=`` validated (``None`` without any hook) and the ``telemetry=``
    #: instrumentation (``None`` without it): each costs the hot path one ``is None`` check.
    hooks: Hooks | None = None
    instrumentation: Instrumentation | None = None
