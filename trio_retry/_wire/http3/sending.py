"""One request stream's sending side: its head and body handed to HTTP/3 and QUIC, a streamed
body paced by what the server acknowledged.

One job: :class:`StreamSender`, made by the connection (``connection.py``) for each request
once its stream is open. It writes into the driver's HTTP/3 state machine from the caller's
task and sends what QUIC made of it without waiting (``QuicDriver.flush``), as HTTP/2's
request side writes into h2's; it counts the request's bytes handed to QUIC
(``AttemptProgress.bytes_sent``), and it holds a streamed body back while more than
:data:`SEND_HIGH_WATER` bytes of it are unacknowledged (QUIC itself buffers without limit).
How far a stream's bytes were handed and acknowledged is aioquic's private knowledge, read in
``shims.py`` (``CheckedQuicConnection.stream_offsets``) with the other private names.
"""

from __future__ import annotations

from collections.abc import AsyncIterable
from typing import TYPE_CHECKING

from ..._core.evidence import FailureCategory, Stage
from ..clock import bound, limit_of
from ..exchange import closing_body
from ..progress import AttemptProgress, WireError

if TYPE_CHECKING:
    from .driver import QuicDriver
    from .stream import H3Stream

__all__ = ["SEND_HIGH_WATER", "StreamSender"]

#: Bytes a streamed upload may have handed to QUIC and not yet seen acknowledged before the
#: caller waits (QUIC itself buffers without limit).
SEND_HIGH_WATER = 1024 * 1024


class StreamSender:
    """What one request hands to QUIC on its stream: the head's fields, then its body, given
    at once or streamed.

    Guarantees: nothing is handed once the server stopped the stream's sending side
    (STOP_SENDING: its response, or its reset, tells the caller the rest); aioquic refusing
    what is handed (the stream or the connection is over) is the stream's own failure if it
    has one, else a ``WireError`` (``CONNECTION_BROKEN``) with the evidence of the stage
    reached: no aioquic exception leaves it. It never waits on the socket. Cancelled in
    :meth:`upload`, what was handed stays handed and the body is closed; the caller resets the
    stream (``H3Stream.abandon``), as after any failure. It keeps no state of its own beyond
    the stream and attempt it sends for: every count it gives is read from QUIC.
    """

    __slots__ = ("_driver", "_progress", "_stream")

    def __init__(self, driver: QuicDriver, stream: H3Stream, progress: AttemptProgress) -> None:
        self._driver = driver
        self._stream = stream
        self._progress = progress

    def send(self, what: bytes | list[tuple[bytes, bytes]], end: bool) -> None:
        """Hand ``what`` (the head's fields, or body bytes; ``end``: the last of the request)
        to HTTP/3 and QUIC, and send what QUIC made of it (``QuicDriver.flush``). Raises
        ``WireError`` as the class docstring says; never waits."""
        stream = self._stream
        if stream.send_stopped:
            return
        driver = self._driver
        try:
            if isinstance(what, bytes):
                driver.h3.send_data(stream.stream_id, what, end_stream=end)
            else:
                driver.h3.send_headers(stream.stream_id, what, end_stream=end)
        except Exception as exc:
            if stream.failed:
                raise stream.error(self._progress) from None
            raise WireError.at(
                self._progress,
                FailureCategory.CONNECTION_BROKEN,
                f"the HTTP/3 stream no longer takes data: {exc!r}",
            ) from None
        self._progress.bytes_sent = driver.quic.stream_offsets(stream.stream_id)[1]
        driver.flush()

    async def upload(self, body: AsyncIterable[bytes]) -> None:
        """Hand a streamed body to QUIC chunk by chunk, then end the request; while more than
        :data:`SEND_HIGH_WATER` bytes of it are unacknowledged, wait (within the write bound)
        for the driver's next round. Returns early, ending nothing, once the server stopped
        the stream's sending side. Raises the stream's failure as soon as it has one; the body
        is closed however this ends."""
        stream = self._stream
        progress = self._progress
        driver = self._driver
        timekeeper = driver.timekeeper
        limit = limit_of(timekeeper, "write")
        async with closing_body(body):
            async for chunk in body:
                if stream.failed:
                    raise stream.error(progress)
                if stream.send_stopped:
                    return  # the server wants no more of it (its response says why)
                if not chunk:
                    continue
                progress.advance(Stage.REQUEST_BODY)
                self.send(bytes(chunk), False)
                while self._unacknowledged() > SEND_HIGH_WATER:
                    if stream.failed:
                        raise stream.error(progress)
                    if stream.send_stopped:
                        return
                    # Every waiting upload shares the driver's current event; the driver sets
                    # it after each round and puts a fresh one in its place.
                    with bound("write", timekeeper, progress=progress, limit=limit):
                        await driver.progressed.wait()
        self.send(b"", True)

    def _unacknowledged(self) -> int:
        """Bytes of the stream handed to QUIC and not yet acknowledged by the server."""
        acknowledged, handed = self._driver.quic.stream_offsets(self._stream.stream_id)
        return handed - acknowledged
