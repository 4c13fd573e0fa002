"""A dark HTTP/2 connection for real (issue #41): nginx in a network namespace, the client's
connection to it partitioned with iptables (every packet of that one flow dropped, both ways),
as a middlebox that forgot the flow, or a path that broke, would do. Other flows pass: a new
connection gets through (the second path).

With a call waiting on it, the partitioned connection receives nothing: once ``read_idle`` has
passed it takes no new call (a call made then goes on a new connection and is answered at
once), and when its PING goes unanswered it is closed: a GET that was on it goes again, on
another connection, and the backend's ledger says it ran once; a POST is ambiguous (it left,
the partition may have eaten it or its answer) and is sent nowhere else. When the partition
heals, calls go on as before.

The lab's own helpers build the namespace and start nginx and its ledger backend in it
(``benchmarks/exactly_once/``); root, iproute2, iptables and nginx are needed, and the test
skips without them. The watch's limits (``clock.FIXED``) are made short for the real clock.
"""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import Iterator
from typing import Any

import pytest
import trio

import trio_retry
from benchmarks.exactly_once import netlab, servers
from benchmarks.exactly_once.records import read_access_log, read_ledger
from trio_retry import Evidence, FailureCategory
from trio_retry._wire import clock

from ..exactly_once.support import skip_unless_lab

IDLE, PING = 1.0, 1.0


@pytest.fixture
def lab() -> Iterator[tuple[netlab.NetLab, servers.Servers]]:
    """A lab network with nginx (h2 on port 8443) and the ledger backend in it; taken down
    after, whatever happened."""
    skip_unless_lab()
    with netlab.setup_lock():
        netlab.remove_stale()
        reservation = netlab.reserve()
        try:
            made = netlab.create(reservation.lab)
        except BaseException:
            netlab.destroy(reservation.lab.name)
            reservation.release()
            raise
    try:
        running = servers.start(made, made.workdir, seed=1, max_delay=0.0, keepalive_requests=1000)
        try:
            yield made, running
        finally:
            running.stop()
    finally:
        netlab.destroy(made.name)
        reservation.release()


@pytest.fixture
def quick_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        clock, "FIXED", dataclasses.replace(clock.FIXED, read_idle=IDLE, read_idle_ping=PING)
    )


def client_port(lab: netlab.NetLab) -> int:
    """The local port of our one established connection to nginx's HTTP/2 listener."""
    out = netlab.run(
        ["ss", "-Htn", "state", "established", "dst", f"{lab.server_addr}:{servers.PORTS['h2']}"]
    )
    (line,) = [line for line in out.splitlines() if line.strip()]
    return int(line.split()[-2].rsplit(":", 1)[1])


def partition(lab: netlab.NetLab, port: int, *, heal: bool = False) -> None:
    """Drop (or stop dropping) every packet of the flow from our ``port``, both ways, in the
    server's namespace."""
    action = "-D" if heal else "-A"
    h2 = str(servers.PORTS["h2"])
    for rule in (
        ["INPUT", "-p", "tcp", "-s", lab.host_addr, "--sport", str(port), "--dport", h2],
        ["OUTPUT", "-p", "tcp", "-d", lab.host_addr, "--dport", str(port), "--sport", h2],
    ):
        netlab.run(lab.in_ns("iptables", action, rule[0], *rule[1:], "-j", "DROP"))


def connections_of(running: servers.Servers) -> dict[str, str]:
    """Request id -> nginx's connection serial number, from its access log."""
    seen = {}
    for line in running.access_log.read_text().splitlines():
        fields = line.split("\t")
        if len(fields) > 6:
            seen[fields[0]] = fields[6]
    return seen


