"""The client's configuration: one frozen value, built (and checked) once by ``Client()``.

:func:`configure` takes the options as given (:class:`~.client_options.ClientOptions`, their
one table), checks each of them (the one place of ``Client()``'s checks: a wrong type raises
``TypeError``, a wrong value ``ValueError``, each naming the option), and returns the
:class:`ClientConfig` every call reads: defaults filled in, URLs and origins parsed.

Everything a call needs from the client that does not change while it runs lives in
:class:`ClientConfig`. The only client-wide inputs that may change later are ``client.headers``
(a mutable :class:`Headers`, made from :attr:`ClientConfig.headers` and read afresh by every
call) and ``client.cookies`` (a jar the client fills); both are passed to a call separately.
"""

from __future__ import annotations

import os
import random
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from .._core.checks import described
from .._core.errors import InvalidRequest
from .._core.policy import RetryPolicy, Upstream
from .._core.secrecy import raise_detached, withheld
from .._models import URL, Headers, Origin, StageTimeouts
from .._tls import CertTypes, ContextSource, VerifyTypes, context_source
from .._url import as_base, shown_url
from .._wire.clock import Default
from .alpn import offered_alpn
from .client_options import (
    HTTP2_DEFAULT,
    TELEMETRY_DEFAULT,
    AttemptCallback,
    AuthTypes,
    ClientOptions,
    JsonDumps,
    RefreshableAuth,
)
from .options import OptionError, check_bool, check_deadline, check_retry, shown

if TYPE_CHECKING:
    from http.cookiejar import CookieJar

    from .._core.engine import RetryEligibilityEngine
    from .._observe.hooks import Hooks
    from .._observe.otel import Instrumentation
    from .._proxy import ProxyConfig
    from .._wire.dialer import Dialer

__all__ = ["ClientConfig", "configure"]

_NO_H2 = (
    "http2=True, but the ssl.SSLContext given to the client does not offer h2 by ALPN ({}), "
    "and the client uses a caller's context as given, never changing it: offer HTTP/2 on it "
    'with ctx.set_alpn_protocols(["h2", "http/1.1"]), or pass http2=False'
)


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
    #: The TLS context (:attr:`ssl_context`): the caller's, or the client's own, which for
    #: ``verify=True``/``False`` without ``cert=`` is built by the first TLS connection.
    tls: ContextSource
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
    #: The strict HTTP/1.1 fast path (``_wire/fast11.py``); ``False`` when
    #: ``http1_fast_path=False`` or ``TRIO_RETRY_HTTP1_FAST_PATH`` turns it off.
    http1_fast_path: bool = True
    #: The strict HTTP/2 fast path (``_wire/http2/fast.py``); ``False`` when
    #: ``http2_fast_path=False`` or ``TRIO_RETRY_HTTP2_FAST_PATH`` turns it off.
    http2_fast_path: bool = True
    #: ``Client(http3=True)``: HTTP/3 for ``https://`` origins that advertise it (``Alt-Svc``);
    #: ``http3_configured`` holds the origins whose ``Upstream(http3=True)`` asks for it.
    http3: bool = False
    http3_configured: frozenset[Origin] = frozenset()
    #: ``default_upstream=Upstream(http3=True)``: every ``https://`` origin not listed in
    #: ``upstreams`` (``http3_excluded``: those listed without it) goes over HTTP/3.
    http3_everywhere: bool = False
    http3_excluded: frozenset[Origin] = frozenset()
    #: ``Client(early_data=True)``: requests whose replay is harmless may go in HTTP/3 0-RTT.
    early_data: bool = False
    #: ``Client(state=path)``: the file protocol knowledge is kept in across processes
    #: (``_state/``), checked writable; ``None``: kept in memory only.
    state: str | None = None
    #: ``Client(headers=...)``, checked: the client's ``headers`` start as its defaults with
    #: these over them.
    headers: tuple[tuple[str, str], ...] = ()
    #: The cookie jar (``cookies=True``: a new one; the caller's own), or ``None``.
    cookies: CookieJar | None = None

    @property
    def ssl_context(self) -> ssl.SSLContext:
        """The context of every TLS connection (the caller's, or the client's own, built on
        the first read: see ``tls``)."""
        return self.tls.get()


