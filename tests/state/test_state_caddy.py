"""``Client(state=path)`` against caddy (quic-go): its NEW_TOKEN address-validation tokens are
kept and presented by the next client's first Initial packet (seen at a UDP relay), each used
once; its tickets resume with 0-RTT; its Alt-Svc answer sends the next client straight to
HTTP/3. caddy's own access log counts what it executed."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import trio

from tests.support.caddy import RunningCaddy
from tests.support.fixtures import caddy as caddy
from tests.support.udp_relay import UdpRelay
from trio_retry import Client, Response, Upstream

__all__ = ["caddy"]


def initial_token(datagram: bytes) -> bytes:
    """The token of the QUIC Initial packet ``datagram`` starts with (RFC 9000 §17.2.2)."""
    assert datagram[0] & 0xF0 == 0xC0, "a long-header Initial packet"
    at = 5  # (first byte, version)
    at += 1 + datagram[at]  # destination connection id
    at += 1 + datagram[at]  # source connection id
    size = 1 << (datagram[at] >> 6)  # a variable-length integer
    length = int.from_bytes(datagram[at : at + size], "big") & ((1 << (8 * size - 2)) - 1)
    return datagram[at + size : at + size + length]


def kept(state: Path, kind: str) -> list[dict[str, object]]:
    [group] = json.loads(state.read_bytes())["setups"]
    entries: list[dict[str, object]] = group["entries"][kind]
    return entries


async def test_tokens_tickets_and_alt_svc_on_caddy(
    caddy: RunningCaddy, tmp_path: Path, nursery: trio.Nursery
) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(caddy.ca_pem)
    relay = UdpRelay(("127.0.0.1", caddy.port))
    port = await nursery.start(relay.run)
    state = tmp_path / "state"

    async def get(request_id: str) -> Response:
        async with Client(
            verify=str(ca), default_upstream=Upstream(http3=True), early_data=True, state=state
        ) as client:
            return await client.get(
                f"https://127.0.0.1:{port}/echo/t", headers={"x-request-id": request_id}
            )

    tokens: list[bytes] = []
    early: list[str | None] = []
    for run in range(3):
        response = await get(f"run{run}")
        assert (response.http_version, response.status) == ("HTTP/3", 200)
        early.append(response.attempts[-1].early_data)
        [token] = kept(state, "quic_tokens")
        tokens.append(base64.b64decode(str(token["value"]["token"])))  # type: ignore[index]
    sent = [initial_token(d) for d in relay.first_datagrams]
    # The first client had no token; each later one presented the one its predecessor kept,
    # and caddy issued a new one each time (a token is used once).
    assert sent == [b"", tokens[0], tokens[1]]
    assert len(set(tokens)) == 3
    assert early == [None, "accepted", "accepted"]
    assert [caddy.backend.count(request_id=f"run{run}") for run in range(3)] == [1, 1, 1]

    # Alt-Svc (http3=True, discovery): learned over TCP once, then HTTP/3 from the start.
    discovered = tmp_path / "alt-svc"
    versions = []
    for _ in range(2):
        async with Client(verify=str(ca), http3=True, state=discovered) as client:
            versions.append((await client.get(caddy.url("/get"))).http_version)
    assert versions[0] != "HTTP/3"
    assert versions[1] == "HTTP/3"
    assert [entry["port"] for entry in kept(discovered, "alt_svc")] == [caddy.port]
    assert caddy.log(expect=5).protocols()[-1] == "HTTP/3.0"
