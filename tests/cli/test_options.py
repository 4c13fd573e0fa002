"""curl's options, with curl's meanings, run as subprocesses against loopback servers."""

from __future__ import annotations

import base64
import contextlib
import json
import socket
from pathlib import Path

import trio

import trio_retry
from tests.client.proxy import LoopbackProxy
from trio_retry.testing import FaultServer, Respond, Stall, refused_port

from .support import cli

SECRET = "s3cret-pw"


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def test_redirects_method_auth_and_the_default_scheme(nursery: trio.Nursery) -> None:
    server = FaultServer(http2=False)
    url = await nursery.start(server.serve)
    server.route("GET", "/old", Respond(301, headers={"Location": "/new"}))
    server.route("GET", "/new", Respond(200, headers={"X-Hop": "2"}, body=b"moved here"))
    server.route("GET", "/old", Respond(301, headers={"Location": "/new"}))
    server.route("GET", "/old", Respond(301, headers={"Location": "/new"}))

    followed = await cli("get", url + "/old", "-L", "-i", "--explain", "-u", f"ada:{SECRET}")
    assert followed.code == 0
    heads, _, body = followed.out.rpartition(b"\r\n\r\n")
    assert body == b"moved here"
    assert followed.out.startswith(b"HTTP/1.1 301\r\n")  # -i -L: every hop's head, as curl
    assert b"\r\n\r\nHTTP/1.1 200\r\n" in followed.out
    assert b"x-hop: 2" in heads.lower()
    trail = followed.err_text
    assert f"hop 1: GET {url}/old -> 301" in trail
    assert f"hop 2: GET {url}/new -> 200" in trail
    assert [r.header("authorization") for r in server.requests] == [basic("ada", SECRET)] * 2
    assert SECRET not in trail

    limited = await cli("get", url + "/old", "-L", "--max-redirs", "0")
    assert limited.code == 1
    assert limited.err_text.startswith("FAILED (TooManyRedirects)")

    not_followed = await cli("get", url.removeprefix("http://") + "/old")  # http:// assumed
    assert not_followed.code == 0
    assert not_followed.out == b""  # a 301 without -L is the answer

    server.route("PURGE", "/cache", Respond(200, body=b"purged"))
    purged = await cli("get", url + "/cache", "-X", "purge")
    assert (purged.code, purged.out) == (0, b"purged")

    server.route("OPTIONS", "/", Respond(204, headers={"Allow": "GET, OPTIONS"}))
    options = await cli("options", url + "/", "-i")
    assert options.code == 0
    assert b"allow: get, options" in options.out.lower()

    server.route("HEAD", "/h", Respond(200, headers={"X-Len": "9"}))
    head = await cli("head", url + "/h")  # like curl -I: the head is the output
    assert head.code == 0
    assert head.out.startswith(b"HTTP/1.1 200")

    # user:password@ in the URL is taken as Basic credentials and never shown.
    server.route("GET", "/me", Respond(404))
    shown = await cli("get", url.replace("://", f"://bob:{SECRET}@") + "/me", "--explain")
    assert shown.code == 4
    assert server.requests[-1].header("authorization") == basic("bob", SECRET)
    assert SECRET not in shown.err_text + shown.out.decode()


