"""HTTP/3 (SPEC §16, extra ``http3``): QUIC and HTTP/3 from aioquic's sans-IO state machines,
driven by one Trio task per connection (``connection.py``); the server's GOAWAY read from its
control stream (``control.py``); a request stream as its caller sees it (``stream.py``); the
QUIC configuration and session tickets (``quic.py``).

Imported only by a client with HTTP/3 configured: aioquic is never imported otherwise.
"""

from .connection import HTTP3Connection as HTTP3Connection

__all__ = ["HTTP3Connection"]
