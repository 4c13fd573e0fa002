"""One attempt: admission, a pooled connection, this attempt's headers, the exchange.

An :class:`AttemptRun` is one wire attempt of one call (the retry loop makes one per attempt;
each hedged copy makes its own). :meth:`AttemptRun.run` never raises except on outer
cancellation (or from the caller's own body iterators, hooks or auth object): however the
attempt ends, the run says how (a response, perhaps with its body, or a classified
``WireError`` in :attr:`~AttemptRun.error`) and its :class:`AttemptProgress` says which stage
was reached. The order inside an attempt:

1. admission (:func:`~.upstream.admit`): the breaker and throttle, then the upstream's
   bulkhead permit, or a rejection;
2. the headers of this attempt (:func:`attempt_headers`): the request event hooks (which
   may change them, :mod:`trio_retry._observe.hooks`), then ``Host``, ``auth``, cookies,
   proxy credentials, and last the trace context (``traceparent``) — the one place
   per-attempt headers are finalised;
3. a connection from the pool (opened by the :class:`~.connect.Connector` when needed);
4. the exchange on it (the response event hooks see its head), and (buffered calls, or any
   status >= 400) the body.

The call deadline (``request.deadline``) bounds the whole attempt through the one owner of
time (``_wire/clock.py``, :class:`~trio_retry._wire.clock.DeadlineBound`): on the client's
deadline lane when the attempt runs on a pooled connection taken at once (the connection then
ends the attempt's waits when it passes), in a cancel scope otherwise, which ``aclose()`` and
``drain()`` may also cancel. The common case needs neither: with no call deadline and nothing
to wait for but a pooled connection ready at once (no bulkhead wait, no auth callback, no
hook, a body in memory), every wait is on that connection, and ``aclose()`` closing it ends
those waits as promptly (a scope costs more than the rest of a small request's bookkeeping).

The connection and the permit are given back before :meth:`AttemptRun.run` returns, except
for a streamed response whose body the caller has yet to read (then :meth:`AttemptRun.
give_back` runs when the body ends or the ``stream()`` block exits).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable
from typing import TYPE_CHECKING

import trio

from .._auth import auth_headers
from .._core.attempt import Attempt, build_attempt
from .._core.backoff import parse_retry_after
from .._core.decision import Decision
from .._core.errors import RejectReason
from .._core.evidence import Evidence, FailureCategory, Stage
from .._core.idempotency import Idempotency
from .._errors import InvalidRequest
from .._models import Headers, check_header
from .._observe.hooks import HookRequest, HookResponse
from .._wire.clock import DeadlineBound, deadline_message
from .._wire.contract import PooledConnection
from .._wire.exchange import WireRequest, WireResponse
from .._wire.progress import AttemptProgress, WireError
from .body import decoder_for, whole_body
from .connect import Dial
from .failures import CLOSED_IN_FLIGHT
from .prepare import PreparedRequest
from .resumable import resumable
from .runtime import Runtime
from .upstream import Permit, UpstreamState, admit, release, try_admit

if TYPE_CHECKING:
    from .._core.breaker import BreakerVerdict
    from .._observe.otel import AttemptTrace
    from .._proxy import ProxyConfig

__all__ = ["AttemptRun", "attempt_headers", "fixed_headers"]

_FRAMING = ("transfer-encoding", "content-length")
_BUFFERED_HINT = "; raise the limit or use client.stream() to read it in chunks"
_RECEIVED = Evidence.RESPONSE_RECEIVED  # (a global: an enum attribute is slow on Python 3.11)
_INF = math.inf


class AttemptRun:
    """One wire attempt of one call: :meth:`run` once, then read how it ended (``response``,
    perhaps with its ``body``, or ``error``) and what it still holds (a connection, a permit)
    until :meth:`give_back`."""

    __slots__ = (
        "_rt",
        "_state",
        "_streaming",
        "_traced_run",
        "admission",
        "body",
        "conn",
        "error",
        "held",
        "number",
        "permit",
        "progress",
        "proxy",
        "range_start",
        "raw_length",
        "request",
        "response",
        "sent_headers",
    )

    def __init__(
        self,
        rt: Runtime,
        request: PreparedRequest,
        state: UpstreamState,
        progress: AttemptProgress,
        streaming: bool,
        number: int = 1,
        traced: bool = True,
    ) -> None:
        self._rt = rt
        self.request = request
        self._state = state
        self._streaming = streaming
        #: Whether the attempt may have a telemetry span of its own (with ``telemetry=``): not a
        #: hedged copy (copies run at once, and a call has one span slot: not traced yet).
        self._traced_run = traced
        #: The attempt's number, 1-based (for the event hooks and the span).
        self.number = number
        if rt.clock.head_yields and request.deadline != _INF:
            progress.deadline_bounds_head = True  # (the clock's rule: ``clock.py``)
        self.progress = progress
        self.response: WireResponse | None = None
        self.body: bytes | None = None
        #: The length of ``body`` as received, when it was decoded (else ``None``).
        self.raw_length: int | None = None
        self.error: BaseException | None = None
        self.conn: PooledConnection | None = None
        #: The connection is counted as held by a streamed response (``ConnectionPool.hold``).
        self.held = False
        self.permit: Permit | None = None
        #: The header block this attempt sent (``Response.request.headers``).
        self.sent_headers: list[tuple[bytes, bytes]] | None = None
        self.admission: BreakerVerdict | None = None  # the breaker's, handed back after
        #: The proxy the attempt goes through (``Connector.proxy_for``).
        self.proxy: ProxyConfig | None = None
        #: A continuation of a broken body: the byte it asks the rest from (``_call/resume.py``).
        self.range_start: int | None = None

    def run(self) -> Awaitable[None]:
        """The attempt (see the module docstring), to be awaited once. It never raises but
        outer cancellation and the caller's own code's errors; then everything it held has
        been given back (and, with ``telemetry=``, its span is marked interrupted). After it,
        it holds its connection and permit only for a streamed response below 400, until
        :meth:`give_back`.

        (A plain method returning the awaitable of the path it chose: the common case, no call
        deadline and a connection taken at once, awaits the exchange itself, with no frame of
        this method in between.)"""
        if self.request.trace is not None and self._traced_run:
            return self._traced()
        if self._ready():
            return self._exchange()
        return self._bounded()

    async def _traced(self) -> None:
        """:meth:`run` inside its telemetry span: the span starts here and ends when the
        attempt is recorded (the loop's ``_notify``), or here when the attempt is interrupted
        (by cancellation, then marked so, or by the caller's own code)."""
        span = self._open_span()
        try:
            if self._ready():
                await self._exchange()
            else:
                await self._bounded()
        except BaseException as exc:
            span.interrupt(
                stage=self.progress.stage,
                evidence_name=self.progress.evidence.name,
                duration=trio.current_time() - self.progress.started,
                cancelled=isinstance(exc, trio.Cancelled),
            )
            raise

    def _open_span(self) -> AttemptTrace:
        """The attempt's telemetry span, started now; it ends when the attempt is recorded
        (the loop's ``_notify``), or in :meth:`run` when the attempt is interrupted."""
        request = self.request
        trace = request.trace
        assert trace is not None
        url = request.url
        trace.current = trace.attempt(
            method=request.method,
            url=format(url),  # without the userinfo
            scheme=url.scheme,
            host=url.host,
            port=url.port,
            number=self.number,
            idempotency=request.idempotency,
            idempotency_key_present=request.idempotency_key is not None,
        )
        return trace.current

    def _ready(self) -> bool:
        """Whether the attempt goes without a bound of its own: no call deadline and a pooled
        connection (with a bulkhead permit) taken at once. Also takes the connection (and
        permit) for an attempt with a call deadline that may ride the deadline lane."""
        rt = self._rt
        request = self.request
        state = self._state
        config = rt.config
        origin = request.url.origin
        proxy = self.proxy = rt.connector.proxy_for(origin)
        unbounded = request.deadline == _INF
        if (
            (unbounded or rt.clock.running)
            and not state.guarded
            and config.auth is None
            and config.hooks is None  # a hook may wait: only a bounded attempt may wait
            and request.body.known_length is not None
        ):
            # A bulkhead permit free now is taken now; if none is, the attempt waits for one
            # in its scope (and with a permit but no ready connection, waits for that there).
            limiter = state.limiter
            if limiter is None:
                self.conn = rt.pool.take_idle(rt.connector.key_for(origin, proxy), self.progress)
            else:
                self.permit = try_admit(state)
                if self.permit is not None:
                    self.conn = rt.pool.take_idle(
                        rt.connector.key_for(origin, proxy), self.progress
                    )
        return unbounded and self.conn is not None

    async def _bounded(self) -> None:
        """The attempt within its call deadline (:class:`DeadlineBound`: the deadline lane on
        a connection already taken, else a cancel scope that ``aclose()`` and ``drain()`` may
        cancel too), and the deadline's expiry reported as this attempt's ``TIMEOUT``."""
        rt = self._rt
        progress = self.progress
        bound = DeadlineBound(rt.clock, self.request.deadline, progress, self.conn)
        scope = bound.scope
        if scope is not None:
            rt.scopes[scope] = progress
        try:
            with bound:
                await self._exchange()
        except BaseException:
            # Outer cancellation (or the caller's own error): no result to learn from; a
            # probe slot of the breaker is given back.
            self._state.guard.release(self.admission)
            raise
        finally:
            if scope is not None:
                del rt.scopes[scope]
        # On the lane, an expiry counts only if it ended the exchange (what arrived first
        # wins); a scope's expiry always ended it.
        timed_out = bound.expired and (scope is not None or self.error is not None)
        if scope is not None and rt.drained and progress in rt.drained:
            rt.drained.discard(progress)
            if timed_out:
                # drain() (aclose() too) ended it while it waited for a permit or a pooled
                # connection; nothing was sent (see Runtime.drain). Not retried.
                self.response = None
                self.error = _drained(self.request, progress, closed=rt.closed)
                return
        if not timed_out:
            return
        if rt.closed:
            self._closed_in_flight()  # ended by aclose()'s cancellation of the scope
        else:
            self.response = None
            request = self.request
            message = deadline_message(request.deadline - request.started, progress.stage)
            if progress.stage is Stage.POOL:  # waiting for a connection: say what holds them
                origin = request.url.origin
                message += ": " + rt.pool.why_full(rt.connector.key_for(origin, self.proxy))
            self.error = WireError.at(progress, FailureCategory.TIMEOUT, message)

    def _closed_in_flight(self) -> None:
        """The attempt was ended by ``aclose()``: it ends the call."""
        self.response = None
        self.error = WireError.at(
            self.progress, FailureCategory.CONNECTION_BROKEN, CLOSED_IN_FLIGHT, ends_call=True
        )

    async def _exchange(self) -> None:
        """Admission, headers, connection, exchange, body (the module docstring's order); a
        :class:`WireError` ends up in :attr:`error`. A streamed response keeps its connection
        and permit until its body is consumed; anything else (an interrupted attempt
        included) gives them back before this returns or raises."""
        rt = self._rt
        request = self.request
        state = self._state
        progress = self.progress
        streaming = self._streaming
        finished = False
        proxy = self.proxy
        try:
            url = request.url
            origin = url.origin
            if state.guarded:  # the breaker and the throttle, before the bulkhead
                self.admission = await state.guard.admit(
                    f"{request.method} {url}", request.deadline
                )
            if state.limiter is not None and self.permit is None:  # (taken already if free)
                self.permit = await admit(state, request.naming, origin)
                if rt.drained and progress in rt.drained:
                    raise _drained(request, progress)  # admitted just as drain() was called
            # Cleartext through an HTTP(S) proxy: absolute-form target, one pool of proxy
            # connections. SOCKS tunnels everything, so the request is then as without one.
            via_proxy = proxy if proxy is not None and proxy.forwards and not origin.tls else None
            memo = request.wire_memo
            wire_request = memo.request if memo is not None else None
            if wire_request is None or not fixed_headers(rt, request, via_proxy):
                headers = await attempt_headers(rt, request, progress, via_proxy, self.number)
                body, length = request.body.opened_in_memory() or await request.body.open()
                target = url.without_userinfo() if via_proxy else url.target
                wire_request = WireRequest(request.method, target, headers, body, length)
                if (
                    memo is not None
                    and isinstance(body, bytes)
                    and fixed_headers(rt, request, via_proxy)
                ):
                    memo.request = wire_request  # the template's calls send this one from now on
            self.sent_headers = wire_request.headers

            conn = self.conn  # taken already by an attempt that found one ready
            if conn is None:
                connector = rt.connector
                key = connector.key_for(origin, proxy)
                conn = await rt.pool.acquire(
                    key,
                    progress,
                    Dial(connector, url, proxy, key),
                    expect_multiplexed=connector.expect_multiplexed(origin, via_proxy, key),
                )
                self.conn = conn
                if rt.drained and progress in rt.drained:
                    # drain() cancelled the wait just as a connection was granted: stop before
                    # the first byte (the next await would be a write, and its cancellation
                    # ambiguous).
                    raise _drained(request, progress)
            config = rt.config
            if config.early_data and not progress.late_only:
                progress.early_ok = _early_safe(request, state)
            response = await conn.send_request(wire_request, progress)
            self.response = response
            routes = rt.connector.quic_routes
            if routes is not None:
                routes.learn(origin, response.headers)
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
                        attempt=self.number,
                    ),
                    progress,
                )
            jar = rt.cookies
            if jar is not None:
                # Imported here, only by a client with a jar: http.cookiejar (with urllib and
                # email behind it) costs every program ~5 ms at start-up otherwise. Once loaded,
                # this is a sys.modules look-up, small beside the jar's own work per response.
                from .._cookies import store_cookies

                store_cookies(
                    jar,
                    url.without_userinfo(),
                    request.method,
                    request.headers,
                    Headers.from_wire(response.headers),
                )
            if (streaming and response.status < 400) or (
                response.status == 200 and resumable(request, state, 200, response.headers)
            ):
                # The caller reads the body: the connection stays lent until the block ends
                # (a PoolTimeout meanwhile says so, ConnectionPool.hold). A buffered body that
                # can be continued is read by the loop too (``_call/resume.py``).
                rt.pool.hold(conn)
                self.held = True
                finished = True
                return
            limit = config.max_body_bytes
            decoder = decoder_for(request.method, response.headers, limit)  # (before the read)
            source = response.source
            chunks = await source.receive_all(progress, limit)
            self.body = whole_body(chunks, source, progress, limit, decoder, _BUFFERED_HINT)
            if decoder is not None:  # (Response.num_bytes_downloaded: the body as it came)
                self.raw_length = sum(map(len, chunks))
            finished = True
        except WireError as exc:
            self.error = exc
            if rt.closed:
                # A failure while the client closed is aclose()'s doing (it closed the
                # connection the attempt held, or cancelled its scope): not retried.
                self._closed_in_flight()
        finally:
            if not (finished and self.held):
                self.give_back()

    def end(self) -> None:
        """Give back what a streamed response still holds (idempotent): a body not read to its
        end is abandoned (its HTTP/1.1 connection closed, its HTTP/2 or HTTP/3 stream reset),
        then :meth:`give_back`. For the ``stream()`` block's exit, a redirect followed, and a
        hedged copy whose response lost the race."""
        response = self.response
        if self.body is None and self.conn is not None and response is not None:
            response.source.abandon()
        self.give_back()

    def give_back(self) -> None:
        """Return the connection (reusable only after a complete exchange) and the permit."""
        conn, self.conn = self.conn, None
        if conn is not None:
            if self.held:
                self.held = False
                self._rt.pool.unhold(conn)
            if self.error is None and self.body is not None:
                self._rt.pool.release(conn)
            else:
                self._rt.pool.discard(conn)
        permit, self.permit = self.permit, None
        if permit is not None:
            release(self._state, permit)

    @property
    def answered(self) -> bool:
        """A response head arrived and nothing failed after it."""
        return self.response is not None and self.error is None

    def observe(self) -> tuple[Evidence, FailureCategory | None, float | None]:
        """The evidence, failure category and Retry-After (seconds) of the finished attempt;
        a Retry-After given as an HTTP-date is dated by the client's wall clock."""
        error = self.error
        wire = self.response
        if wire is not None and error is None:
            retry_after = None
            if wire.status >= 400:  # below 400 the engine is not consulted
                wall_clock = self._rt.config.wall_clock
                for name, value in wire.headers:
                    if name.lower() == b"retry-after":
                        retry_after = parse_retry_after(value, wall_clock())
            return _RECEIVED, None, retry_after
        assert isinstance(error, WireError)
        return error.evidence, error.category, None

    def record(
        self,
        number: int,
        evidence: Evidence,
        category: FailureCategory | None,
        ended: float,
        decision: Decision | None = None,
    ) -> Attempt:
        """The :class:`Attempt` record of the finished attempt (built once, with its
        decision); ``number`` is its place in the call's trail."""
        progress = self.progress
        timings = progress.timings  # the progress ends with its attempt: no copy needed
        timings["total"] = ended - progress.started
        wire = self.response
        return build_attempt(  # Attempt(...), built faster
            number=number,
            stage=progress.stage,
            evidence=evidence,
            error=self.error,
            # Kept when the head arrived, even if the body then broke (the engine's status
            # rules still see None: a broken exchange is judged by the transport rules).
            status=wire.status if wire is not None else None,
            http_version=progress.http_version,
            early_data=progress.early_data,
            connection_reused=progress.connection_reused,
            bytes_sent=progress.bytes_sent,
            bytes_received=progress.bytes_received,
            category=category,
            timings=timings,
            decision=decision,
            range_start=self.range_start,
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

    A raising hook raises a ``WireError`` (``NOT_SENT`` at ``ADMISSION``; it ends the call):
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
                progress, FailureCategory.INVALID_REQUEST, f"auth: {exc}", ends_call=True
            ) from exc
        for name, value in signed.multi_items():
            if name.lower() in _FRAMING:
                # The client frames the body; framing from auth would make TE + CL possible.
                raise WireError.at(
                    progress,
                    FailureCategory.INVALID_REQUEST,
                    f"auth returned {name}; the client frames the body itself",
                    ends_call=True,
                )
            if name not in prepared:
                headers.append((name.encode("latin-1"), value.encode("latin-1")))
    jar = rt.cookies
    if (jar is not None or request.cookies) and "cookie" not in prepared:
        from .._cookies import cookie_header  # see store_cookies' import in AttemptRun

        cookie = (
            cookie_header(jar, url.without_userinfo(), request.method, prepared) if jar else None
        )
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


def _drained(
    request: PreparedRequest, progress: AttemptProgress, closed: bool = False
) -> WireError:
    return WireError(
        f"{request.method} {request.url} not admitted: the client is "
        f"{'closed' if closed else 'draining'} (the attempt was still waiting at "
        f"{progress.stage})",
        stage=progress.stage,
        evidence=Evidence.NOT_SENT,
        category=FailureCategory.ADMISSION,
        ends_call=True,
        reason=RejectReason.CLOSED if closed else RejectReason.DRAINING,
    )


def _early_safe(request: PreparedRequest, state: UpstreamState) -> bool:
    """Whether ``request`` may go in HTTP/3 early data (SPEC §16): its replay by an attacker
    on the path must be harmless. ``SAFE`` operations; ``IDEMPOTENT`` ones carrying an
    ``Idempotency-Key`` when their upstream opted in (``Upstream(early_data=True)``); never a
    ``NON_IDEMPOTENT`` one, whatever else is set. Asked only when ``Client(early_data=True)``."""
    idempotency = request.idempotency
    if idempotency is Idempotency.SAFE:
        return True
    return (
        idempotency is Idempotency.IDEMPOTENT
        and request.idempotency_key is not None
        and state.upstream.early_data
    )