async def test_a_partitioned_http2_connection_takes_no_new_call_and_is_replaced(
    lab: tuple[netlab.NetLab, servers.Servers], quick_watch: None
) -> None:
    net, running = lab
    base = f"https://{net.server_addr}:{servers.PORTS['h2']}"
    context = ssl.create_default_context(cafile=str(running.ca_file))
    context.set_alpn_protocols(["h2", "http/1.1"])
    outcome: dict[str, Any] = {}

    def rid(name: str) -> dict[str, str]:
        return {"x-request-id": name}

    with trio.fail_after(60):
        async with trio_retry.Client(ssl_context=context) as client:
            warm = await client.get(base + "/warm", headers=rid("warm"))
            assert warm.http_version == "HTTP/2"
            port = client_port(net)
            partition(net, port)
            start = trio.current_time()

            async def dark_get() -> None:
                outcome["get"] = await client.get(base + "/dark-get", headers=rid("dark-get"))
                outcome["get_at"] = trio.current_time() - start

            async def dark_post() -> None:
                with pytest.raises(trio_retry.HttpAmbiguousExecutionError) as info:
                    await client.post(base + "/dark-post", content=b"x", headers=rid("dark-post"))
                outcome["post"] = info.value
                outcome["post_at"] = trio.current_time() - start

            async with trio.open_nursery() as nursery:
                nursery.start_soon(dark_get)  # on the partitioned connection: it still looks fine
                nursery.start_soon(dark_post)
                await trio.sleep(IDLE + 0.3)  # silent with calls waiting: it takes no new call
                later = await client.get(base + "/later", headers=rid("later"))
                outcome["later_at"] = trio.current_time() - start
            partition(net, port, heal=True)
            healed = await client.get(base + "/healed", headers=rid("healed"))
    # The call made during the silence: a new connection, answered at once.
    assert later.status == 200
    assert not later.attempts[0].connection_reused
    assert outcome["later_at"] < IDLE + PING
    # The connection was closed when its PING went unanswered; the GET went again, elsewhere.
    get = outcome["get"]
    first, again = get.attempts
    assert (first.evidence, first.category) == (
        Evidence.SENT_NO_RESPONSE,
        FailureCategory.CONNECTION_BROKEN,
    )
    assert "went dark" in str(first.error)
    assert again.status == 200
    assert IDLE + PING - 0.2 <= outcome["get_at"] < IDLE + PING + 2
    # The POST left before the partition showed: ambiguous, and sent nowhere else.
    (post,) = outcome["post"].attempts
    assert post.evidence is Evidence.SENT_NO_RESPONSE
    assert healed.status == 200
    # What nginx and the backend say: the partitioned requests never reached them; the GET
    # ran once, on another connection than the warm one; nothing ran twice.
    executed = [entry.rid for entry in read_ledger(running.ledger)]
    assert sorted(executed) == sorted(["warm", "dark-get", "later", "healed"])
    connections = connections_of(running)
    assert connections["dark-get"] != connections["warm"]
    assert connections["later"] != connections["warm"]


async def test_a_connect_opened_in_a_partition_connects_once_it_heals(
    lab: tuple[netlab.NetLab, servers.Servers],
) -> None:
    """Every SYN to nginx's HTTP/1.1 listener dropped (in the server's namespace) as a POST
    opens its connection; the partition heals 0.1 s later. The kernel would send the lost SYN
    again only after its initial RTO (1 s): the backup connect (``FIXED.happy_eyeballs``,
    0.25 s) reaches nginx, the POST's one attempt is answered, and nginx and the backend
    executed it once (the first socket was closed before its SYN went again)."""
    net, running = lab
    base = f"http://{net.server_addr}:{servers.PORTS['h1']}"
    syn = ["INPUT", "-p", "tcp", "--dport", str(servers.PORTS["h1"]), "--syn", "-j", "DROP"]
    with trio.fail_after(30):
        async with trio_retry.Client() as client:
            netlab.run(net.in_ns("iptables", "-A", *syn))
            try:
                outcome: dict[str, Any] = {}
                start = trio.current_time()

                async def post() -> None:
                    outcome["post"] = await client.post(
                        base + "/lost-syn", content=b"x", headers={"x-request-id": "lost-syn"}
                    )
                    outcome["at"] = trio.current_time() - start

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(post)
                    await trio.sleep(0.1)  # the partition's length
                    netlab.run(net.in_ns("iptables", "-D", *syn))
            finally:
                netlab.run(net.in_ns("iptables", "-D", *syn), check=False)
    response = outcome["post"]
    assert response.status == 200
    (attempt,) = response.attempts
    assert not attempt.connection_reused
    assert outcome["at"] < 0.8, f"answered after {outcome['at']:.2f} s: the kernel's retransmission"
    assert [entry.rid for entry in read_ledger(running.ledger)] == ["lost-syn"]
    assert sum(line.rid == "lost-syn" for line in read_access_log(running.access_log)) == 1
