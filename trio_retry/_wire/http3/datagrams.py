"""QUIC's datagrams between aioquic and the UDP socket, both ways, in batches.

One job: :class:`DatagramPump`, one per connection, held by its driver (``driver.py``). It
hands QUIC every datagram the socket has queued, sends what QUIC has ready, each on the path
QUIC chose (``udp.py``), and judges an error the socket reports: one for the connection's path
(or, where the system does not say which, any) loses the connection; one for a path QUIC was
only probing (a server's preferred address) is QUIC's to give up. What those mean for the
connection (its streams, its handshake) is its owner's to decide (:class:`PumpOwner`): the
pump tells it and goes on, or stops, as it answers.

The socket is a non-blocking stdlib socket, read and written directly once trio says it is
ready: every datagram already received is taken in one round (up to :data:`BATCH`, read in
batches where the kernel coalesces them) and QUIC's events are handled once for all of them,
then what QUIC has to send (its acknowledgements of all of them) goes at once, in batches too.
The rejected alternative, ``trio.socket``, cost a checkpoint and a round of the driver's loop
per datagram: a 10 MB download ran at a twentieth of HTTP/2's speed, mostly in that loop.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Protocol

import trio

from ..clock import closing
from .acks import BulkReads, hold_until
from .codes import H3_NO_ERROR
from .udp import Address, UdpPaths, send_datagrams

if TYPE_CHECKING:
    from .shims import CheckedQuicConnection

__all__ = ["BATCH", "DatagramPump", "PumpOwner"]

#: Datagrams taken from the socket per round of the driver, at most (then QUIC acknowledges
#: them, and the next round takes more).
BATCH = 256


class PumpOwner(Protocol):
    """What the pump tells the connection that owns it (``driver.QuicDriver``)."""

    @property
    def closed(self) -> bool:
        """The connection is over: nothing more is sent."""

    def arrived(self, now: float) -> None:
        """Datagrams from the server were handed to QUIC at ``now``."""

    def lost(self, exc: OSError) -> None:
        """The socket failed on the connection's path (ICMP unreachable, typically)."""

    def unreadable(self, exc: Exception) -> None:
        """QUIC refused a datagram (``receive_datagram`` raised: the client's check refused
        the server, or aioquic failed on what arrived)."""


