"""Continuing a streamed body that broke mid-way (RFC 9110 §14, §13.1.5; SPEC §18).

A :class:`Continuation` is made for every streamed response the client hands over; it holds
the attempt whose body is being read (the first one, then each continuation), so that the
body's end, its close and its break act on the connection that carries it now. When the
response can be continued (:func:`resumable`: a replay-safe request, resuming on, and a head
that :func:`~trio_retry._resume.validator_of` accepts), a break of the body goes through
:meth:`Continuation.resume`, in this order:

1. the broken stretch becomes the trail's record of its attempt (``PARTIAL_RESPONSE``, the
   stage, the bytes received), and the engine decides on it with ``continuable=True`` (rule
   4's exception, ``_core/engine.py``): the attempts, the budget, the deadline and the
   backoff hold as for any retry;
2. a continuation attempt asks for the rest (``Range: bytes=N-``, ``If-Range``; ``N`` the
   raw bytes received so far) with the call's deadline; its record is in the trail with
   ``range_start=N``. A failure before its answer is judged by the engine like any attempt
   (and may be continued again, from the same byte);
3. its answer is judged (:func:`~trio_retry._resume.judge`): a ``206`` that continues the same
   representation gives the body its next reader, and the caller's iteration (and the one
   decoder behind ``aiter_bytes()``) goes on with no byte repeated or missing. Anything else
   is never spliced: a ``200`` before any body byte reached the caller (a break before the
   first byte, or a buffered call) starts the body again with it; a buffered call's body
   answered otherwise (``416``, another range) starts again with the request as it was, if
   the engine allows one more attempt; else the call fails with ``PARTIAL_RESPONSE`` and the
   reason (the representation changed). A status of 400 or more other than ``416`` is the
   engine's, as on any attempt.

Cancelled (the caller's own scope, the client closing), a continuation gives back what its
attempt held before the cancellation goes on: :class:`AttemptRun` does. Each attempt is the
value its run returned (:class:`~.result.AttemptResult`), read, never written: what the body's
end or break gives back goes through the attempt's ``held``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from .._core.attempt import Attempt
from .._core.decision import Decision, RetryAllowed, RetryDenied
from .._core.evidence import Evidence, FailureCategory, Stage
from .._decoding import DecodeError
from .._models import Headers
from .._resume import Validator, continuation_headers, judge, validator_of
from .._wire.progress import AttemptProgress, WireError
from .attempt import AttemptRun
from .body import BLOCK_CLOSED, BodyReader, CheckedDecoder, StreamedBody, decoder_for
from .failures import FAILURE_TYPES, failure
from .prepare import PreparedRequest
from .result import AttemptResult
from .resumable import resumable

if TYPE_CHECKING:
    from .runtime import Runtime
    from .upstream import UpstreamState

__all__ = ["Continuation", "Retrier", "carry"]

_RECEIVED = Evidence.RESPONSE_RECEIVED
_PARTIAL = Evidence.PARTIAL_RESPONSE


class Retrier(Protocol):
    """The retry loop's decisions, as the continuation uses them (``loop._Retries``)."""

    async def decide(
        self,
        result: AttemptResult,
        attempts: list[Attempt],
        ended: float,
        continuation: bool = False,
        delivered: bool = False,
    ) -> Decision | None: ...

    async def broke(
        self,
        failed: Attempt,
        attempts: list[Attempt],
        ended: float,
        delivered: bool,
        restart: tuple[Evidence, FailureCategory] | None = None,
    ) -> Decision: ...

    async def wait(self, decision: RetryAllowed, attempt: Attempt) -> Decision | None: ...

    async def tell(self, attempts: list[Attempt], attempt: Attempt) -> None: ...


def carry(
    rt: Runtime,
    request: PreparedRequest,
    state: UpstreamState,
    result: AttemptResult,
    attempts: list[Attempt],
    retrier: Callable[[], Retrier],
) -> tuple[StreamedBody, Continuation, CheckedDecoder | None]:
    """The body of ``result``'s response (answered below 400, its body unread), read through a
    :class:`Continuation` (continued when it breaks, if it can be), and the decoder of its
    ``Content-Encoding`` (``None``: nothing to decode). A break not continued raises the
    call's exception (``PARTIAL_RESPONSE``) from the body's next step."""
    wire = result.response
    assert wire is not None
    body: StreamedBody

    def broken(exc: WireError) -> Exception:
        body.close()
        failed = replace(
            carried.broken_record(exc), decision=RetryDenied.response_already_delivered()
        )
        error = failure(request, [*attempts[:-1], failed], exc, failed.decision)
        error.__cause__ = exc
        return error

    limit = rt.config.max_body_bytes
    validator = resumable(request, state, wire.status, wire.headers)
    carried = Continuation(rt, request, state, result, attempts, validator, retrier, limit)
    decoder = decoder_for(request.method, wire.headers, limit, wire.encoded)
    body = StreamedBody(
        carried.reader(),
        request.deadline,
        carried.ended,
        broken,
        carried.close,
        limit=request.deadline - request.started,
        resume=carried.resume if validator is not None else None,
    )
    carried.body = body
    checked = CheckedDecoder(decoder, carried.progress, broken) if decoder is not None else None
    return body, carried, checked


