"""FaultServer's HTTP/3 connections, watched from inside: what the server's QUIC did, for the
tests that must count it the way a real server's log would (handshakes, resumed sessions,
request streams whose data came in 0-RTT packets, the client's CONNECTION_CLOSE and its code,
the client's stream resets and STOP_SENDING with theirs, the client addresses seen), and two
behaviours FaultServer does not script: a key update the server starts mid-connection, and a
cipher suite restricted to one.

Use it before the server starts::

    watch = watch_fault_quic(monkeypatch, key_update_after=50)
    server = FaultServer(tls=True, http3=True)
    ...
    [conn] = watch.connections
    assert conn.handshakes == 1 and conn.key_updates == 1

How: FaultServer's QUIC endpoint (``trio_retry.testing._h3``) builds each connection as
``QuicConnection(...)`` and serves it as ``H3ServerConnection(quic, ..., connection_id=...)``;
both names are replaced for the test (pytest's ``monkeypatch`` puts them back) by subclasses
that record into a :class:`QuicWatch`. The client's connections are untouched: they are built
by trio_retry's own module. Two of aioquic's private names are read, each checked by
:func:`_probe` so that an aioquic without them fails here, with its name, rather than
watching nothing: the handler of CONNECTION_CLOSE frames (a close the client sent, told apart
from an idle timeout) and of STREAM frames (with the packet's epoch: 0-RTT or 1-RTT).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import pytest
import trio
from aioquic import tls
from aioquic.quic import events
from aioquic.quic.connection import NetworkAddress, QuicConnection

__all__ = ["QuicWatch", "WatchedConnection", "watch_fault_quic"]


@dataclass(slots=True)
class WatchedConnection:
    """One server-side QUIC connection, as it happened."""

    #: FaultServer's connection id (``RecordedRequest.connection_id``), once it is served.
    connection_id: int | None = None
    handshakes: int = 0
    resumed: bool | None = None
    #: The TLS cipher suite negotiated (aioquic's name, e.g. ``CHACHA20_POLY1305_SHA256``).
    cipher: str | None = None
    early_data_accepted: bool | None = None
    #: Request streams that had STREAM frames in 0-RTT packets.
    early_streams: set[int] = field(default_factory=set)
    #: CONNECTION_CLOSE frames received from the client.
    closes_received: int = 0
    #: The error code of each of them, in order.
    close_codes: list[int] = field(default_factory=list)
    #: The client's RESET_STREAM and STOP_SENDING: stream id -> the error code it carried.
    resets: dict[int, int] = field(default_factory=dict)
    stops: dict[int, int] = field(default_factory=dict)
    #: Client addresses datagrams came from (``host:port``).
    client_addresses: set[str] = field(default_factory=set)
    key_updates: int = 0
    #: ``trio.current_time()`` of the first key update the server started.
    key_updated_at: float | None = None
    #: 1-RTT datagrams sent after the handshake (what ``key_update_after`` counts).
    datagrams_after_handshake: int = 0


@dataclass(slots=True)
class QuicWatch:
    """Every connection FaultServer's QUIC endpoint made while the watch was on."""

    key_update_after: int | None = None
    cipher_suites: tuple[tls.CipherSuite, ...] | None = None
    connections: list[WatchedConnection] = field(default_factory=list)

    def connection(self, connection_id: int) -> WatchedConnection:
        """The watched connection FaultServer numbered `connection_id`."""
        [found] = [c for c in self.connections if c.connection_id == connection_id]
        return found

    @property
    def handshakes(self) -> int:
        return sum(c.handshakes for c in self.connections)


def _probe() -> None:
    for name in ("_handle_connection_close_frame", "_handle_stream_frame"):
        if not callable(getattr(QuicConnection, name, None)):
            raise AssertionError(
                f"aioquic's QuicConnection has no {name}: tests/support/fault_quic.py must "
                "learn this aioquic's way to watch a server connection"
            )


