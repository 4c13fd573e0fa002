"""The task that drives one HTTP/3 connection, and what QUIC's events mean for it.

:class:`QuicDriver` is the half of :class:`~.connection.HTTP3Connection` that its driver task
runs (``connection.py`` is the other half: the pool's hooks and the request path). The task
(:meth:`QuicDriver._drive`, in the client's nursery) owns the UDP socket: it sends what QUIC
has to send, waits for datagrams or QUIC's timer (whichever comes first; the timer is the bound
of every wait of QUIC's own), feeds what arrived to QUIC and HTTP/3, and hands each stream what
is its own (``stream.py``). A caller's task never touches the socket: it writes into the QUIC
state machine synchronously and kicks the driver (:meth:`QuicDriver._kick`), which then sends.
The obvious alternative, each caller sending its own datagrams, lets two tasks wait on one
socket at once (trio refuses that) and sends QUIC's packets out of order.

What the events prove: a stream reset with ``H3_REQUEST_REJECTED``, and a stream at or above
a GOAWAY's id (RFC 9114 §5.2, read by ``control.py``), were not processed (``NOT_SENT``); the
connection's end fails every other open stream with the evidence of its own stage; a
handshake's end tells each request sent in early data whether the server accepted it.
"""

from __future__ import annotations

import enum
import math
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.events import (
    ConnectionTerminated,
    HandshakeCompleted,
    PingAcknowledged,
    StopSendingReceived,
    StreamDataReceived,
    StreamReset,
)

from ..._core.evidence import FailureCategory
from ..exchange import WireResponse, head_too_large
from ..progress import AttemptProgress
from .codes import CERTIFICATE_ALERTS, application_error, closed_words, tls_alert
from .control import H3_INTERNAL_ERROR, H3_REQUEST_REJECTED, ControlReader
from .shims import HandshakeRefused
from .stream import HTTP_VERSION, H3Stream

if TYPE_CHECKING:
    from aioquic.h3.connection import H3Connection
    from aioquic.quic.connection import QuicConnection

__all__ = ["BUFFER_LIMIT", "DEFAULT_STREAMS", "H3State", "QuicDriver"]

#: The largest datagram read (QUIC's are at most 1500 bytes on an Ethernet path; 64 KiB covers
#: loopback and GSO-coalesced ones).
_DATAGRAM = 65536
#: Response body bytes received and not yet read by their callers, across the connection, above
#: which the driver stops reading datagrams until the callers have read half of them. aioquic
#: grants flow-control credit as soon as data is received, not as it is read, so without this a
#: caller reading slower than the network would buffer a whole response. Datagrams then wait in
#: the kernel's socket buffer, and past it are dropped: QUIC's loss recovery and congestion
#: control slow the server down (a pause of the whole connection, which a fast reader of
#: another stream shares).
BUFFER_LIMIT = 16 * 1024 * 1024
#: Datagrams taken from the socket per round of the driver, at most.
_BATCH = 64
#: Streams lent at once when the server's limit is not known yet (before the handshake).
DEFAULT_STREAMS = 100


class H3State(enum.Enum):
    """The connection's one state (moves: HANDSHAKING -> OPEN -> DRAINING -> CLOSED, or to
    CLOSED from any)."""

    HANDSHAKING = "handshaking"
    OPEN = "open"
    DRAINING = "draining"  # GOAWAY received: no new streams; closed when the last ends
    CLOSED = "closed"


