"""HTTP/3 (SPEC §16, extra ``http3``): sans-IO state machines for QUIC (qh3's or aioquic's,
the backend below) and HTTP/3 (aioquic's), on HTTP/2's shape: a session of streams, one task
that owns the socket and the protocol state, and a connection the pool sees; what every
multiplexed protocol shares is ``_wire/contract.py`` (nothing here imports ``_wire/http2``).
Imports go one way, down this list:

- ``verify.py``     a server's certificate chain checked with the client's own ``SSLContext``
- ``shims.py``      aioquic's classes as the client runs them, and the private names they read
- ``shims_qh3.py``  qh3's QUIC connection as the client runs it (aioquic's HTTP/3 over it)
- ``backend.py``    the QUIC library in use: qh3 where installed, else aioquic
- ``quic.py``       the QUIC configuration (trust from the client's TLS settings), tickets
- ``codes.py``      QUIC, TLS and HTTP/3 error codes in words
- ``qpack.py``      how large a QPACK field section decodes to, known before it is decoded
- ``frames.py``     a request stream's frames read before aioquic keeps them: the limits
- ``control.py``    the server's GOAWAY, read from its control stream (aioquic drops it), and
                    the limits on its frames
- ``headers.py``    a response's field section checked, made the head a caller reads
- ``whole.py``      a whole small response read in one pass, when it is plain (the fast
                    path; anything else goes to aioquic's HTTP/3, which reads it as before)
- ``stream.py``     a request stream as its caller sees it (the head, the body, its proof)
- ``udp_batch.py``  many datagrams per read: qh3's binding of ``recvmmsg`` (the boundary)
- ``udp.py``        the UDP socket: each datagram on the path QUIC chose, ICMP errors by path,
                    datagrams in batches (GSO, GRO) where the kernel has them
- ``acks.py``       when the task holds QUIC's acknowledgement for a caller's next request
- ``datagrams.py``  QUIC's datagrams to and from the socket in rounds: a caller's flush, an
                    ICMP error judged by path, the last CONNECTION_CLOSE
- ``handshake.py``  a handshake still going on: its limit, the requests handed over during
                    it, which went in its early data (0-RTT), what its end means for each
- ``events.py``     what each aioquic event means to a connection, and their one dispatch
- ``driver.py``     the connection's state and its one task: the UDP socket, QUIC and HTTP/3,
                    the streams, QUIC's timer
- ``sending.py``    a request stream's sending side: its head and body handed to QUIC, an
                    upload paced by what the server acknowledged
- ``connection.py`` the connection as the pool and a request see it (opening, hooks, requests)

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

from . import backend  # noqa: E402, F401  (the QUIC library: TRIO_RETRY_QUIC, or qh3)
from .connection import HTTP3Connection as HTTP3Connection  # noqa: E402

__all__ = ["MISSING_EXTRA", "HTTP3Connection"]
