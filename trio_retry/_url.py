"""URLs: parsing and validation at construction, the origin they belong to, and the one
rule for showing a URL as text (:func:`shown_url`: no userinfo, no secret query values).

A malformed URL or an unsupported scheme raises :class:`InvalidRequest` (evidence
``NOT_SENT``) before any I/O. ``_models`` re-exports these names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import SplitResult, quote, unquote, unquote_plus, urlencode, urljoin, urlsplit

import idna

from ._core.errors import InvalidRequest
from ._core.evidence import Evidence, FailureCategory
from ._core.secrecy import raise_detached

__all__ = [
    "DEFAULT_PORTS",
    "SHOWN_QUERY_PARAMETERS",
    "URL",
    "Origin",
    "as_base",
    "is_absolute",
    "merge",
    "shown_url",
]

DEFAULT_PORTS = {"http": 80, "https": 443}

#: Characters kept as they are in a request target (RFC 3986 pchar and delimiters, and "%").
_TARGET_SAFE = "/%:@!$&'()*+,;=-._~"
_FORBIDDEN_URL_CHARS = re.compile(r"[\x00-\x20\x7f]")
#: A URL that names its scheme (RFC 3986 §3.1) and an authority: every other text given to a
#: client with ``base_url=`` is relative to it (``"/items?next=http://x"`` included).
_ABSOLUTE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")


# Up to the last "@" before the path, query or fragment, as urlsplit splits a netloc (also at
# the start of a text without "//", so that "user:pass@host" in an error is redacted too).
_USERINFO = re.compile(r"(?:(?<=//)|^)[^/?#]*@")
#: Query pieces are separated by "&", and by ";" for some servers (kept as they were).
_QUERY_SPLIT = re.compile(r"([&;])")

#: Query parameters whose values may be shown (names matched case-insensitively): paging and
#: ordering, which carry no secret. Every other query value is hidden (docs/guide.md, "What is
#: never shown").
SHOWN_QUERY_PARAMETERS = frozenset(
    {"page", "per_page", "page_size", "limit", "offset", "sort", "order"}
)


def shown_url(
    url: str,
    *,
    userinfo: str = "[redacted]@",
    hidden: str = "…",
    also_hidden: frozenset[str] = frozenset(),
    loose: bool = False,
) -> str:
    """The one rule for a URL shown as text (messages, reprs, logs, ``--explain``, ``url.full``).

    The userinfo becomes ``userinfo``; each query value becomes ``hidden`` unless its name is in
    :data:`SHOWN_QUERY_PARAMETERS` (and not in ``also_hidden``, exact names); a query piece
    without ``=`` is a value too; a fragment becomes ``#`` + ``hidden``. Names, scheme, host,
    port and path are kept. Pure text work, so a URL too malformed to parse is redacted too;
    ``loose`` for such a text: userinfo runs to the last ``@`` before the query, ``/`` and all.
    """
    if loose and "@" in url:
        # Up to the last "@" anywhere: a password may hold "/", "?" or "#" (over-redacting
        # is the safe side for a text that could not be parsed).
        scheme, slashes, rest = url.partition("//")
        tail = (rest if slashes else url).rpartition("@")[2]
        url = f"{scheme}{slashes}{userinfo}{tail}" if slashes else f"{userinfo}{tail}"
    rest, hash_mark, fragment = url.partition("#")
    base, question, query = rest.partition("?")
    shown = base if loose else _USERINFO.sub(lambda _: userinfo, base, count=1)
    if question:
        pieces = []
        for piece in _QUERY_SPLIT.split(query):  # (the separators come back as pieces)
            if piece in ("&", ";"):
                pieces.append(piece)
                continue
            name, eq, value = piece.partition("=")
            if not eq:
                pieces.append(hidden if piece else piece)
            elif value and (
                name in also_hidden or _unquote_name(name).lower() not in SHOWN_QUERY_PARAMETERS
            ):
                pieces.append(f"{name}={hidden}")
            else:
                pieces.append(piece)
        shown += "?" + "".join(pieces)
    if hash_mark:
        shown += "#" + (hidden if fragment else "")
    return shown


def _unquote_name(name: str) -> str:
    return unquote_plus(name) if "%" in name or "+" in name else name


def unparsed(exc: ValueError) -> str:
    """Why urlsplit (or UTF-8) refused a URL, in our words (a noun phrase: "a port that is not
    a number..."): never urllib's text, which quotes
    the netloc (``netloc 'user:pass@h\uff0fx' contains invalid characters...``) or the "port" (in
    ``http://u:pa/ss@h`` a piece of the password)."""
    if isinstance(exc, UnicodeEncodeError):
        return f"a lone surrogate (not encodable as UTF-8) at position {exc.start}"
    text = str(exc)
    if "NFKC" in text:
        return (
            "a host holding a character that NFKC normalization turns into '/', '?', '#', "
            "'@' or ':' (a full-width or compatibility form, such as U+FF0F or U+2100)"
        )
    if "ort" in text:
        return "a port that is not a number from 1 to 65535"
    if "IPv" in text:
        return "a bracketed host that is not an IPv6 (or IPvFuture) address, or unbalanced brackets"
    return "a form Python's URL parser refuses"


def _shown(url: str) -> str:
    """A URL refused as malformed, as it may appear in the error: :func:`shown_url`, quoted."""
    return repr(shown_url(url, loose=True))


def _a_label(host: str, url: str) -> str:
    """The host as sent: an internationalised name in its IDNA A-label form (IDNA 2008 with the
    UTS #46 mapping: ``bücher.example`` -> ``xn--bcher-kva.example``); an ASCII name (or IP
    literal) as it is, after a cheap check of its labels (no idna call)."""
    if host.isascii():
        if ":" in host:  # an IPv6 literal (urlsplit checked the brackets)
            return host
        labels = (host[:-1] if host.endswith(".") else host).split(".")
        if len(host) <= 253 and all(0 < len(label) <= 63 for label in labels):
            if "xn--" in host:  # (urlsplit lowercased the host: "XN--" is here too)
                _check_a_labels(host, labels, url)
            return host
        raise _invalid(
            f"URL host {host!r} is not a valid host name (an empty label, a label over 63 "
            f"characters, or over 253 in all): {_shown(url)}"
        )
    try:
        return idna.encode(host, uts46=True).decode("ascii")
    except UnicodeError as exc:  # idna.IDNAError included
        raise _invalid(
            f"URL host {host!r} cannot be encoded as an IDNA host name ({exc}): {_shown(url)}"
        ) from None


#: ``host:port`` (or ``host:port/path``) as urlsplit reads it: the scheme ``host``.
_HOST_PORT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:\d+(?:[/?#]|$)")


def _scheme_problem(scheme: str, url: str) -> str:
    """What is wrong with a URL that has no scheme, or one we do not speak, and the fix."""
    accepted = " or ".join(f"{s}://" for s in DEFAULT_PORTS)
    if not scheme:
        return (
            f"URL {_shown(url)} is relative (it has no scheme): a relative URL needs a client "
            f'with base_url= (Client(base_url="https://api.example")); otherwise give an '
            f"absolute URL starting with {accepted}"
        )
    message = f"unsupported URL scheme {scheme!r} in {_shown(url)}; accepted: {accepted}"
    if _HOST_PORT.match(url):  # "localhost:8000/x": a host and port without their scheme
        message += f" (a URL starts with its scheme: {_shown('http://' + url)})"
    return message


def _check_a_labels(host: str, labels: list[str], url: str) -> None:
    """Refuse an ``xn--`` label that is not the A-label of a valid U-label: UTS #46 §4 step 4
    decodes such a label and validates the result as it would a U-label, so the A-label of
    a code point refused in Unicode (``xn--ls8h``, an emoji; ``xn--a-la``, a C1 control) is
    refused too, as are empty or malformed Punycode (``xn--``, ``xn--99999999999``), a
    trailing hyphen, and a Punycode that is not its U-label's own encoding (RFC 5891 §5.4).
    """
    for label in labels:
        if not label.startswith("xn--"):
            continue
        problem = None
        try:
            if idna.encode(idna.decode(label)) != label.encode("ascii"):
                problem = "not the canonical A-label of its Unicode form"
        except UnicodeError as exc:  # idna.IDNAError included
            problem = str(exc) or type(exc).__name__
        if problem is not None:  # (raised outside the except: no chained text)
            raise _invalid(
                f"URL host {host!r} is not a valid host name: its label {label!r} is not a "
                f"valid IDNA A-label ({problem}): {_shown(url)}"
            )


def tls_name(host: str) -> str:
    """The name a TLS handshake sends (SNI) and checks the certificate against: ``host``
    without its trailing dot (RFC 6066 §3: "HostName" has none; a certificate's names have
    none). DNS keeps the dot: ``localhost.`` is an absolute name, looked up as written."""
    return host[:-1] if host.endswith(".") else host


def _invalid(message: str) -> InvalidRequest:
    return InvalidRequest(
        message, evidence=Evidence.NOT_SENT, category=FailureCategory.INVALID_REQUEST
    )


@dataclass(frozen=True, slots=True)
class Origin:
    """``scheme://host:port``, the unit of pooling, budgets and bulkheads."""

    scheme: str
    host: str
    port: int
    # Origins key every per-request lookup (upstream state, pool): hashed once, not each time.
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.scheme, self.host, self.port)))

    def __hash__(self) -> int:
        return self._hash

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    @property
    def tls(self) -> bool:
        return self.scheme == "https"

    @classmethod
    def parse(cls, text: str) -> Origin:
        """The origin of the URL ``text`` (``"https://api.example/x"`` ->
        ``https://api.example:443``)."""
        return URL(text).origin

    @classmethod
    def parse_key(cls, text: str) -> Origin:
        """An ``upstreams`` key: ``"https://api.example"`` or ``"https://api.example:443"``.

        Only a scheme, a host and a port: a key with userinfo, a path, a query or a fragment
        is refused (``InvalidRequest`` saying which), never silently cut to its origin, where
        ``https://api.example/v1`` and ``https://api.example/v2`` became one upstream."""
        url = URL(text)
        netloc, path = url._parts.netloc, url._parts.path
        extra = [
            what
            for what, present in (
                ("userinfo (user:password@, never shown)", "@" in netloc),
                ("a path", path not in ("", "/")),
                ("a query", "?" in text),
                ("a fragment", "#" in text),
            )
            if present
        ]
        if extra:
            raise _invalid(
                f"it has {' and '.join(extra)}: an origin is a scheme, a host and a port only"
            )
        return url.origin


class URL:
    """An absolute ``http``/``https`` URL, validated and split once.

    An internationalised host name is converted to its IDNA A-label form when the URL is
    parsed (``http://bücher.example/`` is ``http://xn--bcher-kva.example/``): ``host``, the
    ``Host`` header, the origin, SNI, certificate checks and ``str()`` all use that form.

    Userinfo (``https://user:pass@host/``) is the call's ``BasicAuth`` (``credentials``,
    percent-decoded): it is never part of ``target`` nor of the ``Host`` header. ``str()``
    keeps it, and the whole query, for the caller's own use; ``repr()`` and ``format()`` (so
    every f-string of an error message or log line) show it by :func:`shown_url`: ``[redacted]@``
    for the userinfo, ``…`` for query values (``?api_key=…&page=2``).
    """

    __slots__ = (
        "_parts",
        "_shown",
        "credentials",
        "host",
        "host_header",
        "origin",
        "port",
        "scheme",
        "target",
    )

    _parts: SplitResult
    scheme: str
    host: str
    port: int
    origin: Origin
    target: str
    #: The ``Host`` header value: the host (IPv6 in brackets), and the port unless default.
    host_header: str
    #: The URL's ``(user, password)``, percent-decoded (``""`` for a missing password), or None.
    credentials: tuple[str, str] | None
    _shown: str | None  # the text as shown (shown_url), once asked for

    def __init__(self, url: str | URL) -> None:
        if isinstance(url, URL):
            self._parts = url._parts
            self.scheme, self.host, self.port = url.scheme, url.host, url.port
            self.origin, self.target = url.origin, url.target
            self.host_header = url.host_header
            self.credentials, self._shown = url.credentials, url._shown
            return
        if not isinstance(url, str):
            raise _invalid(f"URL must be a str, got {type(url).__name__}")
        if _FORBIDDEN_URL_CHARS.search(url):
            raise _invalid(
                f"URL contains whitespace or control characters (CR, LF, NUL...): {_shown(url)}; "
                "percent-encode them in a path or query (a space is %20), and give the URL "
                "without spaces around it"
            )
        try:
            url.encode("utf-8")  # a lone surrogate would fail the percent-encoding below
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:  # UnicodeEncodeError included
            raise_detached(_invalid(f"malformed URL {_shown(url)}: {unparsed(exc)}"))
        scheme = parts.scheme.lower()
        if scheme not in DEFAULT_PORTS:
            raise _invalid(_scheme_problem(scheme, url))
        host = parts.hostname
        if not host:
            raise _invalid(
                f"URL has no host: {_shown(url)}; accepted: http://host[:port]/path or "
                "https://host[:port]/path"
            )
        international = not host.isascii()
        host = _a_label(host, url)
        if international:  # str(url) shows the A-label too
            userinfo, at, hostport = parts.netloc.rpartition("@")
            port_text = f":{hostport.rpartition(':')[2]}" if port is not None else ""
            parts = parts._replace(netloc=f"{userinfo}{at}{host}{port_text}")
        if "@" in parts.netloc and (parts.username or parts.password):
            self.credentials = (unquote(parts.username or ""), unquote(parts.password or ""))
        else:
            self.credentials = None  # (an empty userinfo, "http://@host/", sends none: httpx)
        self._shown = None
        self._parts = parts
        self.scheme = scheme
        self.host = host
        self.port = port if port is not None else DEFAULT_PORTS[scheme]
        self.origin = Origin(scheme, host, self.port)
        bracketed = f"[{host}]" if ":" in host else host
        default_port = self.port == DEFAULT_PORTS[scheme]
        self.host_header = bracketed if default_port else f"{bracketed}:{self.port}"
        # Non-ASCII in the path or query is percent-encoded (UTF-8): the target is always ASCII.
        path = quote(parts.path or "/", safe=_TARGET_SAFE)
        query = quote(parts.query, safe=_TARGET_SAFE + "?")
        self.target = f"{path}?{query}" if query else path

    def with_params(self, params: Mapping[str, Any] | Sequence[tuple[str, Any]] | None) -> URL:
        """A copy with ``params`` appended to the query string (``None`` values dropped)."""
        if not params:
            return self
        items = params.items() if isinstance(params, Mapping) else params
        pairs: list[tuple[str, str]] = []
        for key, value in items:
            if value is None:
                continue
            values = value if isinstance(value, (list, tuple)) else [value]
            pairs.extend((str(key), _param_str(v)) for v in values)
        try:
            extra = urlencode(pairs)
        except UnicodeEncodeError as exc:  # (it holds the whole value: never chained)
            raise_detached(
                _invalid(
                    "params cannot be encoded as UTF-8: a value holds a lone surrogate at "
                    f"position {exc.start}"
                )
            )
        query = f"{self._parts.query}&{extra}" if self._parts.query else extra
        return URL(self._parts._replace(query=query).geturl())

    def join(self, url: str) -> URL:
        """Resolve ``url`` against this one (RFC 3986): a redirect's ``Location``."""
        return URL(urljoin(str(self), url))

    def without_userinfo(self) -> str:
        """The URL as text without its userinfo (a proxy's absolute-form request target)."""
        if self.credentials is None:
            return self._parts.geturl()
        return self._parts._replace(netloc=self._parts.netloc.rpartition("@")[2]).geturl()

    def __str__(self) -> str:
        return self._parts.geturl()

    def __format__(self, spec: str) -> str:
        # Messages, reprs and logs format URLs: no userinfo nor query value shows there.
        shown = self._shown
        if shown is None:
            shown = self._shown = shown_url(self._parts.geturl())
        return format(shown, spec)

    def __repr__(self) -> str:
        return f"URL({format(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, URL) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))


def is_absolute(url: str) -> bool:
    """Whether ``url`` names its scheme and authority (``scheme://``); a client with a
    ``base_url`` merges every other URL under it (:func:`merge`)."""
    return _ABSOLUTE.match(url) is not None


def as_base(url: URL) -> URL:
    """``url`` as a ``base_url``: its path ends with ``/`` (``https://h/api`` ->
    ``https://h/api/``), so that :func:`merge` appends to the whole of it."""
    if url.target.partition("?")[0].endswith("/"):
        return url
    parts = urlsplit(str(url))
    return URL(parts._replace(path=parts.path + "/").geturl())


def merge(base: URL, relative: str) -> URL:
    """A call's relative URL under ``base`` (made by :func:`as_base`), as httpx merges them:
    the base path is a prefix of every relative URL, whether or not the relative URL starts
    with ``/``, and the relative URL's query and fragment are its own.

    ``https://h/api/`` + ``/items/0?a=1`` -> ``https://h/api/items/0?a=1``; ``items/0`` the
    same; ``""`` -> ``https://h/api/``; ``../v2/x`` -> ``https://h/v2/x`` (dot segments are
    resolved, RFC 3986 §5.2.4). The scheme, host, port and userinfo are always the base's:
    ``//other.example/x`` is the path ``/api/other.example/x``, never another host.

    Rejected alternative: RFC 3986 resolution (``urljoin``, :meth:`URL.join`: the rule for a
    redirect's ``Location``), where ``/items/0`` replaces the base path, so a
    ``base_url=".../api/"`` silently lost its ``/api`` and each call got a 404 (issue #38).
    The ``./`` prefix keeps a first segment holding ``:`` (``/items:batch``) from being read
    as a scheme.
    """
    return URL(urljoin(str(base), "./" + relative.lstrip("/")))


def _param_str(value: Any) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    return str(value)
