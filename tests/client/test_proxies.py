"""Proxies (SPEC §12): socks5 and socks5h (with and without credentials) against a SOCKS5
server written in the tests, https:// proxies (TLS to the proxy, then CONNECT or absolute
form), the environment (ALL_PROXY / HTTPS_PROXY / NO_PROXY), and NOT_SENT at CONNECT for
every failure to reach or negotiate with a proxy."""

from __future__ import annotations

import ssl
import sys
from functools import partial
from pathlib import Path

import pytest
import trio
import trustme

import trio_retry
from tests.conftest import FAST
from trio_retry import Evidence, FailureCategory, Stage
from trio_retry._proxy import ProxyConfig
from trio_retry.testing import FaultServer, Respond, refused_port

from .proxy import LoopbackProxy
from .socks_server import SocksServer

LIMIT = 10


class TLSProxy(LoopbackProxy):
    """The loopback HTTP proxy, spoken to over TLS (an https:// proxy)."""

    def __init__(self, **options: object) -> None:
        super().__init__(**options)  # type: ignore[arg-type]
        self.ca = trustme.CA()
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ca.issue_cert("127.0.0.1", "localhost").configure_cert(self.context)

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_ssl_over_tcp_listeners(0, self.context, host="127.0.0.1")
        self.port = listeners[0].transport_listener.socket.getsockname()[1]
        task_status.started(self.port)
        await trio.serve_listeners(self._handle, listeners)  # type: ignore[arg-type]


def _bundle(tmp_path: Path, *cas: trustme.CA | bytes) -> str:
    """A CA bundle file of ``cas`` (trustme authorities, or PEM bytes such as a
    ``FaultServer.ca_pem``)."""
    path = tmp_path / "bundle.pem"
    path.write_bytes(b"".join(ca if isinstance(ca, bytes) else ca.cert_pem.bytes() for ca in cas))
    return str(path)


async def _origin(nursery: trio.Nursery, **options: bool) -> FaultServer:
    server = FaultServer(**options)
    server.default = Respond(200, body=b"from origin")
    await nursery.start(server.serve)
    return server


# --- SOCKS5 ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scheme", "sent"), [("socks5h", ("domain", "localhost")), ("socks5", ("ipv4", "127.0.0.1"))]
)
async def test_socks5_resolves_where_the_scheme_says(
    nursery: trio.Nursery, scheme: str, sent: tuple[str, str]
) -> None:
    server = await _origin(nursery, http2=False)
    socks = SocksServer()
    await nursery.start(socks.serve)
    url = f"http://localhost:{server.port}/via-socks"
    async with trio_retry.Client(retry=FAST, proxy=f"{scheme}://{socks.url}") as client:
        with trio.fail_after(LIMIT):
            response = await client.get(url)
            again = await client.get(url)
    assert response.content == again.content == b"from origin"
    assert socks.connects == [(*sent, server.port)]  # one tunnel, reused
    # Tunnelled: the origin sees an origin-form request, as without a proxy.
    assert [r.path for r in server.requests] == ["/via-socks"] * 2


async def test_socks5_with_credentials(nursery: trio.Nursery) -> None:
    server = await _origin(nursery, http2=False)
    socks = SocksServer(credentials=("alice", "s3cr:et"))
    await nursery.start(socks.serve)
    proxy = f"socks5h://alice:s3cr%3Aet@{socks.url}"
    async with trio_retry.Client(retry=FAST, proxy=proxy) as client:
        with trio.fail_after(LIMIT):
            assert (await client.get(server.url + "/")).content == b"from origin"
    assert "s3cr" not in repr(ProxyConfig.parse(proxy))


@pytest.mark.parametrize("http2", [False, True], ids=["h1", "h2"])
async def test_tls_and_alpn_through_a_socks_tunnel(nursery: trio.Nursery, http2: bool) -> None:
    server = await _origin(nursery, tls=True, http2=http2)
    socks = SocksServer()
    await nursery.start(socks.serve)
    async with trio_retry.Client(
        retry=FAST, proxy=f"socks5h://{socks.url}", verify=server.client_ssl_context()
    ) as client:
        with trio.fail_after(LIMIT):
            response = await client.get(server.url + "/")
    assert response.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
    assert socks.connects == [("ipv4", "127.0.0.1", server.port)]


async def test_h2c_through_a_socks_tunnel(nursery: trio.Nursery) -> None:
    server = await _origin(nursery, http2=True)
    socks = SocksServer()
    await nursery.start(socks.serve)
    async with trio_retry.Client(
        retry=FAST, proxy=f"socks5://{socks.url}", http2_prior_knowledge=True
    ) as client:
        with trio.fail_after(LIMIT):
            assert (await client.get(server.url + "/")).http_version == "HTTP/2"


def _assert_not_sent_at_connect(error: trio_retry.RequestFailed, attempts: int) -> None:
    assert isinstance(error, trio_retry.ConnectFailed)
    assert error.evidence is Evidence.NOT_SENT
    assert {(a.stage, a.evidence) for a in error.attempts} == {(Stage.CONNECT, Evidence.NOT_SENT)}
    assert len(error.attempts) == attempts


