"""Hand-made HTTP/3 frames (RFC 9114 §7.2) for the fault server's ``StreamFrames``: written
as given, so that a test can send what aioquic's own ``H3Connection`` would not (a field name
in upper case, a ``content-length`` the body does not match, no ``:status``, a GOAWAY whose id
is not a client request stream's).

Importing this module needs aioquic (extra ``http3``), as ``_h3_conn.py`` does.
"""

from __future__ import annotations

from collections.abc import Sequence

import pylsqpack
from aioquic.buffer import encode_uint_var

__all__ = ["data_frame", "frame", "goaway_frame", "headers_frame"]

_DATA = 0x00
_HEADERS = 0x01
_GOAWAY = 0x07


def frame(kind: int, payload: bytes) -> bytes:
    """One frame: type, length, payload (nothing checks it)."""
    return encode_uint_var(kind) + encode_uint_var(len(payload)) + payload


def headers_frame(headers: Sequence[tuple[str, str]]) -> bytes:
    """A HEADERS frame carrying `headers` exactly as given, in order and case. QPACK-encoded
    with no dynamic table (static references and literals only): nothing is written on the
    encoder stream, and the connection's other streams decode as before."""
    fields = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers]
    _, block = pylsqpack.Encoder().encode(0, fields)
    return frame(_HEADERS, block)


def data_frame(data: bytes) -> bytes:
    return frame(_DATA, data)


def goaway_frame(stream_id: int) -> bytes:
    """A GOAWAY frame carrying `stream_id` (for a control stream's ``StreamFrames.control``)."""
    return frame(_GOAWAY, encode_uint_var(stream_id))
