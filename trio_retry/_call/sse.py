"""``client.sse(url)``: server-sent events, reconnected where they broke (WHATWG HTML §9.2,
SPEC §18).

An :class:`EventStream` is the async iterator ``async with client.sse(url) as events`` gives.
It opens the stream with ``client.stream(...)`` (``Accept: text/event-stream``, ``Cache-Control:
no-cache``, and ``Last-Event-ID`` once an event carried an ``id``), checks the answer (``204``:
the server says there is nothing more, the iteration ends; anything but a ``200`` with
``text/event-stream``: :class:`~trio_retry.ProtocolFailed` with its evidence, nothing
reconnected), and feeds the body to the one :class:`~trio_retry._sse.SSEParser` of the stream,
which keeps the last event ID and the server's ``retry`` across reconnections.

An event stream has no end of its own: a body that ends, breaks, or stays silent past the
client's read bound (``StageTimeouts.read``, between any two bytes: a server's comments
keep it open) is a break, ``PARTIAL_RESPONSE``, after which the engine decides, like after any
failed attempt, whether to open it again: ``attempt`` counts the reopenings since an event last
arrived (a stream that delivers events may break any number of times; one that breaks before
delivering any stops after ``max_attempts``), the upstream's retry budget is drawn on, the
delay proposed is the server's ``retry`` (else the backoff), and a request whose replay is not
harmless (a ``POST`` without an ``Idempotency-Key``) is not reopened: its break is raised with
its evidence. The wait goes through the loop's backoff (cut short by ``drain()``). No call
deadline applies unless ``deadline=`` is given; then it bounds the whole stream, reopenings
included. The trail of every opening (each ``client.stream`` call's attempts, renumbered in
order) is :attr:`EventStream.attempts`, and the exception that ends the iteration carries it.

Cancelled, or left early, the stream's current response is closed (its connection given
back, an HTTP/2 or HTTP/3 stream reset) by the ``async with`` block's exit.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from types import TracebackType

from .._core.attempt import Attempt
from .._core.decision import Decision, RetryAllowed, RetryDenied
from .._core.engine import RetryContext
from .._core.errors import RequestFailed
from .._core.evidence import Evidence, FailureCategory
from .._core.idempotency import Idempotency
from .._core.policy import RetryPolicy
from .._errors import ConnectionBroken, ProtocolFailed
from .._models import Origin, Response
from .._sse import SSEEvent, SSEParser
from .loop import _backoff
from .runtime import Runtime

__all__ = ["EventStream"]

_PARTIAL = Evidence.PARTIAL_RESPONSE

#: Opens one stream of the event source: the extra headers and the deadline (seconds, ``inf``
#: for none) of this opening.
Opener = Callable[[Mapping[str, str], float], AbstractAsyncContextManager[Response]]


class EventStream:
    """The events of one event source, reconnected where it broke (see the module)."""

    def __init__(
        self,
        rt: Runtime,
        opener: Opener,
        label: str,
        origin: Origin,
        idempotency: Idempotency,
        policy: RetryPolicy,
        deadline: float,
    ) -> None:
        self._rt = rt
        self._open = opener
        self._label = label
        self._origin = origin
        self._idempotency = idempotency
        self._policy = policy
        self._deadline = deadline  # absolute (Trio time), inf for none
        self._parser = SSEParser()
        self._pending: deque[SSEEvent] = deque()
        self._manager: AbstractAsyncContextManager[Response] | None = None
        self._chunks: AsyncIterator[bytes] | None = None
        self._done = False
        self._failures = 0  # openings since an event last arrived
        self._delivered = False  # an event arrived on the current stream
        self._previous_delay: float | None = None
        #: Every attempt of every opening of the stream, in order.
        self.attempts: list[Attempt] = []
        #: How many times the stream was opened again after a break.
        self.reconnects = 0

    @property
    def last_event_id(self) -> str:
        """The last event ID seen (``""``: none), sent as ``Last-Event-ID`` on a reopening."""
        return self._parser.last_event_id

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> SSEEvent:
        while True:
            if self._pending:
                self._delivered = True
                return self._pending.popleft()
            if self._done:
                raise StopAsyncIteration
            chunks = self._chunks
            if chunks is None:
                await self._reopen()
                continue
            try:
                chunk = await chunks.__anext__()
            except StopAsyncIteration:
                await self._broke(None)
                continue
            except RequestFailed as exc:
                await self._broke(exc)
                continue
            self._pending.extend(self._parser.feed(chunk))

    async def _reopen(self) -> None:
        """Open the stream (again): its answer checked, its body the next chunks."""
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
        if self._parser.last_event_id:
            headers["Last-Event-ID"] = self._parser.last_event_id
        left = self._deadline - self._rt.now()
        if left <= 0:
            self._done = True
            raise self._error(None, RetryDenied.deadline(), "the stream's deadline passed")
        manager = self._open(headers, left)
        try:
            response = await manager.__aenter__()
        except RequestFailed as exc:  # the opening's own retries did not get an answer
            self._done = True
            self._extend(exc.attempts)
            exc.attempts = self.attempts
            raise
        self._manager = manager
        self._delivered = False
        self._extend(response.attempts)
        if response.status == 204:  # the server's "no more" (WHATWG §9.2.3)
            self._done = True
            await self._close()
            return
        content_type = response.headers.get("content-type", "")
        if response.status != 200 or content_type.split(";")[0].strip().lower() != (
            "text/event-stream"
        ):
            self._done = True
            await self._close()
            raise ProtocolFailed(
                f"{self._label}: not an event stream: status {response.status}, Content-Type "
                f"{content_type!r} (an event stream is a 200 with text/event-stream)",
                evidence=Evidence.RESPONSE_RECEIVED,
                attempts=self.attempts,
                category=FailureCategory.REMOTE_PROTOCOL,
            )
        self._chunks = response.aiter_bytes()

    def _extend(self, attempts: list[Attempt]) -> None:
        """Add an opening's attempts to the trail, numbered after those before."""
        start = len(self.attempts)
        self.attempts.extend(
            replace(attempt, number=start + i) for i, attempt in enumerate(attempts, 1)
        )

    async def _broke(self, exc: RequestFailed | None) -> None:
        """The current stream ended (``exc`` ``None``) or broke: the engine decides whether to
        open it again; the wait before is the server's ``retry`` or the backoff."""
        await self._close()
        self._parser.restart()
        rt = self._rt
        # the openings since an event last arrived, this one included
        self._failures = 1 if self._delivered else self._failures + 1
        category = exc.category if exc is not None else None
        category = category or FailureCategory.CONNECTION_BROKEN
        policy = self._policy
        backoff = policy.backoff
        retry = self._parser.retry
        proposed = (
            retry / 1000
            if retry is not None
            else backoff.delay(self._failures, rt.config.rng, self._previous_delay)
        )
        now = rt.now()
        state = rt.upstreams.get(self._origin)
        remaining = self._deadline - now
        decision = rt.config.engine.decide(
            RetryContext(
                attempt=self._failures,
                max_attempts=policy.max_attempts,
                budget_available=state.budget.available(now),
                draining=rt.draining,
                remaining_deadline=remaining if math.isfinite(remaining) else None,
                min_attempt_budget=policy.min_attempt_budget,
                failure=category,
                evidence=_PARTIAL,
                idempotency=self._idempotency,
                proposed_delay=proposed,
                max_backoff=backoff.max,
            )
        )
        if self.attempts:
            last = self.attempts[-1]
            self.attempts[-1] = replace(
                last, evidence=_PARTIAL, error=exc, category=category, decision=decision
            )
        if not isinstance(decision, RetryAllowed):
            self._done = True
            raise self._error(exc, decision, "the stream ended")
        state.budget.try_withdraw(now)
        if not await _backoff(rt, decision.delay, self._deadline):
            self._done = True
            raise self._error(exc, RetryDenied.runtime_draining(), "the stream ended")
        self._previous_delay = decision.delay
        self.reconnects += 1

    def _error(self, exc: RequestFailed | None, decision: Decision, what: str) -> RequestFailed:
        """The exception that ends the iteration: the break's own (its trail the stream's), or
        one saying the stream ended and was not reopened."""
        if exc is None:
            exc = ConnectionBroken(
                f"{self._label}: {what}; not reopened: {decision}",
                evidence=_PARTIAL if self.attempts else Evidence.NOT_SENT,
                category=FailureCategory.CONNECTION_BROKEN,
            )
        exc.attempts = self.attempts
        exc.decision = decision
        return exc

    async def _close(self) -> None:
        manager, self._manager = self._manager, None
        self._chunks = None
        if manager is not None:
            await manager.__aexit__(None, None, None)

    async def aclose(self) -> None:
        """Close the current stream, if any; the iteration ends."""
        self._done = True
        await self._close()

    async def __aenter__(self) -> EventStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()
