"""What the wire layer tells the client about one attempt, while it happens.

:class:`AttemptProgress` is written by the wire layer *before* each await that crosses a stage
boundary (habit: "advance the stage, then await on exactly one thing"), so whatever interrupts
the attempt — an error, the call deadline, the client closing — the client can read the
furthest stage reached and turn it into evidence.

:class:`WireError` is the wire layer's only exception type. It carries its classification
(stage, evidence, category) from the place where the proof was, so nothing upstream has to
guess, and nothing upstream may "upgrade" it (only the wire proves ``NOT_SENT``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._core.errors import RejectReason
from .._core.evidence import Evidence, FailureCategory, Stage, evidence_for_stage

if TYPE_CHECKING:
    import trio

__all__ = ["AttemptProgress", "WireError"]


_ADMISSION = Stage.ADMISSION  # (a global: an enum attribute is slow on Python 3.11)


class AttemptProgress:
    """Mutable, per-attempt record of how far the request got.

    ``proven_not_sent`` is set by the wire when it has positive proof that the server did not
    process the request although request bytes may have left (HTTP/2 REFUSED_STREAM, or a
    stream above a GOAWAY's last-stream-id).
    """

    __slots__ = (
        "bytes_received",
        "bytes_sent",
        "connection_reused",
        "deadline_bounds_head",
        "early_data",
        "early_ok",
        "http_version",
        "interrupted",
        "late_only",
        "opening",
        "proven_not_sent",
        "stage",
        "started",
        "timings",
    )

    def __init__(self, started: float) -> None:
        self.stage = _ADMISSION
        self.bytes_sent = 0
        self.bytes_received = 0
        self.connection_reused = False
        #: The call's deadline, not ``first_byte``, bounds the wait for the response head
        #: (``clock.py``: a call with a deadline, ``first_byte`` the client's default).
        self.deadline_bounds_head = False
        #: A bound of this attempt ran out on the client's timekeeper (its call deadline, or an
        #: HTTP/2 write): a wait the attempt is woken from sees it and stops (``clock.py``).
        self.interrupted = False
        self.http_version: str | None = None
        #: The call layer's verdict that this request's replay is harmless (SPEC §16): it may
        #: go in HTTP/3 early data. Set only for a client that allows early data.
        self.early_ok = False
        #: Whether it went in early data: ``None`` (not), ``"unconfirmed"`` (the handshake is
        #: not over), then ``"accepted"`` or ``"rejected"`` (``Attempt.early_data``).
        self.early_data: str | None = None
        #: Not in early data whatever the request: the call's previous attempt, sent early,
        #: was answered ``425 Too Early`` (RFC 8470 §5.2: send it after the handshake).
        self.late_only = False
        self.proven_not_sent = False
        #: The cancel scope the attempt opens its connection in, while it does, when that
        #: scope is its own (the pool's, which ``aclose()`` cancels): the opening's bounds
        #: end their waits by cancelling it (``clock.opening``), no scope of their own.
        self.opening: trio.CancelScope | None = None
        self.started = started
        self.timings: dict[str, float] = {}

    def advance(self, stage: Stage) -> None:
        """Move forward to ``stage`` (never backwards)."""
        if stage > self.stage:
            self.stage = stage

    @property
    def evidence(self) -> Evidence:
        """The evidence an interruption *now* would carry."""
        if self.proven_not_sent:
            return Evidence.NOT_SENT
        return evidence_for_stage(self.stage)


class WireError(Exception):
    """A classified failure of one attempt on the wire.

    ``ends_call=True`` marks failures that end the call without consulting the engine
    (a response larger than ``max_body_bytes``: trying again would fetch the same body; the
    client closing; a draining client's refusal). The engine's essay lists this as one of its
    "not consulted" decisions (``_core/engine.py``, :func:`~trio_retry._core.engine.
    not_consulted`).

    ``reconnect=True`` marks a ``NOT_SENT`` failure caused by the connection, not the request:
    an HTTP/2 stream refused by a routine GOAWAY on a reused connection, or a connection that
    failed its idle health check. Like a pooled HTTP/1.1 connection found closed, the client
    sends the same attempt again on a fresh connection without counting it (a few times).
    A QUIC handshake that failed or ran past its limit is one too, and the only one that may be
    ``SENT_NO_RESPONSE``: a request that went in its early data (``"unconfirmed"``; the
    engine's essay, ``_core/engine.py``, says why it goes again over TCP uncounted).
    """

    def __init__(
        self,
        message: str,
        *,
        stage: Stage,
        evidence: Evidence,
        category: FailureCategory,
        ends_call: bool = False,
        reconnect: bool = False,
        reason: RejectReason | None = None,
    ) -> None:
        super().__init__(message)
        self.stage = stage
        self.evidence = evidence
        self.category = category
        self.ends_call = ends_call
        self.reconnect = reconnect
        #: Why an ``ADMISSION`` failure refused the call (``AdmissionRejected.reason``).
        self.reason = reason

    @classmethod
    def at(
        cls,
        progress: AttemptProgress,
        category: FailureCategory,
        message: str,
        *,
        ends_call: bool = False,
        reconnect: bool = False,
    ) -> WireError:
        """A failure at the progress's current stage, with the evidence that stage proves."""
        return cls(
            message,
            stage=progress.stage,
            evidence=progress.evidence,
            category=category,
            ends_call=ends_call,
            reconnect=reconnect,
        )
