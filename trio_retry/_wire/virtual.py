"""`VirtualSocket`: what the HTTP layers need of a socket, for a connection that has none.

They use the socket under a stream for two things only: an abrupt synchronous close, and a
non-blocking "is anything readable?" probe on an idle pooled HTTP/1.1 connection (the proof
that a stale keep-alive connection was closed by its peer before a byte was written). An
in-memory connection (``trio_retry.testing.MockTransport``) answers both itself.
"""

from __future__ import annotations

import abc

__all__ = ["VirtualSocket"]


class VirtualSocket(abc.ABC):
    """Stands in for the OS socket of a connection that has none (an in-memory stream)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close the connection at once (synchronously), without any goodbye."""

    @abc.abstractmethod
    def readable(self) -> bool:
        """True when a read would not block: bytes, an end of stream or an error are waiting
        (what ``poll(POLLIN)`` answers for a socket)."""
