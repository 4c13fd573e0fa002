"""What the real-server helpers of the tests (nginx.py, caddy.py, hypercorn_server.py) share:
free loopback ports, a throwaway certificate, waiting until the server listens, reading its
log as it grows (and the log's common shape, :class:`RequestLog`), and stopping it. The
process plumbing that the benchmark's caddy needs too is :mod:`benchmarks.processes`,
re-exported here."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import ssl
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from benchmarks.processes import HOST, accepts, free_tcp_udp_port, stop_process, wait_ready

if TYPE_CHECKING:
    import trustme

__all__ = [
    "HOST",
    "RequestLog",
    "accepts",
    "can_bind",
    "client_ssl_context",
    "find_binary",
    "free_tcp_ports",
    "free_tcp_udp_port",
    "issue_certificate",
    "logged_and_accepts",
    "read_lines",
    "scratch_dir",
    "stop_process",
    "tail",
    "wait_ready",
    "write_files",
]


class _Entry(Protocol):
    @property
    def request_id(self) -> str | None: ...


_E = TypeVar("_E", bound=_Entry)


@dataclass(frozen=True)
class RequestLog(Generic[_E]):
    """What a server logged at one moment, one entry per request, each with the request's
    ``x-request-id`` (a test counts side effects by it)."""

    entries: tuple[_E, ...]

    def __len__(self) -> int:
        return len(self.entries)

    def count(self, *, request_id: str) -> int:
        """How many times the server logged the request with this ``x-request-id``."""
        return sum(1 for entry in self.entries if entry.request_id == request_id)


def can_bind(host: str) -> bool:
    """Whether a UDP socket can be bound on `host` here (``::1`` needs IPv6 on loopback;
    ``127.0.0.2``, another loopback address, needs Linux's whole 127/8 on ``lo``)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.bind((host, 0))
    except OSError:
        return False
    return True


def find_binary(name: str, *candidates: str) -> str | None:
    """The server binary `name` on PATH, else the first executable of `candidates` (where the
    OS packages put it when PATH lacks that directory), or ``None`` when it is not installed."""
    found = shutil.which(name)
    if found:
        return found
    for candidate in candidates:
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def free_tcp_ports(count: int) -> list[int]:
    """Loopback TCP ports the kernel just handed out (bound, then closed): free unless taken
    meanwhile, in which case the server fails to bind and its helper tries again."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket())
            sock.bind((HOST, 0))
            ports.append(sock.getsockname()[1])
        return ports


def issue_certificate(workdir: Path) -> trustme.CA:
    """A fresh CA and a server certificate for 127.0.0.1 and localhost, written as
    ``workdir/server.pem`` (the chain) and ``workdir/server.key``; returns the CA."""
    import trustme  # a test dependency

    ca = trustme.CA()
    cert = ca.issue_cert(HOST, "localhost")
    cert.private_key_pem.write_to_path(str(workdir / "server.key"))
    (workdir / "server.pem").write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    return ca


def client_ssl_context(ca_pem: bytes, *, http2: bool = True) -> ssl.SSLContext:
    """A client context that trusts `ca_pem` (and verifies the server), offering ``h2`` by
    ALPN unless ``http2=False``."""
    context = ssl.create_default_context(cadata=ca_pem.decode("ascii"))
    context.set_alpn_protocols(["h2", "http/1.1"] if http2 else ["http/1.1"])
    return context


def logged_and_accepts(log: Path, marker: str, port: int) -> bool:
    """Whether the server's `log` has `marker` in it (how an HTTP/3 server says its UDP
    listener is up) and it accepts on TCP `port`."""
    return log.exists() and marker in log.read_text(errors="replace") and accepts(port)


def read_lines(path: Path, *, expect: int | None, timeout: float, settle: bool = True) -> list[str]:
    """The non-blank lines of a log a server appends to. With `expect`, wait (at most
    `timeout` seconds) until there are at least that many; otherwise, with `settle`, until the
    file stops growing for 0.1 s (bounded by `timeout` too), and without it not at all."""
    end = time.monotonic() + timeout
    last = -1
    while True:
        text = path.read_text(errors="replace") if path.exists() else ""
        lines = [line for line in text.splitlines() if line.strip()]
        if time.monotonic() >= end:
            return lines
        if expect is not None and len(lines) >= expect:
            return lines
        if expect is None and (not settle or len(text) == last):
            return lines
        last = len(text)
        time.sleep(0.1)


def scratch_dir(prefix: str) -> Path:
    """A fresh directory for a server's files: in /dev/shm (memory) when there is one, where
    writing the 2,000 small files of a multiplexing test takes 0.1 s, not the 6 s it can take
    on a disk-backed /tmp; otherwise in the usual temporary directory."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return Path(tempfile.mkdtemp(prefix=prefix, dir=shm))
    return Path(tempfile.mkdtemp(prefix=prefix))


def write_files(root: Path, files: Mapping[str, bytes]) -> None:
    """Write `files` (a relative name, ``/`` between directories -> content) under `root`;
    `ValueError` for a name that would leave it."""
    for name, content in files.items():
        if not name or name.startswith("/") or ".." in name.split("/"):
            raise ValueError(f"file name {name!r} is not a relative name under {root}")
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


def tail(path: Path) -> str:
    """The end of a log file, for an error message."""
    return path.read_text(errors="replace")[-800:].strip() if path.exists() else ""
