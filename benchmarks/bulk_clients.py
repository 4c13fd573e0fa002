"""The client side of ``benchmarks/bulk.py``: one large transfer, in a process of its own.

Started as ``python -m benchmarks.bulk_clients CONFIG_JSON`` by the runner, which reads this
process's CPU time and peak RSS from ``os.wait4`` when it exits: the figures are the client's
alone (interpreter start and imports included; the runner subtracts a 1 KB transfer's CPU to
get the cost of the bytes). This module therefore imports only what its client needs, and only
once it knows which client it is.

Each client does what its documentation shows for a large body:

- download: the response streamed and its chunks discarded (trio_retry ``client.stream`` +
  ``aiter_bytes()``, httpx ``stream`` + ``aiter_bytes()``, aiohttp ``content.iter_any()``,
  niquests ``stream=True`` + ``iter_content(-1)``, "as they arrive"); ``trio_retry_file``
  writes them to a file with ``trio.open_file`` instead;
- upload: ``PUT`` of a file on a tmpfs: trio_retry takes the ``pathlib.Path`` (its documented
  file body: reopenable, ``Content-Length`` from the size), aiohttp and niquests an open binary
  file, httpx an async generator of 1 MiB reads with ``Content-Length`` set (its async client
  takes no sync file).

``wall_s`` runs from just before the request (connect and TLS handshake included, as curl's
``time_total``) to the last byte, each client's imports done before it: trio_retry imports the
modules of a protocol at its first connection (a program pays that once, not per transfer),
so they are imported before the clock starts, as the other clients' are with their package.
(With ``PYTHONDONTWRITEBYTECODE`` set and a checkout without byte code, that import compiled
the HTTP/2 package inside the timed span: about 15 ms of a 50 MB HTTP/2 transfer's 140.)
``cpu_s`` is this process's user + system time over the same span. The result is the last
stdout line, prefixed by ``RESULT_TAG``.
"""

from __future__ import annotations

import os
import resource
import ssl
import sys
import time
import traceback
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from benchmarks.worker import serve_config

RESULT_TAG = "BULK-RESULT "
READ_SIZE = 1 << 20  # the 1 MiB reads of the upload sources we write ourselves
FILE_CHUNK = 1 << 20  # trio_retry_file: aiter_bytes(chunk_size=...) when the checkout has it


@dataclass
class Job:
    """One transfer: what to do (from the runner's JSON) and what happened."""

    client: str
    method: str  # "GET" or "PUT"
    url: str
    http2: bool
    ca_file: str | None
    source: str | None  # PUT: the file to send
    target: str | None  # trio_retry_file: the file to write
    checkout: str | None  # import trio_retry from here
    status: int = 0
    http_version: str = ""
    received: int = 0
    note: str = ""
    wall_s: float = 0.0
    cpu_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    module: str = ""  # the file of the trio_retry that ran (which checkout)

    @property
    def tls(self) -> bool:
        return self.url.startswith("https:")

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        ctx = ssl.create_default_context(cafile=self.ca_file)
        ctx.set_alpn_protocols(["h2", "http/1.1"] if self.http2 else ["http/1.1"])
        return ctx

    @contextmanager
    def measured(self) -> Iterator[None]:
        """Time the block (wall and this process's CPU) into ``wall_s`` and ``cpu_s``."""
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        yield
        self.wall_s = time.perf_counter() - t0
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        self.cpu_s = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)


async def _file_chunks(path: str) -> AsyncIterator[bytes]:
    """The file in 1 MiB reads. Blocking reads of a tmpfs file take microseconds: not worth a
    thread per read (that is what an event loop's file wrapper would cost)."""
    with open(path, "rb") as f:
        while chunk := f.read(READ_SIZE):
            yield chunk


# ---------------------------------------------------------------------------------------------
# trio_retry
# ---------------------------------------------------------------------------------------------


def run_trio_retry(job: Job) -> None:
    import pathlib

    import trio

    if job.checkout is not None:
        from benchmarks.checkout import import_trio_retry

        trio_retry = import_trio_retry(job.checkout)
    else:
        import trio_retry
    job.module = str(trio_retry.__file__)
    # The protocol's modules, imported at the first connection otherwise (see the docstring).
    if job.http2:
        import trio_retry._wire.http2
    import trio_retry._wire.http11

    async def main() -> None:
        ctx = job.ssl_context()
        async with trio_retry.Client(ssl_context=ctx, http2=job.http2) as client:
            with job.measured():
                if job.method == "PUT":
                    assert job.source is not None
                    r = await client.put(job.url, content=pathlib.Path(job.source))
                    job.received = len(r.content)
                else:
                    async with client.stream("GET", job.url) as r:
                        if job.target is None:
                            async for chunk in r.aiter_bytes():
                                job.received += len(chunk)
                        else:
                            await _to_file(r, job.target)
            job.status = r.status
            job.http_version = r.http_version.removeprefix("HTTP/")

    async def _to_file(response: Any, target: str) -> None:
        try:
            chunks = response.aiter_bytes(chunk_size=FILE_CHUNK)
            job.notes.append(f"aiter_bytes(chunk_size={FILE_CHUNK})")
        except TypeError:
            # A checkout from before aiter_bytes took chunk_size: the chunks as they arrive.
            chunks = response.aiter_bytes()
            job.notes.append("aiter_bytes() without chunk_size (this checkout has none)")
        async with await trio.open_file(target, "wb") as f:
            async for chunk in chunks:
                job.received += len(chunk)
                await f.write(chunk)

    trio.run(main)