class Continuation:
    """The attempt carrying a streamed body now, and how to continue the body when it breaks
    (the module docstring). ``resumed`` counts the continuations (``Response.resumed``)."""

    __slots__ = (
        "_attempts",
        "_limit",
        "_made",
        "_request",
        "_retries",
        "_rt",
        "_state",
        "_validator",
        "body",
        "head",
        "progress",
        "restartable",
        "restarts",
        "result",
        "resumed",
    )

    def __init__(
        self,
        rt: Runtime,
        request: PreparedRequest,
        state: UpstreamState,
        result: AttemptResult,
        attempts: list[Attempt],
        validator: Validator | None,
        retries: Callable[[], Retrier],
        limit: int | None,
    ) -> None:
        self._rt = rt
        self._request = request
        self._state = state
        self._attempts = attempts
        self._validator = validator
        self._retries = retries
        self._made: Retrier | None = None
        self._limit = limit
        #: The attempt whose response carries the body now.
        self.result = result
        #: The attempt whose head the body is of (the first, or the one that restarted it).
        self.head = result
        #: The body being read (set by :func:`carry`).
        self.body: StreamedBody | None = None
        #: The progress of the body's current stretch (its stage, its bytes).
        self.progress = AttemptProgress(rt.now())
        self.progress.stage = Stage.RESPONSE_BODY
        self.resumed = 0
        #: How many times the body started again with another representation (a buffered
        #: call's, nothing of it having reached the caller).
        self.restarts = 0
        #: Whether nothing of the body reaches the caller before its end (a buffered call):
        #: then a ``200`` to a continuation starts the body again, however far it got.
        self.restartable = False

    async def read_buffered(self) -> tuple[AttemptResult, int]:
        """A buffered call's body (:meth:`read_whole`), closed after: the attempt whose head it
        is of, with the body (a new value: the attempt's own is not written), and its raw
        length."""
        body = self.body
        assert body is not None
        self.restartable = True
        try:
            content, raw_length = await self.read_whole()
        finally:
            body.close(BLOCK_CLOSED)
        self.head = self.head._replace(body=content)
        return self.head, raw_length

    async def read_whole(self) -> tuple[bytes, int]:
        """A buffered call's body, read to its end (continued, or restarted, as it goes) and
        decoded with the decoder of the head it is of; and its raw length. Raises the call's
        exception when it breaks and is not continued."""
        body = self.body
        assert body is not None
        chunks: list[bytes] = []
        restarts = 0
        async for chunk in body:
            if self.restarts != restarts:  # another representation: what came is not it
                restarts = self.restarts
                chunks.clear()
            chunks.append(chunk)
        raw = b"".join(chunks)
        wire = self.head.response
        assert wire is not None
        request = self._request
        decoder = decoder_for(request.method, wire.headers, self._limit)
        if decoder is None:
            return raw, len(raw)
        try:
            return decoder.decode_all(raw), len(raw)
        except DecodeError as exc:
            error = WireError.at(
                self.progress, FailureCategory.REMOTE_PROTOCOL, str(exc), ends_call=True
            )
            raise failure(request, self._attempts, error, None) from exc

    def reader(self) -> BodyReader:
        """The reader of the current stretch of the body."""
        wire = self.result.response
        assert wire is not None
        return BodyReader(wire.source, self.progress, self._limit)

    def ended(self) -> None:
        """The body was read to its end: its connection goes back to the pool."""
        _end(self.result, read_to_end=True)

    def close(self) -> None:
        """Give back what the current attempt holds (a body not read to its end is
        abandoned)."""
        _end(self.result)

    def broken_record(self, exc: WireError) -> Attempt:
        """The trail's record of the attempt whose body broke with ``exc``: its head's record,
        with the stage, evidence and bytes of the body's break."""
        head = self._attempts[-1]
        return replace(
            head,
            stage=self.progress.stage,
            evidence=_PARTIAL,
            error=exc,
            category=exc.category,
            bytes_received=head.bytes_received + self.progress.bytes_received,
        )

    async def resume(self, exc: WireError, received: int) -> tuple[BodyReader, int]:
        """The reader of the rest of the body, broken with ``exc`` after ``received`` raw
        bytes; raises the call's exception when it is not continued (the module docstring).
        """
        validator = self._validator
        attempts = self._attempts
        _end(self.result)  # the broken attempt's connection is given up before anything else
        if validator is None:  # a body started again whose new head promises nothing
            attempts[-1] = self.broken_record(exc)
            raise self._failed(exc, RetryDenied.response_already_delivered(), None)
        rt = self._rt
        if self._made is None:  # the call's retry state, made once (at its first failure)
            self._made = self._retries()
        retries = self._made
        delivered = not self.restartable
        decision: Decision | None = await retries.broke(
            self.broken_record(exc), attempts, rt.now(), delivered
        )
        request = self._ranged(validator, received)
        error: BaseException = exc
        reason: str | None = None
        while True:
            if decision is not None:  # (None: sent again at once, uncounted)
                if not isinstance(decision, RetryAllowed):
                    raise self._failed(error, decision, reason)
                denied = await retries.wait(decision, attempts[-1])
                if denied is not None:
                    raise self._failed(error, denied, reason)
            progress = AttemptProgress(rt.now())
            number = len(attempts) + 1
            result = await AttemptRun(
                rt, request, self._state, progress, True, number,
                range_start=received if request is not self._request else None,
            ).run()  # fmt: skip
            ended = rt.now()
            wire = result.response
            if wire is None or result.error is not None:
                error = result.error if result.error is not None else error
                decision = await retries.decide(result, attempts, ended, True, delivered)
                continue
            headers = Headers.from_wire(wire.headers)
            reason = judge(validator, received, wire.status, headers)
            if wire.status >= 400 and wire.status != 416:  # the engine's, as any status
                decision = await retries.decide(result, attempts, ended, True, delivered)
                continue
            restart = (
                reason is not None and wire.status == 200 and (received == 0 or self.restartable)
            )
            try:
                await retries.tell(attempts, result.record(_RECEIVED, None, ended))
            except BaseException:  # a raising on_attempt, or outer cancellation meanwhile
                _end(result)
                raise
            if reason is not None and not restart:
                _end(result)
                if not self.restartable or request is self._request:
                    raise self._failed(error, RetryDenied.response_already_delivered(), reason)
                # Nothing of the body reached the caller: it starts again, with the request
                # as it was (its 200 is then the body), if the engine allows one more attempt.
                category = exc.category
                decision = await retries.broke(
                    attempts[-1], attempts, ended, False, (_PARTIAL, category)
                )
                request = self._request
                continue
            self.result = result
            self.progress = AttemptProgress(ended)
            self.progress.stage = Stage.RESPONSE_BODY
            if restart:  # nothing of the body reached the caller: the new one is the body
                self._validator = validator_of(wire.status, headers)
                self.head = result
                self.restarts += 1
                return BodyReader(wire.source, self.progress, self._limit), 0
            self.resumed += 1
            limit = self._limit
            reader = BodyReader(
                wire.source, self.progress, None if limit is None else limit - received
            )
            return reader, received

    def _ranged(self, validator: Validator, offset: int) -> PreparedRequest:
        """The call's request asking for the rest of the body from byte ``offset``, if it is
        still the same representation."""
        request = self._request
        headers = request.headers.copy()
        for name, value in continuation_headers(validator, offset):
            headers.set(name, value)
        return replace(request, headers=headers, wire_memo=None, hedging=False)

    def _failed(self, error: BaseException, decision: Decision, reason: str | None) -> Exception:
        """The call's exception: the body broke and was not continued (``reason``: why its
        continuation's answer was not spliced)."""
        request = self._request
        category = (
            error.category if isinstance(error, WireError) else FailureCategory.CONNECTION_BROKEN
        )
        count = len(self._attempts)
        message = (
            f"{request.method} {request.url} failed after {count} attempt"
            f"{'s' if count != 1 else ''}: {error}"
        )
        if reason is not None:
            message += f"; the body was not continued: {reason}"
        exc = FAILURE_TYPES[category](
            message,
            evidence=_PARTIAL,
            attempts=self._attempts,
            decision=decision,
            category=category,
        )
        cause = error.__cause__ if isinstance(error, WireError) else None
        exc.__cause__ = cause if cause is not None else error
        return exc


def _end(result: AttemptResult, read_to_end: bool = False) -> None:
    """Give back what ``result``'s attempt holds (nothing, if it held nothing)."""
    if result.held is not None:
        result.held.end(read_to_end)
