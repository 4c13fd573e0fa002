"""One adapter per HTTP client, all behind the same small interface.

An adapter is created for one scenario run against one endpoint. The driver enters
``adapter.lifespan()`` (setup and teardown), then calls ``get(path)`` / ``post(path, body)``
concurrently from ``concurrency`` tasks. Each call returns ``(status, body_bytes)`` after the
whole response body has been read; the driver checks both.

Optional packages (httpx, aiohttp, niquests, trio_retry) are imported only inside the worker
process that runs that client, so a missing one makes its client "not available", never the
harness fail.
"""

from __future__ import annotations

import inspect
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, ClassVar

from benchmarks.adapter import H1, H2, H3, Adapter, ClientUnavailable, Endpoint
from benchmarks.bare import H2TrioAdapter, H11TrioAdapter, TrioRawAdapter
from benchmarks.loadgen import LOAD_GENERATORS

__all__ = [
    "ADAPTERS",
    "BASELINE",
    "H1",
    "H2",
    "H3",
    "Adapter",
    "AiohttpAdapter",
    "ClientUnavailable",
    "Endpoint",
    "H11TrioAdapter",
    "H2TrioAdapter",
    "HttpxAsyncioAdapter",
    "HttpxTrioAdapter",
    "NiquestsAdapter",
    "NiquestsMultiplexedAdapter",
    "TRIO_RETRY_VARIANTS",
    "TrioRawAdapter",
    "TrioRetryAdapter",
]


# --------------------------------------------------------------------------------------------
# trio_retry, at its defaults and in the variants the performance issue (#16) measures. If the
# import or the attribute lookup fails, the row is reported as "not available" and skipped.
# --------------------------------------------------------------------------------------------

FAST_PATH_ENV = "TRIO_RETRY_HTTP1_FAST_PATH"  # "0": the HTTP/1.1 fast path off


def client_accepts(option: str) -> bool:
    """Whether this checkout's ``trio_retry.Client`` takes the keyword argument ``option``."""
    import trio_retry

    try:
        params = inspect.signature(trio_retry.Client).parameters
    except (TypeError, ValueError):
        return False
    return option in params


class TrioRetryAdapter(Adapter):
    """``trio_retry.Client`` with what users get by default (the default ``StageTimeouts``
    included): only the pool size, the benchmark's CA and ``http2`` are set, and
    ``pool_timeout`` to the 30 s every other client here is given for everything (a
    benchmark's queue, 20,000 calls through 50 connections, may wait longer than the
    default 5 s on a busy machine). Each variant below changes one thing, through
    :meth:`client_options` or its own ``get``/``post``."""

    name = "trio_retry"
    label = "trio_retry"
    runtime = "trio"
    protocols = frozenset({H1, H2, H3})
    requires = ("trio_retry",)
    description = "trio_retry.Client (this project) at its defaults, pooled, HTTP/2 via ALPN"

    @classmethod
    def check_available(cls) -> None:
        super().check_available()
        import trio_retry

        if not hasattr(trio_retry, "Client"):
            raise ClientUnavailable("trio_retry has no Client yet")

    def client_options(self) -> dict[str, Any]:
        """``Client(...)`` arguments this row adds to the common ones."""
        return {}

    def check_after(self) -> None:
        """Raise if the row did not do what it says (called after the client closed)."""

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        import trio_retry

        ctx: ssl.SSLContext | None = None
        if self.endpoint.tls:
            ctx = self.endpoint.ssl_context([H2, H1] if self.endpoint.http2 else [H1])
        self._base = self.endpoint.base_url
        options = self.client_options()
        if client_accepts("pool_timeout"):
            options.setdefault("pool_timeout", 30.0)
        if self.endpoint.http3:
            if "upstreams" in options:
                raise ClientUnavailable(f"{self.name} is not measured over HTTP/3")
            options["upstreams"] = {self._base: trio_retry.Upstream(http3=True)}
        # The Client owns a nursery, so it is entered here for the whole scenario run.
        async with trio_retry.Client(
            max_connections=self.concurrency,
            max_connections_per_origin=self.concurrency,
            ssl_context=ctx,
            http2=self.endpoint.http2,
            **options,
        ) as client:
            self._client: Any = client
            if self.endpoint.http3:
                await self._check_http3()
            yield
            if self.endpoint.http3:
                # A QUIC failure during the run would have sent the rest over TCP, and the
                # origin stays marked broken: the last request would not be HTTP/3 either.
                await self._check_http3()
        self.check_after()

    async def _check_http3(self) -> None:
        r = await self._client.get(self._base + "/small")
        if r.http_version != "HTTP/3":
            raise RuntimeError(f"{self.name}: a request went over {r.http_version}, not HTTP/3")

    async def get(self, path: str) -> tuple[int, int]:
        r = await self._client.get(self._base + path)
        return r.status, len(r.content)

    async def post(self, path: str, body: bytes) -> tuple[int, int]:
        r = await self._client.post(self._base + path, content=body)
        return r.status, len(r.content)


