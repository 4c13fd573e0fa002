"""The command line against a server we did not write: nginx, started here on loopback
(:mod:`tests.support.nginx`).

Static files as production serves them (sendfile, gzip for text), a redirect, and a PUT
that nginx's WebDAV module stores; nginx's own access log says what it received. Skipped
when nginx is not installed.
"""

from __future__ import annotations

import gzip
import hashlib
import random
from pathlib import Path

from tests.support.fixtures import StartNginx
from tests.support.fixtures import nginx as nginx

from .support import cli

SERVER = """
    server {
        listen {{host}}:{{files}};
        root {{workdir}}/html;
        sendfile on;
        gzip on;
        gzip_types text/plain;
        gzip_min_length 0;
        types { text/plain txt; application/octet-stream bin; }
        location = /old { return 301 /blob.bin; }
        location /files/ { client_max_body_size 20m; dav_methods PUT; }
    }
"""


async def test_against_nginx(nginx: StartNginx, tmp_path: Path) -> None:
    server = nginx(servers=SERVER, listeners=("files",))
    html = server.workdir / "html"
    url = server.url("files", "")
    blob = random.Random(7).randbytes(5 * 1024 * 1024)
    (html / "blob.bin").write_bytes(blob)
    text = ("line %d: café\n" * 2000 % tuple(range(2000))).encode()
    (html / "notes.txt").write_bytes(text)

    target = tmp_path / "blob.bin"
    saved = await cli("get", url + "/blob.bin", "-o", str(target))
    assert saved.code == 0
    assert hashlib.sha256(target.read_bytes()).digest() == hashlib.sha256(blob).digest()

    piped = await cli("get", url + "/old", "-L", "-i", "--explain")
    assert piped.code == 0
    heads, _, body = piped.out.partition(b"\r\n\r\nHTTP/1.1 200 OK\r\n")
    assert heads.startswith(b"HTTP/1.1 301 Moved Permanently\r\n")
    assert body.split(b"\r\n\r\n", 1)[1] == blob
    assert f"hop 2: GET {url}/blob.bin -> 200" in piped.err_text

    decoded = await cli("get", url + "/notes.txt", "-i")
    assert decoded.code == 0
    head, _, body = decoded.out.partition(b"\r\n\r\n")
    assert b"Content-Encoding: gzip" in head  # nginx compressed it; the output is decoded
    assert body == text
    assert len(gzip.compress(text)) < len(text)

    (html / "files").mkdir()
    upload = tmp_path / "up.bin"
    upload.write_bytes(blob[::-1])
    sent = await cli("put", url + "/files/up.bin", "-T", str(upload))
    assert sent.code == 0
    stored = (html / "files" / "up.bin").read_bytes()  # what nginx wrote to disk
    assert hashlib.sha256(stored).digest() == hashlib.sha256(blob[::-1]).digest()

    log = server.log(expect=5).entries
    assert [(entry.method, entry.uri) for entry in log] == [
        ("GET", "/blob.bin"),
        ("GET", "/old"),
        ("GET", "/blob.bin"),
        ("GET", "/notes.txt"),
        ("PUT", "/files/up.bin"),
    ]
    assert log[0].bytes_sent > len(blob)  # nginx sent the whole file once per GET
    assert log[-1].request_length > len(blob)  # and read the whole upload
