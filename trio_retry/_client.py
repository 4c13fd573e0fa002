"""The client facade: configuration, lifecycle, and the typed public verbs.

``Client(...)`` takes its options from their one table (:class:`~._call.client_options.
ClientOptions`), then checks and freezes them once (:class:`~._call.config.ClientConfig`);
``async with`` opens it (a nursery for HTTP/2 readers, a pool); each verb prepares a request
from its options (:mod:`._call.prepare`, before any I/O) and runs it through the retry loop
(:mod:`._call.loop`). Everything a call does beyond that lives in :mod:`trio_retry._call`.

Outer cancellation is never caught: only the client's own scopes (the call deadline, the client
closing) are turned into errors, and each of those carries the evidence of the stage reached.
"""

from __future__ import annotations

import inspect
import math
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from functools import partial, wraps
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import trio

from ._call.client_options import AttemptCallback, ClientOptions, RefreshableAuth
from ._call.config import ClientConfig, configure
from ._call.request_options import RequestOptions
from ._call.runtime import Lifecycle, Runtime
from ._call.streaming import StreamCall
from ._decoding import ACCEPT_ENCODING
from ._errors import ClientStateError
from ._models import URL, Headers, Origin, Response
from ._wire.pool import ConnectionPool

if TYPE_CHECKING:
    from http.cookiejar import CookieJar

    from typing_extensions import Unpack

    from ._call.answer import Closer
    from ._call.body import BLOCK_CLOSED
    from ._call.loop import send, send_following
    from ._call.prepare import PreparedRequest, Templates, prepare, prepare_plain
    from ._call.resilience import UpstreamStatus
    from ._call.sse import EventStream

__all__ = ["AttemptCallback", "Client", "RefreshableAuth", "RequestOptions"]

USER_AGENT = "trio_retry/0.1"


_P = ParamSpec("_P")
_S = TypeVar("_S")


def _takes(
    table: Callable[_P, ClientOptions],
) -> Callable[[Callable[[_S, ClientOptions], None]], Callable[Concatenate[_S, _P], None]]:
    """``__init__(self, options)`` made to take ``table``'s fields as its keyword arguments:
    a type checker sees (and checks at the call site) the table's names, types and defaults,
    and so do ``inspect.signature`` and ``help()``; the wrapper builds the table and hands it
    on. An unknown keyword raises the ``TypeError`` of :func:`_unknown_option` (the nearest
    option, or what other clients' name means here) instead of Python's own: looked for only
    once building the table raised ``TypeError``, so a correct construction pays nothing for
    it."""
    signature = inspect.signature(table)
    names = sorted(signature.parameters)

    def decorate(init: Callable[[_S, ClientOptions], None]) -> Callable[Concatenate[_S, _P], None]:
        @wraps(init)
        def takes(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> None:
            if args:
                raise TypeError(
                    f"Client() takes keyword arguments only, got {len(args)} positional "
                    f"argument{'s' if len(args) != 1 else ''}"
                )
            try:
                options = table(*args, **kwargs)
            except TypeError:
                unknown = sorted(kwargs.keys() - set(names))
                if unknown:
                    raise _unknown_option(unknown[0], "Client()", names, _CLIENT_HINTS) from None
                raise
            init(self, options)

        self_parameter = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        takes.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[self_parameter, *signature.parameters.values()], return_annotation=None
        )
        return takes

    return decorate