DEADLINE = 30.0  # seconds: never reached on loopback; only its bookkeeping is measured


class TrioRetryDeadlineAdapter(TrioRetryAdapter):
    name = "trio_retry_deadline"
    label = "trio_retry +deadline"
    description = (
        f"trio_retry with a deadline on every call, as users set one: Client(deadline={DEADLINE:g})"
    )

    def client_options(self) -> dict[str, Any]:
        return {"deadline": DEADLINE}


class TrioRetryCallDeadlineAdapter(TrioRetryAdapter):
    name = "trio_retry_call_deadline"
    label = "trio_retry +get(deadline)"
    description = (
        f"trio_retry with the deadline passed per call: get(url, deadline={DEADLINE:g}) "
        "(a call with options)"
    )

    async def get(self, path: str) -> tuple[int, int]:
        r = await self._client.get(self._base + path, deadline=DEADLINE)
        return r.status, len(r.content)

    async def post(self, path: str, body: bytes) -> tuple[int, int]:
        r = await self._client.post(self._base + path, content=body, deadline=DEADLINE)
        return r.status, len(r.content)


class TrioRetryNoFastAdapter(TrioRetryAdapter):
    name = "trio_retry_no_fast"
    label = "trio_retry fast path off"
    protocols = frozenset({H1})
    no_h2_reason = "the fast path is HTTP/1.1 only (this is the trio_retry row over HTTP/2)"
    description = (
        "trio_retry with the HTTP/1.1 fast path off: Client(http1_fast_path=False), "
        f"and {FAST_PATH_ENV}=0 in the worker's environment"
    )
    # Set by the worker before trio_retry is imported.
    env: ClassVar[dict[str, str]] = {FAST_PATH_ENV: "0"}

    @classmethod
    def setup_note(cls, env_applied: bool = True) -> str | None:
        env = f"{FAST_PATH_ENV}=0"
        if client_accepts("http1_fast_path"):
            return "Client(http1_fast_path=False)" + (f", {env}" if env_applied else "")
        if env_applied:
            return (
                f"this checkout's Client has no http1_fast_path option: only {env} was set (no "
                "effect unless trio_retry reads it; without a fast path the row measures the "
                "defaults)"
            )
        return (
            f"this checkout's Client has no http1_fast_path option and {env} is not set in this "
            "process (--env sets it for every row): the row measures the defaults"
        )

    def client_options(self) -> dict[str, Any]:
        return {"http1_fast_path": False} if client_accepts("http1_fast_path") else {}


class TrioRetryOnAttemptAdapter(TrioRetryAdapter):
    name = "trio_retry_on_attempt"
    label = "trio_retry +on_attempt"
    description = "trio_retry with Client(on_attempt=f), f a sync function counting the attempts"

    def client_options(self) -> dict[str, Any]:
        self.attempts = 0

        def on_attempt(attempt: object) -> None:
            self.attempts += 1

        return {"on_attempt": on_attempt}

    def check_after(self) -> None:
        if self.attempts == 0:
            raise RuntimeError("on_attempt was never called")


class TrioRetryBulkheadAdapter(TrioRetryAdapter):
    name = "trio_retry_bulkhead"
    label = "trio_retry +bulkhead"
    description = (
        "trio_retry with a bulkhead as large as the concurrency: "
        "Client(upstreams={origin: Upstream(max_concurrency=N)})"
    )

    def client_options(self) -> dict[str, Any]:
        import trio_retry

        bulkhead = trio_retry.Upstream(max_concurrency=self.concurrency)
        return {"upstreams": {self.endpoint.base_url: bulkhead}}


