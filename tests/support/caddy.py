"""A real caddy for HTTP/3 tests: started by the test itself on loopback, from the OS package.

Use the ``caddy`` fixture (a factory) from :mod:`tests.support.fixtures`, or
:func:`start_caddy` directly::

    server = caddy()
    async with open_h3_client(server.port, ca_pem=server.ca_pem) as client:
        await client.request("POST", "/echo", [("x-request-id", "p1")], b"body")
    assert server.backend.count(request_id="p1") == 1
    assert server.log().entries[-1].protocol == "HTTP/3.0"

What it starts: caddy with a JSON configuration generated into a fresh directory, one server
on a free 127.0.0.1 port speaking HTTP/1.1 and HTTP/2 over TLS on TCP and HTTP/3 on UDP (the
same port number; caddy 2.6 enables HTTP/3, and 0-RTT with it, by default, and advertises it
with ``Alt-Svc``). The certificate comes from ``trustme`` (valid for 127.0.0.1 and localhost),
loaded as files: no automatic HTTPS, no ACME, nothing written outside the directory.

Routes:

- ``/get``     ``200 "ok"`` (caddy itself, any method);
- ``/echo``    (and ``/echo/...``) proxied to a :class:`~tests.support.backend.Backend` in the test
  process: a POST's body echoed, a GET answered ``executed N``. The backend's ledger
  (``server.backend.executions``) is what was executed behind caddy, with the client's
  protocol at caddy (``client_proto``, e.g. ``HTTP/3.0``);
- ``/big.bin`` a static file of 1 MiB (``BIG``), from caddy's file server;
- ``/files/...`` what the test wrote under ``workdir / "html" / "files"``
  (:meth:`RunningCaddy.put_files`), from caddy's file server;
- ``/head/large`` ``200`` with a head of about 20 KB (``LARGE_HEAD``), ``/head/huge`` with one
  of about 100 KB (``HUGE_HEAD``), from caddy itself (its own QPACK encoding);
- anything else ``404``.

The access log (:meth:`RunningCaddy.log`) is caddy's JSON access log, one entry per request
caddy finished, with its protocol (``HTTP/3.0``), the ``x-request-id`` header, status and size.
Whether early data was accepted is not in it (caddy 2.6 logs its HTTP/3 requests' TLS details
empty, ``resumed`` false even on a resumed connection): a client sees it in its own handshake
(aioquic: ``HandshakeCompleted.early_data_accepted``).

A quirk a client must know: caddy 2.6.2 (its quic-go) hands an HTTP/3 request body that comes
without ``content-length`` to ``reverse_proxy`` as empty, and the backend executes the request
with no body. Send ``content-length`` whenever the length is known (browsers do).

When caddy cannot be had, :func:`find_caddy` returns ``None`` and the fixture skips with the
reason (``.ci/run`` installs it from the OS packages when it can).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import ssl
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from .backend import Backend
from .procs import (
    HOST,
    RequestLog,
    client_ssl_context,
    find_binary,
    free_tcp_udp_port,
    issue_certificate,
    logged_and_accepts,
    read_lines,
    stop_process,
    tail,
    wait_ready,
    write_files,
)

__all__ = [
    "BIG",
    "HUGE_HEAD",
    "LARGE_HEAD",
    "CaddyLog",
    "CaddyLogEntry",
    "CaddyUnavailable",
    "RunningCaddy",
    "caddy_version",
    "find_caddy",
    "start_caddy",
]

SKIP_REASON = (
    "caddy is not installed (looked for `caddy` on PATH and in /usr/bin, /usr/local/bin); "
    "`apt-get install -y caddy` (.ci/run does it when run as root) to run the HTTP/3 interop tests"
)
#: The static file's content (1 MiB), served at ``/big.bin``.
BIG = bytes(range(256)) * 4096
#: The extra fields of ``/head/large`` (40 of 500 bytes) and ``/head/huge`` (100 of 1,000).
LARGE_HEAD = {f"X-Large-{i}": "l" * 500 for i in range(40)}
HUGE_HEAD = {f"X-Huge-{i}": "h" * 1000 for i in range(100)}


class CaddyUnavailable(Exception):
    """caddy is not installed here, or would not start; the message says which."""


@dataclass(frozen=True, slots=True)
class CaddyLogEntry:
    """One request caddy finished, as its access log says."""

    protocol: str
    method: str
    uri: str
    status: int
    size: int
    request_id: str | None


class CaddyLog(RequestLog[CaddyLogEntry]):
    """The access log at one moment: what caddy finished."""

    def protocols(self) -> list[str]:
        return [entry.protocol for entry in self.entries]


@dataclass
class RunningCaddy:
    """A started caddy. :meth:`stop` ends it (the fixture does, even if the test failed)."""

    version: str
    port: int
    workdir: Path
    ca_pem: bytes
    process: subprocess.Popen[bytes]
    backend: Backend
    _contexts: list[ssl.SSLContext] = field(default_factory=list)

    def url(self, path: str) -> str:
        """``https://127.0.0.1:PORT/path``: TCP (h2, http/1.1) and UDP (h3) share the port."""
        return f"https://{HOST}:{self.port}{path}"

    def ssl_context(self, *, http2: bool = True) -> ssl.SSLContext:
        """A client context trusting this server's certificate authority."""
        return client_ssl_context(self.ca_pem, http2=http2)

    def log(self, *, expect: int | None = None, timeout: float = 5.0) -> CaddyLog:
        """The access log; with ``expect``, wait (at most ``timeout`` seconds) until it has at
        least that many entries, otherwise until it stops growing for 0.1 s."""
        lines = read_lines(self.workdir / "access.log", expect=expect, timeout=timeout)
        return CaddyLog(tuple(_parse(line) for line in lines))

    def put_files(self, files: Mapping[str, bytes]) -> None:
        """Write `files` (name -> content) for caddy's file server: served at
        ``/files/NAME``."""
        write_files(self.workdir / "html" / "files", files)

    def error_log(self) -> str:
        path = self.workdir / "caddy.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        """Stop caddy (SIGTERM, then SIGKILL after 5 s), the backend, and remove the directory."""
        stop_process(self.process)
        self.backend.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _parse(line: str) -> CaddyLogEntry:
    entry = json.loads(line)
    request = entry.get("request", {})
    headers = request.get("headers", {})
    request_ids = headers.get("X-Request-Id") or headers.get("x-request-id") or [None]
    return CaddyLogEntry(
        protocol=request.get("proto", ""),
        method=request.get("method", ""),
        uri=request.get("uri", ""),
        status=int(entry.get("status", 0)),
        size=int(entry.get("size", 0)),
        request_id=request_ids[0],
    )


def find_caddy() -> str | None:
    """The caddy binary, or ``None`` when it is not installed."""
    return find_binary("caddy", "/usr/bin/caddy", "/usr/local/bin/caddy")


def caddy_version(binary: str) -> str:
    out = subprocess.run([binary, "version"], capture_output=True, text=True, timeout=10)
    match = re.search(r"v?(\d+\.\d+\.\d+)", out.stdout)
    return match.group(1) if match else "unknown"


def _config(
    workdir: Path, port: int, backend_port: int, tls_policy: dict[str, Any]
) -> dict[str, Any]:
    proxy = {
        "handler": "reverse_proxy",
        "upstreams": [{"dial": f"{HOST}:{backend_port}"}],
        # The client's protocol at caddy, for the backend's ledger.
        "headers": {"request": {"set": {"X-Client-Proto": ["{http.request.proto}"]}}},
    }
    routes = [
        {
            "match": [{"path": ["/get"]}],
            "handle": [{"handler": "static_response", "status_code": 200, "body": "ok"}],
        },
        {"match": [{"path": ["/echo", "/echo/*"]}], "handle": [proxy]},
        *(
            {
                "match": [{"path": [path]}],
                "handle": [
                    {
                        "handler": "static_response",
                        "status_code": 200,
                        "headers": {name: [value] for name, value in fields.items()},
                        "body": "ok",
                    }
                ],
            }
            for path, fields in (("/head/large", LARGE_HEAD), ("/head/huge", HUGE_HEAD))
        ),
        {
            "match": [{"path": ["/big.bin", "/files/*"]}],
            "handle": [{"handler": "file_server", "root": str(workdir / "html")}],
        },
        {"handle": [{"handler": "static_response", "status_code": 404}]},
    ]
    return {
        "admin": {"disabled": True},
        "storage": {"module": "file_system", "root": str(workdir / "data")},
        "logging": {
            "logs": {
                "default": {
                    "level": "INFO",
                    "writer": {"output": "file", "filename": str(workdir / "caddy.log")},
                    "exclude": ["http.log.access.trio"],
                },
                "trio": {
                    "writer": {"output": "file", "filename": str(workdir / "access.log")},
                    "encoder": {"format": "json"},
                    "include": ["http.log.access.trio"],
                },
            }
        },
        "apps": {
            "tls": {
                "certificates": {
                    "load_files": [
                        {
                            "certificate": str(workdir / "server.pem"),
                            "key": str(workdir / "server.key"),
                            "tags": ["trio"],
                        }
                    ]
                }
            },
            "http": {
                "https_port": port,
                "servers": {
                    "trio": {
                        "listen": [f"{HOST}:{port}"],
                        "protocols": ["h1", "h2", "h3"],
                        "automatic_https": {"disable": True},
                        "tls_connection_policies": [
                            {"certificate_selection": {"any_tag": ["trio"]}, **tls_policy}
                        ],
                        "routes": routes,
                        "logs": {"default_logger_name": "trio"},
                    }
                },
            },
        },
    }


def start_caddy(*, tls_policy: dict[str, Any] | None = None) -> RunningCaddy:
    """Start caddy (and its backend); raises :class:`CaddyUnavailable` (not installed, or it
    failed to start three times: the message carries its log). ``tls_policy`` adds to the
    one TLS connection policy (``match``, ``client_authentication``, ``default_sni``...)."""
    binary = find_caddy()
    if binary is None:
        raise CaddyUnavailable(SKIP_REASON)
    version = caddy_version(binary)
    workdir = Path(tempfile.mkdtemp(prefix="trio-retry-caddy-"))
    (workdir / "html").mkdir()
    (workdir / "html" / "big.bin").write_bytes(BIG)
    ca = issue_certificate(workdir)
    # caddy writes its own state (autosave.json, locks) under XDG dirs / HOME: keep it here.
    env = {
        **os.environ,
        "HOME": str(workdir),
        "XDG_DATA_HOME": str(workdir / "data"),
        "XDG_CONFIG_HOME": str(workdir / "config"),
    }
    backend = Backend().start()
    error = "no attempt"
    for _ in range(3):  # a free port may be taken between probing and binding
        port = free_tcp_udp_port()
        conf = workdir / "caddy.json"
        config = _config(workdir, port, backend.port, tls_policy or {})
        conf.write_text(json.dumps(config, indent=1))
        (workdir / "caddy.log").unlink(missing_ok=True)
        # stderr to a file, not a pipe: a Go program writing to a closed pipe dies (SIGPIPE).
        with open(workdir / "stderr.log", "wb") as stderr:
            proc = subprocess.Popen(
                [binary, "run", "--config", str(conf)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=env,
                cwd=workdir,
            )
        log = workdir / "caddy.log"
        try:
            # Listening on TCP, and its log says the HTTP/3 (UDP) listener is up.
            wait_ready(
                proc,
                partial(logged_and_accepts, log, "HTTP/3", port),
                name="caddy",
                waiting_for=f"{port} (TCP and UDP)",
                timeout=15,
                unavailable=CaddyUnavailable,
            )
        except CaddyUnavailable as exc:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(timeout=5)
            error = f"{exc}: {tail(workdir / 'stderr.log')} {tail(log)}"
            continue
        return RunningCaddy(
            version=version,
            port=port,
            workdir=workdir,
            ca_pem=ca.cert_pem.bytes(),
            process=proc,
            backend=backend,
        )
    backend.stop()
    shutil.rmtree(workdir, ignore_errors=True)
    raise CaddyUnavailable(f"caddy failed to start: {error}")
