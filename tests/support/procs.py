"""What the real-server helpers for HTTP/3 (caddy.py, hypercorn_server.py) share: a port free
on TCP and UDP at once, and stopping a server process."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

__all__ = ["free_tcp_udp_port", "stop_process", "tail"]

HOST = "127.0.0.1"


def free_tcp_udp_port() -> int:
    """A loopback port free on both TCP and UDP just now (HTTP/3 servers listen on both with
    one number). Taken again meanwhile, the server fails to bind and its helper retries."""
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


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 5 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


def tail(path: Path) -> str:
    """The end of a log file, for an error message."""
    return path.read_text(errors="replace")[-800:].strip() if path.exists() else ""
