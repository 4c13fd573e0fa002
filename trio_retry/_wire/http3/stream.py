"""One HTTP/3 request stream as its caller sees it: the head to wait for, the body to read.

The connection's driver task (``driver.py``) puts what arrives here (:meth:`H3Stream.head`,
:meth:`H3Stream.data`, :meth:`H3Stream.fail`); the caller's task waits on it, each wait through
the one owner of time (``clock.py``: a :class:`~trio_retry._wire.clock.Bound` in a cancel
scope). A failure is kept on the stream with its own proof (``contract.Failure``: ``not_sent``
when the server said it did not process the request), and the first one wins, so a later
connection error cannot replace it (SPEC §16: "a stream's own proof wins over a later
connection error").
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Protocol

import trio

from ..._core.evidence import FailureCategory, Stage
from ..clock import bound, limit_of, timeout_message
from ..contract import Failure
from ..exchange import WireResponse
from ..progress import AttemptProgress, WireError
from .frames import RequestFrames

if TYPE_CHECKING:
    from ..timekeeper import Timekeeper

__all__ = ["H3Stream", "StreamOwner"]


class StreamOwner(Protocol):
    """What a stream asks of its connection."""

    @property
    def timekeeper(self) -> Timekeeper | None: ...

    def received(self, size: int) -> None:
        """``size`` body bytes arrived for a stream and wait for its caller."""

    def consumed(self, size: int) -> None:
        """``size`` of them were taken by the caller (or dropped with its stream)."""

    def answered(self) -> None:
        """A stream's response ended: its last byte arrived (``acks.py``)."""

    def finish_stream(self, stream: H3Stream, *, reset: bool) -> None:
        """Forget ``stream``, first resetting it (H3_REQUEST_CANCELLED) when ``reset``;
        never raises or blocks."""


