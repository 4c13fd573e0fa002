"""A QUIC handshake still going on, as the requests waiting on it see it (SPEC §16): when it
runs out, which requests were handed over during it, which of those went in its early data
(0-RTT), and what its end means for each.

Its limit is ``min(tls, 3 s)`` (``clock.FIXED.quic_handshake``), counted from the start of the
connection's task, which keeps it (``driver.py``): the connection's, not one request's, so
every request waiting on the handshake, early or not, whenever it joined, ends its wait then
and goes over TCP; the connection takes no new request, and its handshake goes on in the
background (the connector keeps it, the origin *pending*: ``_call/connect.py``).

A request opened during the handshake is *handed over* early; it *went* early only if QUIC
wrote its bytes into 0-RTT packets before the handshake ended (``shims.CheckedQuicConnection``
tells which packets carry stream bytes, and how many of a stream's bytes are in packets). The
obvious rule, "opened during the handshake, so early", was wrong for every request QUIC held
back (its congestion window, pacing) until the 1-RTT key was installed: the server received
those in 1-RTT packets, and the client said ``"accepted"`` for them (issue #39: 40 claimed, 19
really early).

- While the handshake goes on, a request that went early is ``"unconfirmed"``: it may have
  run. When the handshake completes, it is ``"accepted"`` or ``"rejected"`` (the server's
  answer to all the connection's early data); a request that did not go early stays ``None``.
- When the handshake fails or runs past its limit, a request that went early keeps
  ``"unconfirmed"`` and the evidence of its stage (``SENT_NO_RESPONSE``: the packets left); one
  whose bytes never left in a packet is ``NOT_SENT``. Both go over TCP within the same attempt
  (``contract.Failure``; the engine's essay says why the first does too). A handshake that
  completes after its limit carries none of them: they went over TCP (and their streams were
  reset; the server may have run an early one too, which only a request whose replay is
  harmless risks).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from ..._core.evidence import FailureCategory
from ..clock import timeout_message
from ..contract import Failure

if TYPE_CHECKING:
    from .shims import CheckedQuicConnection
    from .stream import H3Stream

__all__ = ["PendingHandshake"]


class PendingHandshake:
    """One connection's handshake while it goes on; see the module docstring. Its requests
    are forgotten once it ended."""

    __slots__ = ("_on_slow", "due", "handed", "limit", "ran_out", "sent", "settled", "started")

    def __init__(self, limit: float, on_slow: Callable[[], None] | None = None) -> None:
        #: How long the handshake may take, and when it runs out (``math.inf`` until the
        #: connection's task starts, :meth:`start`, and again once it ended or ran out).
        self.limit = limit
        self.due = math.inf
        self.started = False
        #: The limit ran out before the handshake ended (it goes on, or was given up).
        self.ran_out = False
        #: Set when the handshake ended, or its limit ran out: what a request waits for.
        self.settled = trio.Event()
        #: Told if the limit runs out first: the connector keeps the handshake going.
        self._on_slow = on_slow
        #: Streams opened during the handshake, by id.
        self.handed: dict[int, H3Stream] = {}
        #: Those of them with bytes in 0-RTT packets.
        self.sent: dict[int, H3Stream] = {}

    def start(self, now: float) -> None:
        """The connection's task starts (its first flight goes out): the limit counts from
        ``now``."""
        self.started = True
        self.due = now + self.limit

    def overdue(self) -> str:
        """Why a handshake past its limit failed, in words."""
        return timeout_message("quic", self.limit)

    def opened(self, stream: H3Stream) -> None:
        """A stream was opened during the handshake: its request may go early."""
        self.handed[stream.stream_id] = stream

    def forget(self, stream_id: int) -> None:
        """The stream's caller is done with it."""
        self.handed.pop(stream_id, None)
        self.sent.pop(stream_id, None)

    def written(self, quic: CheckedQuicConnection) -> None:
        """QUIC has just written what it had into packets: a request handed over with bytes
        in packets now, while those packets are 0-RTT ones, went early (``"unconfirmed"``).
        Until the 1-RTT key is installed every stream byte in a packet is in a 0-RTT one;
        once it is, no byte goes in 0-RTT any more, and a request first written then was not
        early data, whenever it was handed over."""
        if not self.handed or not quic.sends_zero_rtt():
            return
        sent = self.sent
        for stream_id, stream in self.handed.items():
            if stream_id not in sent and quic.stream_written(stream_id) > 0:
                sent[stream_id] = stream
                stream.progress.early_data = "unconfirmed"

    def completed(self, accepted: bool) -> None:
        """The handshake completed: the server accepted the connection's early data, or not.
        Each request handed over, waiting for this, is woken."""
        word = "accepted" if accepted else "rejected"
        for stream in self.sent.values():
            stream.progress.early_data = word
        for stream in self.handed.values():
            stream.wake()
        self.ended()

    def failed(self, category: FailureCategory, words: str) -> None:
        """The handshake failed: each request handed over fails with it, with the evidence
        of what left (the module docstring)."""
        sent = self.sent
        for stream_id, stream in self.handed.items():
            if stream_id in sent:
                stream.fail(Failure(category, words, unconfirmed_early=True))
            else:
                stream.fail(Failure(category, words, not_sent=True, reconnect=True))
        self.ended()

    def run_out(self) -> bool:
        """The limit ran out, the handshake still going on: its requests fail as for a failed
        handshake (``TIMEOUT``), over TCP, and no new one may wait on it. Returns whether the
        handshake goes on (``on_slow`` was told: the origin pending); if not, the caller gives
        it up."""
        self.ran_out = True
        self.failed(
            FailureCategory.TIMEOUT, f"the QUIC handshake did not complete: {self.overdue()}"
        )
        slow, self._on_slow = self._on_slow, None
        if slow is None:
            return False
        slow()
        return True

    def ended(self) -> None:
        """The handshake is over for its requests (ended, or its limit ran out)."""
        self.handed.clear()
        self.sent.clear()
        self.due = math.inf
        self.settled.set()
