"""What each scripted action means on HTTP/3, where it differs from HTTP/2 (the connection
itself is `_h3_conn.py`). The meaning stays the same, and so does the record (`executed`):

* `Respond`, `Stall`, `Handler`, `EndlessBody`, 1xx and 425 are as on HTTP/2.
* `CloseBeforeRead`, `CloseAfterHead`, `CloseAfterBody`: CONNECTION_CLOSE of the whole QUIC
  connection, with H3_NO_ERROR, or H3_INTERNAL_ERROR for ``reset=True`` (QUIC has no FIN
  versus RST: the error code carries the difference, `close_code`).
* `PartialBody`: after the head and the short body were acknowledged, RESET_STREAM
  (H3_INTERNAL_ERROR); ``reset=True`` closes the connection with H3_INTERNAL_ERROR instead.
* `StreamedBody`: its parts as on HTTP/2; ``"break"`` and ``"reset"`` end it as `PartialBody`'s
  ``reset=False`` and ``reset=True`` do.
* `RefuseStream`: RESET_STREAM and STOP_SENDING with H3_REQUEST_REJECTED, the proof (RFC 9114
  §4.1.1) that the request was not processed; the connection stays usable.
* `GoAway`: HTTP/3's GOAWAY carries the first request stream id that is NOT processed (HTTP/2's
  the last one that is), and no error code. The script keeps HTTP/2's meaning: requests with an
  id at or below `last_stream_id` (None: the stream that popped it) carry on; the GOAWAY sent
  is the next client stream id above it (`goaway_id_for`), and the requests at or above that
  get no response at all. `error_code` has no place on HTTP/3 and is ignored. Once the
  remaining requests are answered the connection closes with H3_NO_ERROR.
* `Respond(close_after=True)`: GOAWAY above the highest request seen, then that drain.
* `StreamFrames`: its ``control`` bytes on the server's control stream, then the frames it
  builds on the request stream, which ends (hand-made HTTP/3 frames, `_h3_frames.py`).
* `Raw` has no meaning (QUIC packets are encrypted and authenticated: there is no byte stream
  to write garbage into), nor do HTTP/2's flow-control faults: `ScriptError`.
"""

from __future__ import annotations

from aioquic.h3.connection import ErrorCode

from ._script import GoAway, Raw, ScriptError, ShutWindow, Stall, StopReading

__all__ = ["check_h3", "close_code", "goaway_id_for", "h2_only"]


def close_code(reset: bool) -> int:
    """The CONNECTION_CLOSE code of a script's connection drop (``reset`` as scripted)."""
    return ErrorCode.H3_INTERNAL_ERROR if reset else ErrorCode.H3_NO_ERROR


def goaway_id_for(last_stream_id: int) -> int:
    """The HTTP/3 GOAWAY id that lets requests at or below `last_stream_id` carry on: the first
    client-initiated bidirectional stream id above it (RFC 9114 §5.2: requests with an id at
    or above the GOAWAY's were not processed)."""
    return (last_stream_id // 4 + 1) * 4


def check_h3(action: object, method: str, path: str) -> None:
    """`ScriptError` for the actions HTTP/3 cannot carry out: `Raw` (QUIC packets are
    encrypted and authenticated: there is no byte stream to write garbage into) and HTTP/2's
    flow-control faults."""
    if isinstance(action, Raw):
        raise ScriptError(
            f"Raw has no meaning on HTTP/3 (QUIC carries no raw byte stream), but {method} "
            f"{path} arrived over HTTP/3"
        )
    if isinstance(action, (StopReading, ShutWindow)):
        raise h2_only(action, method, path)
    if isinstance(action, (Stall, GoAway)):
        check_h3(action.then, method, path)


def h2_only(action: object, method: str, path: str) -> ScriptError:
    return ScriptError(
        f"{type(action).__name__} is HTTP/2-only, but {method} {path} arrived over HTTP/3"
    )
