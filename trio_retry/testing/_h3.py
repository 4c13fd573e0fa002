"""The fault server's HTTP/3 endpoint: one Trio task owns the UDP socket and hands each
datagram to its QUIC connection (found by destination connection id), starting a connection
for each new client Initial. Session tickets for resumption and 0-RTT are kept here.

Importing this module needs aioquic (extra ``http3``); `FaultServer` imports it only when
``http3=True``.

Rejected alternative: aioquic's asyncio server (`aioquic.asyncio.serve`) would have done the
datagram routing, but the fault server is Trio-only and its stream tasks must live in the
server's nursery; the routing is a dictionary lookup.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

import trio
from aioquic._buffer import Buffer  # aioquic.buffer re-exports it without __all__
from aioquic.h3.connection import H3_ALPN
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import NetworkAddress, QuicConnection
from aioquic.quic.packet import (
    QuicPacketType,
    encode_quic_version_negotiation,
    pull_quic_header,
)
from aioquic.tls import SessionTicket
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from ._common import Recorder, Timeouts
from ._h3_conn import H3ServerConnection

__all__ = ["H3Endpoint", "bind_udp"]

# RFC 9000 §14.1: a client's Initial is padded to at least 1200 bytes; smaller ones are not
# answered (no amplification).
_MIN_INITIAL = 1200
_RECEIVE_SIZE = 65536


async def bind_udp(host: str, port: int) -> trio.socket.SocketType:
    """A UDP socket bound to (`host`, `port`); `OSError` when the port is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = trio.socket.socket(family, socket.SOCK_DGRAM)
    try:
        await sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


class H3Endpoint:
    """Serves HTTP/3 on one bound UDP socket until cancelled.

    `accept_early_data` is asked at each new connection: False makes the server ignore the
    client's session ticket, which aioquic's TLS offers as the only way to refuse 0-RTT (it
    accepts early data whenever it resumes a session), so the client's early data is dropped
    and the handshake is a full one. Tickets are single-use (RFC 8446 §8.1, anti-replay): a
    client resumes with the newest ticket it received.
    """

    def __init__(
        self,
        *,
        recorder: Recorder,
        timeouts: Timeouts,
        cert_pem: bytes,
        key_pem: bytes,
        next_connection_id: Callable[[], int],
        accept_early_data: Callable[[], bool],
    ) -> None:
        self._recorder = recorder
        self._timeouts = timeouts
        self._next_connection_id = next_connection_id
        self._accept_early_data = accept_early_data
        certificates = x509.load_pem_x509_certificates(cert_pem)
        self._config = QuicConfiguration(
            is_client=False,
            alpn_protocols=list(H3_ALPN),
            idle_timeout=timeouts.idle,
            certificate=certificates[0],
            certificate_chain=certificates[1:],
            private_key=serialization.load_pem_private_key(key_pem, password=None),
        )
        self._tickets: dict[bytes, SessionTicket] = {}
        self._by_cid: dict[bytes, H3ServerConnection] = {}

    # -- session tickets ----------------------------------------------------------------------

    def _store_ticket(self, ticket: SessionTicket) -> None:
        self._tickets[ticket.ticket] = ticket

    def _fetch_ticket(self, label: bytes) -> SessionTicket | None:
        ticket = self._tickets.pop(label, None)
        return ticket if self._accept_early_data() else None

    # -- serving ------------------------------------------------------------------------------

    async def serve(self, sock: trio.socket.SocketType) -> None:
        """Receive datagrams on `sock` and dispatch them until cancelled; closes `sock`."""
        with sock:
            async with trio.open_nursery() as nursery:
                while True:
                    try:
                        data, addr = await sock.recvfrom(_RECEIVE_SIZE)
                    except ConnectionError:
                        continue  # an ICMP error reported on the socket: not ours to fix
                    await self._dispatch(sock, nursery, data, addr)

    async def _dispatch(
        self,
        sock: trio.socket.SocketType,
        nursery: trio.Nursery,
        data: bytes,
        addr: NetworkAddress,
    ) -> None:
        try:
            header = pull_quic_header(
                Buffer(data=data), host_cid_length=self._config.connection_id_length
            )
        except ValueError:
            return  # not QUIC
        known = self._by_cid.get(header.destination_cid)
        if known is not None:
            known.deliver(data, addr)
            return
        if header.version is None or header.packet_type is not QuicPacketType.INITIAL:
            return  # a packet of a connection we no longer know
        if header.version not in self._config.supported_versions:
            negotiation = encode_quic_version_negotiation(
                source_cid=header.destination_cid,
                destination_cid=header.source_cid,
                supported_versions=self._config.supported_versions,
            )
            try:
                await sock.sendto(negotiation, addr)
            except OSError:
                pass
            return
        if len(data) < _MIN_INITIAL:
            return
        quic = QuicConnection(
            configuration=self._config,
            original_destination_connection_id=header.destination_cid,
            session_ticket_fetcher=self._fetch_ticket,
            session_ticket_handler=self._store_ticket,
        )
        cids = {header.destination_cid, quic.host_cid}

        def issued(cid: bytes) -> None:
            cids.add(cid)
            self._by_cid[cid] = conn

        def retired(cid: bytes) -> None:
            cids.discard(cid)
            self._by_cid.pop(cid, None)

        async def send(payload: bytes, to: NetworkAddress) -> None:
            await sock.sendto(payload, to)

        conn: H3ServerConnection = H3ServerConnection(
            quic,
            send=send,
            connection_id=self._next_connection_id(),
            recorder=self._recorder,
            timeouts=self._timeouts,
            cid_issued=issued,
            cid_retired=retired,
        )
        for cid in cids:
            self._by_cid[cid] = conn
        nursery.start_soon(self._run, conn, cids)
        conn.deliver(data, addr)

    async def _run(self, conn: H3ServerConnection, cids: set[bytes]) -> None:
        try:
            await conn.run()
        finally:
            for cid in cids:
                if self._by_cid.get(cid) is conn:
                    del self._by_cid[cid]
