"""Resumed downloads under periodic connection kills (issue #44).

``python -m benchmarks.resume [--size-mb 200] [--cut-mb 20] [--smoke] [--json PATH]``

nginx (benchmarks/servers.py, HTTP/1.1 cleartext) serves one file of ``--size-mb`` MB (seeded
random bytes: nothing compresses); a relay in front of it (benchmarks/cut_relay.py) resets
every connection after ``--cut-mb`` MB from the server, so any download longer than that breaks
every ``--cut-mb`` MB. Each client downloads the file through the relay, streaming it into a
SHA-256, with its own way of recovering:

- **trio_retry**: ``client.stream("GET", url)`` with ``RetryPolicy(max_attempts=40)``; the
  client continues the body itself (Range/If-Range against nginx's strong ETag);
- **httpx**, **aiohttp**, **niquests**: none of them resumes, so the caller starts again from
  byte 0 after each break, at most ``RESTARTS`` times (what their users do without
  hand-written ``Range`` code);
- **curl -C -**: the command run again after each break, continuing the partial file on disk.

Figures per client: whether the file arrived whole (the digest), the bytes the relay carried
from nginx to the client ÷ the file size ("wire ÷ file": 1.00 is every byte once; heads and
nothing else above it), the connections used, and the wall time. A client that is not
installed is a row saying so. The machine is shared: wall times move with other load; the
byte figures do not.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

import trio_retry
from benchmarks.cut_relay import CutRelay
from benchmarks.servers import ServerUnavailable, start_nginx

#: How many times a client that does not resume starts the download again.
RESTARTS = 12
MB = 1024 * 1024


class RelayThread:
    """A :class:`CutRelay` served by a Trio run of its own, in a thread (the clients run
    their own event loops in the main thread)."""

    def __init__(self, target: int, cut_every: int) -> None:
        self.relay = CutRelay(target, cut_every)
        self._ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None
        self._thread = threading.Thread(target=trio.run, args=(self._main,), daemon=True)

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as scope:
            self._scope = scope
            async with trio.open_nursery() as nursery:
                await nursery.start(self.relay.serve)
                self._ready.set()

    def __enter__(self) -> CutRelay:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the relay did not start")
        return self.relay

    def __exit__(self, *exc_info: object) -> None:
        scope = self._scope
        assert scope is not None
        assert self._token is not None
        trio.from_thread.run_sync(scope.cancel, trio_token=self._token)
        self._thread.join(10)


def _trio_retry(url: str, path: Path) -> str:
    del path

    async def main() -> str:
        digest = hashlib.sha256()
        policy = trio_retry.RetryPolicy(
            max_attempts=40, backoff=trio_retry.Backoff(initial=0.01, max=0.1)
        )
        async with trio_retry.Client(retry=policy) as client:
            async with client.stream("GET", url) as response:
                async for chunk in response.aiter_bytes():
                    digest.update(chunk)
        return digest.hexdigest()

    return trio.run(main)


def _restarting(fetch: Callable[[Any], None]) -> str:
    """``fetch(digest)`` again from byte 0 after each failure, at most :data:`RESTARTS`
    times; the digest of the one that completed (``""``: none did)."""
    for _ in range(RESTARTS):
        digest = hashlib.sha256()
        try:
            fetch(digest)
        except Exception:  # each library's own error for a reset connection
            continue
        return digest.hexdigest()
    return ""


def _httpx(url: str, path: Path) -> str:
    import httpx

    def fetch(digest: Any) -> None:
        with httpx.Client(timeout=30) as client, client.stream("GET", url) as response:
            for chunk in response.iter_bytes():
                digest.update(chunk)

    return _restarting(fetch)


def _aiohttp(url: str, path: Path) -> str:
    import aiohttp

    async def get(digest: Any) -> None:
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            async for chunk in response.content.iter_chunked(65536):
                digest.update(chunk)

    return _restarting(lambda digest: asyncio.run(get(digest)))


def _niquests(url: str, path: Path) -> str:
    import niquests

    def fetch(digest: Any) -> None:
        with niquests.Session() as session:
            response = session.get(url, stream=True, timeout=30)
            response.raise_for_status()
            for chunk in response.iter_content(65536):
                digest.update(chunk)

    return _restarting(fetch)


def _curl(url: str, path: Path) -> str:
    binary = shutil.which("curl")
    if binary is None:
        raise ImportError("curl")
    target = path / "curl.out"
    for _ in range(RESTARTS * 4):
        done = subprocess.run(
            [binary, "-sS", "-C", "-", "-o", str(target), url], capture_output=True, timeout=120
        )
        if done.returncode == 0:
            return hashlib.sha256(target.read_bytes()).hexdigest()
    return ""


CLIENTS: dict[str, Callable[[str, Path], str]] = {
    "trio_retry": _trio_retry,
    "httpx (restart)": _httpx,
    "aiohttp (restart)": _aiohttp,
    "niquests (restart)": _niquests,
    "curl -C -": _curl,
}


def run(size: int, cut: int) -> list[dict[str, Any]]:
    """Each client's row (see the module docstring)."""
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="trio-retry-resume-") as tmp:
        workdir = Path(tmp)
        workdir.chmod(0o755)  # nginx's workers run unprivileged: they must reach the file
        (workdir / "nginx").mkdir()
        server = start_nginx(workdir / "nginx", None, None)
        try:
            assert server.bulk_dir is not None
            body = random.Random(44).randbytes(size)
            (server.bulk_dir / "file.bin").write_bytes(body)
            expected = hashlib.sha256(body).hexdigest()
            del body
            port = server.endpoints["h1"]["port"]
            for name, client in CLIENTS.items():
                scratch = workdir / name.split()[0]
                scratch.mkdir()
                with RelayThread(port, cut) as relay:
                    url = f"http://127.0.0.1:{relay.port}/bulk/file.bin"
                    started = time.perf_counter()
                    try:
                        digest = client(url, scratch)
                    except ImportError as exc:
                        missing = f"not available (missing {exc.name or exc})"
                        rows.append({"client": name, "note": missing})
                        continue
                    wall = time.perf_counter() - started
                rows.append(
                    {
                        "client": name,
                        "complete": digest == expected,
                        "wire_per_file": relay.downstream / size,
                        "connections": relay.connections,
                        "cuts": relay.cuts,
                        "wall_s": wall,
                    }
                )
        finally:
            server.stop()
    return rows


