"""Redirect rules (RFC 9110 §15.4), as pure functions.

- 303: the next request is a GET without a body (HEAD stays HEAD);
- 301 and 302: a POST becomes a GET without a body (what browsers and RFC 9110 allow); other
  methods are replayed;
- 307 and 308: method and body are replayed — allowed only for a ``REPLAYABLE`` or
  ``REOPENABLE`` body; a ``ONE_SHOT`` body cannot be sent again.

``Authorization``, ``Proxy-Authorization`` and ``Cookie`` are dropped when the origin changes, so
no credential is forwarded to another origin (the client's own ``auth`` is not applied there
either, and the cookie jar supplies the new origin's own cookies).

The ``Location`` comes from the server, so it is checked as hostile text before anything is
sent for the next hop (:func:`resolve_location`). A value that is not a URL reference at all
(empty, control characters, an authority with an empty host, a space in the host, a bad IPv6
literal, a port that is not 1-65535; an empty port means the default) is the server breaking
HTTP: :class:`InvalidLocation`, which the client reports as ``ProtocolFailed``
(``REMOTE_PROTOCOL``), as httpx raises ``RemoteProtocolError``. A URL we cannot follow (another
scheme, whatever follows it, as in ``file:///etc/passwd``; credentials in it) is
``InvalidRequest`` for that hop, ``NOT_SENT``, as for a
URL given by the caller. Spaces in the path or query, which real servers do send, are
percent-encoded, as browsers do.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from ._core.evidence import Evidence, FailureCategory
from ._core.secrecy import raise_detached
from ._errors import InvalidRequest
from ._models import URL
from ._response_views import REDIRECT_STATUSES as REDIRECT_STATUSES
from ._url import unparsed

__all__ = [
    "CREDENTIAL_HEADERS",
    "REDIRECT_STATUSES",
    "InvalidLocation",
    "redirect_method",
    "resolve_location",
]

CREDENTIAL_HEADERS = ("authorization", "proxy-authorization", "cookie")
_BODY_HEADERS = ("content-type", "content-length", "transfer-encoding", "content-encoding")


def redirect_method(status: int, method: str) -> tuple[str, bool]:
    """The next request's method, and whether it still carries the body."""
    if status == 303:
        return ("HEAD" if method == "HEAD" else "GET"), False
    if status in (301, 302) and method == "POST":
        return "GET", False
    return method, status in (307, 308) or method not in ("GET", "HEAD")


def body_headers() -> tuple[str, ...]:
    """Headers that describe the body, removed when the body is dropped."""
    return _BODY_HEADERS


#: Never valid in a URL reference, wherever they are: controls (CR, LF, NUL, TAB...) and DEL.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_WHITESPACE = re.compile(r"\s")
#: A URL's scheme (RFC 3986 §3.1), which says whose syntax the rest follows.
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")


class InvalidLocation(Exception):
    """A redirect's ``Location`` is not a valid URL reference (the server broke HTTP)."""


def resolve_location(base: URL, location: str) -> URL:
    """The URL a redirect from ``base`` to ``location`` leads to (RFC 9110 §10.2.2, RFC 3986
    §5), or an exception: :class:`InvalidLocation` when ``location`` is not a URL reference,
    ``InvalidRequest`` when it is one we do not follow (scheme other than http/https). Never
    raises anything else, whatever the text."""
    if not location:
        raise InvalidLocation("it is empty")
    if _CONTROL.search(location):
        raise InvalidLocation("it contains control characters")
    scheme_match = _SCHEME.match(location)
    if scheme_match is not None and scheme_match[1].lower() not in ("http", "https"):
        # A URL of another scheme (``file:///etc/passwd``, ``ftp://...``, ``mailto:``): its
        # syntax is not ours to judge, and it is a URL we do not follow, not a broken
        # response. (Only the scheme is shown: the rest may hold credentials.)
        raise InvalidRequest(
            f"unsupported URL scheme {scheme_match[1].lower()!r} in the redirect's Location; "
            "accepted: http:// or https://",
            evidence=Evidence.NOT_SENT,
            category=FailureCategory.INVALID_REQUEST,
        )
    try:
        parts = urlsplit(location)
        port = parts.port  # parsed lazily: a bad port raises here
        hostname = parts.hostname
    except ValueError as exc:  # "Invalid IPv6 URL", "Port out of range 0-65535", ...
        # Never urllib's text, nor chained: it may quote the netloc or the "port" (pieces of
        # the password).
        raise_detached(InvalidLocation(f"it has {unparsed(exc)}"))
    scheme = parts.scheme.lower()
    has_authority = location[len(parts.scheme) + 1 if scheme else 0 :].startswith("//")
    if has_authority or (scheme in ("http", "https")):
        if not has_authority:
            raise InvalidLocation(f"it has the scheme {scheme}: but no //host")
        if _WHITESPACE.search(parts.netloc):
            raise InvalidLocation("its host contains whitespace")
        if not hostname:
            raise InvalidLocation("its host is empty")
        if port == 0:
            raise InvalidLocation("its port is 0")
    # A space in the path or query: percent-encoded, as browsers do (other whitespace is a
    # control character, refused above).
    return base.join(location.replace(" ", "%20"))
