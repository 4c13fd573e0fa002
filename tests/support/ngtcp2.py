"""A real ngtcp2 HTTP/3 server for QUIC tests: Debian's ``gtlsserver`` (package
``ngtcp2-server``: ngtcp2 and nghttp3 over GnuTLS), started by the test itself on loopback.

Use the ``ngtcp2`` fixture (a factory) from :mod:`tests.support.fixtures`, or
:func:`start_ngtcp2` directly::

    server = ngtcp2({"a.txt": b"hello"}, Ngtcp2Options(retry=True))
    ...  # requests to server.url("/a.txt"), trusting server.ssl_context()
    log = server.log()
    assert (log.retries, log.handshakes) == (1, 1)

What it starts: ``gtlsserver`` on a free UDP port of 127.0.0.1 (or ``::1``), serving the
given files from a fresh directory over HTTP/3 only (no TCP listener), with a ``trustme``
certificate valid for 127.0.0.1, ::1 and localhost. The options map to its command line:
Retry (``-V``: every new client is sent a Retry and must come back with the token), the TLS
cipher suites (``--ciphers``), a preferred address (``--preferred-ipv4-addr``, another port
the client may migrate to after the handshake), the flow-control windows and stream limit.

Its debug output (stdout, kept in a file) is the server's own account of what it did, read by
:class:`Ngtcp2Log`: the handshakes it completed and with which cipher, how many Retry tokens
it verified, the request streams and their header fields, which streams' data came in 0-RTT
packets, whether the client sent CONNECTION_CLOSE, and on which local address and from which
client address each datagram came.

A quirk worth knowing: gtlsserver binds with ``SO_REUSEPORT``, so two instances on one port
would share its datagrams. The port is probed free first, and a server that finds it taken by
the time it binds cannot tell; the window is a few milliseconds.

When gtlsserver is not installed, :func:`find_ngtcp2` returns ``None`` and the fixture skips
with the reason (``.ci/run`` installs ``ngtcp2-server`` when it can).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import socket
import ssl
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .procs import (
    find_binary,
    read_lines,
    scratch_dir,
    stop_process,
    tail,
    wait_ready,
    write_files,
)

__all__ = [
    "CHACHA20_ONLY",
    "Ngtcp2Connection",
    "Ngtcp2Log",
    "Ngtcp2Options",
    "Ngtcp2Request",
    "Ngtcp2Unavailable",
    "RunningNgtcp2",
    "find_ngtcp2",
    "start_ngtcp2",
]

SKIP_REASON = (
    "ngtcp2's gtlsserver is not installed (looked for `gtlsserver` on PATH and in /usr/sbin); "
    "`apt-get install -y ngtcp2-server` (.ci/run does it when run as root) to run the QUIC "
    "interop cases against it"
)
#: The GnuTLS priority string that leaves ChaCha20-Poly1305 as the only TLS 1.3 cipher.
CHACHA20_ONLY = "NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+CHACHA20-POLY1305"
#: A resumed TLS 1.3 handshake has the server send no Certificate: its Handshake-level CRYPTO
#: data is EncryptedExtensions and Finished (about 180 bytes with QUIC's transport
#: parameters), a full one adds the certificate chain (about 850 bytes with trustme's).
_RESUMED_BELOW = 400


class Ngtcp2Unavailable(Exception):
    """gtlsserver is not installed here, or would not start; the message says which."""


@dataclass(frozen=True, slots=True)
class Ngtcp2Options:
    """How to start gtlsserver (each maps to one of its options; None: its default)."""

    host: str = "127.0.0.1"
    #: Address validation: a Retry to every new client (``-V``).
    retry: bool = False
    #: A GnuTLS priority string (``--ciphers``), e.g. :data:`CHACHA20_ONLY`.
    ciphers: str | None = None
    #: Offer a preferred address: the same host, another free port (``--preferred-*-addr``).
    preferred_address: bool = False
    #: The initial connection window and each stream's (``--max-data``, ``--max-stream-data-*``),
    #: e.g. ``"16K"``: the client's uploads must wait for MAX_DATA / MAX_STREAM_DATA.
    max_data: str | None = None
    max_stream_data: str | None = None
    #: Concurrent request streams the client may open (``--max-streams-bidi``; its default 100).
    max_streams_bidi: int | None = None
    #: Idle timeout (``--timeout``, e.g. ``"5s"``).
    idle_timeout: str = "10s"

    def arguments(self, preferred_port: int | None) -> list[str]:
        args = ["--no-quic-dump", "--no-http-dump", f"--timeout={self.idle_timeout}"]
        if self.retry:
            args.append("-V")
        if self.ciphers is not None:
            args.append(f"--ciphers={self.ciphers}")
        if preferred_port is not None:
            if ":" in self.host:
                args.append(f"--preferred-ipv6-addr=[{self.host}]:{preferred_port}")
            else:
                args.append(f"--preferred-ipv4-addr={self.host}:{preferred_port}")
        if self.max_data is not None:
            args.append(f"--max-data={self.max_data}")
        if self.max_stream_data is not None:
            for kind in ("bidi-local", "bidi-remote", "uni"):
                args.append(f"--max-stream-data-{kind}={self.max_stream_data}")
        if self.max_streams_bidi is not None:
            args.append(f"--max-streams-bidi={self.max_streams_bidi}")
        return args


@dataclass(frozen=True, slots=True)
class Ngtcp2Request:
    """One request stream, as the server's HTTP/3 layer logged its header fields."""

    stream_id: int
    fields: tuple[tuple[str, str], ...]

    def field(self, name: str) -> str | None:
        return next((value for key, value in self.fields if key == name), None)

    @property
    def path(self) -> str | None:
        return self.field(":path")

    @property
    def request_id(self) -> str | None:
        return self.field("x-request-id")