TLS_STREAM_ENV = "TRIO_RETRY_TLS_FAST_PATH"  # "0": trio.SSLStream (the default: tlssock.py)


class TrioRetrySSLStreamAdapter(TrioRetryAdapter):
    name = "trio_retry_sslstream"
    label = "trio_retry, TLS on trio.SSLStream"
    description = (
        "trio_retry with TLS on trio.SSLStream instead of the connection's socket "
        f"({TLS_STREAM_ENV}=0 in the worker's environment); TLS scenarios only"
    )
    env: ClassVar[dict[str, str]] = {TLS_STREAM_ENV: "0"}
    protocols = frozenset({H1, H2})
    tls_only = "TLS only (in cleartext the same as the trio_retry row)"

    @classmethod
    def setup_note(cls, env_applied: bool = True) -> str | None:
        if env_applied:
            return f"{TLS_STREAM_ENV}=0"
        return f"{TLS_STREAM_ENV}=0 is not set in this process (--env sets it for every row)"


TRIO_RETRY_VARIANTS: tuple[type[TrioRetryAdapter], ...] = (
    TrioRetryDeadlineAdapter,
    TrioRetryCallDeadlineAdapter,
    TrioRetryNoFastAdapter,
    TrioRetryOnAttemptAdapter,
    TrioRetryBulkheadAdapter,
    TrioRetrySSLStreamAdapter,
)


# --------------------------------------------------------------------------------------------
# httpx, on Trio and on asyncio (the same code; the runtime decides the backend)
# --------------------------------------------------------------------------------------------


class _HttpxAdapter(Adapter):
    protocols = frozenset({H1, H2})
    requires = ("httpx", "h2")

    async def setup(self) -> None:
        import httpx

        verify: ssl.SSLContext | bool = (
            self.endpoint.ssl_context([H2, H1] if self.endpoint.http2 else [H1])
            if self.endpoint.tls
            else False
        )
        self._base = self.endpoint.base_url
        self._client = httpx.AsyncClient(
            http2=self.endpoint.http2,
            verify=verify,
            trust_env=False,
            timeout=httpx.Timeout(30.0),
            limits=httpx.Limits(
                max_connections=self.concurrency,
                max_keepalive_connections=self.concurrency,
            ),
        )

    async def teardown(self) -> None:
        await self._client.aclose()

    async def get(self, path: str) -> tuple[int, int]:
        r = await self._client.get(self._base + path)
        return r.status_code, len(r.content)

    async def post(self, path: str, body: bytes) -> tuple[int, int]:
        r = await self._client.post(self._base + path, content=body)
        return r.status_code, len(r.content)


class HttpxTrioAdapter(_HttpxAdapter):
    name = "httpx_trio"
    label = "httpx (Trio)"
    runtime = "trio"
    description = "httpx.AsyncClient under trio.run (httpcore's Trio backend)"


class HttpxAsyncioAdapter(_HttpxAdapter):
    name = "httpx_asyncio"
    label = "httpx (asyncio)"
    runtime = "asyncio"
    description = "httpx.AsyncClient under asyncio.run (default event loop)"


# --------------------------------------------------------------------------------------------
# aiohttp (asyncio; its HTTP parser is C-accelerated when the wheel has it)
# --------------------------------------------------------------------------------------------


class AiohttpAdapter(Adapter):
    name = "aiohttp"
    label = "aiohttp"
    runtime = "asyncio"
    protocols = frozenset({H1})
    requires = ("aiohttp",)
    description = "aiohttp.ClientSession with a TCPConnector pool (asyncio, C parser)"

    async def setup(self) -> None:
        import aiohttp

        ssl_arg: ssl.SSLContext | bool = (
            self.endpoint.ssl_context([H1]) if self.endpoint.tls else True
        )
        self._base = self.endpoint.base_url
        connector = aiohttp.TCPConnector(limit=self.concurrency, limit_per_host=0, ssl=ssl_arg)
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=30.0)
        )

    async def teardown(self) -> None:
        await self._session.close()

    async def get(self, path: str) -> tuple[int, int]:
        async with self._session.get(self._base + path) as resp:
            body = await resp.read()
            return resp.status, len(body)

    async def post(self, path: str, body: bytes) -> tuple[int, int]:
        async with self._session.post(self._base + path, data=body) as resp:
            data = await resp.read()
            return resp.status, len(data)


