"""HTTP/2 over h2, one job per module (named ``http2``, not ``h2``: a package must not shadow the
library it wraps). Imports go one way, down this list:

- ``frames.py``     inbound bytes cut at frame boundaries; GOAWAY taken out; DATA before a head
- ``headers.py``    the request's header block; the response's validated (stream errors)
- ``hpack_memo.py`` hpack's coders, giving a repeated block's result again while the table holds
- ``h2_private.py`` every private name of h2 used, behind a probe that turns the fast path off
- ``fast_frames.py`` the frames the fast path writes, encoded and queued
- ``fast_inbound.py`` the fast path's streams: what each keeps, what a head or DATA does to one
- ``fast_connection.py`` the fast path's connection: its state, the calls and frames it takes
- ``fast.py``       stands in for h2's machine: the fast path while engaged, h2 otherwise
- ``stream.py``     one exchange: a state enum, its proof (first failure wins), its body
- ``writer.py``     the one task that writes to the socket
- ``session.py``    the state the two halves share, and its moves: GOAWAY, death, slots, PINGs
- ``inbound.py``    the reader's half: what each inbound frame and h2 event does to the streams
- ``outbound.py``   the request's half: a stream opened, its request written, its head read
- ``connection.py`` the connection: opening, the reader and writer tasks, the pool hooks
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
