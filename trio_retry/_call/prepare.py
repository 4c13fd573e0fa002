"""Options -> :class:`PreparedRequest`: everything about a call decided before any I/O.

Pure apart from reading its arguments: no socket, no clock of its own (the caller passes one,
read only when a deadline applies: most calls have none), no
await. A bad option raises here, so it can never put a byte on the wire: ``InvalidRequest``
(evidence ``NOT_SENT``, category ``INVALID_REQUEST``) for a bad value, ``TypeError`` for an
unknown option. The next request of a redirect chain is prepared here too
(:func:`prepare_redirect`), from the previous one and the response's ``Location``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeAlias

from .._auth import BasicAuth, RequestAuth, netrc_auth
from .._body import PreparedBody, form_body, prepare_body
from .._core.checks import described
from .._core.engine import RetryDenied
from .._core.evidence import Evidence, FailureCategory
from .._core.idempotency import IDEMPOTENCY_KEY_HEADER, Idempotency, classify_idempotency
from .._core.policy import RetryPolicy
from .._core.replay import Body
from .._core.secrecy import withheld
from .._errors import InvalidRequest, ProtocolFailed, RequestFailed
from .._models import URL, Headers, HeaderTypes, shown_url
from .._observe.otel import CallTrace
from .._redirects import (
    CREDENTIAL_HEADERS,
    InvalidLocation,
    body_headers,
    redirect_method,
    resolve_location,
)
from .._url import is_absolute, merge
from .client_options import AuthTypes, RefreshableAuth
from .config import ClientConfig
from .keys import call_key
from .options import (
    OptionError,
    check_bool,
    check_deadline,
    check_fields,
    check_idempotency,
    check_idempotency_key,
    check_reconcile,
    check_retry,
    shown,
)
from .request_options import Files, FormData, QueryParams, RequestOptions

if TYPE_CHECKING:
    from .._core.hedging import Hedging
    from .._models import Response
    from .._reconcile import Reconciler
    from .._wire.exchange import WireRequest

__all__ = [
    "PreparedRequest",
    "RequestOptions",
    "Templates",
    "check_framing",
    "prepare",
    "prepare_plain",
    "prepare_redirect",
]


@dataclass(kw_only=True, slots=True)
class PreparedRequest:
    """One request of a call, ready for its attempts: validated, headers merged, body framed.

    ``deadline`` is absolute Trio time (``inf`` for none). ``apply_auth`` is False once a
    redirect left the original origin (credentials are never sent to another origin).

    No field changes once the request is prepared: the next request of a call (a template's
    next call, a redirect hop) is a new value (:func:`_renew`, ``dataclasses.replace``).
    Slotted: every call in flight holds one, and a ``__dict__`` would be one object more
    for each of thousands of calls at once, visited by every full pass of the garbage
    collector (issue #41). Not frozen: :func:`_renew` builds a call from its template field
    by field without ``__init__``, and :func:`prepare_plain` gives a template its
    ``wire_memo``, a value that says "immutable" while being written. ``replace``, the frozen
    way, runs ``__init__`` for every call from a template (and a frozen ``__init__`` sets each
    field with ``object.__setattr__``).
    """

    method: str
    url: URL
    headers: Headers
    body: PreparedBody
    idempotency: Idempotency
    idempotency_key: str | None
    retry: RetryPolicy
    deadline: float
    follow_redirects: bool = False
    apply_auth: bool = True
    #: This call's credentials: ``auth=`` of the call, else the client's (``None``: none).
    auth: AuthTypes | None = None
    #: This call's ``cookies=`` (name, value), sent besides (and over) the jar's.
    cookies: tuple[tuple[str, str], ...] = ()
    #: Trio time at which the call started (``Response.elapsed`` counts from it).
    started: float = 0.0
    hedging: Hedging | bool | None = None  # a Hedging, False (off), None (the upstream's)
    #: Continue a broken body with a range request (``_call/resume.py``): ``None``, the
    #: upstream's ``Upstream.resume``.
    resume: bool | None = None
    #: The call's telemetry, shared by its redirect hops (``replace`` keeps it); ``None``
    #: without ``telemetry=``.
    trace: CallTrace | None = None
    #: A template's (:func:`prepare_plain`), shared by the calls made from it; else ``None``.
    wire_memo: WireMemo | None = None
    #: This call's ``reconcile=`` (``None``: its upstream's, if any).
    reconcile: Reconciler | None = None
    #: The key was generated for this call (``True``, or ``"auto"``): never a template's.
    key_generated: bool = False

    def _begin(
        self, started: float, deadline: float, trace: CallTrace | None, auth: AuthTypes | None
    ) -> None:
        """Set the fields that are the call's own when it is made from a template
        (:func:`_renew`): a value's own fields, its ``deadline`` among them, not a wait's
        (tests/test_time_owner.py)."""
        self.started = started
        self.deadline = deadline
        self.trace = trace
        self.auth = auth

    def naming(self) -> str:
        """``"METHOD URL"``, for a message (a bulkhead's rejection). A method, passed bound
        where it may be needed: a lambda in the attempt's coroutine gave its frame a cell per
        variable read, held by every call in flight (issue #41)."""
        return f"{self.method} {self.url}"


class WireMemo:
    """The wire form of a template's request, kept for the calls made from it.

    A call without options sends what its template says, byte for byte, unless something
    adds a header per attempt (an event hook, auth, cookies, proxy credentials, the trace
    context: see ``attempt.fixed_headers``). Its first such attempt builds the
    :class:`~trio_retry._wire.exchange.WireRequest` (headers encoded, ``Host`` added) and
    leaves it here; the next ones send that same object, on which the HTTP/1.1 connection
    keeps the request's encoded form. A memo belongs to one template: a new template (the
    client headers changed, ``Headers.version``) starts with an empty one, and a redirect hop
    has none."""

    __slots__ = ("request",)

    def __init__(self) -> None:
        self.request: WireRequest | None = None


_SPECIAL_HEADERS = frozenset({"transfer-encoding", "content-length", IDEMPOTENCY_KEY_HEADER})

_new = object.__new__


def _renew(
    template: PreparedRequest,
    *,
    started: float,
    deadline: float,
    trace: CallTrace | None,
    auth: AuthTypes | None,
) -> PreparedRequest:
    """A call's request from its template: ``dataclasses.replace`` of what differs between
    two calls without options, without its ``__init__`` round trip (the fields were checked
    when the template was built). Every field is set here, by name (the call's own four by
    :meth:`PreparedRequest._begin`): a field added to
    :class:`PreparedRequest` must be added here too (tests/call/test_templates.py compares
    the result with ``replace`` field by field: a slot left unset fails it)."""
    request: PreparedRequest = _new(PreparedRequest)
    request.method = template.method
    request.url = template.url
    request.headers = template.headers
    request.body = template.body
    request.idempotency = template.idempotency
    request.idempotency_key = template.idempotency_key
    request.retry = template.retry
    request.follow_redirects = template.follow_redirects
    request.apply_auth = template.apply_auth
    request.cookies = template.cookies
    request.hedging = template.hedging
    request.resume = template.resume
    request.wire_memo = template.wire_memo
    request.reconcile = template.reconcile
    request.key_generated = template.key_generated
    request._begin(started, deadline, trace, auth)
    return request


#: Requests of calls without options, by ``(method, url)``, each with the ``version()`` of
#: the client headers it was built from.
Templates: TypeAlias = "dict[tuple[str, str], tuple[object, PreparedRequest]]"
_MAX_TEMPLATES = 256


def prepare_plain(
    config: ClientConfig,
    client_headers: Headers,
    method: str,
    url: str,
    clock: Callable[[], float],
    templates: Templates,
    deadline: object = None,
) -> PreparedRequest:
    """:func:`prepare` of a call without options but perhaps ``deadline=``: the same
    request, built once per ``(method, url)`` while the client headers stay unchanged
    (``Headers.version``); each call gets its own start, deadline (its ``deadline=``, else
    the client's), telemetry and (netrc being re-read) credentials.
    At most ``_MAX_TEMPLATES`` are kept (all dropped when full: a client calling many URLs
    pays what it paid before, one prepare per call)."""
    if deadline is not None:
        try:
            deadline = check_deadline(deadline)
        except OptionError as exc:
            raise _invalid(str(exc)) from None
    version = client_headers.version()
    key = (method, url)
    entry = templates.get(key)
    if entry is None or entry[0] is not version:
        request = prepare(config, client_headers, method, url, clock)
        if request.key_generated:
            return request  # (its key is its own: no template)
        request.wire_memo = WireMemo()  # still being prepared: no call has seen it yet
        if len(templates) >= _MAX_TEMPLATES:
            templates.clear()
        templates[key] = entry = (version, request)
        if deadline is None:
            return request
        # (the template holds no deadline=: this call's is set below)
    template = entry[1]
    now = clock()
    seconds = config.deadline if deadline is None else deadline
    return _renew(
        template,
        started=now,
        deadline=now + seconds if seconds is not None else math.inf,
        trace=config.instrumentation.call() if config.instrumentation is not None else None,
        auth=template.auth
        if config.auth is not None or not config.trust_env
        else _call_auth(config, None, template.url),
    )


def _is_hedging(value: object) -> bool:
    """Whether ``value`` is a ``Hedging`` (``True`` is not). Imported here, by a call that
    passes ``hedging=``: ``_core.hedging`` is start-up time most programs never need."""
    from .._core.hedging import Hedging

    return isinstance(value, Hedging)


def prepare(
    config: ClientConfig,
    client_headers: Headers,
    method: str,
    url: str | URL,
    clock: Callable[[], float],
    *,
    headers: HeaderTypes = None,
    params: QueryParams | None = None,
    content: Body | None = None,
    data: FormData | None = None,
    files: Files | None = None,
    json: object = None,
    deadline: float | None = None,
    idempotency: Idempotency | None = None,
    idempotency_key: str | bool | None = None,
    retry: RetryPolicy | None = None,
    follow_redirects: bool | None = None,
    cookies: Mapping[str, str] | None = None,
    auth: AuthTypes | tuple[str, str] | None = None,
    hedging: Hedging | bool | None = None,
    resume: bool | None = None,
    reconcile: Reconciler | None = None,
) -> PreparedRequest:
    """The request ``method url`` with the call's options over the client's ``config`` and
    ``client_headers`` (read now: a later change to ``client.headers`` applies to later calls).
    """
    if not isinstance(method, str) or not method.isascii() or not method.isalpha():
        raise _invalid(_bad_method(method))
    method = method.upper()
    if hedging is not None and hedging is not False and not _is_hedging(hedging):
        raise TypeError(
            "hedging= must be a Hedging, False (no hedging for this call) or None (the "
            f"upstream's setting), got {hedging!r}"
        )
    # The options that most calls leave out cost one ``is None`` each here.
    try:
        if deadline is not None:
            deadline = check_deadline(deadline)
        if idempotency is not None:
            idempotency = check_idempotency(idempotency)
        if idempotency_key is not None:
            idempotency_key = check_idempotency_key(idempotency_key)
        if retry is not None:
            retry = check_retry(retry)
        if follow_redirects is not None:
            check_bool(follow_redirects, "follow_redirects")
        if resume is not None:
            check_bool(resume, "resume")
        if params is not None:
            check_fields(params, "params", none_allowed=True)
        if data is not None:
            check_fields(data, "data", none_allowed=False)
        if reconcile is not None:
            check_reconcile(reconcile)
        if files is not None and not isinstance(files, Mapping):
            raise OptionError(
                f"files must be a mapping of field names to files, got {shown(files)}", "type"
            )
    except OptionError as exc:
        raise _invalid(str(exc)) from None
    base_url = config.base_url
    if isinstance(url, str) and base_url is not None and not is_absolute(url):
        full = merge(base_url, url)  # the base path is a prefix (httpx's rule)
    else:
        full = _parse_url(url)
    full = full.with_params(_merged_params(config.params, params))
    merged = client_headers.copy()
    if headers:
        given = Headers(headers)
        for name in given:
            merged.remove(name)
        for name, value in given.multi_items():
            merged.add(name, value)
    # One set operation tells whether the headers need the framing or key checks below.
    special = merged.has_any(_SPECIAL_HEADERS)
    header_key = special and IDEMPOTENCY_KEY_HEADER in merged
    key, generated = call_key(config, idempotency_key, header_key, full.origin, method, idempotency)
    if key is not None:
        merged.set("Idempotency-Key", key)
    elif header_key:
        # A key given as a header is held to the rules of idempotency_key: an empty one would
        # make the request count as idempotent with nothing a server could deduplicate on.
        key = merged[IDEMPOTENCY_KEY_HEADER]
        try:
            check_idempotency_key(key, "the Idempotency-Key header")
        except OptionError as exc:
            raise _invalid(str(exc)) from None
    try:
        source: object = content
        if data is not None or files is not None:
            source = form_body(content, data, files, json)
        body = prepare_body(source, json, json_dumps=config.json_dumps)
        if data is not None and files is None and body.content_type is None:
            body.content_type = "application/x-www-form-urlencoded"
    except UnicodeEncodeError as exc:  # a lone surrogate in a str body
        raise _invalid(
            f"the request body (content=, json= or data=) cannot be encoded as UTF-8: {exc}"
        ) from None
    except (TypeError, ValueError) as exc:  # the body's kind, or json_dumps refusing a value
        raise _invalid(str(exc)) from exc
    # Checked on every call, whatever the headers' source: ``client.headers`` may have been
    # changed since the client was built (the name lookups use the Headers' own cache).
    if special:
        check_framing(merged, body)
    if body.content_type and "content-type" not in merged:
        merged.set("Content-Type", body.content_type)
    seconds = deadline if deadline is not None else config.deadline
    now = clock()  # one read: the call's start (Response.elapsed) and its deadline
    return PreparedRequest(
        method=method,
        url=full,
        headers=merged,
        body=body,
        idempotency=classify_idempotency(
            method, (IDEMPOTENCY_KEY_HEADER,) if key is not None else (), idempotency
        ),
        idempotency_key=key,
        retry=retry or config.retry,
        deadline=now + seconds if seconds is not None else math.inf,
        follow_redirects=config.follow_redirects if follow_redirects is None else follow_redirects,
        auth=_call_auth(config, auth, full),
        cookies=_call_cookies(cookies),
        started=now,
        hedging=hedging,
        resume=resume,
        trace=config.instrumentation.call() if config.instrumentation is not None else None,
        reconcile=reconcile,
        key_generated=generated,
    )


def _bad_method(method: object) -> str:
    """The message for a method that is not letters. A URL given first (``request(url,
    "GET")``, the order of some clients' helpers) is said to be one, and not shown: it may hold
    a password."""
    if isinstance(method, str) and "://" in method:
        return (
            "invalid HTTP method: a URL was given as the method (not shown); the method comes "
            "first: client.request('GET', url)"
        )
    shown_method = repr(method) if isinstance(method, str) and len(method) <= 20 else (
        withheld(method)
    )  # fmt: skip
    return f"invalid HTTP method {shown_method}: expected letters such as 'GET' or 'POST'"


def _call_auth(config: ClientConfig, auth: object, url: URL) -> AuthTypes | None:
    """The call's ``auth=``, else the client's, else the URL's userinfo (``BasicAuth``), else
    (``trust_env``) the netrc entry of the URL's host."""
    if auth is not None:
        try:
            return coerce_auth(auth, "auth")
        except (TypeError, ValueError) as exc:  # a call-time mistake: refused before any I/O
            raise _invalid(str(exc)) from None
    if config.auth is None and url.credentials is not None:  # the client's auth= wins, as in httpx
        try:
            return BasicAuth(*url.credentials)
        except ValueError as exc:  # (a user name with ":" once percent-decoded)
            raise _invalid(f"the URL's userinfo cannot be Basic credentials: {exc}") from None
    if config.auth is not None or not config.trust_env:
        return config.auth
    try:
        return netrc_auth(url.host)
    except ValueError as exc:
        raise _invalid(str(exc)) from None


def coerce_auth(auth: object, option: str) -> AuthTypes:
    """``auth=``: a ``RefreshableAuth``, or ``(user, password)`` for ``BasicAuth``."""
    if isinstance(auth, tuple) and len(auth) == 2 and all(isinstance(a, str) for a in auth):
        try:
            return BasicAuth(auth[0], auth[1])
        except ValueError as exc:  # (its message shows neither the name nor the password)
            raise ValueError(f"{option}=: {exc}") from None
    if isinstance(auth, (RefreshableAuth, RequestAuth)) and not isinstance(auth, type):
        return auth
    raise TypeError(
        f"{option}= must be a RefreshableAuth (BasicAuth, BearerAuth, DigestAuth...) or a "
        f"(user, password) tuple of str, got {described(auth)}"
    )


def _merged_params(client: tuple[tuple[str, Any], ...], call: Any) -> Any:
    """The client's ``params=`` under the call's: a name the call gives replaces the client's
    values of that name. The URL's own query string is kept as it is (both are appended)."""
    if not client:
        return call
    if not call:
        return client
    items = list(call.items() if isinstance(call, Mapping) else call)
    given = {str(key) for key, _ in items}
    return [(key, value) for key, value in client if key not in given] + items


_COOKIE_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_COOKIE_VALUE = re.compile(r"[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*")


def _call_cookies(cookies: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    if not cookies:
        return ()
    if not isinstance(cookies, Mapping):
        raise _invalid(f"cookies must be a mapping of names to values, got {withheld(cookies)}")
    pairs = []
    for name, value in cookies.items():
        if not isinstance(name, str) or not _COOKIE_NAME.fullmatch(name):
            raise _invalid(f"cookies=: invalid cookie name {name!r} (RFC 6265 token)")
        if not isinstance(value, str):
            raise _invalid(
                f"cookies=: the value of cookie {name!r} must be str, got {type(value).__name__}"
            )
        if not _COOKIE_VALUE.fullmatch(value):
            raise _invalid(
                f"cookies=: invalid value for cookie {name!r}: no spaces, quotes, commas, "
                "semicolons, backslashes or control characters (RFC 6265)"
            )
        pairs.append((name, value))
    return tuple(pairs)


def prepare_redirect(
    request: PreparedRequest, response: Response, location: str
) -> PreparedRequest:
    """The next request of a redirect chain (RFC 9110 §15.4; the rules are in ``_redirects``).

    Raises ``RequestFailed`` (``RetryDenied.body_not_replayable()``) when a 307/308 would have
    to replay a one-shot body; ``ProtocolFailed`` (``REMOTE_PROTOCOL``) when ``location`` is
    not a valid URL (the server broke HTTP); ``InvalidRequest`` when it is a URL we do not
    follow (another scheme). Nothing is sent for the next hop in any of these cases.
    """
    try:
        url = resolve_location(request.url, location)
    except InvalidLocation as exc:
        raise ProtocolFailed(
            f"{request.method} {request.url}: the {response.status} redirect's Location "
            f"{shown_url(location, loose=True)[:200]!r} is not a valid URL ({exc}); nothing "
            "was sent for it",
            evidence=Evidence.RESPONSE_RECEIVED,
            attempts=response.attempts,
            category=FailureCategory.REMOTE_PROTOCOL,
        ) from None
    except InvalidRequest as exc:
        # A URL we do not follow (another scheme, a host that cannot be encoded): nothing was
        # sent for the hop, but the request before it was answered. The call's evidence is
        # that answer's (RESPONSE_RECEIVED): a caller that sends NOT_SENT calls again must
        # not run this request twice.
        raise InvalidRequest(
            f"{request.method} {request.url}: the {response.status} redirect is not followed: "
            f"{exc}; nothing was sent for it",
            evidence=Evidence.RESPONSE_RECEIVED,
            attempts=response.attempts,
            category=FailureCategory.INVALID_REQUEST,
        ) from None
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
        # A caller's Host names the first origin: the new one gets its own (attempt_headers).
        headers.remove("host")
    return replace(
        request,
        method=method,
        url=url,
        headers=headers,
        body=body,
        idempotency=classify_idempotency(method, headers.keys()),
        apply_auth=same_origin,
        cookies=request.cookies if same_origin else (),
        wire_memo=None,
    )


def check_framing(headers: Headers, body: PreparedBody) -> None:
    """The client frames the body itself: a caller's framing headers must not contradict it.

    ``Transfer-Encoding`` is refused (beside the client's own framing it would make the
    request-smuggling shape of RFC 9112 §6.1); ``Content-Length`` is accepted only when it
    equals the length of a body in memory, and then left to the client to send (it is
    removed from ``headers``).
    """
    if "transfer-encoding" in headers:
        raise _invalid(
            "Transfer-Encoding is set by the client (chunked when a body's length is unknown); "
            "remove the header"
        )
    declared = headers.get("content-length")
    if declared is None:
        return
    if declared.strip() != str(body.known_length):
        raise _invalid(
            f"Content-Length {declared!r} does not match the body"
            + (f" ({body.known_length} bytes)" if body.known_length is not None else "")
            + "; the client sets it: remove the header, or give a streamed body's length "
            "with Reopenable(factory, length=N) or StreamFactory(..., length=N)"
        )
    headers.remove("content-length")


def _invalid(message: str) -> InvalidRequest:
    return InvalidRequest(
        message, evidence=Evidence.NOT_SENT, category=FailureCategory.INVALID_REQUEST
    )


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
