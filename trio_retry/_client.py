"""The client: attempt -> Attempt record -> engine -> budget -> backoff -> attempt.

One call runs this loop:

1. admission: the client must be open and not draining; the request is validated before any
   I/O (bad URL, header bytes, body type -> ``InvalidRequest``, ``NOT_SENT``);
2. an attempt: bulkhead permit, pooled connection, request, response head (and, for buffered
   calls, the body) — inside a cancel scope carrying the call's deadline. The wire layer keeps
   an :class:`AttemptProgress` current, so however the attempt ends we know the stage reached;
3. the :class:`Attempt` record; a response below 400 ends the loop without asking the engine;
4. otherwise the engine decides on a :class:`RetryContext`. On ``RetryAllowed`` the attempt has
   *already* given back its connection and its bulkhead permit; the budget is debited and the
   backoff sleeps — never past the call deadline, and cut short by ``drain()``;
5. the end: a response, ``HttpAmbiguousExecutionError`` (the engine said ambiguous, or the last
   failure left a non-idempotent request ``SENT_NO_RESPONSE``), or a ``RequestFailed`` subclass.

Outer cancellation is never caught: only the client's own scopes (the call deadline, the client
closing) are turned into errors, and each of those carries the evidence of the stage reached.
"""

from __future__ import annotations

import inspect
import logging
import math
import random
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from functools import partial
from http.cookiejar import CookieJar
from types import TracebackType
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlencode

import trio

from ._body import PreparedBody, prepare_body
from ._cookies import cookie_header, store_cookies
from ._core.backoff import parse_retry_after
from ._core.engine import (
    AmbiguousFailure,
    Decision,
    DefaultRetryEligibilityEngine,
    RetryAllowed,
    RetryDenied,
    RetryEligibilityEngine,
    build_context,
)
from ._core.evidence import Attempt, Evidence, FailureCategory, Stage, build_attempt
from ._core.idempotency import IDEMPOTENCY_KEY_HEADER, Idempotency, classify_idempotency
from ._core.policy import RetryPolicy, Upstream
from ._core.replay import Multipart
from ._decoding import ACCEPT_ENCODING, DecodeError, Decoder, make_decoder
from ._errors import (
    AdmissionRejected,
    ClientStateError,
    ConnectFailed,
    ConnectionBroken,
    DeadlineExceeded,
    HttpAmbiguousExecutionError,
    InvalidRequest,
    PoolTimeout,
    ProtocolFailed,
    RequestFailed,
    TLSFailed,
    TooManyRedirects,
)
from ._models import URL, Headers, HeaderTypes, Origin, Response, StageTimeouts, check_header
from ._proxy import ProxyConfig, proxy_from_env
from ._redirects import CREDENTIAL_HEADERS, REDIRECT_STATUSES, body_headers, redirect_method
from ._wire.http2 import HTTP2Connection
from ._wire.http11 import HTTP11Connection, WireRequest, WireResponse
from ._wire.pool import ConnectionPool, PooledConnection
from ._wire.progress import AttemptProgress, WireError
from ._wire.transport import open_transport

__all__ = ["AttemptCallback", "Client", "RefreshableAuth"]

USER_AGENT = "trio_retry/0.1"
logger = logging.getLogger("trio_retry")


@runtime_checkable
class RefreshableAuth(Protocol):
    """Credentials applied to every attempt, refreshed once after a 401.

    ``headers()`` is awaited before each attempt; ``refresh()`` is awaited once when a 401 on a
    safe, replayable request is to be replayed (SPEC §6).
    """

    async def headers(self) -> Mapping[str, str]: ...

    async def refresh(self) -> None: ...


AttemptCallback = Callable[[Attempt], Awaitable[None] | None]

_FAILURE_TYPES: dict[FailureCategory, type[RequestFailed]] = {
    FailureCategory.INVALID_REQUEST: InvalidRequest,
    FailureCategory.DNS: ConnectFailed,
    FailureCategory.CONNECT: ConnectFailed,
    FailureCategory.TLS_HANDSHAKE: TLSFailed,
    FailureCategory.TLS_CERTIFICATE: TLSFailed,
    FailureCategory.POOL_TIMEOUT: PoolTimeout,
    FailureCategory.ADMISSION: AdmissionRejected,
    FailureCategory.REFUSED_STREAM: ConnectionBroken,
    FailureCategory.GOAWAY: ConnectionBroken,
    FailureCategory.CONNECTION_BROKEN: ConnectionBroken,
    FailureCategory.TIMEOUT: DeadlineExceeded,
    FailureCategory.REMOTE_PROTOCOL: ProtocolFailed,
    FailureCategory.LOCAL_PROTOCOL: ProtocolFailed,
}


class _Origin:
    """Per-origin runtime state: the upstream's settings, its own budget, its bulkhead."""

    __slots__ = ("budget", "limiter", "upstream", "waiting")

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream
        self.budget = upstream.budget
        self.waiting = 0  # attempts waiting for a bulkhead permit
        self.limiter = (
            trio.CapacityLimiter(upstream.max_concurrency)
            if upstream.max_concurrency is not None
            else None
        )


@dataclass(slots=True)
class _Request:
    method: str
    url: URL
    headers: Headers
    body: PreparedBody
    idempotency: Idempotency
    idempotency_key: str | None
    retry: RetryPolicy
    deadline: float  # absolute trio time; inf for none
    follow_redirects: bool = False
    apply_auth: bool = True  # False once a redirect left the original origin


class _Outcome:
    """How one attempt ended: a response (maybe with its body), or a classified failure."""

    __slots__ = ("body", "conn", "error", "permit", "response")

    def __init__(self) -> None:
        self.response: WireResponse | None = None
        self.body: bytes | None = None
        self.error: BaseException | None = None
        self.conn: PooledConnection | None = None
        self.permit: object | None = None


