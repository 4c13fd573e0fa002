"""What the tests must know of the QUIC library the client runs on in this process
(``trio_retry._wire.http3.backend``: qh3 where installed, else aioquic; ``TRIO_RETRY_QUIC``
picks one, so the HTTP/3 suites run over each)."""

from __future__ import annotations

from trio_retry._wire.http3 import backend

__all__ = ["FOLLOWS_PREFERRED_ADDRESS", "NAME"]

NAME = backend.NAME
#: Whether the client moves to a server's preferred address (RFC 9000 §9.6): aioquic's QUIC
#: does; qh3 2.1 parses the address and never activates it (a decline: everything stays on the
#: first address and works).
FOLLOWS_PREFERRED_ADDRESS = NAME == "aioquic"