class Client:
    """A Trio HTTP client whose retries are decided on execution evidence.

    Use it only inside ``async with Client(...) as client:``. Leaving the block closes every
    connection and stops every task the client started; a call still in flight ends promptly
    with an error carrying the evidence of the stage it reached. Options are described in
    docs/reference.md and SPEC §2/§10; a wrong one raises ``TypeError`` or ``ValueError`` here.
    """

    @_takes(ClientOptions)
    def __init__(self, options: ClientOptions) -> None:
        """Takes every option of :class:`~._call.client_options.ClientOptions` as a keyword
        argument (their one table: names, types and defaults); a wrong one raises
        ``TypeError`` or ``ValueError`` here, naming it (``_call/config.py``)."""
        self._config = config = configure(options)
        #: Headers sent with every call; may be changed at any time (later calls see it).
        self._templates: Templates = {}  # calls without options (prepare_plain)
        self.headers = Headers(
            [("User-Agent", USER_AGENT), ("Accept", "*/*"), ("Accept-Encoding", ACCEPT_ENCODING)]
        )
        given = Headers(config.headers, validate=False)  # (checked by configure)
        for name in given:
            self.headers.remove(name)
        for name, value in config.headers:
            self.headers.add(name, value)
        #: The cookie jar (``cookies=True`` or your own), or ``None``.
        self.cookies: CookieJar | None = config.cookies
        self._rt = Runtime(config, self.cookies)
        self._background_done = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._nursery_cm: AbstractAsyncContextManager[trio.Nursery] | None = None

    @property
    def config(self) -> ClientConfig:
        """The client's options, normalised and frozen (read-only)."""
        return self._config

    # --- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> Client:
        if self._rt.lifecycle is not Lifecycle.NEW:
            raise ClientStateError("a Client can be entered only once; create a new one")
        _load_the_call_loop()
        # Two nurseries: the outer one (entered here, exited only in __aexit__) encloses the
        # caller's code, so it is never cancelled while that code runs; the inner one holds
        # the background tasks (HTTP/2 readers) and is what aclose() cancels. So aclose() can
        # be awaited anywhere inside the block without cancelling the caller or exiting a
        # nursery out of order.
        self._nursery_cm = trio.open_nursery()
        outer = await self._nursery_cm.__aenter__()
        try:
            self._nursery = await outer.start(self._keep_background)
            self._rt.open(self._nursery)
            if self._config.instrumentation is not None:
                self._config.instrumentation.watch_pool(self._rt.pool)
            await self._rt.connector.recall()  # state=: what earlier processes learned
        except BaseException:
            # (a step failed or was cancelled: close what was opened, the nurseries in order)
            await self.__aexit__(None, None, None)
            raise
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
        try:
            await self.aclose()
        finally:
            # Also when closing failed or was cancelled: aclose() has ended the background
            # either way, and a nursery left open would corrupt trio's nursery stack.
            if self._nursery_cm is not None:
                # The caller's own exception (if any) is not passed in: the nursery must never
                # wrap it in an ExceptionGroup. Our background tasks never raise.
                cm, self._nursery_cm = self._nursery_cm, None
                await cm.__aexit__(None, None, None)

    async def aclose(self) -> None:
        """Close the client: stop admitting calls, end in-flight ones, close every connection.

        Calls still in flight end with an error carrying the evidence of their stage; when
        this returns, the client's background tasks have ended. Safe to call twice, and from
        inside the ``async with`` block. With ``state=``, the file is written last, shielded
        from cancellation: the old file or the new one, never half of one. Cancelled part-way,
        or if a step fails, the background tasks have still ended when it raises, and
        ``async with`` still leaves its nurseries in order.
        """
        rt = self._rt
        if rt.lifecycle is Lifecycle.CLOSED:
            return
        rt.lifecycle = Lifecycle.CLOSED
        if self._config.instrumentation is not None:
            self._config.instrumentation.forget_pool(rt.pool)
        rt.drain()
        for scope in list(rt.scopes):
            scope.cancel()
        try:
            await rt.connector.settle()  # state=: resumed HTTP/3 connections' next tickets
        finally:
            # (also when settling failed or the caller's cancellation came in it)
            rt.pool.close()
            if self._nursery is not None:
                self._nursery.cancel_scope.cancel()
                with trio.CancelScope(shield=True):
                    await self._background_done.wait()
        await rt.connector.remember()  # state=: for the next process (shielded, atomic)

    def drain(self) -> None:
        """Stop admitting calls; calls waiting in backoff end now; in-flight attempts finish.

        A call in backoff ends with its last outcome and ``RetryDenied.runtime_draining()``.
        """
        self._rt.drain()

    @property
    def draining(self) -> bool:
        """Whether ``drain()`` (or ``aclose()``) was called."""
        return self._rt.draining

    def __repr__(self) -> str:
        rt = self._rt
        state = str(rt.lifecycle)
        if rt.draining and rt.lifecycle is Lifecycle.OPEN:
            state += ", draining"
        pool = rt.pool
        return (
            f"<Client {state}; {rt.calls} calls; pool: {pool.active_count} active, "
            f"{pool.idle_count} idle, {pool.waiting} waiting>"
        )

    @property
    def pool(self) -> ConnectionPool:
        """The connection pool (for inspection: its repr summarises its state)."""
        return self._rt.pool

    def upstream_status(self, origin: str) -> UpstreamStatus:
        """The breaker, throttle and hedging state of ``origin`` (``"https://host[:port]"``)
        now, as a snapshot (SPEC §15). An origin not called yet reports its settings' initial
        state."""
        return self._rt.upstreams.get(Origin.parse(origin)).guard.status()

    # --- public calls ----------------------------------------------------------------------

    async def request(
        self, method: str, url: str | URL, **options: Unpack[RequestOptions]
    ) -> Response:
        """Send ``method url``, retrying as the engine allows; return the final response.

        Options (:class:`RequestOptions`, all keyword-only): ``headers``, ``params``,
        ``content``, ``data`` (form fields), ``files``, ``json``, ``deadline``,
        ``idempotency``, ``idempotency_key``, ``retry``, ``follow_redirects``, ``hedging``
        (a ``Hedging`` for this call, ``False`` to turn the upstream's off). A bad option
        raises ``InvalidRequest`` (or ``TypeError`` for an unknown one) before any I/O.

        Raises ``HttpAmbiguousExecutionError`` when a non-idempotent request may have run, a
        ``RequestFailed`` subclass for other failures. On outer cancellation
        ``trio.Cancelled`` propagates unchanged: an interrupted HTTP/1.1 connection is closed
        (never reused), an interrupted HTTP/2 stream is reset, and the pool stays consistent.
        """
        return (await self._call(method, url, options))[0]

    def _call(
        self, method: str, url: str | URL, options: RequestOptions
    ) -> Coroutine[Any, Any, tuple[Response, Closer | None]]:
        """:meth:`request` with its options as one dict: the verbs' path, so that
        ``get(url, **options)`` does not unpack and pack them again on the way. A plain method
        that returns the retry loop's coroutine, for the verb to await (the response is the
        first of its pair): no frame of its own while the call is in flight (issue #41)."""
        request = self._prepare(method, url, options)
        if request.follow_redirects:
            return send_following(self._rt, request, streaming=False)
        return send(self._rt, request, streaming=False, first_hop=True)

    async def get(self, url: str | URL, **options: Unpack[RequestOptions]) -> Response:
        """``request("GET", url, ...)``: retried on any evidence that allows it (GET is safe).
        Cancellation: as :meth:`request`."""
        return (await self._call("GET", url, options))[0]

    async def head(self, url: str | URL, **options: Unpack[RequestOptions]) -> Response:
        """``request("HEAD", url, ...)``; the response has no body. Cancellation: as
        :meth:`request`."""
        return (await self._call("HEAD", url, options))[0]

    async def options(self, url: str | URL, **options: Unpack[RequestOptions]) -> Response:
        """``request("OPTIONS", url, ...)``. Cancellation: as :meth:`request`."""
        return (await self._call("OPTIONS", url, options))[0]

    async def post(self, url: str | URL, **options: Unpack[RequestOptions]) -> Response:
        """``request("POST", url, ...)``: not idempotent unless ``idempotency_key`` or
        ``idempotency`` says so, so a POST that may have run raises
        ``HttpAmbiguousExecutionError`` instead of being sent again. Cancellation: as
        :meth:`request` (the server may have received the request)."""
        return (await self._call("POST", url, options))[0]

    async def put(self, url: str | URL, **options: Unpack[RequestOptions]) -> Response:
        """``request("PUT", url, ...)`` (idempotent by default). Cancellation: as
        :meth:`request`."""
        return (await self._call("PUT", url, options))[0]

    async def patch(self, url: str | URL, **options: Unpack[RequestOptions]) -> Response:
        """``request("PATCH", url, ...)``: not idempotent unless told otherwise (as
        :meth:`post`). Cancellation: as :meth:`request`."""
        return (await self._call("PATCH", url, options))[0]

    async def delete(self, url: str | URL, **options: Unpack[RequestOptions]) -> Response:
        """``request("DELETE", url, ...)`` (idempotent by default). Cancellation: as
        :meth:`request`."""
        return (await self._call("DELETE", url, options))[0]

    def stream(
        self, method: str, url: str | URL, **options: Unpack[RequestOptions]
    ) -> AbstractAsyncContextManager[Response]:
        """``async with client.stream("GET", url) as r: async for chunk in r.aiter_bytes()``.

        Takes the options of :meth:`request`. Retries happen only before the response is
        handed over; once the caller has it, a broken body raises (``PARTIAL_RESPONSE``) and
        is never retried. Leaving the block (cancellation included) returns the connection if
        the body was read to the end, and closes it otherwise. Nothing is sent before
        ``async with`` enters; ``await``, ``async for`` or ``with`` on it is a ``TypeError``
        that says to use ``async with``.
        """
        return StreamCall(partial(self._stream, method, url, options))

    def sse(
        self, url: str | URL, *, method: str = "GET", **options: Unpack[RequestOptions]
    ) -> AbstractAsyncContextManager[EventStream]:
        """``async with client.sse(url) as events: async for event in events``: the
        server-sent events of ``url`` (WHATWG HTML §9.2), as :class:`SSEEvent` values,
        reopened with ``Last-Event-ID`` where the stream broke (SPEC §18; ``_call/sse.py``).

        Takes the options of :meth:`request`; they are checked here, before anything is sent.
        No call deadline applies unless ``deadline=`` is given (then it bounds the whole
        stream); the client's read bound (``StageTimeouts.read``) applies between bytes, so a
        stalled stream is reopened. A ``204`` ends the iteration; an answer that is not a
        ``200`` with ``text/event-stream`` raises ``ProtocolFailed``. A request whose replay is
        not harmless (``POST`` without ``idempotency_key``) is not reopened after a break."""
        request = self._prepare(method, url, options)  # (checked now: errors before I/O)
        from ._call.sse import EventStream  # (the event streams' machinery: on the first)

        given = options.get("deadline")
        base = Headers(options.get("headers"))

        def opener(headers: Mapping[str, str], seconds: float) -> StreamCall:
            merged = base.copy()
            for name, value in headers.items():
                merged.set(name, value)
            call: RequestOptions = {**options, "headers": merged, "deadline": seconds}
            return StreamCall(partial(self._stream, method, url, call))

        return EventStream(
            self._rt,
            opener,
            f"{request.method} {format(request.url)}",
            request.url.origin,
            request.idempotency,
            request.retry,
            request.started + given if given is not None else math.inf,
        )

    @asynccontextmanager
    async def _stream(
        self, method: str, url: str | URL, options: RequestOptions
    ) -> AsyncIterator[Response]:
        request = self._prepare(method, url, options)
        response, closer = await send_following(self._rt, request, streaming=True)
        try:
            yield response
        finally:
            if closer is not None:
                closer(BLOCK_CLOSED)

    def _prepare(self, method: str, url: str | URL, options: RequestOptions) -> PreparedRequest:
        """The request of one call, checked before any I/O (the client must be open)."""
        lifecycle = self._rt.lifecycle
        if lifecycle is not Lifecycle.OPEN:
            if lifecycle is Lifecycle.NEW:
                raise ClientStateError(
                    "the Client is not open: use it inside `async with trio_retry.Client() as "
                    "client:` (it owns a nursery and connections that must be closed)"
                )
            raise ClientStateError("the Client is closed: create a new one inside `async with`")
        if type(url) is str and (not options or (len(options) == 1 and "deadline" in options)):
            request = prepare_plain(
                self._config,
                self.headers,
                method,
                url,
                self._rt.now,
                self._templates,
                options.get("deadline"),
            )
        else:
            try:
                request = prepare(self._config, self.headers, method, url, self._rt.now, **options)
            except TypeError:
                # Checked only once the call failed: a correct call pays nothing for this.
                unknown = options.keys() - _OPTION_NAMES
                if unknown:
                    raise _unknown_option(sorted(unknown)[0]) from None
                raise
        if request.idempotency_key is not None:  # never sent with another payload
            self._rt.keys.check(request, request.started)
        return request


