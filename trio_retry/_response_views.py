"""What a response already holds, under the names httpx users reach for (SPEC §20).

A mixin of :class:`~trio_retry.Response` with no state of its own: each name is computed,
when read, from ``status``, ``reason``, ``headers`` and the request. Where the meaning is the
same as httpx's, so is the name and the shape (``reason_phrase``, ``is_error``, ``links``,
``cookies``...); docs/httpx.md lists them as aliases. Two headers are parsed on the way:
``Link`` (RFC 8288 §3) and ``Set-Cookie`` (by ``http.cookiejar``, as the client's jar does, so
``cookies`` holds what a jar would keep).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Protocol

from ._url import URL

__all__ = ["REDIRECT_STATUSES", "ResponseViews", "parse_links"]

#: The redirect statuses (RFC 9110 §15.4) the client follows, and ``is_redirect`` names.
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})

# RFC 8288 §3: link-value = "<" URI-Reference ">" *( OWS ";" OWS link-param ), and
# link-param = token BWS [ "=" BWS ( token / quoted-string ) ]. A quoted string may hold a
# comma or a semicolon, so the value is scanned, never split on "," first.
_TARGET = re.compile(r"[\s,]*<([^>]*)>")
_PARAM = re.compile(
    r"\s*;\s*([!#$%&'*+\-.^_`|~0-9A-Za-z]+)\s*(?:=\s*(\"(?:[^\"\\]|\\.)*\"|[^\s;,]*))?"
)
_ESCAPE = re.compile(r"\\(.)")


def parse_links(values: list[str]) -> list[dict[str, str]]:
    """The links of ``Link`` field values (RFC 8288 §3), in order: each a dict with its
    target under ``"url"`` (as given, not resolved) and its parameters by lowercase name
    (a quoted value unquoted; a parameter without a value is ``""``; of a repeated one, the
    first, as §3.3 asks of ``rel``). A malformed link is skipped up to the next comma."""
    links: list[dict[str, str]] = []
    for value in values:
        at = 0
        while at < len(value):
            target = _TARGET.match(value, at)
            if target is None:
                comma = value.find(",", at)
                if comma < 0:
                    break
                at = comma + 1
                continue
            link = {"url": target.group(1).strip()}
            at = target.end()
            while (param := _PARAM.match(value, at)) is not None:
                raw = param.group(2) or ""
                if raw.startswith('"'):
                    raw = _ESCAPE.sub(r"\1", raw[1:-1])
                link.setdefault(param.group(1).lower(), raw)
                at = param.end()
            links.append(link)
    return links


class _Headers(Protocol):
    """What the views read of ``Headers`` (a protocol: ``_models`` imports this module)."""

    def get_list(self, name: str) -> list[str]: ...

    def __contains__(self, name: object) -> bool: ...

    def multi_items(self) -> list[tuple[str, str]]: ...


class _Sent(Protocol):
    """What the views read of ``SentRequest``."""

    @property
    def headers(self) -> _Headers: ...


class ResponseViews:
    """httpx's names for what a :class:`~trio_retry.Response` holds (see the module)."""

    __slots__ = ()

    if TYPE_CHECKING:
        status: int
        reason: str
        url: URL
        request_method: str

        @property
        def headers(self) -> _Headers: ...

        @property
        def request(self) -> _Sent: ...

    @property
    def status_code(self) -> int:
        """Alias of ``status`` (httpx's name)."""
        return self.status

    @property
    def reason_phrase(self) -> str:
        """Alias of ``reason`` (httpx's name): the status line's reason, ``""`` over HTTP/2
        and HTTP/3, which have none."""
        return self.reason

    @property
    def is_success(self) -> bool:
        """``200 <= status < 300``."""
        return 200 <= self.status < 300

    @property
    def is_redirect(self) -> bool:
        """A redirect status (301, 302, 303, 307, 308) with a ``Location`` header: what
        ``follow_redirects=True`` would follow."""
        return self.status in REDIRECT_STATUSES and "location" in self.headers

    @property
    def is_error(self) -> bool:
        """``400 <= status < 600``: what ``raise_for_status()`` raises for."""
        return 400 <= self.status < 600

    @property
    def is_client_error(self) -> bool:
        """``400 <= status < 500``."""
        return 400 <= self.status < 500

    @property
    def is_server_error(self) -> bool:
        """``500 <= status < 600``."""
        return 500 <= self.status < 600

    @property
    def links(self) -> dict[str, dict[str, str]]:
        """The ``Link`` header parsed (RFC 8288), keyed by each link's ``rel`` (else its
        target), as httpx keys it: ``response.links["next"]["url"]``. Each value holds the
        target (``"url"``, as the server wrote it) and the link's parameters; ``{}`` without a
        ``Link`` header. Of two links with the same key, the last is kept."""
        links = parse_links(self.headers.get_list("link"))
        return {link.get("rel") or link["url"]: link for link in links}

    @property
    def replayed(self) -> bool:
        """True when the server marked this answer a replay of an earlier execution of the same
        ``Idempotency-Key`` (``Idempotent-Replayed: true``, as Stripe sends; the RFC 8941
        boolean ``?1`` too): a deduplicated answer, not a first execution (SPEC §19)."""
        values = self.headers.get_list("idempotent-replayed")
        return bool(values) and values[-1].strip().lower() in ("true", "?1")

    @property
    def cookies(self) -> dict[str, str]:
        """The cookies this response sets (its ``Set-Cookie`` headers), name to value, as a
        cookie jar would take them from it (``http.cookiejar``'s policy: a cookie for another
        domain, or one already expired such as ``Max-Age=0``, is left out). Independent of
        ``Client(cookies=...)``: the client's jar, if any, took them too."""
        if "set-cookie" not in self.headers:
            return {}
        from ._cookies import CookieJar, store_cookies  # (http.cookiejar: loaded on use only)

        jar = CookieJar()
        store_cookies(
            jar,
            self.url.without_userinfo(),
            self.request_method,
            self.request.headers,
            self.headers,
        )
        return {cookie.name: cookie.value or "" for cookie in jar}
