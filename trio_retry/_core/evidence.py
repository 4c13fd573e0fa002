"""The vocabulary of execution evidence: how far an attempt got and what that proves.

Only the wire layer can *observe* a stage; this module just names them. The ordering of
:class:`Stage` is the order in which a request travels, so "the furthest stage reached" is a
``max()`` and a comparison like ``stage >= Stage.REQUEST_HEAD`` reads as "a request byte may have
left". The rule that turns a stage into :class:`Evidence` lives here too
(:func:`evidence_for_stage`), because it is the one classification every layer must agree on.
"""

from __future__ import annotations

import enum


class Stage(enum.IntEnum):
    """The furthest wire stage an attempt reached, in the order a request travels.

    ``IntEnum`` so that ordering comparisons work: ``Stage.CONNECT < Stage.TLS``.
    """

    ADMISSION = 0
    POOL = 1
    DNS = 2
    CONNECT = 3
    TLS = 4
    REQUEST_HEAD = 5
    REQUEST_BODY = 6
    AWAITING_RESPONSE = 7
    RESPONSE_HEAD = 8
    RESPONSE_BODY = 9
    COMPLETE = 10

    def __str__(self) -> str:
        return self.name


class Evidence(enum.Enum):
    """What is known about whether the server received (and so may have executed) a request.

    - ``NOT_SENT``: proven never received — produced only by a stage failure that proves it.
    - ``SENT_NO_RESPONSE``: a request byte may have left and no final response arrived; the
      server may or may not have executed it.
    - ``RESPONSE_RECEIVED``: final (non-1xx) response headers arrived.
    - ``PARTIAL_RESPONSE``: headers and part of the body arrived, then the stream broke.
    """

    NOT_SENT = "not_sent"
    SENT_NO_RESPONSE = "sent_no_response"
    RESPONSE_RECEIVED = "response_received"
    PARTIAL_RESPONSE = "partial_response"

    def __str__(self) -> str:
        return self.name


class FailureCategory(enum.Enum):
    """Why an attempt failed. ``permanent`` categories are never retried (rule 7)."""

    INVALID_REQUEST = "invalid_request"
    DNS = "dns"
    CONNECT = "connect"
    TLS_HANDSHAKE = "tls_handshake"
    TLS_CERTIFICATE = "tls_certificate"
    POOL_TIMEOUT = "pool_timeout"
    ADMISSION = "admission"
    REFUSED_STREAM = "refused_stream"
    GOAWAY = "goaway"
    CONNECTION_BROKEN = "connection_broken"
    TIMEOUT = "timeout"
    REMOTE_PROTOCOL = "remote_protocol"
    LOCAL_PROTOCOL = "local_protocol"

    @property
    def permanent(self) -> bool:
        """True when repeating the request cannot help (bad input, bad certificate, our bug)."""
        return self in _PERMANENT

    def __str__(self) -> str:
        return self.name


_PERMANENT = frozenset(
    {
        FailureCategory.INVALID_REQUEST,
        FailureCategory.TLS_CERTIFICATE,
        FailureCategory.LOCAL_PROTOCOL,
    }
)

#: The last stage at which no request byte has been handed to the transport.
LAST_UNSENT_STAGE = Stage.TLS


def evidence_for_stage(stage: Stage) -> Evidence:
    """The evidence a *failure* at ``stage`` carries, absent any stronger proof.

    Before the first request byte is handed to the transport (ADMISSION..TLS) nothing can have
    reached a request handler: ``NOT_SENT``. From REQUEST_HEAD until final headers arrive the
    server may have it: ``SENT_NO_RESPONSE``. Once the response head has been *parsed* the
    caller knows the outcome, so a later break is ``PARTIAL_RESPONSE``. A first response byte
    alone (RESPONSE_HEAD) is not a response: the head may be a 1xx or garbage.

    Stronger proof that moves a later stage back to ``NOT_SENT`` (REFUSED_STREAM, GOAWAY, a
    pooled connection found closed before writing) is the wire layer's to give, not this
    function's.
    """
    if stage <= LAST_UNSENT_STAGE:
        return Evidence.NOT_SENT
    if stage <= Stage.RESPONSE_HEAD:
        return Evidence.SENT_NO_RESPONSE
    if stage == Stage.COMPLETE:
        return Evidence.RESPONSE_RECEIVED
    return Evidence.PARTIAL_RESPONSE
