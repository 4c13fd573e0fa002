"""A tiny HTTP/1.1 origin in a thread of the test process, for a real server to proxy to: it
records every request it executed (the ledger), so a test counts side effects behind the
proxy, and echoes what it received.

It runs in a thread (the standard library's `ThreadingHTTPServer`), not in the test's Trio
loop, so a synchronous fixture can start it before the test's loop exists and it answers
whatever the test awaits meanwhile.

- ``GET`` (any path): ``executed N`` (N: how many requests it executed, this one included);
- ``POST``/``PUT``/anything with a body: the body, echoed; ``x-body-length`` says its size.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["Backend", "Execution"]

HOST = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class Execution:
    """One request the backend executed (it read the whole body, then answered)."""

    method: str
    path: str
    body_length: int
    #: The ``x-request-id`` request header, if any.
    request_id: str | None
    #: The protocol the client used at the proxy, if the proxy says (``x-client-proto``).
    client_proto: str | None


class Backend:
    """Started by `start`, stopped by `stop`; `executions` is the ledger, in order."""

    def __init__(self) -> None:
        self.executions: list[Execution] = []
        self._lock = threading.Lock()
        backend = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as a proxy's pool expects

            def _serve(self) -> None:
                body = self._body()
                with backend._lock:
                    backend.executions.append(
                        Execution(
                            method=self.command,
                            path=self.path,
                            body_length=len(body),
                            request_id=self.headers.get("x-request-id"),
                            client_proto=self.headers.get("x-client-proto"),
                        )
                    )
                    count = len(backend.executions)
                reply = body if self.command != "GET" else b"executed %d" % count
                self.send_response(200)
                self.send_header("content-type", "application/octet-stream")
                self.send_header("content-length", str(len(reply)))
                self.send_header("x-body-length", str(len(body)))
                self.end_headers()
                self.wfile.write(reply)

            def _body(self) -> bytes:
                if "chunked" in (self.headers.get("transfer-encoding") or "").lower():
                    # What a proxy sends for a body of unknown length (an HTTP/3 request
                    # without content-length): chunked, which http.server leaves to us.
                    chunks = []
                    while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                length = int(self.headers.get("content-length") or 0)
                return self.rfile.read(length) if length else b""

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve

            def log_message(self, format: str, *args: object) -> None:
                pass  # the ledger is the log

        self._server = ThreadingHTTPServer((HOST, 0), _Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> Backend:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def count(self, *, request_id: str) -> int:
        """How many times the request with this ``x-request-id`` was executed."""
        with self._lock:
            return sum(1 for e in self.executions if e.request_id == request_id)