# ---------------------------------------------------------------------------------------------
# httpx, on Trio (anyio's Trio backend) or asyncio
# ---------------------------------------------------------------------------------------------


def run_httpx(job: Job, runtime: str) -> None:
    import httpx

    async def main() -> None:
        ctx = job.ssl_context()
        verify: ssl.SSLContext | bool = ctx if ctx is not None else False
        async with httpx.AsyncClient(
            http2=job.http2, verify=verify, trust_env=False, timeout=httpx.Timeout(60.0)
        ) as client:
            with job.measured():
                if job.method == "PUT":
                    assert job.source is not None
                    size = os.path.getsize(job.source)
                    r = await client.put(
                        job.url,
                        content=_file_chunks(job.source),
                        headers={"Content-Length": str(size)},
                    )
                    job.received = len(r.content)
                else:
                    async with client.stream("GET", job.url) as r:
                        async for chunk in r.aiter_bytes():
                            job.received += len(chunk)
            job.status = r.status_code
            job.http_version = r.http_version.removeprefix("HTTP/")

    if runtime == "trio":
        import trio

        trio.run(main)
    else:
        import asyncio

        asyncio.run(main())


# ---------------------------------------------------------------------------------------------
# aiohttp (HTTP/1.1 only)
# ---------------------------------------------------------------------------------------------


def run_aiohttp(job: Job) -> None:
    import asyncio

    import aiohttp

    async def main() -> None:
        ctx = job.ssl_context()
        connector = aiohttp.TCPConnector(ssl=ctx if ctx is not None else True)
        timeout = aiohttp.ClientTimeout(total=120.0)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            with job.measured():
                if job.method == "PUT":
                    assert job.source is not None
                    with open(job.source, "rb") as f:
                        async with session.put(job.url, data=f) as resp:
                            job.received = len(await resp.read())
                else:
                    async with session.get(job.url) as resp:
                        async for chunk in resp.content.iter_any():
                            job.received += len(chunk)
            job.status = resp.status
            version = resp.version
            job.http_version = f"{version.major}.{version.minor}" if version else "?"

    asyncio.run(main())


# ---------------------------------------------------------------------------------------------
# niquests (its synchronous Session: no event loop in the way; HTTP/2 by ALPN)
# ---------------------------------------------------------------------------------------------


def run_niquests(job: Job) -> None:
    import niquests

    # HTTP/3 off (nothing listens on UDP); HTTP/2 off on the HTTP/1.1 endpoints, where niquests
    # would otherwise offer h2 by ALPN (nginx's HTTP/1.1 TLS port does not accept it, but the
    # row must not depend on that).
    with niquests.Session(disable_http2=not job.http2, disable_http3=True, retries=0) as s:
        verify: str | bool = job.ca_file if job.tls and job.ca_file else True
        with job.measured():
            if job.method == "PUT":
                assert job.source is not None
                with open(job.source, "rb") as f:
                    r = s.put(job.url, data=f, verify=verify, timeout=120)
                job.received = len(r.content or b"")
            else:
                r = s.get(job.url, stream=True, verify=verify, timeout=120)
                for chunk in r.iter_content(chunk_size=-1):
                    job.received += len(chunk)
        job.status = r.status_code or 0
        version = r.http_version  # 11, 20
        job.http_version = {10: "1.0", 11: "1.1", 20: "2"}.get(version or 0, str(version))


RUNNERS: dict[str, Callable[[Job], None]] = {
    "trio_retry": run_trio_retry,
    "trio_retry_file": run_trio_retry,
    "httpx_trio": lambda job: run_httpx(job, "trio"),
    "httpx_asyncio": lambda job: run_httpx(job, "asyncio"),
    "aiohttp": run_aiohttp,
    "niquests": run_niquests,
}


def run(config: dict[str, Any]) -> dict[str, Any]:
    """Run one transfer; always returns a dict (an exception becomes ``error``)."""
    job = Job(
        client=config["client"],
        method=config["method"],
        url=config["url"],
        http2=bool(config["http2"]),
        ca_file=config.get("ca_file"),
        source=config.get("source"),
        target=config.get("target"),
        checkout=config.get("checkout"),
    )
    try:
        RUNNERS[job.client](job)
    except ModuleNotFoundError as exc:
        return {"unavailable": f"not installed ({exc.name})"}
    except Exception as exc:
        tb = traceback.format_exc(limit=6)
        return {"error": f"{type(exc).__name__}: {exc}", "traceback": tb}
    return {
        "status": job.status,
        "http_version": job.http_version,
        "received": job.received,
        "wall_s": job.wall_s,
        "cpu_s": job.cpu_s,
        "note": "; ".join(job.notes),
        "module": job.module,
    }


def main(argv: list[str]) -> int:
    return serve_config(argv, "benchmarks.bulk_clients", RESULT_TAG, run)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
