"""The ledger backend: executes each request once, records it, then answers after a variable
delay. The lab's (behind nginx, in its server namespace) and the tests' (behind caddy or nginx,
in a thread of the test process: ``tests/support/backend.py``) are this one.

Started by the lab as ``python -m benchmarks.exactly_once.backend PORT LEDGER SEED MAX_DELAY``,
listening on 127.0.0.1 in the namespace (only nginx reaches it). Standard library only: a thread
per request, so a slow answer never delays the record of another.

The ledger is the witness of execution: one entry per request that reached the handler (a JSON
line in the lab's file, flushed, and a :class:`~.records.LedgerEntry` in memory), written
*before* the delay and the answer, so a request whose response was lost, or whose client gave
up, is on record all the same. Each entry holds the request id (``x-request-id``), the attempt
number (``x-attempt``), the method, the idempotency key (``idempotency-key``), the path, the body
length as read (by ``content-length`` or chunked: what a proxy sends for an HTTP/3 request of
unknown length), the client's protocol at the proxy (``x-client-proto``), and the result:

- ``executed``: the side effect happened (every GET and key-less POST, and the first POST of
  each key);
- ``deduplicated``: a POST whose key was already executed; answered 200 with no new side
  effect (what the ``Idempotency-Key`` draft asks of a server; the draft's stored response is
  not kept: no client here reads it);
- ``in flight``: a POST whose key's first execution is still being answered (recorded, not
  yet answered: its delay); answered ``409`` with no side effect and ``Retry-After: 0``, the
  draft's "a request with the same key is still being processed" (§2.7), so a client sends it
  again with the same key;
- ``fenced``: an attempt of a request id that a look-up (below) already answered "not
  executed" for; answered ``409`` with no side effect, so that answer stays true when the
  attempt reaches the backend late (held in nginx, or in the network, while it was asked).

The look-up, ``GET /requests/{id}?attempt=N`` (``LOOKUP``, what a reconciler asks; not itself
on the ledger): ``200`` with the execution's record (JSON) when that request id was executed,
else ``404`` ``not executed``, after which attempts 1 to N of that id are fenced. A payments
API's status look-up answers the first half; the fence is what makes its "not executed" final.

The answer: ``200``, ``x-ledger`` the result, ``x-body-length`` the body read; its body the
request's body echoed, or for a GET ``executed N`` (N: the entries so far, this one included).
The delay is drawn from ``SEED``, the request id and the attempt, so a run with the same seed
gives each request the same delay (none when ``MAX_DELAY`` is 0).
"""

from __future__ import annotations

import dataclasses
import json
import random
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import IO

from benchmarks.exactly_once.records import LedgerEntry

EXECUTED = "executed"
DEDUPLICATED = "deduplicated"
FENCED = "fenced"
IN_FLIGHT = "in flight"
LOOKUP = "/requests/"


class Ledger:
    """The append-only record (in memory, and in ``file`` when given), and the keys already
    executed (what deduplication needs). Thread-safe."""

    def __init__(self, file: IO[str] | None = None) -> None:
        self._file = file
        self._lock = threading.Lock()
        self._keys: dict[str, str] = {}
        self._entries: list[LedgerEntry] = []
        self._executed: dict[str, LedgerEntry] = {}  # request id -> its first execution
        self._fenced: dict[str, int] = {}  # request id -> attempts up to this one are fenced
        self._in_flight: set[str] = set()  # keys whose first execution is not answered yet

    @property
    def entries(self) -> list[LedgerEntry]:
        """The entries so far, in the order they were recorded (a copy)."""
        with self._lock:
            return list(self._entries)

    def record(self, entry: LedgerEntry) -> tuple[LedgerEntry, int]:
        """Execute (or deduplicate) one request (``entry``'s result is decided here); return
        the entry written and how many there are, this one included."""
        with self._lock:
            key = entry.key
            if _number(entry.attempt) <= self._fenced.get(entry.rid, 0):
                result = FENCED
            elif key is not None and key in self._in_flight:
                result = IN_FLIGHT
            elif key is not None and key in self._keys:
                result = DEDUPLICATED
            else:
                result = EXECUTED
                self._executed.setdefault(entry.rid, entry)
            if key is not None and result == EXECUTED:
                self._keys[key] = entry.rid
                self._in_flight.add(key)
            entry = dataclasses.replace(entry, result=result, t=time.time())
            self._entries.append(entry)
            if self._file is not None:
                self._file.write(json.dumps(dataclasses.asdict(entry)) + "\n")
                self._file.flush()
            return entry, len(self._entries)

    def answered(self, entry: LedgerEntry) -> None:
        """``entry`` (as :meth:`record` returned it) was answered, or its client went away: a
        key it executed is no longer in flight."""
        if entry.result == EXECUTED and entry.key is not None:
            with self._lock:
                self._in_flight.discard(entry.key)

    def look_up(self, rid: str, attempt: int) -> LedgerEntry | None:
        """The first execution of request id ``rid``, or ``None``: it was not executed, and
        from now on its attempts 1 to ``attempt`` never will be (they are fenced)."""
        with self._lock:
            found = self._executed.get(rid)
            if found is None:
                self._fenced[rid] = max(attempt, self._fenced.get(rid, 0))
            return found


def _number(attempt: str) -> int:
    """An ``x-attempt`` value as a number (1 when absent or not a number)."""
    return int(attempt) if attempt.isdigit() else 1


def make_handler(ledger: Ledger, seed: int, max_delay: float) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a proxy's pool expects

        def _serve(self) -> None:
            if self.command == "GET" and self.path.startswith(LOOKUP):
                self._look_up()
                return
            body = self._body()
            rid = self.headers.get("x-request-id") or "-"
            attempt = self.headers.get("x-attempt") or "-"
            entry, count = ledger.record(
                LedgerEntry(
                    rid=rid,
                    attempt=attempt,
                    method=self.command,
                    key=self.headers.get("idempotency-key"),
                    result="",
                    path=self.path,
                    body_length=len(body),
                    client_proto=self.headers.get("x-client-proto"),
                )
            )
            try:
                if entry.result == IN_FLIGHT:
                    headers = {"x-ledger": entry.result, "retry-after": 0}
                    self._answer(409, b"in flight", headers)
                    return
                if max_delay > 0:
                    time.sleep(random.Random(f"{seed}:{rid}:{attempt}").uniform(0.0, max_delay))
                reply = b"%s %d" % (entry.result.encode(), count) if self.command == "GET" else body
                status = 409 if entry.result == FENCED else 200
                headers = {"x-ledger": entry.result, "x-body-length": len(body)}
                self._answer(status, reply, headers)
            finally:
                ledger.answered(entry)

        def _look_up(self) -> None:
            rid, _, query = self.path[len(LOOKUP) :].partition("?")
            params = dict(p.partition("=")[::2] for p in query.split("&") if p)
            found = ledger.look_up(rid, _number(params.get("attempt", "1")))
            if found is None:
                self._answer(404, b"not executed", {"x-ledger": "not executed"})
            else:
                record = json.dumps(dataclasses.asdict(found)).encode()
                self._answer(200, record, {"x-ledger": EXECUTED})

        def _answer(self, status: int, reply: bytes, headers: dict[str, object]) -> None:
            self.send_response(status)
            self.send_header("content-type", "application/octet-stream")
            self.send_header("content-length", str(len(reply)))
            for name, value in headers.items():
                self.send_header(name, str(value))
            self.end_headers()
            self.wfile.write(reply)

        def _body(self) -> bytes:
            if "chunked" in (self.headers.get("transfer-encoding") or "").lower():
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
