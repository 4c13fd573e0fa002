"""Idempotency keys (draft-ietf-httpapi-idempotency-key-header): the key a call generates,
and the client's memory of the keys it sent.

- :func:`generated_key`: ``idempotency_key=True`` (and ``Upstream(idempotency_keys="auto")``):
  a random UUID4, as the draft recommends, written as the RFC 8941 ``sf-string`` the header
  holds (``"8e03978e-..."``, quotes included). The key *is* that value: it is what every attempt
  of the call sends, what ``HttpAmbiguousExecutionError.idempotency_key`` says, and what a
  caller passes as ``idempotency_key=`` to send the same header again. A key the caller gives
  is sent as given (servers that predate the draft take a bare token).
- :class:`KeyLedger`: what each key was first sent with (method, target, body) and when. The
  same key with another payload is ``InvalidRequest`` before a byte is sent: the server would
  answer 422 (the draft's §2.7), or worse, one that does not check would answer the first
  payload's result. The ledger remembers the :data:`REMEMBERED` most recent keys; a key it no
  longer remembers is taken as new. Its first use is when the key's lifetime starts
  (``Upstream(idempotency_key_ttl=...)``, read by the loop).

A body that is not in memory (a stream, a file, a ``Reopenable``) is fingerprinted by its
length when known: its bytes are not read twice for this.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import TYPE_CHECKING, Protocol

from .._core.evidence import Evidence, FailureCategory
from .._core.idempotency import Idempotency, classify_idempotency
from .._errors import InvalidRequest

if TYPE_CHECKING:
    from .._body import PreparedBody
    from .._models import URL, Origin
    from .config import ClientConfig

__all__ = ["REMEMBERED", "KeyLedger", "auto_key", "call_key", "generated_key"]

#: How many keys a client remembers (the oldest is forgotten first).
REMEMBERED = 10_000

Fingerprint = tuple[str, str, str]


class Keyed(Protocol):
    """What the ledger reads of a request (a ``PreparedRequest``)."""

    method: str
    url: URL
    body: PreparedBody
    idempotency_key: str | None


def generated_key() -> str:
    """A fresh key: a UUID4 as an RFC 8941 ``sf-string`` (a UUID needs no escaping)."""
    from .._body import new_uuid4  # (bodies: imported by the first call, not by Client())

    return f'"{new_uuid4()}"'


def call_key(
    config: ClientConfig,
    given: str | bool | None,
    header_key: bool,
    origin: Origin,
    method: str,
    idempotency: Idempotency | None,
) -> tuple[str | None, bool]:
    """The key a call sends and whether it was generated: ``idempotency_key=True``, or the
    upstream's ``"auto"`` for a call that gave none (not even as a header, ``header_key``),
    generates one; a string is the key; ``None`` / ``False``: none here."""
    if given is True or (
        given is None and not header_key and auto_key(config, origin, method, idempotency)
    ):
        return generated_key(), True
    return (given if isinstance(given, str) else None), False


def auto_key(
    config: ClientConfig, origin: Origin, method: str, idempotency: Idempotency | None
) -> bool:
    """Whether a call that gave no key gets one: its upstream says
    ``idempotency_keys="auto"`` and the call is not safely idempotent."""
    upstream = config.upstreams.get(origin) or config.default_upstream
    if upstream.idempotency_keys is None:
        return False
    return not classify_idempotency(method, (), idempotency).safely_idempotent


def fingerprint(request: Keyed) -> Fingerprint:
    """What a key stands for: the method, the target and the body (its SHA-256 when in memory,
    else its length when known)."""
    body = request.body.in_memory
    if body is not None:
        digest = hashlib.sha256(body).hexdigest()
    else:
        digest = f"not in memory, length {request.body.known_length}"
    return request.method, str(request.url), digest


class KeyLedger:
    """The keys a client sent, each with its payload's fingerprint and its first use."""

    __slots__ = ("_keys",)

    def __init__(self) -> None:
        self._keys: OrderedDict[str, tuple[Fingerprint, float]] = OrderedDict()

    def check(self, request: Keyed, now: float) -> float:
        """Remember the key of ``request`` (which has one) and return when it was first used
        (``now`` for a new key). Raises ``InvalidRequest`` (``NOT_SENT``) when the key was sent
        with another method, target or body; the message names what differs, never the key or
        the body (a key may stand for the payment it protects)."""
        key = request.idempotency_key
        assert key is not None
        seen = fingerprint(request)
        known = self._keys.get(key)
        if known is None:
            self._keys[key] = (seen, now)
            if len(self._keys) > REMEMBERED:
                self._keys.popitem(last=False)
            return now
        (method, target, body), first = known
        if (method, target, body) != seen:
            differs = [
                what
                for what, was, now_is in (
                    ("method", method, seen[0]),
                    ("target", target, seen[1]),
                    ("body", body, seen[2]),
                )
                if was != now_is
            ]
            raise InvalidRequest(
                f"{request.method} {request.url}: this Idempotency-Key was already sent by "
                f"this client with another {' and '.join(differs)} ({method} {target}); a key "
                "stands for one request (draft-ietf-httpapi-idempotency-key-header: the server "
                "answers 422): use a new key (idempotency_key=True) for a different request. "
                "Nothing was sent",
                evidence=Evidence.NOT_SENT,
                category=FailureCategory.INVALID_REQUEST,
            )
        self._keys.move_to_end(key)
        return first

    def first_used(self, key: str) -> float | None:
        """When ``key`` was first sent (``None``: not remembered)."""
        known = self._keys.get(key)
        return known[1] if known is not None else None