def _refuse(exc: OptionError | InvalidRequest, option: str | None = None) -> NoReturn:
    """A wrong ``Client(...)`` argument: ``TypeError`` for a wrong type, else ``ValueError``;
    its message is ``exc``'s (written to show no secret), with nothing chained to it."""
    message = str(exc) if option is None else f"{option}: {exc}"
    if isinstance(exc, OptionError) and exc.kind == "type":
        raise_detached(TypeError(message))
    raise_detached(ValueError(message))


def _auth(value: object) -> AuthTypes | None:
    if value is None:
        return None
    # (the credentials' module: imported by the first client given auth=, or the first call)
    from .._auth import BasicAuth, RequestAuth

    if isinstance(value, (RefreshableAuth, RequestAuth)) and not isinstance(value, type):
        return value
    if (
        isinstance(value, tuple)
        and len(value) == 2
        and all(isinstance(part, str) for part in value)
    ):
        try:
            return BasicAuth(value[0], value[1])
        except ValueError as exc:  # (its message shows neither the name nor the password)
            raise ValueError(f"auth=: {exc}") from None
    raise TypeError(
        "auth must be a RefreshableAuth (BasicAuth(user, password), BearerAuth(token), "
        "DigestAuth(user, password), or an object with async headers() and refresh()), a "
        "RequestAuth (async sign(request)), or a (user, password) tuple of str, got "
        f"{described(value)}"
    )


def _count(value: object, option: str, *, minimum: int, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"{option} must be an int{' or None' if optional else ''}, got {shown(value)}"
        )
    if value < minimum:
        raise ValueError(f"{option} must be >= {minimum}, got {value}")
    return value


def _instance(value: object, kind: type, option: str, accepted: str) -> None:
    if value is not None and not isinstance(value, kind):
        raise TypeError(f"{option} must be {accepted} or None, got {shown(value)}")


def _callable(value: object, option: str, accepted: str) -> None:
    """A function the client calls later: refused here, not when it is first called (an
    ``on_attempt=5`` used to fail after its request had been sent)."""
    if value is not None and not callable(value):
        raise TypeError(f"{option} must be {accepted}, or None, got {shown(value)}")


