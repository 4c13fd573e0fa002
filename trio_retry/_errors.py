"""The exception tree, translated from wire errors at one boundary (the client).

::

    TrioRetryError
    ├── RequestFailed                 the call failed; evidence says how far it got
    │   ├── InvalidRequest            bad URL, scheme or header bytes; nothing was sent
    │   ├── ConnectFailed             DNS or TCP connect failed; nothing was sent
    │   ├── TLSFailed                 TLS handshake or certificate verification failed
    │   ├── PoolTimeout               no connection became free within pool_timeout
    │   ├── DeadlineExceeded          the call's deadline (or a stage timeout) fired
    │   ├── ConnectionBroken          reset, EOF or write error on an established connection
    │   ├── ProtocolFailed            the peer broke HTTP (or we would have)
    │   └── AdmissionRejected         client draining, or bulkhead rejection
    ├── HttpAmbiguousExecutionError   a non-idempotent request may have run: NOT a RequestFailed
    ├── HTTPStatusError               raise_for_status() on a status >= 400
    ├── TooManyRedirects              more than max_redirects hops
    └── ClientStateError              the client used outside ``async with`` or after close

``HttpAmbiguousExecutionError`` is deliberately a sibling of ``RequestFailed``: code that catches
"failed" (and perhaps retries on its own) must not swallow "it may have happened".
``trio.Cancelled`` is never wrapped in any of these.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ._core.attempt import Attempt
from ._core.evidence import Evidence, FailureCategory

if TYPE_CHECKING:
    from ._core.decision import Decision
    from ._models import Response

__all__ = [
    "AdmissionRejected",
    "ClientStateError",
    "ConnectFailed",
    "ConnectionBroken",
    "DeadlineExceeded",
    "HTTPStatusError",
    "HttpAmbiguousExecutionError",
    "InvalidRequest",
    "PoolTimeout",
    "ProtocolFailed",
    "RequestFailed",
    "TLSFailed",
    "TooManyRedirects",
    "TrioRetryError",
]


class TrioRetryError(Exception):
    """Base of every exception trio_retry raises (never of ``trio.Cancelled``)."""


class RequestFailed(TrioRetryError):
    """The call ended without a usable response, and the outcome is *not* in doubt.

    Raised when the loop stops on a failure that is not ambiguous; ``.evidence`` says which:
    ``NOT_SENT`` (the server never received it), ``SENT_NO_RESPONSE`` only for a safely
    idempotent operation (repeating it is harmless), or ``PARTIAL_RESPONSE`` (the server
    executed it and answered, but the response broke: the side effect happened). A
    non-idempotent request that may have run is never a ``RequestFailed``: that is
    :class:`HttpAmbiguousExecutionError`. ``.category`` and ``.attempts`` describe the last
    attempt and the whole trail; ``.decision`` is the engine's last decision (``None`` when it
    was not consulted).
    """

    def __init__(
        self,
        message: str,
        *,
        evidence: Evidence = Evidence.NOT_SENT,
        attempts: Sequence[Attempt] = (),
        decision: Decision | None = None,
        category: FailureCategory | None = None,
    ) -> None:
        super().__init__(message)
        self.evidence = evidence
        self.attempts: list[Attempt] = list(attempts)
        self.decision = decision
        self.category = category

    def __str__(self) -> str:
        text = super().__str__()
        if self.attempts:
            text += f" [{len(self.attempts)} attempt(s), evidence {self.evidence}]"
        if self.decision is not None:
            text += f"; {self.decision}"
        return text


class InvalidRequest(RequestFailed):
    """Malformed URL, unsupported scheme, CR/LF/NUL in a header, a bad body: nothing was sent."""


class ConnectFailed(RequestFailed):
    """DNS resolution or the TCP connection failed: nothing was sent."""


class TLSFailed(RequestFailed):
    """The TLS handshake failed (category ``TLS_HANDSHAKE``), or the server's certificate did not
    verify (``TLS_CERTIFICATE``, permanent): nothing was sent."""


class PoolTimeout(RequestFailed):
    """No connection became available within ``pool_timeout``: nothing was sent."""


class DeadlineExceeded(RequestFailed):
    """The call's deadline or a stage timeout fired; ``.evidence`` is that of the stage reached."""


class ConnectionBroken(RequestFailed):
    """The connection was reset or closed, or a write failed, after it was established."""


class ProtocolFailed(RequestFailed):
    """The peer sent something that is not valid HTTP (``REMOTE_PROTOCOL``), or a limit such as
    ``max_header_bytes`` was exceeded; or we would have broken the protocol
    (``LOCAL_PROTOCOL``)."""


class AdmissionRejected(RequestFailed):
    """The call was not admitted: the client is draining or closed: nothing was sent."""


class HttpAmbiguousExecutionError(TrioRetryError):
    """A request that is not safely idempotent may have been executed, and was not retried.

    Raised when the engine returns ``AmbiguousFailure``, or when any final failure carries
    ``SENT_NO_RESPONSE`` on a non-idempotent operation (a deadline included). What to do: look
    the outcome up with the upstream (reconcile), or replay with the same ``.idempotency_key``
    if the server deduplicates on it. ``.response`` is the 502/503/504 response when there was
    one; the underlying error is ``__cause__``.
    """

    def __init__(
        self,
        message: str,
        *,
        evidence: Evidence,
        attempts: Sequence[Attempt] = (),
        response: Response | None = None,
        idempotency_key: str | None = None,
        decision: Decision | None = None,
    ) -> None:
        super().__init__(message)
        self.evidence = evidence
        self.attempts: list[Attempt] = list(attempts)
        self.response = response
        self.idempotency_key = idempotency_key
        self.decision = decision

    @property
    def category(self) -> FailureCategory | None:
        """The last attempt's failure category (``None`` for a 502/503/504 response)."""
        return self.attempts[-1].category if self.attempts else None


class HTTPStatusError(TrioRetryError):
    """Raised by ``Response.raise_for_status()`` for a status >= 400; ``.response`` is it."""

    def __init__(self, message: str, *, response: Response) -> None:
        super().__init__(message)
        self.response = response


class TooManyRedirects(TrioRetryError):
    """More than ``max_redirects`` redirects were followed; ``.history`` holds the responses."""

    def __init__(self, message: str, *, history: Sequence[Response] = ()) -> None:
        super().__init__(message)
        self.history = list(history)


class ClientStateError(TrioRetryError, RuntimeError):
    """The client was used outside ``async with`` (not yet entered, or already closed)."""
