"""When the connection's task holds QUIC's acknowledgement back for the next request to carry.

One job: :func:`hold_until`, asked by the driver's task (``driver.py``) at the end of each
round: whether its next round sends nothing at once and waits instead, at most until the time
it returns, for a caller's request to carry the acknowledgement QUIC owes.

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
"""

from __future__ import annotations

from typing import Protocol

from ..clock import FIXED

__all__ = ["AckOwner", "hold_until"]


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
