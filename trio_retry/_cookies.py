"""An opt-in cookie jar with the standard library's ``http.cookiejar`` semantics.

``Client(cookies=True)`` keeps a :class:`http.cookiejar.CookieJar`; a jar of your own (for
example a ``MozillaCookieJar`` you load and save) can be passed instead. The adapters below give
the jar the urllib-shaped request and response objects it expects.
"""

from __future__ import annotations

import email.message
import urllib.request
from http.cookiejar import CookieJar
from typing import Protocol

__all__ = ["CookieJar", "cookie_header", "store_cookies"]


class _Pairs(Protocol):
    """What the adapters read of headers (``trio_retry.Headers`` has it): a protocol, so that
    ``Response.cookies`` may use this module without a circle through ``_models``."""

    def multi_items(self) -> list[tuple[str, str]]: ...


def _urllib_request(url: str, method: str, headers: _Pairs) -> urllib.request.Request:
    request = urllib.request.Request(url, method=method)
    for name, value in headers.multi_items():
        request.add_unredirected_header(name.capitalize(), value)
    return request


class _InfoResponse:
    """What ``CookieJar.extract_cookies`` reads of a response: ``info().get_all()``."""

    def __init__(self, headers: _Pairs) -> None:
        self._message = email.message.Message()
        for name, value in headers.multi_items():
            self._message[name] = value

    def info(self) -> email.message.Message:
        return self._message


def cookie_header(jar: CookieJar, url: str, method: str, headers: _Pairs) -> str | None:
    """The ``Cookie`` header the jar would send with this request (``None``: no cookies)."""
    request = _urllib_request(url, method, headers)
    jar.add_cookie_header(request)
    return request.get_header("Cookie")


def store_cookies(
    jar: CookieJar, url: str, method: str, request_headers: _Pairs, response_headers: _Pairs
) -> None:
    """Let the jar take the response's ``Set-Cookie`` headers, under its usual policy."""
    request = _urllib_request(url, method, request_headers)
    jar.extract_cookies(_InfoResponse(response_headers), request)  # type: ignore[arg-type]