@dataclass(slots=True)
class Ngtcp2Connection:
    """What the server logged about one QUIC connection (named by its connection id)."""

    cid: str
    handshake_completed: bool = False
    cipher: str | None = None
    #: Handshake-level CRYPTO bytes the server sent (small when the session was resumed).
    handshake_crypto_sent: int = 0
    requests: list[Ngtcp2Request] = field(default_factory=list)
    #: Request streams whose data came, at least in part, in 0-RTT packets.
    early_streams: set[int] = field(default_factory=set)
    #: The client's CONNECTION_CLOSE frames received.
    closes_received: int = 0
    #: The server's local addresses datagrams arrived on, and the client addresses they came
    #: from (``127.0.0.1:PORT``, ``[::1]:PORT``).
    local_addresses: set[str] = field(default_factory=set)
    remote_addresses: set[str] = field(default_factory=set)
    path_challenges_sent: int = 0
    #: Flow-control window updates (MAX_DATA, MAX_STREAM_DATA frames) sent and received.
    window_updates_sent: int = 0
    window_updates_received: int = 0

    @property
    def resumed(self) -> bool:
        return self.handshake_completed and self.handshake_crypto_sent < _RESUMED_BELOW

    def early(self, request: Ngtcp2Request) -> bool:
        """Whether `request`'s stream had data in 0-RTT packets."""
        return request.stream_id in self.early_streams


_LINE = re.compile(r"^I\d+ 0x([0-9a-f]+) (\w+) (.*)$")
_FRAME = re.compile(r"^(rx|tx) \d+ (\w+) (\w+)\(0x[0-9a-f]+\)(.*)$")
_STREAM_ID = re.compile(r"\bid=0x([0-9a-f]+)")
_CRYPTO_LEN = re.compile(r"\blen=(\d+)")
_RECEIVED = re.compile(r"^Received packet: local=(\S+) remote=(\S+) ")
_HTTP = re.compile(r"^http: stream 0x([0-9a-f]+) (.*)$")
_FIELD = re.compile(r"^\[([^:\]]*|:[^:\]]+): (.*)\]$")


