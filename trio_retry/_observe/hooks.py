"""Event hooks: caller code run before each attempt is sent and when each response head arrives.

``Client(event_hooks={"request": [...], "response": [...]})``, named as httpx names them. A hook
is a plain function or an ``async def``; it receives a :class:`HookRequest` (request hooks) or
a :class:`HookResponse` (response hooks).

- Request hooks run before **every attempt** (retries and redirect hops included), in order, on
  a fresh copy of the request's headers: what a hook changes applies to that attempt only, so a
  hook that signs or timestamps requests signs each attempt anew. They run before any
  connection is asked for, so nothing has been sent.
- Response hooks run when an attempt's final response head has arrived, before its body is
  read. They may read the head; changing it changes nothing.

Evidence is never bent by a hook. A request hook that raises fails the call ``NOT_SENT`` (stage
``ADMISSION``, category ``INVALID_REQUEST``: ``InvalidRequest`` with the hook's exception as
``__cause__``). The attempt is recorded, with ``bytes_sent == 0``, and it is **not retried**: a
hook is our caller's code, and running it again would most likely fail the same way, so the
engine is not consulted. A response hook that raises fails the call with ``ProtocolFailed``
(``RESPONSE_RECEIVED``: the server did answer; category ``LOCAL_PROTOCOL``), also not retried,
the connection closed (its body was not read). ``trio.Cancelled`` from a hook propagates as
itself, like any outer cancellation.

A hook may not set ``Content-Length`` or ``Transfer-Encoding``: the client frames the body
itself (SPEC §11), so such a change fails the attempt like a raising hook.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, TypedDict

from .._core.evidence import Evidence, FailureCategory, Stage
from .._models import Headers
from .._wire.progress import AttemptProgress, WireError

if TYPE_CHECKING:
    from .._core.idempotency import Idempotency
    from .._models import URL

__all__ = [
    "EventHooks",
    "HookRequest",
    "HookResponse",
    "Hooks",
    "RequestHook",
    "ResponseHook",
    "normalize_event_hooks",
]


class HookRequest:
    """One attempt's request as a request hook sees it.

    ``headers`` may be changed (``set``, ``add``, ``remove``; values are validated as any
    header is); the change is sent with this attempt only. ``attempt`` is the attempt's number
    within its request (1-based; a redirect hop starts again at 1).
    """

    __slots__ = ("attempt", "headers", "idempotency", "method", "url")

    def __init__(
        self, *, method: str, url: URL, headers: Headers, attempt: int, idempotency: Idempotency
    ) -> None:
        self.method = method
        self.url = url
        self.headers = headers
        self.attempt = attempt
        self.idempotency = idempotency

    def __repr__(self) -> str:
        return f"<HookRequest {self.method} {self.url} attempt {self.attempt}>"


class HookResponse:
    """One attempt's response head, as a response hook sees it (the body is not read yet)."""

    __slots__ = ("attempt", "headers", "http_version", "reason", "request_method", "status", "url")

    def __init__(
        self,
        *,
        status: int,
        reason: str,
        headers: Headers,
        http_version: str,
        url: URL,
        request_method: str,
        attempt: int,
    ) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.http_version = http_version
        self.url = url
        self.request_method = request_method
        self.attempt = attempt

    @property
    def status_code(self) -> int:
        return self.status

    def __repr__(self) -> str:
        return f"<HookResponse {self.status} for {self.request_method} {self.url}>"


RequestHook = Callable[[HookRequest], Awaitable[None] | None]
ResponseHook = Callable[[HookResponse], Awaitable[None] | None]


class EventHooks(TypedDict, total=False):
    """``Client(event_hooks=...)``: lists of request and response hooks, run in order."""

    request: Sequence[RequestHook]
    response: Sequence[ResponseHook]


_FRAMING = ("content-length", "transfer-encoding")