def configure(options: ClientOptions) -> ClientConfig:
    """The :class:`ClientConfig` of ``Client(...)``'s options, each checked: a wrong type
    raises ``TypeError``, a wrong value ``ValueError``, both naming the option. Nothing is
    opened here."""
    hooks, instrumentation = _observers(options)
    transport, proxy, uds = options.transport, options.proxy, options.uds
    if transport is not None:  # transport=: it opens connections instead of us
        if not callable(getattr(transport, "connect", None)):
            raise TypeError(
                "transport must have an async connect() (e.g. trio_retry.testing."
                f"MockTransport), got {type(transport).__name__}"
            )
        if proxy is not None:
            raise ValueError("proxy= and transport= cannot be combined: the transport connects")
    pool_timeout = options.pool_timeout
    try:
        retry = check_retry(options.retry)
        deadline = check_deadline(options.deadline)
        # (The default kept as it is: a timeout's message says it is the default.)
        pool_wait = (
            pool_timeout
            if isinstance(pool_timeout, Default)
            else check_deadline(pool_timeout, "pool_timeout")
        )
        explicit_http2 = options.http2 is not HTTP2_DEFAULT
        http2 = bool(check_bool(options.http2, "http2")) if explicit_http2 else True
        h2c = bool(check_bool(options.http2_prior_knowledge, "http2_prior_knowledge"))
        redirects = bool(check_bool(options.follow_redirects, "follow_redirects"))
        trust_env = bool(check_bool(options.trust_env, "trust_env"))
        fast_path = bool(check_bool(options.http1_fast_path, "http1_fast_path"))
        fast_path = fast_path and _fast_path_env(1)
        fast_path2 = bool(check_bool(options.http2_fast_path, "http2_fast_path"))
        fast_path2 = fast_path2 and _fast_path_env(2)
        http3 = bool(check_bool(options.http3, "http3"))
        early_data = bool(check_bool(options.early_data, "early_data"))
    except OptionError as exc:
        _refuse(exc)
    keepalive = options.keepalive_expiry
    if keepalive is not None and (
        isinstance(keepalive, bool) or not isinstance(keepalive, (int, float))
    ):
        raise TypeError(
            f"keepalive_expiry must be a number of seconds or None, got {shown(keepalive)}"
        )
    if keepalive is not None and not keepalive >= 0:
        raise ValueError(f"keepalive_expiry must be >= 0 or None, got {keepalive!r}")
    default_upstream = options.default_upstream
    _instance(default_upstream, Upstream, "default_upstream", "an Upstream")
    stage_timeouts = options.stage_timeouts
    _instance(stage_timeouts, StageTimeouts, "stage_timeouts", "a StageTimeouts")
    _instance(options.ssl_context, ssl.SSLContext, "ssl_context", "an ssl.SSLContext")
    _instance(options.rng, random.Random, "rng", "a random.Random")
    _callable(options.on_attempt, "on_attempt", "a function (or async function) given each Attempt")
    _callable(
        options.clock, "clock", "a function returning the wall-clock time in seconds (time.time)"
    )
    _callable(
        options.json_dumps, "json_dumps", "a function turning a value into JSON text (json.dumps)"
    )
    # The engine's module (its rules, replayability): imported by the first client built, not by
    # ``from trio_retry import Client`` (tests/test_startup.py).
    from .._core.engine import DefaultRetryEligibilityEngine, RetryEligibilityEngine

    engine = options.engine
    if engine is not None and not isinstance(engine, RetryEligibilityEngine):
        raise TypeError(f"engine must have a decide(context) method, got {shown(engine)}")
    origins = _upstreams(options.upstreams)
    base_url = _base_url(options.base_url)
    parsed_proxy = _proxy(proxy)
    verify, ssl_context, owns_context = _tls(options, http2, explicit_http2)
    if uds is not None and not isinstance(uds, str):
        raise TypeError(f"uds must be the path of a Unix socket (str), got {shown(uds)}")
    if uds is not None and proxy is not None:
        raise ValueError("uds= and proxy= cannot be combined: the Unix socket is the route")
    configured_h3 = frozenset(origin for origin, up in origins.items() if up.http3)
    default_h3 = isinstance(default_upstream, Upstream) and default_upstream.http3
    if http3 or configured_h3 or default_h3:
        # The extra is checked here, at construction, not at the first request (SPEC §16):
        # without aioquic, importing the HTTP/3 package raises an ImportError naming the extra.
        from .._wire import http3 as _http3  # noqa: F401

        if transport is not None or uds is not None:
            raise ValueError(
                "http3=True (or Upstream(http3=True)) cannot be combined with "
                f"{'transport=' if transport is not None else 'uds='}: HTTP/3 opens its own "
                "UDP sockets"
            )
    if early_data and not (http3 or configured_h3 or default_h3):
        raise ValueError(
            "early_data=True needs HTTP/3 (http3=True or Upstream(http3=True)): early data is "
            "QUIC's 0-RTT"
        )
    auth = _auth(options.auth)
    max_header_bytes = _count(options.max_header_bytes, "max_header_bytes", minimum=1) or 1
    max_body_bytes = _count(options.max_body_bytes, "max_body_bytes", minimum=0, optional=True)
    max_redirects = _count(options.max_redirects, "max_redirects", minimum=0) or 0
    params = _client_params(options.params)
    max_connections = _count(options.max_connections, "max_connections", minimum=1) or 1
    per_origin = _count(
        options.max_connections_per_origin, "max_connections_per_origin", minimum=1, optional=True
    )
    return ClientConfig(
        retry=retry or RetryPolicy(),
        default_upstream=default_upstream if isinstance(default_upstream, Upstream) else Upstream(),
        upstreams=origins,
        deadline=deadline,
        auth=auth,
        engine=engine
        if isinstance(engine, RetryEligibilityEngine)
        else DefaultRetryEligibilityEngine(),
        wall_clock=options.clock or time.time,
        on_attempt=options.on_attempt,
        rng=options.rng if isinstance(options.rng, random.Random) else random.Random(),
        base_url=base_url,
        max_header_bytes=max_header_bytes,
        max_body_bytes=max_body_bytes,
        stage_timeouts=stage_timeouts if stage_timeouts is not None else StageTimeouts(),
        follow_redirects=redirects,
        max_redirects=max_redirects,
        proxy=parsed_proxy,
        trust_env=trust_env,
        json_dumps=options.json_dumps,
        http2=http2,
        http2_prior_knowledge=h2c,
        tls=ssl_context,
        owns_ssl_context=owns_context,
        verify=verify,
        cert=options.cert,
        uds=uds,
        params=params,
        max_connections=max_connections,
        max_connections_per_origin=per_origin,
        keepalive_expiry=float(keepalive) if keepalive is not None else None,
        pool_timeout=pool_wait,
        transport=transport,
        hooks=hooks,
        instrumentation=instrumentation,
        http1_fast_path=fast_path,
        http2_fast_path=fast_path2,
        http3=http3,
        http3_configured=configured_h3,
        http3_everywhere=default_h3,
        http3_excluded=frozenset(origin for origin, up in origins.items() if not up.http3),
        early_data=early_data,
        state=_state_path(options.state),
        headers=_client_headers(options.headers),
        cookies=_cookie_jar(options.cookies),
    )


