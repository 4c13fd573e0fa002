"""The frame-level faults: what an HTTP/2 (and, for `StreamFrames`, HTTP/3) stream does to the
protocol itself rather than to a response (flow-control windows, backpressure, hand-made
frames). Served by ``_h2.py`` (`StreamFrames` by ``_h3_conn.py`` too); part of the `Action`
union in ``_script.py``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["ShutWindow", "StopReading", "StreamFrames"]


@dataclass(frozen=True, slots=True)
class StopReading:
    """HTTP/2 only: when the stream's HEADERS arrive, open the flow-control windows as wide as
    they go (so the client's upload is limited by TCP alone), then stop reading the socket for
    `seconds`: the client's writes back up in the kernel buffers. Then the connection is reset.
    Never executed (the body is never read)."""

    seconds: float = 30.0


@dataclass(frozen=True, slots=True)
class ShutWindow:
    """HTTP/2 only: never reopen this stream's flow-control window (no stream WINDOW_UPDATE
    for its DATA; the connection's window is still reopened, so siblings go on). The upload
    stalls once the initial window is used. Never executed; the stream is reset (CANCEL)
    after the server's read timeout, or when the client resets it."""


@dataclass(frozen=True, slots=True)
class StreamFrames:
    """HTTP/2 and HTTP/3: read the request (executed), then write hand-made frames, which the
    server's own h2 or aioquic never sees: ``control`` first, then ``build(stream_id)``. The
    connection's other streams go on as scripted.

    HTTP/2 (builders in ``_h2_frames.py``): both go verbatim into the connection's byte stream
    (``control``: frames of stream 0; a frame's END_STREAM flag ends its stream). HTTP/3
    (builders in ``_h3_frames.py``): ``control`` on the server's control stream (a GOAWAY
    with an id of the test's choosing), ``build``'s frames on the request stream, which then
    ends (FIN) unless ``fin=False``: the stream stays open until the client ends it.

    ``reset``: an error code the stream is then reset with instead of ending (HTTP/2: an
    RST_STREAM frame after ``build``'s; HTTP/3: RESET_STREAM once the client acknowledged the
    frames, so they reach it first), as a server that answers, then refuses, would."""

    build: Callable[[int], bytes]
    control: bytes = b""
    fin: bool = True
    reset: int | None = None

    def __post_init__(self) -> None:
        if self.reset is not None and not 0 <= self.reset < 2**62:
            raise ValueError(f"reset must be an error code from 0 to 2**62-1, got {self.reset!r}")