@pytest.mark.parametrize(
    ("socks", "proxy_userinfo", "message"),
    [
        (SocksServer(credentials=("alice", "right")), "alice:wrong@", "rejected the username"),
        (SocksServer(credentials=("alice", "right")), "", "requires authentication"),
        (SocksServer(reply=5), "", "connection refused by the target"),
        (SocksServer(reply=2), "", "not allowed by ruleset"),
    ],
    ids=["bad-credentials", "no-credentials", "target-refused", "ruleset"],
)
async def test_a_socks_refusal_is_not_sent_even_for_post(
    nursery: trio.Nursery, socks: SocksServer, proxy_userinfo: str, message: str
) -> None:
    server = await _origin(nursery, http2=False)
    await nursery.start(socks.serve)
    proxy = f"socks5h://{proxy_userinfo}{socks.url}"
    async with trio_retry.Client(retry=FAST, proxy=proxy) as client:
        with trio.fail_after(LIMIT), pytest.raises(trio_retry.ConnectFailed, match=message) as e:
            await client.post(server.url + "/", content=b"once")
    _assert_not_sent_at_connect(e.value, FAST.max_attempts)  # retried: nothing was sent
    assert server.requests == []


@pytest.mark.parametrize("scheme", ["socks5h", "socks5", "http", "https"])
async def test_an_unreachable_proxy_is_not_sent(scheme: str) -> None:
    proxy = f"{scheme}://127.0.0.1:{refused_port()}"
    async with trio_retry.Client(retry=FAST, proxy=proxy) as client:
        for url in ("http://localhost:9/", "https://localhost:9/"):
            with trio.fail_after(LIMIT), pytest.raises(trio_retry.ConnectFailed) as info:
                await client.post(url, content=b"x")
            _assert_not_sent_at_connect(info.value, FAST.max_attempts)


async def test_a_proxy_that_closes_mid_handshake_is_not_sent(nursery: trio.Nursery) -> None:
    async def hang_up(stream: trio.SocketStream) -> None:
        await stream.receive_some(10)
        await stream.send_all(b"\x05")  # half a reply, then gone
        await stream.aclose()

    listeners = await nursery.start(trio.serve_tcp, hang_up, 0)
    port = listeners[0].socket.getsockname()[1]
    async with trio_retry.Client(retry=FAST, proxy=f"socks5h://127.0.0.1:{port}") as client:
        with trio.fail_after(LIMIT), pytest.raises(trio_retry.ConnectFailed, match="closed") as e:
            await client.put("http://localhost/", content=b"x")
    _assert_not_sent_at_connect(e.value, FAST.max_attempts)


@pytest.mark.parametrize(
    ("userinfo", "replies", "which"),
    [
        ("", [b"\x04\x00"], "method selection"),  # SOCKS4's version: not "no auth"
        ("u:p@", [b"\x05\x02", b"\x04\x00"], "username/password"),  # 1 (or 5) expected
        ("", [b"\x05\x00", b"\x04\x00\x00\x01" + bytes(6)], "CONNECT"),
    ],
    ids=["greeting-v4", "auth-v4", "connect-v4"],
)
async def test_a_socks_reply_with_the_wrong_version_fails_at_once(
    nursery: trio.Nursery, userinfo: str, replies: list[bytes], which: str
) -> None:
    """A greeting answered ``04 00`` was read as "no authentication": the client sent its
    CONNECT and waited out its deadline, with a message that never named SOCKS."""

    async def hostile(stream: trio.SocketStream) -> None:
        for reply in replies:
            await stream.receive_some(512)
            await stream.send_all(reply)
        while await stream.receive_some(512):
            pass  # silent from here on

    listeners = await nursery.start(partial(trio.serve_tcp, hostile, 0, host="127.0.0.1"))
    port = listeners[0].socket.getsockname()[1]
    proxy = f"socks5://{userinfo}127.0.0.1:{port}"
    async with trio_retry.Client(retry=FAST, proxy=proxy) as client:
        with trio.fail_after(2), pytest.raises(trio_retry.ConnectFailed) as info:
            await client.post("http://127.0.0.1:9/", content=b"x")
    error = info.value
    _assert_not_sent_at_connect(error, FAST.max_attempts)
    assert error.category is FailureCategory.CONNECT
    assert f"malformed SOCKS5 {which} reply" in str(error)


def test_socks_without_the_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "socksio", None)
    # A constructor argument: ValueError (SPEC §11), naming the extra to install.
    with pytest.raises(ValueError, match=r"pip install 'trio_retry\[socks\]'"):
        trio_retry.Client(proxy="socks5://127.0.0.1:1080")


def test_proxy_url_forms() -> None:
    assert str(ProxyConfig.parse("socks5h://proxy")) == "socks5h://proxy:1080"
    assert str(ProxyConfig.parse("https://proxy")) == "https://proxy:443"
    # From the environment, a bare host:port means http:// (as in curl); never for proxy=.
    assert str(ProxyConfig.parse("proxy:3128")) == "http://proxy:3128"
    with pytest.raises(trio_retry.InvalidRequest, match="socks5h://"):
        ProxyConfig.parse("ftp://proxy")


