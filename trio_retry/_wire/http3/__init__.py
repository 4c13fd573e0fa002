"""HTTP/3 (SPEC §16, extra ``http3``): QUIC and HTTP/3 from aioquic's sans-IO state machines,
driven by one Trio task per connection. Each module has one job:

- ``connection.py`` the connection as the pool and a request see it (opening, hooks, requests)
- ``driver.py``     the connection's task (the UDP socket, QUIC's timer) and what events mean
- ``stream.py``     a request stream as its caller sees it (the head, the body)
- ``control.py``    the server's GOAWAY, read from its control stream (aioquic drops it)
- ``quic.py``       the QUIC configuration (trust from the client's TLS settings), tickets

Imported only by a client with HTTP/3 configured: aioquic is never imported otherwise.
"""

from .connection import HTTP3Connection as HTTP3Connection

__all__ = ["HTTP3Connection"]
