"""Headers, requests and responses (URLs: ``_url.py``): plain values with validation at
construction.

Everything a caller passes in is checked here, before any I/O: a malformed URL, an unsupported
scheme, or CR/LF/NUL in a header raises :class:`InvalidRequest` (evidence ``NOT_SENT``), so a bad
input can never put a byte on the wire.
"""

from __future__ import annotations

import codecs
import inspect
import math
import re
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, Union, cast

from ._core.attempt import Attempt
from ._core.errors import ResponseNotJSON, TrioRetryError
from ._response_body import ResponseBody
from ._response_views import ResponseViews
from ._streams import BodyDecoder
from ._url import DEFAULT_PORTS as DEFAULT_PORTS
from ._url import SHOWN_QUERY_PARAMETERS as SHOWN_QUERY_PARAMETERS
from ._url import URL as URL
from ._url import Origin as Origin
from ._url import _invalid
from ._url import shown_url as shown_url

if TYPE_CHECKING:
    from datetime import timedelta

    from ._core.decision import Decision

__all__ = [
    "URL",
    "HTTPStatusError",
    "HeaderTypes",
    "Headers",
    "Origin",
    "Response",
    "SentRequest",
    "StageTimeouts",
    "check_header",
    "redact_headers",
    "shown_url",
]

#: Headers whose values never appear in a repr, a log line or --explain output.
SENSITIVE_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie"})

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# CR, LF and NUL would let one header smuggle another (SPEC §10); the other control characters
# are refused too, before any I/O and for HTTP/2 as for HTTP/1.1.
_FORBIDDEN_VALUE_CHARS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_NOT_LATIN1 = re.compile(r"[^\x00-\xff]")


@dataclass(frozen=True, slots=True, kw_only=True)
class StageTimeouts:
    """Per-stage limits (seconds, each optional), on top of the call deadline.

    ``connect`` covers DNS and TCP connect, ``tls`` the handshake (both ``NOT_SENT`` when they
    fire), ``write`` each write of the request (an idle bound: no byte accepted by the server
    for so long), ``first_byte`` the wait for the response head, ``read`` each wait between
    body chunks (an idle bound too). A long healthy transfer is never cut. A stage timeout is a
    failure of category ``TIMEOUT`` with the evidence of its stage. ``Client()`` uses
    ``StageTimeouts(connect=10, tls=10, write=30, first_byte=30, read=30)`` unless told
    otherwise, and that ``first_byte`` yields to a call's deadline (the call then waits for its
    head as long as its deadline allows; one given explicitly stays: ``_wire/clock.py``); this
    class's own defaults are ``None`` (no limit).
    """

    connect: float | None = None
    tls: float | None = None
    write: float | None = None
    first_byte: float | None = None
    read: float | None = None

    def __new__(cls, *args: object, **kwargs: object) -> StageTimeouts:
        # Each stage by name: httpx's Timeout(5) sets every stage, and StageTimeouts(5) set
        # connect= alone, silently. (Here, not in __init__: a keyword-only __init__'s own
        # error names no fix; replace() and copies pass keywords or nothing.)
        if args:
            raise TypeError(
                f"StageTimeouts() takes each stage's limit by name (connect=, tls=, write=, "
                f"first_byte=, read=), got {len(args)} positional argument(s); httpx's "
                "Timeout(5) is deadline=5 here (the whole call), or give the stages: "
                "StageTimeouts(connect=5, read=5)"
            )
        unknown = sorted(kwargs.keys() - set(_STAGE_FIELDS))
        if unknown:  # httpx's Timeout(pool=, total=...): said where those bounds live here
            name = unknown[0]
            elsewhere = _NOT_STAGES.get(name, "")
            raise TypeError(
                f"StageTimeouts() got an unexpected keyword argument {name!r}; its stages are "
                f"connect, tls, write, first_byte and read{elsewhere}"
            )
        return object.__new__(cls)

    def __post_init__(self) -> None:
        """Each field is a positive finite number of seconds or ``None``; anything else is a
        ``ValueError`` naming the field. (A zero, negative or NaN limit used to be accepted and
        failed later, after three attempts or in trio's own words; an infinite one is what
        ``None`` says.)"""
        for name in _STAGE_FIELDS:
            value = getattr(self, name)
            if value is None:
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value <= 0
            ):
                shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
                raise ValueError(
                    f"StageTimeouts.{name} must be a positive finite number of seconds or None "
                    f"(no limit), got {shown} ({type(value).__name__})"
                )


