"""A connect whose SYN has no answer gets one backup connect to the same address
(``connect_backup.backed_up``), after ``FIXED.happy_eyeballs``; the first to connect wins.

Scripted sockets (a Trio custom socket factory) under ``MockClock`` pin the exact times and
what is opened and closed; real loopback sockets show it against the kernel: a listener whose
backlog is full drops SYNs as a lossy path does, and the kernel's own retransmission of the
first SYN comes only after a second.
"""

from __future__ import annotations

import errno
import math
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

import pytest
import trio
import trio.testing

import trio_retry
from trio_retry import Evidence, FailureCategory, Stage
from trio_retry._wire import connect_backup, rawsock
from trio_retry._wire.clock import FIXED
from trio_retry._wire.progress import AttemptProgress, WireError
from trio_retry._wire.transport import open_transport
from trio_retry.testing import FaultServer

if sys.version_info < (3, 11):
    from exceptiongroup import ExceptionGroup

NEVER = math.inf


@dataclass
class Plan:
    """One scripted socket's connect: after ``at`` seconds it connects (``error`` None) or
    fails with ``error``; ``NEVER``: no answer at all (its SYN lost)."""

    at: float = NEVER
    error: int | None = None


@dataclass
class Scripted(trio.socket.SocketType):
    plan: Plan
    log: list[str]
    index: int
    started: float = field(default=0.0)
    closed: bool = False

    def __post_init__(self) -> None:
        super().__init__()

    @property
    def type(self) -> socket.SocketKind:
        return socket.SOCK_STREAM

    def setsockopt(self, *args: object) -> None:
        raise OSError(errno.ENOPROTOOPT, "scripted")

    async def connect(self, address: object) -> None:
        self.started = trio.current_time()
        self.log.append(f"{self.started:g} connect {self.index}")
        try:
            await trio.sleep(self.plan.at)
        except trio.Cancelled:
            self.close()
            raise
        if self.plan.error is not None:
            self.log.append(f"{trio.current_time():g} refused {self.index}")
            raise OSError(self.plan.error, os.strerror(self.plan.error))
        self.log.append(f"{trio.current_time():g} connected {self.index}")

    def close(self) -> None:
        if not self.closed:
            self.log.append(f"{trio.current_time():g} close {self.index}")
        self.closed = True


class Factory(trio.abc.SocketFactory):
    def __init__(self, *plans: Plan) -> None:
        self.plans = list(plans)
        self.log: list[str] = []
        self.made: list[Scripted] = []

    def socket(self, family: object = None, type: object = None, proto: object = None) -> Scripted:  # type: ignore[override]
        made = Scripted(self.plans[len(self.made)], self.log, len(self.made))
        self.made.append(made)
        return made


async def connect(factory: Factory) -> tuple[float, AttemptProgress]:
    """open_transport to 127.0.0.1:80 over ``factory``'s sockets: the virtual time it took."""
    trio.socket.set_custom_socket_factory(factory)
    progress = AttemptProgress(trio.current_time())
    try:
        start = trio.current_time()
        transport = await open_transport("127.0.0.1", 80, progress=progress, ssl_context=None)
        took = trio.current_time() - start
        assert transport.socket is factory.made[[s.closed for s in factory.made].index(False)]
        return took, progress
    finally:
        trio.socket.set_custom_socket_factory(None)


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def test_a_connect_without_answer_gets_a_backup_that_wins(
    mock_clock: trio.testing.MockClock,
) -> None:
    factory = Factory(Plan(at=1.0), Plan(at=0.001))  # the first SYN lost: its retry at 1 s
    took, progress = await connect(factory)
    assert FIXED.happy_eyeballs == 0.25
    assert took == pytest.approx(0.251)
    assert factory.log == ["0 connect 0", "0.25 connect 1", "0.251 connected 1", "0.251 close 0"]
    assert progress.timings["connect"] == pytest.approx(0.251)


