"""One request/response exchange on an HTTP/2 connection: its state, its proof, its body.

The connection's reader fills a :class:`Stream` (``on_*``); the attempt's task consumes it,
parked on the stream itself (:meth:`Stream.wait`). The stream has one ``state``
(:class:`StreamState`) and these legal moves::

    OPEN ──head──> RECEIVING ──end──> ENDED ──┐
      │                │                      ├──> DONE (the client is finished with it)
      └──fail──> FAILED <─fail──┘ ────────────┘

``FAILED`` keeps the *first* failure (the stream proof, ``contract.Failure``): a stream proven
``NOT_SENT`` (REFUSED_STREAM, or above a GOAWAY's last-stream-id) stays so whatever the
connection does afterwards (an EOF, a reset, a write error): the stream's own proof wins over
the connection's later death. A stream whose
response ENDED keeps its response (its whole body is buffered here).

The body is checked against its declared ``Content-Length`` here (h2's own check is a
connection error; here a mismatch resets this stream only, RFC 9113 §8.1.1).
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Awaitable
from typing import Protocol

import trio

from ..._core.evidence import FailureCategory, Stage
from ..clock import Bound, bound, limit_of, timeout_message
from ..contract import Failure
from ..park import Parking
from ..progress import AttemptProgress, WireError
from ..timekeeper import Timekeeper

__all__ = ["TAKE_LIMIT", "Stream", "StreamOwner", "StreamState"]

#: The most body bytes one read of a stream joins from the DATA frames that arrived.
TAKE_LIMIT = 256 * 1024
#: The statuses whose responses have no content (RFC 9110 §15.3.5, §15.4.5).
_NO_CONTENT = (b"204", b"304")


class StreamOwner(Protocol):
    """What a stream asks of its connection."""

    def consumed(self, stream_id: int, flow_controlled: int) -> None:
        """The client read ``flow_controlled`` bytes: hand the credit back to the server."""

    def stream_done(self, stream: Stream, unread: int) -> None:
        """The client is done with ``stream`` (reset it if still open, credit ``unread``)."""

    def stream_error(self, stream: Stream, problem: str) -> None:
        """The response broke HTTP on this stream only: reset it with PROTOCOL_ERROR."""


class StreamState(enum.Enum):
    OPEN = "open"  # the request is being sent or awaits its final head
    RECEIVING = "receiving"  # final head in, body arriving
    ENDED = "ended"  # the whole response arrived
    FAILED = "failed"  # ``failure`` says why; first failure wins
    DONE = "done"  # the client is finished with it; the connection forgot it


class Stream(Parking):
    """See the module docstring. ``progress`` is the attempt's: the reader records the first
    byte and the final head there as they arrive."""

    __slots__ = (
        "_chunks",
        "_clock",
        "_others",
        "_owner",
        "_waiter",
        "expected_length",
        "failure",
        "first_offset",
        "head",
        "head_request",
        "progress",
        "received",
        "state",
        "stream_id",
        "timekeeper",
    )

    def __init__(
        self,
        stream_id: int,
        progress: AttemptProgress,
        *,
        first_offset: int,
        head_request: bool,
        owner: StreamOwner,
        timekeeper: trio.abc.Clock | None = None,
        bounds: Timekeeper | None = None,
    ) -> None:
        self.stream_id = stream_id
        self.progress = progress
        #: The writer's byte count when this stream's HEADERS were queued: if the connection
        #: dies before the writer handed that many bytes to the transport, nothing of this
        #: request left us.
        self.first_offset = first_offset
        self.head_request = head_request
        self.state = StreamState.OPEN
        self.head: list[tuple[bytes, bytes]] | None = None
        self.failure: Failure | None = None
        self.expected_length: int | None = None
        self.received = 0
        #: DATA payloads (``bytes``, or views of an immutable read) and their flow lengths;
        #: made by the first (a stream waiting for its head holds no deque, issue #41).
        self._chunks: deque[tuple[bytes | memoryview, int]] | None = None
        #: The task waiting on this stream (see :meth:`wait`); ``_others`` is made only if a
        #: second task waits at the same time.
        self._waiter: trio.lowlevel.Task | None = None
        self._others: trio.lowlevel.ParkingLot | None = None
        self._owner = owner
        #: The client's timekeeper (``timekeeper.py``): the limits of this stream's waits.
        self.timekeeper = bounds
        # The run's clock, read directly (``trio.current_time()`` is three calls to it).
        self._clock = trio.lowlevel.current_clock() if timekeeper is None else timekeeper

    # --- reader side -------------------------------------------------------------------------

    def wake(self) -> None:
        """Wake whoever waits on this stream (nobody, as a rule, when frames arrive)."""
        task = self._waiter
        if task is not None:
            self._waiter = None
            trio.lowlevel.reschedule(task)
        others = self._others
        if others:
            others.unpark_all()

    def on_written(self, sent: int) -> None:
        """The writer wrote the whole request (queued without waiting, ``Writer.notify``)."""
        if self.state is not StreamState.DONE:
            progress = self.progress
            progress.bytes_sent += sent
            progress.advance(Stage.AWAITING_RESPONSE)

    def on_first_byte(self) -> None:
        progress = self.progress
        if "first_byte" not in progress.timings:
            progress.advance(Stage.RESPONSE_HEAD)
            progress.timings["first_byte"] = self._clock.current_time() - progress.started
        self.wake()

    def on_head(self, headers: list[tuple[bytes, bytes]], expected_length: int | None) -> None:
        if self.state is not StreamState.OPEN:
            return
        self.on_first_byte()
        self.head = headers
        # A response to HEAD, and a 204 or a 304, has no content whatever length it declares
        # (RFC 9110 §6.4.1, RFC 9113 §8.1.1); ``headers`` start with ``:status``.
        no_content = self.head_request or headers[0][1] in _NO_CONTENT
        self.expected_length = None if no_content else expected_length
        self.state = StreamState.RECEIVING
        self.progress.advance(Stage.RESPONSE_BODY)

    def on_data(self, data: bytes | memoryview, flow_controlled: int) -> None:
        chunks = self._chunks
        if chunks is None:
            chunks = self._chunks = deque()
        chunks.append((data, flow_controlled))
        self.received += len(data)
        if self.expected_length is not None and self.received > self.expected_length:
            self._owner.stream_error(
                self,
                f"more body ({self.received} bytes so far) than its content-length "
                f"({self.expected_length})",
            )
        if self._waiter is not None or self._others:  # as a rule nobody waits: no call
            self.wake()

    def on_end(self) -> None:
        if self.state is not StreamState.RECEIVING:
            return  # a failed stream stays failed; a stream without a head was reported
        if self.expected_length is not None and self.received != self.expected_length:
            self._owner.stream_error(
                self,
                f"a body of {self.received} bytes where its content-length said "
                f"{self.expected_length}",
            )
            return
        self.state = StreamState.ENDED
        self.wake()

    def bound(self, which: str, progress: AttemptProgress) -> Bound:
        """The bound of this stream's wait ``which`` (``"first_byte"`` or ``"read"``)."""
        return bound(which, self.timekeeper, progress=progress, target=self)

    def stage_expired(self, which: str, progress: AttemptProgress) -> None:
        """A wait's bound ran out (``clock.py``): the stream fails, which wakes its task (and
        it is reset, as after any failure; the bound reports the timeout). What arrived
        before the timekeeper's task ran wins, as it would over a cancel scope's expiry: a head,
        for ``first_byte``; a body chunk, for ``read``."""
        if (which == "first_byte" and self.head is not None) or (which == "read" and self._chunks):
            return
        limit = limit_of(self.timekeeper, which)
        self.fail(Failure(FailureCategory.TIMEOUT, timeout_message(which, limit)))

    def fail(self, failure: Failure) -> None:
        """Fail the stream unless it already failed (the first proof wins) or ended."""
        if self.state is StreamState.OPEN or self.state is StreamState.RECEIVING:
            self.failure = failure
            self.state = StreamState.FAILED
            self.wake()

    # --- attempt side ------------------------------------------------------------------------

    @property
    def open(self) -> bool:
        """Still expecting response frames (OPEN or RECEIVING)."""
        return self.state is StreamState.OPEN or self.state is StreamState.RECEIVING

    def check(self, progress: AttemptProgress) -> None:
        """Raise this stream's failure, if it has one."""
        if self.failure is not None:
            raise self.failure.error(progress)

    def wait(self) -> Awaitable[object]:
        """Until the reader next changes something for this stream (:meth:`wake`): to be
        awaited at once.

        One task waits on a stream at a time, as a rule: the request's own, then the body's
        reader. It parks itself, with no parking lot (a lot and its bookkeeping per stream
        were 1.5 % of a request). A second task waiting at the same time (two readers of one
        body) waits in a lot made for it, and is woken with the first. Cancellable like any
        park: a cancelled waiter is simply forgotten.

        (A plain method returning the park, the stream itself (:class:`..park.Parking`), which
        is also its abort function (:meth:`__call__`): a coroutine of this method, a bound
        ``_abort`` method, and trio's ``wait_task_rescheduled`` coroutine, generator and
        message were six more objects for each of thousands of streams waiting for their
        heads at once, each visited by every full pass of the garbage collector, issue #41.)"""
        if self._waiter is not None:
            others = self._others
            if others is None:
                others = self._others = trio.lowlevel.ParkingLot()
            return others.park()
        self._waiter = trio.lowlevel.current_task()
        return self

    def __call__(self, _: object) -> trio.lowlevel.Abort:
        """The parked :meth:`wait` is cancelled: forget its task. The task parked is
        :attr:`_waiter` until it is woken, and a woken task is not aborted: there is no
        other task to tell apart."""
        self._waiter = None
        return trio.lowlevel.Abort.SUCCEEDED

    async def receive_body(self, progress: AttemptProgress) -> bytes:
        """The next body chunk; ``b""`` once the body is complete (stage ``COMPLETE``); the
        wait for it within the read bound.

        Reading hands the bytes' flow-control credit back to the server, so an unread body
        holds at most one stream window. Raises :class:`WireError` (``PARTIAL_RESPONSE`` by
        stage) when the stream breaks. On cancellation or any error the stream is reset
        (``CANCEL``) and the connection carries on.
        """
        try:
            # What is here already (a small response arrives whole) is taken without a
            # bound: nothing is waited for.
            data = self._take(progress)
            if data is not None:
                return data
            with self.bound("read", progress):
                while True:
                    await self.wait()
                    data = self._take(progress)
                    if data is not None:
                        return data
        except BaseException:
            self.abandon()
            raise

    async def receive_all(self, progress: AttemptProgress, limit: int | None) -> list[bytes]:
        """The body's chunks to its end, or past ``limit`` bytes (see ``BodySource``); what
        the reader has delivered already is taken without a coroutine per chunk."""
        chunks: list[bytes] = []
        total = 0
        try:
            while True:
                data = self._take(progress)
                if data is None:
                    data = await self.receive_body(progress)
                if not data:
                    return chunks
                chunks.append(data)
                if limit is not None:
                    total += len(data)
                    if total > limit:
                        return chunks
        except BaseException:
            self.abandon()
            raise

    def _take(self, progress: AttemptProgress) -> bytes | None:
        """What arrived of the body, up to :data:`TAKE_LIMIT` bytes joined (one chunk as it
        is when only one is here: no copy, unless it is a view of a read), ``b""`` at the end
        (stage ``COMPLETE``), ``None`` if the reader has to be waited for; raises the stream's
        failure.

        Joining what queued up, rather than handing out one DATA frame at a time (8 KiB from
        nginx), gives a fast download's reader a few large chunks instead of many small ones,
        and the server its credit in one acknowledgement."""
        chunks = self._chunks
        if chunks:
            chunk, flow = chunks.popleft()
            if chunks and len(chunk) < TAKE_LIMIT:
                parts = [chunk]
                size = len(chunk)
                while chunks and size < TAKE_LIMIT:
                    more, more_flow = chunks.popleft()
                    parts.append(more)
                    size += len(more)
                    flow += more_flow
                data = b"".join(parts)
            else:
                data = chunk if type(chunk) is bytes else bytes(chunk)
            self._owner.consumed(self.stream_id, flow)
            progress.bytes_received += len(data)
            if data:
                return data
            if chunks:
                return self._take(progress)
        state = self.state
        if state is StreamState.ENDED:
            progress.advance(Stage.COMPLETE)
            self._finish(0)
            return b""
        if state is StreamState.FAILED:
            self.check(progress)
        if state is StreamState.DONE:
            raise WireError.at(
                progress,
                FailureCategory.CONNECTION_BROKEN,
                "the response body was abandoned",
            )
        return None

    def abandon(self) -> None:
        """Stop the exchange: reset the stream (``CANCEL``) unless it already ended, give its
        unread bytes' credit back, and free its slot. The connection carries on."""
        if self.state is not StreamState.DONE:
            chunks = self._chunks
            unread = 0
            if chunks:
                unread = sum(flow for _, flow in chunks)
                chunks.clear()
            self._finish(unread)

    def _finish(self, unread: int) -> None:
        if self.state is not StreamState.DONE:
            self.state = StreamState.DONE
            self._owner.stream_done(self, unread)
