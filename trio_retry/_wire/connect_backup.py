"""A connect to one address, and its backup when its SYN has no answer (:func:`backed_up`).

``transport.py`` resolves and races several addresses (happy eyeballs); with one address it
connects through here: the same delay (``FIXED.happy_eyeballs``), a second connect to the same
address instead of the next address. Each connect is started and finished as every connect is
(``rawsock.start_connect``, then ``rawsock.answered`` or ``rawsock.finish_connect``); only the
wait between is this module's.
"""

from __future__ import annotations

import os
import socket as _stdlib_socket
import sys
from typing import Any

import trio
from trio.lowlevel import cancel_shielded_checkpoint, checkpoint_if_cancelled

from .clock import FIXED, wait_for, writable_within
from .rawsock import Sockets, answered, connect_socket, finish_connect, start_connect

if sys.version_info < (3, 11):  # builtin from 3.11; trio itself needs the backport on 3.10
    from exceptiongroup import ExceptionGroup

__all__ = ["Sockets", "backed_up", "why"]


def why(exc: OSError) -> str:
    """The reason alone (trio's connect, a custom socket factory's, repeats the address in its
    ``strerror``)."""
    return os.strerror(exc.errno) if exc.errno is not None else str(exc)


async def backed_up(family: int, type_: int, proto: int, sockaddr: Any) -> Sockets:
    """A connect to one address, with a backup: when the first attempt has had no answer
    (neither connected nor refused) after ``FIXED.happy_eyeballs``, a second connect to the
    same address starts beside it; the first to connect wins, the other is closed.

    Why: a lost SYN is retransmitted by the kernel only after its initial RTO (1 s on Linux,
    then 2 s, 4 s), so on a lossy path, or just after a partition heals, the first attempt
    would sit a second or more on a SYN that is gone while a fresh one connects in a round
    trip. One backup, as browsers do (Chromium's backup connect job, 250 ms), not a new SYN
    every interval: each would be one more half-open connection on the server, and the
    kernel already retransmits. An attempt refused (or unreachable) before the delay has its
    answer: its error is raised and no backup is tried (a second refusal would tell nothing
    more; the call's retry rules decide what comes next). When both fail, the error names both.

    The delay is judged by the kernel, not by a task: when it falls due, the backup starts
    only if the first socket is still not connected (``getpeername``). A loop too busy to run
    the first attempt's task in time (thousands of connects at once) does not take its own
    lateness for a lost SYN and double every connect.

    What it costs: the connect is made on the stdlib socket as ``rawsock.connect_socket``
    makes it (``rawsock.start_connect``), then given one round of the scheduler; answered
    by then (loopback, a LAN: ``getpeername``), it is taken as it is (``rawsock.answered``),
    with no wait for its socket at all. Only a connect still unanswered waits, up to the delay,
    under one cancel scope (``clock.writable_within``), and only one still unanswered after
    the delay gets the race's nursery, its tasks and the backup's socket (:class:`_Backup`),
    as does a socket from a custom Trio socket factory (connected by its own ``connect``, in
    the race from the start). (The obvious way, ``rawsock.finish_connect``'s wait under the
    delay's scope for every connect, held a cancel scope, its status and deadline entry and
    trio's wait for the socket, twenty objects, for each of thousands of connects at once,
    and registered each socket with epoll twice: issue #41.)

    The alternatives rejected: a shorter SYN retransmission timer (``rto_min`` per route and
    ``tcp_syn_retries`` are the system's settings, not a client's, and Linux has no
    per-socket initial RTO); racing the same address from the start (twice the SYNs on every
    healthy network).

    Nothing here sends a request byte: every failure stays ``NOT_SENT`` at ``CONNECT``. On
    cancellation both sockets are closed.
    """
    raw, pending = start_connect(family, type_, proto, sockaddr)
    if raw is None:  # a custom socket factory's socket
        return await _Backup(family, type_, proto, sockaddr).race(None, waited=False)
    if not pending:  # connected within the call
        return await finish_connect(raw, False)  # (a schedule point)
    try:
        # One round of the scheduler first: a handshake over loopback (or a LAN) is answered
        # by then, and such a connect never waits for its socket (no scope, no epoll
        # registration, one schedule point; issue #41: at 10,000 connects at once, the wait
        # was the largest thing each call held). The backup's delay counts from this look.
        await cancel_shielded_checkpoint()
        if _connected(raw):
            await checkpoint_if_cancelled()  # (with the round above: a checkpoint)
        elif not await writable_within(raw, FIXED.happy_eyeballs) and not _connected(raw):
            return await _Backup(family, type_, proto, sockaddr).race(raw, waited=True)
    except BaseException:
        raw.close()
        raise
    return answered(raw)  # the handshake's answer: connected, or its error (raw closed)


def _connected(raw: _stdlib_socket.socket) -> bool:
    """Whether the kernel has completed ``raw``'s connect (its task may not have run yet)."""
    try:
        raw.getpeername()
    except OSError:
        return False
    return True


class _Backup:
    """A connect still unanswered and its backup (:func:`backed_up`). (Methods, not a
    closure: a connecting call's coroutines hold no cells, issue #41.)"""

    __slots__ = ("errors", "family", "proto", "sockaddr", "type_", "won")

    def __init__(self, family: int, type_: int, proto: int, sockaddr: Any) -> None:
        self.family, self.type_, self.proto, self.sockaddr = family, type_, proto, sockaddr
        self.won: Sockets | None = None
        self.errors: list[OSError] = []

    async def race(self, first: _stdlib_socket.socket | None, *, waited: bool) -> Sockets:
        """Go on with the first connect (``first``, its connect started and the delay spent
        when ``waited``; ``None``: a custom factory's socket, connected by its own task) and
        start the backup when the delay has passed without an answer. ``first`` is closed
        on every way out but its winning."""
        async with trio.open_nursery() as nursery:
            answered = trio.Event()
            nursery.start_soon(self.attempt, first, answered, nursery)
            if (waited or not await wait_for(answered, FIXED.happy_eyeballs)) and not (
                self.won is not None or (first is not None and _connected(first))
            ):
                nursery.start_soon(self.attempt, None, trio.Event(), nursery)
        if self.won is not None:
            return self.won
        if len(self.errors) == 1:
            raise self.errors[0]
        one, backup = self.errors
        message = f"{why(one)} (and its backup attempt: {why(backup)})"
        raise OSError(one.errno, message) from ExceptionGroup(message, self.errors)

    async def attempt(
        self, raw: _stdlib_socket.socket | None, answered: trio.Event, nursery: trio.Nursery
    ) -> None:
        """One connect: the answer to ``raw``'s (``rawsock.finish_connect``), else a new
        socket's (``rawsock.connect_socket``: its way, or a custom factory's); the first to
        connect cancels the other. Never raises ``OSError``: it is kept in :attr:`errors`. On
        any failure (cancellation too) its socket is closed."""
        try:
            if raw is None:
                sockets = await connect_socket(self.family, self.type_, self.proto, self.sockaddr)
            else:
                sockets = await finish_connect(raw, True)  # (it closes raw if it fails)
        except OSError as exc:
            self.errors.append(exc)
            answered.set()
            return
        if self.won is not None:  # both connected in one scheduling round: keep the first
            sockets[0].close()
            return
        self.won = sockets
        nursery.cancel_scope.cancel()