def _state_path(state: object) -> str | None:
    """``state=``: ``None``, or a path checked as ``_state.file.check_path`` says."""
    if state is None:
        return None
    from .._state.file import check_path

    return check_path(state)


def _observers(options: ClientOptions) -> tuple[Hooks | None, Instrumentation | None]:
    """``event_hooks=`` checked, and the ``telemetry=`` instrumentation (not given: the
    instrumentor's, ``opentelemetry-instrument``). Their modules are imported here, by the
    first client built (tests/test_startup.py)."""
    from .._observe.hooks import normalize_event_hooks
    from .._observe.otel import OpenTelemetry, default_telemetry

    telemetry = options.telemetry
    if telemetry is TELEMETRY_DEFAULT:
        telemetry = default_telemetry()
    elif telemetry is not None and not isinstance(telemetry, OpenTelemetry):
        raise TypeError(
            "telemetry must be a trio_retry.OpenTelemetry(...), or None for none, got "
            f"{type(telemetry).__name__}"
        )
    hooks = normalize_event_hooks(options.event_hooks)
    return hooks, telemetry.instrument() if telemetry is not None else None


def _upstreams(upstreams: object) -> dict[Origin, Upstream]:
    """``upstreams=`` by parsed origin."""
    if upstreams is not None and not isinstance(upstreams, Mapping):
        raise TypeError(
            f"upstreams must be a mapping of origin to Upstream, got {withheld(upstreams)}"
        )
    origins: dict[Origin, Upstream] = {}
    for key, value in (upstreams or {}).items():
        if not isinstance(key, str):
            raise TypeError(
                f'upstreams keys must be origins as str ("https://host:port" or '
                f'"https://host"), got {withheld(key)}'
            )
        if not isinstance(value, Upstream):
            raise TypeError(
                f"upstreams[{shown_url(key, loose=True)!r}] must be an Upstream, got {shown(value)}"
            )
        try:
            origins[Origin.parse_key(key)] = value
        except InvalidRequest as exc:
            problem = str(exc)
        else:
            continue
        raise ValueError(
            f'upstreams key {shown_url(key, loose=True)!r} is not an origin: write "https://'
            f'host:port" or "https://host" (or http://); {problem}'
        )
    return origins


def _base_url(base_url: object) -> URL | None:
    """``base_url=`` parsed, as a base (its path ending in ``/``)."""
    if base_url is None:
        return None
    if not isinstance(base_url, (str, URL)):
        raise TypeError(
            f"base_url must be an absolute http(s) URL as str, got {withheld(base_url)}"
        )
    try:
        parsed = URL(base_url)
    except InvalidRequest as exc:
        _refuse(exc, "base_url")
    if "?" in str(parsed) or "#" in str(parsed):
        # A base's query would be lost by every call that has one of its own (httpx
        # garbles it): refused, naming the option that sends parameters on every call.
        raise ValueError(
            f"base_url must not have a query string or fragment, got {parsed}: pass "
            "params= (Client(params=...)) for query parameters every call sends"
        )
    return as_base(parsed)


def _proxy(proxy: object) -> ProxyConfig | None:
    """``proxy=`` parsed."""
    if proxy is None:
        return None
    if not isinstance(proxy, str):
        raise TypeError(f"proxy must be a URL such as 'http://host:3128', got {withheld(proxy)}")
    # Imported by a client with a proxy: _proxy (and SOCKS behind it) is start-up time
    # that most programs never need.
    from .._proxy import ProxyConfig

    try:
        return ProxyConfig.parse(proxy, strict=True)
    except InvalidRequest as exc:
        _refuse(exc, "proxy")


