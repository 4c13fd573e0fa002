"""HTTP/3 beside HTTP/2 on one server: ``python -m benchmarks.http3 [--requests N] [--size-mb M]``.

caddy (the OS package, ``benchmarks/caddy.py``) serves both protocols on one port; trio_retry
reaches it over HTTP/2 (TCP, ALPN ``h2``) and over HTTP/3 (QUIC, ``Upstream(http3=True)``),
with the same client options otherwise, over each QUIC library installed (``--quic``: qh3,
aioquic, or both, in one run; the client's ``TRIO_RETRY_QUIC``). Each case runs in a process
of its own (this module with ``--child``), which measures its own wall time and CPU time
(``time.process_time``: all of its threads) around the workload only, after one warm-up
request on the same connection:

- **sequential**: ``--requests`` small GETs (``/small``, 13 bytes) one after the other;
- **concurrent**: the same number of small GETs, 32 at a time on one connection;
- **download**: one ``--size-mb`` MB file, streamed.

niquests (its synchronous ``Session``, HTTP/3 over qh3, known in advance through
``quic_cache_layer``) downloads the same file over HTTP/3 in a process of its own, after the
same warm-up, as the peer of the download row.

Reported per case: requests per second (or MB/s) and client CPU per request (or per MB), and
HTTP/3 over HTTP/2 for both, measured in the same run; for the download, HTTP/3 over
niquests' HTTP/3 too. What bounds the download is printed beside it: **the server's CPU** per
MB for each process (caddy's, read from ``/proc``: on a machine of two cores, a server that
needs more CPU per MB than the client caps the download whatever the client does), the UDP
datagrams the kernel dropped for a full receive buffer while it ran (``RcvbufErrors``, the
whole machine's count), and caddy's complaints about its UDP buffers if it logged any (quic-go
asks for bigger ones than ``net.core.rmem_max`` may allow). With ``--datagrams`` (root, and
``iptables``), the datagrams each way on caddy's UDP port per MB of the download too: those
the client sends are its acknowledgements, which the server must receive and process, and
those it receives beyond the file's share are retransmissions. Every response is checked
(status, size, the protocol asked for). What it does not show: loss and latency (loopback has
neither, and they are where QUIC differs most). See docs/benchmarks.md, "HTTP/3".
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
        start = _beside(config)
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
        timed = (time.perf_counter() - wall, time.process_time() - cpu)
        return {"download": timed, **_since(config, start)}


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

            start = _beside(config)
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
            results.update(_since(config, start))
            return results

    return trio.run(run)


def _measure(config: dict[str, Any], timeout: float, quic: str | None) -> dict[str, Any]:
    env = dict(os.environ)
    if quic is not None:
        env["TRIO_RETRY_QUIC"] = quic
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.http3", "--child", json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(TAG):
            result: dict[str, Any] = json.loads(line[len(TAG) :])
            return result
    raise RuntimeError(f"{config['protocol']} failed ({done.returncode}): {done.stderr[-2000:]}")


Beside = tuple[float | None, int | None, tuple[int, int] | None]
#: The comment that marks ``--datagrams``' counting rules (``iptables``, chain OUTPUT).
RULE = "benchmarks.http3"


def _beside(config: dict[str, Any]) -> Beside:
    """The server's CPU seconds, the machine's UDP receive-buffer drops, and the datagrams
    to and from caddy's UDP port (``--datagrams``), so far."""
    port = config.get("count_port")
    counted = None if port is None else _datagrams(port)
    return _cpu_seconds(config["server_pid"]), _rcvbuf_errors(), counted


def _since(config: dict[str, Any], start: Beside) -> dict[str, Any]:
    """What the server used, the kernel dropped, and the datagrams each way, since ``start``
    (``None``: not known)."""
    cpu, drops, counted = _beside(config)
    before = start[2]
    return {
        "server_cpu": None if cpu is None or start[0] is None else cpu - start[0],
        "rcvbuf_drops": None if drops is None or start[1] is None else drops - start[1],
        "datagrams": None
        if counted is None or before is None
        else [counted[0] - before[0], counted[1] - before[1]],
    }


def _iptables(action: str, port: int) -> None:
    """Add (``-I``) or remove (``-D``) the two rules that count the datagrams to and from
    ``port`` (UDP, on loopback: chain OUTPUT sees both ways). Raises ``OSError`` or
    ``subprocess.CalledProcessError`` where they cannot be set."""
    for way in ("--dport", "--sport"):
        rule = ["OUTPUT", "-p", "udp", way, str(port), "-m", "comment", "--comment", RULE]
        subprocess.run(["iptables", action, *rule], check=True, capture_output=True)


