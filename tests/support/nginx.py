"""A real nginx for tests: started by the test itself on loopback, configured as production is.

Use the ``nginx`` fixture (a factory) from :mod:`tests.support.fixtures`, or :func:`start_nginx`
directly::

    server = nginx(NginxConfig(keepalive_requests=10))
    async with trio_retry.Client(http2=True, ssl_context=server.ssl_context()) as client:
        await client.post(server.h2_url("/post"), headers={"x-request-id": "p1"})
    assert server.log().count(request_id="p1") == 1

What it starts: one worker, from a configuration generated into a fresh directory, listening on
free 127.0.0.1 ports — HTTP/1.1 cleartext, HTTP/1.1 over TLS, HTTP/2 over TLS (ALPN) and, where
the nginx version allows ``http2`` on a cleartext listen, h2c with prior knowledge. The
certificate comes from ``trustme``. The knobs a test needs are :class:`NginxConfig` fields:
``keepalive_requests`` (also the HTTP/2 rotation: nginx sends GOAWAY after that many streams),
``http2_max_concurrent_streams``, ``client_max_body_size`` and the rest.

Routes, the same on every listener:

- ``/get``    ``200 "ok"`` for any method;
- ``/post``   ``200 "posted"``, from a backend ``proxy_pass`` reaches once nginx has read the
  whole request body (so a logged ``/post`` was received whole);
- ``/upload`` the same under ``upload_max_body_size``: a larger declared length is answered
  ``413`` at once, before the body is read;
- ``/proxy``  ``proxy_pass`` to a loopback port nothing listens on: ``502``;
- anything else ``404``.

The access log (:meth:`RunningNginx.log`) is what nginx says it executed: one line per request
it finished, with the ``x-request-id`` request header, so a test counts side effects per
request id, and ``$connection`` / ``$connection_requests``, so it counts the connections used.

A test that needs more adds it as configuration text (:class:`NginxConfig` ``extra_http`` and
``servers``) in which ``{{name}}`` placeholders are filled in: ``{{host}}``, ``{{workdir}}``,
``{{tls}}`` (the ``ssl_certificate`` lines), the port of every listener (``{{h1}}``, and the extra
ones named in ``listeners``), ``{{NAME}}`` of every ``unix_listeners`` entry (``unix:/path``), and
any ``values`` the test gives (a backend's port, say). ``files`` are written into the working
directory first (``html/`` is the ``root`` of a static server). nginx waits for every listener.

When nginx cannot be had, :func:`find_nginx` returns ``None`` and the fixture skips with the
reason (``.ci/run`` installs it from the OS packages when it can).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import ssl
import subprocess
import tempfile
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from benchmarks import nginx
from benchmarks.nginx import find_nginx, nginx_version

from .procs import (
    HOST,
    RequestLog,
    accepts,
    client_ssl_context,
    free_tcp_ports,
    issue_certificate,
    read_lines,
    stop_process,
    tail,
    wait_ready,
)

__all__ = [
    "LogEntry",
    "NginxConfig",
    "NginxLog",
    "NginxUnavailable",
    "RunningNginx",
    "find_nginx",
    "start_nginx",
]

SKIP_REASON = (
    "nginx is not installed (looked for `nginx` on PATH and in /usr/sbin, /usr/local/sbin); "
    "`apt-get install -y nginx` (.ci/run does it when run as root) to run the interop tests"
)
#: One access-log line: tab-separated fields, in this order (see :class:`LogEntry`).
_LOG_FORMAT = (
    "$connection\\t$connection_requests\\t$server_protocol\\t$request_method\\t$uri\\t"
    "$status\\t$http_x_request_id\\t$request_length\\t$body_bytes_sent\\t$server_port\\t"
    "$bytes_sent\\t$ssl_client_verify\\t$http_traceparent"
)
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


class NginxUnavailable(Exception):
    """nginx is not installed here, or would not start; the message says which."""


@dataclass(frozen=True, kw_only=True)
class NginxConfig:
    """What a test may vary. The defaults are nginx's own where nginx has one."""

    keepalive_requests: int = 1000
    keepalive_timeout: str = "75s"
    http2_max_concurrent_streams: int = 128
    client_max_body_size: str = "1m"
    #: ``client_max_body_size`` of ``/upload`` only (where the early 413 is tested).
    upload_max_body_size: str = "1m"
    #: Extra directives inserted in the ``http`` block (placeholders filled in).
    extra_http: str = ""
    #: Extra ``server {}`` blocks (or any ``http``-level text), placeholders filled in.
    servers: str = ""
    #: Names of extra loopback ports to allocate (``{{name}}`` in the text); nginx must listen.
    listeners: tuple[str, ...] = ()
    #: Names of Unix sockets (``{{name}}`` is ``unix:<workdir>/<name>.sock``); nginx must listen.
    unix_listeners: tuple[str, ...] = ()
    #: More placeholder values, e.g. the port of a backend the test started.
    values: Mapping[str, object] = field(default_factory=dict)
    #: Files written (relative to the working directory) before nginx starts.
    files: Mapping[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One request nginx finished, as its access log says."""

    connection: int
    connection_requests: int
    protocol: str
    method: str
    uri: str
    status: int
    request_id: str | None
    request_length: int
    body_bytes_sent: int
    #: ``$server_port``; ``None`` on a Unix socket.
    server_port: int | None
    bytes_sent: int
    #: ``$ssl_client_verify``; ``None`` off TLS.
    ssl_client_verify: str | None
    traceparent: str | None


class NginxLog(RequestLog[LogEntry]):
    """The access log at one moment: what nginx executed."""

    def by_request_id(self) -> Counter[str]:
        return Counter(entry.request_id for entry in self.entries if entry.request_id)

    def connections(self) -> set[int]:
        """nginx's serial numbers of the connections that carried a logged request."""
        return {entry.connection for entry in self.entries}


@dataclass
class RunningNginx:
    """A started nginx. :meth:`stop` ends it (the fixture does, even if the test failed)."""

    version: tuple[int, ...]
    ports: dict[str, int]
    workdir: Path
    ca_pem: bytes
    process: subprocess.Popen[bytes]
    config: NginxConfig
    _ssl_contexts: list[ssl.SSLContext] = field(default_factory=list)

    @property
    def h2c(self) -> bool:
        """Whether this nginx also listens for h2c (prior knowledge)."""
        return "h2c" in self.ports

    def unix_socket(self, name: str) -> str:
        """The path of the Unix socket listener ``name``."""
        return str(self.workdir / f"{name}.sock")

    def url(self, listener: str, path: str) -> str:
        scheme = "https" if listener.endswith("tls") else "http"
        return f"{scheme}://{HOST}:{self.ports[listener]}{path}"

    def h1_url(self, path: str) -> str:
        return self.url("h1", path)

    def h2_url(self, path: str) -> str:
        """HTTP/2 over TLS (ALPN ``h2``); needs :meth:`ssl_context`."""
        return self.url("h2_tls", path)

    def h2c_url(self, path: str) -> str:
        return self.url("h2c", path)

    def ssl_context(self, *, http2: bool = True) -> ssl.SSLContext:
        """A client context that trusts this server's certificate (and verifies it), offering
        ``h2`` by ALPN unless ``http2=False`` (the client uses a caller's context as given)."""
        return client_ssl_context(self.ca_pem, http2=http2)

    def log(self, *, expect: int | None = None, timeout: float = 5.0) -> NginxLog:
        """The access log. nginx writes a line once it finished a request, which may be just
        after the client got the response: with ``expect``, wait (at most ``timeout`` seconds)
        until at least that many lines are there; otherwise until the file stops growing for
        0.1 s (bounded by ``timeout`` too)."""
        lines = read_lines(self.workdir / "access.log", expect=expect, timeout=timeout)
        return NginxLog(tuple(_parse(line) for line in lines))

    def error_log(self) -> str:
        path = self.workdir / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        """Stop nginx (SIGTERM, then SIGKILL after 5 s) and remove its directory."""
        stop_process(self.process)
        if self.process.stderr is not None:
            self.process.stderr.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _parse(line: str) -> LogEntry:
    fields = line.split("\t")
    conn, conn_requests, proto, method, uri, status, rid, length, sent = fields[:9]
    port, total, verify, traceparent = (None if v in ("", "-") else v for v in fields[9:])
    return LogEntry(
        connection=int(conn),
        connection_requests=int(conn_requests),
        protocol=proto,
        method=method,
        uri=uri,
        status=int(status),
        request_id=None if rid == "-" else rid,
        request_length=int(length),
        body_bytes_sent=int(sent),
        server_port=None if port is None else int(port),
        bytes_sent=int(total or 0),
        ssl_client_verify=verify,
        traceparent=traceparent,
    )


def _locations(config: NginxConfig, ports: dict[str, int]) -> str:
    return f"""\
        location = /get {{
            default_type text/plain;
            return 200 "ok";
        }}
        location = /post {{
            # Proxied to our own backend: nginx reads the whole request body before it
            # forwards it (proxy_request_buffering), so a logged /post had its body read.
            proxy_pass http://{HOST}:{ports["backend"]}/posted;
        }}
        location = /upload {{
            client_max_body_size {config.upload_max_body_size};
            proxy_pass http://{HOST}:{ports["backend"]}/posted;
        }}
        location = /proxy {{
            proxy_pass http://{HOST}:{ports["dead"]};
            proxy_connect_timeout 2s;
        }}
        location / {{
            return 404;
        }}
"""


def _config(
    workdir: Path, ports: dict[str, int], config: NginxConfig, version: tuple[int, ...]
) -> str:
    locations = _locations(config, ports)
    certs = nginx.tls_lines(workdir / "server.pem", workdir / "server.key")
    listeners = [
        nginx.listen(f"{HOST}:{ports['h1']}", version),
        nginx.listen(f"{HOST}:{ports['h1_tls']}", version, ssl=True) + certs,
        nginx.listen(f"{HOST}:{ports['h2_tls']}", version, ssl=True, http2=True) + certs,
    ]
    if "h2c" in ports:
        listeners.append(nginx.listen(f"{HOST}:{ports['h2c']}", version, http2=True))
    values: dict[str, object] = {"host": HOST, "workdir": workdir, "tls": certs, **ports}
    values.update((name, f"unix:{workdir / name}.sock") for name in config.unix_listeners)
    values.update(config.values)

    def fill(text: str) -> str:
        def one(match: re.Match[str]) -> str:
            if match.group(1) not in values:
                raise ValueError(f"nginx config: no value for {{{{{match.group(1)}}}}}")
            return str(values[match.group(1)])

        return _PLACEHOLDER.sub(one, text)

    # The backend of /post and /upload: not logged, so the log holds client requests only.
    backend = nginx.server(
        nginx.listen(f"{HOST}:{ports['backend']}", version),
        "        access_log off;\n",
        "        location / {\n            default_type text/plain;\n",
        '            return 200 "posted";\n        }\n',
    )
    return nginx.config(
        workdir,
        generated_by="tests/support/nginx.py",
        # Started as root, nginx would hand its workers to `nobody`, which cannot write the
        # body buffers in our private directory.
        main="user root;\n" if os.geteuid() == 0 else "",
        error_level="info",
        http=(
            f"    log_format trio_retry '{_LOG_FORMAT}';\n"
            f"    access_log {workdir / 'access.log'} trio_retry;\n"
            "    server_tokens off;\n"
            f"    keepalive_requests {config.keepalive_requests};\n"
            f"    keepalive_timeout {config.keepalive_timeout};\n"
            f"    http2_max_concurrent_streams {config.http2_max_concurrent_streams};\n"
            f"    client_max_body_size {config.client_max_body_size};\n" + fill(config.extra_http)
        ),
        servers=[
            *(nginx.server(listen, locations) for listen in listeners),
            fill(config.servers),
            backend,
        ],
    )


def _all_accept(pending: list[int | str]) -> bool:
    """Whether nginx accepts on every target (port or Unix socket path) left in `pending`;
    those it accepts on are removed, so `pending` says what it does not listen on yet."""
    while pending and accepts(pending[0]):
        pending.pop(0)
    return not pending


def start_nginx(config: NginxConfig | None = None) -> RunningNginx:
    """Start nginx with ``config``; raises :class:`NginxUnavailable` (not installed, or it
    failed to start three times: the message carries its error log)."""
    config = config or NginxConfig()
    binary = find_nginx()
    if binary is None:
        raise NginxUnavailable(SKIP_REASON)
    _, version = nginx_version(binary)
    workdir = Path(tempfile.mkdtemp(prefix="trio-retry-nginx-"))
    (workdir / "tmp").mkdir()
    (workdir / "html").mkdir()
    ca = issue_certificate(workdir)
    ca.cert_pem.write_to_path(str(workdir / "ca.pem"))
    for relative, content in config.files.items():
        (workdir / relative).parent.mkdir(parents=True, exist_ok=True)
        (workdir / relative).write_bytes(content)
    names = ["h1", "h1_tls", "h2_tls", "dead", "backend"]
    if version >= (1, 9, 5):  # h2c (prior knowledge) on a cleartext `http2` listen
        names.append("h2c")
    names.extend(config.listeners)
    error = "no attempt"
    for _ in range(3):  # a free port may be taken between probing and binding
        ports = dict(zip(names, free_tcp_ports(len(names)), strict=True))
        for name in config.unix_listeners:  # left by a failed attempt
            (workdir / f"{name}.sock").unlink(missing_ok=True)
        conf = workdir / "nginx.conf"
        conf.write_text(_config(workdir, ports, config, version))
        cmd = [binary, "-p", str(workdir), "-c", str(conf)]
        if version >= (1, 19, 5):
            cmd[1:1] = ["-e", str(workdir / "error.log")]
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        pending: list[int | str] = [port for name, port in ports.items() if name != "dead"]
        pending += [str(workdir / f"{name}.sock") for name in config.unix_listeners]
        try:
            wait_ready(
                proc,
                partial(_all_accept, pending),
                name="nginx",
                waiting_for=pending,
                timeout=10,
                unavailable=NginxUnavailable,
            )
        except NginxUnavailable as exc:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            _, err = proc.communicate(timeout=5)
            error = f"{exc}: {err.decode(errors='replace').strip()} {tail(workdir / 'error.log')}"
            continue
        return RunningNginx(
            version=version,
            ports=ports,
            workdir=workdir,
            ca_pem=ca.cert_pem.bytes(),
            process=proc,
            config=config,
        )
    shutil.rmtree(workdir, ignore_errors=True)
    raise NginxUnavailable(f"nginx failed to start: {error}")


@contextlib.contextmanager
def running_nginx(config: NginxConfig | None = None) -> Iterator[RunningNginx]:
    """:func:`start_nginx`, stopped on exit."""
    server = start_nginx(config)
    try:
        yield server
    finally:
        server.stop()