@pytest.mark.parametrize(
    ("proxy", "got"),
    [
        ("garbage", "without a scheme"),  # before: accepted, then a DNS lookup on every call
        ("proxy:3128", "without a scheme"),
        ("ftp://proxy", "scheme 'ftp'"),
        ("http://", "no host"),
        ("http://alice:s3cret@:3128", "no host"),
        ("http://alice:s3cret@proxy:99999", "port that is not a number"),
        ("http://alice:s3cret@proxy:abc", "port that is not a number"),
        ("http://alice:s3/cret@proxy", "port that is not a number"),  # an unescaped "/"
        ("http://proxy:0", "port 0"),
        ("http://[::1", "malformed host"),
        ("http://proxy:3128/path?q=1", "path, query or fragment"),
    ],
)
def test_a_malformed_proxy_url_is_refused_at_construction(proxy: str, got: str) -> None:
    with pytest.raises(ValueError, match=r"^proxy: ") as info:
        trio_retry.Client(proxy=proxy)
    message = str(info.value)
    assert got in message
    assert "http://, https://, socks5:// or socks5h:// with a host" in message
    assert "s3" not in message  # never the credentials
    assert "cret" not in message


@pytest.mark.parametrize(
    "proxy",
    ["http://proxy.example", "https://alice:s3cret@proxy.example:8443/", "http://[::1]:3128"],
)
def test_a_well_formed_proxy_url_is_accepted(proxy: str) -> None:
    trio_retry.Client(proxy=proxy)


# --- https:// proxies ------------------------------------------------------------------------


async def test_https_proxy_tunnels_tls_and_forwards_cleartext(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    tls_origin = await _origin(nursery, tls=True, http2=True)
    plain_origin = await _origin(nursery, http2=False)
    proxy = TLSProxy(require_auth="Basic dTpw")  # u:p
    await nursery.start(proxy.serve)
    verify = _bundle(tmp_path, proxy.ca, tls_origin.ca_pem)
    async with trio_retry.Client(
        retry=FAST, proxy=f"https://u:p@localhost:{proxy.port}", verify=verify
    ) as client:
        with trio.fail_after(LIMIT):
            secure = await client.get(tls_origin.url + "/t")
            plain = await client.get(plain_origin.url + "/p")
    assert secure.content == plain.content == b"from origin"
    assert secure.http_version == "HTTP/2"  # ALPN to the origin is the client's own
    assert proxy.seen == [
        f"CONNECT 127.0.0.1:{tls_origin.port} HTTP/1.1",
        f"GET {plain_origin.url}/p HTTP/1.1",
    ]


async def test_an_untrusted_https_proxy_is_not_sent(nursery: trio.Nursery) -> None:
    origin = await _origin(nursery, http2=False)
    proxy = TLSProxy()
    await nursery.start(proxy.serve)
    async with trio_retry.Client(retry=FAST, proxy=f"https://localhost:{proxy.port}") as client:
        with trio.fail_after(LIMIT), pytest.raises(trio_retry.TLSFailed, match="proxy") as e:
            await client.post(origin.url + "/", content=b"x")
    error = e.value
    assert (error.evidence, error.category) == (Evidence.NOT_SENT, FailureCategory.TLS_CERTIFICATE)
    assert error.attempts[-1].stage is Stage.CONNECT
    assert proxy.seen == []
    assert origin.requests == []


# --- the environment -------------------------------------------------------------------------


async def test_trust_env_all_proxy_https_proxy_and_no_proxy(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = await _origin(nursery, http2=False)
    secure = await _origin(nursery, tls=True, http2=False)
    socks = SocksServer()
    await nursery.start(socks.serve)
    http_proxy = LoopbackProxy()
    await nursery.start(http_proxy.serve)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.setenv("ALL_PROXY", f"socks5h://{socks.url}")
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{http_proxy.port}")
    monkeypatch.setenv("NO_PROXY", "example.invalid")
    async with trio_retry.Client(
        retry=FAST, trust_env=True, verify=secure.client_ssl_context()
    ) as client:
        with trio.fail_after(LIMIT):
            await client.get(f"http://localhost:{plain.port}/")  # ALL_PROXY: socks
            await client.get(secure.url + "/")  # HTTPS_PROXY
    assert socks.connects == [("domain", "localhost", plain.port)]
    assert http_proxy.seen == [f"CONNECT 127.0.0.1:{secure.port} HTTP/1.1"]
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    async with trio_retry.Client(
        retry=FAST, trust_env=True, verify=secure.client_ssl_context()
    ) as client:
        with trio.fail_after(LIMIT):
            await client.get(f"http://localhost:{plain.port}/")
            await client.get(secure.url + "/")
    assert len(socks.connects) == 1
    assert len(http_proxy.seen) == 1
    assert len(plain.requests) == len(secure.requests) == 2