def _datagrams(port: int) -> tuple[int, int] | None:
    """The datagrams counted so far to ``port`` (the client's) and from it (the server's)."""
    try:
        listing = subprocess.run(
            ["iptables", "-L", "OUTPUT", "-v", "-n", "-x"], capture_output=True, text=True
        ).stdout
    except OSError:
        return None
    up = down = None
    for line in listing.splitlines():
        if RULE in line:
            if f"dpt:{port}" in line:
                up = int(line.split()[0])
            elif f"spt:{port}" in line:
                down = int(line.split()[0])
    return None if up is None or down is None else (up, down)


def _cpu_seconds(pid: int) -> float | None:
    """The CPU time (user and system) process ``pid`` used so far (Linux ``/proc``)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rcvbuf_errors() -> int | None:
    """UDP datagrams the kernel dropped so far for a full receive buffer (this network
    namespace, every socket: Linux ``/proc/net/snmp``)."""
    try:
        rows = [line.split() for line in Path("/proc/net/snmp").read_text().splitlines()]
    except OSError:
        return None
    names, values = [row for row in rows if row and row[0] == "Udp:"][:2]
    counts = dict(zip(names[1:], values[1:], strict=True))
    return int(counts["RcvbufErrors"]) if "RcvbufErrors" in counts else None


def _per(value: float | None, amount: float, scale: float) -> float | None:
    return None if value is None else value / amount * scale


def _rows(
    results: dict[str, dict[str, Any]], libraries: list[str], requests: int, size: int
) -> list[dict[str, Any]]:
    """One row per case and QUIC library: HTTP/2's figures and HTTP/3's over that library,
    from the same run; CPU per request in µs (per MB in ms for the download), the server's
    beside the client's."""
    rows = []
    megabytes = size / 1e6
    for library in libraries:
        for case in ("sequential", "concurrent", "download"):
            row: dict[str, Any] = {"case": case, "quic": library}
            amount, scale = (megabytes, 1e3) if case == "download" else (requests, 1e6)
            for protocol, key in (("h2", "h2"), ("h3", f"h3:{library}")):
                wall, cpu = results[key][case]
                row[f"{protocol}_rate"] = amount / wall  # MB/s, or requests/s
                row[f"{protocol}_cpu"] = cpu / amount * scale
                if case == "download":
                    row[f"{protocol}_server_cpu"] = _per(results[key]["server_cpu"], amount, scale)
                    row[f"{protocol}_rcvbuf_drops"] = results[key]["rcvbuf_drops"]
                    row[f"{protocol}_datagrams_per_mb"] = _each(results[key], megabytes)
            row["rate_ratio"] = row["h3_rate"] / row["h2_rate"]
            row["cpu_ratio"] = row["h3_cpu"] / row["h2_cpu"]
            if case == "download" and "niquests" in results:
                wall, cpu = results["niquests"][case]
                row["niquests_rate"] = megabytes / wall
                row["niquests_cpu"] = cpu / megabytes * 1e3
                row["niquests_server_cpu"] = _per(results["niquests"]["server_cpu"], megabytes, 1e3)
                row["niquests_ratio"] = row["h3_rate"] / row["niquests_rate"]
                row["niquests_datagrams_per_mb"] = _each(results["niquests"], megabytes)
            rows.append(row)
    return rows


def _each(result: dict[str, Any], megabytes: float) -> list[float] | None:
    """Datagrams per MB each way (client to server, server to client), if counted."""
    counted = result.get("datagrams")
    return None if counted is None else [counted[0] / megabytes, counted[1] / megabytes]


def _libraries(asked: str) -> list[str]:
    """The QUIC libraries to run HTTP/3 over (``--quic``): those installed of the asked."""
    import importlib.util

    wanted = ["qh3", "aioquic"] if asked == "both" else [asked]
    return [name for name in wanted if importlib.util.find_spec(name) is not None]