_STAGE_FIELDS = ("connect", "tls", "write", "first_byte", "read")
#: Other clients' names for a bound that is not a stage here, and where it is.
_NOT_STAGES = {
    "pool": " (the wait for a pooled connection is Client(pool_timeout=...))",
    "total": " (the whole call's bound is deadline=, on the client or the call)",
    "timeout": " (the whole call's bound is deadline=, on the client or the call)",
}
# help(), IDEs and inspect.signature show __init__'s keywords, not __new__'s (*args, **kwargs).
setattr(  # noqa: B010 (a class attribute mypy does not know)
    StageTimeouts,
    "__signature__",
    inspect.signature(StageTimeouts.__init__).replace(
        parameters=list(inspect.signature(StageTimeouts.__init__).parameters.values())[1:]
    ),
)


HeaderTypes: TypeAlias = Union[
    "Headers",
    Mapping[str, str],
    Sequence[tuple[str, str]],
    Mapping[bytes, bytes],
    Sequence[tuple[bytes, bytes]],
    None,
]


def check_header(name: str, value: str) -> str:
    """Validate one header; return the value to send (surrounding spaces and tabs removed).

    Together with the token check on the name this is all the validation a request header
    gets: the HTTP/1.1 writer does not validate again. Surrounding whitespace is not part of a
    field value (RFC 9110 §5.5), so a recipient would drop it anyway (and HTTP/2 strips it,
    RFC 9113 §8.2.1): it is removed here, the same for both protocols.
    """
    if not isinstance(name, str) or not isinstance(value, str):
        raise _invalid(
            f"header {name!r}: names and values must be str (or bytes where headers are "
            f"given as pairs), got {type(name).__name__} and {type(value).__name__}"
        )
    if not _TOKEN.fullmatch(name):
        raise _invalid(
            f"invalid header name {name!r}: names are tokens (letters, digits and "
            "!#$%&'*+-.^_`|~), without spaces, colons, CR, LF or NUL"
        )
    if _NOT_LATIN1.search(value):  # (a search, not encode(): its error holds the value)
        raise _invalid(
            f"invalid value for header {name!r}: only latin-1 characters can be sent in a "
            "header; percent-encode or base64 anything else"
        )
    if _FORBIDDEN_VALUE_CHARS.search(value):
        raise _invalid(
            f"invalid value for header {name!r}: control characters (CR, LF, NUL, ...) are "
            "not allowed in header values (CR/LF would let one header smuggle another)"
        )
    return value.strip(" \t")


def _check_pair(pair: object) -> None:
    """A header given by the caller: a pair of ``str`` or ``bytes`` (``None`` is refused: it
    would otherwise be sent as the text ``None``)."""
    if not (isinstance(pair, tuple) and len(pair) == 2):
        # The item's type and length only: it may hold a credential.
        shape = f"of length {len(pair)}" if isinstance(pair, tuple) else type(pair).__name__
        raise _invalid(f"headers must be (name, value) pairs, got an item {shape}")
    name, value = pair
    if not isinstance(name, (str, bytes)):
        raise _invalid(f"header names must be str or bytes, got {name!r} ({type(name).__name__})")
    if not isinstance(value, (str, bytes)):
        raise _invalid(
            f"the value of header {_to_str(name)!r} must be str or bytes, got "
            f"{type(value).__name__}; leave the header out instead of passing None"
        )


def _to_str(value: str | bytes) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else str(value)


