"""``Client(state=path)`` against FaultServer(http3=True) on loopback: a later client resumes
an earlier one's QUIC session (its GET in 0-RTT) and goes straight to HTTP/3 where Alt-Svc
said so; a ticket earned under other trust settings is not used; a corrupt file costs one
``StateFileWarning`` and is replaced; nothing secret is shown; bad ``state=`` values are
refused naming the option. (The command line's ``--state``, on caddy too: tests/cli/test_state.py.)
"""

from __future__ import annotations

import base64
import json
import logging
import warnings
from pathlib import Path

import pytest
import trio
import trustme

from tests.support.udp_relay import Faults, UdpRelay
from trio_retry import (
    Client,
    InsecureTLSWarning,
    Response,
    RetryPolicy,
    StateFileWarning,
    Upstream,
)
from trio_retry._state.file import PREFIX
from trio_retry.testing import FaultServer, Respond

ONE = RetryPolicy(max_attempts=1)


@pytest.fixture
async def server(nursery: trio.Nursery) -> FaultServer:
    fault_server = FaultServer(tls=True, http3=True)
    await nursery.start(fault_server.serve)
    fault_server.route("GET", "/r", Respond(200, body=b"ok"))
    return fault_server


@pytest.fixture
def ca(server: FaultServer, tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    path.write_bytes(server.ca_pem)
    return str(path)


async def get(
    server: FaultServer,
    state: Path | None,
    *,
    verify: object,
    http3: str = "upstream",
    url: str | None = None,
) -> Response:
    """One GET from a client of its own, with early data (``http3``: ``"upstream"`` for
    ``default_upstream=Upstream(http3=True)``, ``"alt-svc"`` for ``http3=True``)."""
    options: dict[str, object] = {"verify": verify, "retry": ONE, "early_data": True}
    if http3 == "upstream":
        options["default_upstream"] = Upstream(http3=True)
    else:
        options["http3"] = True
    async with Client(state=state, **options) as client:  # type: ignore[arg-type]
        response = await client.get((url or server.url) + "/r")
    assert (response.status, response.content) == (200, b"ok")
    return response


def early(response: Response) -> list[tuple[str | None, str | None]]:
    return [(a.http_version, a.early_data) for a in response.attempts]


async def test_a_later_client_resumes_in_early_data(
    server: FaultServer, ca: str, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    assert early(await get(server, state, verify=ca)) == [("HTTP/3", None)]
    assert early(await get(server, state, verify=ca)) == [("HTTP/3", "accepted")]
    assert early(await get(server, state, verify=ca)) == [("HTTP/3", "accepted")]
    # Without the file, a client starts cold.
    assert early(await get(server, None, verify=ca)) == [("HTTP/3", None)]
    assert server.executed_count("GET", "/r") == 4
    # One ticket per origin, used once: the file holds the newest.
    [group] = json.loads(state.read_bytes())["setups"]
    assert len(group["entries"]["quic_tickets"]) == 1


async def test_a_resumed_connection_keeps_its_next_ticket(
    server: FaultServer, ca: str, tmp_path: Path, nursery: trio.Nursery
) -> None:
    # 40 ms each way: a GET in 0-RTT is answered one round trip after it left, while the
    # server issues its next ticket only after the handshake ends, half a round trip later.
    # A client that closed on its answer kept no ticket, and every other process started cold.
    relay = UdpRelay(("127.0.0.1", server.port), faults=Faults(delay=0.04))
    port = await nursery.start(relay.run)
    url = f"https://127.0.0.1:{port}"
    state = tmp_path / "state"
    runs = [early(await get(server, state, verify=ca, url=url)) for _ in range(4)]
    assert runs == [[("HTTP/3", None)]] + [[("HTTP/3", "accepted")]] * 3
    assert len(relay.clients) == 4


async def test_alt_svc_answers_outlive_the_client(
    server: FaultServer, ca: str, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    first = await get(server, state, verify=ca, http3="alt-svc")
    assert first.http_version != "HTTP/3"  # learned over TCP from Alt-Svc
    second = await get(server, state, verify=ca, http3="alt-svc")
    assert second.http_version == "HTTP/3"  # the next client goes straight to HTTP/3
    [group] = json.loads(state.read_bytes())["setups"]
    [route] = group["entries"]["alt_svc"]
    assert (route["host"], route["port"], route["value"]["port"]) == (
        "127.0.0.1",
        server.port,
        server.port,
    )
    # Without the file, the answer is rediscovered.
    cold = await get(server, None, verify=ca, http3="alt-svc")
    assert cold.http_version != "HTTP/3"


async def test_tickets_of_other_trust_settings_are_not_used(
    server: FaultServer, ca: str, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    # A client that checked nothing earns a ticket; a checking client must not resume it
    # (a resumed session is not authenticated by a certificate again).
    insecure = []
    for _ in range(2):
        with pytest.warns(InsecureTLSWarning):
            insecure.append(early(await get(server, state, verify=False)))
    assert insecure == [[("HTTP/3", None)], [("HTTP/3", "accepted")]]
    assert early(await get(server, state, verify=ca)) == [("HTTP/3", None)]
    # Nor does a client trusting one more authority resume the first one's ticket.
    both = tmp_path / "both.pem"
    both.write_bytes(Path(ca).read_bytes() + trustme.CA().cert_pem.bytes())
    assert early(await get(server, state, verify=str(both))) == [("HTTP/3", None)]
    assert early(await get(server, state, verify=ca)) == [("HTTP/3", "accepted")]
    # Each setting keeps its own group in the one file.
    assert len(json.loads(state.read_bytes())["setups"]) == 3


async def test_a_corrupt_file_costs_one_warning(
    server: FaultServer, ca: str, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    state.write_bytes(PREFIX + b', "version": 1, "setups": [{"trust": ')
    state.chmod(0o600)
    with pytest.warns(StateFileWarning) as caught:
        assert early(await get(server, state, verify=ca)) == [("HTTP/3", None)]
    assert len(caught) == 1
    assert str(caught[0].message).startswith(f"state file {str(state)!r}: ignored: it is corrupt (")
    assert str(caught[0].message).endswith("; going on without it")
    # It was replaced by a good one: the next client resumes, without a warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert early(await get(server, state, verify=ca)) == [("HTTP/3", "accepted")]


async def test_a_foreign_file_is_left_alone(server: FaultServer, ca: str, tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_bytes(b"not a state file\n")
    with pytest.warns(StateFileWarning, match="not a trio_retry state file") as caught:
        await get(server, notes, verify=ca)
    assert len(caught) == 1  # (not a second one when it is not written either)
    assert notes.read_bytes() == b"not a state file\n"


async def test_nothing_secret_is_shown(
    server: FaultServer, ca: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="trio_retry")
    state = tmp_path / "state"
    await get(server, state, verify=ca)
    options = {"verify": ca, "early_data": True, "default_upstream": Upstream(http3=True)}
    async with Client(state=state, **options) as client:  # type: ignore[arg-type]
        response = await client.get(server.url + "/r")
        memory = client._rt.connector.memory
        assert memory is not None
        shown = [repr(client), repr(memory), repr(response), repr(response.attempts)]
        shown += [repr(memory.recall(kind)) for kind in ("quic_tickets", "quic_tokens")]
    shown += [repr(client), repr(memory)]
    [group] = json.loads(state.read_bytes())["setups"]
    [ticket] = group["entries"]["quic_tickets"]
    secrets = []
    for name in ("resumption_secret", "ticket"):
        encoded = ticket["value"][name]
        raw = base64.b64decode(encoded)
        secrets += [encoded, raw.hex(), repr(raw)[2:-1][:40]]
    shown += [r.getMessage() for r in caplog.records] + [repr(r.args) for r in caplog.records]
    assert "1 quic_tickets" in repr(memory)
    assert [(s[:12], t) for s in secrets for t in shown if s in t] == []


async def test_without_http3_nothing_is_written(tmp_path: Path, nursery: trio.Nursery) -> None:
    # Over TCP there is nothing to keep: Python's ssl module cannot serialize a session.
    plain = FaultServer()
    url = await nursery.start(plain.serve)
    plain.route("GET", "/r", Respond(200, body=b"ok"))
    state = tmp_path / "state"
    async with Client(state=state) as client:
        assert (await client.get(url + "/r")).status == 200
    assert not state.exists()


def test_bad_state_values_name_the_option(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"^state must be the path of a file \(str or os\."):
        Client(state=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^state: '.*' is a directory; give the path"):
        Client(state=tmp_path)
    with pytest.raises(ValueError, match=r"^state: cannot create a file in '/proc' \("):
        Client(state="/proc/trio_retry.state")


async def test_clients_closing_at_once_keep_both_tickets(
    server: FaultServer, ca: str, tmp_path: Path, nursery: trio.Nursery
) -> None:
    other = FaultServer(tls=True, http3=True)
    await nursery.start(other.serve)
    other.route("GET", "/r", Respond(200, body=b"ok"))
    other_ca = tmp_path / "other-ca.pem"
    other_ca.write_bytes(other.ca_pem)
    bundle = tmp_path / "bundle.pem"
    bundle.write_bytes(Path(ca).read_bytes() + other.ca_pem)
    state = tmp_path / "state"

    async def five(target: FaultServer) -> None:
        for _ in range(5):
            await get(target, state, verify=str(bundle))

    async with trio.open_nursery() as both:
        both.start_soon(five, server)
        both.start_soon(five, other)
    [group] = json.loads(state.read_bytes())["setups"]
    ports = sorted(entry["port"] for entry in group["entries"]["quic_tickets"])
    assert ports == sorted([server.port, other.port])
    # Each later client resumed: its ticket was never lost to the other's write.
    runs = [early(await get(s, state, verify=str(bundle))) for s in (server, other)]
    assert runs == [[("HTTP/3", "accepted")]] * 2