async def test_a_connect_answered_in_time_has_no_backup(
    mock_clock: trio.testing.MockClock,
) -> None:
    factory = Factory(Plan(at=0.2))
    took, _ = await connect(factory)
    assert took == pytest.approx(0.2)
    assert factory.log == ["0 connect 0", "0.2 connected 0"]


async def test_a_refusal_is_an_answer_no_backup(mock_clock: trio.testing.MockClock) -> None:
    factory = Factory(Plan(at=0.1, error=errno.ECONNREFUSED))
    with pytest.raises(WireError) as caught:
        await connect(factory)
    assert (caught.value.evidence, caught.value.stage) == (Evidence.NOT_SENT, Stage.CONNECT)
    assert caught.value.category is FailureCategory.CONNECT
    assert "Connection refused" in str(caught.value)
    assert factory.log == ["0 connect 0", "0.1 refused 0", "0.1 close 0"]


async def test_the_first_connect_wins_when_it_answers_first(
    mock_clock: trio.testing.MockClock,
) -> None:
    factory = Factory(Plan(at=0.5), Plan(at=NEVER))
    took, _ = await connect(factory)
    assert took == pytest.approx(0.5)
    assert factory.log == ["0 connect 0", "0.25 connect 1", "0.5 connected 0", "0.5 close 1"]


async def test_when_both_fail_the_error_names_both(mock_clock: trio.testing.MockClock) -> None:
    factory = Factory(
        Plan(at=1.0, error=errno.EHOSTUNREACH), Plan(at=1.0, error=errno.ECONNREFUSED)
    )
    with pytest.raises(WireError) as caught:
        await connect(factory)
    assert (caught.value.evidence, caught.value.stage) == (Evidence.NOT_SENT, Stage.CONNECT)
    message = str(caught.value)
    assert "No route to host (and its backup attempt: Connection refused)" in message
    cause = caught.value.__cause__
    assert isinstance(cause, OSError)
    group = cause.__cause__
    assert isinstance(group, ExceptionGroup)
    assert [e.errno for e in group.exceptions] == [errno.EHOSTUNREACH, errno.ECONNREFUSED]


async def test_cancelled_while_both_wait_closes_both(mock_clock: trio.testing.MockClock) -> None:
    factory = Factory(Plan(), Plan())
    with trio.move_on_after(0.6) as waited:
        await connect(factory)
    assert waited.cancelled_caught
    assert [s.closed for s in factory.made] == [True, True]
    assert factory.log[:2] == ["0 connect 0", "0.25 connect 1"]


async def test_a_lost_syn_on_loopback_costs_the_delay_not_the_kernels_second() -> None:
    """A listener whose backlog is full drops our SYN (as a lossy path would); its one place is
    freed 0.1 s later. The kernel would send that SYN again only after its initial RTO (1 s):
    the backup, at 0.25 s, connects; the first socket is closed before its retransmission, so
    the listener gets one connection."""
    with socket.socket() as listener, socket.socket() as filler:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        filler.connect(("127.0.0.1", port))  # the backlog's one place, taken
        listener.setblocking(False)

        async def make_room() -> None:
            await trio.sleep(0.1)
            listener.accept()[0].close()  # the filler's: the place is free again

        async with trio.open_nursery() as nursery:
            nursery.start_soon(make_room)
            start = time.monotonic()
            with trio.fail_after(5):
                transport = await open_transport(
                    "127.0.0.1",
                    port,
                    progress=AttemptProgress(trio.current_time()),
                    ssl_context=None,
                )
            took = time.monotonic() - start
        with transport.socket:
            assert took < 0.8, f"connected after {took:.2f} s: the kernel's retransmission"
            await trio.sleep(1.5 - took)  # past the first SYN's retransmission (1 s)
            accepted = []
            for _ in range(10):
                try:
                    accepted.append(listener.accept()[0])
                except BlockingIOError:
                    break
            for conn in accepted:
                conn.close()
            assert len(accepted) == 1


def _iptables(*rule: str) -> None:
    subprocess.run(["iptables", "-w", *rule], check=True, capture_output=True, timeout=10)


