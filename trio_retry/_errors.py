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
    │   └── AdmissionRejected         draining, bulkhead, circuit breaker open, throttled (.reason)
    ├── HttpAmbiguousExecutionError   a non-idempotent request may have run: NOT a RequestFailed
    ├── ExecutedWithoutResponse       it ran (its reconciler said so), and there is no response
    ├── HTTPStatusError               raise_for_status() on a status >= 400
    ├── TooManyRedirects              more than max_redirects hops
    ├── ClientStateError              the client used outside ``async with`` or after close
    ├── StreamClosed                  a streamed body read after its block (or aclose()) closed it
    ├── ResponseNotJSON               Response.json() on a body that is not JSON (a ValueError)
    └── MissingExtra                  a feature configured without its extra (an ImportError)

``HttpAmbiguousExecutionError`` is deliberately a sibling of ``RequestFailed``: code that catches
"failed" (and perhaps retries on its own) must not swallow "it may have happened".
``trio.Cancelled`` is never wrapped in any of these.

Where they live (imports go one way: core < models < this module): the classes that need no
response are in ``_core/errors.py`` (so ``_models`` can raise them), ``HTTPStatusError`` beside
``Response`` in ``_models`` (which raises it), the two that carry responses here; every one is
re-exported here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ._core.attempt import Attempt
from ._core.decision import Decision
from ._core.errors import AdmissionRejected as AdmissionRejected
from ._core.errors import ClientStateError as ClientStateError
from ._core.errors import ConnectFailed as ConnectFailed
from ._core.errors import ConnectionBroken as ConnectionBroken
from ._core.errors import DeadlineExceeded as DeadlineExceeded
from ._core.errors import InvalidRequest as InvalidRequest
from ._core.errors import MissingExtra as MissingExtra
from ._core.errors import PoolTimeout as PoolTimeout
from ._core.errors import ProtocolFailed as ProtocolFailed
from ._core.errors import RejectReason as RejectReason
from ._core.errors import RequestFailed as RequestFailed
from ._core.errors import ResponseNotJSON as ResponseNotJSON
from ._core.errors import StreamClosed as StreamClosed
from ._core.errors import TLSFailed as TLSFailed
from ._core.errors import TrioRetryError as TrioRetryError
from ._core.evidence import Evidence, FailureCategory
from ._models import HTTPStatusError as HTTPStatusError

if TYPE_CHECKING:
    from ._models import Response
    from ._reconcile import Reconciled

__all__ = [
    "AdmissionRejected",
    "ClientStateError",
    "ResponseNotJSON",
    "ConnectFailed",
    "ConnectionBroken",
    "DeadlineExceeded",
    "ExecutedWithoutResponse",
    "HTTPStatusError",
    "HttpAmbiguousExecutionError",
    "InvalidRequest",
    "MissingExtra",
    "PoolTimeout",
    "ProtocolFailed",
    "RejectReason",
    "RequestFailed",
    "StreamClosed",
    "TLSFailed",
    "TooManyRedirects",
    "TrioRetryError",
]


class HttpAmbiguousExecutionError(TrioRetryError):
    """A request that is not safely idempotent may have been executed, and was not retried.

    Raised when the engine returns ``AmbiguousFailure``, or when any final failure carries
    ``SENT_NO_RESPONSE`` on a non-idempotent operation (a deadline included). What to do: look
    the outcome up with the upstream (reconcile), or replay with the same ``.idempotency_key``
    if the server deduplicates on it. ``.response`` is the 502/503/504 response when there was
    one; the underlying error is ``__cause__``. ``.reconciled``: what the call's reconciler
    said (unknown, or why the client could not tell: it raised, ran out of time), ``None``
    when there was none.
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
        reconciled: Reconciled | None = None,
    ) -> None:
        super().__init__(message)
        self.evidence = evidence
        self.attempts: list[Attempt] = list(attempts)
        self.response = response
        self.idempotency_key = idempotency_key
        self.decision = decision
        self.reconciled = reconciled

    @property
    def category(self) -> FailureCategory | None:
        """The last attempt's failure category (``None`` for a 502/503/504 response)."""
        return self.attempts[-1].category if self.attempts else None


class ExecutedWithoutResponse(TrioRetryError):
    """The request's outcome was in doubt, and the call's reconciler said the server executed
    it, without a response to return (``Reconciled.executed()``): it ran, and it was not sent
    again. ``.evidence`` is ``SENT_NO_RESPONSE`` (or ``RESPONSE_RECEIVED`` after a 502/503/504,
    then ``.response``); ``.reconciled`` is the reconciler's answer; ``.attempts`` the trail.
    """

    def __init__(
        self,
        message: str,
        *,
        evidence: Evidence,
        reconciled: Reconciled,
        attempts: Sequence[Attempt] = (),
        response: Response | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        super().__init__(message)
        self.evidence = evidence
        self.reconciled = reconciled
        self.attempts: list[Attempt] = list(attempts)
        self.response = response
        self.idempotency_key = idempotency_key


class TooManyRedirects(TrioRetryError):
    """More than ``max_redirects`` redirects were followed; ``.history`` holds the responses."""

    def __init__(self, message: str, *, history: Sequence[Response] = ()) -> None:
        super().__init__(message)
        self.history = list(history)