def _print(size: int, cut: int, rows: list[dict[str, Any]]) -> None:
    print(f"resume: {size / MB:.0f} MB through nginx, connection reset every {cut / MB:.0f} MB")
    print(f"  {'client':<20}{'whole':>7}{'wire ÷ file':>13}{'connections':>13}{'wall s':>9}")
    for row in rows:
        if "note" in row:
            print(f"  {row['client']:<20}{row['note']}")
            continue
        whole = "yes" if row["complete"] else "NO"
        print(
            f"  {row['client']:<20}{whole:>7}{row['wire_per_file']:>13.3f}"
            f"{row['connections']:>13}{row['wall_s']:>9.1f}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.resume")
    parser.add_argument("--size-mb", type=int, default=200)
    parser.add_argument("--cut-mb", type=int, default=20)
    parser.add_argument("--smoke", action="store_true", help="8 MB cut every 1 MB")
    parser.add_argument("--only", help="comma-separated client names (as in the table)")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    size, cut = (8 * MB, MB) if args.smoke else (args.size_mb * MB, args.cut_mb * MB)
    if args.only:
        wanted = {name.strip() for name in args.only.split(",")}
        for name in list(CLIENTS):
            if name.split()[0] not in wanted and name not in wanted:
                del CLIENTS[name]
    try:
        rows = run(size, cut)
    except ServerUnavailable as exc:
        print(f"resume: nginx is needed: {exc}", file=sys.stderr)
        return 2
    _print(size, cut, rows)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"size": size, "cut": cut, "rows": rows}, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
