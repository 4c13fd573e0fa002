"""The options of ``Client(...)``, written once: :class:`ClientOptions`, their one table.

Each option is a field of the table: its name, its type and its default, in the order
``help(Client)`` and docs/reference.md show them. ``Client(...)`` takes the fields as its
keyword arguments (its signature *is* the table's, for a type checker at the call site and for
``inspect.signature``: ``_client.py``), and :func:`~.config.configure` takes the table, checks
each option in one place and builds the :class:`~.config.ClientConfig` every call reads.

Rejected alternatives: the constructor's own parameter list passed on, name by name, to a
``configure`` with the same list, then into the config's fields (four lists to keep in step,
and a default could differ between two of them); and ``**options: Unpack[SomeTypedDict]``,
which a type checker reads as well but which keeps no default (they would live in a second
table, and ``help(Client)`` would show none).

The defaults that are told apart from the same value given explicitly (``http2``,
``telemetry``, the clock's limits) live here too.
"""

from __future__ import annotations

import os
import random
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeAlias, cast, runtime_checkable

from .._core.attempt import Attempt
from .._core.policy import RetryPolicy, Upstream
from .._models import HeaderTypes, StageTimeouts
from .._tls import CertTypes, VerifyTypes
from .._wire.clock import DEFAULT_LIMITS

if TYPE_CHECKING:
    from http.cookiejar import CookieJar

    from .._auth import RequestAuth
    from .._core.engine import RetryEligibilityEngine
    from .._observe.hooks import EventHooks
    from .._observe.otel import OpenTelemetry
    from .._wire.dialer import Dialer

__all__ = [
    "DEFAULT_POOL_TIMEOUT",
    "DEFAULT_STAGE_TIMEOUTS",
    "HTTP2_DEFAULT",
    "TELEMETRY_DEFAULT",
    "AttemptCallback",
    "AuthTypes",
    "ClientOptions",
    "JsonDumps",
    "RefreshableAuth",
]


class _Default:
    """A default argument told apart from the same value given explicitly (``is``); it shows
    as that value in signatures and help."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __repr__(self) -> str:
        return repr(self.value)


#: ``Client(http2=...)``'s default: ``True``, but not "given explicitly" (SPEC §12).
HTTP2_DEFAULT: Final[bool] = cast(bool, _Default(True))

#: ``Client(telemetry=...)``'s default: shown as ``None``, but not ``telemetry=None`` given
#: explicitly. Not given, a client takes the instrumentor's telemetry (``TrioRetryInstrumentor
#: .instrument()``); ``None`` given opts it out. (A default of ``None`` meaning "the
#: instrumentor's" left no way to opt out; a ``telemetry=False`` for "none" was rejected: two
#: spellings of nothing, and ``None`` is what a caller writes for it.)
TELEMETRY_DEFAULT: Final[OpenTelemetry | None] = cast("OpenTelemetry | None", _Default(None))

#: ``Client(pool_timeout=...)``'s default: the wait for a pooled connection is bounded too
#: (5 s; why: ``clock.py``'s table, ``DEFAULT_LIMITS``). ``pool_timeout=None`` removes it.
DEFAULT_POOL_TIMEOUT: Final[float] = DEFAULT_LIMITS["pool"]

#: The stage timeouts of ``Client()`` when ``stage_timeouts`` is not given: nothing waits forever
#: on a server that never accepts, never answers, stops in the middle of a head or a body, or
#: stops reading the request. ``write`` and ``read`` are idle bounds (no byte moved for 30 s),
#: so a long healthy transfer is never cut; a call with a deadline waits for its head within
#: the deadline instead of ``first_byte``. The values, and why, are ``clock.py``'s table
#: (``_wire/clock.py``, ``DEFAULT_LIMITS``: each a ``Default``, told apart from the same number
#: given explicitly). ``stage_timeouts=None`` or ``StageTimeouts()`` removes them.
DEFAULT_STAGE_TIMEOUTS = StageTimeouts(
    connect=DEFAULT_LIMITS["connect"],
    tls=DEFAULT_LIMITS["tls"],
    write=DEFAULT_LIMITS["write"],
    first_byte=DEFAULT_LIMITS["first_byte"],
    read=DEFAULT_LIMITS["read"],
)


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
class ClientOptions:
    """Every option of ``Client(...)``: its type and its default, as given (unchecked: a value
    of the wrong type at run time is :func:`~.config.configure`'s to refuse). What each means:
    docs/reference.md (the ``Client`` options table) and SPEC §2/§10."""

    retry: RetryPolicy | None = None
    upstreams: Mapping[str, Upstream] | None = None
    default_upstream: Upstream | None = None
    max_connections: int = 100
    max_connections_per_origin: int | None = None
    pool_timeout: float | None = DEFAULT_POOL_TIMEOUT  # 5 s; None: no limit
    keepalive_expiry: float | None = 5.0
    http2: bool = HTTP2_DEFAULT  # True; told apart from http2=True given explicitly
    http2_prior_knowledge: bool = False
    ssl_context: ssl.SSLContext | None = None
    verify: VerifyTypes = True
    cert: CertTypes = None
    uds: str | None = None
    params: Mapping[str, Any] | Sequence[tuple[str, Any]] | None = None
    deadline: float | None = None
    auth: AuthTypes | tuple[str, str] | None = None
    engine: RetryEligibilityEngine | None = None
    clock: Callable[[], float] | None = None
    on_attempt: AttemptCallback | None = None
    rng: random.Random | None = None
    base_url: str | None = None
    headers: HeaderTypes = None
    max_header_bytes: int = 65536
    max_body_bytes: int | None = None
    stage_timeouts: StageTimeouts | None = DEFAULT_STAGE_TIMEOUTS
    follow_redirects: bool = False
    max_redirects: int = 20
    cookies: bool | CookieJar = False
    proxy: str | None = None
    trust_env: bool = False
    json_dumps: JsonDumps | None = None
    transport: Dialer | None = None
    event_hooks: EventHooks | None = None
    telemetry: OpenTelemetry | None = TELEMETRY_DEFAULT  # None: none, even if instrumented
    http1_fast_path: bool = True  # the strict HTTP/1.1 fast path (_wire/fast11.py)
    http2_fast_path: bool = True  # the strict HTTP/2 fast path (_wire/http2/fast.py)
    http3: bool = False  # HTTP/3 where Alt-Svc advertises it (extra http3; SPEC §16)
    early_data: bool = False  # HTTP/3 0-RTT for requests whose replay is harmless
    state: str | os.PathLike[str] | None = None  # a file keeping tickets, tokens, Alt-Svc
