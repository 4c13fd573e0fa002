"""HTTP/2 over h2, one job per module:

- ``frames.py``     inbound bytes cut at frame boundaries; GOAWAY taken out; DATA before a head
- ``headers.py``    the request's header block; the response's validated (stream errors)
- ``hpack_memo.py`` hpack's coders, giving a repeated block's result again while the table holds
- ``stream.py``     one exchange: a state enum, its proof (first failure wins), its body
- ``writer.py``     the one task that writes to the socket
- ``outbound.py``   the request side: a stream opened, its request written, its head read
- ``inbound.py``    what each inbound frame and h2 event does: GOAWAY, resets, stream errors
- ``shared.py``     the connection state those two halves share (a protocol)
- ``connection.py`` the connection: opening, the request path, health checks, the pool hooks
"""

from __future__ import annotations

import logging

from .connection import HTTP2Connection

# hpack logs every header it encodes or decodes, values included, at DEBUG ("hpack.hpack"):
# an application that turns DEBUG on for everything would log credentials. Unless that logger
# was configured already, it is held at INFO; `logging.getLogger("hpack").setLevel(
# logging.DEBUG)` turns it back on (docs/reliability.md).
_HPACK_LOG = logging.getLogger("hpack")
if _HPACK_LOG.level == logging.NOTSET:
    _HPACK_LOG.setLevel(logging.INFO)

__all__ = ["HTTP2Connection"]
