"""Proxy configuration: ``proxy=`` or, with ``trust_env=True``, the usual environment variables.

Cleartext requests go to an HTTP proxy in absolute form (``GET http://host/path``); TLS requests
are tunnelled with ``CONNECT host:port`` and the TLS handshake runs through the tunnel with the
target's name, so the proxy never sees the request. Every proxy stage happens before a request
byte is sent: failing to reach the proxy, or the proxy refusing the CONNECT, is ``NOT_SENT``.

Credentials in the proxy URL (``http://user:pass@proxy:3128``) become a ``Proxy-Authorization``
header sent only to the proxy; they never appear in a repr.
"""

from __future__ import annotations

import base64
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from ._core.evidence import Evidence, FailureCategory
from ._errors import InvalidRequest
from ._models import Origin

__all__ = ["ProxyConfig", "proxy_from_env"]


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    """Where the proxy is, and the ``Proxy-Authorization`` value if it needs credentials."""

    host: str
    port: int
    authorization: str | None = field(default=None, repr=False)

    @classmethod
    def parse(cls, url: str) -> ProxyConfig:
        try:
            parts = urlsplit(url if "://" in url else f"http://{url}")
            port = parts.port
        except ValueError as exc:
            raise _invalid(f"malformed proxy URL: {exc}") from None
        if parts.scheme != "http" or not parts.hostname:
            raise _invalid(
                "proxy URLs must look like http://host:port (optionally with user:password@); "
                f"got scheme {parts.scheme!r}"
            )
        authorization = None
        if parts.username is not None:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            authorization = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
        return cls(parts.hostname, port or 80, authorization)

    def __str__(self) -> str:
        return f"http://{self.host}:{self.port}"


def _invalid(message: str) -> InvalidRequest:
    return InvalidRequest(
        message, evidence=Evidence.NOT_SENT, category=FailureCategory.INVALID_REQUEST
    )


def proxy_from_env(origin: Origin, environ: Mapping[str, str] | None = None) -> ProxyConfig | None:
    """The proxy for ``origin`` from HTTP_PROXY / HTTPS_PROXY / ALL_PROXY, unless NO_PROXY
    excludes it (the standard library's rules, upper- and lower-case names)."""
    if environ is None:
        proxies = urllib.request.getproxies_environment()
    else:
        proxies = {
            name[: -len("_proxy")].lower(): value
            for name, value in environ.items()
            if name.lower().endswith("_proxy") and value
        }
    url = proxies.get(origin.scheme) or proxies.get("all")
    if not url:
        return None
    # Not in typeshed's stubs, but a documented part of urllib.request since Python 3.0.
    bypass = getattr(urllib.request, "proxy_bypass_environment")  # noqa: B009
    if bypass(origin.host, proxies):
        return None
    return ProxyConfig.parse(url)
