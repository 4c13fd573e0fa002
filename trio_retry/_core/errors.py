"""The failures that need nothing above the core to describe them: ``TrioRetryError``, the
``RequestFailed`` family and ``ClientStateError`` (the whole tree, with the exceptions that
carry a response, is in ``trio_retry._errors``). Pure values: no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from .attempt import Attempt
from .decision import Decision
from .evidence import Evidence, FailureCategory

__all__ = [
    "AdmissionRejected",
    "ClientStateError",
    "ConnectFailed",
    "ConnectionBroken",
    "DeadlineExceeded",
    "InvalidRequest",
    "MissingExtra",
    "PoolTimeout",
    "ProtocolFailed",
    "RejectReason",
    "RequestFailed",
    "StreamClosed",
    "TLSFailed",
    "TrioRetryError",
]


class TrioRetryError(Exception):
    """Base of every exception trio_retry raises (never of ``trio.Cancelled``)."""


class MissingExtra(TrioRetryError, ImportError):
    """An optional feature was asked for without its extra installed (the message names it,
    with the ``pip install`` that installs it). Raised where the feature is configured:
    ``Client(http3=True)`` (extra ``http3``), ``OpenTelemetry()`` and
    ``trio_retry.instrumentation`` (extra ``otel``)."""


class RequestFailed(TrioRetryError):
    """The call ended without a usable response, and the outcome is *not* in doubt.

    Raised when the loop stops on a failure that is not ambiguous; ``.evidence`` (the call's:
    the last attempt's, unless that one is ``NOT_SENT`` and an earlier one is not) says which:
    ``NOT_SENT`` (no attempt reached the server), ``SENT_NO_RESPONSE`` only for a safely
    idempotent operation (repeating it is harmless), or ``PARTIAL_RESPONSE`` (the server
    executed it and answered, but the response broke: the side effect happened). A
    non-idempotent request that may have run is never a ``RequestFailed``: that is
    :class:`HttpAmbiguousExecutionError`. ``.category`` and ``.attempts`` describe the last
    attempt and the whole trail; ``.decision`` is the engine's last decision (``None`` when it
    was not consulted). ``.idempotency_key`` is the ``Idempotency-Key`` the call's attempts
    carried (``None``: none), as :class:`HttpAmbiguousExecutionError` says it: a key the client
    generated (``idempotency_key=True``, ``Upstream(idempotency_keys="auto")``) is known to the
    caller only from here, and sending the request again with ``idempotency_key=`` that value
    lets the server deduplicate it (a keyed POST that timed out may have run).
    """

    def __init__(
        self,
        message: str,
        *,
        evidence: Evidence = Evidence.NOT_SENT,
        attempts: Sequence[Attempt] = (),
        decision: Decision | None = None,
        category: FailureCategory | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        super().__init__(message)
        self.evidence = evidence
        self.attempts: list[Attempt] = list(attempts)
        self.decision = decision
        self.category = category
        self.idempotency_key = idempotency_key

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
    """The connection was reset or closed, or a write failed, after it was established (its TCP
    connection or QUIC socket, perhaps not yet its TLS or HTTP/2 handshake: then ``.evidence``
    is ``NOT_SENT``); a stream refused (``REFUSED_STREAM``) or above a ``GOAWAY``'s bound."""


class ProtocolFailed(RequestFailed):
    """The peer sent something that is not valid HTTP (``REMOTE_PROTOCOL``), or a limit such as
    ``max_header_bytes`` was exceeded; or we would have broken the protocol
    (``LOCAL_PROTOCOL``)."""


class RejectReason(enum.Enum):
    """Why a call was refused at admission (``AdmissionRejected.reason``)."""

    #: ``Client.drain()`` was called: no new call, nor one still waiting, is admitted.
    DRAINING = "draining"
    #: The upstream's bulkhead is full and ``Upstream.max_queue`` calls already wait.
    BULKHEAD_FULL = "bulkhead_full"
    #: The upstream's circuit breaker is open (or half-open with its probes taken).
    BREAKER_OPEN = "breaker_open"
    #: The adaptive throttle's next slot is past the call's deadline (or ``max_wait``).
    THROTTLED = "throttled"
    #: The client closed (``aclose()``) while the call waited to be admitted.
    CLOSED = "closed"

    def __str__(self) -> str:
        return self.name


class AdmissionRejected(RequestFailed):
    """The call was not admitted, so nothing was sent: the client is draining or closed, the
    bulkhead's queue is full, the upstream's circuit breaker is open (the message names the
    breaker), or the adaptive throttle's next slot is past the deadline. ``.reason`` (a
    :class:`RejectReason`) says which."""

    def __init__(
        self,
        message: str,
        *,
        reason: RejectReason,
        evidence: Evidence = Evidence.NOT_SENT,
        attempts: Sequence[Attempt] = (),
        decision: Decision | None = None,
        category: FailureCategory | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        super().__init__(
            message,
            evidence=evidence,
            attempts=attempts,
            decision=decision,
            category=category,
            idempotency_key=idempotency_key,
        )
        self.reason = reason

    def __reduce__(self) -> tuple[object, ...]:
        # (Exception's own rebuilds with cls(*args), without the required reason: pickle and
        # copy would fail.)
        return (_admission_rejected, (type(self), str(self), self.reason), self.__dict__)


def _admission_rejected(
    cls: type[AdmissionRejected], message: str, reason: RejectReason
) -> AdmissionRejected:
    return cls(message, reason=reason)


class ClientStateError(TrioRetryError, RuntimeError):
    """The client was used outside ``async with`` (not yet entered, or already closed)."""


class StreamClosed(TrioRetryError, RuntimeError):
    """A streamed body was read after it was closed before its end: by the end of its
    ``async with client.stream(...)`` block, by ``await response.aclose()``, or (a redirect in
    ``history``) when the client followed the redirect. The message says which. Raised by every
    way of reading it (``aiter_bytes()``, ``aiter_raw()``, ``aiter_text()``, ``aiter_lines()``,
    ``aread()``, ``content``), never an empty body in its place. Also a ``RuntimeError``, as
    httpx's ``StreamClosed`` is."""


class ResponseNotJSON(TrioRetryError, ValueError):
    """``Response.json()`` on a body that is not JSON (or not text in its charset). Also a
    ``ValueError``, as the standard library's ``json.JSONDecodeError`` is, so code written
    against other clients' ``except ValueError`` keeps working; the parser's own error is
    ``__cause__``."""
