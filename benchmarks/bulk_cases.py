"""The vocabulary of ``python -m benchmarks.bulk``: the sizes, protocols, directions and clients
its cases are made of (shared by the run, :mod:`benchmarks.bulk`, and its table,
:mod:`benchmarks.bulk_report`)."""

from __future__ import annotations

from dataclasses import dataclass

MB = 1_000_000
SMALL = 1024  # the baseline transfer: 1 KB
PROTOCOLS = ("h1", "h1_tls", "h2_tls")
PROTOCOL_TITLES = {"h1": "HTTP/1.1", "h1_tls": "HTTP/1.1 over TLS", "h2_tls": "HTTP/2 over TLS"}
DIRECTIONS = ("download", "upload")


@dataclass(frozen=True)
class BulkClient:
    name: str
    label: str
    h2: bool  # speaks HTTP/2
    download_only: bool = False
    no_h2_reason: str = "no HTTP/2 support"


CLIENTS = (
    BulkClient("curl", "curl (C, the limit)", h2=True),
    BulkClient("trio_retry", "trio_retry", h2=True),
    BulkClient("trio_retry_file", "trio_retry to a file", h2=True, download_only=True),
    BulkClient("httpx_trio", "httpx (Trio)", h2=True),
    BulkClient("httpx_asyncio", "httpx (asyncio)", h2=True),
    BulkClient("aiohttp", "aiohttp", h2=False, no_h2_reason="aiohttp has no HTTP/2"),
    BulkClient("niquests", "niquests (sync)", h2=True),
)
BY_NAME = {c.name: c for c in CLIENTS}
BASELINE = "curl"
