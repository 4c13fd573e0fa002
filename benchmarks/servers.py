"""Benchmark servers: nginx (preferred) or the pure-Python fallback, plus a self-check.

nginx is started from a generated configuration in a temporary directory: one worker process
(pinned to the server CPU when pinning is on), ``access_log off``, listening on three free
loopback ports: HTTP/1.1 cleartext, HTTP/1.1 over TLS and HTTP/2 over TLS (ALPN), with a
certificate from ``trustme`` written to the same directory. Routes:

- ``/small``   ``return 200 "hello, world\\n"`` (13 bytes, no disk access)
- ``/64k.bin`` a 64 KiB static file (sendfile on cleartext)
- ``/upload``  ``return 200 "ok\\n"`` for a POST. nginx's ``return`` discards the request body,
  but "discard" still reads every byte of it off the socket before the connection can serve its
  next request; :func:`self_check` proves it by splitting a 64 KiB upload in two writes and
  pipelining a GET behind it: that GET is answered correctly only if exactly the declared body
  was consumed. (The response may be sent before the body is fully read; every client under test
  writes the whole body before it reads, so the upload cost is still fully on the client.)

- ``/bulk/``   static files of any size (``benchmarks/bulk.py`` writes them into ``bulk_dir``)
- ``/put/``    WebDAV ``PUT`` (``dav_methods PUT``), no body size limit: nginx reads the whole
  request body into a temporary file and only then answers (201), renaming the file into
  ``upload_dir``. ``/upload``'s ``return`` would be cheaper but proves nothing about a large
  upload (over HTTP/2 nginx answers at once and resets the stream, so a client may stop
  sending); a ``proxy_pass`` to a local upstream would read the body too but send it on
  again, doubling the server's share; the mirror module reads it into memory. With ``PUT``
  the stored file's size is the proof that every byte was read, and ``benchmarks/bulk.py``
  checks it after each upload.

``keepalive_requests`` is raised from nginx's default of 1000, which would otherwise close every
keep-alive connection (and every HTTP/2 connection, with GOAWAY) mid-benchmark.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import select
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import nginx
from benchmarks.scenarios.throughput import BIG_PATH, BIG_SIZE, SMALL_BODY, UPLOAD_REPLY

HOST = "127.0.0.1"
PACKAGE_ROOT = Path(__file__).resolve().parent.parent


class ServerUnavailable(Exception):
    """This server kind cannot be started here (not installed, failed to start, ...)."""


@dataclass(frozen=True, kw_only=True)
class NginxLimits:
    """The benchmark nginx's limits, where a benchmark needs other than the defaults (the
    throughput suite's): ``benchmarks/scale.py`` holds 10,000 connections and 1,000 streams on
    one HTTP/2 connection. ``backlog``: the listen queue (``None``: nginx's 511, which a burst
    of 10,000 connects overflows into SYN retries a second apart; the kernel caps it at
    ``net.core.somaxconn``)."""

    http2_max_concurrent_streams: int = 256
    worker_connections: int = 4096
    backlog: int | None = None

    @property
    def rlimit_nofile(self) -> int:
        """The worker's descriptors: one per connection, twice over for slack."""
        return max(8192, 2 * self.worker_connections)


@dataclass(frozen=True)
class TLSFiles:
    ca: str
    cert_chain: str
    key: str