async def test_bodies_as_curl_sends_them(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = FaultServer(http2=False)
    url = await nursery.start(server.serve)
    server.default = Respond(200, body=b"ok")
    lines = tmp_path / "lines.txt"
    lines.write_bytes(b"a=1\r\nb=2\n")
    doc = tmp_path / "doc.json"
    doc.write_text('{"amount": 10}')

    async def sent(*args: str, stdin: bytes = b"") -> trio_retry.testing.RecordedRequest:
        ran = await cli("post", url + "/in", *args, stdin=stdin)
        assert ran.code == 0, ran.err_text
        return server.requests[-1]

    joined = await sent("-d", "name=ada", "-d", f"@{lines}", "--data-raw", "@literal")
    assert joined.body == b"name=ada&a=1b=2&@literal"  # -d @file drops CR and LF
    assert joined.header("content-type") == "application/x-www-form-urlencoded"
    binary = await sent("--data-binary", f"@{lines}", "-H", "Content-Type: text/plain")
    assert binary.body == b"a=1\r\nb=2\n"
    assert binary.header("content-type") == "text/plain"
    piped = await sent("-d", "@-", stdin=b"from\nstdin")
    assert piped.body == b"fromstdin"
    piped_binary = await sent("--data-binary", "@-", stdin=b"\x00\xff\n")
    assert piped_binary.body == b"\x00\xff\n"
    as_json = await sent("--json", f"@{doc}")
    assert json.loads(as_json.body) == {"amount": 10}
    assert as_json.header("content-type") == "application/json"
    assert as_json.header("accept") == "application/json"
    streamed = await sent("-T", "-", stdin=b"x" * 100_000)  # stdin, chunked, one-shot
    assert streamed.body == b"x" * 100_000
    assert streamed.header("transfer-encoding") == "chunked"


async def test_tls_insecure_cacert_and_ssl_cert_file(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = FaultServer(tls=True, http2=True)
    url = await nursery.start(server.serve)
    server.default = Respond(200, body=b"secure")
    ca = tmp_path / "ca.pem"
    ca.write_bytes(server.ca_pem)  # the server's private CA, written for the command line

    untrusted = await cli("get", url + "/", "--explain")
    assert untrusted.code == 1
    assert "TLS_CERTIFICATE" in untrusted.err_text

    insecure = await cli("get", url + "/", "-k")
    assert (insecure.code, insecure.out) == (0, b"secure")
    assert insecure.err_text.startswith("warning: -k/--insecure: the server's TLS certificate")

    trusted = await cli("get", url + "/", "--cacert", str(ca), "--http2", "--explain")
    assert (trusted.code, trusted.out) == (0, b"secure")
    assert "HTTP/2 200" in trusted.err_text

    one_one = await cli("get", url + "/", "--cacert", str(ca), "--http2", "--http1.1", "--explain")
    assert one_one.code == 0
    assert "HTTP/1.1 200" in one_one.err_text  # the last of --http2 / --http1.1 wins

    from_env = await cli("get", url + "/", env={"SSL_CERT_FILE": str(ca)})  # trust_env
    assert (from_env.code, from_env.out) == (0, b"secure")


async def test_proxy_option_and_environment(nursery: trio.Nursery) -> None:
    server = FaultServer(http2=False)
    url = await nursery.start(server.serve)
    server.default = Respond(200, body=b"origin")
    proxy = LoopbackProxy()
    port = await nursery.start(proxy.serve)

    through = await cli("get", url + "/a", "--proxy", f"127.0.0.1:{port}")  # http:// assumed
    assert (through.code, through.out) == (0, b"origin")
    assert proxy.seen == [f"GET {url}/a HTTP/1.1"]

    from_env = await cli("get", url + "/b", env={"HTTP_PROXY": f"http://127.0.0.1:{port}"})
    assert (from_env.code, from_env.out) == (0, b"origin")
    assert proxy.seen[-1] == f"GET {url}/b HTTP/1.1"

    bypassed = await cli(
        "get", url + "/c", env={"HTTP_PROXY": f"http://127.0.0.1:{port}", "NO_PROXY": "127.0.0.1"}
    )
    assert bypassed.code == 0
    assert len(proxy.seen) == 2  # NO_PROXY: straight to the origin

    bad = await cli("get", url + "/d", "--proxy", "ftp://127.0.0.1:1")
    assert bad.code == 2
    assert bad.err_text.count("\n") == 1
    assert "argument --proxy" in bad.err_text


async def test_max_time_attempts_and_idempotency_key(nursery: trio.Nursery) -> None:
    server = FaultServer(http2=False)
    url = await nursery.start(server.serve)
    server.route("GET", "/slow", Stall(5))
    late = await cli("get", url + "/slow", "--max-time", "0.3", "--explain")
    assert late.code == 1
    assert "DeadlineExceeded" in late.err_text
    assert "TIMEOUT" in late.err_text

    server.route("POST", "/slow", Stall(5))
    maybe = await cli("post", url + "/slow", "-d", "x", "-m", "0.3", "--explain")
    assert maybe.code == 3  # a deadline mid-flight on a POST: it may have run
    assert "execution: it may have executed: reconcile" in maybe.err_text

    server.route("PUT", "/k", Respond(503), Respond(503), Respond(200, body=b"done"))
    keyed = await cli("put", url + "/k", "-d", "v", "--idempotency-key", "order-7")
    assert (keyed.code, keyed.out) == (0, b"done")
    assert [r.header("idempotency-key") for r in server.requests[-3:]] == ["order-7"] * 3

    server.route("GET", "/once", Respond(503), Respond(200))
    once = await cli("get", url + "/once", "--attempts", "1")
    assert once.code == 4
    assert len([r for r in server.requests if r.path == "/once"]) == 1


async def test_http2_prior_knowledge_silent_version(nursery: trio.Nursery) -> None:
    server = FaultServer(http2=True)
    url = await nursery.start(server.serve)
    server.route("GET", "/h2", Respond(200, body=b"over h2c"))
    h2c = await cli("get", url + "/h2", "--http2-prior-knowledge", "--explain")
    assert (h2c.code, h2c.out) == (0, b"over h2c")
    assert "HTTP/2 200" in h2c.err_text

    refused = f"http://127.0.0.1:{refused_port()}/"
    quiet = await cli("get", refused, "-s", "--attempts", "1")
    assert (quiet.code, quiet.err) == (1, b"")  # -s: no error message (curl's meaning)
    shown = await cli("get", refused, "-sS", "--attempts", "1")
    assert shown.code == 1
    assert shown.err_text.startswith("FAILED (ConnectFailed, NOT_SENT)")

    version = await cli("--version")
    assert version.code == 0
    assert version.out.startswith(f"trio_retry {trio_retry.__version__} (Python 3.".encode())
    assert b"h11 " in version.out


async def test_connect_timeout() -> None:
    # A listener whose accept queue is full: the kernel drops further SYNs, so a connect
    # hangs (on loopback) until the client gives up.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        fillers = []
        try:
            for _ in range(4):
                filler = socket.socket()
                filler.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    filler.connect(("127.0.0.1", port))
                fillers.append(filler)
            ran = await cli(
                "get", f"http://127.0.0.1:{port}/", "--connect-timeout", "0.3", "--attempts", "1",
                "--explain",
            )  # fmt: skip
        finally:
            for filler in fillers:
                filler.close()
    assert ran.code == 1
    assert "TIMEOUT" in ran.err_text
    assert "CONNECT" in ran.err_text
    assert "execution: the server never received it" in ran.err_text
