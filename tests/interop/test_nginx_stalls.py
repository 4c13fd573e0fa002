"""Idle bounds on reads and writes against nginx, counted in nginx's own log:

- a body that stops in the middle (nginx proxying a backend that sends the head and half the
  body, then nothing) ends at the read bound;
- a healthy body nginx paces with ``limit_rate`` is never cut;
- an upload nginx stops taking (proxying, unbuffered, to a backend that stops reading) ends
  at the write bound over HTTP/1.1, and over HTTP/2, where nginx stops reopening the stream's
  window (the wait for window is a write that makes no progress);
- an upload nginx takes slowly, in bursts, is never cut, though each write takes longer than
  the write bound: the bound counts from nginx's last read.

These run on real time, so they use small explicit bounds (``StageTimeouts(read=1.0)``,
``StageTimeouts(write=1.0)``) for speed. ``Client()``'s defaults (``read=30``, ``write=30``)
are the same bounds, kept by the same mechanism (``_wire/clock.py``); tests/call/
test_bounded_defaults.py shows them under the defaults, on a MockClock."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import trio

import trio_retry
from tests.support.fixtures import StartNginx
from tests.support.nginx import NginxLog, RunningNginx
from trio_retry import Evidence, FailureCategory, Stage, StageTimeouts

ONCE = trio_retry.RetryPolicy(max_attempts=1)
#: The stalled response: its declared length, and how much of it the backend sends.
DECLARED = 2000
HALF = 1000
#: The paced file: 300 KB at 100 KB/s (about 3 s) through a 1.5 s read bound.
PACED = 300_000
MiB = 1024 * 1024
#: Real seconds: the bound on each call.
LIMIT = 15

LOCATIONS = """root {{workdir}}/html;
    location /paced.bin { limit_rate 100k; }
    location /stall {
        proxy_pass http://{{host}}:{{half_body}};
        proxy_buffering off;
        proxy_read_timeout 60s;
    }
    location /slow {
        proxy_pass http://unix:{{slow}}:;
        proxy_request_buffering off;
        proxy_http_version 1.1;
        client_max_body_size 0;
        client_body_buffer_size 16k;
    }
    location /deaf {
        proxy_pass http://{{host}}:{{deaf}};
        proxy_request_buffering off;
        proxy_http_version 1.1;
        client_max_body_size 0;
        proxy_send_timeout 60s;
        proxy_read_timeout 60s;
    }"""
SERVERS = f"""
  server {{ listen {{{{host}}}}:{{{{stalls}}}}; {LOCATIONS} }}
  server {{ listen {{{{host}}}}:{{{{stalls_h2_tls}}}} ssl http2; {{{{tls}}}} {LOCATIONS} }}
  server {{ listen {{{{host}}}}:{{{{narrow}}}} rcvbuf=16k; {LOCATIONS} }}