# --------------------------------------------------------------------------------------------
# niquests (asyncio, like aiohttp; HTTP/2 and HTTP/3 too): at its defaults, and multiplexed
# over HTTP/2 (the suite's HTTP/2 scenario is 32 streams on one connection).
# --------------------------------------------------------------------------------------------


class NiquestsAdapter(Adapter):
    name = "niquests"
    label = "niquests"
    runtime = "asyncio"
    protocols = frozenset({H1, H2, H3})
    requires = ("niquests",)
    description = (
        "niquests.AsyncSession as documented (not multiplexed: a connection per request in "
        "flight; HTTP/3 known in advance through quic_cache_layer)"
    )

    #: ``AsyncSession(multiplexed=True)`` on one connection: each call waits for its own (lazy)
    #: response with ``gather``.
    multiplexed: ClassVar[bool] = False

    async def setup(self) -> None:
        import niquests

        endpoint = self.endpoint
        self._base = endpoint.base_url
        address = (endpoint.host, endpoint.port)
        self._session = niquests.AsyncSession(
            retries=0,
            multiplexed=self.multiplexed,
            pool_connections=1,
            pool_maxsize=1 if self.multiplexed else self.concurrency,
            disable_http2=not endpoint.http2,
            disable_http3=not endpoint.http3,
            # Without it niquests speaks HTTP/3 only after an Alt-Svc seen over TCP.
            quic_cache_layer={address: address} if endpoint.http3 else None,
        )
        self._verify: str | bool = endpoint.ca_file or True
        # The row measures the protocol the scenario names, or none: niquests falls back
        # quietly (to HTTP/1.1 without ALPN h2, to TCP without QUIC).
        want = 30 if endpoint.http3 else 20 if endpoint.http2 else 11
        r = await self._session.get(self._base + "/small", verify=self._verify, timeout=30)
        if self.multiplexed:
            await self._session.gather(r)
        if r.http_version != want:
            got = "?" if r.http_version is None else f"{r.http_version / 10:g}"
            raise ClientUnavailable(f"{self.name} went over HTTP/{got}, not {want / 10:g}")

    async def teardown(self) -> None:
        await self._session.close()

    async def get(self, path: str) -> tuple[int, int]:
        r = await self._session.get(self._base + path, verify=self._verify, timeout=30)
        if self.multiplexed:
            await self._session.gather(r)
        return r.status_code or 0, len(r.content or b"")

    async def post(self, path: str, body: bytes) -> tuple[int, int]:
        r = await self._session.post(self._base + path, data=body, verify=self._verify, timeout=30)
        if self.multiplexed:
            await self._session.gather(r)
        return r.status_code or 0, len(r.content or b"")


class NiquestsMultiplexedAdapter(NiquestsAdapter):
    """niquests with its requests as streams of one HTTP/2 connection, what the suite's HTTP/2
    scenario measures. ``multiplexed=True`` alone is not that: with ``pool_maxsize=32`` each
    task still took a connection of its own (32, counted with ``ss``); hence
    ``pool_maxsize=1``. A row of its own rather than the default row changed: the scale
    benchmark measures niquests as documented, a connection per request in flight."""

    name = "niquests_multiplexed"
    label = "niquests multiplexed"
    protocols = frozenset({H2})
    description = (
        "niquests.AsyncSession(multiplexed=True, pool_maxsize=1): concurrent requests as "
        "streams of one HTTP/2 connection; HTTP/2 scenarios only"
    )


# In display order: the project's own client, its variants, the others, then the C limits;
# BASELINE is the reference of the "x httpx/Trio" columns.
_ORDER: tuple[type[Adapter], ...] = (
    TrioRetryAdapter,
    *TRIO_RETRY_VARIANTS,
    HttpxTrioAdapter,
    HttpxAsyncioAdapter,
    AiohttpAdapter,
    NiquestsAdapter,
    NiquestsMultiplexedAdapter,
    H11TrioAdapter,
    H2TrioAdapter,
    TrioRawAdapter,
    *LOAD_GENERATORS,  # the C limits (wrk, h2load): GET scenarios of the throughput suite
)
ADAPTERS: dict[str, type[Adapter]] = {a.name: a for a in _ORDER}
BASELINE = HttpxTrioAdapter.name
