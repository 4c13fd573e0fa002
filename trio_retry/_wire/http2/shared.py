"""What ``inbound.py`` and ``outbound.py`` use of their connection: :class:`ConnectionState`.

A protocol rather than an import of :class:`~.connection.HTTP2Connection`, so that the
connection's module depends on its two halves and neither depends back on it.
"""

from __future__ import annotations

from typing import Protocol

import h2.connection
import trio

from ..clock import Bound, Clock
from ..progress import AttemptProgress
from .frames import InboundFrames
from .stream import Failure, Stream, StreamOwner
from .writer import Writer

__all__ = ["ConnectionState"]


class ConnectionState(StreamOwner, Protocol):
    """The state of one HTTP/2 connection that its reader and its request path share."""

    http_version: str
    closed: bool
    clock: Clock | None
    requests: int
    accepted_streams: int | None
    _h2: h2.connection.H2Connection
    _writer: Writer
    _inbound: InboundFrames
    _streams: dict[int, Stream]
    _awaiting_head: set[int]
    _capacity: trio.lowlevel.ParkingLot
    _clock: trio.abc.Clock
    _max_streams: int
    _goaway_last: int | None
    _death: Failure | None
    _settings_received: bool
    _ping_lot: trio.lowlevel.ParkingLot
    _ping_timeout: float
    _pings_sent: int
    _pings_answered: int

    def close(self) -> None: ...
    def write_bound(self, progress: AttemptProgress) -> Bound: ...
    def _in_use(self) -> int: ...
    def _die(self, failure: Failure) -> None: ...