class QuicDriver:
    """The driver task's half of an HTTP/3 connection; see the module docstring. Its state is
    set up by :class:`~.connection.HTTP3Connection`'s constructor."""

    _sock: socket.socket
    _address: object
    _quic: QuicConnection
    _h3: H3Connection
    _control: ControlReader
    _handshake: trio.Event
    _handshake_failure: tuple[FailureCategory, str] | None
    _wait_scope: trio.CancelScope | None
    _progressed: trio.Event
    _max_streams: int
    _sent_early: dict[int, AttemptProgress]
    _last_received: float
    _pings_answered: int
    _max_header_bytes: int
    _room: trio.Event
    state: H3State
    streams: dict[int, H3Stream]
    buffered: int
    on_retired: Callable[[], None] | None
    on_handshake_failed: Callable[[str], None] | None
    on_handshake_done: Callable[[], None] | None

    def _handshake_failed(self, category: FailureCategory, message: str) -> None:
        if self._handshake_failure is None:
            self._handshake_failure = (category, message)
            callback, self.on_handshake_failed = self.on_handshake_failed, None
            if callback is not None:
                callback(message)
        self._handshake.set()
        self.close()

    def close(self) -> None:
        """Close at once (safe twice): open streams fail with the evidence of their stages,
        QUIC's CONNECTION_CLOSE is sent by the driver, which then ends."""
        if self.state is H3State.CLOSED:
            return
        self._die(FailureCategory.CONNECTION_BROKEN, "the connection was closed by the client")
        try:
            self._quic.close(error_code=0x100)  # H3_NO_ERROR
        except Exception:
            pass
        self._kick()

    def received(self, size: int) -> None:
        """Body bytes arrived for a caller (``BUFFER_LIMIT``)."""
        self.buffered += size
        if self.buffered > BUFFER_LIMIT and self._room.is_set():
            self._room = trio.Event()

    def consumed(self, size: int) -> None:
        """A caller took (or dropped) ``size`` buffered body bytes."""
        self.buffered -= size
        if self.buffered <= BUFFER_LIMIT // 2:
            self._room.set()

    def _kick(self) -> None:
        """Wake the driver so it sends what the state machine has queued."""
        scope = self._wait_scope
        if scope is not None:
            scope.cancel()

    async def _drive(self) -> None:
        """The connection's task: send, wait for datagrams or the timer, process; until the
        connection ends. Never raises but ``Cancelled``: whatever ends it fails the open
        streams with the evidence of their stages and closes the socket.

        The socket is a non-blocking stdlib socket read and written directly after trio says
        it is ready (``wait_readable``/``wait_writable``): every datagram already received is
        taken in one round (up to :data:`_BATCH`) and QUIC's events handled once for all of
        them. Through ``trio.socket``, each datagram cost a checkpoint and a round of the loop:
        a 10 MB download ran at a twentieth of HTTP/2's speed, mostly in that loop."""
        sock = self._sock
        quic = self._quic
        address = self._address
        try:
            while True:
                await self._send_pending()
                if self.state is H3State.CLOSED:
                    return  # (its CONNECTION_CLOSE, if any, has just been sent)
                timer = quic.get_timer()
                with trio.CancelScope(deadline=math.inf if timer is None else timer) as scope:
                    self._wait_scope = scope
                    if self.buffered > BUFFER_LIMIT:
                        await self._room.wait()  # (sends, and QUIC's timer, still go on)
                    else:
                        await trio.lowlevel.wait_readable(sock)
                self._wait_scope = None
                now = trio.current_time()
                for _ in range(_BATCH):
                    try:
                        data = sock.recv(_DATAGRAM)
                    except BlockingIOError:
                        break
                    except OSError as exc:
                        self._lost(exc)
                        break
                    try:
                        quic.receive_datagram(data, address, now=now)
                    except Exception as exc:  # the client refused the server, or aioquic broke
                        self._unreadable(exc)
                        break
                    self._last_received = now
                if timer is not None and now >= timer:
                    quic.handle_timer(now=now)
                self._process()
                progressed, self._progressed = self._progressed, trio.Event()
                progressed.set()
        except Exception as exc:  # a bug: fail the streams, never the client's nursery
            self._die(FailureCategory.CONNECTION_BROKEN, f"internal error in HTTP/3: {exc!r}")
        finally:
            self._wait_scope = None
            self._die(FailureCategory.CONNECTION_BROKEN, "the client closed")
            sock.close()

    async def _send_pending(self) -> None:
        """Send every datagram QUIC has ready, waiting for the socket only when it is full."""
        sock = self._sock
        for data, _ in self._quic.datagrams_to_send(now=trio.current_time()):
            while True:
                try:
                    sock.send(data)
                    break
                except BlockingIOError:
                    await trio.lowlevel.wait_writable(sock)
                except OSError as exc:
                    self._lost(exc)
                    return

    def _lost(self, exc: OSError) -> None:
        """The socket failed (an ICMP unreachable on a connected UDP socket, typically)."""
        if self.state is H3State.HANDSHAKING and not self._sent_early:
            self._handshake_failed(FailureCategory.CONNECT, f"UDP: {exc}")
        self._die(FailureCategory.CONNECTION_BROKEN, f"the QUIC connection's socket failed: {exc}")

    def _unreadable(self, exc: Exception) -> None:
        """``receive_datagram`` raised: the client's check refused the server
        (``shims.HandshakeRefused``), or aioquic failed on what arrived. During the handshake
        that is the handshake's failure (the origin is then reached over TCP); after it, the
        connection's."""
        if isinstance(exc, HandshakeRefused):
            category, message = exc.category, exc.message
        else:
            category = FailureCategory.TLS_HANDSHAKE
            message = f"QUIC failed on a datagram from the server: {exc!r}"
        if self.state is H3State.HANDSHAKING:
            self._handshake_failed(category, message)  # (which closes, as below)
        self._die(FailureCategory.CONNECTION_BROKEN, message)
        try:
            self._quic.close(error_code=H3_INTERNAL_ERROR)  # sent by the next round
        except Exception:
            pass

    def _process(self) -> None:
        """Hand every event QUIC produced to HTTP/3 and to the streams (none once closed: a
        handshake the client refused must not complete afterwards)."""
        if self.state is H3State.CLOSED:
            return
        quic = self._quic
        while (event := quic.next_event()) is not None:
            if isinstance(event, HandshakeCompleted):
                self._handshake_completed(bool(event.early_data_accepted))
            elif isinstance(event, ConnectionTerminated):
                self._terminated(event.error_code, event.frame_type, event.reason_phrase)
                continue
            elif isinstance(event, StreamDataReceived) and event.stream_id % 4 == 3:
                goaway = self._control.feed(event.stream_id, event.data)
                if goaway is not None:
                    self._goaway(goaway)
            elif isinstance(event, StreamReset):
                self._reset(event.stream_id, event.error_code)
            elif isinstance(event, PingAcknowledged):
                self._pings_answered = max(self._pings_answered, event.uid)
            elif isinstance(event, StopSendingReceived):
                stopped = self.streams.get(event.stream_id)
                if stopped is not None:
                    stopped.send_stopped = True
            for h3_event in self._h3.handle_event(event):
                stream = self.streams.get(getattr(h3_event, "stream_id", -1))
                if stream is None:
                    continue
                if isinstance(h3_event, HeadersReceived):
                    self._headers(stream, h3_event.headers, h3_event.stream_ended)
                elif isinstance(h3_event, DataReceived):
                    stream.data(h3_event.data, h3_event.stream_ended)

    def _handshake_completed(self, early_accepted: bool) -> None:
        if self.state is H3State.HANDSHAKING:
            self.state = H3State.OPEN
        # The server's initial MAX_STREAMS for request streams: aioquic keeps it in a private
        # attribute and has no getter; if it is gone, DEFAULT_STREAMS stays the limit (aioquic
        # holds back a stream beyond the server's limit itself, so nothing breaks).
        limit = getattr(self._quic, "_remote_max_streams_bidi", None)
        if isinstance(limit, int) and limit > 0:
            self._max_streams = min(limit, 1000)
        word = "accepted" if early_accepted else "rejected"
        for progress in self._sent_early.values():
            progress.early_data = word
        self._sent_early.clear()
        self._handshake.set()
        self.on_handshake_failed = None
        done, self.on_handshake_done = self.on_handshake_done, None
        if done is not None:
            done()

    def _headers(self, stream: H3Stream, headers: list[tuple[bytes, bytes]], ended: bool) -> None:
        """A HEADERS frame for ``stream``: a final head, an interim one (skipped), or trailers
        (dropped: the head's fields are what a response carries)."""
        if stream.response is not None:
            if ended:
                stream.data(b"", True)
            return
        status: int | None = None
        fields: list[tuple[bytes, bytes]] = []
        size = 0
        for name, value in headers:
            size += len(name) + len(value) + 32
            if name == b":status":
                status = int(value) if value.isdigit() and len(value) == 3 else -1
            elif not name.startswith(b":"):
                fields.append((name, value))
        if size > self._max_header_bytes:
            stream.fail(FailureCategory.REMOTE_PROTOCOL, head_too_large(f"{size} bytes"))
            return
        if status is None or status < 100:
            stream.fail(
                FailureCategory.REMOTE_PROTOCOL,
                "the server sent a response head with no valid :status",
            )
            return
        if status < 200:
            return  # 1xx: the final head follows
        stream.head(WireResponse(status, "", fields, HTTP_VERSION, stream), ended)

    def _reset(self, stream_id: int, code: int) -> None:
        stream = self.streams.get(stream_id)
        if stream is None:
            return
        if code == H3_REQUEST_REJECTED:
            stream.fail(
                FailureCategory.REFUSED_STREAM,
                "the server refused the stream (H3_REQUEST_REJECTED): the request was not "
                "processed",
                not_sent=True,
            )
        else:
            stream.fail(
                FailureCategory.CONNECTION_BROKEN,
                f"the server reset the stream ({application_error(code)})",
            )

    def _goaway(self, first_unprocessed: int) -> None:
        """GOAWAY: streams at or above its id were not processed (RFC 9114 §5.2)."""
        if self.state in (H3State.OPEN, H3State.HANDSHAKING):
            self.state = H3State.DRAINING
        for stream_id, stream in list(self.streams.items()):
            if stream_id >= first_unprocessed:
                stream.fail(
                    FailureCategory.GOAWAY,
                    f"the server sent GOAWAY({first_unprocessed}): stream {stream_id} was not "
                    "processed",
                    not_sent=True,
                    reconnect=True,
                )
        # The pool sees it unavailable from now on (DRAINING); it learns that it is gone when
        # the last stream ends and the connection closes (``_die``).
        if not self.streams:
            self.close()

    def _terminated(self, code: int, frame_type: int | None, reason: str) -> None:
        """QUIC's CONNECTION_CLOSE (the peer's, or an idle timeout, or ours)."""
        detail = f"the QUIC connection closed ({closed_words(code, frame_type, reason)})"
        if self.state is H3State.HANDSHAKING:
            alert = tls_alert(code, frame_type)
            category = (
                FailureCategory.TLS_CERTIFICATE
                if alert in CERTIFICATE_ALERTS
                else FailureCategory.TLS_HANDSHAKE
            )
            self._handshake_failed(category, detail)
        self._die(FailureCategory.CONNECTION_BROKEN, detail)

    def _die(self, category: FailureCategory, message: str) -> None:
        """The connection is over: fail every open stream, tell the pool once."""
        if self.state is H3State.CLOSED:
            return
        self.state = H3State.CLOSED
        if not self._handshake.is_set():
            self._handshake_failure = self._handshake_failure or (
                FailureCategory.TLS_HANDSHAKE,
                message,
            )
            self._handshake.set()
        for stream in list(self.streams.values()):
            stream.fail(category, message)
        self._kick()
        retired, self.on_retired = self.on_retired, None
        if retired is not None:
            retired()