class H3Stream:
    """A request stream: filled by the driver task, read by the caller; see the module
    docstring. Implements :class:`~trio_retry._wire.exchange.BodySource`."""

    __slots__ = (
        "_changed",
        "_chunks",
        "_ended",
        "_failure",
        "_owner",
        "done",
        "frames",
        "progress",
        "response",
        "send_stopped",
        "stream_id",
    )

    def __init__(self, owner: StreamOwner, stream_id: int, progress: AttemptProgress) -> None:
        self._owner = owner
        self.stream_id = stream_id
        self.progress = progress
        self._changed = trio.Event()
        self._chunks: deque[bytes] = deque()
        self._ended = False
        self._failure: Failure | None = None
        self.response: WireResponse | None = None
        #: The caller is finished with the stream (body read, abandoned, or failed).
        self.done = False
        #: The server asked us to stop sending (STOP_SENDING): the rest of the body is dropped.
        self.send_stopped = False
        #: Where the response's bytes are in their frames (read before aioquic keeps them).
        self.frames = RequestFrames()

    # --- the driver's side ------------------------------------------------------------------

    def _wake(self) -> None:
        self._changed.set()

    def wake(self) -> None:
        """What the caller waits for besides the stream itself happened (the connection's
        handshake ended: :meth:`changed`)."""
        self._changed.set()

    def head(self, response: WireResponse, ended: bool) -> None:
        """The final response head arrived (``ended``: with no body)."""
        if self.response is None and self._failure is None:
            progress = self.progress
            progress.timings["first_byte"] = trio.current_time() - progress.started
            self.response = response
            self._ended = ended
            if ended:
                self._owner.answered()
            self._wake()

    def data(self, data: bytes, ended: bool) -> None:
        """Body bytes arrived (``ended``: the last)."""
        if self._failure is not None or self._ended:
            return
        if data:
            self._chunks.append(data)
            self._owner.received(len(data))
        if ended:
            self._ended = True
            self._owner.answered()
        self._wake()

    def fail(self, failure: Failure) -> None:
        """The stream failed; the first failure (and its proof) is the one kept. A stream
        whose body ended already is not failed by what happens to its connection later."""
        if self._failure is None and not (self._ended and self.response is not None):
            self._failure = failure
            self._wake()

    @property
    def failed(self) -> bool:
        return self._failure is not None

    # --- the caller's side ------------------------------------------------------------------

    def error(self, progress: AttemptProgress) -> WireError:
        """The kept failure as the attempt's error, with the evidence of its proof."""
        failure = self._failure
        assert failure is not None
        return failure.error(progress)

    async def changed(self) -> None:
        """Until the driver changes the stream (a head, data, its failure) or wakes it; not
        bounded here (a request waiting for its connection's handshake is bounded by the
        handshake's limit, which ends the handshake and so wakes it)."""
        self._changed = event = trio.Event()
        await event.wait()

    async def _wait(self, which: str, limit: float | None, progress: AttemptProgress) -> None:
        """Wait for the driver to change the stream, within ``limit`` (``which``'s bound): kept
        on the client's timekeeper, whose lane for ``which`` fails the stream when it runs out
        (:meth:`stage_expired`), as HTTP/2's streams are. The rejected alternative, a cancel
        scope per wait (as before), armed and cancelled a timer of trio's for every response.
        A limit the lane does not keep (a call's deadline shortening it) is a cancel scope's."""
        self._changed = event = trio.Event()
        with bound(which, self._owner.timekeeper, progress=progress, limit=limit, target=self):
            await event.wait()

    def stage_expired(self, which: str, progress: AttemptProgress) -> None:
        """A wait's bound ran out (``clock.py``, the timekeeper's task): the stream fails, which
        wakes its caller, and the bound reports the timeout; the stream is then reset, as after
        any failure. What arrived before the timekeeper's task ran wins, as it would over a
        cancel scope's expiry: a head, for ``first_byte``; a body chunk or its end, for
        ``read``."""
        if which == "first_byte" and self.response is not None:
            return
        if which == "read" and (self._chunks or self._ended):
            return
        limit = limit_of(self._owner.timekeeper, which)
        self.fail(Failure(FailureCategory.TIMEOUT, timeout_message(which, limit)))

    async def receive_head(self, progress: AttemptProgress, limit: float | None) -> WireResponse:
        """The final response head, waited for within the first-byte bound ``limit``.
        Raises ``WireError`` (the stream's failure, or ``TIMEOUT``)."""
        while self.response is None:
            if self._failure is not None:
                raise self.error(progress)
            await self._wait("first_byte", limit, progress)
        # The head is parsed: a break from now on is PARTIAL_RESPONSE, as over HTTP/1.1 and
        # HTTP/2 (it was SENT_NO_RESPONSE until a body byte was read).
        progress.advance(
            Stage.COMPLETE if self._ended and not self._chunks else Stage.RESPONSE_BODY
        )
        return self.response

    async def receive_body(self, progress: AttemptProgress) -> bytes:
        """The next body chunk, ``b""`` at the end; each wait within the read bound."""
        while not self._chunks:
            if self._ended:
                progress.advance(Stage.COMPLETE)
                self._finish()
                return b""
            if self._failure is not None:
                self._finish()
                raise self.error(progress)
            await self._wait("read", limit_of(self._owner.timekeeper, "read"), progress)
        progress.advance(Stage.RESPONSE_BODY)
        chunks = self._chunks
        data = chunks.popleft() if len(chunks) == 1 else b"".join(_drain(chunks))
        progress.bytes_received += len(data)
        self._owner.consumed(len(data))
        return data

    async def receive_all(self, progress: AttemptProgress, limit: int | None) -> list[bytes]:
        """Every chunk to the end (or, past ``limit`` bytes, those so far)."""
        out: list[bytes] = []
        total = 0
        while True:
            data = await self.receive_body(progress)
            if not data:
                return out
            out.append(data)
            total += len(data)
            if limit is not None and total > limit:
                return out

    def abandon(self) -> None:
        """The rest of the body is not wanted: the stream is reset unless it ended."""
        self._finish()

    def _finish(self) -> None:
        """The caller is done with the stream: the connection forgets it, resetting it
        (H3_REQUEST_CANCELLED) unless the response ended cleanly."""
        if not self.done:
            self.done = True
            clean = self._ended and self._failure is None and not self._chunks
            if self._chunks:  # what the caller will never read
                self._owner.consumed(sum(len(chunk) for chunk in _drain(self._chunks)))
            self._owner.finish_stream(self, reset=not clean)
            # The head refers to the stream (its body's source) and the stream to the head: a
            # cycle that only the garbage collector's next full pass would end, visited by every
            # pass until then. Nothing reads the head here any more (the connection forgot the
            # stream): the stream and its head now die with the caller's response.
            self.response = None


def _drain(chunks: deque[bytes]) -> list[bytes]:
    out = list(chunks)
    chunks.clear()
    return out