def _tls(
    options: ClientOptions, http2: bool, explicit_http2: bool
) -> tuple[VerifyTypes, ContextSource, bool]:
    """``verify=`` / ``cert=`` / ``ssl_context=`` -> ``(verify, the TLS context, whether the
    client built it)``; a caller's context is never changed."""
    verify = options.verify
    ssl_context = options.ssl_context
    if ssl_context is not None:
        if verify is not True:
            raise ValueError("pass either ssl_context= or verify=, not both")
        verify = ssl_context
    source, owns_context = context_source(verify, options.cert, http2=http2)
    if explicit_http2 and http2 and not owns_context:
        # HTTP/2 is never dropped silently: a context that cannot be shown to offer h2 is
        # refused (its ALPN list is read from the ClientHello it writes: ``alpn.py``).
        offered = offered_alpn(source.get())
        if offered is None:
            raise ValueError(_NO_H2.format("its ALPN list could not be read"))
        if "h2" not in offered:
            detail = f"it offers only {offered!r}" if offered else "it offers no ALPN protocol"
            raise ValueError(_NO_H2.format(detail))
    return verify, source, owns_context


# --- the fast paths' switches in the environment
#: ``TRIO_RETRY_HTTP1_FAST_PATH`` / ``TRIO_RETRY_HTTP2_FAST_PATH``: these turn that fast path
#: off, these leave it as ``Client(http1_fast_path=...)`` / ``Client(http2_fast_path=...)``
#: says; anything else is refused (docs/reference.md).
FAST_PATH_OFF = frozenset({"0", "false", "no", "off"})
FAST_PATH_AS_GIVEN = frozenset({"", "1", "true", "yes", "on"})


def _fast_path_env(version: int) -> bool:
    """False when ``TRIO_RETRY_HTTP{version}_FAST_PATH`` turns that fast path off (read once
    per ``Client``); a value not in either set raises ``ValueError`` naming the variable."""
    name = f"TRIO_RETRY_HTTP{version}_FAST_PATH"
    value = os.environ.get(name, "").strip().lower()
    if value in FAST_PATH_OFF:
        return False
    if value in FAST_PATH_AS_GIVEN:
        return True
    raise ValueError(
        f"{name} must be one of 0, false, no, off (fast path off) or 1, true, yes, on (as "
        f"Client(http{version}_fast_path=...) says), got {value!r}"
    )


def _client_params(params: object) -> tuple[tuple[str, Any], ...]:
    """``Client(params=...)`` as pairs (a mapping or a sequence of pairs)."""
    if not params:
        return ()
    if isinstance(params, Mapping):
        return tuple((str(key), value) for key, value in params.items())
    if isinstance(params, Sequence) and all(isinstance(p, tuple) and len(p) == 2 for p in params):
        return tuple((str(key), value) for key, value in params)
    raise TypeError(
        f"params must be a mapping or a sequence of (name, value) pairs, got {withheld(params)}"
    )


def _client_headers(headers: object) -> tuple[tuple[str, str], ...]:
    """``Client(headers=...)`` as checked pairs (``ValueError`` naming the option)."""
    try:
        return tuple(Headers(headers).multi_items())  # type: ignore[arg-type]
    except InvalidRequest as exc:  # at construction: a wrong argument, not a failed call
        raise ValueError(f"headers: {exc}") from None


def _cookie_jar(cookies: object) -> CookieJar | None:
    """The jar for ``cookies=``: the caller's own, a new one for a true value, else ``None``.

    ``http.cookiejar`` (with ``urllib.request`` and ``email`` behind it) is imported only by a
    client that keeps cookies: most never do, and it costs every program about 5 ms at
    start-up. ``is False`` first, because an empty jar is falsy (``CookieJar`` has a length).
    """
    if cookies is False or cookies is None:
        return None
    from http.cookiejar import CookieJar

    if isinstance(cookies, CookieJar):
        return cookies
    if cookies is not True:  # a mapping or "sid=..." (httpx's forms) would be dropped silently
        raise TypeError(
            "cookies= on the client is True (keep cookies in a new jar), False or an "
            f"http.cookiejar.CookieJar, got {withheld(cookies)}; for cookies of one call, "
            "pass cookies={name: value} to the call"
        )
    return CookieJar()