#: Every per-call option (``RequestOptions``' keys).
_OPTION_NAMES = RequestOptions.__optional_keys__ | RequestOptions.__required_keys__

#: The code of each public method that takes the call options, and the name shown for it.
_PUBLIC_CODES = {
    getattr(Client, name).__code__: f"Client.{name}()"
    for name in ("request", "get", "head", "options", "post", "put", "patch", "delete")
}
_OPTIONS = sorted(_OPTION_NAMES)
#: Other clients' names for an option (httpx, requests), and what to say instead: of a call,
#: and of the client.
_HINTS = {
    "timeout": "'deadline' (seconds for the whole call, retries and backoffs included; each "
    "stage's own bound is Client(stage_timeouts=StageTimeouts(...)))",
    "allow_redirects": "'follow_redirects'",
    # TLS, proxies and transports are the client's: one call cannot change them.
    "verify": "Client(verify=...) (TLS settings are the client's, not a call's)",
    "ssl": "Client(verify=...) or Client(ssl_context=...) (TLS settings are the client's, "
    "not a call's)",
    "cert": "Client(cert=...) (TLS settings are the client's, not a call's)",
    "proxy": "Client(proxy=...) (a proxy is the client's, not a call's)",
    "proxies": "Client(proxy=...) (a proxy is the client's, not a call's)",
    "stream": "`async with client.stream(method, url) as response:` (a streamed response is "
    "a call of its own)",
    "raise_for_status": "response.raise_for_status() (a status of 400 or above is returned, "
    "not raised)",
}
_CLIENT_HINTS = {
    "timeout": "'deadline' (seconds for each whole call, retries and backoffs included) or "
    "'stage_timeouts' (StageTimeouts(connect=, tls=, write=, first_byte=, read=): each stage's "
    "own bound)",
    "limits": "'max_connections', 'max_connections_per_origin' and 'keepalive_expiry' (the "
    "pool's limits are options of their own)",
    "proxies": "'proxy' (one proxy URL; trust_env=True reads the environment's)",
    "mounts": "'upstreams' (settings per origin, {\"https://host\": Upstream(...)}) or "
    "'transport' (one transport for every origin)",
    "app": "'transport' (trio_retry.testing.MockTransport answers calls in-process)",
    "http1": "'http2' (HTTP/1.1 is always offered; http2=False offers nothing else)",
    "connector": "'max_connections', 'max_connections_per_origin' and 'keepalive_expiry' "
    "(the pool's limits are options of their own)",
    "verify_ssl": "'verify'",
    "cookie_jar": "'cookies' (True, or an http.cookiejar.CookieJar)",
    "json_serialize": "'json_dumps'",
    "raise_for_status": "response.raise_for_status() on each response (a status of 400 or "
    "above is returned, not raised)",
}
_PUBLIC_CODES[Client._stream.__wrapped__.__code__] = "Client.stream()"  # type: ignore[attr-defined]


