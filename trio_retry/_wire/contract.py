"""The connection contract: what the pool needs of every connection, and what every multiplexed
protocol (HTTP/2 in ``http2/``, HTTP/3 in ``http3/``) shares.

``exchange.py`` is the contract of one exchange (the request as the wire sees it, the response
and its body, framing, a transport error's evidence); this module is the contract of the
connection that carries exchanges, written once so that neither protocol package imports the
other (``tests/test_layers.py`` keeps it so):

- the connection interfaces (:class:`PooledConnection`, :class:`MultiplexedConnection`, an
  :data:`Opener`): what ``pool.py`` and ``_call/`` see of any protocol;
- the stream proof (:class:`Failure`): why a stream or its whole connection cannot go on, kept
  on the stream so that its *first* proof wins over what happens to the connection afterwards;
- the idle check (:class:`IdlePing`): the PING a connection that has been quiet must answer
  before it takes a new stream, and its limits (``clock.FIXED``);
- the dark-connection watch (:class:`DarkWatch`): a connection with requests waiting that
  receives nothing takes no new stream, is PINGed, and is closed when nothing answers;
- a request's field section (:func:`request_headers`): pseudo-headers first, the
  connection-specific fields left out (RFC 9113 §8.2.2, RFC 9114 §4.2);
- the words of the failures of a connection's opening and of its idle check
  (:func:`closed_while_connecting`, :func:`unanswered_ping`).

Each protocol keeps its own session of streams and the one task that owns its socket; it
implements the interfaces here and calls the rest.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import trio

from .._core.evidence import FailureCategory
from .clock import FIXED, bound, seconds
from .exchange import content_length
from .progress import AttemptProgress, WireError
from .timekeeper import Lane, Timekeeper

if TYPE_CHECKING:
    from .exchange import WireRequest, WireResponse

__all__ = [
    "CONNECTION_SPECIFIC",
    "DarkPeer",
    "DarkWatch",
    "Failure",
    "IdlePing",
    "MultiplexedConnection",
    "Opener",
    "PingPeer",
    "PooledConnection",
    "closed_while_connecting",
    "gave_up",
    "interrupted",
    "request_headers",
    "unanswered_ping",
]


# --- the connection interfaces ----------------------------------------------------------------


class PooledConnection(Protocol):
    """What the pool needs of a connection (HTTP/1.1, HTTP/2 or HTTP/3)."""

    @property
    def origin_key(self) -> object: ...
    @property
    def multiplexed(self) -> bool: ...
    @property
    def closed(self) -> bool: ...

    expires_at: float

    def is_available(self) -> bool: ...
    def is_reusable(self) -> bool: ...
    def peer_closed(self) -> bool: ...
    def close(self) -> None: ...
    def attempt_expired(self, progress: AttemptProgress) -> None:
        """The call deadline of the attempt ``progress`` belongs to passed (the client's
        deadline lane): end that attempt's waits at once, and only its. Must not raise or
        block."""

    async def send_request(self, request: WireRequest, progress: AttemptProgress) -> WireResponse:
        """Write ``request`` and read up to its final response head, each wait within the
        bounds of the client's timekeeper (``clock.py``). Raises ``WireError``."""


class MultiplexedConnection(PooledConnection, Protocol):
    """What the pool needs in addition of a connection whose ``multiplexed`` is true.

    ``is_available()`` is false once the connection is closed or received GOAWAY;
    ``stream_limit`` is the server's limit on concurrent request streams (HTTP/2's
    ``SETTINGS_MAX_CONCURRENT_STREAMS``, QUIC's ``MAX_STREAMS``): the pool lends at most that
    many streams at once.

    Optional (read with ``getattr``, so HTTP/2's connection needs neither): ``per_origin``, at
    most that many such connections per origin (HTTP/3: 1, RFC 9114 §3.3; the pool then
    queues a burst past ``stream_limit`` for this connection's streams), and with it
    ``on_draining``, set by the pool and called once by the connection at its GOAWAY (it then
    drains outside the pool's counts, and its successor may open).
    """

    on_retired: Callable[[], None] | None
    #: Told when the connection takes streams again after a silence made it suspect
    #: (:class:`DarkWatch`); set by the pool, which then serves its waiters on it.
    on_available: Callable[[], None] | None
    #: Streams the connection may take in all, set by the pool from what the origin allowed
    #: before a rotation (``None``: no limit known); ``is_available()`` honours it.
    request_limit: int | None
    #: Set by the connection when a rotation GOAWAY refused streams: how many it was allowed.
    accepted_streams: int | None

    @property
    def stream_limit(self) -> int: ...


