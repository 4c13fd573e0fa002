"""Ready-made credentials: ``BasicAuth`` and ``BearerAuth`` (both ``RefreshableAuth``),
``DigestAuth`` (a ``RequestAuth``: it sees the request it signs), and netrc lookups.

Their ``repr`` never shows the secret. ``BearerAuth`` can take a token *provider* (an async
callable) so that the 401 refresh-and-replay rule fetches a fresh token.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ._core.secrecy import unencodable_at, withheld
from ._models import URL, Headers

if TYPE_CHECKING:
    import netrc

    from ._body import PreparedBody

__all__ = [
    "AuthRequest",
    "BasicAuth",
    "BearerAuth",
    "DigestAuth",
    "RequestAuth",
    "auth_headers",
    "netrc_auth",
]


def _check_credentials(kind: str, username: object, password: object) -> None:
    """A user name and password as text that UTF-8 can encode, checked when the credentials
    are made: the encoder's own error would hold the password (and be raised mid-call)."""
    for what, text in (("user name", username), ("password", password)):
        if not isinstance(text, str):
            raise TypeError(f"{kind}: the {what} must be str, got {type(text).__name__}")
        position = unencodable_at(text)
        if position is not None:
            raise ValueError(
                f"{kind}: the {what} holds a lone surrogate at position {position}, which "
                "UTF-8 cannot encode (it is not shown)"
            )


class BasicAuth:
    """HTTP Basic credentials (RFC 7617). ``refresh()`` does nothing: they cannot change."""

    __slots__ = ("_header",)

    def __init__(self, username: str, password: str) -> None:
        _check_credentials("BasicAuth", username, password)
        if ":" in username:
            raise ValueError("a Basic auth username cannot contain ':'")
        token = base64.b64encode(f"{username}:{password}".encode()).decode("ascii")
        self._header = f"Basic {token}"

    async def headers(self) -> Mapping[str, str]:
        return {"Authorization": self._header}

    async def refresh(self) -> None:
        return None

    def __repr__(self) -> str:
        return "BasicAuth([redacted])"


def _check_token(token: object, where: str) -> str:
    """A bearer token as RFC 6750 §2.1 sends it: visible ASCII without spaces, the scheme
    left out. Refused with the token never shown: bytes (sent as ``Bearer b'...'``), an empty
    string (sent as a bare ``Bearer``), and ``"Bearer ..."`` (sent as ``Bearer Bearer ...``)."""
    accepted = "the token alone, as str: visible ASCII without spaces (RFC 6750)"
    if not isinstance(token, str):
        raise TypeError(f"{where} must be {accepted}, got {withheld(token)}")
    if not token:
        raise ValueError(f"{where} must be {accepted}, got an empty string")
    if token[:7].lower() == "bearer ":
        raise ValueError(
            f"{where} must be {accepted}, got a string starting with 'Bearer ' (BearerAuth "
            "adds the scheme itself; the token is not shown)"
        )
    bad = next((i for i, ch in enumerate(token) if not "!" <= ch <= "~"), None)
    if bad is not None:
        raise ValueError(
            f"{where} must be {accepted}, got a string of {len(token)} characters with a space, "
            f"control or non-ASCII character at position {bad} (the token is not shown)"
        )
    return token


class BearerAuth:
    """A bearer token, fixed or from ``provider`` (awaited again on ``refresh()``).

    The token is checked where it is given (``ValueError``/``TypeError``, never showing it):
    visible ASCII without spaces, without the ``Bearer`` scheme, which this adds."""

    __slots__ = ("_provider", "_token")

    def __init__(
        self, token: str | None = None, *, provider: Callable[[], Awaitable[str]] | None = None
    ) -> None:
        if token is None and provider is None:
            raise ValueError("BearerAuth needs a token or a provider")
        if provider is not None and not callable(provider):
            raise TypeError(
                f"BearerAuth's provider must be an async function returning the token, got "
                f"{withheld(provider)}"
            )
        self._token = _check_token(token, "BearerAuth's token") if token is not None else None
        self._provider = provider

    async def headers(self) -> Mapping[str, str]:
        if self._token is None:
            await self.refresh()
        return {"Authorization": f"Bearer {self._token}"}

    async def refresh(self) -> None:
        if self._provider is not None:
            self._token = _check_token(
                await self._provider(), "the token BearerAuth's provider gave"
            )

    def __repr__(self) -> str:
        return "BearerAuth([redacted])"


