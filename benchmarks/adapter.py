"""The interface every benchmarked client implements, and where it sends its requests.

:class:`BenchmarkedClient` is what every client says about itself, in every benchmark: its name
and label, its runtime, the modules it needs (and so whether it can run here). What it is then
asked to do is the benchmark's: :class:`Adapter` here (requests, counted), and
``benchmarks.exactly_once.peers.Peer`` (calls judged by what the client was told).

An adapter is created for one scenario run against one endpoint. The driver enters
``adapter.lifespan()`` (setup and teardown), then calls ``get(path)`` / ``post(path, body)``
concurrently from ``concurrency`` tasks. Each call returns ``(status, body_bytes)`` after the
whole response body has been read; the driver checks both. The adapters themselves are in
``benchmarks.clients`` (the registry) and ``benchmarks.bare`` (the bare h11 and h2 loops).
"""

from __future__ import annotations

import importlib
import importlib.util
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

H1 = "http/1.1"
H2 = "h2"
H3 = "h3"


@dataclass(frozen=True)
class Endpoint:
    """Where a scenario sends its requests."""

    scheme: str  # "http" or "https"
    host: str
    port: int
    http2: bool
    ca_file: str | None = None
    #: Reached over HTTP/3 (QUIC on the same port) by the clients that speak it.
    http3: bool = False

    @property
    def tls(self) -> bool:
        return self.scheme == "https"

    @property
    def base_url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    def ssl_context(self, alpn: list[str]) -> ssl.SSLContext:
        if self.ca_file is None:
            raise RuntimeError("TLS endpoint without a CA file")
        ctx = ssl.create_default_context(cafile=self.ca_file)
        ctx.set_alpn_protocols(alpn)
        return ctx

    def to_json(self) -> dict[str, Any]:
        return {
            "scheme": self.scheme,
            "host": self.host,
            "port": self.port,
            "http2": self.http2,
            "ca_file": self.ca_file,
            "http3": self.http3,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Endpoint:
        return cls(
            scheme=data["scheme"],
            host=data["host"],
            port=int(data["port"]),
            http2=bool(data["http2"]),
            ca_file=data.get("ca_file"),
            http3=bool(data.get("http3", False)),
        )


class ClientUnavailable(Exception):
    """The client's package is missing or unusable in this environment."""


class BenchmarkedClient:
    """What a benchmarked client says about itself. Subclasses set the class attributes."""

    name: ClassVar[str]
    label: ClassVar[str]
    runtime: ClassVar[str]  # "trio" or "asyncio"
    requires: ClassVar[tuple[str, ...]] = ()  # top-level modules that must be importable
    description: ClassVar[str] = ""
    # Environment variables the worker sets before anything imports the client's package.
    env: ClassVar[dict[str, str]] = {}

    @classmethod
    def missing_modules(cls) -> list[str]:
        """Cheap check (no import) used by the parent process."""
        return [m for m in cls.requires if importlib.util.find_spec(m) is None]

    @classmethod
    def unavailable_reason(cls) -> str | None:
        """Why this client cannot run here (cheap, no import; the runner's check), or None."""
        missing = cls.missing_modules()
        return f"not available (missing {', '.join(missing)})" if missing else None

    @classmethod
    def check_available(cls) -> None:
        """Real check in the worker process; raises :class:`ClientUnavailable`."""
        for module in cls.requires:
            try:
                importlib.import_module(module)
            except Exception as exc:
                raise ClientUnavailable(f"cannot import {module}: {exc!r}") from exc

    @classmethod
    def setup_note(cls, env_applied: bool = True) -> str | None:
        """How this row was set up, when that depends on the checkout (after check_available);
        ``env_applied``: whether ``env`` was set (the profile mode, one process for every row,
        does not set it).

        Shown with the row's results (text table and JSON ``clients[].note``)."""
        return None


class Adapter(BenchmarkedClient):
    """A client in the request benchmarks: ``get``/``post`` against one endpoint."""

    protocols: ClassVar[frozenset[str]]  # which of H1 / H2 / H3 it can be benchmarked on
    # Why an HTTP/2 scenario skips this client when H2 is not in ``protocols``.
    no_h2_reason: ClassVar[str] = "no HTTP/2 support"
    # Why a cleartext scenario skips this client (None: it runs there).
    tls_only: ClassVar[str | None] = None

    def __init__(self, endpoint: Endpoint, concurrency: int) -> None:
        self.endpoint = endpoint
        self.concurrency = concurrency

    async def setup(self) -> None:
        pass

    async def teardown(self) -> None:
        pass

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        await self.setup()
        try:
            yield
        finally:
            await self.teardown()

    async def get(self, path: str) -> tuple[int, int]:
        raise NotImplementedError

    async def post(self, path: str, body: bytes) -> tuple[int, int]:
        raise NotImplementedError