class Client:
    """A Trio HTTP client whose retries are decided on execution evidence.

    Use it only inside ``async with Client(...) as client:``. Leaving the block closes every
    connection and stops every task the client started; a call still in flight ends promptly
    with an error carrying the evidence of the stage it reached. Options are described in
    docs/guide.md and SPEC §2/§10.
    """

    def __init__(
        self,
        *,
        retry: RetryPolicy | None = None,
        upstreams: Mapping[str, Upstream] | None = None,
        default_upstream: Upstream | None = None,
        max_connections: int = 100,
        max_connections_per_origin: int | None = None,
        pool_timeout: float | None = None,
        keepalive_expiry: float | None = 5.0,
        http2: bool = True,
        http2_prior_knowledge: bool = False,
        ssl_context: ssl.SSLContext | None = None,
        deadline: float | None = None,
        auth: RefreshableAuth | None = None,
        engine: RetryEligibilityEngine | None = None,
        clock: Callable[[], float] | None = None,
        on_attempt: AttemptCallback | None = None,
        rng: random.Random | None = None,
        base_url: str | None = None,
        headers: HeaderTypes = None,
        max_header_bytes: int = 65536,
        max_body_bytes: int | None = None,
        stage_timeouts: StageTimeouts | None = None,
        follow_redirects: bool = False,
        max_redirects: int = 20,
        cookies: bool | CookieJar = False,
        proxy: str | None = None,
        trust_env: bool = False,
        json_dumps: Callable[[Any], str | bytes] | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self.default_upstream = default_upstream or Upstream()
        self._upstream_config: dict[Origin, Upstream] = {
            Origin.parse(key): value for key, value in (upstreams or {}).items()
        }
        self._origins: dict[Origin, _Origin] = {}
        self.deadline = deadline
        self.auth = auth
        self.engine: RetryEligibilityEngine = engine or DefaultRetryEligibilityEngine()
        self._wall_clock = clock or time.time
        self.on_attempt = on_attempt
        self._rng = rng or random.Random()
        self.base_url = URL(base_url) if base_url is not None else None
        self.headers = Headers(
            [("User-Agent", USER_AGENT), ("Accept", "*/*"), ("Accept-Encoding", ACCEPT_ENCODING)]
        )
        given = Headers(headers)
        for name in given:
            self.headers.remove(name)
        for name, value in given.multi_items():
            self.headers.add(name, value)
        # Client-wide headers that need the per-call checks (framing, Idempotency-Key); when
        # there are none and a call passes no headers, those scans are skipped.
        self._headers_special = any(
            name in self.headers
            for name in ("content-length", "transfer-encoding", IDEMPOTENCY_KEY_HEADER)
        )
        if max_redirects < 0:
            raise ValueError(f"max_redirects must be >= 0, got {max_redirects}")
        self.follow_redirects = follow_redirects
        self.max_redirects = max_redirects
        self.cookies: CookieJar | None = (
            cookies if isinstance(cookies, CookieJar) else (CookieJar() if cookies else None)
        )
        self._proxy = ProxyConfig.parse(proxy) if proxy is not None else None
        self.trust_env = trust_env
        self._json_dumps = json_dumps
        if max_header_bytes < 1:
            raise ValueError(f"max_header_bytes must be >= 1, got {max_header_bytes}")
        self.max_header_bytes = max_header_bytes
        self.max_body_bytes = max_body_bytes
        self.stage_timeouts = stage_timeouts or StageTimeouts()
        self.http2 = http2
        self.http2_prior_knowledge = http2_prior_knowledge
        self._alpn = ["h2", "http/1.1"] if http2 else ["http/1.1"]
        if ssl_context is None:
            ssl_context = ssl.create_default_context()
        ssl_context.set_alpn_protocols(self._alpn)
        self._ssl_context = ssl_context
        self._pool = ConnectionPool(
            max_connections=max_connections,
            max_connections_per_origin=max_connections_per_origin,
            keepalive_expiry=keepalive_expiry,
            pool_timeout=pool_timeout,
        )
        self._state = "new"  # new -> open -> closed
        self._draining = False
        self._drain_event = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._background_done = trio.Event()
        self._nursery_cm: AbstractAsyncContextManager[trio.Nursery] | None = None
        self._scopes: set[trio.CancelScope] = set()
        self._calls = 0

    # --- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> Client:
        if self._state != "new":
            raise ClientStateError("a Client can be entered only once; create a new one")
        # Two nurseries: the outer one (entered here, exited only in __aexit__) encloses the
        # caller's code, so it is never cancelled while that code runs; the inner one holds
        # the background tasks (HTTP/2 readers) and is what aclose() cancels. So aclose() can
        # be awaited anywhere inside the block without cancelling the caller or exiting a
        # nursery out of order.
        self._nursery_cm = trio.open_nursery()
        outer = await self._nursery_cm.__aenter__()
        self._nursery = await outer.start(self._keep_background)
        self._state = "open"
        return self

    async def _keep_background(
        self, *, task_status: trio.TaskStatus[trio.Nursery] = trio.TASK_STATUS_IGNORED
    ) -> None:
        try:
            async with trio.open_nursery() as inner:
                task_status.started(inner)
                await trio.sleep_forever()
        finally:
            self._background_done.set()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
        if self._nursery_cm is not None:
            # The caller's own exception (if any) is not passed in: the nursery must never wrap
            # it in an ExceptionGroup. Our background tasks never raise.
            cm, self._nursery_cm = self._nursery_cm, None
            await cm.__aexit__(None, None, None)

    async def aclose(self) -> None:
        """Close the client: stop admitting calls, end in-flight ones, close every connection.

        Calls still in flight end with an error carrying the evidence of their stage; when
        this returns, the client's background tasks have ended. Safe to call twice, and from
        inside the ``async with`` block.
        """
        if self._state == "closed":
            return
        self._state = "closed"
        self.drain()
        for scope in list(self._scopes):
            scope.cancel()
        self._pool.close()
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()
            with trio.CancelScope(shield=True):
                await self._background_done.wait()

    def drain(self) -> None:
        """Stop admitting calls; calls waiting in backoff end now; in-flight attempts finish.

        A call in backoff ends with its last outcome and ``RetryDenied.runtime_draining()``.
        """
        self._draining = True
        self._drain_event.set()

    @property
    def draining(self) -> bool:
        return self._draining

    def __repr__(self) -> str:
        state = f"{self._state}, draining" if self._draining and self._state == "open" else ""
        return (
            f"<Client {state or self._state}; {self._calls} calls; pool: "
            f"{self._pool.active_count} active, {self._pool.idle_count} idle, "
            f"{self._pool.waiting} waiting>"
        )

    @property
    def pool(self) -> ConnectionPool:
        """The connection pool (for inspection: its repr summarises its state)."""
        return self._pool

    # --- public calls ----------------------------------------------------------------------

    async def request(self, method: str, url: str | URL, **options: Any) -> Response:
        """Send a request, retrying as the engine allows; return the final response.

        Options: ``headers``, ``params``, ``content``, ``data`` (form fields), ``files``,
        ``json``, ``deadline``, ``idempotency``, ``idempotency_key``, ``retry``,
        ``follow_redirects``. Raises ``HttpAmbiguousExecutionError`` when a non-idempotent
        request may have run, a ``RequestFailed`` subclass for other failures. On outer
        cancellation ``trio.Cancelled`` propagates unchanged, the interrupted connection is
        closed (never reused), and the pool stays consistent.
        """
        request = self._build(method, url, **options)
        if not request.follow_redirects:
            response, _ = await self._send(request, streaming=False)
            return response
        response, _ = await self._send_following(request, streaming=False)
        return response

    async def get(self, url: str | URL, **options: Any) -> Response:
        return await self.request("GET", url, **options)

    async def head(self, url: str | URL, **options: Any) -> Response:
        return await self.request("HEAD", url, **options)

    async def options(self, url: str | URL, **options: Any) -> Response:
        return await self.request("OPTIONS", url, **options)

    async def post(self, url: str | URL, **options: Any) -> Response:
        return await self.request("POST", url, **options)

    async def put(self, url: str | URL, **options: Any) -> Response:
        return await self.request("PUT", url, **options)

    async def patch(self, url: str | URL, **options: Any) -> Response:
        return await self.request("PATCH", url, **options)

    async def delete(self, url: str | URL, **options: Any) -> Response:
        return await self.request("DELETE", url, **options)

    def stream(
        self, method: str, url: str | URL, **options: Any
    ) -> AbstractAsyncContextManager[Response]:
        """``async with client.stream("GET", url) as r: async for chunk in r.aiter_bytes()``.

        Retries happen only before the response is handed over; once the caller has the
        response, a broken body raises (``PARTIAL_RESPONSE``) and is never retried. Leaving the
        block returns the connection (if the body was read to the end) or closes it.
        """
        return self._stream(method, url, options)

    @asynccontextmanager
    async def _stream(
        self, method: str, url: str | URL, options: dict[str, Any]
    ) -> AsyncIterator[Response]:
        request = self._build(method, url, **options)
        response, closer = await self._send_following(request, streaming=True)
        try:
            yield response
        finally:
            if closer is not None:
                closer()

    # --- building a request (pure validation, before any I/O) ------------------------------

    def _check_open(self) -> None:
        if self._state == "new":
            raise ClientStateError(
                "the Client is not open: use it inside `async with trio_retry.Client() as "
                "client:` (it owns a nursery and connections that must be closed)"
            )
        if self._state == "closed":
            raise ClientStateError("the Client is closed: create a new one inside `async with`")

    def _build(
        self,
        method: str,
        url: str | URL,
        *,
        headers: HeaderTypes = None,
        params: Any = None,
        content: object = None,
        data: Mapping[str, Any] | None = None,
        files: Mapping[str, Any] | None = None,
        json: Any = None,
        deadline: float | None = None,
        idempotency: Idempotency | None = None,
        idempotency_key: str | bool | None = None,
        retry: RetryPolicy | None = None,
        follow_redirects: bool | None = None,
    ) -> _Request:
        self._check_open()
        if not isinstance(method, str) or not method.isascii() or not method.isalpha():
            raise InvalidRequest(
                f"invalid HTTP method {method!r}: expected letters such as 'GET' or 'POST'",
                evidence=Evidence.NOT_SENT,
                category=FailureCategory.INVALID_REQUEST,
            )
        method = method.upper()
        if isinstance(url, str) and self.base_url is not None and "://" not in url:
            full = self.base_url.join(url)
        else:
            full = _parse_url(url)
        full = full.with_params(params)
        merged = self.headers.copy()
        if headers:
            given = Headers(headers)
            for name in given:
                merged.remove(name)
            for name, value in given.multi_items():
                merged.add(name, value)
        key: str | None = None
        if idempotency_key is True:
            key = str(uuid.uuid4())
        elif isinstance(idempotency_key, str):
            key = idempotency_key
        if key is not None:
            merged.set("Idempotency-Key", key)
        elif (headers or self._headers_special) and IDEMPOTENCY_KEY_HEADER in merged:
            key = merged[IDEMPOTENCY_KEY_HEADER]
        try:
            if data is not None or files is not None:
                content = _form_content(content, data, files, json)
            body = prepare_body(content, json, json_dumps=self._json_dumps)
            if data is not None and files is None and body.content_type is None:
                body.content_type = "application/x-www-form-urlencoded"
        except TypeError as exc:
            raise InvalidRequest(
                str(exc), evidence=Evidence.NOT_SENT, category=FailureCategory.INVALID_REQUEST
            ) from exc
        if headers or self._headers_special:
            _check_framing(merged, body)
        if body.content_type and "content-type" not in merged:
            merged.set("Content-Type", body.content_type)
        seconds = deadline if deadline is not None else self.deadline
        return _Request(
            method=method,
            url=full,
            headers=merged,
            body=body,
            idempotency=classify_idempotency(
                method, (IDEMPOTENCY_KEY_HEADER,) if key is not None else (), idempotency
            ),
            idempotency_key=key,
            retry=retry or self.retry,
            deadline=trio.current_time() + seconds if seconds is not None else math.inf,
            follow_redirects=(
                self.follow_redirects if follow_redirects is None else follow_redirects
            ),
        )

    async def _send_following(
        self, request: _Request, *, streaming: bool
    ) -> tuple[Response, Callable[[], None] | None]:
        """``_send``, then follow redirects when asked: the call's deadline spans the chain."""
        history: list[Response] = []
        while True:
            response, closer = await self._send(request, streaming=streaming)
            location = (
                response.headers.get("location")
                if request.follow_redirects and response.status in REDIRECT_STATUSES
                else None
            )
            if location is None:
                response.history = history
                return response, closer
            if closer is not None:  # a streamed redirect: its body is not wanted
                closer()
            history.append(response)
            if len(history) > self.max_redirects:
                raise TooManyRedirects(
                    f"{request.method} {history[0].url}: more than max_redirects "
                    f"({self.max_redirects}) redirects; the last pointed to {location}",
                    history=history,
                )
            request = self._redirect(request, response, location)

    def _redirect(self, request: _Request, response: Response, location: str) -> _Request:
        """The next request of a redirect chain (RFC 9110 §15.4; see ``_redirects``)."""
        url = request.url.join(location)
        method, keep_body = redirect_method(response.status, request.method)
        headers = request.headers.copy()
        body = request.body
        if keep_body and not body.replayability.replayable:
            raise RequestFailed(
                f"{request.method} {request.url}: the {response.status} redirect to {url} "
                "could not replay the request body, which is one-shot; use bytes, a "
                "Reopenable or a path so that it can be sent again",
                evidence=Evidence.RESPONSE_RECEIVED,
                attempts=response.attempts,
                decision=RetryDenied.body_not_replayable(),
            )
        if not keep_body:
            body = prepare_body(None)
            for name in body_headers():
                headers.remove(name)
        same_origin = url.origin == request.url.origin and request.apply_auth
        if not same_origin:
            for name in CREDENTIAL_HEADERS:
                headers.remove(name)
        return replace(
            request,
            method=method,
            url=url,
            headers=headers,
            body=body,
            idempotency=classify_idempotency(method, headers.keys()),
            apply_auth=same_origin,
        )

    def _origin_state(self, origin: Origin) -> _Origin:
        state = self._origins.get(origin)
        if state is None:
            config = self._upstream_config.get(origin)
            state = _Origin(config if config is not None else self.default_upstream.fresh())
            self._origins[origin] = state
        return state

    # --- the loop ------------------------------------------------------------------------------

    async def _send(
        self, request: _Request, *, streaming: bool
    ) -> tuple[Response, Callable[[], None] | None]:
        if self._draining:
            raise AdmissionRejected(
                f"{request.method} {request.url} not admitted: the client is draining",
                evidence=Evidence.NOT_SENT,
                category=FailureCategory.ADMISSION,
            )
        self._calls += 1
        origin = request.url.origin
        state = self._origin_state(origin)
        policy = request.retry
        started = trio.current_time()
        state.budget.deposit(started)
        attempts: list[Attempt] = []
        previous_delay: float | None = None
        auth_refreshed = retried_425 = False
        # The attempt scopes carry the call's own deadline; an outer deadline is enforced by
        # the caller's own scope (and surfaces as trio.Cancelled). The earlier of the two only
        # matters when deciding about a retry, so it is read then (it costs a walk up the
        # cancel-scope chain, a measurable share of a small request).
        deadline = request.deadline

        while True:
            number = len(attempts) + 1
            progress = AttemptProgress(started if number == 1 else trio.current_time())
            outcome = await self._attempt(request, state, progress, streaming, deadline)
            ended = trio.current_time()
            evidence, category, retry_after = self._observe(outcome)
            wire = outcome.response
            if wire is not None and outcome.error is None and wire.status < 400:
                attempt = self._record(number, progress, outcome, evidence, category, ended)
                attempts.append(attempt)
                if (pending := self._notify(attempt, request)) is not None:
                    await pending
                return self._deliver(request, state, outcome, attempts, None, streaming, deadline)
            if isinstance(outcome.error, WireError) and not outcome.error.retryable:
                attempt = self._record(number, progress, outcome, evidence, category, ended)
                attempts.append(attempt)
                if (pending := self._notify(attempt, request)) is not None:
                    await pending
                raise self._failure(request, attempts, outcome.error, None)

            now = ended
            backoff = policy.backoff
            proposed = backoff.delay(number, self._rng, previous_delay)
            if retry_after is not None:
                proposed = max(proposed, retry_after)
            call_deadline = min(deadline, trio.current_effective_deadline())
            remaining = call_deadline - now
            context = build_context(  # RetryContext(...), built faster
                attempt=number,
                max_attempts=policy.max_attempts,
                budget_available=state.budget.available(now),
                replayability=request.body.replayability,
                response_delivered=False,
                draining=self._draining,
                remaining_deadline=remaining if math.isfinite(remaining) else None,
                min_attempt_budget=policy.min_attempt_budget,
                failure=category,
                evidence=evidence,
                idempotency=request.idempotency,
                status=wire.status if wire is not None and category is None else None,
                retry_after=retry_after,
                transient_500=state.upstream.transient_500,
                proposed_delay=proposed,
                max_backoff=backoff.max,
                auth_refreshed=auth_refreshed,
                retried_425=retried_425,
                auth_refreshable=self.auth is not None,
            )
            decision = self.engine.decide(context)
            # Built once, with its decision (a dataclasses.replace would build it twice).
            attempt = self._record(number, progress, outcome, evidence, category, ended, decision)
            attempts.append(attempt)
            if (pending := self._notify(attempt, request)) is not None:
                await pending

            if isinstance(decision, RetryAllowed):
                # The attempt has already returned its connection and its permit.
                state.budget.try_withdraw(now)
                if not await self._backoff(decision.delay, call_deadline):
                    decision = RetryDenied.runtime_draining(retry_after=retry_after)
                    return self._finish(request, state, outcome, attempts, decision, streaming)
                previous_delay = decision.delay
                if attempt.status == 401 and attempt.category is None and self.auth is not None:
                    await self.auth.refresh()
                    auth_refreshed = True
                if attempt.status == 425 and attempt.category is None:
                    retried_425 = True
                continue
            return self._finish(request, state, outcome, attempts, decision, streaming)

    async def _backoff(self, delay: float, deadline: float) -> bool:
        """Sleep ``delay`` (never past ``deadline``); False if drain() cut it short."""
        if self._draining:
            return False
        if delay <= 0:  # no timer needed: just let other tasks run (and outer cancellation in)
            await trio.lowlevel.checkpoint()
            return not self._draining
        with trio.move_on_at(min(trio.current_time() + delay, deadline)):
            await self._drain_event.wait()
        return not self._draining

    def _notify(self, attempt: Attempt, request: _Request) -> Awaitable[object] | None:
        """Log the attempt (DEBUG) and call ``on_attempt``; its awaitable, if it returned one,
        is for the caller to await (so that a client without an async callback awaits nothing).
        """
        if logger.isEnabledFor(logging.DEBUG):
            # The attempt trail only: no header values, so no credentials, ever reach the log.
            logger.debug(
                "%s %s attempt %d: %s %s %s%s (%.1f ms)%s",
                request.method,
                request.url,
                attempt.number,
                attempt.stage,
                attempt.evidence,
                attempt.status if attempt.status is not None else "-",
                f" {attempt.category}" if attempt.category is not None else "",
                attempt.timings.get("total", 0.0) * 1000,
                f"; {attempt.decision}" if attempt.decision is not None else "",
            )
        if self.on_attempt is not None:
            result = self.on_attempt(attempt)
            if inspect.isawaitable(result):
                return result
        return None

    # --- one attempt ------------------------------------------------------------------------

    async def _attempt(
        self,
        request: _Request,
        state: _Origin,
        progress: AttemptProgress,
        streaming: bool,
        deadline: float,
    ) -> _Outcome:
        """One wire attempt inside the call deadline. Never raises except outer cancellation
        (and errors from the caller's own body iterators or auth object).

        The attempt runs in a cancel scope carrying the call deadline, which ``aclose()`` also
        cancels. The common case needs none: with no deadline, nothing to wait for but a pooled
        connection ready at once (no bulkhead, no auth callback, a body in memory), every wait
        is on that connection (a socket read or write; on HTTP/2 also its stream events), and
        ``aclose()`` closing it fails those waits as promptly (a scope costs more than the rest
        of a small request's bookkeeping).
        """
        outcome = _Outcome()
        proxy = self._proxy_for(request.url.origin)
        if (
            deadline == math.inf
            and state.limiter is None
            and self.auth is None
            and request.body.known_length is not None
        ):
            outcome.conn = self._pool.take_idle(_pool_key(request.url.origin, proxy), progress)
        unscoped = outcome.conn is not None
        timed_out = False
        if unscoped:
            await self._exchange(request, state, progress, streaming, outcome, proxy)
        else:
            scope = trio.CancelScope(deadline=deadline)
            self._scopes.add(scope)
            try:
                with scope:
                    await self._exchange(request, state, progress, streaming, outcome, proxy)
            finally:
                self._scopes.discard(scope)
            timed_out = scope.cancelled_caught
        closing = self._state == "closed"
        if closing and (timed_out or (unscoped and outcome.error is not None)):
            # Ended by aclose(): its cancellation, or (no scope to cancel) the connection it
            # closed. Not retried.
            outcome.response = None
            outcome.error = WireError.at(
                progress, FailureCategory.CONNECTION_BROKEN, _CLOSED_IN_FLIGHT, retryable=False
            )
        elif timed_out:
            outcome.response = None
            outcome.error = WireError.at(
                progress,
                FailureCategory.TIMEOUT,
                f"the call deadline expired during {progress.stage}",
            )
        return outcome

    async def _exchange(
        self,
        request: _Request,
        state: _Origin,
        progress: AttemptProgress,
        streaming: bool,
        outcome: _Outcome,
        proxy: ProxyConfig | None,
    ) -> None:
        """Run the attempt; a :class:`WireError` ends up in ``outcome.error``. A streamed
        response keeps its connection and permit until its body is consumed; anything else
        (an interrupted attempt included) gives them back before this returns or raises."""
        finished = False
        try:
            await self._attempt_inner(request, state, progress, streaming, outcome, proxy)
            finished = True
        except WireError as exc:
            outcome.error = exc
        finally:
            if not (finished and streaming and outcome.body is None):
                self._give_back(state, outcome)

    async def _admit(self, request: _Request, state: _Origin) -> object:
        """A bulkhead permit for one attempt (the token it is held under).

        Waits for one unless ``Upstream.max_queue`` attempts already wait: then the attempt
        is rejected at once (``ADMISSION``: nothing was sent). Cancellation while waiting
        leaves nothing held.
        """
        limiter = state.limiter
        assert limiter is not None
        token = object()
        try:
            limiter.acquire_on_behalf_of_nowait(token)
            return token
        except trio.WouldBlock:
            pass
        queue = state.upstream.max_queue
        if queue is not None and state.waiting >= queue:
            raise WireError(
                f"{request.method} {request.url} not admitted: the bulkhead of "
                f"{request.url.origin} is full ({limiter.total_tokens} calls in flight, "
                f"{state.waiting} waiting, Upstream(max_queue={queue}))",
                stage=Stage.ADMISSION,
                evidence=Evidence.NOT_SENT,
                category=FailureCategory.ADMISSION,
            )
        state.waiting += 1
        try:
            await limiter.acquire_on_behalf_of(token)
        finally:
            state.waiting -= 1
        return token

    async def _attempt_inner(
        self,
        request: _Request,
        state: _Origin,
        progress: AttemptProgress,
        streaming: bool,
        outcome: _Outcome,
        proxy: ProxyConfig | None,
    ) -> None:
        if state.limiter is not None:
            outcome.permit = await self._admit(request, state)
        url = request.url
        origin = url.origin
        # Cleartext through a proxy: absolute-form target, one pool of proxy connections.
        via_proxy = proxy if proxy is not None and not origin.tls else None
        pool_key = _pool_key(origin, proxy)
        headers = request.headers.raw()  # a fresh list, encoded once per Headers
        if "host" not in request.headers:
            headers.insert(0, (b"host", url.host_header.encode()))
        if self.auth is not None and request.apply_auth:
            # A header the caller set on the call wins over the same header from ``auth``.
            for name, value in Headers(await self.auth.headers()).multi_items():
                if name not in request.headers:
                    headers.append((name.encode("latin-1"), value.encode("latin-1")))
        if self.cookies is not None and "cookie" not in request.headers:
            cookie = cookie_header(self.cookies, str(url), request.method, request.headers)
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
        body, length = await request.body.open()
        target = str(url) if via_proxy else url.target
        wire_request = WireRequest(request.method, target, headers, body, length)

        conn = outcome.conn  # taken already by an unscoped attempt
        if conn is None:
            opener = partial(self._open_connection, url=url, proxy=proxy, pool_key=pool_key)
            conn = await self._pool.acquire(
                pool_key,
                progress,
                opener,
                expect_multiplexed=self.http2
                if origin.tls
                else (self.http2_prior_knowledge and via_proxy is None),
            )
            outcome.conn = conn
        timeouts = self.stage_timeouts
        response = await conn.send_request(
            wire_request,
            progress,
            write_timeout=timeouts.write,
            first_byte_timeout=timeouts.first_byte,
        )
        outcome.response = response
        if self.cookies is not None:
            store_cookies(
                self.cookies,
                str(url),
                request.method,
                request.headers,
                Headers.from_wire(response.headers),
            )
        if streaming and response.status < 400:
            return
        outcome.body = await self._read_body(request, response, progress)

    async def _open_connection(
        self,
        progress: AttemptProgress,
        *,
        url: URL,
        proxy: ProxyConfig | None,
        pool_key: object,
    ) -> PooledConnection:
        """A new connection for ``url``'s origin (through ``proxy`` if any): HTTP/2 when ALPN
        (or prior knowledge on cleartext) says so, else HTTP/1.1. The pool's opener."""
        origin = url.origin
        transport = await open_transport(
            origin.host,
            origin.port,
            progress=progress,
            ssl_context=self._ssl_context if origin.tls else None,
            connect_timeout=self.stage_timeouts.connect,
            tls_timeout=self.stage_timeouts.tls,
            proxy=(proxy.host, proxy.port, proxy.authorization) if proxy else None,
        )
        via_proxy = proxy is not None and not origin.tls
        h2c = not origin.tls and self.http2_prior_knowledge and not via_proxy
        if transport.alpn == "h2" or h2c:
            # The reader task lives in the client's nursery: no task outlives the client.
            assert self._nursery is not None
            return await HTTP2Connection.open(
                transport,
                origin,
                scheme=origin.scheme,
                authority=url.host_header,
                max_header_bytes=self.max_header_bytes,
                nursery=self._nursery,
                progress=progress,
                handshake_timeout=self.stage_timeouts.tls
                if origin.tls
                else self.stage_timeouts.connect,
            )
        return HTTP11Connection(transport, pool_key, self.max_header_bytes)

    def _proxy_for(self, origin: Origin) -> ProxyConfig | None:
        if self._proxy is not None:
            return self._proxy
        if self.trust_env:
            return proxy_from_env(origin)
        return None

    def _decoder(self, request_method: str, headers: list[tuple[bytes, bytes]]) -> Decoder | None:
        if request_method == "HEAD":
            return None
        for name, value in headers:
            if name.lower() == b"content-encoding":
                return make_decoder(value.decode("latin-1"), self.max_body_bytes)
        return None

    async def _read_body(
        self, request: _Request, response: WireResponse, progress: AttemptProgress
    ) -> bytes:
        """The whole body, decoded, bounded by ``max_body_bytes`` (raw and decoded)."""
        limit = self.max_body_bytes
        decoder = self._decoder(request.method, response.headers)
        chunks: list[bytes] = []
        size = 0
        source = response.source
        read_timeout = self.stage_timeouts.read
        while chunk := await source.receive_body(progress, read_timeout):
            size += len(chunk)
            if limit is not None and size > limit:
                source.abandon()
                raise WireError.at(
                    progress,
                    FailureCategory.REMOTE_PROTOCOL,
                    f"the response body exceeds max_body_bytes ({limit} bytes); raise the "
                    "limit or use client.stream() to read it in chunks",
                    retryable=False,
                )
            chunks.append(chunk)
        raw = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if decoder is None:
            return raw
        try:
            return decoder.decode(raw) + decoder.flush()
        except DecodeError as exc:
            raise WireError.at(progress, FailureCategory.REMOTE_PROTOCOL, str(exc),
                               retryable=False) from exc  # fmt: skip

    def _give_back(self, state: _Origin, outcome: _Outcome) -> None:
        """Return the connection (reusable only after a complete exchange) and the permit."""
        conn, outcome.conn = outcome.conn, None
        if conn is not None:
            if outcome.error is None and outcome.body is not None:
                self._pool.release(conn)
            else:
                self._pool.discard(conn)
        permit, outcome.permit = outcome.permit, None
        if permit is not None and state.limiter is not None:
            state.limiter.release_on_behalf_of(permit)

    def _observe(self, outcome: _Outcome) -> tuple[Evidence, FailureCategory | None, float | None]:
        """The evidence, failure category and Retry-After (seconds) of a finished attempt."""
        error = outcome.error
        wire = outcome.response
        if wire is not None and error is None:
            retry_after = None
            if wire.status >= 400:  # below 400 the engine is not consulted
                for name, value in wire.headers:
                    if name.lower() == b"retry-after":
                        retry_after = parse_retry_after(value, self._wall_clock())
            return Evidence.RESPONSE_RECEIVED, None, retry_after
        assert isinstance(error, WireError)
        return error.evidence, error.category, None

    def _record(
        self,
        number: int,
        progress: AttemptProgress,
        outcome: _Outcome,
        evidence: Evidence,
        category: FailureCategory | None,
        ended: float,
        decision: Decision | None = None,
    ) -> Attempt:
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

    # --- the end of the loop ------------------------------------------------------------------

    def _response(
        self,
        request: _Request,
        outcome: _Outcome,
        attempts: Sequence[Attempt],
        decision: Decision | None,
        stream: AsyncIterator[bytes] | None = None,
    ) -> Response:
        wire = outcome.response
        assert wire is not None
        return Response(
            status=wire.status,
            reason=wire.reason,
            headers=wire.headers,  # decoded on first use
            http_version=wire.http_version,
            url=request.url,
            request_method=request.method,
            content=outcome.body,
            attempts=attempts,
            retry_decision=decision,
            stream=stream,
        )

    def _deliver(
        self,
        request: _Request,
        state: _Origin,
        outcome: _Outcome,
        attempts: list[Attempt],
        decision: Decision | None,
        streaming: bool,
        deadline: float,
    ) -> tuple[Response, Callable[[], None] | None]:
        if not streaming or outcome.body is not None:
            return self._response(request, outcome, attempts, decision), None
        wire = outcome.response
        assert wire is not None
        progress = AttemptProgress(trio.current_time())
        progress.stage = Stage.RESPONSE_BODY
        done = False

        def close() -> None:
            nonlocal done
            if not done:
                done = True
                if outcome.body is None and outcome.conn is not None:
                    wire.source.abandon()
                self._give_back(state, outcome)

        client = self
        source = wire.source
        limit = self.max_body_bytes
        decoder = self._decoder(request.method, wire.headers)
        received = 0

        def broken(exc: WireError) -> Exception:
            close()
            failed = replace(
                attempts[-1],
                stage=progress.stage,
                evidence=Evidence.PARTIAL_RESPONSE,
                error=exc,
                category=exc.category,
                decision=RetryDenied.response_already_delivered(),
            )
            error = client._failure(request, [*attempts[:-1], failed], exc, failed.decision)
            error.__cause__ = exc
            return error

        class Body:
            """The streamed body: each chunk read inside the call deadline; a break raises."""

            def __aiter__(self) -> Body:
                return self

            async def __anext__(self) -> bytes:
                nonlocal received
                if done:
                    raise StopAsyncIteration
                try:
                    with trio.CancelScope(deadline=deadline) as scope:
                        chunk = await source.receive_body(progress, client.stage_timeouts.read)
                    if scope.cancelled_caught:
                        raise WireError.at(
                            progress, FailureCategory.TIMEOUT, "the call deadline expired mid-body"
                        )
                    received += len(chunk)
                    if decoder is None and limit is not None and received > limit:
                        raise WireError.at(
                            progress,
                            FailureCategory.REMOTE_PROTOCOL,
                            f"the response body exceeds max_body_bytes ({limit} bytes)",
                        )
                except WireError as exc:
                    raise broken(exc) from exc
                if not chunk:
                    outcome.body = b""
                    close()
                    raise StopAsyncIteration
                return chunk

        class CheckedDecoder:
            """The decoder, with its errors reported like any other broken body."""

            def decode(self, chunk: bytes) -> bytes:
                assert decoder is not None
                try:
                    return decoder.decode(chunk)
                except DecodeError as exc:
                    error = WireError.at(progress, FailureCategory.REMOTE_PROTOCOL, str(exc))
                    raise broken(error) from exc

            def flush(self) -> bytes:
                assert decoder is not None
                try:
                    return decoder.flush()
                except DecodeError as exc:
                    error = WireError.at(progress, FailureCategory.REMOTE_PROTOCOL, str(exc))
                    raise broken(error) from exc

        response = self._response(request, outcome, attempts, decision, Body())
        response._decoder = CheckedDecoder() if decoder is not None else None
        return response, close

    def _finish(
        self,
        request: _Request,
        state: _Origin,
        outcome: _Outcome,
        attempts: list[Attempt],
        decision: Decision,
        streaming: bool,
    ) -> tuple[Response, Callable[[], None] | None]:
        last = attempts[-1]
        if outcome.response is not None and outcome.error is None:
            response = self._response(request, outcome, attempts, decision)
            if isinstance(decision, AmbiguousFailure):
                raise HttpAmbiguousExecutionError(
                    f"{request.method} {request.url}: status {last.status} from a gateway; the "
                    f"upstream may have executed this {request.idempotency} request. "
                    + _AMBIGUOUS_ADVICE,
                    evidence=last.evidence,
                    attempts=attempts,
                    response=response,
                    idempotency_key=request.idempotency_key,
                    decision=decision,
                )
            return response, None
        assert outcome.error is not None
        raise self._failure(request, attempts, outcome.error, decision)

    def _failure(
        self,
        request: _Request,
        attempts: list[Attempt],
        error: BaseException,
        decision: Decision | None,
    ) -> Exception:
        last = attempts[-1]
        evidence = last.evidence
        if isinstance(decision, AmbiguousFailure) or (
            evidence is Evidence.SENT_NO_RESPONSE and not request.idempotency.safely_idempotent
        ):
            exc: Exception = HttpAmbiguousExecutionError(
                f"{request.method} {request.url}: the server may have executed this request "
                f"({evidence} at {last.stage}: {error}). " + _AMBIGUOUS_ADVICE,
                evidence=evidence,
                attempts=attempts,
                idempotency_key=request.idempotency_key,
                decision=decision,
            )
        else:
            category = last.category or FailureCategory.CONNECTION_BROKEN
            kind = _FAILURE_TYPES[category]
            count = len(attempts)
            exc = kind(
                f"{request.method} {request.url} failed after {count} attempt"
                f"{'s' if count != 1 else ''}: {error}",
                evidence=evidence,
                attempts=attempts,
                decision=decision,
                category=category,
            )
        # The underlying OS / protocol error when there is one; the wire's own error otherwise.
        cause = error.__cause__ if isinstance(error, WireError) else None
        exc.__cause__ = cause if cause is not None else error
        return exc


def _pool_key(origin: Origin, proxy: ProxyConfig | None) -> object:
    """The pool a request to ``origin`` draws from: the origin's own, or (cleartext through a
    proxy, absolute-form targets) the proxy's."""
    if proxy is not None and not origin.tls:
        return ("proxy", proxy.host, proxy.port)
    return origin


def _check_framing(headers: Headers, body: PreparedBody) -> None:
    """The client frames the body itself: a caller's framing headers must not contradict it.

    ``Transfer-Encoding`` is refused (beside the client's own framing it would make the
    request-smuggling shape of RFC 9112 §6.1); ``Content-Length`` is accepted only when it
    equals the length of a body in memory, and then left to the client to send.
    """

    def refuse(message: str) -> InvalidRequest:
        return InvalidRequest(
            message, evidence=Evidence.NOT_SENT, category=FailureCategory.INVALID_REQUEST
        )

    if "transfer-encoding" in headers:
        raise refuse(
            "Transfer-Encoding is set by the client (chunked when a body's length is unknown); "
            "remove the header"
        )
    declared = headers.get("content-length")
    if declared is None:
        return
    if declared.strip() != str(body.known_length):
        raise refuse(
            f"Content-Length {declared!r} does not match the body"
            + (f" ({body.known_length} bytes)" if body.known_length is not None else "")
            + "; the client sets it: remove the header, or give a streamed body's length "
            "with Reopenable(factory, length=N) or StreamFactory(..., length=N)"
        )
    headers.remove("content-length")


def _form_content(
    content: object, data: Mapping[str, Any] | None, files: Mapping[str, Any] | None, json: Any
) -> object:
    """Turn ``data=`` (form fields) and ``files=`` into a body; at most one kind of body."""
    if data is None and files is None:
        return content
    if content is not None or json is not None:
        raise TypeError("pass only one of content=, json= and data=/files=")
    if files is None:
        assert data is not None
        pairs = [
            (str(k), str(item))
            for k, v in data.items()
            for item in (v if isinstance(v, (list, tuple)) else [v])
        ]
        return urlencode(pairs)
    parts: list[tuple[str, Any]] = [(str(k), str(v)) for k, v in (data or {}).items()]
    for name, value in files.items():
        if isinstance(value, tuple):
            filename, body, *rest = value
            parts.append((name, (filename, body, rest[0] if rest else "application/octet-stream")))
        else:
            filename = getattr(value, "name", name)
            parts.append((name, (str(filename).rsplit("/", 1)[-1], value,
                                 "application/octet-stream")))  # fmt: skip
    return Multipart(parts)


_URL_CACHE: dict[str, URL] = {}


def _parse_url(url: str | URL) -> URL:
    """Parse (and validate) a URL once: services call the same few URLs over and over."""
    if isinstance(url, URL):
        return url
    parsed = _URL_CACHE.get(url) if isinstance(url, str) else None
    if parsed is None:
        parsed = URL(url)
        if len(_URL_CACHE) >= 1024:
            _URL_CACHE.clear()
        _URL_CACHE[url] = parsed
    return parsed


_CLOSED_IN_FLIGHT = "the client was closed while the request was in flight"

_AMBIGUOUS_ADVICE = (
    "It was not retried: reconcile with the upstream (look the operation up), or replay it "
    "with the same Idempotency-Key if the server deduplicates on it."
)