class Hooks:
    """The validated hooks of one client (built only when there is at least one)."""

    __slots__ = ("request", "response")

    def __init__(self, request: tuple[RequestHook, ...], response: tuple[ResponseHook, ...]):
        self.request = request
        self.response = response

    async def before_attempt(self, view: HookRequest, progress: AttemptProgress) -> Headers:
        """Run the request hooks on ``view``; return the headers to send.

        Raises :class:`WireError` (``NOT_SENT`` at ``ADMISSION``, ending the call, the hook's
        exception as ``__cause__``) when a hook raises or sets a framing header; nothing has
        been sent then. Cancellation inside a hook propagates unchanged.
        """
        for hook in self.request:
            try:
                result = hook(view)
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:
                raise _request_hook_failed(hook, view, progress, f"raised {exc!r}") from exc
        headers = view.headers
        if not isinstance(headers, Headers):
            raise _request_hook_failed(
                self.request[-1], view, progress, "replaced HookRequest.headers; change it in place"
            )
        for name in _FRAMING:
            if name in headers:
                raise _request_hook_failed(
                    self.request[-1],
                    view,
                    progress,
                    f"set {name}, which the client sets itself from the body",
                )
        return headers

    async def after_head(self, view: HookResponse, progress: AttemptProgress) -> None:
        """Run the response hooks; a raising hook becomes a :class:`WireError`
        (``RESPONSE_RECEIVED``, ``LOCAL_PROTOCOL``, ending the call, cause = the exception)."""
        for hook in self.response:
            try:
                result = hook(view)
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:
                raise WireError(
                    f"the response event hook {_name(hook)} raised {exc!r} on the "
                    f"{view.status} response to {view.request_method} {view.url}",
                    stage=progress.stage,
                    evidence=Evidence.RESPONSE_RECEIVED,
                    category=FailureCategory.LOCAL_PROTOCOL,
                    ends_call=True,
                ) from exc

    def __repr__(self) -> str:
        return f"<Hooks {len(self.request)} request, {len(self.response)} response>"


def _name(hook: object) -> str:
    return getattr(hook, "__qualname__", None) or repr(hook)


def _request_hook_failed(
    hook: object, view: HookRequest, progress: AttemptProgress, what: str
) -> WireError:
    # Stage ADMISSION whatever the progress says: hooks run before a connection is asked for.
    del progress
    return WireError(
        f"the request event hook {_name(hook)} {what} before attempt {view.attempt} of "
        f"{view.method} {view.url}; nothing was sent",
        stage=Stage.ADMISSION,
        evidence=Evidence.NOT_SENT,
        category=FailureCategory.INVALID_REQUEST,
        ends_call=True,
    )


def normalize_event_hooks(value: object) -> Hooks | None:
    """Validate ``Client(event_hooks=...)``; ``None`` when there is no hook at all (so the
    client's hot path checks one attribute). Raises ``TypeError``/``ValueError`` naming the
    option for anything else than ``{"request": [callables], "response": [callables]}``."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(
            "event_hooks must be a dict like {'request': [hook, ...], 'response': [hook, ...]}, "
            f"got {type(value).__name__}"
        )
    unknown = set(value) - {"request", "response"}
    if unknown:
        raise ValueError(
            f"event_hooks has unknown keys {sorted(map(str, unknown))}; accepted: 'request', "
            "'response'"
        )
    lists: dict[str, tuple[Callable[..., object], ...]] = {}
    for key in ("request", "response"):
        hooks = value.get(key, ())
        if callable(hooks) or isinstance(hooks, (str, bytes)) or not isinstance(hooks, Sequence):
            raise TypeError(f"event_hooks[{key!r}] must be a list of callables, got {hooks!r}")
        for hook in hooks:
            if not callable(hook):
                raise TypeError(f"event_hooks[{key!r}] holds {hook!r}, which is not callable")
        lists[key] = tuple(hooks)
    if not lists["request"] and not lists["response"]:
        return None
    return Hooks(lists["request"], lists["response"])  # type: ignore[arg-type]