def _load_the_call_loop() -> None:
    """Import a call's path and bind its entry points here, once per process, when the first
    client is entered: the retry loop (:mod:`._call.loop`: attempts, answers, resumption,
    hedging), the preparation of a request (:mod:`._call.prepare`: bodies, redirects, auth,
    idempotency keys) and the body reader (:mod:`._call.body`). Every call passes
    ``_prepare``, which refuses a client not entered, before it reaches them. ``from
    trio_retry import Client`` alone imports none of them (tests/test_startup.py), and a call
    pays a plain global lookup for them, as for any import (rejected: an import statement in
    each verb, a dictionary lookup and a call per request on the hot path)."""
    global BLOCK_CLOSED, prepare, prepare_plain, send, send_following
    from ._call.body import BLOCK_CLOSED
    from ._call.loop import send, send_following
    from ._call.prepare import prepare, prepare_plain


def _unknown_option(
    name: str,
    method: str | None = None,
    options: Sequence[str] = _OPTIONS,
    hints: Mapping[str, str] = _HINTS,
) -> TypeError:
    """The ``TypeError`` for an option ``method`` does not take, naming the public method
    (by default the call the caller used, found on the stack: only on this error path) and
    the nearest of ``options``, or what ``hints`` says of another client's name for one."""
    if method is None:
        method = "Client.request()"
        frame: FrameType | None = sys._getframe(1)  # _prepare, then _call or _stream, then ...
        for _ in range(8):
            if frame is None:
                break
            if frame.f_code in _PUBLIC_CODES:
                method = _PUBLIC_CODES[frame.f_code]
                break
            frame = frame.f_back
    message = f"{method} got an unexpected keyword argument {name!r}"
    hint = hints.get(name)
    if hint is None:
        import difflib  # only on this error path: not worth its import time at start-up

        # Another client's name misspelt ('timout') is that name, not the nearest option; a
        # name only as near as 'mounts' is to 'timeout' is neither (a closer bar for hints).
        near_hint = difflib.get_close_matches(name, hints, n=1, cutoff=0.8)
        close = near_hint or difflib.get_close_matches(name, options, n=1)
        hint = (hints.get(close[0]) or repr(close[0])) if close else None
    if hint is not None:
        return TypeError(f"{message}; did you mean {hint}?")
    return TypeError(f"{message}; the options are: {', '.join(options)}")
