"""The QUIC interop runner's client cases that run offline, as one scenario table, played
against FaultServer's HTTP/3, ngtcp2's gtlsserver and caddy (quic-go) where each applies,
through a UDP relay (tests/support/udp_relay.py) that adds the case's network faults.

Each row names a case (its play is in ``quic_plays.py``), the servers it meets, how those
servers are started (Retry, ciphers, windows, a preferred address, a key update), and the
servers where it fails today because of a finding of issue #39 that another change fixes:
those are ``xfail(strict=True)``, so the fix turns them into failures until its author
removes the mark. What a server did is read from the server: gtlsserver's log, FaultServer's
QUIC connections watched from inside (tests/support/fault_quic.py), caddy's access log and,
for its connections, the relay.

Which server where: ChaCha20, Retry, a preferred address and small server windows are
gtlsserver options; a key update the server starts and the 0-RTT packet types are watched in
FaultServer; caddy (no such options, no per-connection log) plays the cases its file server
and access log can show. A fallback to TCP needs a server with TCP (not gtlsserver). Not caddy
for rebinding: Debian's caddy 2.6 (its quic-go) keeps sending to the client's first address
after a NAT rebinding (the relay saw nothing come to the new one), so no client gets through.

The relay's faults are seeded (seed 1). ``QUIC_CASES_SEED=<n>`` sets another seed for every
row: a loop over seeds measures a lossy case's odds (``handshakeloss`` states its own so),
e.g. ``for s in $(seq 1 30); do QUIC_CASES_SEED=$s pytest tests/interop/test_quic_cases.py
-k handshakeloss; done``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial

import pytest
import trio
from aioquic.tls import CipherSuite

from tests.support.caddy import SKIP_REASON as CADDY_MISSING
from tests.support.caddy import CaddyUnavailable, find_caddy, start_caddy
from tests.support.fault_quic import watch_fault_quic
from tests.support.fixtures import one_server
from tests.support.ngtcp2 import (
    CHACHA20_ONLY,
    Ngtcp2Options,
    Ngtcp2Unavailable,
    find_ngtcp2,
    start_ngtcp2,
)
from tests.support.ngtcp2 import SKIP_REASON as NGTCP2_MISSING
from tests.support.procs import can_bind
from tests.support.quic_targets import CaddyTarget, FaultTarget, Ngtcp2Target, Target
from tests.support.udp_relay import UdpRelay
from trio_retry.testing import FaultServer

from .quic_plays import PLAYS, Play

F, N, C = "faultserver", "ngtcp2", "caddy"


@dataclass(frozen=True)
class Case:
    """One row: a case of the runner, the servers it meets and how they start."""

    play: str
    targets: tuple[str, ...]
    #: Through the relay (its faults set by the play); else straight to the server, but for
    #: caddy, which is always behind one (the relay counts its connections).
    relay: bool = False
    host: str = "127.0.0.1"
    ngtcp2: Ngtcp2Options = field(default_factory=Ngtcp2Options)
    #: FaultServer's watch: a key update after this many datagrams; the only cipher suites.
    key_update_after: int | None = None
    cipher_suites: tuple[CipherSuite, ...] | None = None
    #: Target -> why it fails today (an ``xfail(strict=True)`` there).
    xfail: Mapping[str, str] = field(default_factory=dict)
    #: The whole play, bounded.
    timeout: float = 30.0
    #: The relay's seed (the module docstring: ``QUIC_CASES_SEED``).
    seed: int = int(os.environ.get("QUIC_CASES_SEED", "1"))


SMALL_WINDOWS = Ngtcp2Options(max_data="64K", max_stream_data="16K")

TABLE: tuple[Case, ...] = (
    Case("handshake", (F, N, C)),
    Case("transfer", (F, N, C), ngtcp2=SMALL_WINDOWS),
    Case("multiplexing", (F, N), timeout=60),
    Case(
        "chacha20",
        (F, N),
        ngtcp2=Ngtcp2Options(ciphers=CHACHA20_ONLY),
        cipher_suites=(CipherSuite.CHACHA20_POLY1305_SHA256,),
    ),
    Case("retry", (N,), ngtcp2=Ngtcp2Options(retry=True)),
    Case("resumption", (F, N)),
    Case("zerortt", (F, N)),
    Case("zerortt_evidence", (F, N), relay=True),
    Case("http3", (F, N, C)),
    Case("handshakeloss", (F, N), relay=True, timeout=90),
    Case("transferloss", (F, N), relay=True),
    Case("transfercorruption", (F, N), relay=True),
    Case("blackhole", (F, N), relay=True),
    Case("keyupdate", (F,), key_update_after=100),
    Case("ipv6", (F, N), host="::1"),
    Case("portrebinding", (F, N), relay=True),
    Case("addressrebinding", (F, N), relay=True),
    Case(
        "connectionmigration",
        (N,),
        relay=False,
        ngtcp2=Ngtcp2Options(preferred_address=True),
    ),
    Case("connectionclose", (F, N)),
    Case("slowhandshake", (F, C), relay=True),
)


#: What an xfail row may fail with: an assertion of its play (pytest-trio reports it inside
#: an exception group). Anything else (a timeout, an error) is a real failure.
_FAILED_ASSERTION = pytest.RaisesGroup(AssertionError, allow_unwrapped=True, flatten_subgroups=True)


def _params() -> Iterator[object]:
    for case in TABLE:
        assert case.play in PLAYS, case.play
        for target in case.targets:
            marks = []
            if target in case.xfail:
                reason = case.xfail[target]
                marks.append(
                    pytest.mark.xfail(strict=True, raises=_FAILED_ASSERTION, reason=reason)
                )
            yield pytest.param(case, target, marks=marks, id=f"{case.play}-{target}")


@pytest.fixture
def external(request: pytest.FixtureRequest) -> Iterator[object]:
    """The real server a row meets (gtlsserver or caddy), started for the test and stopped
    after it; None for FaultServer (the test starts it in its nursery). Skips, saying why,
    when the server or the network the row needs is missing here."""
    case: Case = request.node.callspec.params["case"]
    target: str = request.node.callspec.params["server"]
    if case.host == "::1" and not can_bind("::1"):
        pytest.skip("IPv6 loopback (::1) is not available here")
    if case.play == "addressrebinding" and not can_bind("127.0.0.2"):
        pytest.skip("127.0.0.2 (another loopback address) cannot be bound here")
    if target == N:
        options = dataclasses.replace(case.ngtcp2, host=case.host)
        missing = NGTCP2_MISSING if find_ngtcp2() is None else None
        yield from one_server(missing, partial(start_ngtcp2, {}, options), Ngtcp2Unavailable)
    elif target == C:
        missing = CADDY_MISSING if find_caddy() is None else None
        yield from one_server(missing, start_caddy, CaddyUnavailable)
    else:
        yield None


@pytest.fixture
async def quic_target(
    external: object,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    nursery: trio.Nursery,
) -> Target:
    """The row's server as a :class:`Target`; FaultServer started (watched) here, in the
    test's nursery, which ends it."""
    case: Case = request.node.callspec.params["case"]
    name: str = request.node.callspec.params["server"]
    if name == N:
        return Ngtcp2Target(external)  # type: ignore[arg-type]
    if name == C:
        return CaddyTarget(external)  # type: ignore[arg-type]
    watch = watch_fault_quic(
        monkeypatch, key_update_after=case.key_update_after, cipher_suites=case.cipher_suites
    )
    server = FaultServer(tls=True, http3=True, host=case.host)
    await nursery.start(server.serve)
    return FaultTarget(server, watch)


@pytest.mark.parametrize(("case", "server"), list(_params()))
async def test_quic_case(
    case: Case, server: str, quic_target: Target, nursery: trio.Nursery
) -> None:
    relay = None
    if case.relay or server == C:
        relay = UdpRelay((quic_target.host, quic_target.port), seed=case.seed, tcp=quic_target.tcp)
        await nursery.start(relay.run)
    with trio.fail_after(case.timeout):
        await PLAYS[case.play](Play(quic_target, relay, nursery, case.seed))
