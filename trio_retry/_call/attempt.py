"""One attempt: admission, a pooled connection, this attempt's headers, the exchange.

An :class:`AttemptRun` is one wire attempt of one call (the retry loop makes one per attempt;
each hedged copy makes its own). :meth:`AttemptRun.run` never raises except on outer
cancellation (or from the caller's own body iterators, hooks or auth object): however the
attempt ends, it returns how, as a value (:class:`~.result.AttemptResult`: a response, perhaps
with its body, or a classified ``WireError``, and the :class:`AttemptProgress` of the stage
reached) that its caller reads and never writes into. The order inside an attempt:

1. admission (:func:`~.upstream.admit`): the breaker and throttle, then the upstream's
   bulkhead permit, or a rejection;
2. the headers of this attempt (:func:`~.headers.attempt_headers`): the request event hooks
   (which may change them, :mod:`trio_retry._observe.hooks`), then ``Host``, ``auth``,
   cookies, proxy credentials, and last the trace context (``traceparent``);
3. a connection from the pool (opened by the :class:`~.connect.Connector` when needed);
4. the exchange on it (the response event hooks see its head), and (buffered calls, or any
   status >= 400) the body.

The call deadline (``request.deadline``) bounds the whole attempt through the one owner of
time (``_wire/clock.py``, :class:`~trio_retry._wire.clock.DeadlineBound`): on the client's
deadline lane when the attempt runs on a pooled connection taken at once (the connection then
ends the attempt's waits when it passes), in a cancel scope otherwise, which ``aclose()`` and
``drain()`` may also cancel. The common case needs neither: with no call deadline and no wait
to be admitted (no bulkhead wait, no auth callback, no hook, a body in memory), a wait for a
connection is in the pool, which ``drain()`` and ``aclose()`` end there; a connection the
attempt opens itself is opened in a scope ``aclose()`` cancels, for as long as it opens; and
every later wait is on that connection, which ``aclose()`` closing ends as promptly (a scope
costs more than the rest of a small request's bookkeeping, and at 10,000 calls at once it is
a quarter of what a call queued in the pool holds: issue #41).

The connection and the permit are given back before :meth:`AttemptRun.run` returns, except
for a streamed response whose body the caller has yet to read: its result's ``held`` is the
runner, whose :meth:`AttemptRun.end` gives them back when the body ends or the ``stream()``
block exits. The runner's state is its own (private slots): nothing outside this module can
write into it.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Coroutine
from typing import TYPE_CHECKING, Any

import trio

from .._core.errors import RejectReason
from .._core.evidence import Evidence, FailureCategory, Stage
from .._core.idempotency import Idempotency
from .._models import Headers
from .._observe.hooks import HookResponse
from .._wire.clock import DeadlineBound, deadline_message
from .._wire.contract import PooledConnection
from .._wire.exchange import WireRequest, WireResponse
from .._wire.pool_ledger import Waiter
from .._wire.progress import AttemptProgress, WireError
from .body import decoder_for, whole_body
from .connect import PoolKey
from .failures import CLOSED_IN_FLIGHT
from .headers import attempt_headers, fixed_headers
from .prepare import PreparedRequest
from .result import AttemptResult, new_result
from .resumable import resumable
from .runtime import Runtime
from .upstream import Permit, UpstreamState, admit, release, try_admit

if TYPE_CHECKING:
    from .._core.breaker import BreakerVerdict
    from .._observe.otel import AttemptTrace
    from .._proxy import ProxyConfig
    from .._url import Origin

__all__ = ["AttemptRun"]

_BUFFERED_HINT = "; raise the limit or use client.stream() to read it in chunks"
_INF = math.inf
_ADM = FailureCategory.ADMISSION  # (a global: an enum attribute is slow on Python 3.11)


class AttemptRun(Waiter):
    """One wire attempt of one call: :meth:`run` once, which returns how it ended (an
    :class:`~.result.AttemptResult`); :meth:`end` gives back what a streamed response still
    holds (a connection, a permit). Queued in the pool, it is its own waiter (the
    ``pool_ledger.Waiter`` fields are the pool's, set when it arrives there) and its own
    opener (:meth:`open`)."""

    __slots__ = (
        "_admission",
        "_conn",
        "_held",
        "_joined",
        "_key",
        "_number",
        "_permit",
        "_progress",
        "_proxy",
        "_range_start",
        "_request",
        "_response",
        "_rt",
        "_state",
        "_streaming",
        "_traced_run",
        "_unscoped",
    )

    # Set before their first reading, not by __init__ (a store fewer each, every attempt):
    #: The proxy the attempt goes through (``Connector.proxy_for``): set by :meth:`_ready`,
    #: which every run asks first.
    _proxy: ProxyConfig | None
    #: The pool it draws from (``Connector.key_for``): set as it asks the pool, whose opener
    #: (:meth:`open`) reads it.
    _key: PoolKey

    def __init__(
        self,
        rt: Runtime,
        request: PreparedRequest,
        state: UpstreamState,
        progress: AttemptProgress,
        streaming: bool,
        number: int,
        traced: bool = True,
        range_start: int | None = None,
    ) -> None:
        self._rt = rt
        self._request = request
        self._state = state
        self._streaming = streaming
        #: Whether the attempt may have a telemetry span of its own (with ``telemetry=``): not a
        #: hedged copy (copies run at once, and a call has one span slot: not traced yet).
        self._traced_run = traced
        #: The attempt's number, 1-based, given as it starts (its hooks, its span, its record).
        self._number = number
        # (the deadline asked first: the common call has none, and then nothing more is asked)
        if request.deadline != _INF and rt.timekeeper.head_yields:
            progress.deadline_bounds_head = True  # (``clock.py``'s rule)
        self._progress = progress
        #: The response whose body the caller reads (a streamed one, held: :meth:`end`).
        self._response: WireResponse | None = None
        self._conn: PooledConnection | None = None
        #: The connection is counted as held by a streamed response (``ConnectionPool.hold``).
        self._held = False
        self._permit: Permit | None = None
        self._admission: BreakerVerdict | None = None  # the breaker's, handed back after
        #: A continuation of a broken body: the byte it asks the rest from (``_call/resume.py``).
        self._range_start = range_start
        #: The attempt runs in no cancel scope of its own (:meth:`_ready`).
        self._unscoped = False
        self._joined = False  # it joined the pool's queue in start()

    def run(self) -> Awaitable[AttemptResult]:
        """The attempt (see the module docstring), to be awaited once; its value says how it
        ended. It never raises but outer cancellation and the caller's own code's errors;
        then everything it held has been given back (and, with ``telemetry=``, its span is
        marked interrupted). After it, it holds its connection and permit only for a streamed
        response below 400 (the result's ``held``), until :meth:`end`.

        (A plain method returning the awaitable of the path it chose: the common case, no call
        deadline and a connection taken at once, awaits the exchange itself, with no frame of
        this method in between.)"""
        if self._request.trace is not None and self._traced_run:
            return self._traced()
        if self._ready():
            return self._exchange()
        return self._bounded()

    def start(self) -> Awaitable[AttemptResult] | None:
        """:meth:`run`, for the retry loop's attempts; or ``None`` when no connection was ready
        and the attempt joined the pool's queue (``ConnectionPool.queue``): its caller parks it
        (``await run``), then awaits :meth:`served`, which goes on from there. So a queued call
        holds neither the exchange's coroutine nor the pool's (issue #41). Cancelled while
        parked, the caller calls :meth:`leave_queue`."""
        if self._request.trace is not None and self._traced_run:
            return self._traced()
        if not self._ready():
            return self._bounded()
        rt = self._rt
        if self._conn is not None or rt.draining:
            return self._exchange()  # (a connection taken at once, or a drain begun)
        origin = self._request.url.origin
        via_proxy = _forwarding(self._proxy, origin)
        expect = rt.connector.expect_multiplexed(origin, via_proxy, self._key)
        joined = rt.pool.queue(self._key, self._progress, self, expect_multiplexed=expect)
        self._joined = joined is not None
        return None if joined else self._exchange()

    def served(self) -> Awaitable[AttemptResult]:
        """The attempt after its park in the pool's queue (:meth:`start`), to be awaited once."""
        return self._exchange()

    def leave_queue(self) -> None:
        """The park after :meth:`start` was cancelled: the attempt leaves the queue and holds
        nothing any more (what the pool granted meanwhile, the permit). It is not run."""
        self._joined = False
        self._rt.pool.leave(self)
        self._give_back(False)

    def _failed(self, error: WireError) -> AttemptResult:
        """The result of an attempt that failed with ``error`` and holds nothing (its exchange
        gave everything back; an exchange's own results are built at its end)."""
        return new_result(
            (self._number, self._progress, None, None, None, error, None, self._admission, None,
             self._range_start)
        )  # fmt: skip

    async def _traced(self) -> AttemptResult:
        """:meth:`run` inside its telemetry span: the span starts here and ends when the
        attempt is recorded (the loop's ``_notify``), or here when the attempt is interrupted
        (by cancellation, then marked so, or by the caller's own code)."""
        span = self._open_span()
        try:
            if self._ready():
                return await self._exchange()
            return await self._bounded()
        except BaseException as exc:
            progress = self._progress
            span.interrupt(
                stage=progress.stage,
                evidence_name=progress.evidence.name,
                duration=trio.current_time() - progress.started,
                cancelled=isinstance(exc, trio.Cancelled),
            )
            raise

    def _open_span(self) -> AttemptTrace:
        """The attempt's telemetry span, started now; it ends when the attempt is recorded
        (the loop's ``_notify``), or in :meth:`run` when the attempt is interrupted."""
        request = self._request
        trace = request.trace
        assert trace is not None
        url = request.url
        trace.current = trace.attempt(
            method=request.method,
            url=format(url),  # without the userinfo
            scheme=url.scheme,
            host=url.host,
            port=url.port,
            number=self._number,
            idempotency=request.idempotency,
            idempotency_key_present=request.idempotency_key is not None,
        )
        return trace.current

    def _ready(self) -> bool:
        """Whether the attempt goes without a cancel scope of its own (the module docstring):
        no call deadline and no wait to be admitted (a bulkhead permit free now, no breaker or
        throttle, no auth callback, no hook, a body in memory). Without a pooled connection
        ready, it waits in the pool (``acquire(scopes=...)``): ``_unscoped``. Takes the
        connection (and permit) at once where one is ready, also for an attempt with a call
        deadline that may ride the deadline lane."""
        rt = self._rt
        request = self._request
        state = self._state
        config = rt.config
        origin = request.url.origin
        proxy = self._proxy = rt.connector.proxy_for(origin)
        unbounded = request.deadline == _INF
        if (
            (unbounded or rt.timekeeper.running)
            and not state.guarded
            and config.auth is None
            and config.hooks is None  # a hook may wait: only a bounded attempt may wait
            and request.body.known_length is not None
        ):
            # A bulkhead permit free now is taken now; if none is, the attempt waits for one
            # in its scope (and with a permit but no ready connection, waits for that there).
            limiter = state.limiter
            if limiter is None:
                key = self._key = rt.connector.key_for(origin, proxy)
                self._conn = rt.pool.take_idle(key, self._progress)
            else:
                self._permit = try_admit(state)
                if self._permit is None:
                    return False
                key = self._key = rt.connector.key_for(origin, proxy)
                self._conn = rt.pool.take_idle(key, self._progress)
            if unbounded and self._conn is None:
                self._unscoped = True
            return unbounded
        return False

    async def _bounded(self) -> AttemptResult:
        """The attempt within its call deadline (:class:`DeadlineBound`: the deadline lane on
        a connection already taken, else a cancel scope that ``aclose()`` and ``drain()`` may
        cancel too), and the deadline's expiry reported as this attempt's ``TIMEOUT``."""
        rt = self._rt
        progress = self._progress
        bound = DeadlineBound(rt.timekeeper, self._request.deadline, progress, self._conn)
        scope = bound.scope
        if scope is not None:
            rt.scopes[scope] = progress
        result: AttemptResult | None = None
        try:
            with bound:
                result = await self._exchange()
        except BaseException:
            # Outer cancellation (or the caller's own error): no result to learn from; a
            # probe slot of the breaker is given back.
            self._state.guard.release(self._admission)
            raise
        finally:
            if scope is not None:
                del rt.scopes[scope]
        # On the lane, an expiry counts only if it ended the exchange (what arrived first
        # wins); a scope's expiry always ended it (and left no result).
        timed_out = bound.expired and (
            scope is not None or (result is not None and result.error is not None)
        )
        if scope is not None and rt.drained and progress in rt.drained:
            rt.drained.discard(progress)
            if timed_out:
                # drain() (aclose() too) ended it while it waited for a permit or a pooled
                # connection; nothing was sent (see Runtime.drain). Not retried.
                return self._failed(_drained(self._request, progress, closed=rt.closed))
        if not timed_out:
            assert result is not None
            return result
        if rt.closed:
            return self._failed(self._closed_in_flight())  # aclose() cancelled the scope
        request = self._request
        message = deadline_message(request.deadline - request.started, progress.stage)
        if progress.stage is Stage.POOL:  # waiting for a connection: say what holds them
            origin = request.url.origin
            message += ": " + rt.pool.why_full(rt.connector.key_for(origin, self._proxy))
        return self._failed(WireError.at(progress, FailureCategory.TIMEOUT, message))

    def _closed_in_flight(self) -> WireError:
        """The error of an attempt ended by ``aclose()``: it ends the call."""
        return WireError.at(
            self._progress, FailureCategory.CONNECTION_BROKEN, CLOSED_IN_FLIGHT, ends_call=True
        )

    async def _exchange(self) -> AttemptResult:
        """Admission, headers, connection, exchange, body (the module docstring's order); a
        :class:`WireError` ends up in the result's ``error``. A streamed response keeps its
        connection and permit until its body is consumed; anything else (an interrupted
        attempt included) gives them back before this returns or raises."""
        rt = self._rt
        request = self._request
        state = self._state
        progress = self._progress
        streaming = self._streaming
        finished = False
        proxy = self._proxy
        response: WireResponse | None = None
        body: bytes | None = None
        raw_length: int | None = None  # (the body's length as received, when decoded)
        error: WireError | None = None
        sent_headers: list[tuple[bytes, bytes]] | None = None
        try:
            url = request.url
            origin = url.origin
            if state.guarded:  # the breaker and the throttle, before the bulkhead
                self._admission = await state.guard.admit(
                    f"{request.method} {url}", request.deadline
                )
            if state.limiter is not None and self._permit is None:  # (taken already if free)
                self._permit = await admit(state, request.naming, origin)
                if rt.drained and progress in rt.drained:
                    raise _drained(request, progress)  # admitted just as drain() was called
            via_proxy = _forwarding(proxy, origin)  # (absolute-form target, proxy's pool)
            memo = request.wire_memo
            wire_request = memo.request if memo is not None else None
            if wire_request is None or not fixed_headers(rt, request, via_proxy):
                headers = await attempt_headers(rt, request, progress, via_proxy, self._number)
                content, length = request.body.opened_in_memory() or await request.body.open()
                target = url.without_userinfo() if via_proxy else url.target
                wire_request = WireRequest(request.method, target, headers, content, length)
                if (
                    memo is not None
                    and isinstance(content, bytes)
                    and fixed_headers(rt, request, via_proxy)
                ):
                    memo.request = wire_request  # the template's calls send this one from now on
            sent_headers = wire_request.headers

            conn = self._conn  # taken already by an attempt that found one ready
            if conn is None:
                joined = self._joined
                if joined:  # (it waited in the queue already, start(): the pool goes on)
                    key = self._key
                    expect = False  # (not asked again)
                    draining = False  # (start() joins only while the client is not draining)
                else:
                    connector = rt.connector
                    key = self._key = connector.key_for(origin, proxy)
                    expect = connector.expect_multiplexed(origin, via_proxy, key)
                    draining = rt.draining
                try:  # (the run itself is the pool's opener: __call__)
                    if self._unscoped:  # (its wait is ended through the pool: _ready)
                        conn = await rt.pool.acquire(
                            key,
                            progress,
                            self,
                            expect_multiplexed=expect,
                            scopes=rt.scopes,
                            joined=joined,
                        )
                    else:
                        conn = await rt.pool.acquire(key, progress, self, expect_multiplexed=expect)
                except WireError as exc:
                    if self._unscoped and (
                        (rt.draining and not draining and exc.category is _ADM)
                        or (rt.drained and progress in rt.drained)
                    ):
                        # drain() or aclose() ended its wait in the pool (or the opening of a
                        # slot still at POOL): as its scope's cancellation would have (_bounded).
                        rt.drained.discard(progress)
                        return self._failed(_drained(request, progress, closed=rt.closed))
                    raise
                self._conn = conn
                if rt.drained and progress in rt.drained:
                    # drain() cancelled the wait just as a connection was granted: stop before
                    # the first byte (the next await would be a write, and its cancellation
                    # ambiguous).
                    raise _drained(request, progress)
            config = rt.config
            if config.early_data and not progress.late_only:
                progress.early_ok = _early_safe(request, state)
            response = await conn.send_request(wire_request, progress)
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
                        attempt=self._number,
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
                response.status == 200
                and resumable(request, state, 200, response.headers, True, response.content_length)
            ):
                # The caller reads the body: the connection stays lent until the block ends
                # (a PoolTimeout meanwhile says so, ConnectionPool.hold). A buffered body that
                # can be continued is read by the loop too (``_call/resume.py``).
                rt.pool.hold(conn)
                self._response = response
                self._held = True
            else:
                limit = config.max_body_bytes
                decoder = decoder_for(  # (before the read)
                    request.method, response.headers, limit, response.encoded
                )
                source = response.source
                chunks = await source.receive_all(progress, limit)
                body = whole_body(chunks, source, progress, limit, decoder, _BUFFERED_HINT)
                if decoder is not None:  # (Response.num_bytes_downloaded: the body as it came)
                    raw_length = sum(map(len, chunks))
            finished = True
        except WireError as exc:
            error = exc
            if rt.closed:
                # A failure while the client closed is aclose()'s doing (it closed the
                # connection the attempt held, or cancelled its scope): not retried.
                response = None
                error = self._closed_in_flight()
        finally:
            if not (finished and self._held):
                self._give_back(finished and body is not None)
        # (built here, from this frame's own variables: the common attempt's one result)
        return new_result(
            (self._number, progress, response, body, raw_length, error, sent_headers,
             self._admission, self if self._held else None, self._range_start)
        )  # fmt: skip

    def open(self, progress: AttemptProgress) -> Coroutine[Any, Any, PooledConnection]:
        """The pool's opener for this attempt: a new connection to its origin, through its
        proxy, for its pool. The run is its own opener and, queued in the pool, its own
        waiter (``pool_ledger.Waiter``), rather than objects of their own held while it waits
        (issue #41)."""
        return self._rt.connector.open(
            progress, url=self._request.url, proxy=self._proxy, pool_key=self._key
        )

    def end(self, read_to_end: bool = False) -> None:
        """Give back what a streamed response still holds (idempotent): when ``read_to_end``,
        its body was read to its end and the connection goes back to the pool reusable; else a
        body not read to its end is abandoned (its HTTP/1.1 connection closed, its HTTP/2 or
        HTTP/3 stream reset). For the body's end, the ``stream()`` block's exit, a redirect
        followed, and a hedged copy whose response lost the race."""
        if not read_to_end:
            response = self._response
            if self._conn is not None and response is not None:
                response.source.abandon()
        self._give_back(read_to_end)

    def _give_back(self, reusable: bool) -> None:
        """Return the connection (to the pool's idle ones when ``reusable``: only after a
        complete exchange, its body read to its end; else closed) and the permit."""
        conn, self._conn = self._conn, None
        if conn is not None:
            if self._held:
                self._held = False
                self._rt.pool.unhold(conn)
            if reusable:
                self._rt.pool.release(conn)
            else:
                self._rt.pool.discard(conn)
        permit, self._permit = self._permit, None
        if permit is not None:
            release(self._state, permit)


def _forwarding(proxy: ProxyConfig | None, origin: Origin) -> ProxyConfig | None:
    """The proxy a request to ``origin`` is forwarded through in absolute form (cleartext
    through an HTTP(S) proxy: one pool of proxy connections), else ``None`` (SOCKS tunnels
    everything, so the request is then as without one)."""
    return proxy if proxy is not None and proxy.forwards and not origin.tls else None


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
