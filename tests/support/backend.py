"""The ledger backend (:mod:`benchmarks.exactly_once.backend`, the lab's) in a thread of the test
process, for a real server to proxy to: it records every request it executed (the ledger), so a
test counts side effects behind the proxy, and echoes what it received.

It runs in a thread (the standard library's `ThreadingHTTPServer`), not in the test's Trio
loop, so a synchronous fixture can start it before the test's loop exists and it answers
whatever the test awaits meanwhile. What it answers is the backend's: ``GET`` (any path)
``executed N`` (N: the requests it executed, this one included); anything else the body,
echoed, with ``x-body-length`` its size; and ``GET /requests/{id}?attempt=N``, the look-up a
reconciler asks (200 with the record of that request id's execution, else 404, the attempts
asked about then fenced: see the backend's docstring).
"""

from __future__ import annotations

import threading

from benchmarks.exactly_once.backend import Ledger, Server, make_handler
from benchmarks.exactly_once.records import LedgerEntry

__all__ = ["Backend", "LedgerEntry"]

HOST = "127.0.0.1"


class Backend:
    """Started by `start`, stopped by `stop`; `executions` is the ledger, in order."""

    def __init__(self, *, max_delay: float = 0.0) -> None:
        """``max_delay``: each answer comes after a delay drawn in [0, max_delay] s (the lab's
        ``--max-delay``), once the request is on the ledger."""
        self._ledger = Ledger()
        self._server = Server((HOST, 0), make_handler(self._ledger, seed=0, max_delay=max_delay))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def executions(self) -> list[LedgerEntry]:
        """Each request the backend executed (it read the whole body, then answered)."""
        return self._ledger.entries

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
        return sum(1 for e in self.executions if e.rid == request_id)
