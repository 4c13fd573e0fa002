"""Every private name of h2 that trio_retry uses, in this one module, behind a probe.

The HTTP/2 fast path (``fast.py``) stands in for h2 on the common frames and, when a frame is
not its to handle, hands h2 the state it kept; both need h2's insides, which h2 does not
promise to keep. These are all of them (``tests/wire/test_h2_private.py`` checks that no
other module of the package names one):

- ``h2.connection._decode_headers``: a header block decoded as h2 decodes it;
- ``H2Connection``: ``_terminate_connection`` (a connection error, as h2 ends one),
  ``_local_settings_acked`` (our SETTINGS acknowledged), ``_data_to_send`` (h2 owes bytes),
  ``_closed_streams`` (how each forgotten stream closed), ``_inbound_flow_control_window_
  manager`` (the connection's receive window), ``_frame_dispatch_table`` (h2's handler of
  each kind of frame: :func:`ignore_after_reset` puts its own in front of DATA's and
  HEADERS');
- its ``incoming_buffer``: ``_data`` (bytes of a frame not yet complete), ``_headers_buffer``
  (a header block half received);
- ``H2Stream``: ``_inbound_window_manager``, ``_authority``, and ``_initialize_content_length``
  / ``_track_content_length``, h2's Content-Length checks, switched off per stream on every
  path (``stream.py`` checks the length as a stream error; h2 fails the connection);
- ``WindowManager._bytes_processed`` (:func:`processed`: h2's window algorithm in one call).

h2 is pinned (pyproject.toml: "re-check on upgrade"). Should a release rename or drop one of
these all the same, :func:`probe` (run once, at import) finds it missing: :data:`USABLE` is
then False, every connection keeps h2 on every frame (as ``Client(http2_fast_path=False)``),
and the ``trio_retry`` logger says so once, with the names. Nothing else changes, except that
h2's own Content-Length check, if its names moved, fails the connection as h2 does, and that
frames arriving on a stream the client reset are answered as h2 answers them (a RST_STREAM
of STREAM_CLOSED each, where RFC 9113 §5.1 says to ignore them: :func:`ignore_after_reset`).

Rejected: checking h2's version number (it would turn the fast path off on a release that
changed nothing it uses, and keep it on a patched h2 that did); probing per connection (a log
line per connection, and the names cannot change while the process runs); failing the import
(a client that works without the fast path should).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import h2.config
import h2.connection
import h2.events
from h2.errors import ErrorCodes
from h2.exceptions import StreamClosedError, StreamIDTooLowError
from h2.stream import H2Stream, StreamClosedBy, StreamInputs
from h2.windows import WindowManager
from hyperframe.frame import DataFrame, Frame, HeadersFrame, RstStreamFrame

__all__ = [
    "NAMES",
    "USABLE",
    "adopt_closed",
    "adopt_stream",
    "connection_window",
    "decode_headers",
    "holds_nothing",
    "ignore_after_reset",
    "probe",
    "processed",
    "reset_by_us",
    "settings_acked",
    "skip_length_checks",
    "take_unread",
    "terminate",
    "usable",
]

#: Where each name is looked for, by what :func:`probe` builds: ``module`` (``h2.connection``),
#: ``connection`` (an ``H2Connection``), ``buffer`` (its ``incoming_buffer``), ``stream`` (an
#: ``H2Stream``), ``window`` (a ``WindowManager``).
NAMES: tuple[tuple[str, str], ...] = (
    ("module", "_decode_headers"),
    ("connection", "_terminate_connection"),
    ("connection", "_local_settings_acked"),
    ("connection", "_data_to_send"),
    ("connection", "_closed_streams"),
    ("connection", "_inbound_flow_control_window_manager"),
    ("connection", "_frame_dispatch_table"),
    ("buffer", "_data"),
    ("buffer", "_headers_buffer"),
    ("stream", "_inbound_window_manager"),
    ("stream", "_authority"),
    ("stream", "_initialize_content_length"),
    ("stream", "_track_content_length"),
    ("window", "_bytes_processed"),
)

#: False when :func:`probe` found a name missing: the fast path is then never engaged.
USABLE = True

_log = logging.getLogger("trio_retry")


def probe() -> bool:
    """Look for every name of :data:`NAMES` on the h2 installed; set :data:`USABLE` to
    whether all are there, and log a warning naming the missing ones when not. Run once, at
    import."""
    global USABLE
    config = h2.config.H2Configuration(client_side=True)
    connection = h2.connection.H2Connection(config=config)
    where: dict[str, object] = {
        "module": h2.connection,
        "connection": connection,
        "buffer": connection.incoming_buffer,
        "stream": H2Stream(1, config=config, inbound_window_size=1, outbound_window_size=1),
        "window": WindowManager(1),
    }
    missing = [f"{kind}.{name}" for kind, name in NAMES if not hasattr(where[kind], name)]
    USABLE = not missing
    if missing:
        _log.warning(
            "the HTTP/2 fast path is off: h2 %s lacks %s (trio_retry pins h2 for these; "
            "every HTTP/2 frame goes through h2)",
            getattr(h2, "__version__", "?"),
            ", ".join(missing),
        )
    return USABLE


def usable() -> bool:
    """Whether the last :func:`probe` found every name (the fast path may engage)."""
    return USABLE


def _decode_missing(decoder: Any, block: bytes) -> list[tuple[bytes, bytes]]:
    raise RuntimeError("h2.connection._decode_headers is missing (h2_private.USABLE is False)")


#: ``decode_headers(decoder, block)``: ``block`` decoded as h2 decodes a received header block,
#: its errors included (h2's own function, bound here: no call in between on the hot path).
decode_headers: Callable[[Any, bytes], Iterable[tuple[bytes, bytes]]] = getattr(
    h2.connection, "_decode_headers", _decode_missing
)


def processed(manager: WindowManager, size: int) -> int:
    """``manager.process_bytes(size)``, h2's window algorithm, in one call instead of two:
    the increment of a WINDOW_UPDATE to send, or 0 (``tests/wire/test_h2_fast.py`` holds it
    to h2's)."""
    done = manager._bytes_processed = manager._bytes_processed + size
    if not done:
        return 0
    current = manager.current_window_size
    maximum = manager.max_window_size
    if (current == 0 and done > min(1024, maximum // 4)) or done >= maximum // 2:
        increment = min(done, maximum - current)
        manager._bytes_processed = 0
        manager.current_window_size = current + increment
        return increment
    return 0


def terminate(machine: h2.connection.H2Connection, error_code: ErrorCodes) -> None:
    """End ``machine`` on a connection error, as h2 does (its GOAWAY queued)."""
    machine._terminate_connection(error_code)


def settings_acked(machine: h2.connection.H2Connection) -> Any:
    """Our SETTINGS were acknowledged: h2 applies them and returns what changed (it has no
    stream of its own while the fast path is engaged)."""
    return machine._local_settings_acked()


def holds_nothing(machine: h2.connection.H2Connection) -> bool:
    """h2 holds no header block half received and owes no bytes of its own."""
    return not machine.incoming_buffer._headers_buffer and not machine._data_to_send


def take_unread(machine: h2.connection.H2Connection) -> bytearray:
    """The bytes of a frame h2 received only part of, taken out of h2."""
    buffer = machine.incoming_buffer
    data = buffer._data
    buffer._data = bytearray()
    return data


def connection_window(machine: h2.connection.H2Connection) -> WindowManager:
    """h2's receive window of the connection (the same object stays in use either way)."""
    return machine._inbound_flow_control_window_manager


def skip_length_checks(stream: H2Stream) -> None:
    """Switch h2's Content-Length checks of ``stream`` off: ``stream.py`` checks a response's
    length itself, as a stream error (h2's check fails the connection)."""
    stream.__dict__["_initialize_content_length"] = _no_length_check
    stream.__dict__["_track_content_length"] = _no_length_check


def _no_length_check(*_args: object) -> None:
    """Stands in for h2's per-stream Content-Length checks (:func:`skip_length_checks`)."""


def adopt_stream(
    machine: h2.connection.H2Connection,
    stream_id: int,
    window: WindowManager,
    out_window: int,
    local_window: int,
    method: bytes | None,
    authority: bytes | None,
    inputs: Iterable[StreamInputs],
) -> None:
    """Give ``machine`` a stream the fast path kept: h2's stream object, its receive window
    the same ``window`` object, its state reached by replaying ``inputs`` through h2's own
    stream state machine."""
    stream = H2Stream(
        stream_id,
        config=machine.config,
        inbound_window_size=local_window,
        outbound_window_size=out_window,
    )
    stream._inbound_window_manager = window
    stream.max_outbound_frame_size = machine.max_outbound_frame_size
    stream.request_method = method
    stream._authority = authority
    skip_length_checks(stream)
    states = stream.state_machine
    for move in inputs:
        states.process_input(move)
    machine.streams[stream_id] = stream


def adopt_closed(machine: h2.connection.H2Connection, closed: dict[int, Any]) -> None:
    """Tell ``machine`` how each stream the fast path forgot was closed."""
    for stream_id, closed_by in closed.items():
        machine._closed_streams[stream_id] = closed_by


def reset_by_us(machine: h2.connection.H2Connection, stream_id: int) -> bool:
    """Whether ``machine`` remembers closing ``stream_id`` by sending RST_STREAM: a stream it
    still holds, or one of the last ``H2Connection.MAX_CLOSED_STREAMS`` (65,536) it forgot
    (the fast path hands its own record over, as many, with :func:`adopt_closed`)."""
    stream = machine.streams.get(stream_id)
    closed_by = stream.closed_by if stream is not None else machine._closed_streams.get(stream_id)
    return closed_by is StreamClosedBy.SEND_RST_STREAM


#: What h2's handler of a kind of frame returns: the frames to send, the events.
_Handled = tuple[list[Frame], list[h2.events.Event]]


def ignore_after_reset(machine: h2.connection.H2Connection) -> None:
    """Make ``machine`` ignore a DATA or HEADERS frame on a stream the client reset, as RFC
    9113 §5.1 says ("An endpoint MUST ignore frames that it receives on closed streams after
    it has sent a RST_STREAM frame"): the server sent it before our RST_STREAM reached it.
    h2 answers each with a RST_STREAM(STREAM_CLOSED) of its own (the rule for a stream the
    *server* reset, which it keeps).

    What h2 does with such a frame otherwise stays: a DATA frame still counts against the
    connection's flow-control window (a frame past it is still FLOW_CONTROL_ERROR) and its
    octets are credited back as h2 credits any (a WINDOW_UPDATE on stream 0 once half the
    window is due, §6.9: the server's window does not leak); a field block is still decoded
    (the HPACK table must follow the server's, §4.3). Only h2's RST_STREAM is left out: a
    head's ``StreamClosedError`` (or ``StreamIDTooLowError``, once h2 moved the stream to
    its closed ones), which h2 answers with it, becomes nothing. WINDOW_UPDATE, RST_STREAM
    and PRIORITY on a closed stream h2 ignores already; PUSH_PROMISE is a connection error
    (push is off).

    How long: as long as h2 remembers how the stream closed (:func:`reset_by_us`: the last
    65,536 closed streams; §5.1 lets an endpoint limit the period). After that a DATA frame
    draws h2's RST_STREAM(STREAM_CLOSED) and a head h2's connection error, as before.

    h2's handlers of DATA and HEADERS are wrapped in its dispatch table, rather than its
    ``_receive_frame`` rewritten, so that everything but the answer stays h2's code. Does
    nothing when :func:`probe` found a name missing (h2 then answers as h2 does)."""
    if not USABLE:
        return
    table = machine._frame_dispatch_table
    on_data: Callable[[DataFrame], _Handled] = table[DataFrame]
    on_headers: Callable[[HeadersFrame], _Handled] = table[HeadersFrame]

    def data(frame: DataFrame) -> _Handled:
        frames, events = on_data(frame)
        if frames and reset_by_us(machine, frame.stream_id):
            frames = [f for f in frames if type(f) is not RstStreamFrame]
        return frames, events

    def headers(frame: HeadersFrame) -> _Handled:
        try:
            return on_headers(frame)
        # (StreamIDTooLowError: the stream h2 forgot, but remembers how it closed)
        except (StreamClosedError, StreamIDTooLowError) as exc:
            if reset_by_us(machine, exc.stream_id):
                return [], []
            raise

    table[DataFrame] = data
    table[HeadersFrame] = headers


probe()
