"""A large body over TLS leaves in full TCP segments, on either TLS stream, to nginx and to
FaultServer.

OpenSSL writes each TLS record (16 KiB) with a system call of its own; with ``TCP_NODELAY``
each left as a segment of its own, where ``trio.SSLStream``'s one write of many records leaves
in segments of the path's MSS (64 KiB on loopback). The server then woke once per record, and
over HTTP/2 answered with more WINDOW_UPDATE frames: on a busy machine a 50 MB upload on the
socket path took about twice the wall time (docs/benchmarks.md, "TLS on the socket"). The
segments the client's socket sent are counted by the kernel (``TCP_INFO``'s
``tcpi_data_segs_out``, Linux 4.6+).
"""

from __future__ import annotations

import os
import socket
import struct
import sys
from typing import Any

import pytest
import trio

import trio_retry
from tests.support.fixtures import StartNginx
from tests.support.fixtures import nginx as nginx
from trio_retry._wire.rawsock import raw_stream_of
from trio_retry._wire.tlschoice import ENV
from trio_retry._wire.tlssock import TLSSocketStream
from trio_retry.testing import FaultServer

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="counts segments with Linux's TCP_INFO"
)

BODY = os.urandom(4_000_000)
STREAMS = {"socket": TLSSocketStream, "sslstream": trio.SSLStream}


@pytest.fixture(params=list(STREAMS))
def stream(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(ENV, "1" if request.param == "socket" else "0")
    return str(request.param)


def _segments(sock: socket.socket) -> tuple[int, int]:
    """(the MSS, the data segments sent so far) of a TCP socket, from ``TCP_INFO``."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 160)
    assert len(info) >= 160, "this kernel's tcp_info has no tcpi_data_segs_out"
    return struct.unpack_from("I", info, 16)[0], struct.unpack_from("I", info, 156)[0]


async def _upload(client: trio_retry.Client, url: str, http_version: str) -> tuple[int, int, type]:
    """POST :data:`BODY` to ``url`` after a GET that opens the connection; (the segments its
    body took, the MSS, the TLS stream's type)."""
    streams: list[Any] = []
    connector = client._rt.connector
    opener = connector.open_transport

    async def open_transport(*args: Any, **kwargs: Any) -> Any:
        transport = await opener(*args, **kwargs)
        streams.append(transport.stream)
        return transport

    connector.open_transport = open_transport
    with trio.fail_after(30):
        assert (await client.get(url)).status == 200
        (tls,) = streams
        raw = raw_stream_of(tls)
        assert raw is not None
        _, before = _segments(raw.raw_socket)
        response = await client.post(url, content=BODY, headers={"x-request-id": "big"})
        mss, after = _segments(raw.raw_socket)
    assert (response.status, response.http_version) == (200, http_version)
    assert streams == [tls]  # the same connection
    return after - before, mss, type(tls)


def _assert_full_segments(stream: str, tls: type, sent: int, mss: int) -> None:
    # Full segments would be len(BODY) / mss (61 on loopback); one per record would be 245.
    # (Measured, 4 MB to nginx: trio.SSLStream 79-82, the socket path 222-250 before the
    # fix, 78-85 after.)
    least = -(-len(BODY) // mss)
    assert least <= sent <= 2 * least, (
        f"{stream}: {sent} segments of at most {mss} bytes for {len(BODY)}"
    )
    assert tls is STREAMS[stream]


@pytest.mark.parametrize("http2", [False, True], ids=["http1.1", "http2"])
async def test_nginx_receives_a_large_body_in_full_segments(
    stream: str, nginx: StartNginx, http2: bool
) -> None:
    server = nginx(client_max_body_size="10m")
    async with trio_retry.Client(ssl_context=server.ssl_context(http2=http2), http2=http2) as c:
        sent, mss, tls = await _upload(c, server.h2_url("/post"), "HTTP/2" if http2 else "HTTP/1.1")
    _assert_full_segments(stream, tls, sent, mss)
    (posted,) = [e for e in server.log(expect=2).entries if e.request_id == "big"]
    assert (posted.status, posted.method) == (200, "POST")
    assert posted.request_length >= len(BODY)  # nginx read the whole body


async def test_fault_server_receives_a_large_body_in_full_segments(
    stream: str, nursery: trio.Nursery
) -> None:
    server = FaultServer(tls=True, http2=False)
    await nursery.start(server.serve)
    async with trio_retry.Client(ssl_context=server.client_ssl_context()) as c:
        sent, mss, tls = await _upload(c, server.url + "/up", "HTTP/1.1")
    _assert_full_segments(stream, tls, sent, mss)
    assert [r.body for r in server.requests] == [b"", BODY]