@dataclass(frozen=True, slots=True)
class Ngtcp2Log:
    """The server's account, parsed from its debug output at one moment."""

    connections: tuple[Ngtcp2Connection, ...]
    #: Retry tokens the server verified (one per client that came back after a Retry).
    retries: int

    @property
    def handshakes(self) -> int:
        return sum(1 for conn in self.connections if conn.handshake_completed)

    @property
    def requests(self) -> list[Ngtcp2Request]:
        return [request for conn in self.connections for request in conn.requests]

    def connection_of(self, request_id: str) -> Ngtcp2Connection:
        """The connection that carried the request with this ``x-request-id`` (exactly one)."""
        [conn] = [c for c in self.connections for r in c.requests if r.request_id == request_id]
        return conn

    @classmethod
    def parse(cls, lines: list[str]) -> Ngtcp2Log:
        """Read gtlsserver's output. Lines of ngtcp2 itself name their connection; the others
        (HTTP fields, 'handshake has completed', the cipher) belong to the connection of the
        ngtcp2 line before them, the server handling one connection's datagram at a time; a
        'Received packet' line belongs to the next one's."""
        connections: dict[str, Ngtcp2Connection] = {}
        current: Ngtcp2Connection | None = None
        received: list[tuple[str, str]] = []
        open_requests: dict[tuple[str, int], list[tuple[str, str]]] = {}
        retries = 0
        for line in lines:
            match = _LINE.match(line)
            if match is not None:
                cid, category, rest = match.groups()
                current = connections.get(cid)
                if current is None:
                    current = connections[cid] = Ngtcp2Connection(cid)
                for local, remote in received:
                    current.local_addresses.add(local)
                    current.remote_addresses.add(remote)
                received.clear()
                if category == "frm":
                    _frame(current, rest)
                continue
            if (match := _RECEIVED.match(line)) is not None:
                received.append((_address(match.group(1)), _address(match.group(2))))
            elif line.startswith("Verifying Retry token"):
                retries += 1
            elif current is None:
                continue
            elif line == "QUIC handshake has completed":
                current.handshake_completed = True
            elif line.startswith("Negotiated cipher suite is "):
                current.cipher = line.rsplit(" ", 1)[1]
            elif (match := _HTTP.match(line)) is not None:
                stream_id, what = int(match.group(1), 16), match.group(2)
                key = (current.cid, stream_id)
                if what == "request headers started":
                    open_requests[key] = []
                elif what == "headers ended" and key in open_requests:
                    fields = tuple(open_requests.pop(key))
                    current.requests.append(Ngtcp2Request(stream_id, fields))
                elif (found := _FIELD.match(what)) is not None and key in open_requests:
                    open_requests[key].append((found.group(1), found.group(2)))
        return cls(tuple(connections.values()), retries)


def _address(logged: str) -> str:
    """``host:port`` for IPv4, ``[host]:port`` for IPv6 (the log brackets both)."""
    host, _, port = logged.rpartition(":")
    host = host.strip("[]")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _frame(conn: Ngtcp2Connection, rest: str) -> None:
    match = _FRAME.match(rest)
    if match is None:
        return
    direction, packet_type, frame, details = match.groups()
    if direction == "rx" and frame == "STREAM" and packet_type == "0RTT":
        found = _STREAM_ID.search(details)
        if found is not None and int(found.group(1), 16) % 4 == 0:
            conn.early_streams.add(int(found.group(1), 16))
    elif direction == "rx" and frame == "CONNECTION_CLOSE":
        conn.closes_received += 1
    elif direction == "tx" and frame == "CRYPTO" and packet_type == "Handshake":
        found = _CRYPTO_LEN.search(details)
        conn.handshake_crypto_sent += int(found.group(1)) if found is not None else 0
    elif direction == "tx" and frame == "PATH_CHALLENGE":
        conn.path_challenges_sent += 1
    elif frame in ("MAX_DATA", "MAX_STREAM_DATA"):
        if direction == "tx":
            conn.window_updates_sent += 1
        else:
            conn.window_updates_received += 1


