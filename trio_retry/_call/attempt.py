"""One attempt: admission, a pooled connection, this attempt's headers, the exchange.

:func:`run_attempt` never raises except on outer cancellation (or from the caller's own body
iterators or auth object): however the attempt ends, the result is an :class:`Outcome` (a
response, perhaps with its body, or a classified ``WireError``) and the wire's
:class:`AttemptProgress` says which stage was reached. The order inside an attempt:

1. admission (:func:`~.upstream.admit`): the upstream's bulkhead permit, or a rejection;
2. the headers of this attempt (:func:`attempt_headers`): the request event hooks (which
   may change them, :mod:`trio_retry._observe.hooks`), then ``Host``, ``auth``, cookies,
   proxy credentials, and last the trace context (``traceparent``) — the one place
   per-attempt headers are finalised;
3. a connection from the pool (opened by the :class:`~.connect.Connector` when needed);
4. the exchange on it (the response event hooks see its head), and (buffered calls, or any
   status >= 400) the body.

The connection and the permit are given back before :func:`run_attempt` returns, except for a
streamed response whose body the caller has yet to read (then :func:`give_back` runs when the
body ends or the ``stream()`` block exits).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import trio

from .._auth import auth_headers
from .._cookies import cookie_header, store_cookies
from .._core.attempt import Attempt, build_attempt
from .._core.backoff import parse_retry_after
from .._core.breaker import BreakerVerdict
from .._core.decision import Decision
from .._core.evidence import Evidence, FailureCategory
from .._errors import InvalidRequest
from .._models import Headers, check_header
from .._observe.hooks import HookRequest, HookResponse
from .._proxy import ProxyConfig
from .._wire.exchange import WireRequest, WireResponse
from .._wire.pool import PooledConnection
from .._wire.progress import AttemptProgress, WireError
from .body import decoder_for, whole_body
from .connect import pool_key
from .failures import CLOSED_IN_FLIGHT
from .prepare import PreparedRequest
from .runtime import Runtime
from .upstream import Permit, UpstreamState, admit, release, try_admit

__all__ = [
    "Outcome",
    "attempt_headers",
    "exchange",
    "fixed_headers",
    "give_back",
    "guarded_attempt",
    "observe",
    "ready",
    "record",
    "run_attempt",
    "settle",
]

_FRAMING = ("transfer-encoding", "content-length")
_BUFFERED_HINT = "; raise the limit or use client.stream() to read it in chunks"


class Outcome:
    """How one attempt ended: a response (maybe with its body), or a classified failure; and
    what it still holds (a connection, a permit) until :func:`give_back`."""

    __slots__ = (
        "admission",
        "body",
        "conn",
        "error",
        "expired",
        "permit",
        "progress",
        "proxy",
        "response",
        "sent_headers",
    )

    def __init__(self) -> None:
        self.response: WireResponse | None = None
        self.body: bytes | None = None
        self.error: BaseException | None = None
        self.conn: PooledConnection | None = None
        self.permit: Permit | None = None
        #: The header block this attempt sent (``Response.request.headers``).
        self.sent_headers: list[tuple[bytes, bytes]] | None = None
        self.admission: BreakerVerdict | None = None  # the breaker's, handed back after
        #: The call deadline passed while the attempt held its connection (without a scope).
        self.expired = False
        #: The attempt's progress, while its call deadline is on the deadline lane.
        self.progress: AttemptProgress | None = None
        #: The proxy the attempt goes through (``Connector.proxy_for``), from :func:`ready`.
        self.proxy: ProxyConfig | None = None

    def stage_expired(self, which: str, limit: float) -> None:
        """The call deadline passed (the client's deadline lane, ``_wire/timers.py``): the
        connection ends this attempt's waits at once (``attempt_expired``: HTTP/1.1 closes
        itself, HTTP/2 fails the attempt's stream only)."""
        conn = self.conn
        if conn is not None and self.progress is not None:
            self.expired = True
            conn.attempt_expired(self.progress)


async def run_attempt(
    rt: Runtime,
    request: PreparedRequest,
    state: UpstreamState,
    progress: AttemptProgress,
    streaming: bool,
    deadline: float,
    number: int = 1,
) -> Outcome:
    """One wire attempt inside the call deadline (absolute Trio time, ``inf`` for none);
    ``number`` is the attempt's, 1-based (for the event hooks).

    The attempt runs in a cancel scope carrying the call deadline, which ``aclose()`` also
    cancels. The common case needs none: with nothing to wait for but a pooled connection
    ready at once (no bulkhead, no auth callback, a body in memory), every wait is on that
    connection (a socket read or write; on HTTP/2 also its stream events), and ``aclose()``
    closing it fails those waits as promptly (a scope costs more than the rest of a small
    request's bookkeeping). A call deadline then rides on the client's deadline lane, which
    ends the attempt's waits when it passes (see ``_wire/timers.py``): an HTTP/1.1 connection
    is closed; on a shared HTTP/2 connection only the attempt's stream fails (or, before it
    has one, its wait for a slot ends). The attempt ends as it would in a scope, and is
    reported the same way.

    The common case with no call deadline runs :func:`exchange` from this frame (the retry
    loop runs it from its own); the others run it inside :func:`guarded_attempt`.
    """
    outcome = ready(rt, request, state, progress, deadline)
    if outcome.conn is not None and deadline == math.inf:
        await exchange(rt, request, state, progress, streaming, outcome, number)
        settle(rt, progress, outcome)
        return outcome
    return await guarded_attempt(rt, request, state, progress, streaming, deadline, number, outcome)


def ready(
    rt: Runtime,
    request: PreparedRequest,
    state: UpstreamState,
    progress: AttemptProgress,
    deadline: float,
) -> Outcome:
    """An attempt's :class:`Outcome`, holding a pooled connection (and a bulkhead permit)
    taken at once when the attempt can go without a scope (see :func:`run_attempt`). With a
    connection and no call deadline, :func:`exchange` then :func:`settle` run it (the retry
    loop does so in its own frame); anything else goes to :func:`guarded_attempt`."""
    outcome = Outcome()
    origin = request.url.origin
    proxy = outcome.proxy = rt.connector.proxy_for(origin)
    if (
        (deadline == math.inf or rt.timers.running)
        and not state.guarded
        and rt.config.auth is None
        and request.body.known_length is not None
        and rt.config.hooks is None  # a hook may wait: only a scoped attempt may wait
    ):
        # A bulkhead permit free now is taken now; if none is, the attempt waits for one
        # in its scope (and with a permit but no ready connection, waits for that there).
        if state.limiter is not None:
            outcome.permit = try_admit(state)
        if state.limiter is None or outcome.permit is not None:
            outcome.conn = rt.pool.take_idle(pool_key(origin, proxy), progress)
    return outcome


def settle(rt: Runtime, progress: AttemptProgress, outcome: Outcome) -> None:
    """After an unguarded :func:`exchange`: a failure while the client closed is
    ``aclose()``'s doing (it closed the connection the attempt held), not retried."""
    if outcome.error is not None and rt.closed:
        _closed_in_flight(outcome, progress)


async def guarded_attempt(
    rt: Runtime,
    request: PreparedRequest,
    state: UpstreamState,
    progress: AttemptProgress,
    streaming: bool,
    deadline: float,
    number: int,
    outcome: Outcome,
) -> Outcome:
    """:func:`run_attempt` when the attempt needs a guard: the call deadline on the client's
    deadline lane (a pooled connection already taken), else a cancel scope."""
    conn = outcome.conn
    timers = rt.timers
    unscoped = timed = False
    if conn is not None:
        # Scoped after all (on the connection already taken) when the deadline would put the
        # lane out of order.
        outcome.progress = progress
        timed = timers.deadline.arm_at(outcome, deadline)
        unscoped = timed
    timed_out = drained = False
    if timed:
        try:
            await exchange(rt, request, state, progress, streaming, outcome, number)
        finally:
            timers.deadline.disarm(outcome)
        if outcome.expired and outcome.error is not None:
            timed_out = True  # reported below exactly as the scope's expiry would be
    else:
        scope = trio.CancelScope(deadline=deadline)
        rt.scopes[scope] = progress
        try:
            with scope:
                await exchange(rt, request, state, progress, streaming, outcome, number)
        except BaseException:
            # Outer cancellation (or the caller's own error): no result to learn from; a
            # probe slot of the breaker is given back.
            state.guard.release(outcome.admission)
            raise
        finally:
            del rt.scopes[scope]
        timed_out = scope.cancelled_caught
        if rt.drained and progress in rt.drained:
            rt.drained.discard(progress)
            drained = timed_out and not rt.closed
            if drained:
                # drain() ended it while it waited for a permit or a pooled connection;
                # nothing was sent (see Runtime.drain). Not retried.
                outcome.response = None
                outcome.error = _drained(request, progress)
    if drained:
        pass
    elif (timed_out or (unscoped and outcome.error is not None)) and rt.closed:
        # Ended by aclose(): its cancellation, or (no scope to cancel) the connection it
        # closed. Not retried.
        _closed_in_flight(outcome, progress)
    elif timed_out:
        outcome.response = None
        outcome.error = WireError.at(
            progress,
            FailureCategory.TIMEOUT,
            f"the call deadline expired during {progress.stage}",
        )
    return outcome


def _closed_in_flight(outcome: Outcome, progress: AttemptProgress) -> None:
    """The attempt was ended by ``aclose()``: not retried."""
    outcome.response = None
    outcome.error = WireError.at(
        progress, FailureCategory.CONNECTION_BROKEN, CLOSED_IN_FLIGHT, retryable=False
    )


def fixed_headers(rt: Runtime, request: PreparedRequest, via_proxy: ProxyConfig | None) -> bool:
    """Whether :func:`attempt_headers` would add nothing to the prepared headers but ``Host``:
    no request event hook, no credentials to apply, no cookies (no jar, none of the call's), no
    proxy in the request line, no trace context. The headers of such an attempt are the same
    for every call from one template (``prepare.WireMemo``)."""
    hooks = rt.config.hooks
    trace = request.trace
    return (
        via_proxy is None
        and (hooks is None or not hooks.request)
        and (request.auth is None or not request.apply_auth)
        and rt.cookies is None
        and not request.cookies
        and (trace is None or trace.current is None)
    )


async def attempt_headers(
    rt: Runtime,
    request: PreparedRequest,
    progress: AttemptProgress,
    via_proxy: ProxyConfig | None,
    number: int = 1,
) -> list[tuple[bytes, bytes]]:
    """The header block of this attempt, encoded: the prepared headers as the request event
    hooks left them, plus ``Host``, the ``auth`` headers (a header the caller set wins), the
    cookie jar's ``Cookie``, the proxy's credentials and the trace context. Anything that adds
    a header per attempt adds it here, and says so in :func:`fixed_headers`.

    A raising hook raises a ``WireError`` (``NOT_SENT`` at ``ADMISSION``, not retryable):
    nothing has been sent, no connection taken."""
    url = request.url
    prepared = request.headers
    hooks = rt.config.hooks
    if hooks is not None and hooks.request:
        view = HookRequest(
            method=request.method,
            url=url,
            headers=prepared.copy(),  # the hooks' changes are this attempt's only
            attempt=number,
            idempotency=request.idempotency,
        )
        prepared = await hooks.before_attempt(view, progress)
    headers = prepared.raw()  # a fresh list, encoded once per Headers
    if "host" not in prepared:
        headers.insert(0, (b"host", url.host_header.encode()))
    auth = request.auth
    if auth is not None and request.apply_auth:
        try:
            signed = Headers(await auth_headers(auth, request))
        except InvalidRequest as exc:
            raise WireError.at(
                progress, FailureCategory.INVALID_REQUEST, f"auth: {exc}", retryable=False
            ) from exc
        for name, value in signed.multi_items():
            if name.lower() in _FRAMING:
                # The client frames the body; framing from auth would make TE + CL possible.
                raise WireError.at(
                    progress,
                    FailureCategory.INVALID_REQUEST,
                    f"auth returned {name}; the client frames the body itself",
                    retryable=False,
                )
            if name not in prepared:
                headers.append((name.encode("latin-1"), value.encode("latin-1")))
    jar = rt.cookies
    if (jar is not None or request.cookies) and "cookie" not in prepared:
        cookie = cookie_header(jar, str(url), request.method, prepared) if jar else None
        if request.cookies:  # the call's cookies= win over the jar's of the same name
            given = {name for name, _ in request.cookies}
            kept = [
                part
                for part in (cookie.split("; ") if cookie else [])
                if part.split("=", 1)[0] not in given
            ]
            cookie = "; ".join(kept + [f"{n}={v}" for n, v in request.cookies])
        if cookie:
            try:  # the jar's values came from servers: held to the same rules as ours
                cookie = check_header("Cookie", cookie)
            except InvalidRequest as exc:
                raise WireError.at(
                    progress, FailureCategory.LOCAL_PROTOCOL, f"the cookie jar's {exc}"
                ) from exc
            headers.append((b"cookie", cookie.encode("latin-1")))
    if via_proxy is not None and via_proxy.authorization is not None:
        headers.append((b"proxy-authorization", via_proxy.authorization.encode("latin-1")))
    trace = request.trace
    if trace is not None and trace.current is not None:
        trace.current.inject(headers)  # the configured propagator: traceparent, ...
    return headers


async def exchange(
    rt: Runtime,
    request: PreparedRequest,
    state: UpstreamState,
    progress: AttemptProgress,
    streaming: bool,
    outcome: Outcome,
    number: int,
) -> None:
    """Run the attempt (its :class:`Outcome` from :func:`ready`); a :class:`WireError` ends up
    in ``outcome.error``. A streamed response keeps its connection and permit until its body
    is consumed; anything else (an interrupted attempt included) gives them back before this
    returns or raises."""
    finished = False
    proxy = outcome.proxy
    try:
        url = request.url
        origin = url.origin
        if state.guarded:  # the breaker and the throttle, before the bulkhead
            outcome.admission = await state.guard.admit(f"{request.method} {url}", request.deadline)
        if state.limiter is not None and outcome.permit is None:  # (taken already if free)
            outcome.permit = await admit(state, lambda: f"{request.method} {url}", origin)
            if rt.drained and progress in rt.drained:
                raise _drained(request, progress)  # admitted just as drain() was called
        # Cleartext through a proxy: absolute-form target, one pool of proxy connections.
        # Cleartext through an HTTP(S) proxy: absolute form. SOCKS tunnels everything, so the
        # request is then as without a proxy.
        via_proxy = proxy if proxy is not None and proxy.forwards and not origin.tls else None
        memo = request.wire_memo
        wire_request = memo.request if memo is not None else None
        if wire_request is None or not fixed_headers(rt, request, via_proxy):
            headers = await attempt_headers(rt, request, progress, via_proxy, number)
            body, length = request.body.opened_in_memory() or await request.body.open()
            target = str(url) if via_proxy else url.target
            wire_request = WireRequest(request.method, target, headers, body, length)
            if (
                memo is not None
                and isinstance(body, bytes)
                and fixed_headers(rt, request, via_proxy)
            ):
                memo.request = wire_request  # the template's calls send this one from now on
        outcome.sent_headers = wire_request.headers

        conn = outcome.conn  # taken already by an unscoped attempt
        if conn is None:
            key = pool_key(origin, proxy)
            connector = rt.connector
            conn = await rt.pool.acquire(
                key,
                progress,
                partial(connector.open, url=url, proxy=proxy, pool_key=key),
                expect_multiplexed=connector.expect_multiplexed(origin, via_proxy),
            )
            outcome.conn = conn
            if rt.drained and progress in rt.drained:
                # drain() cancelled the wait just as a connection was granted: stop before the
                # first byte (the next await would be a write, and its cancellation ambiguous).
                raise _drained(request, progress)
        config = rt.config
        timeouts = config.stage_timeouts
        response = await conn.send_request(
            wire_request,
            progress,
            write_timeout=timeouts.write,
            first_byte_timeout=timeouts.first_byte,
        )
        outcome.response = response
        hooks = config.hooks
        if hooks is not None and hooks.response:
            await hooks.after_head(
                HookResponse(
                    status=response.status,
                    reason=response.reason,
                    headers=Headers.from_wire(response.headers),
                    http_version=response.http_version,
                    url=url,
                    request_method=request.method,
                    attempt=number,
                ),
                progress,
            )
        jar = rt.cookies
        if jar is not None:
            store_cookies(
                jar, str(url), request.method, request.headers, Headers.from_wire(response.headers)
            )
        if streaming and response.status < 400:
            finished = True
            return
        limit = config.max_body_bytes
        decoder = decoder_for(request.method, response.headers, limit)  # (before the read)
        source = response.source
        chunks = await source.receive_all(progress, timeouts.read, limit)
        outcome.body = whole_body(chunks, source, progress, limit, decoder, _BUFFERED_HINT)
        finished = True
    except WireError as exc:
        outcome.error = exc
    finally:
        if not (finished and streaming and outcome.body is None):
            give_back(rt, state, outcome)


def _drained(request: PreparedRequest, progress: AttemptProgress) -> WireError:
    return WireError(
        f"{request.method} {request.url} not admitted: the client is draining (the attempt "
        f"was still waiting at {progress.stage})",
        stage=progress.stage,
        evidence=Evidence.NOT_SENT,
        category=FailureCategory.ADMISSION,
        retryable=False,
    )


def give_back(rt: Runtime, state: UpstreamState, outcome: Outcome) -> None:
    """Return the connection (reusable only after a complete exchange) and the permit."""
    conn, outcome.conn = outcome.conn, None
    if conn is not None:
        if outcome.error is None and outcome.body is not None:
            rt.pool.release(conn)
        else:
            rt.pool.discard(conn)
    permit, outcome.permit = outcome.permit, None
    if permit is not None:
        release(state, permit)


def observe(
    outcome: Outcome, wall_clock: Callable[[], float]
) -> tuple[Evidence, FailureCategory | None, float | None]:
    """The evidence, failure category and Retry-After (seconds) of a finished attempt;
    ``wall_clock`` (Unix seconds) dates a Retry-After given as an HTTP-date."""
    error = outcome.error
    wire = outcome.response
    if wire is not None and error is None:
        retry_after = None
        if wire.status >= 400:  # below 400 the engine is not consulted
            for name, value in wire.headers:
                if name.lower() == b"retry-after":
                    retry_after = parse_retry_after(value, wall_clock())
        return Evidence.RESPONSE_RECEIVED, None, retry_after
    assert isinstance(error, WireError)
    return error.evidence, error.category, None


def record(
    number: int,
    progress: AttemptProgress,
    outcome: Outcome,
    evidence: Evidence,
    category: FailureCategory | None,
    ended: float,
    decision: Decision | None = None,
) -> Attempt:
    """The :class:`Attempt` record of a finished attempt (built once, with its decision)."""
    timings = progress.timings  # the progress ends with its attempt: no copy needed
    timings["total"] = ended - progress.started
    wire = outcome.response
    return build_attempt(  # Attempt(...), built faster
        number=number,
        stage=progress.stage,
        evidence=evidence,
        error=outcome.error,
        # Kept when the head arrived, even if the body then broke (the engine's status
        # rules still see None: a broken exchange is judged by the transport rules).
        status=wire.status if wire is not None else None,
        http_version=progress.http_version,
        connection_reused=progress.connection_reused,
        bytes_sent=progress.bytes_sent,
        bytes_received=progress.bytes_received,
        category=category,
        timings=timings,
        decision=decision,
    )