#: Opens one connection to the origin; stages and timings go to the progress it is given.
Opener = Callable[[AttemptProgress], Awaitable[PooledConnection]]


# --- the stream proof -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a stream (or the whole connection) cannot go on; turned into a :class:`WireError`
    by the stream's own task, with the stage *that* task's progress reached.

    A stream keeps the first one it is given (each protocol's stream says so in its one
    ``fail``): a stream proven ``NOT_SENT`` by the server (HTTP/2's ``REFUSED_STREAM``, HTTP/3's
    ``H3_REQUEST_REJECTED``, a stream above a GOAWAY's id) stays so whatever the connection
    does afterwards (an EOF, a reset, a write error, a close). The proof is the server's word
    about this stream; the connection's later death is not evidence about it.
    """

    category: FailureCategory
    message: str
    #: The server proved that it did not process the request.
    not_sent: bool = False
    #: Proven NOT_SENT for a reason of the connection, not of the request (a routine GOAWAY
    #: rotation): the client may send it again on a fresh connection without counting it.
    reconnect: bool = False
    #: The one reconnect without that proof: the QUIC handshake failed (or ran past its
    #: limit) after the request went in its early data, which stays ``"unconfirmed"`` and
    #: ``SENT_NO_RESPONSE``; it goes over TCP uncounted all the same (the engine's essay,
    #: ``_core/engine.py``, says why).
    unconfirmed_early: bool = False

    def error(self, progress: AttemptProgress) -> WireError:
        """This failure as the attempt's error, with the evidence of its proof (or, without
        one, of the stage ``progress`` reached)."""
        if self.not_sent:
            progress.proven_not_sent = True
        return WireError.at(
            progress,
            self.category,
            self.message,
            reconnect=(self.reconnect and self.not_sent) or self.unconfirmed_early,
        )


def interrupted(progress: AttemptProgress) -> WireError:
    """A bound of the attempt ran out while it waited on the connection (the client's timekeeper
    ended that attempt's waits, ``progress.interrupted``); the bound, or the attempt for its
    deadline, reports it as that timeout."""
    return WireError.at(progress, FailureCategory.TIMEOUT, "a timeout of the attempt ran out")


# --- the idle check ---------------------------------------------------------------------------


class PingPeer(Protocol):
    """What :meth:`IdlePing.check` asks of a multiplexed connection (its session)."""

    @property
    def closed(self) -> bool: ...

    def send_ping(self, uid: int) -> None:
        """Queue a PING (carrying ``uid`` where the protocol lets it) and have it sent; its
        answer is reported to :meth:`IdlePing.answer`. Never blocks."""

    async def ping_wait(self) -> None:
        """Until something may have changed for a waiting check: a PING answered, the
        connection's end, the attempt interrupted."""

    def ping_unanswered(self, message: str) -> None:
        """Close the connection: its peer did not answer a PING in time (``message`` says so).
        Safe when it is closed already."""


class IdlePing:
    """The idle check of one multiplexed connection: before a new stream goes on a connection
    that has received nothing for :attr:`after` seconds (and has no stream open), a PING must
    be answered within :attr:`timeout`; a connection that does not answer is closed and the
    request goes on a fresh one (``reconnect``), instead of timing out ambiguously on a dead
    peer (as Go's ``ReadIdleTimeout`` / ``PingTimeout``).

    The connection's reader sets :attr:`last_received` on every read and reports answers
    (:meth:`answer`); its request path asks :meth:`due`, then awaits :meth:`check`.
    Concurrent checks share one PING.
    """

    __slots__ = ("after", "answered", "last_received", "sent", "timeout")

    def __init__(
        self,
        now: float,
        *,
        after: float | None = FIXED.ping_after_idle,
        timeout: float = FIXED.ping_timeout,
    ) -> None:
        #: Seconds of silence after which a new stream waits for a PING (``None``: never).
        self.after = after
        self.timeout = timeout
        #: When the connection last received anything (the run's clock).
        self.last_received = now
        self.sent = 0  # PINGs sent, numbered from 1
        self.answered = 0  # the highest answered

    def due(self, now: float) -> bool:
        """Whether a new stream must wait for a PING's answer first (the caller checks that no
        stream is open)."""
        after = self.after
        return after is not None and now - self.last_received >= after

    def answer(self, uid: int | None = None) -> None:
        """A PING's answer arrived: ``uid`` and every PING before it are answered (``None``:
        every PING sent, for a protocol whose PINGs carry no number)."""
        answered = self.sent if uid is None else min(uid, self.sent)
        if answered > self.answered:
            self.answered = answered

    async def check(self, peer: PingPeer, progress: AttemptProgress, protocol: str) -> None:
        """PING the idle connection ``peer`` (unless a PING is unanswered already) and wait for
        its answer within :attr:`timeout`. Returns once it is answered; otherwise closes the
        connection and raises :func:`unanswered_ping` (``NOT_SENT``, ``reconnect``: nothing of
        the request exists yet). An attempt interrupted meanwhile raises :func:`interrupted`.
        On cancellation the PING stays sent and the connection open; a later check waits for
        the same answer."""
        if self.sent == self.answered:
            self.sent += 1
            peer.send_ping(self.sent)
        wanted = self.sent
        waiting = bound("ping", None, progress=progress, limit=self.timeout)
        try:
            with waiting:
                while self.answered < wanted and not peer.closed:
                    if progress.interrupted:
                        raise interrupted(progress)
                    await peer.ping_wait()
        except WireError:
            if not waiting.expired:
                raise
        if self.answered >= wanted:
            return
        peer.ping_unanswered(
            f"the idle connection did not answer a PING within {seconds(self.timeout)}"
        )
        raise unanswered_ping(progress, protocol, self.timeout)


class DarkPeer(Protocol):
    """What :class:`DarkWatch` asks of a multiplexed connection (its session, or its driver)."""

    @property
    def closed(self) -> bool: ...

    @property
    def timekeeper(self) -> Timekeeper | None:
        """The client's timekeeper, whose lanes keep the watch (``None``: no watch)."""

    def busy(self) -> bool:
        """Whether a request waits for what the peer sends, with none of our own bytes waiting
        to be written (while they wait, the write bound says when to give up)."""

    def send_ping(self, uid: int) -> None:
        """Queue a PING and have it sent. Never blocks."""

    def gone_dark(self, message: str) -> None:
        """Close the connection, ``message`` saying why: its streams fail with the evidence
        each has (one whose request never left is ``NOT_SENT``). Never blocks."""


class DarkWatch:
    """The dark-connection watch of one multiplexed connection (Go's ``ReadIdleTimeout`` and
    ``PingTimeout``): a connection with a request waiting (:meth:`DarkPeer.busy`) that received
    nothing for ``FIXED.read_idle`` seconds takes no new stream (:attr:`suspect`: its
    ``is_available()`` is false, and a request handed it just before opens no stream on it:
    ``NOT_SENT``) and is PINGed; anything received (the answer, or any frame or packet) lifts
    that; nothing within ``FIXED.read_idle_ping`` more closes it (:meth:`DarkPeer.gone_dark`).
    Without it a connection whose path went dark (a partition, a middlebox that forgot the
    flow, a peer gone without a word) keeps taking requests until each times out, every one of
    them ambiguous.

    The connection's reader arms the watch when it starts waiting for bytes (:meth:`waiting`)
    and disarms it when they come (:meth:`received`): a dict store and a dict pop on a lane of
    the client's timekeeper (``Timekeeper.dark``), which expires it (:meth:`expire`), no cancel
    scope per read. A connection made without a running timekeeper has no watch.

    Silence alone proves nothing while nobody waits (an idle pooled connection: the idle check,
    :class:`IdlePing`, PINGs it before its next stream), nor while our own bytes wait to be
    written: a PING queued behind them could not be answered before the peer reads them, and
    a slow reader is the write bound's to judge, from its progress.
    """

    __slots__ = ("_armed", "_peer", "on_lifted", "suspect")

    def __init__(self, peer: DarkPeer) -> None:
        self._peer = peer
        self._armed: Lane | None = None  # the lane this watch is on, if any
        #: Silent with a request waiting, PINGed: takes no new stream until something arrives.
        self.suspect = False
        #: Told when a suspicion is lifted (the connection's ``on_available``, the pool's).
        self.on_lifted: Callable[[], None] | None = None

    def waiting(self) -> None:
        """The reader starts waiting for bytes: from now, ``read_idle`` seconds of silence
        make the connection suspect."""
        if self._armed is not None:
            return
        timekeeper = self._peer.timekeeper
        if timekeeper is not None and timekeeper.running:
            self._arm(timekeeper.dark[0])

    def received(self) -> None:
        """Bytes arrived: the peer is there (a suspicion is lifted, and ``on_lifted`` told)."""
        self.stop()
        if self.suspect:
            self.suspect = False
            lifted = self.on_lifted
            if lifted is not None:
                lifted()

    def stop(self) -> None:
        """Off its lane (the connection is over, or it heard from the peer)."""
        lane = self._armed
        if lane is not None:
            self._armed = None
            lane.pending.pop(self, None)

    def expire(self) -> None:
        """A lane ran out (the timekeeper's task calls this: it never blocks)."""
        lane, self._armed = self._armed, None
        peer = self._peer
        timekeeper = peer.timekeeper
        if lane is None or timekeeper is None or peer.closed:
            return
        silence, answer = timekeeper.dark
        if lane is silence:
            if peer.busy():
                self.suspect = True
                peer.send_ping(0)
                self._arm(answer)
            else:
                self._arm(silence)  # nothing to tell yet: watch on
            return
        peer.gone_dark(
            f"the connection went dark: nothing received for {silence.limit + answer.limit:g} s, "
            f"not even the answer to a PING sent after {silence.limit:g} s"
        )

    def doubt(self) -> None:
        """A request gave up waiting for its answer (a timeout, a cancellation: :func:`gave_up`)
        with nothing received on the connection since it was sent: as telling as the
        ``read_idle`` silence, so the same follows at once: the connection takes no new stream
        (:attr:`suspect`) and is PINGed; anything received lifts that, nothing within
        ``FIXED.read_idle_ping`` closes it. Without it, the request's retry or a reconciler's
        look-up went on the same connection and waited in the same silence. Never blocks."""
        peer = self._peer
        timekeeper = peer.timekeeper
        if self.suspect or peer.closed or timekeeper is None or not timekeeper.running:
            return
        self.stop()
        self.suspect = True
        peer.send_ping(0)
        self._arm(timekeeper.dark[1])

    def _arm(self, lane: Lane) -> None:
        self._armed = lane
        lane.pending[self] = lane.now() + lane.limit


def gave_up(exc: BaseException) -> bool:
    """Whether a wait ended because the client stopped waiting (a timeout of its own, or a
    cancellation), not because the connection said something."""
    return isinstance(exc, trio.Cancelled) or (
        isinstance(exc, WireError) and exc.category is FailureCategory.TIMEOUT
    )


def unanswered_ping(progress: AttemptProgress, protocol: str, limit: float) -> WireError:
    """The failure of an idle connection's check (a ``protocol`` PING not answered within
    ``limit`` seconds): the request was not sent, and goes on a fresh connection
    (``reconnect``)."""
    return WireError.at(
        progress,
        FailureCategory.CONNECTION_BROKEN,
        f"the idle {protocol} connection did not answer a PING within {seconds(limit)}; "
        "nothing of the request was sent",
        reconnect=True,
    )


def closed_while_connecting(progress: AttemptProgress) -> WireError:
    """The failure of an opening whose connection task could not start: the client's nursery
    is closing (so is the client). Nothing of a request exists yet."""
    return WireError.at(progress, FailureCategory.ADMISSION, "the client closed while connecting")


# --- a request's field section ----------------------------------------------------------------

#: Connection-specific fields, forbidden in HTTP/2 and HTTP/3 (RFC 9113 §8.2.2, RFC 9114 §4.2).
CONNECTION_SPECIFIC = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade"}
)
#: Request fields not forwarded as such: the connection-specific ones, and ``host``, which
#: becomes ``:authority``.
_NOT_FORWARDED = CONNECTION_SPECIFIC | {b"host"}
#: Fields kept out of the header compression's tables when the protocol can say so.
_NEVER_INDEXED = frozenset({b"authorization", b"proxy-authorization"})


