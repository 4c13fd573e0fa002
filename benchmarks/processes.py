"""A server subprocess on loopback, from its start to its stop: a port free on TCP and UDP at
once, waiting until it listens (or fails), and stopping it. Shared by the benchmark's caddy and
the real-server helpers of the tests (``tests/support/procs.py``), which import it from here
(the benchmarks never import from the tests)."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable

__all__ = ["HOST", "accepts", "free_tcp_udp_port", "stop_process", "wait_ready"]

HOST = "127.0.0.1"


def free_tcp_udp_port() -> int:
    """A loopback port free on both TCP and UDP just now (HTTP/3 servers listen on both with
    one number). Taken again meanwhile, the server fails to bind; `OSError` when none is found
    after 100 tries."""
    for _ in range(100):
        with socket.socket() as tcp:
            tcp.bind((HOST, 0))
            port: int = tcp.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                try:
                    udp.bind((HOST, port))
                except OSError:
                    continue
        return port
    raise OSError("no loopback port free on both TCP and UDP after 100 tries")


def accepts(target: int | str) -> bool:
    """Whether something accepts a connection on loopback TCP port `target`, or on the Unix
    socket at path `target`, within 0.5 s."""
    try:
        if isinstance(target, str):
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(0.5)
                sock.connect(target)
        else:
            socket.create_connection((HOST, target), timeout=0.5).close()
    except OSError:
        return False
    return True


def wait_ready(
    process: subprocess.Popen[bytes],
    ready: Callable[[], bool],
    *,
    name: str,
    waiting_for: object,
    timeout: float,
    unavailable: Callable[[str], Exception],
) -> None:
    """Poll `ready` until it says the server `name` is up; `unavailable` (the caller's
    exception) when the process exits first or `timeout` seconds pass. `waiting_for` names
    what is awaited in that message (formatted when raised)."""
    end = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise unavailable(f"{name} exited with status {process.returncode}")
        if time.monotonic() > end:
            raise unavailable(f"{name} did not listen on {waiting_for} within {timeout}s")
        if ready():
            return
        time.sleep(0.05)


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 5 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
