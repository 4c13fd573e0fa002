"""The HTTP/2 fast path's streams: what it keeps of each open stream, and h2's window algorithm.

:class:`FastStream` is a record of one stream (``fast_connection.FastConnection`` makes the
moves, frame by frame): the moves h2's stream state machine would have seen, replayed into
h2 as that machine's inputs (:meth:`FastStream.inputs`) when the fast path hands over, and the
stream's windows, ours a ``WindowManager`` as h2's own streams keep it. The receive window's
algorithm, h2's ``process_bytes`` in one call, is ``h2_private.processed`` (it reads a private
name of h2's); it is named here too, as ``tests/wire/test_h2_fast.py`` holds it to h2's.
"""

from __future__ import annotations

from typing import Any

from h2.stream import StreamInputs
from h2.windows import WindowManager

from .h2_private import processed

__all__ = ["FastStream", "processed"]

#: The window algorithm, by the name ``tests/wire/test_h2_fast.py`` holds it to h2's by.
_processed = processed


class FastStream:
    """What the fast path keeps of one open stream: the moves h2's stream state machine would
    have seen, and the stream's windows (``window``: ours, ``out_window``: the server's)."""

    __slots__ = (
        "headers_received",
        "informational",
        "local_ended",
        "out_window",
        "remote_ended",
        "request_headers",
        "stream_id",
        "trailers_received",
        "window",
    )

    #: h2's ``H2Stream.closed``: a stream the fast path keeps is never closed (it forgets it).
    closed = False

    def __init__(
        self, stream_id: int, window: int, out_window: int, headers: list[Any], end_stream: bool
    ) -> None:
        self.stream_id = stream_id
        self.window = WindowManager(window)
        self.out_window = out_window
        self.local_ended = end_stream
        self.remote_ended = False
        self.headers_received = False
        self.trailers_received = False
        self.informational = False
        #: The request's header block as sent (read only if the fast path hands over).
        self.request_headers = headers

    # As h2's stream: the method and the authority of the request, the first of each. Read
    # only when the fast path hands the stream to h2 (``FastMachine.handover``, once in a
    # connection's life at most), so worked out then, not for every request.

    @property
    def method(self) -> bytes | None:
        return self._pseudo(b":method")

    @property
    def authority(self) -> bytes | None:
        return self._pseudo(b":authority")

    def _pseudo(self, wanted: bytes) -> bytes | None:
        """The first value of the pseudo-header ``wanted`` in the request's block (they come
        before the regular fields), or ``None``."""
        for name, value in self.request_headers:
            if name == wanted:
                return value  # type: ignore[no-any-return]
            if name[:1] != b":":
                break
        return None

    def inputs(self) -> list[StreamInputs]:
        """The inputs that take h2's stream state machine where this stream is."""
        moves = [StreamInputs.SEND_HEADERS]
        if self.local_ended:
            moves.append(StreamInputs.SEND_END_STREAM)
        if self.informational:
            moves.append(StreamInputs.RECV_INFORMATIONAL_HEADERS)
        if self.headers_received:
            moves.append(StreamInputs.RECV_HEADERS)
        if self.trailers_received:  # a second head: h2's machine marks it as trailers
            moves.append(StreamInputs.RECV_HEADERS)
        if self.remote_ended:
            moves.append(StreamInputs.RECV_END_STREAM)
        return moves