@dataclass
class RunningServer:
    kind: str  # "nginx" or "fallback"
    version: str
    endpoints: dict[str, dict[str, Any]]
    pids: list[int]  # the processes that do the serving (for server CPU accounting)
    notes: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None
    error_log: Path | None = None
    # nginx only: where files served under /bulk/ go, and where PUT /put/NAME stores NAME
    bulk_dir: Path | None = None
    upload_dir: Path | None = None

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "version": self.version,
            "endpoints": self.endpoints,
            "notes": self.notes,
        }

    def stop(self) -> None:
        """Stop the server process (SIGTERM, then SIGKILL after 5 s) and close its pipes."""
        proc = self.process
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def _die_with_parent() -> None:
    """preexec_fn: ask Linux to SIGTERM the child if the runner dies (PR_SET_PDEATHSIG)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)
    except Exception:
        pass


def child_preexec() -> Callable[[], None] | None:
    return _die_with_parent if sys.platform.startswith("linux") else None


def make_tls_files(directory: Path) -> TLSFiles | None:
    """A throwaway CA and a server certificate for 127.0.0.1/localhost, or None (no trustme)."""
    try:
        import trustme
    except ImportError:
        return None
    ca = trustme.CA()
    cert = ca.issue_cert(HOST, "localhost")
    files = TLSFiles(
        ca=str(directory / "ca.pem"),
        cert_chain=str(directory / "server-chain.pem"),
        key=str(directory / "server-key.pem"),
    )
    ca.cert_pem.write_to_path(files.ca)
    for i, blob in enumerate(cert.cert_chain_pems):
        blob.write_to_path(files.cert_chain, append=i > 0)
    cert.private_key_pem.write_to_path(files.key)
    return files


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _wait_listening(ports: list[int], proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    pending = list(ports)
    while pending:
        if proc.poll() is not None:
            raise ServerUnavailable(f"server exited with code {proc.returncode} during startup")
        if time.monotonic() > deadline:
            raise ServerUnavailable(f"server did not listen on {pending} within {timeout}s")
        try:
            with socket.create_connection((HOST, pending[0]), timeout=0.5):
                pending.pop(0)
        except OSError:
            time.sleep(0.02)


def _endpoints(ports: dict[str, int]) -> dict[str, dict[str, Any]]:
    kinds = {"h1": ("http", False), "h1_tls": ("https", False), "h2_tls": ("https", True)}
    return {
        name: {"scheme": kinds[name][0], "host": HOST, "port": port, "http2": kinds[name][1]}
        for name, port in ports.items()
    }


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


# ---------------------------------------------------------------------------------------------
# nginx
# ---------------------------------------------------------------------------------------------


_LOCATIONS = """\
        location = /small {
            default_type text/plain;
            return 200 "hello, world\\n";
        }
        location = /64k.bin {
            default_type application/octet-stream;
        }
        location = /upload {
            client_max_body_size 1m;
            client_body_buffer_size 128k;
            default_type text/plain;
            return 200 "ok\\n";
        }
        location /bulk/ {
            default_type application/octet-stream;
        }
        location /put/ {
            dav_methods PUT;
            client_max_body_size 0;
            client_body_buffer_size 1m;
            root @UPLOAD_ROOT@;
        }
        location / {
            return 404;
        }