async def test_a_post_whose_syn_was_dropped_is_answered_after_the_backup(
    server: FaultServer,
) -> None:
    """FaultServer on loopback, every SYN to its port dropped by iptables (that port only)
    for 0.1 s as a POST opens its connection: the backup connect is answered, the POST runs
    once, well before the kernel's retransmission of the lost SYN (1 s)."""
    if os.geteuid() != 0 or shutil.which("iptables") is None:
        pytest.skip("needs root and iptables")
    syn = ("-i", "lo", "-p", "tcp", "--dport", str(server.port), "--syn", "-j", "DROP")
    took: list[float] = []
    async with trio_retry.Client(retry=trio_retry.RetryPolicy(max_attempts=1)) as client:
        _iptables("-I", "INPUT", *syn)
        try:

            async def post() -> None:
                start = time.monotonic()
                response = await client.post(server.url + "/pay", content=b"x", deadline=5)
                took.append(time.monotonic() - start)
                assert response.status == 200

            async with trio.open_nursery() as nursery:
                nursery.start_soon(post)
                await trio.sleep(0.1)
                _iptables("-D", "INPUT", *syn)
        finally:
            subprocess.run(["iptables", "-w", "-D", "INPUT", *syn], capture_output=True, timeout=10)
    assert took[0] < 0.8, f"answered after {took[0]:.2f} s: the kernel's retransmission"
    assert server.executed_count("POST", "/pay") == 1


async def _backed_up_to(port: int) -> tuple[trio.socket.SocketType, socket.socket | None]:
    return await connect_backup.backed_up(
        socket.AF_INET, socket.SOCK_STREAM, 0, ("127.0.0.1", port)
    )


async def test_a_connect_answered_within_a_round_waits_for_no_socket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue #41: a loopback connect is answered by the next round of the scheduler; it is
    taken then, with no wait for its socket (neither the backup's bounded wait, a cancel scope,
    nor a wait for writability: an epoll registration), and is still a checkpoint. Thousands of
    connects at once each held that wait (20 objects) while the garbage collector ran."""
    waits: list[str] = []

    async def no_bounded_wait(sock: socket.socket, within: float) -> bool:
        waits.append("writable_within")
        await trio.lowlevel.checkpoint()
        return True

    async def no_wait(sock: socket.socket) -> None:
        waits.append("wait_writable")
        await trio.lowlevel.checkpoint()

    monkeypatch.setattr(connect_backup, "writable_within", no_bounded_wait)
    monkeypatch.setattr(rawsock, "wait_writable", no_wait)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        for _ in range(3):
            with trio.testing.assert_checkpoints(), trio.fail_after(5):
                sock, raw = await _backed_up_to(listener.getsockname()[1])
            with sock:
                assert raw is not None
                assert raw.getpeername() == listener.getsockname()
    assert waits == []


async def test_a_refusal_on_loopback_is_raised_as_the_reason_alone_and_leaves_nothing_open() -> (
    None
):
    """The connect's answer read after the round (``rawsock.answered``): a refusal is the
    connect's error, no backup was tried, no socket left open."""
    before = len(os.listdir("/proc/self/fd"))
    with socket.socket() as bound_only:  # bound, never listening: connects are refused
        bound_only.bind(("127.0.0.1", 0))
        with pytest.raises(ConnectionRefusedError) as caught, trio.fail_after(5):
            await _backed_up_to(bound_only.getsockname()[1])
    assert caught.value.strerror == os.strerror(errno.ECONNREFUSED)
    assert len(os.listdir("/proc/self/fd")) == before


async def test_a_connect_cancelled_at_its_round_is_closed() -> None:
    """Cancelled while it takes its round (already answered): the socket is closed, the
    ``Cancelled`` goes on."""
    before = len(os.listdir("/proc/self/fd"))
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        with trio.CancelScope() as scope:
            scope.cancel()
            await _backed_up_to(listener.getsockname()[1])
        assert scope.cancelled_caught
    assert len(os.listdir("/proc/self/fd")) == before
