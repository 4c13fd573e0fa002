"""The backend behind nginx: executes each request once, writes it to the ledger, then answers
after a variable delay.

Started inside the lab's server namespace as ``python -m benchmarks.exactly_once.backend PORT
LEDGER SEED MAX_DELAY``, listening on 127.0.0.1 there (only nginx reaches it). Standard library
only: a thread per request, so a slow answer never delays the record of another.

The ledger is the witness of execution: one JSON line per request that reached the handler,
written (and flushed) *before* the delay and the answer, so a request whose response was lost,
or whose client gave up, is on record all the same. Each line holds the request id
(``x-request-id``), the attempt number (``x-attempt``), the method, the idempotency key
(``idempotency-key``) and the result:

- ``executed``: the side effect happened (every GET and key-less POST, and the first POST of
  each key);
- ``deduplicated``: a POST whose key was already executed; answered 200 with no new side
  effect (what the ``Idempotency-Key`` draft asks of a server; the body says which it was,
  the draft's stored response is not kept: no client here reads it).

The delay is drawn from ``SEED``, the request id and the attempt, so a run with the same seed
gives each request the same delay.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import IO

EXECUTED = "executed"
DEDUPLICATED = "deduplicated"


class Ledger:
    """The append-only record, and the keys already executed (what deduplication needs)."""

    def __init__(self, file: IO[str]) -> None:
        self._file = file
        self._lock = threading.Lock()
        self._keys: dict[str, str] = {}

    def record(self, *, rid: str, attempt: str, method: str, key: str | None) -> str:
        """Execute (or deduplicate) one request; return the result written."""
        with self._lock:
            if key is not None and key in self._keys:
                result = DEDUPLICATED
            else:
                result = EXECUTED
                if key is not None:
                    self._keys[key] = rid
            line = {
                "t": time.time(),
                "rid": rid,
                "attempt": attempt,
                "method": method,
                "key": key,
                "result": result,
            }
            self._file.write(json.dumps(line) + "\n")
            self._file.flush()
        return result


def make_handler(ledger: Ledger, seed: int, max_delay: float) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            if length:
                self.rfile.read(length)
            rid = self.headers.get("x-request-id") or "-"
            attempt = self.headers.get("x-attempt") or "-"
            key = self.headers.get("idempotency-key")
            result = ledger.record(rid=rid, attempt=attempt, method=self.command, key=key)
            delay = random.Random(f"{seed}:{rid}:{attempt}").uniform(0.0, max_delay)
            time.sleep(delay)
            body = f"{result} {rid}\n".encode()
            self.send_response(200)
            self.send_header("content-type", "text/plain")
            self.send_header("content-length", str(len(body)))
            self.send_header("x-ledger", result)
            self.end_headers()
            self.wfile.write(body)

        do_GET = _serve
        do_POST = _serve

        def log_message(self, format: str, *args: object) -> None:
            pass  # the ledger is the log

    return Handler


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        # nginx closing its side while we wait (its client went away, a reload): expected, and
        # the request is on the ledger already. Anything else is printed as usual.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print("usage: python -m benchmarks.exactly_once.backend PORT LEDGER SEED MAX_DELAY")
        return 2
    port, path, seed, max_delay = int(argv[0]), argv[1], int(argv[2]), float(argv[3])
    with open(path, "a", encoding="utf-8") as file:
        server = Server(("127.0.0.1", port), make_handler(Ledger(file), seed, max_delay))
        print("listening", flush=True)
        try:
            server.serve_forever(poll_interval=0.2)
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