# --- auth that sees the request ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AuthRequest:
    """What an auth sees of the request it signs, for each attempt: the method, the URL, the
    headers prepared so far (without ``Host``, cookies or other auth), and the body when it is
    bytes in memory (``None`` otherwise: a stream or file body is never read for signing)."""

    method: str
    url: URL
    headers: Headers = field(repr=False)
    body: bytes | None = field(default=None, repr=False)


@runtime_checkable
class RequestAuth(Protocol):
    """Credentials computed from the request itself (an HMAC signature, SigV4-style).

    ``sign(request)`` is awaited before each attempt; the headers it returns are added (a
    header the caller set on the call wins). An auth may also define
    ``async def challenge(self, request, response_headers) -> bool`` (see :class:`DigestAuth`):
    after a 401 it is given the response's headers and returns whether the request should be
    sent again with the new credentials (once per call, and only for a replayable body).
    """

    async def sign(self, request: AuthRequest) -> Mapping[str, str]: ...


async def auth_headers(auth: object, request: _Prepared) -> Mapping[str, str]:
    """The headers ``auth`` adds to one attempt of ``request``."""
    if isinstance(auth, RequestAuth):
        return await auth.sign(auth_request(request))
    headers: Mapping[str, str] = await auth.headers()  # type: ignore[attr-defined]
    return headers


def auth_request(request: _Prepared) -> AuthRequest:
    return AuthRequest(request.method, request.url, request.headers, request.body.in_memory)


class _Prepared(Protocol):
    @property
    def method(self) -> str: ...
    @property
    def url(self) -> URL: ...
    @property
    def headers(self) -> Headers: ...
    @property
    def body(self) -> PreparedBody: ...


# --- Digest (RFC 7616) -----------------------------------------------------------------------

# A pattern (compiled by re on first use, then cached there): only digest auth needs it.
_DIGEST_PARAM = r'\s*([A-Za-z0-9_-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^,\s]*)\s*,?'
_HASHES = {"MD5": hashlib.md5, "SHA-256": hashlib.sha256}


def _parse_digest_challenge(values: list[str]) -> dict[str, str] | None:
    """The parameters of the first ``Digest`` challenge among WWW-Authenticate values."""
    for value in values:
        match = re.search(r"(?:^|,)\s*Digest\s+", value, re.IGNORECASE)
        if match is None:
            continue
        params: dict[str, str] = {}
        rest = value[match.end() :]
        while rest:
            param = re.match(_DIGEST_PARAM, rest)
            if param is None:  # the next challenge's scheme: this one has ended
                break
            raw = param.group(2)
            if raw.startswith('"'):
                raw = re.sub(r"\\(.)", r"\1", raw[1:-1])
            params[param.group(1).lower()] = raw
            rest = rest[param.end() :]
        return params
    return None


