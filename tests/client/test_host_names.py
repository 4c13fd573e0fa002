"""Issue #38 row 14: host names as IDNA and TLS want them.

- An ``xn--`` label (an A-label) is decoded and validated as its Unicode form would be (UTS #46
  §4 step 4): the A-label of a refused code point, empty or malformed Punycode and a trailing
  hyphen are ``InvalidRequest`` before anything is sent, as ``💩.example`` already was.
- A trailing dot (``https://localhost./``) stays in the DNS lookup (an absolute name) and is
  dropped from SNI and the certificate check (RFC 6066 §3), over real TLS on loopback: our
  FaultServer, and nginx logging the SNI it received.
"""

from __future__ import annotations

import socket
from typing import Any

import pytest
import trio

import trio_retry
from tests.conftest import FAST
from tests.support.fixtures import StartNginx
from tests.support.fixtures import nginx as nginx
from trio_retry.testing import FaultServer, MockTransport, Respond


@pytest.mark.parametrize(
    ("host", "says"),
    [
        ("xn--ls8h.example", "U+1F4A9"),  # the A-label of 💩 (refused as a U-label too)
        ("xn--a-la.example", "U+0085"),  # a C1 control code point, Punycode-encoded
        ("xn--.example", "Punycode"),  # empty Punycode
        ("shop.xn--abc-.example", "hyphen"),  # a trailing hyphen
        ("xn--99999999999.example", "Invalid A-label"),  # malformed Punycode
        ("xn--a-ecb.example", "Normalization Form C"),  # decodes to a non-NFC label
        ("XN--LS8H.example", "U+1F4A9"),  # the prefix in capitals is the same prefix
    ],
)
async def test_an_invalid_a_label_is_refused_before_sending(host: str, says: str) -> None:
    transport = MockTransport()
    async with trio_retry.Client(transport=transport, retry=FAST) as client:
        with pytest.raises(trio_retry.InvalidRequest) as caught:
            await client.get(f"https://{host}/")
    message = str(caught.value)
    assert "IDNA A-label" in message
    assert says in message
    assert caught.value.evidence is trio_retry.Evidence.NOT_SENT
    assert transport.connects == []


@pytest.mark.parametrize(
    "host", ["xn--bcher-kva.example", "XN--BCHER-KVA.example", "r3---sn-ab.example"]
)
async def test_a_valid_a_label_and_ascii_hyphens_are_sent_as_they_are(host: str) -> None:
    transport = MockTransport()
    transport.server.default = Respond(200)
    async with trio_retry.Client(transport=transport, retry=FAST) as client:
        response = await client.get(f"http://{host}/")
    assert response.status == 200
    [target] = transport.connects
    assert target.host == host.lower()


class Loopback(trio.abc.HostnameResolver):
    """Every name resolves to 127.0.0.1; the names asked are kept (what DNS was given)."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def getaddrinfo(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        self.asked.append(host.decode() if isinstance(host, bytes) else str(host))
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", int(port)))]

    async def getnameinfo(self, *args: Any) -> Any:  # pragma: no cover - unused
        raise NotImplementedError


@pytest.mark.parametrize("http2", [False, True], ids=["http/1.1", "h2"])
async def test_a_trailing_dot_is_kept_for_dns_and_dropped_for_tls(
    nursery: trio.Nursery, http2: bool
) -> None:
    server = FaultServer(tls=True, http2=http2)
    await nursery.start(server.serve)
    server.default = Respond(200, body=b"ok")
    resolver = Loopback()
    trio.socket.set_custom_hostname_resolver(resolver)
    context = server.client_ssl_context()
    async with trio_retry.Client(retry=FAST, ssl_context=context) as client:
        with trio.fail_after(10):
            response = await client.get(f"https://localhost.:{server.port}/")
    assert response.status == 200  # the certificate (for "localhost") was accepted
    assert response.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
    assert resolver.asked == ["localhost."]  # an absolute name, as written
    assert len(server.requests) == 1


NGINX_SNI = """
    log_format sni '$ssl_server_name';
    server {
        listen {{host}}:{{sni_tls}} ssl;
        {{tls}}
        access_log {{workdir}}/sni.log sni;
        location / { return 200 "ok"; }
    }
"""


async def test_nginx_receives_the_name_without_its_dot(nginx: StartNginx) -> None:
    server = nginx(servers=NGINX_SNI, listeners=("sni_tls",))
    resolver = Loopback()
    trio.socket.set_custom_hostname_resolver(resolver)
    context = server.ssl_context(http2=False)
    async with trio_retry.Client(retry=FAST, ssl_context=context) as client:
        with trio.fail_after(10):
            response = await client.get(f"https://localhost.:{server.ports['sni_tls']}/")
    assert (response.status, response.text) == (200, "ok")
    assert resolver.asked == ["localhost."]
    log = server.workdir / "sni.log"
    with trio.fail_after(5):
        while not log.exists() or not log.read_text():
            await trio.sleep(0.05)
    assert log.read_text().splitlines() == ["localhost"]  # SNI: no trailing dot


async def test_a_trailing_dot_over_http3(nursery: trio.Nursery) -> None:
    server = FaultServer(tls=True, http3=True)
    await nursery.start(server.serve)
    server.default = Respond(200, body=b"ok")
    resolver = Loopback()
    trio.socket.set_custom_hostname_resolver(resolver)
    origin = f"https://localhost.:{server.port}"
    async with trio_retry.Client(
        retry=FAST,
        ssl_context=server.client_ssl_context(),
        upstreams={origin: trio_retry.Upstream(http3=True)},
    ) as client:
        with trio.fail_after(10):
            response = await client.get(origin + "/")
    assert (response.status, response.http_version) == (200, "HTTP/3")
    assert set(resolver.asked) == {"localhost."}
    assert [r.http_version for r in server.requests] == ["HTTP/3"]