def _as_is(name: bytes, value: bytes) -> tuple[bytes, bytes]:
    return (name, value)


def request_headers(
    request: WireRequest,
    *,
    scheme: bytes,
    authority: bytes,
    sensitive: Callable[[bytes, bytes], tuple[bytes, bytes]] = _as_is,
) -> list[tuple[bytes, bytes]]:
    """The request's field section for HTTP/2 or HTTP/3: pseudo-headers first, then the fields
    (lower case, the connection-specific ones and ``host`` left out, ``TE`` only as
    ``trailers``), with a ``content-length`` when the body's length is known.

    ``sensitive`` makes the field of a credential (``authorization``, ``proxy-authorization``,
    a short ``cookie``), given its name and value: HTTP/2 passes HPACK's never-indexed tuple,
    which keeps it out of the compression tables (RFC 7541 §7.1.3), as h2's own normalisation
    does, so that a compression oracle cannot guess it byte by byte.

    Made once per request value for a scheme, authority and ``sensitive`` (a template's calls
    share their ``WireRequest``, which is never changed: ``request.fields``); each call gets a
    list of its own."""
    kept = request.fields
    if kept is not None and kept[0] == scheme and kept[1] == authority and kept[2] is sensitive:
        return list(kept[3])
    section = _field_section(request, scheme, authority, sensitive)
    request.fields = (scheme, authority, sensitive, section)
    return list(section)


def _field_section(
    request: WireRequest,
    scheme: bytes,
    authority: bytes,
    sensitive: Callable[[bytes, bytes], tuple[bytes, bytes]],
) -> list[tuple[bytes, bytes]]:
    fields: list[tuple[bytes, bytes]] = []
    has_length = False
    given = authority
    for name, value in request.headers:
        lower = name.lower()
        if lower in _NOT_FORWARDED:
            if lower == b"host" and authority is given:  # the first Host wins
                authority = value
            continue
        if lower == b"te" and value.strip().lower() != b"trailers":
            continue  # TE may only say "trailers"
        has_length = has_length or lower == b"content-length"
        if lower in _NEVER_INDEXED or (lower == b"cookie" and len(value) < 20):
            fields.append(sensitive(lower, value))
        else:
            fields.append((lower, value))
    if not has_length:
        length = content_length(request)
        if length is not None:
            fields.append((b"content-length", length))
    return [
        (b":method", request.method.encode("ascii")),
        (b":scheme", scheme),
        (b":authority", authority),
        (b":path", request.target.encode("ascii")),
        *fields,
    ]
