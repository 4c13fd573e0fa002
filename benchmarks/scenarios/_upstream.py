"""A FaultServer in a process of its own, for the engine-cost suite's 503-retry path.

``python -m benchmarks.scenarios._upstream PAIRS LIFETIME [CPU]`` serves HTTP/1.1 on a free
loopback port. ``GET /retry`` is answered, in arrival order, ``503, 200, 503, 200, ...``
(``PAIRS`` pairs, then ``200``), so a sequential client that retries every 503 once gets its
200 on the retry; every other request gets ``200`` with the 13-byte body of ``/small``. It
prints ``PORT <n>`` once listening and stops at EOF on stdin, or after ``LIFETIME`` seconds.
Being a separate process (pinned to ``CPU`` when given), its CPU time is not the client's.
"""

from __future__ import annotations

import os
import sys

import trio

SMALL_BODY = b"hello, world\n"


async def serve(pairs: int, lifetime: float) -> None:
    from trio_retry.testing import FaultServer, Respond

    server = FaultServer(http2=False, idle_timeout=lifetime, read_timeout=lifetime)
    busy = Respond(503, body=b"busy\n")
    ok = Respond(200, body=SMALL_BODY)
    server.route("GET", "/retry", *(action for _ in range(pairs) for action in (busy, ok)))
    server.default = ok
    stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        print(f"PORT {server.port}", flush=True)
        with trio.move_on_after(lifetime):
            while await stdin.receive_some(4096):
                pass
        nursery.cancel_scope.cancel()
    await stdin.aclose()


def main(argv: list[str]) -> int:
    pairs, lifetime = int(argv[0]), float(argv[1])
    if len(argv) > 2 and hasattr(os, "sched_setaffinity"):
        try:
            os.sched_setaffinity(0, {int(argv[2])})
        except OSError:
            pass
    trio.run(serve, pairs, lifetime)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