"""


def nginx_config(
    workdir: Path,
    ports: dict[str, int],
    tls: TLSFiles | None,
    version: tuple[int, ...],
    cpu: int | None,
    limits: NginxLimits | None = None,
) -> str:
    limits = limits or NginxLimits()
    backlog = limits.backlog
    locations = _LOCATIONS.replace("@UPLOAD_ROOT@", str(workdir / "upload"))
    servers = [
        nginx.server(nginx.listen(f"{HOST}:{ports['h1']}", version, backlog=backlog), locations)
    ]
    if tls is not None:
        certs = nginx.tls_lines(tls.cert_chain, tls.key)
        for name, http2 in (("h1_tls", False), ("h2_tls", True)):
            address = f"{HOST}:{ports[name]}"
            listen = nginx.listen(address, version, ssl=True, http2=http2, backlog=backlog)
            servers.append(nginx.server(listen, certs, locations))
    affinity = f"worker_cpu_affinity {'1' + '0' * cpu};\n" if cpu is not None else ""
    return nginx.config(
        workdir,
        generated_by="benchmarks/servers.py",
        main=f"{affinity}worker_rlimit_nofile {limits.rlimit_nofile};\n",
        worker_connections=limits.worker_connections,
        http=(
            "    access_log off;\n"
            "    server_tokens off;\n"
            "    sendfile on;\n"
            "    tcp_nodelay on;\n"
            "    keepalive_timeout 300s;\n"
            "    keepalive_requests 100000000;\n"
            f"    http2_max_concurrent_streams {limits.http2_max_concurrent_streams};\n"
            "    open_file_cache max=64 inactive=600s;\n"
            f"    root {workdir / 'html'};\n"
        ),
        servers=servers,
    )


def start_nginx(
    workdir: Path, tls: TLSFiles | None, cpu: int | None, limits: NginxLimits | None = None
) -> RunningServer:
    binary = nginx.find_nginx()
    if binary is None:
        raise ServerUnavailable("nginx is not installed (apt-get install nginx)")
    version_text, version = nginx.nginx_version(binary)
    # nginx workers drop to an unprivileged user when started as root: keep files readable.
    os.chmod(workdir, 0o755)
    html = workdir / "html"
    html.mkdir()
    (workdir / "tmp").mkdir()
    (html / "bulk").mkdir()
    upload_dir = workdir / "upload" / "put"
    upload_dir.mkdir(parents=True)
    # The unprivileged workers store PUT bodies here (and nothing else is in this directory).
    os.chmod(upload_dir, 0o777)
    (html / BIG_PATH.lstrip("/")).write_bytes(bytes(range(256)) * (BIG_SIZE // 256))
    if tls is not None:  # the master reads the key (as root); workers need none of them
        os.chmod(tls.key, 0o600)
    last_error = "no attempt"
    for _attempt in range(3):  # a free port can be taken between probing and binding
        names = ["h1", "h1_tls", "h2_tls"] if tls is not None else ["h1"]
        ports = dict(zip(names, _free_ports(len(names)), strict=True))
        conf = workdir / "nginx.conf"
        conf.write_text(nginx_config(workdir, ports, tls, version, cpu, limits))
        cmd = [binary, "-p", str(workdir), "-c", str(conf)]
        if version >= (1, 19, 5):
            cmd[1:1] = ["-e", str(workdir / "error.log")]
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=child_preexec(),
        )
        try:
            _wait_listening(list(ports.values()), proc, timeout=10)
        except ServerUnavailable as exc:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            _, err = proc.communicate(timeout=5)
            log = workdir / "error.log"
            tail = log.read_text(errors="replace")[-800:] if log.exists() else ""
            last_error = f"{exc}: {err.decode(errors='replace').strip()} {tail.strip()}"
            continue
        workers: list[int] = []
        deadline = time.monotonic() + 5
        while not workers and time.monotonic() < deadline:
            workers = _children(proc.pid)
            if not workers:
                time.sleep(0.02)
        endpoints = _endpoints(ports)
        pinned = f" pinned to CPU {cpu}" if cpu is not None else ""
        notes = [f"nginx {version_text}, 1 worker{pinned}"]
        return RunningServer(
            kind="nginx",
            version=version_text,
            endpoints=endpoints,
            pids=workers or [proc.pid],
            notes=notes,
            process=proc,
            error_log=workdir / "error.log",
            bulk_dir=html / "bulk",
            upload_dir=upload_dir,
        )
    raise ServerUnavailable(f"nginx failed to start: {last_error}")


# ---------------------------------------------------------------------------------------------
# Fallback (pure Python, see benchmarks/fallback_server.py)
# ---------------------------------------------------------------------------------------------


def start_fallback(tls: TLSFiles | None, cpu: int | None) -> RunningServer:
    cmd = [sys.executable, "-m", "benchmarks.fallback_server"]
    if tls is not None:
        cmd += ["--cert", tls.cert_chain, "--key", tls.key]
    if cpu is not None:
        cmd += ["--cpu", str(cpu)]
    proc = subprocess.Popen(
        cmd,
        cwd=PACKAGE_ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=None,
        preexec_fn=child_preexec(),
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 15)
    line = proc.stdout.readline() if ready else b""
    if not line:
        proc.kill()
        proc.wait(timeout=5)
        raise ServerUnavailable("fallback server did not start")
    info = json.loads(line)
    ports: dict[str, int] = info["ports"]
    endpoints = _endpoints(ports)
    note = (
        "fallback server: single-process pure-Python asyncio (costlier per request than "
        "nginx and batching its writes differently: compare ratios within the run, treat rows "
        "with srv CPU near 100% as server-bound, prefer nginx for published numbers)"
    )
    return RunningServer(
        kind="fallback",
        version=f"benchmarks.fallback_server on Python {platform.python_version()}",
        endpoints=endpoints,
        pids=[proc.pid],
        notes=[note + (f"; pinned to CPU {cpu}" if cpu is not None else "")],
        process=proc,
    )


# ---------------------------------------------------------------------------------------------
# Self-check: is the server answering exactly what the scenarios expect?
# ---------------------------------------------------------------------------------------------


def _read_response(f: Any) -> tuple[int, bytes]:
    status_line = f.readline()
    if not status_line:
        raise ConnectionError("connection closed before a response")
    status = int(status_line.split()[1])
    length = 0
    while True:
        line = f.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    return status, f.read(length)


def _expect(what: str, got: tuple[int, bytes], status: int, body: bytes | None, size: int) -> None:
    if got[0] != status or (body is not None and got[1] != body) or len(got[1]) != size:
        raise ServerUnavailable(
            f"self-check {what}: expected {status} with {size} bytes, got {got[0]} "
            f"with {len(got[1])} bytes ({got[1][:40]!r})"
        )


def self_check(server: RunningServer, ca_file: str | None) -> list[str]:
    """Verify routes, upload-body consumption and ALPN. Raises ServerUnavailable on mismatch."""
    done = []
    port = server.endpoints["h1"]["port"]
    get_small = f"GET /small HTTP/1.1\r\nHost: {HOST}:{port}\r\n\r\n".encode()
    with socket.create_connection((HOST, port), timeout=5) as s, s.makefile("rb") as f:
        s.sendall(get_small)
        _expect("GET /small", _read_response(f), 200, SMALL_BODY, len(SMALL_BODY))
        s.sendall(f"GET {BIG_PATH} HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
        _expect(f"GET {BIG_PATH}", _read_response(f), 200, None, BIG_SIZE)
        # Upload consumption: half the body, a pause, the other half with a GET pipelined behind.
        body = bytes(BIG_SIZE)
        head = (
            f"POST /upload HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: {BIG_SIZE}\r\n"
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        s.sendall(head + body[: BIG_SIZE // 2])
        time.sleep(0.05)
        s.sendall(body[BIG_SIZE // 2 :] + get_small)
        _expect("POST /upload", _read_response(f), 200, UPLOAD_REPLY, len(UPLOAD_REPLY))
        _expect("GET after upload", _read_response(f), 200, SMALL_BODY, len(SMALL_BODY))
    done.append("routes ok; upload body fully consumed (pipelined GET after it answered)")
    if ca_file is not None and "h2_tls" in server.endpoints:
        for key, alpn, want in (("h1_tls", ["http/1.1"], "http/1.1"), ("h2_tls", ["h2"], "h2")):
            ctx = ssl.create_default_context(cafile=ca_file)
            ctx.set_alpn_protocols(alpn)
            tls_port = server.endpoints[key]["port"]
            with (
                socket.create_connection((HOST, tls_port), timeout=5) as raw,
                ctx.wrap_socket(raw, server_hostname=HOST) as s,
            ):
                got = s.selected_alpn_protocol()
                if got != want:
                    raise ServerUnavailable(f"self-check {key}: ALPN {got!r}, wanted {want!r}")
                if want == "http/1.1":
                    with s.makefile("rb") as f:
                        s.sendall(get_small)
                        _expect("GET /small over TLS", _read_response(f), 200, SMALL_BODY, 13)
        done.append("TLS ok; ALPN h2 negotiated on the HTTP/2 port")
    return done


@contextlib.contextmanager
def running_server(
    kind: str, cpu: int | None, tmp_parent: str | None = None, limits: NginxLimits | None = None
) -> Iterator[tuple[RunningServer, str | None]]:
    """Start the requested server kind ("auto", "nginx", "fallback"); yield (server, ca_file).

    ``tmp_parent``: where the server's temporary directory goes (default: the system's);
    ``benchmarks/bulk.py`` asks for a tmpfs so that large uploads do not wait on a disk.
    ``limits``: nginx's, where they differ from the defaults (the fallback has none)."""
    with tempfile.TemporaryDirectory(prefix="trio-retry-bench-", dir=tmp_parent) as tmp:
        workdir = Path(tmp)
        tls = make_tls_files(workdir)
        notes = [] if tls is not None else ["trustme not installed: TLS scenarios skipped"]
        server: RunningServer | None = None
        if kind in ("auto", "nginx"):
            try:
                os.chmod(workdir, 0o755)  # nginx workers run unprivileged when we are root
                (workdir / "nginx").mkdir()
                server = start_nginx(workdir / "nginx", tls, cpu, limits)
            except ServerUnavailable as exc:
                if kind == "nginx":
                    raise
                notes.append(f"nginx unavailable ({exc}); using the fallback server")
        if server is None:
            server = start_fallback(tls, cpu)
        server.notes[:0] = notes
        try:
            server.notes += self_check(server, tls.ca if tls else None)
            yield server, (tls.ca if tls else None)
        finally:
            server.stop()
