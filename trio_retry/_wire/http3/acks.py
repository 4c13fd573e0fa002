"""When the connection's task sends the acknowledgements QUIC owes: held back for the next
request to carry, or gathered into fewer during a download.

One job, two questions the driver's task (``driver.py``) asks at the end of each round:
:func:`hold_until`, whether its next round sends nothing at once and waits instead, at most
until the time it returns, for a caller's request to carry the acknowledgement QUIC owes; and
:meth:`BulkReads.next_read`, whether it leaves the socket unread for a moment during a
download (below, "During a download").

Why: over qh3, a packet that ends a stream (a response's last, with its FIN) makes the
acknowledgement due at once (qh3's core expedites it), and the task, whose round follows that
packet at once, sent it in a datagram of its own; the caller, woken by that very response,
handed its next request a moment later (in the next turn of the scheduler), which went in
another datagram. One datagram of two per sequential request was that acknowledgement, and a
``sendto`` on loopback (the kernel delivers it to the server there and then) cost as much as
the rest of the task's round. Over aioquic the acknowledgement waits aioquic's own delay
(1 ms) and a flush makes it ride with the request (``shims.CheckedQuicConnection
.acknowledge_with_next``): nothing to hold there.

What allows it: RFC 9000 §13.2.1 asks for 1-RTT packets to be acknowledged within the
``max_ack_delay`` the client announced (qh3's: 25 ms); only Initial and Handshake packets are
acknowledged at once, and §13.2.2's "after two ack-eliciting packets" concerns a sender that
keeps sending (a download, which never meets the conditions below). The hold is
``clock.FIXED.ack_hold`` (1 ms, aioquic's own delay), far inside that bound, and the
acknowledgement's ACK Delay field says how long it waited, so the server's RTT estimate is
unharmed (§13.2.5).

Held only when all of these hold (each one a case where holding would cost more than it saves):

- a response ended in the round (a stream's last byte arrived): its caller may send its next
  request at once; a round that brought only part of a response has a sender waiting on the
  acknowledgement (its congestion window), which is not held;
- the round was not kicked and nothing a caller's flush left waits to go (a caller's bytes,
  a reset, a close, a PING go at once);
- QUIC owes nothing but that acknowledgement, as far as it says
  (``CheckedQuicConnection.owes_only_an_ack``: over qh3, its core's next timer is the 1-RTT
  acknowledgement's, due, and no stream byte is queued; over aioquic, never).

Then a request flushed during the wait carries it (``DatagramPump.send_now``: one datagram
instead of two, and no round of the task); a caller that sends nothing within the hold gets
it sent alone when the wait ends, as before; a datagram arriving during the wait ends it, and
that round decides afresh (a hold never extends itself).

Rejected: polling QUIC and keeping the acknowledgement's packet to send later (it would still
be a datagram of its own: QUIC cannot add a request to a packet already written); handing qh3
an earlier ``now`` so that the acknowledgement is not due yet (every other time it keeps, RTT
samples and loss detection, would be wrong).

During a download
-----------------

QUIC acknowledges what each round of the task took, in one ACK (qh3 makes it due at once, or
within 1 ms: RFC 9000 §13.2.2's "SHOULD" of an ACK every second packet), and the task read the
socket as soon as it was readable: a client faster than its server woke for every few
datagrams, and each round (trio's wake-up, QUIC's events, the caller's chunk, a ``sendto`` of
the ACK that the server must receive, decrypt and process) cost more than the datagrams it
took. A 20 MB download from caddy took 45 rounds and sent 35 ACKs per MB. So once a download
is under way, a round that took few datagrams (fewer than :data:`FEW`), all of them the
response's body in order, is followed by
:attr:`~trio_retry._wire.clock.FixedLimits.ack_coalesce` (1 ms) without reading: the next
round takes what arrived meanwhile, and acknowledges it at once, in one ACK. Measured against
caddy on loopback (``python -m benchmarks.http3 --datagrams``, docs/benchmarks.md): 9 rounds
and 8 ACKs per MB instead of 45 and 35, 43 % less client CPU per MB, and 7 % less of caddy's.
(Chromium acknowledges every tenth packet once a hundred arrived, for the same reason.)

How far that departs from RFC 9000, and why it may: an ACK of 1-RTT packets may wait
``max_ack_delay`` (25 ms, announced by both QUIC libraries, §13.2.1); this one waits 1 ms
at most beyond the round, so every ACK still goes well within that bound, and more than two
packets go unacknowledged only while more keep arriving: §13.2.2's SHOULD is departed from, as
its own text foresees ("further research and experimentation might suggest alternative
acknowledgment strategies"), and as the ACK frequency extension does by agreement. The
server's RTT samples grow by that wait at most: 1 ms, a fraction of any path but loopback's.
Never:

- over aioquic, which delays each ACK by itself (1 ms, ``shims.CheckedQuicConnection
  .delays_acks``): its ACKs are already about 9 per MB, and the wait only delayed them further
  (a 20 MB download from caddy at 43 MB/s with it, 75 without, 5 alternated runs each);
- before :data:`BULK_AFTER` bytes of body arrived in order since the last response ended or the
  last hole (the first ~100 packets: slow start grows on each ACK);
- after a round whose datagrams were not mostly body bytes delivered in order (less than
  half): a packet lost or out of order leaves bytes waiting behind a hole (the server learns
  of it by the next ACK, sent at once: §13.2.1's "immediately" for out-of-order packets), or
  the server sends something other than the body (acknowledgements of an upload, control);
  the count starts again;
- after a round in which a response ended (:func:`hold_until`'s case), or that was kicked
  (a caller has something to send);
- after a round that took :data:`FEW` datagrams or more (the client is behind: it reads again
  at once), or none (a timer's round).

What waits meanwhile is bounded: the socket's receive buffer (``udp.py`` asks for
:data:`~trio_retry._wire.http3.udp.RECEIVE_BUFFER`, within the kernel's cap) holds 1 ms of a
gigabit path several times over; flow control bounds what the server may send at all.

Rejected: holding the ACK QUIC makes of each round and reading on as before (the rounds, not
the ACKs, were most of the client's cost); a wait of a fraction of the RTT (on loopback that is
a few microseconds: no gain where the cost is highest); a count of packets between ACKs asked
of QUIC (qh3 has no such setting).
"""