class Headers(Mapping[str, str]):
    """A case-insensitive multi-dict of headers, in order.

    ``headers["a"]`` joins repeated values with ``", "``; ``get_list("a")`` returns them all.
    Values of Authorization, Proxy-Authorization, Cookie and Set-Cookie are hidden in ``repr``.
    """

    __slots__ = ("_items", "_names", "_raw")

    _items: list[tuple[str, str]]
    # Derived from _items on first use and dropped by every change (set, add, remove): a
    # client's default headers are encoded and scanned once, not on every request.
    _names: frozenset[str] | None
    _raw: list[tuple[bytes, bytes]] | None

    def __init__(self, headers: HeaderTypes = None, *, validate: bool = True) -> None:
        items: list[tuple[str, str]] = []
        self._names = self._raw = None
        if isinstance(headers, Headers):
            items = headers._items.copy()
            self._names, self._raw = headers._names, headers._raw
        elif headers:
            if isinstance(headers, Mapping):
                pairs: Iterable[tuple[Any, Any]] = headers.items()
            elif isinstance(headers, (list, tuple)):
                pairs = headers
            else:
                raise _invalid(
                    "headers must be a mapping or a sequence of (name, value) pairs, got "
                    f"{type(headers).__name__}"
                )
            for pair in pairs:
                if validate:
                    _check_pair(pair)
                name, value = pair
                name_s, value_s = _to_str(name), _to_str(value)
                if validate:
                    value_s = check_header(name_s, value_s)
                items.append((name_s, value_s))
        self._items = items

    @classmethod
    def from_wire(cls, raw: Iterable[tuple[bytes, bytes]]) -> Headers:
        """Headers received from a peer (already parsed by h11/h2): decoded, not re-validated."""
        headers = cls.__new__(cls)
        headers._items = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw]
        headers._names = headers._raw = None
        return headers

    def get_list(self, name: str) -> list[str]:
        """Every value of ``name``, in order (empty when absent)."""
        lname = name.lower()
        return [v for k, v in self._items if k.lower() == lname]

    def get(self, name: str, default: Any = None) -> Any:
        """The joined values of ``name``, or ``default`` (no exception raised inside)."""
        values = self.get_list(name)
        return ", ".join(values) if values else default

    def __getitem__(self, name: str) -> str:
        values = self.get_list(name)
        if not values:
            raise KeyError(name)
        return ", ".join(values)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        names = self._names
        if names is None:
            names = self._names = frozenset(k.lower() for k, _ in self._items)
        return name.lower() in names

    def has_any(self, lowercase_names: frozenset[str]) -> bool:
        """Whether any of ``lowercase_names`` is present (one set operation, cached names)."""
        names = self._names
        if names is None:
            names = self._names = frozenset(k.lower() for k, _ in self._items)
        return not names.isdisjoint(lowercase_names)

    def __iter__(self) -> Iterator[str]:
        seen: set[str] = set()
        for k, _ in self._items:
            if k.lower() not in seen:
                seen.add(k.lower())
                yield k

    def __len__(self) -> int:
        return len({k.lower() for k, _ in self._items})

    def multi_items(self) -> list[tuple[str, str]]:
        """All ``(name, value)`` pairs, repeated names included."""
        return list(self._items)

    def set(self, name: str, value: str) -> None:
        """Replace every value of ``name`` by ``value`` (validated)."""
        value = check_header(name, value)
        self.remove(name)
        self._items.append((name, value))
        self._names = self._raw = None

    def add(self, name: str, value: str) -> None:
        """Append a value of ``name`` (validated)."""
        value = check_header(name, value)
        self._items.append((name, value))
        self._names = self._raw = None

    def remove(self, name: str) -> None:
        lname = name.lower()
        self._items = [(k, v) for k, v in self._items if k.lower() != lname]
        self._names = self._raw = None

    def copy(self) -> Headers:
        return Headers(self, validate=False)

    def version(self) -> object:
        """A token that is the same object until these headers change (any ``set``, ``add``
        or ``remove``): what a cache built from them compares with ``is``."""
        raw = self._raw
        if raw is None:
            raw = self._raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in self._items]
        return raw

    def raw(self) -> list[tuple[bytes, bytes]]:
        """The pairs encoded for the wire (latin-1). A new list each time (the caller may
        extend it); the encoding itself is done once per change."""
        raw = self._raw
        if raw is None:
            raw = self._raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in self._items]
        return raw.copy()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Headers):
            return sorted((k.lower(), v) for k, v in self._items) == sorted(
                (k.lower(), v) for k, v in other._items
            )
        if isinstance(other, Mapping):
            return self == Headers(other, validate=False)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Headers({redact_headers(self._items)!r})"