class DatagramPump:
    """Moves one connection's datagrams between its QUIC state machine and its UDP socket;
    see the module docstring.

    Guarantees: only the driver's task waits on the socket (:meth:`send`); a caller's task
    sends through :meth:`send_now`, which never waits, and what it could not send goes first
    in the task's next :meth:`send`, so QUIC's packets leave in the order QUIC wrote them.
    Cancelled in :meth:`send`, what was not sent is not (QUIC sends again what it must). An
    error the socket reports, and a datagram QUIC refuses, reach the owner
    (:class:`PumpOwner`), never the caller; only aioquic failing in :meth:`take` raises (the
    driver's task ends the connection on it, as on any bug).
    """

    __slots__ = (
        "_bulk",
        "_owner",
        "_unsent",
        "delivered",
        "hold",
        "paths",
        "quic",
        "read_at",
        "taken",
        "taken_bytes",
    )

    def __init__(self, paths: UdpPaths, quic: CheckedQuicConnection, owner: PumpOwner) -> None:
        #: The UDP socket (``udp.py``).
        self.paths = paths
        self.quic = quic
        self._owner = owner
        #: What :meth:`send_now` could not send (the task's :meth:`send` sends it first).
        self._unsent: list[tuple[bytes, Address]] = []
        #: The datagrams the last :meth:`receive` read, and their bytes; the body bytes the
        #: owner handed its callers since the last :meth:`pace` (it counts them here).
        self.taken = 0
        self.taken_bytes = 0
        self.delivered = 0
        #: Until when the task's next round sends nothing, holding QUIC's acknowledgement for a
        #: caller's request to carry (``None``: it sends at once), and before when it reads the
        #: socket again during a download (``math.inf``: as soon as it is readable); both
        #: decided by :meth:`pace` (``acks.py``).
        self.hold: float | None = None
        self.read_at = math.inf
        #: ``None`` over a QUIC that spaces its acknowledgements itself (aioquic).
        self._bulk = None if getattr(quic, "delays_acks", False) else BulkReads()

    def pace(self, now: float, *, answered: bool, kicked: bool, full: bool) -> None:
        """At the end of a round of the task: :attr:`hold` and :attr:`read_at` (``acks.py``:
        ``answered``, a response ended in the round; ``kicked``, the task was kicked; no hold
        while a flush's leftovers wait; no wait to read while ``full``, the callers' buffers
        are: the task's wait for room is never cut short to read more)."""
        unsent = bool(self._unsent)
        self.hold = hold_until(self.quic, now, answered=answered, kicked=kicked, leftovers=unsent)
        delivered, self.delivered = self.delivered, 0
        bulk = self._bulk
        if bulk is None:
            return
        read_at = bulk.next_read(
            now,
            datagrams=self.taken,
            size=self.taken_bytes,
            delivered=delivered,
            answered=answered,
            kicked=kicked,
        )
        self.read_at = math.inf if read_at is None or full else read_at

    def receive(self, now: float, woken: bool, room: int) -> None:
        """Hand QUIC every datagram queued (up to :data:`BATCH`, and no more once what was
        read reaches ``room`` bytes), those from one address in one call
        (``receive_datagrams``: qh3 takes them in one call of its core), telling the owner that
        they arrived, and of an error (after what was read before it). ``woken``: the wait
        before this ended by a kick or QUIC's timer, not because the socket is readable. What
        it read is counted in :attr:`taken` and :attr:`taken_bytes`.

        ``room``: what the callers' buffers may still take (``driver.BUFFER_LIMIT``); a
        datagram carries at most its own size of body, so a round delivers at most ``room``
        plus what the one read that crossed it returned (a datagram, one GRO buffer, or one
        ``recvmmsg``); with none (``room <= 0``) it reads nothing. Rejected: reading
        :data:`BATCH` whatever the room, which let one round deliver ~340 KB past the limit,
        and every round the timer woke while the buffers were full deliver as much again."""
        paths = self.paths
        taken: list[bytes] = []
        source: Address | None = None
        failed: OSError | None = None
        empty = False
        count = size = 0
        self.taken = self.taken_bytes = 0
        while count < BATCH and size < room:
            try:
                datagrams, address = paths.receive_many()
            except BlockingIOError:
                empty = not count and not woken
                break
            except OSError as exc:
                failed = exc
                break
            if taken and address != source:
                if not self._hand(taken, source, now):
                    return
                taken = []
            taken += datagrams
            count += len(datagrams)
            size += sum(map(len, datagrams))
            source = address
        self.taken, self.taken_bytes = count, size
        if taken and not self._hand(taken, source, now):
            return
        if failed is not None:
            self.bounced(failed)
        elif empty:
            self.bounced(None)  # readable with nothing to read: errors queued

    def _hand(self, datagrams: list[bytes], address: Address | None, now: float) -> bool:
        """Hand QUIC ``datagrams`` from ``address``; false if QUIC refused one (the owner was
        told: the client refused the server, or QUIC failed on what arrived)."""
        try:
            self.quic.receive_datagrams(datagrams, address, now)
        except Exception as exc:
            self._owner.unreadable(exc)
            return False
        self._owner.arrived(now)
        return True

    def take(self, now: float) -> list[tuple[bytes, Address]]:
        """What :meth:`send_now` left, then every datagram QUIC has ready (the caller notes
        what they carry before :meth:`send` sends them)."""
        unsent, self._unsent = self._unsent, []
        datagrams = self.quic.datagrams_to_send(now=now)
        return unsent + datagrams if unsent else datagrams

    async def send(self, datagrams: list[tuple[bytes, Address]]) -> None:
        """Send ``datagrams`` (from :meth:`take`) in order, each on its path, in batches,
        waiting for the socket only when it is full; an error is judged (:meth:`bounced`),
        and nothing more is sent once it ended the connection."""
        await send_datagrams(self.paths, datagrams, self._send_failed)

    def send_now(self) -> bool:
        """From a caller's task: send what QUIC has queued (a pending acknowledgement rides
        along, ``shims.CheckedQuicConnection.acknowledge_with_next``) without waiting. False
        if the task must send instead (the socket is full or reports an error, which the task
        judges; what was not sent is kept for it, in order), or aioquic failed (the task meets
        that too, and ends the connection). Never waits, never raises. While an earlier
        flush's leftovers wait for the task, False at once: nothing overtakes them, and they
        are never overwritten."""
        if self._unsent:
            return False
        now = trio.current_time()
        quic = self.quic
        try:
            quic.acknowledge_with_next(now)
            datagrams = quic.datagrams_to_send(now=now)
        except Exception:
            return False
        paths = self.paths
        index, total = 0, len(datagrams)
        while index < total:
            try:
                index += paths.send_many(datagrams, index)
            except OSError:
                self._unsent = datagrams[index:]
                return False
        return True

    async def last_words(self) -> None:
        """QUIC's CONNECTION_CLOSE (H3_NO_ERROR unless a close with a reason is already under
        way): at once, for a socket that takes it, or within ``clock.closing()``'s bound under
        a shield (the driver's task may be ending because the client's nursery was
        cancelled). A close that cannot be sent is the server's idle timeout, as without it;
        nothing is raised."""
        quic = self.quic
        try:
            quic.close(error_code=H3_NO_ERROR)  # (nothing if one is under way, or it is over)
            datagrams = quic.datagrams_to_send(now=trio.current_time())
        except Exception:
            return
        with closing():
            await send_datagrams(self.paths, datagrams, lambda exc: True)

    def bounced(self, exc: OSError | None) -> None:
        """The socket reported an error (``exc``), or has errors queued (``None``): an ICMP
        error for a datagram sent. One for the connection's path (or, where the system does
        not say which, any) is the owner's loss (:meth:`PumpOwner.lost`); one for a path QUIC
        was only probing is QUIC's to give up (``udp.py``)."""
        bounced = self.paths.refused()
        if bounced is None:
            if exc is not None:
                self._owner.lost(exc)
            return
        current = self.quic.get_peer_address()
        if any(address == current for address in bounced) or (exc is not None and not bounced):
            self._owner.lost(exc or ConnectionRefusedError("ICMP: the server's UDP port is closed"))

    def _send_failed(self, exc: OSError) -> bool:
        """A send failed: judged as :meth:`bounced` judges it; true if that ended the
        connection (nothing more is sent)."""
        self.bounced(exc)
        return self._owner.closed
