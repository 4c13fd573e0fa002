"""Redirect rules (RFC 9110 §15.4), as pure functions.

- 303: the next request is a GET without a body (HEAD stays HEAD);
- 301 and 302: a POST becomes a GET without a body (what browsers and RFC 9110 allow); other
  methods are replayed;
- 307 and 308: method and body are replayed — allowed only for a ``REPLAYABLE`` or
  ``REOPENABLE`` body; a ``ONE_SHOT`` body cannot be sent again.

``Authorization``, ``Proxy-Authorization`` and ``Cookie`` are dropped when the origin changes, so
no credential is forwarded to another origin (the client's own ``auth`` is not applied there
either, and the cookie jar supplies the new origin's own cookies).
"""

from __future__ import annotations

__all__ = ["CREDENTIAL_HEADERS", "REDIRECT_STATUSES", "redirect_method"]

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
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
