"""HTTP/3 (SPEC §16, extra ``http3``): QUIC and HTTP/3 from aioquic's sans-IO state machines,
driven by one Trio task per connection. Each module has one job:

- ``connection.py`` the connection as the pool and a request see it (opening, hooks, requests)
- ``driver.py``     the connection's task (the UDP socket, QUIC's timer) and what events mean
- ``stream.py``     a request stream as its caller sees it (the head, the body)
- ``control.py``    the server's GOAWAY, read from its control stream (aioquic drops it)
- ``quic.py``       the QUIC configuration (trust from the client's TLS settings), tickets

Imported only by a client with HTTP/3 configured: aioquic is never imported otherwise. The
package checks for aioquic before anything else in it runs, so that importing any part of it
without the extra raises one ``MissingExtra`` (an ``ImportError``) naming the extra (never a bare
``ModuleNotFoundError`` from whichever module imported aioquic first); the client imports the
package at construction, so a missing extra is reported there.
"""

from ..._core.errors import MissingExtra

MISSING_EXTRA = "HTTP/3 needs aioquic, the 'http3' extra: pip install 'trio_retry[http3]'"

try:
    import aioquic.h3.connection
    import aioquic.quic.connection  # noqa: F401
except ImportError as exc:
    raise MissingExtra(MISSING_EXTRA) from exc

from .connection import HTTP3Connection as HTTP3Connection  # noqa: E402

__all__ = ["MISSING_EXTRA", "HTTP3Connection"]