class HTTPStatusError(TrioRetryError):
    """Raised by ``Response.raise_for_status()`` for a status >= 400; ``.response`` is it."""

    def __init__(self, message: str, *, response: Response) -> None:
        super().__init__(message)
        self.response = response


#: Headers whose values are URLs: shown by :func:`shown_url` (no userinfo, no query value).
URL_HEADERS = frozenset({"location", "content-location", "referer"})


def redact_headers(items: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The pairs as they may be shown: credential-bearing values replaced by
    ``"[redacted]"``, URL values by :func:`shown_url`."""
    return [(k, _shown_value(k.lower(), v)) for k, v in items]


def _shown_value(name: str, value: str) -> str:
    if name in SENSITIVE_HEADERS:
        return "[redacted]"
    return shown_url(value) if name in URL_HEADERS else value


@dataclass(frozen=True, slots=True)
class SentRequest:
    """``Response.request``: the request as its final attempt sent it. ``headers`` are the
    ones on the wire (``Host``, auth, cookies included; hidden in a repr like all
    credentials)."""

    method: str
    url: URL
    headers: Headers


class Response(ResponseBody, ResponseViews):
    """An HTTP response.

    For buffered calls ``content`` is the whole body. For ``client.stream(...)`` read it with
    ``aiter_bytes()`` (or ``aread()``); the connection returns to the pool once the body has
    been read to the end or the ``async with`` block exits.
    """

    def __init__(
        self,
        *,
        status: int,
        reason: str,
        headers: Headers | Sequence[tuple[bytes, bytes]],
        http_version: str,
        url: URL,
        request_method: str,
        content: bytes | None = None,
        attempts: Sequence[Attempt] = (),
        retry_decision: Decision | None = None,
        stream: AsyncIterator[bytes] | None = None,
        decoder: BodyDecoder | None = None,
        request: SentRequest | None = None,
        elapsed: timedelta | float = 0.0,
    ) -> None:
        self.status = status
        self.reason = reason
        # Headers as received (pairs of bytes) are decoded on first use of ``headers``.
        self._headers = headers if isinstance(headers, Headers) else None
        self._wire_headers = headers
        self.http_version = http_version
        #: The URL of this response's request: after redirects, the final one.
        self.url = url
        self._request: SentRequest | None = (
            request if request is not None else SentRequest(request_method, url, Headers())
        )
        self._sent: Sequence[tuple[bytes, bytes]] = ()
        self._elapsed: timedelta | float = elapsed
        self.request_method = request_method
        self._content = content
        self._attempts: list[Attempt] | None = list(attempts)
        self._attempt_record: Callable[[], Attempt] | None = None
        self.retry_decision = retry_decision
        self.history: list[Response] = []
        self._stream = stream
        self._decoder = decoder
        self._consumed = content is not None

    @classmethod
    def _received(
        cls,
        status: int,
        reason: str,
        wire_headers: Sequence[tuple[bytes, bytes]],
        http_version: str,
        url: URL,
        request_method: str,
        sent_headers: Sequence[tuple[bytes, bytes]],
        elapsed: float,
        content: bytes | None,
        attempts: list[Attempt] | None,
        retry_decision: Decision | None,
        stream: AsyncIterator[bytes] | None,
        decoder: BodyDecoder | None,
        attempt_record: Callable[[], Attempt] | None = None,
        /,
    ) -> Response:
        """The client's own constructor (one per call): what the wire gave, kept as it came.
        ``headers``, ``request`` and ``elapsed`` are built from it when first read; the
        ``attempts`` list becomes the response's own. ``attempts=None``: the call's one
        attempt, whose record ``attempt_record()`` builds when ``attempts`` is first read.

        (Positional: its one caller, ``_call/answer.py``, makes one per call, and matching 14
        keywords to their parameters cost about 1,100 instructions more under callgrind.)"""
        self = cls.__new__(cls)
        self.status = status
        self.reason = reason
        self._headers = None
        self._wire_headers = wire_headers
        self.http_version = http_version
        self.url = url
        self._request = None
        self._sent = sent_headers
        self._elapsed = elapsed
        self.request_method = request_method
        self._content = content
        self._attempts = attempts
        self._attempt_record = attempt_record
        self.retry_decision = retry_decision
        self.history = []
        self._stream = stream
        self._decoder = decoder
        self._consumed = content is not None
        return self

    @property
    def attempts(self) -> list[Attempt]:
        """Every attempt of the call that produced this response, in order (this hop's, after
        redirects: earlier hops are in ``history``)."""
        attempts = self._attempts
        if attempts is None:  # one attempt, its record built on first read
            record = self._attempt_record
            assert record is not None
            attempts = self._attempts = [record()]
            self._attempt_record = None
        return attempts

    @attempts.setter
    def attempts(self, attempts: list[Attempt]) -> None:
        self._attempts = attempts
        self._attempt_record = None

    @property
    def request(self) -> SentRequest:
        """The request as sent (method, URL, headers on the wire)."""
        request = self._request
        if request is None:
            request = self._request = SentRequest(
                self.request_method, self.url, Headers.from_wire(self._sent)
            )
        return request

    @property
    def elapsed(self) -> timedelta:
        """From the start of the call (redirects included) to this response's head, and for a
        buffered call to the end of its body."""
        from datetime import timedelta  # (datetime: on the first read of an elapsed time)

        elapsed = self._elapsed
        if not isinstance(elapsed, timedelta):
            elapsed = self._elapsed = timedelta(seconds=elapsed)
        return elapsed

    @property
    def headers(self) -> Headers:
        """The response headers (case-insensitive multi-dict)."""
        headers = self._headers
        if headers is None:
            wire = cast(Sequence[tuple[bytes, bytes]], self._wire_headers)
            headers = self._headers = Headers.from_wire(wire)
        return headers

    @property
    def encoding(self) -> str:
        """The ``charset`` of ``Content-Type`` when Python knows it; otherwise ``"utf-8"``
        (the fallback for a missing or unknown charset; no sniffing of the body)."""
        content_type = self.headers.get("content-type", "")
        match = re.search(r"charset=\"?([\w.:-]+)", content_type, re.IGNORECASE)
        if match:
            try:
                codecs.lookup(match.group(1))
            except LookupError:
                pass
            else:
                return match.group(1)
        return "utf-8"

    @property
    def text(self) -> str:
        """``content`` decoded with ``encoding``; undecodable bytes become U+FFFD."""
        return self.content.decode(self.encoding, errors="replace")

    def json(self, **kwargs: Any) -> Any:
        """``content`` parsed as JSON (``kwargs`` go to ``json.loads``). A body that is not
        JSON raises :class:`ResponseNotJSON` (a ``TrioRetryError`` and a ``ValueError``)."""
        try:
            import json  # (on the first response read as JSON)

            return json.loads(self.content, **kwargs)
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
            raise ResponseNotJSON(
                f"the body of {self.request_method} {self.url} ({self.status}) is not JSON: {exc}"
            ) from exc

    def raise_for_status(self) -> Response:
        """Raise :class:`HTTPStatusError` when ``status >= 400``; otherwise return ``self``."""
        if self.status >= 400:
            kind = "client error" if self.status < 500 else "server error"
            raise HTTPStatusError(
                f"{kind} {self.status} {self.reason} for {self.request_method} {self.url}"
                + self._key_hint(),
                response=self,
            )
        return self

    def _key_hint(self) -> str:
        """A 400 whose body names the Idempotency-Key, to a request that sent none (the
        draft's "key missing"): which option adds one."""
        body = self._content
        if self.status != 400 or body is None or b"idempotency-key" not in body[:4096].lower():
            return ""
        if any(name.lower() == b"idempotency-key" for name, _ in self._sent):
            return ""
        return (
            "; the server asks for an Idempotency-Key: idempotency_key=True adds one to a "
            'call, Upstream(idempotency_keys="auto") to every non-idempotent call to an origin'
        )

    def __repr__(self) -> str:
        return (
            f"<Response [{self.status} {self.reason}] {self.http_version} "
            f"{self.request_method} {self.url} attempts={len(self.attempts)}>"
        )
