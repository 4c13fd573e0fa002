"""HTTP/3 beside HTTP/2 on one server: ``python -m benchmarks.http3 [--requests N] [--size-mb M]``.

caddy (the OS package, ``benchmarks/caddy.py``) serves both protocols on one port; trio_retry
reaches it over HTTP/2 (TCP, ALPN ``h2``) and over HTTP/3 (QUIC, ``Upstream(http3=True)``),
with the same client options otherwise. Each case runs in a process of its own (this module
with ``--child``), which measures its own wall time and CPU time (``time.process_time``: all of
its threads) around the workload only, after one warm-up request on the same connection:

- **sequential**: ``--requests`` small GETs (``/small``, 13 bytes) one after the other;
- **concurrent**: the same number of small GETs, 32 at a time on one connection;
- **download**: one ``--size-mb`` MB file, streamed.

niquests (its synchronous ``Session``, HTTP/3 over qh3, known in advance through
``quic_cache_layer``) downloads the same file over HTTP/3 in a process of its own, after the
same warm-up, as the peer of the download row.

Reported per case: requests per second (or MB/s) and client CPU per request (or per MB), and
HTTP/3 over HTTP/2 for both, measured in the same run; for the download, HTTP/3 over
niquests' HTTP/3 too. Every response is checked (status, size,
the protocol asked for). What it does not show: loss and latency (loopback has neither, and
they are where QUIC differs most), and the server's CPU. See docs/benchmarks.md, "HTTP/3".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TAG = "HTTP3-RESULT "
CONCURRENCY = 32


def _niquests(config: dict[str, Any]) -> dict[str, Any]:
    """niquests' HTTP/3 download of the same file (its process's wall and CPU time)."""
    from urllib.parse import urlsplit

    import niquests

    url: str = config["url"]
    parts = urlsplit(url)
    if parts.hostname is None or parts.port is None:
        raise ValueError(f"niquests: the URL needs a host and a port: {url!r}")
    address = (parts.hostname, parts.port)
    with niquests.Session(retries=0, quic_cache_layer={address: address}) as session:
        warm = session.get(url + "/small", verify=config["ca"], timeout=config["timeout"])
        if warm.status_code != 200 or warm.http_version != 30:
            raise RuntimeError(f"niquests: {warm.status_code} HTTP/{warm.http_version}")
        wall, cpu = time.perf_counter(), time.process_time()
        received = 0
        response = session.get(
            url + "/bulk/file", stream=True, verify=config["ca"], timeout=config["timeout"]
        )
        if response.http_version != 30:
            raise RuntimeError(f"niquests: download over HTTP/{response.http_version}")
        for chunk in response.iter_content(chunk_size=-1):
            received += len(chunk)
        if received != config["size"]:
            raise RuntimeError(f"niquests: {received} bytes, expected {config['size']}")
        return {"download": (time.perf_counter() - wall, time.process_time() - cpu)}


def _child(config: dict[str, Any]) -> dict[str, Any]:
    if config["protocol"] == "niquests":
        return _niquests(config)
    import trio

    from trio_retry import Client, Upstream

    url: str = config["url"]
    h3 = config["protocol"] == "h3"
    want = "HTTP/3" if h3 else "HTTP/2"
    requests: int = config["requests"]

    async def run() -> dict[str, Any]:
        with trio.fail_after(config["timeout"]):
            return await measure()

    async def measure() -> dict[str, Any]:
        async with Client(
            verify=config["ca"],
            upstreams={url: Upstream(http3=h3)},
            retry=None,
        ) as client:

            async def get(path: str) -> None:
                response = await client.get(url + path)
                if response.status != 200 or response.http_version != want:
                    raise RuntimeError(f"{path}: {response.status} {response.http_version}")

            await get("/small")  # the connection, and the warm-up
            results: dict[str, Any] = {}
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(requests):
                await get("/small")
            results["sequential"] = (time.perf_counter() - wall, time.process_time() - cpu)

            wall, cpu = time.perf_counter(), time.process_time()
            left = [requests]

            async def worker() -> None:
                while left[0] > 0:
                    left[0] -= 1
                    await get("/small")

            async with trio.open_nursery() as nursery:
                for _ in range(CONCURRENCY):
                    nursery.start_soon(worker)
            results["concurrent"] = (time.perf_counter() - wall, time.process_time() - cpu)

            wall, cpu = time.perf_counter(), time.process_time()
            received = 0
            async with client.stream("GET", url + "/bulk/file") as response:
                if response.http_version != want:
                    raise RuntimeError(f"download over {response.http_version}")
                async for chunk in response.aiter_raw():
                    received += len(chunk)
            if received != config["size"]:
                raise RuntimeError(f"download: {received} bytes, expected {config['size']}")
            results["download"] = (time.perf_counter() - wall, time.process_time() - cpu)
            return results

    return trio.run(run)


def _measure(config: dict[str, Any], timeout: float) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.http3", "--child", json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(TAG):
            result: dict[str, Any] = json.loads(line[len(TAG) :])
            return result
    raise RuntimeError(f"{config['protocol']} failed ({done.returncode}): {done.stderr[-2000:]}")


def _rows(results: dict[str, dict[str, Any]], requests: int, size: int) -> list[dict[str, Any]]:
    rows = []
    for case in ("sequential", "concurrent", "download"):
        row: dict[str, Any] = {"case": case}
        for protocol in ("h2", "h3"):
            wall, cpu = results[protocol][case]
            if case == "download":
                row[f"{protocol}_rate"] = size / 1e6 / wall  # MB/s
                row[f"{protocol}_cpu"] = cpu / (size / 1e6) * 1e3  # ms per MB
            else:
                row[f"{protocol}_rate"] = requests / wall  # requests/s
                row[f"{protocol}_cpu"] = cpu / requests * 1e6  # us per request
        row["rate_ratio"] = row["h3_rate"] / row["h2_rate"]
        row["cpu_ratio"] = row["h3_cpu"] / row["h2_cpu"]
        if case == "download" and "niquests" in results:
            wall, cpu = results["niquests"][case]
            row["niquests_rate"] = size / 1e6 / wall
            row["niquests_cpu"] = cpu / (size / 1e6) * 1e3
            row["niquests_ratio"] = row["h3_rate"] / row["niquests_rate"]
        rows.append(row)
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.http3", description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--size-mb", type=float, default=20.0)
    parser.add_argument("--json", type=Path, help="write the rows there too")
    parser.add_argument("--timeout", type=float, default=300.0, help="per case, in seconds")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        result = _child(json.loads(args.child))
        print("\n" + TAG + json.dumps(result), flush=True)
        return 0
    try:
        import aioquic  # noqa: F401
    except ImportError:
        print("benchmarks.http3: needs the http3 extra (pip install 'trio_retry[http3]')")
        return 2
    from benchmarks.caddy import CaddyUnavailable, start_caddy
    from benchmarks.servers import make_tls_files

    size = int(args.size_mb * 1e6)
    protocols = ["h2", "h3"]
    try:
        import niquests  # noqa: F401
    except ImportError:
        print("benchmarks.http3: no niquests row (pip install niquests, or the bench extra)")
    else:
        protocols.append("niquests")
    with tempfile.TemporaryDirectory(prefix="bench-h3-") as tmp:
        workdir = Path(tmp)
        tls = make_tls_files(workdir)
        if tls is None:
            print("benchmarks.http3: needs trustme (the bench or test extra)")
            return 2
        try:
            caddy = start_caddy(workdir, tls.cert_chain, tls.key)
        except CaddyUnavailable as exc:
            print(f"benchmarks.http3: {exc}")
            return 2
        try:
            with open(caddy.bulk_dir / "file", "wb") as f:
                f.write(os.urandom(size))
            results = {}
            for protocol in protocols:
                config = {
                    "url": caddy.url,
                    "ca": tls.ca,
                    "protocol": protocol,
                    "requests": args.requests,
                    "size": size,
                    "timeout": args.timeout,
                }
                results[protocol] = _measure(config, args.timeout + 30)
        finally:
            caddy.stop()
    rows = _rows(results, args.requests, size)
    print(f"caddy {caddy.version.split()[0]}, {args.requests} requests, {args.size_mb:g} MB")
    print(f"{'case':<11} {'HTTP/2':>10} {'HTTP/3':>10} {'h3/h2':>6}   CPU: HTTP/2  HTTP/3  h3/h2")
    for row in rows:
        unit = "MB/s" if row["case"] == "download" else "r/s"
        cpu_unit = "ms/MB" if row["case"] == "download" else "us/req"
        print(
            f"{row['case']:<11} {row['h2_rate']:>8.0f}{unit:>2} {row['h3_rate']:>8.0f}"
            f"{'':>2} {row['rate_ratio']:>6.2f}   {row['h2_cpu']:>8.1f}{row['h3_cpu']:>8.1f}"
            f"{row['cpu_ratio']:>7.2f} {cpu_unit}"
        )
        if "niquests_rate" in row:
            print(
                f"{'':<11} niquests' HTTP/3 {row['niquests_rate']:.0f} MB/s, "
                f"{row['niquests_cpu']:.1f} ms/MB CPU; trio_retry's HTTP/3 "
                f"{row['niquests_ratio']:.2f}x its MB/s"
            )
    if args.json is not None:
        args.json.write_text(json.dumps({"caddy": caddy.version, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
