"""Proxy configuration: ``proxy=`` or, with ``trust_env=True``, the usual environment variables.

Schemes: ``http://`` and ``https://`` (TLS to the proxy) proxies, and ``socks5://`` /
``socks5h://`` (extra ``socks``). From the environment: ``HTTP_PROXY`` for ``http`` URLs,
``HTTPS_PROXY`` for ``https`` URLs, ``ALL_PROXY`` for both when the specific one is unset,
and ``NO_PROXY`` excludes hosts (the standard library's matching, upper- or lower-case names).

Cleartext requests go to an HTTP proxy in absolute form (``GET http://host/path``); TLS requests
are tunnelled with ``CONNECT host:port`` and the TLS handshake runs through the tunnel with the
target's name, so the proxy never sees the request. Every proxy stage happens before a request
byte is sent: failing to reach the proxy, or the proxy refusing the CONNECT, is ``NOT_SENT``.

Credentials in the proxy URL (``http://user:pass@proxy:3128``) become a ``Proxy-Authorization``
header sent only to the proxy; they never appear in a repr.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from ._core.evidence import Evidence, FailureCategory
from ._core.secrecy import raise_detached
from ._errors import InvalidRequest
from ._models import Origin

__all__ = ["ProxyConfig", "proxy_from_env"]


MISSING_EXTRA = "SOCKS proxies need the 'socks' extra (socksio): pip install 'trio_retry[socks]'"


def load_socksio() -> Any:
    """The ``socksio.socks5`` module, or ``ImportError`` naming the extra."""
    try:
        from socksio import socks5
    except ImportError as exc:
        raise ImportError(MISSING_EXTRA) from exc
    return socks5


_DEFAULT_PORTS = {"http": 80, "https": 443, "socks5": 1080, "socks5h": 1080}
_ACCEPTED = (
    "a proxy URL is http://, https://, socks5:// or socks5h:// with a host and an optional port "
    "(and optionally user:password@), such as http://proxy.example:3128"
)


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    """Where the proxy is, how to speak to it, and its credentials (never in a repr).

    ``http``/``https`` proxies forward cleartext requests in absolute form and tunnel TLS with
    ``CONNECT`` (``https``: over TLS to the proxy itself). ``socks5`` tunnels every request
    (the client resolves the target's name); ``socks5h`` lets the proxy resolve it.
    """

    host: str
    port: int
    authorization: str | None = field(default=None, repr=False)
    scheme: str = "http"
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)

    @classmethod
    def parse(cls, url: str, *, strict: bool = False) -> ProxyConfig:
        """``url`` checked: scheme, host, port. ``strict`` (``Client(proxy=...)``): the scheme
        is required and nothing may follow the port but ``/``; from the environment, a bare
        ``host:port`` means ``http://host:port``, as in curl. The messages never show the
        URL's credentials."""
        if "://" not in url:
            if strict:
                raise _invalid(_ACCEPTED + "; got a URL without a scheme")
            url = f"http://{url}"
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            # Not urllib's message, and not chained: it shows the "port", which in
            # ``http://user:pa/ss@host`` is a piece of the password, or the whole netloc.
            what = (
                "a port that is not a number from 1 to 65535"
                if "ort" in str(exc)
                else "a malformed host"
            )
            raise_detached(_invalid(f"{_ACCEPTED}; got {what}"))
        scheme = parts.scheme.lower()
        if scheme not in _DEFAULT_PORTS:
            raise _invalid(f"{_ACCEPTED}; got scheme {parts.scheme!r}")
        host = parts.hostname
        if not host or any(c.isspace() or not c.isprintable() for c in host):
            raise _invalid(f"{_ACCEPTED}; got " + ("no host" if not host else f"host {host!r}"))
        if port == 0:
            raise _invalid(f"{_ACCEPTED}; got port 0")
        if strict and (parts.path not in ("", "/") or parts.query or parts.fragment):
            raise _invalid(f"{_ACCEPTED}; got a path, query or fragment after the host")
        if scheme.startswith("socks"):
            try:
                load_socksio()
            except ImportError as exc:
                raise _invalid(f"proxy {scheme}://{parts.hostname}: {exc}") from None
        username = unquote(parts.username) if parts.username is not None else None
        password = unquote(parts.password or "") if parts.username is not None else None
        if scheme.startswith("socks") and username is not None:
            if max(len(username.encode()), len((password or "").encode())) > 255:
                raise _invalid("SOCKS5 user names and passwords are at most 255 bytes (RFC 1929)")
        authorization = None
        if username is not None and not scheme.startswith("socks"):
            pair = f"{username}:{password}"
            authorization = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
        return cls(
            host,
            port or _DEFAULT_PORTS[scheme],
            authorization,
            scheme,
            username,
            password,
        )

    @property
    def forwards(self) -> bool:
        """Whether cleartext requests go to the proxy in absolute form (HTTP proxies), rather
        than through a tunnel (SOCKS)."""
        return self.scheme in ("http", "https")

    @property
    def tls(self) -> bool:
        """Whether the connection to the proxy itself is TLS (``https://`` proxies)."""
        return self.scheme == "https"

    @property
    def remote_dns(self) -> bool:
        """Whether the proxy resolves the target's name (every scheme but ``socks5``)."""
        return self.scheme != "socks5"

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def _invalid(message: str) -> InvalidRequest:
    return InvalidRequest(
        message, evidence=Evidence.NOT_SENT, category=FailureCategory.INVALID_REQUEST
    )


def proxy_from_env(origin: Origin, environ: Mapping[str, str] | None = None) -> ProxyConfig | None:
    """The proxy for ``origin`` from HTTP_PROXY / HTTPS_PROXY / ALL_PROXY, unless NO_PROXY
    excludes it (the standard library's rules, upper- and lower-case names)."""
    # Imported here: urllib.request (with http.client and email behind it) costs every program
    # ~4 ms at start-up. Once loaded, the statement is a sys.modules look-up (~0.2 us measured),
    # beside the ~35 us of getproxies_environment's scan of os.environ.
    import urllib.request

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