class DigestAuth:
    """HTTP Digest credentials (RFC 7616): ``MD5`` and ``SHA-256`` (and their ``-sess``
    forms), ``qop=auth``.

    The first request goes without credentials; the server's 401 challenge is answered once
    per call by sending the request again, which happens only for a replayable body (bytes in
    memory, a ``Reopenable`` or a path). The 401 stays in the attempt trail (decision
    ``None``: the engine was not consulted; it does not count against ``max_attempts``). The
    challenge is kept, so later requests are signed at once (nonce count incremented); a
    ``stale=true`` challenge is answered again, a second plain 401 is the final response.
    Its ``repr`` never shows the password.
    """

    __slots__ = ("_challenge", "_count", "_password", "_username")

    def __init__(self, username: str, password: str) -> None:
        _check_credentials("DigestAuth", username, password)
        self._username = username
        self._password = password
        self._challenge: dict[str, str] | None = None
        self._count = 0

    async def sign(self, request: AuthRequest) -> Mapping[str, str]:
        challenge = self._challenge
        if challenge is None:
            return {}
        return {"Authorization": self._authorization(challenge, request)}

    async def challenge(self, request: AuthRequest, response_headers: Headers) -> bool:
        params = _parse_digest_challenge(response_headers.get_list("www-authenticate"))
        if params is None or "nonce" not in params:
            return False
        algorithm = params.get("algorithm", "MD5").upper()
        if algorithm.removesuffix("-SESS") not in _HASHES:
            return False
        qops = [q.strip() for q in params.get("qop", "").split(",") if q.strip()]
        if qops and "auth" not in qops:
            return False  # only qop=auth (auth-int would need the body hashed)
        stale = params.get("stale", "").lower() == "true"
        previous = self._challenge
        if previous is not None and not stale and previous.get("nonce") == params["nonce"]:
            return False  # our answer to this very nonce was refused: wrong credentials
        self._challenge = params
        self._count = 0
        return True

    def _authorization(self, challenge: dict[str, str], request: AuthRequest) -> str:
        algorithm = challenge.get("algorithm", "MD5")
        hash_name = algorithm.upper().removesuffix("-SESS")
        digest = _HASHES[hash_name]

        def h(text: str) -> str:
            return digest(text.encode()).hexdigest()

        realm, nonce = challenge.get("realm", ""), challenge["nonce"]
        uri = request.url.target
        self._count += 1
        nc = f"{self._count:08x}"
        cnonce = os.urandom(16).hex()  # what secrets.token_hex(16) is, without its import
        ha1 = h(f"{self._username}:{realm}:{self._password}")
        if algorithm.upper().endswith("-SESS"):
            ha1 = h(f"{ha1}:{nonce}:{cnonce}")
        ha2 = h(f"{request.method}:{uri}")
        qop = "auth" if challenge.get("qop") else None
        if qop:
            response = h(f"{ha1}:{nonce}:{nc}:{cnonce}:{qop}:{ha2}")
        else:
            response = h(f"{ha1}:{nonce}:{ha2}")
        parts = [
            f'username="{_quote(self._username)}"',
            f'realm="{_quote(realm)}"',
            f'nonce="{_quote(nonce)}"',
            f'uri="{_quote(uri)}"',
            f"algorithm={algorithm}",
            f'response="{response}"',
        ]
        if qop:
            parts += [f"qop={qop}", f"nc={nc}", f'cnonce="{cnonce}"']
        if "opaque" in challenge:
            parts.append(f'opaque="{_quote(challenge["opaque"])}"')
        return "Digest " + ", ".join(parts)

    def __repr__(self) -> str:
        return "DigestAuth([redacted])"


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


# --- netrc -----------------------------------------------------------------------------------

_NETRC_CACHE: dict[str, tuple[tuple[int, int], netrc.netrc]] = {}


def netrc_auth(host: str, environ: Mapping[str, str] | None = None) -> BasicAuth | None:
    """``BasicAuth`` from the netrc file (``$NETRC``, else ``~/.netrc``) for ``host``, or
    ``None`` (no file, no entry). The parsed file is cached until it changes. A malformed
    file raises ``ValueError`` naming it (a silent skip would hide why auth is missing)."""
    env = os.environ if environ is None else environ
    path = env.get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")
    try:
        stat = os.stat(path)
        mtime = (stat.st_mtime_ns, stat.st_size)
    except OSError:
        return None
    cached = _NETRC_CACHE.get(path)
    if cached is None or cached[0] != mtime:
        # Imported here, where a netrc file exists and is read: netrc (and shlex behind it)
        # is start-up time that most programs never need.
        import netrc

        try:
            parsed = netrc.netrc(path)
        except (netrc.NetrcParseError, OSError) as exc:
            raise ValueError(f"the netrc file {path!r} could not be read: {exc}") from None
        cached = _NETRC_CACHE[path] = (mtime, parsed)
    entry = cached[1].authenticators(host)
    if entry is None:
        return None
    login, _, password = entry
    return BasicAuth(login or "", password or "")
