"""The command line against a server we did not write: nginx, started here on loopback.

Static files as production serves them (sendfile, gzip for text), a redirect, and a PUT
that nginx's WebDAV module stores; nginx's own access log says what it received. Skipped
when nginx is not installed.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from .support import cli

NGINX = shutil.which("nginx") or next(
    (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if Path(p).exists()), None
)
pytestmark = pytest.mark.skipif(NGINX is None, reason="nginx is not installed")

CONFIG = """
daemon off;
master_process off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 64; }}
http {{
    log_format trail '$request $status $request_length $bytes_sent';
    access_log {dir}/access.log trail;
    client_body_temp_path {dir}/tmp;
    proxy_temp_path {dir}/tmp;
    fastcgi_temp_path {dir}/tmp;
    uwsgi_temp_path {dir}/tmp;
    scgi_temp_path {dir}/tmp;
    sendfile on;
    gzip on;
    gzip_types text/plain;
    gzip_min_length 0;
    types {{ text/plain txt; application/octet-stream bin; }}
    server {{
        listen 127.0.0.1:{port};
        root {dir}/html;
        location = /old {{ return 301 /blob.bin; }}
        location /files/ {{ client_max_body_size 20m; dav_methods PUT; }}
    }}
}}
"""


@dataclass(frozen=True)
class Nginx:
    url: str
    html: Path
    log: Path

    def logged(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
        return True
    return False


@pytest.fixture
def nginx(tmp_path: Path) -> Iterator[Nginx]:
    assert NGINX is not None
    (tmp_path / "html").mkdir()
    (tmp_path / "tmp").mkdir()
    for _ in range(3):  # a free port can be taken between probing and binding
        port = _free_port()
        conf = tmp_path / "nginx.conf"
        conf.write_text(CONFIG.format(dir=tmp_path, port=port))
        proc = subprocess.Popen(
            [NGINX, "-p", str(tmp_path), "-c", str(conf), "-e", str(tmp_path / "error.log")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while proc.poll() is None and not _listening(port) and time.monotonic() < deadline:
            time.sleep(0.02)
        if proc.poll() is None and _listening(port):
            break
        proc.kill()
        proc.wait(5)
    else:
        pytest.fail("nginx did not start: " + (tmp_path / "error.log").read_text()[-500:])
    try:
        yield Nginx(f"http://127.0.0.1:{port}", tmp_path / "html", tmp_path / "access.log")
    finally:
        proc.terminate()
        proc.wait(10)


async def test_against_nginx(nginx: Nginx, tmp_path: Path) -> None:
    blob = random.Random(7).randbytes(5 * 1024 * 1024)
    (nginx.html / "blob.bin").write_bytes(blob)
    text = ("line %d: café\n" * 2000 % tuple(range(2000))).encode()
    (nginx.html / "notes.txt").write_bytes(text)

    target = tmp_path / "blob.bin"
    saved = await cli("get", nginx.url + "/blob.bin", "-o", str(target))
    assert saved.code == 0
    assert hashlib.sha256(target.read_bytes()).digest() == hashlib.sha256(blob).digest()

    piped = await cli("get", nginx.url + "/old", "-L", "-i", "--explain")
    assert piped.code == 0
    heads, _, body = piped.out.partition(b"\r\n\r\nHTTP/1.1 200 OK\r\n")
    assert heads.startswith(b"HTTP/1.1 301 Moved Permanently\r\n")
    assert body.split(b"\r\n\r\n", 1)[1] == blob
    assert f"hop 2: GET {nginx.url}/blob.bin -> 200" in piped.err_text

    decoded = await cli("get", nginx.url + "/notes.txt", "-i")
    assert decoded.code == 0
    head, _, body = decoded.out.partition(b"\r\n\r\n")
    assert b"Content-Encoding: gzip" in head  # nginx compressed it; the output is decoded
    assert body == text
    assert len(gzip.compress(text)) < len(text)

    (nginx.html / "files").mkdir()
    upload = tmp_path / "up.bin"
    upload.write_bytes(blob[::-1])
    sent = await cli("put", nginx.url + "/files/up.bin", "-T", str(upload))
    assert sent.code == 0
    stored = (nginx.html / "files" / "up.bin").read_bytes()  # what nginx wrote to disk
    assert hashlib.sha256(stored).digest() == hashlib.sha256(blob[::-1]).digest()

    log = nginx.logged()
    assert [line.split()[:2] for line in log] == [
        ["GET", "/blob.bin"],
        ["GET", "/old"],
        ["GET", "/blob.bin"],
        ["GET", "/notes.txt"],
        ["PUT", "/files/up.bin"],
    ]
    assert int(log[0].split()[5]) > len(blob)  # nginx sent the whole file once per GET
    assert int(log[-1].split()[4]) > len(blob)  # and read the whole upload
