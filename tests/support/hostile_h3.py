"""FaultServer's HTTP/3 side made hostile: raw HTTP/3 and QPACK bytes where a well-behaved
server would write frames, for the tests of the client's limits (RFC 9114 §4.2.2, §7, §10.5;
RFC 9204 §2.1).

FaultServer scripts responses, not frames (its ``Raw`` has no meaning over QUIC). Here its
HTTP/3 connection class is replaced for one test (pytest's ``monkeypatch`` puts it back, as
``fault_quic.py`` does) by a subclass that serves a request whose path has an :class:`H3Attack`
by writing the attack's bytes on the request stream, on its own control stream (after, or in
place of, its SETTINGS), on its QPACK encoder stream, or on a bidirectional stream of its own;
``trickle`` then keeps writing filler on one of those as fast as the client acknowledges it,
up to that many bytes (a frame announced far larger than what is ever sent). Every other
request is served by FaultServer's script as usual, and every request is recorded (the attack's
path is scripted as a ``Stall``: its head was read, it "executed").

What the client did about it is kept in :class:`H3Attacks`: the error codes of the streams it
reset or stopped, and of its CONNECTION_CLOSE (read from the server's QUIC events).

Private names of aioquic are used (tests only): ``H3Connection._init_connection``, where the
server writes its SETTINGS, ``H3Connection._local_encoder_stream_id``, and
``QuicConnection._handle_stop_sending_frame`` (to ignore the client's STOP_SENDING).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
import trio
from aioquic.h3 import events as h3_events
from aioquic.h3.connection import H3Connection, StreamType
from aioquic.quic import events as quic_events
from aioquic.quic.connection import QuicConnection

__all__ = [
    "H3Attack",
    "H3Attacks",
    "frame_header",
    "hostile_h3",
    "prefixed_int",
    "qpack_literal_section",
    "varint",
]

#: Filler written at a time.
_CHUNK = 64 * 1024


def varint(value: int) -> bytes:
    """A QUIC variable-length integer (RFC 9000 §16)."""
    for size, prefix in ((1, 0x00), (2, 0x40), (4, 0x80), (8, 0xC0)):
        if value < 1 << (8 * size - 2):
            return (value | prefix << (8 * size - 8)).to_bytes(size, "big")
    raise ValueError(value)


def frame_header(kind: int, length: int) -> bytes:
    """The type and length of an HTTP/3 frame (RFC 9114 §7.1), its payload to follow."""
    return varint(kind) + varint(length)


def prefixed_int(value: int, bits: int, first: int = 0) -> bytes:
    """An HPACK/QPACK prefixed integer (RFC 7541 §5.1) in the low ``bits`` of ``first``."""
    limit = (1 << bits) - 1
    if value < limit:
        return bytes([first | value])
    out = bytearray([first | limit])
    value -= limit
    while value >= 128:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def qpack_literal_section(fields: list[tuple[bytes, bytes]]) -> bytes:
    """A QPACK field section of literal field lines with literal names (RFC 9204 §4.5.6), no
    Huffman, no dynamic table: what any decoder can read, whatever its table capacity."""
    out = bytearray(b"\x00\x00")  # Required Insert Count 0, Base 0
    for name, value in fields:
        out += prefixed_int(len(name), 3, 0x20) + name
        out += prefixed_int(len(value), 7, 0x00) + value
    return bytes(out)


@dataclass(frozen=True)
class H3Attack:
    """What the server writes when a request for its path arrives (each part optional)."""

    #: Bytes on the request stream (frames), written at once.
    request: bytes = b""
    #: Bytes on the server's control stream after its SETTINGS.
    control: bytes = b""
    #: Bytes written on the control stream *instead of* the server's SETTINGS frame (from the
    #: connection's start: every request of the connection then meets them).
    settings: bytes | None = None
    #: Bytes on the server's QPACK encoder stream, written before ``request``.
    encoder: bytes = b""
    #: Bytes on a bidirectional stream the server opens (RFC 9114 §6.1 forbids it).
    server_stream: bytes = b""
    #: Filler bytes then written after the attack's bytes on the stream ``trickle_on`` names,
    #: paced by the client's acknowledgements.
    trickle: int = 0
    trickle_on: Literal["request", "control", "server_stream"] = "request"
    #: How far the trickle may run ahead of the client's acknowledgements.
    ahead: int = 256 * 1024
    #: Then end the request stream (after ``request``, before any trickle).
    end_stream: bool = False
    #: Write ``request`` (and trickle) only once the client has reset the request stream, and
    #: ignore its STOP_SENDING: a server that goes on writing on a stream the client gave up.
    after_reset: bool = False


@dataclass
class H3Attacks:
    """The attacks by path, and what the client answered."""

    by_path: dict[str, H3Attack]
    #: Error codes of the client's RESET_STREAM and STOP_SENDING, by stream id.
    resets: dict[int, set[int]] = field(default_factory=dict)
    #: The error code of each CONNECTION_CLOSE the server received (or its idle timeout).
    closes: list[int] = field(default_factory=list)
    #: Filler bytes the server got written into QUIC so far, per trickle.
    trickled: list[int] = field(default_factory=list)

    def settings_attack(self) -> H3Attack | None:
        return next((a for a in self.by_path.values() if a.settings is not None), None)


def hostile_h3(monkeypatch: pytest.MonkeyPatch, attacks: dict[str, H3Attack]) -> H3Attacks:
    """Make FaultServer's HTTP/3 connections hostile until the test ends; see the module
    docstring. Call before the server starts; script the attack paths as ``Stall``."""
    from trio_retry.testing import _h3, _h3_conn
    from trio_retry.testing._h3_conn import H3ServerConnection

    if not callable(getattr(H3Connection, "_init_connection", None)):
        raise AssertionError("aioquic's H3Connection has no _init_connection: update hostile_h3")
    record = H3Attacks(dict(attacks))
    filler = b"\x21" * _CHUNK

    class HostileH3Connection(H3Connection):
        def _init_connection(self) -> None:
            attack = record.settings_attack()
            if attack is None:
                super()._init_connection()
                return
            assert attack.settings is not None
            self._local_control_stream_id = self._create_uni_stream(StreamType.CONTROL)
            self._quic.send_stream_data(self._local_control_stream_id, attack.settings)
            self._local_encoder_stream_id = self._create_uni_stream(StreamType.QPACK_ENCODER)
            self._local_decoder_stream_id = self._create_uni_stream(StreamType.QPACK_DECODER)

    class HostileServerConnection(H3ServerConnection):
        def __init__(self, quic: QuicConnection, **kwargs: Any) -> None:
            super().__init__(quic, **kwargs)
            original = quic.next_event

            def next_event() -> quic_events.QuicEvent | None:
                event = original()
                if isinstance(event, (quic_events.StreamReset, quic_events.StopSendingReceived)):
                    record.resets.setdefault(event.stream_id, set()).add(event.error_code)
                elif isinstance(event, quic_events.ConnectionTerminated):
                    record.closes.append(event.error_code)
                return event

            quic.next_event = next_event  # type: ignore[method-assign]

        def _on_request(self, event: h3_events.HeadersReceived) -> None:
            super()._on_request(event)
            path = dict(event.headers).get(b":path", b"").decode("latin-1")
            attack = record.by_path.get(path)
            if attack is not None and not self._closing:
                stream = self._streams.get(event.stream_id)
                if stream is not None:
                    # Its head was read and it is answered by the attack: it "executed" (the
                    # module docstring), recorded now. Left to FaultServer's task for the
                    # stream, the client's reset could come first (the machine busy: 1 run of
                    # .ci/run in ~40) and the request was recorded unexecuted.
                    stream.slot.executed = True
                    self._recorder.commit(stream.slot)
                self._attack(event.stream_id, attack)

        def _attack(self, stream_id: int, attack: H3Attack) -> None:
            if attack.after_reset:
                self._nursery.start_soon(self._after_reset, stream_id, attack)
                return
            quic, h3 = self._quic, self._h3
            assert h3 is not None
            if attack.encoder:
                quic.send_stream_data(h3._local_encoder_stream_id, attack.encoder)
            if attack.control:
                quic.send_stream_data(self._control_stream_id(), attack.control)
            target = {"request": stream_id, "control": self._control_stream_id()}
            if attack.server_stream:
                own = quic.get_next_available_stream_id()
                quic.send_stream_data(own, attack.server_stream)
                target["server_stream"] = own
            if attack.request or attack.end_stream:
                quic.send_stream_data(stream_id, attack.request, attack.end_stream)
            self._kick()
            if attack.trickle:
                self._nursery.start_soon(
                    self._trickle, target[attack.trickle_on], attack.trickle, attack.ahead
                )

        async def _after_reset(self, stream_id: int, attack: H3Attack) -> None:
            while stream_id not in record.resets and not self._closing:
                await self._progress.wait()
            if not self._closing:
                self._quic.send_stream_data(stream_id, attack.request)
                self._kick()
                await self._trickle(stream_id, attack.trickle, attack.ahead, even_reset=True)

        async def _trickle(
            self, stream_id: int, total: int, ahead: int, *, even_reset: bool = False
        ) -> None:
            sent = 0
            record.trickled.append(0)
            index = len(record.trickled) - 1
            try:
                while (
                    sent < total
                    and not self._closing
                    and (even_reset or stream_id not in record.resets)
                ):
                    while self._unacked(stream_id) > ahead and not self._closing:
                        await self._progress.wait()
                    piece = filler[: min(_CHUNK, total - sent)]
                    self._quic.send_stream_data(stream_id, piece)
                    sent += len(piece)
                    record.trickled[index] = sent
                    self._kick()
                    await trio.sleep(0)
            except Exception:
                pass  # the stream or the connection is gone: so is the attack

    class DeafQuicConnection(QuicConnection):
        """A server's QUIC that ignores every STOP_SENDING when an attack says so (its stream
        stays open for writing): aioquic's handler of the frame, replaced."""

        def _handle_stop_sending_frame(self, context: Any, frame_type: int, buf: Any) -> None:
            if not any(a.after_reset for a in record.by_path.values()):
                super()._handle_stop_sending_frame(context, frame_type, buf)
                return
            stream_id = buf.pull_uint_var()
            record.resets.setdefault(stream_id, set()).add(buf.pull_uint_var())

    if not callable(getattr(QuicConnection, "_handle_stop_sending_frame", None)):
        raise AssertionError("aioquic's QuicConnection has no _handle_stop_sending_frame")
    monkeypatch.setattr(_h3, "QuicConnection", DeafQuicConnection)
    monkeypatch.setattr(_h3_conn, "H3Connection", HostileH3Connection)
    monkeypatch.setattr(_h3, "H3ServerConnection", HostileServerConnection)
    return record