def _report(rows: list[dict[str, Any]], caddy_version: str, args: argparse.Namespace) -> None:
    print(f"caddy {caddy_version.split()[0]}, {args.requests} requests, {args.size_mb:g} MB")
    for row in rows:
        unit = "MB/s" if row["case"] == "download" else "r/s"
        cpu_unit = "ms/MB" if row["case"] == "download" else "us/req"
        label = f"{row['case']} ({row['quic']})"
        print(
            f"{label:<22} HTTP/2 {row['h2_rate']:>6.0f} {unit:<4} HTTP/3 {row['h3_rate']:>6.0f}"
            f" {unit:<4} h3/h2 {row['rate_ratio']:>5.2f}   CPU: HTTP/2 {row['h2_cpu']:>6.1f}"
            f"  HTTP/3 {row['h3_cpu']:>6.1f}  h3/h2 {row['cpu_ratio']:>5.2f} {cpu_unit}"
        )
        if row["case"] != "download":
            continue
        if "niquests_rate" in row:
            print(
                f"{'':<22} niquests' HTTP/3 {row['niquests_rate']:.0f} MB/s, "
                f"{row['niquests_cpu']:.1f} ms/MB CPU; trio_retry's HTTP/3 "
                f"{row['niquests_ratio']:.2f}x its MB/s"
            )
        server = [
            f"{name} {row[key]:.1f}"
            for name, key in (
                ("HTTP/2", "h2_server_cpu"),
                ("HTTP/3", "h3_server_cpu"),
                ("niquests' HTTP/3", "niquests_server_cpu"),
            )
            if row.get(key) is not None
        ]
        if server:
            print(f"{'':<22} the server's CPU per MB: {', '.join(server)} ms")
        counted = [
            f"{name} {row[key][0]:.1f} / {row[key][1]:.0f}"
            for name, key in (
                ("HTTP/3", "h3_datagrams_per_mb"),
                ("niquests' HTTP/3", "niquests_datagrams_per_mb"),
            )
            if row.get(key) is not None
        ]
        if counted:
            print(f"{'':<22} datagrams per MB, to / from the server: {', '.join(counted)}")
        if row.get("h3_rcvbuf_drops"):
            print(
                f"{'':<22} {row['h3_rcvbuf_drops']} UDP datagrams dropped for a full receive "
                "buffer during the HTTP/3 download (the machine's count)"
            )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.http3", description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--size-mb", type=float, default=20.0)
    parser.add_argument("--json", type=Path, help="write the rows there too")
    parser.add_argument(
        "--quic",
        choices=("both", "qh3", "aioquic"),
        default="both",
        help="the QUIC library (libraries) HTTP/3 runs over, those installed (default: both)",
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="per case, in seconds")
    parser.add_argument(
        "--datagrams",
        action="store_true",
        help="count the download's datagrams each way with iptables (root; rules removed after)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        result = _child(json.loads(args.child))
        print("\n" + TAG + json.dumps(result), flush=True)
        return 0
    libraries = _libraries(args.quic)
    if "aioquic" not in _libraries("aioquic") or not libraries:
        print("benchmarks.http3: needs the http3 extra (pip install 'trio_retry[http3]')")
        return 2
    from benchmarks.caddy import CaddyUnavailable, start_caddy
    from benchmarks.servers import make_tls_files

    size = int(args.size_mb * 1e6)
    runs: list[tuple[str, str, str | None]] = [("h2", "h2", None)]
    runs += [(f"h3:{library}", "h3", library) for library in libraries]
    try:
        import niquests  # noqa: F401
    except ImportError:
        print("benchmarks.http3: no niquests row (pip install niquests, or the bench extra)")
    else:
        runs.append(("niquests", "niquests", None))
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
        counting = False
        try:
            if args.datagrams:
                _iptables("-I", caddy.port)
                counting = True
            with open(caddy.bulk_dir / "file", "wb") as f:
                f.write(os.urandom(size))
            results = {}
            for key, protocol, quic in runs:
                config = {
                    "url": caddy.url,
                    "ca": tls.ca,
                    "protocol": protocol,
                    "requests": args.requests,
                    "size": size,
                    "timeout": args.timeout,
                    "server_pid": caddy.process.pid,
                    "count_port": caddy.port if counting else None,
                }
                results[key] = _measure(config, args.timeout + 30, quic)
        finally:
            if counting:
                _iptables("-D", caddy.port)
            caddy.stop()
        complaints = [
            line
            for line in (workdir / "caddy.log").read_text(errors="replace").splitlines()
            if "buffer size" in line
        ]
    rows = _rows(results, libraries, args.requests, size)
    _report(rows, caddy.version, args)
    for line in complaints:
        print(f"caddy: {line[:300]}")
    if args.json is not None:
        document = {"caddy": caddy.version, "caddy_buffer_warnings": complaints, "rows": rows}
        args.json.write_text(json.dumps(document, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