"""
#: The upload the slow backend takes: 768 KiB at about 80 KB/s (8 KiB every 0.1 s), through
#: nginx listening with a 16 KiB receive buffer (``narrow``): about 10 s in all. nginx reaches
#: that backend over a Unix socket, whose send buffer is fixed (TCP's would grow to megabytes
#: on loopback and take most of the upload at once), so nginx takes the upload about as fast
#: as the backend reads it. It takes it in bursts: a Unix socket is writable again only once
#: three quarters of its buffer (about 156 KiB of 208) drained, about 2 s here, during which
#: nginx reads nothing from us. One 256 KiB write takes about 3.3 s.
SLOW_UPLOAD = 768 * 1024
SLOW_PAUSE = 0.1
#: Between the two: longer than nginx's pauses, shorter than one write.
SLOW_WRITE = 2.6


async def _read_head(stream: trio.SocketStream) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data and len(data) < 65536:
        chunk = await stream.receive_some(1)  # the head only: no byte of a body with it
        if not chunk:
            break
        data += chunk
    return data


async def _read_slowly_and_answer(stream: trio.SocketStream, head: bytes) -> None:
    """The ``slow`` backend: the body of ``head``'s Content-Length, 8 KiB every 20 ms, then a
    200 whose body is the number of bytes read."""
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    got = 0
    for _ in range(length // 8192 + 64):  # bounded: more reads than the body needs
        if got >= length:
            break
        data = await stream.receive_some(8192)
        if not data:
            return
        got += len(data)
        await trio.sleep(SLOW_PAUSE)
    answer = str(got).encode()
    head_out = f"HTTP/1.1 200 OK\r\nContent-Length: {len(answer)}\r\n\r\n"
    await stream.send_all(head_out.encode() + answer)


async def _backend(
    act: str,
    unix_path: str | None = None,
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """nginx's upstream. ``half_body``: read the head, send a head promising DECLARED bytes
    and HALF of them, then nothing. ``deaf``: read the head, then never read again. ``slow``
    (on the Unix socket ``unix_path``): read the body slowly, then answer. Each connection is
    held 30 s at most, and everything closes when the test cancels it."""
    if unix_path is None:
        (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
    else:
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        await sock.bind(unix_path)
        sock.listen(8)
        listener = trio.SocketListener(sock)
    async with listener:
        task_status.started(0 if unix_path else listener.socket.getsockname()[1])
        async with trio.open_nursery() as nursery:
            while True:
                stream = await listener.accept()

                async def serve(stream: trio.SocketStream = stream) -> None:
                    async with stream:
                        head = await _read_head(stream)
                        if act == "slow":
                            await _read_slowly_and_answer(stream, head)
                            return
                        if act == "half_body":
                            head = f"HTTP/1.1 200 OK\r\nContent-Length: {DECLARED}\r\n\r\n"
                            await stream.send_all(head.encode() + b"h" * HALF)
                        await trio.sleep(30)

                nursery.start_soon(serve)


async def _start(nginx: StartNginx, nursery: trio.Nursery, tmp: Path | None = None) -> RunningNginx:
    """nginx and its backends; the ``slow`` one only with ``tmp`` (for its Unix socket)."""
    half_body = await nursery.start(_backend, "half_body")
    deaf = await nursery.start(_backend, "deaf")
    slow = "/nonexistent/slow.sock"  # nginx checks it only when /slow is asked for
    if tmp is not None:
        slow = str(tmp / "slow.sock")
        await nursery.start(_backend, "slow", slow)
    return nginx(
        servers=SERVERS,
        listeners=("stalls", "stalls_h2_tls", "narrow"),
        values={"half_body": half_body, "deaf": deaf, "slow": slow},
        files={"html/paced.bin": b"p" * PACED},
    )


def _client(server: RunningNginx, http2: bool, timeouts: StageTimeouts) -> trio_retry.Client:
    if http2:
        return trio_retry.Client(
            retry=ONCE, stage_timeouts=timeouts, ssl_context=server.ssl_context()
        )
    return trio_retry.Client(retry=ONCE, stage_timeouts=timeouts)


def _base(server: RunningNginx, http2: bool) -> str:
    return server.url("stalls_h2_tls" if http2 else "stalls", "")


@pytest.mark.parametrize("http2", [False, True], ids=["h1", "h2"])
async def test_a_body_stalled_behind_nginx_ends_at_the_read_bound(
    nginx: StartNginx, http2: bool
) -> None:
    async with trio.open_nursery() as nursery:
        server = await _start(nginx, nursery)
        async with _client(server, http2, StageTimeouts(read=1.0)) as client:
            start = trio.current_time()
            with trio.fail_after(LIMIT), pytest.raises(trio_retry.DeadlineExceeded) as info:
                await client.get(_base(server, http2) + "/stall", headers={"x-request-id": "s"})
            elapsed = trio.current_time() - start
        log = server.log(expect=1)
        nursery.cancel_scope.cancel()
    (attempt,) = info.value.attempts
    assert attempt.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
    assert (attempt.stage, attempt.evidence, attempt.category) == (
        Stage.RESPONSE_BODY,
        Evidence.PARTIAL_RESPONSE,
        FailureCategory.TIMEOUT,
    )
    assert attempt.bytes_received >= HALF
    assert "no body data within read=1 s" in str(info.value)
    assert 1.0 <= elapsed < 3.0
    (entry,) = log.entries
    assert entry.request_id == "s"
    assert entry.status == 200
    assert entry.body_bytes_sent == HALF  # nginx passed on half the body, then we left


@pytest.mark.parametrize("http2", [False, True], ids=["h1", "h2"])
async def test_a_body_nginx_paces_with_limit_rate_is_not_cut(
    nginx: StartNginx, http2: bool
) -> None:
    """300 KB at ``limit_rate 100k``: about 3 s in all, twice the 1.5 s read bound, but no
    wait for a byte as long (nginx paces per second: its pauses stay under a second)."""
    async with trio.open_nursery() as nursery:
        server = await _start(nginx, nursery)
        async with _client(server, http2, StageTimeouts(read=1.5)) as client:
            with trio.fail_after(LIMIT):
                start = trio.current_time()
                response = await client.get(
                    _base(server, http2) + "/paced.bin", headers={"x-request-id": "p"}
                )
            elapsed = trio.current_time() - start
        log = server.log(expect=1)
        nursery.cancel_scope.cancel()
    assert response.content == b"p" * PACED
    assert response.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
    assert len(response.attempts) == 1
    assert elapsed > 1.5  # longer than the read bound, yet not cut
    (entry,) = log.entries
    assert (entry.request_id, entry.status, entry.body_bytes_sent) == ("p", 200, PACED)


async def _put_to_deaf(nginx: StartNginx, http2: bool, limit: float) -> _Outcome:
    """A 64 MiB PUT through nginx (``proxy_request_buffering off``: nginx streams the body)
    to a backend that stops reading: nginx stops reading too, and the upload backs up behind
    the buffers."""
    async with trio.open_nursery() as nursery:
        server = await _start(nginx, nursery)
        async with _client(server, http2, StageTimeouts(write=1.0)) as client:
            start = trio.current_time()
            with trio.fail_after(limit), pytest.raises(trio_retry.RequestFailed) as info:
                await client.put(
                    _base(server, http2) + "/deaf",
                    content=b"u" * (64 * MiB),
                    headers={"x-request-id": "u"},
                )
            elapsed = trio.current_time() - start
        log = server.log()
        nursery.cancel_scope.cancel()
    return info.value, elapsed, log


_Outcome = tuple[trio_retry.RequestFailed, float, NginxLog]


async def test_h1_an_upload_nginx_stops_taking_ends_at_the_write_bound(
    nginx: StartNginx,
) -> None:
    error, elapsed, log = await _put_to_deaf(nginx, False, LIMIT)
    assert isinstance(error, trio_retry.DeadlineExceeded)
    (attempt,) = error.attempts
    assert (attempt.stage, attempt.evidence, attempt.category) == (
        Stage.REQUEST_BODY,
        Evidence.SENT_NO_RESPONSE,
        FailureCategory.TIMEOUT,
    )
    assert 0 < attempt.bytes_sent < 64 * MiB
    assert "the server read none of the request within write=1 s" in str(error)
    assert 1.0 <= elapsed < 3.0
    # nginx has not finished the request (it still waits to write to its backend, up to
    # proxy_send_timeout): nothing logged, so nothing executed.
    assert log.count(request_id="u") == 0


async def test_h2_an_upload_nginx_stops_taking_ends_at_the_write_bound(
    nginx: StartNginx,
) -> None:
    """Over HTTP/2 nginx stops taking the body by not reopening the stream's flow-control
    window (``http2_body_preread_size``, 64 KiB): no byte moves, the call should end at the
    1 s write bound."""
    error, elapsed, log = await _put_to_deaf(nginx, True, 4.0)
    assert isinstance(error, trio_retry.DeadlineExceeded)
    (attempt,) = error.attempts
    assert (attempt.stage, attempt.evidence, attempt.category) == (
        Stage.REQUEST_BODY,
        Evidence.SENT_NO_RESPONSE,
        FailureCategory.TIMEOUT,
    )
    assert 1.0 <= elapsed < 3.0
    # The client reset the stream: nginx ends the request as one whose body was cut short
    # (400, nothing sent back); the backend never answered it.
    (entry,) = log.entries
    assert (entry.request_id, entry.status, entry.body_bytes_sent) == ("u", 400, 0)


async def test_an_upload_nginx_takes_slowly_is_not_cut(nginx: StartNginx, tmp_path: Path) -> None:
    """Through nginx (unbuffered) to a backend reading about 80 KB/s, under a 2.6 s write
    bound: each 256 KiB write takes longer than the bound, but nginx takes bytes at least
    every ~2 s, and the bound counts from the last of them (``Bound.renew``). It ends at the
    bound without that (checked by turning the socket's progress reports off). HTTP/1.1
    only: over HTTP/2 nginx's flow-control window, not the socket, paces the upload, and no
    wait lasts long (tests/call/test_bounded_defaults.py shows that on a MockClock)."""
    async with trio.open_nursery() as nursery:
        server = await _start(nginx, nursery, tmp_path)
        async with _client(server, False, StageTimeouts(write=SLOW_WRITE)) as client:
            with trio.fail_after(LIMIT + 10):
                start = trio.current_time()
                response = await client.put(
                    server.url("narrow", "/slow"),
                    content=b"s" * SLOW_UPLOAD,
                    headers={"x-request-id": "w"},
                )
            elapsed = trio.current_time() - start
        log = server.log(expect=1)
        nursery.cancel_scope.cancel()
    assert response.status_code == 200
    assert response.content == str(SLOW_UPLOAD).encode()  # the backend read every byte
    assert len(response.attempts) == 1
    assert elapsed > 2 * SLOW_WRITE  # far longer than the write bound, yet not cut
    (entry,) = log.entries
    assert (entry.request_id, entry.status) == ("w", 200)
    assert entry.request_length >= SLOW_UPLOAD