@dataclass
class RunningNgtcp2:
    """A started gtlsserver. :meth:`stop` ends it (the fixture does, even if the test
    failed)."""

    host: str
    port: int
    preferred_port: int | None
    workdir: Path
    ca_pem: bytes
    process: subprocess.Popen[bytes]

    @property
    def authority(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def url(self, path: str) -> str:
        """``https://HOST:PORT/path`` (HTTP/3 only: nothing listens on TCP)."""
        return f"https://{self.authority}{path}"

    def ssl_context(self) -> ssl.SSLContext:
        """A client context trusting this server's certificate authority."""
        return ssl.create_default_context(cadata=self.ca_pem.decode("ascii"))

    def log(self, *, settle: float = 5.0) -> Ngtcp2Log:
        """The server's account so far, once its output stopped growing for 0.1 s (waiting
        at most ``settle`` seconds)."""
        lines = read_lines(self.workdir / "server.log", expect=None, timeout=settle)
        return Ngtcp2Log.parse(lines)

    def output(self) -> str:
        """The end of the server's output, for a failure message."""
        return tail(self.workdir / "server.log")

    def stop(self) -> None:
        """Stop gtlsserver (SIGTERM, then SIGKILL after 5 s) and remove its directory."""
        stop_process(self.process)
        shutil.rmtree(self.workdir, ignore_errors=True)


def find_ngtcp2() -> str | None:
    """The gtlsserver binary, or ``None`` when it is not installed."""
    return find_binary("gtlsserver", "/usr/sbin/gtlsserver", "/usr/bin/gtlsserver")


def _free_udp_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _udp_bound(host: str, port: int) -> bool:
    """Whether a UDP socket is bound to `port` (the kernel's table, /proc/net/udp or udp6:
    asked without binding, so the probe never races the server for the port)."""
    table = Path("/proc/net/udp6" if ":" in host else "/proc/net/udp")
    suffix = f":{port:04X}"
    with contextlib.suppress(OSError):
        for line in table.read_text().splitlines()[1:]:
            local = line.split()[1]
            if local.endswith(suffix):
                return True
    return False


def start_ngtcp2(
    files: Mapping[str, bytes], options: Ngtcp2Options = Ngtcp2Options()
) -> RunningNgtcp2:
    """Start gtlsserver serving `files` (name relative to the root -> content); raises
    :class:`Ngtcp2Unavailable` (not installed, or it failed to start three times: the message
    carries its output)."""
    import trustme  # a test dependency

    binary = find_ngtcp2()
    if binary is None:
        raise Ngtcp2Unavailable(SKIP_REASON)
    workdir = scratch_dir("trio-retry-ngtcp2-")
    htdocs = workdir / "htdocs"
    htdocs.mkdir()
    write_files(htdocs, files)
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "::1", "localhost")
    cert.private_key_pem.write_to_path(str(workdir / "server.key"))
    (workdir / "server.pem").write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    log = workdir / "server.log"
    error = "no attempt"
    for _ in range(3):  # a free port may be taken between probing and binding
        port = _free_udp_port(options.host)
        preferred = _free_udp_port(options.host) if options.preferred_address else None
        command = [
            binary,
            *options.arguments(preferred),
            f"--htdocs={htdocs}",
            options.host,
            str(port),
            str(workdir / "server.key"),
            str(workdir / "server.pem"),
        ]
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=workdir
            )
        try:
            wait_ready(
                proc,
                lambda port=port: _udp_bound(options.host, port),  # type: ignore[misc]
                name="gtlsserver",
                waiting_for=f"UDP {options.host} port {port}",
                timeout=10,
                unavailable=Ngtcp2Unavailable,
            )
        except Ngtcp2Unavailable as exc:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(timeout=5)
            error = f"{exc}: {tail(log)}"
            continue
        return RunningNgtcp2(
            host=options.host,
            port=port,
            preferred_port=preferred,
            workdir=workdir,
            ca_pem=ca.cert_pem.bytes(),
            process=proc,
        )
    shutil.rmtree(workdir, ignore_errors=True)
    raise Ngtcp2Unavailable(f"gtlsserver failed to start: {error}")
