"""The header block of one attempt: the one place per-attempt headers are finalised.

The prepared headers (:mod:`.prepare`, once per call) as the request event hooks left them
(:mod:`trio_retry._observe.hooks`), then ``Host``, the ``auth`` headers, the cookie jar's
``Cookie``, the proxy's credentials and last the trace context (``traceparent``). Anything
that adds a header per attempt adds it in :func:`attempt_headers` and says so in
:func:`fixed_headers`, which tells an attempt whose headers are the same for every call from
one template (``prepare.WireMemo``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._auth import auth_headers
from .._core.evidence import FailureCategory
from .._errors import InvalidRequest
from .._models import Headers, check_header
from .._observe.hooks import HookRequest
from .._wire.progress import AttemptProgress, WireError
from .prepare import PreparedRequest
from .runtime import Runtime

if TYPE_CHECKING:
    from .._proxy import ProxyConfig

__all__ = ["attempt_headers", "fixed_headers"]

_FRAMING = ("transfer-encoding", "content-length")


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
        from .._cookies import cookie_header  # see store_cookies' import in attempt.AttemptRun

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