def _address(addr: NetworkAddress) -> str:
    host, port = addr[0], addr[1]
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


def watch_fault_quic(
    monkeypatch: pytest.MonkeyPatch,
    *,
    key_update_after: int | None = None,
    cipher_suites: tuple[tls.CipherSuite, ...] | None = None,
) -> QuicWatch:
    """Watch every QUIC connection FaultServer makes until the test ends (see the module
    docstring). ``key_update_after``: the server starts a key update once it has sent that
    many datagrams after the handshake (once per connection). ``cipher_suites``: the only
    TLS cipher suites the server offers."""
    # FaultServer's QUIC endpoint and connection (they need aioquic, as this module does).
    from trio_retry.testing import _h3
    from trio_retry.testing._h3_conn import H3ServerConnection

    _probe()
    watch = QuicWatch(key_update_after=key_update_after, cipher_suites=cipher_suites)

    class WatchedQuic(QuicConnection):
        def __init__(self, *, configuration: Any, **kwargs: Any) -> None:
            if watch.cipher_suites is not None:
                configuration = dataclasses.replace(
                    configuration, cipher_suites=list(watch.cipher_suites)
                )
            super().__init__(configuration=configuration, **kwargs)
            self.watched = WatchedConnection()
            self._watched_done = False
            watch.connections.append(self.watched)

        def receive_datagram(self, data: bytes, addr: NetworkAddress, now: float) -> None:
            self.watched.client_addresses.add(_address(addr))
            super().receive_datagram(data, addr, now)

        def next_event(self) -> events.QuicEvent | None:
            event = super().next_event()
            if isinstance(event, events.HandshakeCompleted):
                self.watched.handshakes += 1
                self.watched.resumed = event.session_resumed
                self.watched.early_data_accepted = event.early_data_accepted
                schedule = self.tls.key_schedule
                self.watched.cipher = None if schedule is None else schedule.cipher_suite.name
                self._watched_done = True
            elif isinstance(event, events.StreamReset):
                self.watched.resets.setdefault(event.stream_id, event.error_code)
            elif isinstance(event, events.StopSendingReceived):
                self.watched.stops.setdefault(event.stream_id, event.error_code)
            return event

        def datagrams_to_send(self, now: float) -> list[tuple[bytes, NetworkAddress]]:
            watched = self.watched
            if (
                watch.key_update_after is not None
                and self._watched_done
                and watched.key_updates == 0
                and watched.datagrams_after_handshake >= watch.key_update_after
            ):
                self.request_key_update()
                watched.key_updates += 1
                watched.key_updated_at = trio.current_time()
            out = super().datagrams_to_send(now)
            if self._watched_done:
                watched.datagrams_after_handshake += len(out)
            return out

        def _handle_connection_close_frame(self, context: Any, frame_type: int, buf: Any) -> None:
            self.watched.closes_received += 1
            start = buf.tell()
            self.watched.close_codes.append(buf.pull_uint_var())
            buf.seek(start)
            super()._handle_connection_close_frame(context, frame_type, buf)

        def _handle_stream_frame(self, context: Any, frame_type: int, buf: Any) -> None:
            if context.epoch == tls.Epoch.ZERO_RTT:
                start = buf.tell()
                stream_id = buf.pull_uint_var()
                buf.seek(start)
                if stream_id % 4 == 0:  # a client-initiated bidirectional stream: a request
                    self.watched.early_streams.add(stream_id)
            super()._handle_stream_frame(context, frame_type, buf)

    class WatchedH3(H3ServerConnection):
        def __init__(self, quic: QuicConnection, **kwargs: Any) -> None:
            super().__init__(quic, **kwargs)
            if isinstance(quic, WatchedQuic):
                quic.watched.connection_id = kwargs["connection_id"]

    monkeypatch.setattr(_h3, "QuicConnection", WatchedQuic)
    monkeypatch.setattr(_h3, "H3ServerConnection", WatchedH3)
    return watch