from __future__ import annotations

from typing import Protocol

from ..clock import FIXED

__all__ = ["BULK_AFTER", "FEW", "AckOwner", "BulkReads", "hold_until"]

#: Body bytes a download receives in order before its rounds are spaced out (the first ~100
#: packets, acknowledged as they arrive).
BULK_AFTER = 128 * 1024
#: A round that took this many datagrams or more is followed by a read at once.
FEW = 32


class AckOwner(Protocol):
    """What :func:`hold_until` asks of QUIC (``shims.CheckedQuicConnection``, over either
    library)."""

    def owes_only_an_ack(self, now: float) -> bool: ...


def hold_until(
    quic: AckOwner, now: float, *, answered: bool, kicked: bool, leftovers: bool
) -> float | None:
    """The time until which the task's next round sends nothing at once (the module
    docstring), or ``None``: it sends what QUIC has now. ``answered``: a response ended in the
    round that just ended at ``now``; ``kicked``: the task was kicked since its last send;
    ``leftovers``: a caller's flush left datagrams for the task. Never raises: a QUIC that
    cannot say means nothing is held."""
    hold = FIXED.ack_hold
    if not answered or kicked or leftovers or hold <= 0:
        return None
    try:
        if not quic.owes_only_an_ack(now):
            return None
    except Exception:
        return None
    return now + hold


class BulkReads:
    """Whether the task's next read waits (the module docstring, "During a download"): one
    per connection, asked once per round. Keeps one count: the body bytes received in order
    since the last response ended or the last hole."""

    __slots__ = ("_run",)

    def __init__(self) -> None:
        self._run = 0

    def next_read(
        self,
        now: float,
        *,
        datagrams: int,
        size: int,
        delivered: int,
        answered: bool,
        kicked: bool,
    ) -> float | None:
        """The time before which the task does not read the socket again (it still wakes for
        a kick or QUIC's timer), or ``None``: it reads as soon as the socket is readable.
        ``datagrams`` and ``size``: what the round that ended at ``now`` took from the socket
        (count, bytes); ``delivered``: the body bytes it handed to callers, in order;
        ``answered``: a response ended in it; ``kicked``: the task was kicked since its last
        send. Never raises."""
        if answered or delivered * 2 < size:
            self._run = 0  # (a response ended, or a hole or something else than the body)
            return None
        self._run += delivered
        interval = FIXED.ack_coalesce
        if kicked or interval <= 0 or not 0 < datagrams < FEW or self._run < BULK_AFTER:
            return None
        return now + interval
