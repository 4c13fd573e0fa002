"""The clients, each in a process of its own: ``python -m benchmarks.exactly_once.peers CONFIG``.

One process per client run, so the sockets it leaves after closing its client are its own to
count (``/proc/self/fd``, before the event loop starts and after it ended) and a crash or hang
cannot take the lab down. The protocol is :func:`benchmarks.worker.serve_config`'s: one JSON
argument, the result the last stdout line after :data:`RESULT_TAG`.

Each client is used the way its documentation recommends, with the run's deadline given in the
library's own terms: trio_retry ``deadline=`` (the whole call); aiohttp
``ClientTimeout(total=)`` (the whole call); httpx and niquests ``timeout=`` (each connect, read
and write on its own: what their documentation offers; neither has a per-call total). The
retry recipes are the common ones, the loops written here:

- ``httpx_retries``: ``AsyncHTTPTransport(retries=3)`` (httpx retries connection failures);
- ``httpx_tenacity``: a tenacity-style loop, three attempts on ``httpx.TransportError`` with
  exponential backoff, whatever the method (what ``@retry(retry=retry_if_exception_type(...))``
  around a call does);
- ``aiohttp_retry``: the aiohttp-retry style loop: three attempts on ``ClientError`` or
  ``TimeoutError``, exponential backoff, any method;
- ``niquests_retry``: ``AsyncSession(retries=RetryConfiguration(total=3, backoff_factor=0.1))``
  (urllib3's ``Retry``: connection errors for any method, read errors for idempotent ones).

"The library's own" exceptions: trio_retry ``TrioRetryError``; httpx ``HTTPError``,
``StreamError``, ``InvalidURL``; aiohttp ``ClientError`` and ``asyncio.TimeoutError`` (which
its documentation names for timeouts); niquests ``RequestException``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import os
import random
import ssl
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import urlsplit

import trio

from benchmarks.adapter import BenchmarkedClient, Endpoint
from benchmarks.exactly_once.reconciler import LedgerReconciler
from benchmarks.exactly_once.records import GET, POST, CallRecord, TrailAttempt
from benchmarks.exactly_once.workload import BODY, Call, CallFn, plan, run_asyncio, run_trio
from benchmarks.worker import serve_config

RESULT_TAG = "EXACTLY-ONCE-RESULT "
PATH = "/r"
RETRY_ATTEMPTS = 3
#: trio_retry_reconcile: the wait for an answer, as a share of the deadline (the backend
#: answers within ``--max-delay``, 0.4 s; the rest of the deadline is the reconciler's), and
#: the least share of it left for an attempt to start (``RetryPolicy(min_attempt_budget=)``)
HEAD_SHARE = 0.3
START_SHARE = 0.5


@dataclass(frozen=True, kw_only=True)
class Config:
    client: str
    urls: dict[str, str]  # h1, h2 (TLS), h2c: scheme://host:port
    ca_file: str
    seed: int
    calls: int
    concurrency: int
    deadline: float
    seconds: float

    def url(self, call: Call) -> str:
        return self.urls[call.proto] + PATH

    def context(self, alpn: list[str]) -> ssl.SSLContext:
        """The TLS lane's context (the benchmarks' :class:`~benchmarks.adapter.Endpoint`'s)."""
        url = urlsplit(self.urls["h2"])
        tls = Endpoint("https", url.hostname or "", url.port or 443, True, self.ca_file)
        return tls.ssl_context(alpn)


def record(
    call: Call,
    cfg: Config,
    started: float,
    outcome: str,
    *,
    status: int | None = None,
    exc: BaseException | None = None,
    evidence: str | None = None,
    trail: tuple[TrailAttempt, ...] = (),
    client_key: bool = False,
) -> CallRecord:
    return CallRecord(
        rid=call.rid,
        kind=call.kind,
        proto=call.proto,
        outcome=outcome,
        elapsed=time.monotonic() - started,
        deadline=cfg.deadline,
        status=status,
        error=None if exc is None else f"{type(exc).__module__}.{type(exc).__qualname__}",
        evidence=evidence,
        trail=trail,
        client_key=client_key,
        started=started,
    )


def _backoff(attempt: int) -> float:
    return random.uniform(0, min(1.0, 0.1 * 2 ** (attempt - 1)))


async def judged(
    call: Call,
    cfg: Config,
    send: Callable[[Call, int], Awaitable[int]],
    *,
    attempts: int,
    retry_on: type[BaseException] | tuple[type[BaseException], ...],
    sleep: Callable[[float], Awaitable[object]],
    own: tuple[type[BaseException], ...],
) -> CallRecord:
    """One call of a peer: ``send(call, attempt)`` up to ``attempts`` times, again after a
    ``retry_on`` error with a jittered backoff (``sleep``: the peer's own loop's), the common
    retry recipe of its documentation; the outcome judged by what was raised (``own``: the
    library's own errors, a failure; anything else, a foreign exception)."""
    started = time.monotonic()
    try:
        for attempt in range(1, attempts + 1):
            try:
                status = await send(call, attempt)
                break
            except retry_on:
                if attempt == attempts:
                    raise
                await sleep(_backoff(attempt))
    except own as exc:
        return record(call, cfg, started, "failed", exc=exc)
    except Exception as exc:
        return record(call, cfg, started, "foreign", exc=exc)
    return record(call, cfg, started, "ok", status=status)


class Peer(BenchmarkedClient):
    """A client of the lab: the benchmarks' :class:`~benchmarks.adapter.BenchmarkedClient`
    (name, runtime, the modules it needs) asked for calls rather than requests: ``lanes``, the
    protocols of :data:`Config.urls` it is given calls on; :meth:`session` opens its clients
    for one run and yields the function that makes one call and records what it was told."""

    lanes: ClassVar[tuple[str, ...]]

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg

    def session(self) -> AbstractAsyncContextManager[CallFn]:
        raise NotImplementedError


# --- trio_retry --------------------------------------------------------------------------------


class TrioRetryPeer(Peer):
    """trio_retry at its defaults: the key-less POSTs carry no key, and nothing is reconciled
    (its variants below set :attr:`auto_keys` or :attr:`reconciles`)."""

    name = label = "trio_retry"
    runtime = "trio"
    lanes = ("h1", "h2", "h2c")
    requires = ("trio_retry",)
    #: ``idempotency_key=True`` on the POSTs that carry no key of the workload's
    auto_keys: ClassVar[bool] = False
    #: ``reconcile=`` on every call: the ledger's look-up (``GET /requests/{id}``,
    #: :mod:`.reconciler`), each attempt's wait for its answer bounded to ``HEAD_SHARE`` of
    #: the deadline (``StageTimeouts(first_byte=)``) so that the reconciler has time to ask,
    #: and an attempt started only with ``START_SHARE`` of it left
    reconciles: ClassVar[bool] = False

    @asynccontextmanager
    async def session(self) -> AsyncIterator[CallFn]:
        import trio_retry
        from trio_retry import HookRequest

        cfg = self.cfg

        def number_attempt(view: HookRequest) -> None:
            view.headers.set("x-attempt", str(view.attempt))

        hooks: trio_retry.EventHooks = {"request": [number_attempt]}
        ctx = cfg.context(["h2", "http/1.1"])
        given: dict[str, Any] = {"event_hooks": hooks}
        if self.reconciles:
            # The guide's advice to a reconciler's user: leave it time, by bounding the wait
            # for an answer below the deadline (a POST held to its deadline leaves none).
            given["stage_timeouts"] = trio_retry.StageTimeouts(
                connect=10, tls=10, write=30, first_byte=cfg.deadline * HEAD_SHARE, read=30
            )
        # ... and no attempt of a POST starts that could not leave it time in turn (one sent
        # again after "not executed" with less left would be in doubt at the deadline)
        leaves_time = trio_retry.RetryPolicy(min_attempt_budget=cfg.deadline * START_SHARE)
        async with (
            trio_retry.Client(**given) as h1,
            trio_retry.Client(http2=True, ssl_context=ctx, **given) as h2,
            trio_retry.Client(http2=True, http2_prior_knowledge=True, **given) as h2c,
        ):
            clients = {"h1": h1, "h2": h2, "h2c": h2c}

            def trail(
                attempts: list[trio_retry.Attempt], asked: LedgerReconciler | None
            ) -> tuple[TrailAttempt, ...]:
                return tuple(
                    TrailAttempt(
                        number=a.number,
                        evidence=a.evidence.name,
                        stage=a.stage.name,
                        reconciled=None if a.reconciled is None else a.reconciled.outcome.name,
                        **({} if a.reconciled is None or asked is None else asked.why(a)),
                    )
                    for a in attempts
                )

            async def one(call: Call) -> CallRecord:
                judged = await made(call)
                if self.auto_keys and call.kind == POST and call.rid not in handed:
                    # the key the client generated, which the caller does not hold
                    return dataclasses.replace(judged, client_key=True)
                return judged

            #: calls whose failure handed the caller the key the client generated
            #: (RequestFailed.idempotency_key): the caller can send them again with it
            handed: set[str] = set()

            async def made(call: Call) -> CallRecord:
                client = clients[call.proto]
                headers = {k: v for k, v in call.headers().items() if k != "idempotency-key"}
                options: dict[str, Any] = {}
                asked = None
                if self.reconciles:
                    asked = LedgerReconciler(client, cfg.urls[call.proto])
                    options["reconcile"] = asked
                started = time.monotonic()
                try:
                    if call.kind == GET:
                        response = await client.get(
                            cfg.url(call), headers=headers, deadline=cfg.deadline, **options
                        )
                    else:
                        response = await client.post(
                            cfg.url(call),
                            content=BODY,
                            headers=headers,
                            deadline=cfg.deadline,
                            idempotency_key=call.key or self.auto_keys or None,
                            retry=leaves_time if self.reconciles else None,
                            **options,
                        )
                except trio_retry.HttpAmbiguousExecutionError as exc:
                    return record(
                        call, cfg, started, "ambiguous", exc=exc, evidence=exc.evidence.name,
                        trail=trail(exc.attempts, asked),
                    )  # fmt: skip
                except trio_retry.RequestFailed as exc:
                    if exc.idempotency_key is not None:
                        handed.add(call.rid)
                    return record(
                        call, cfg, started, "failed", exc=exc, evidence=exc.evidence.name,
                        trail=trail(exc.attempts, asked),
                    )  # fmt: skip
                except trio_retry.TrioRetryError as exc:
                    return record(call, cfg, started, "failed", exc=exc)
                except Exception as exc:
                    return record(call, cfg, started, "foreign", exc=exc)
                if asked is not None and asked.told and response.request.method != call.method:
                    # the reconciler's look-up, returned as the call's answer (the reconciler
                    # said "executed"): the call's own trail is what the reconciler was told,
                    # the attempt in doubt last
                    told = trail(list(asked.told[-1].attempts), None)
                    executed = dataclasses.replace(
                        told[-1], reconciled="EXECUTED", **asked.why(asked.told[-1].attempts[-1])
                    )
                    return record(
                        call, cfg, started, "ok", status=response.status,
                        trail=(*told[:-1], executed),
                    )  # fmt: skip
                return record(
                    call, cfg, started, "ok", status=response.status,
                    trail=trail(response.attempts, asked),
                )  # fmt: skip

            yield one


class TrioRetryReconcilePeer(TrioRetryPeer):
    name = label = "trio_retry_reconcile"
    reconciles = True


class TrioRetryKeysPeer(TrioRetryPeer):
    name = label = "trio_retry_keys"
    auto_keys = True


# --- httpx on Trio -----------------------------------------------------------------------------


class HttpxPeer(Peer):
    """httpx as documented: no retry (``AsyncHTTPTransport(retries=)`` and the tenacity-style
    loop are the variants below)."""

    name = label = "httpx"
    runtime = "trio"
    lanes = ("h1", "h2", "h2c")
    requires = ("httpx", "h2")
    transport_retries: ClassVar[int] = 0
    attempts: ClassVar[int] = 1

    @asynccontextmanager
    async def session(self) -> AsyncIterator[CallFn]:
        import httpx

        cfg = self.cfg
        own = (httpx.HTTPError, httpx.StreamError, httpx.InvalidURL)
        ctx = cfg.context(["h2", "http/1.1"])
        retries = self.transport_retries
        transports = {
            "h1": httpx.AsyncHTTPTransport(retries=retries),
            "h2": httpx.AsyncHTTPTransport(retries=retries, http2=True, verify=ctx),
            "h2c": httpx.AsyncHTTPTransport(retries=retries, http1=False, http2=True),
        }
        async with (
            httpx.AsyncClient(transport=transports["h1"], timeout=cfg.deadline) as h1,
            httpx.AsyncClient(transport=transports["h2"], timeout=cfg.deadline) as h2,
            httpx.AsyncClient(transport=transports["h2c"], timeout=cfg.deadline) as h2c,
        ):
            clients = {"h1": h1, "h2": h2, "h2c": h2c}

            async def send(call: Call, attempt: int) -> int:
                client = clients[call.proto]
                content = None if call.kind == GET else BODY
                response = await client.request(
                    call.method, cfg.url(call), headers=call.headers(attempt), content=content
                )
                status: int = response.status_code
                return status

            async def one(call: Call) -> CallRecord:
                return await judged(
                    call,
                    cfg,
                    send,
                    attempts=self.attempts,
                    retry_on=httpx.TransportError,
                    sleep=trio.sleep,
                    own=own,
                )

            yield one


class HttpxRetriesPeer(HttpxPeer):
    name = label = "httpx_retries"
    transport_retries = 3


class HttpxTenacityPeer(HttpxPeer):
    name = label = "httpx_tenacity"
    attempts = RETRY_ATTEMPTS


# --- aiohttp -----------------------------------------------------------------------------------


class AiohttpPeer(Peer):
    name = label = "aiohttp"
    runtime = "asyncio"
    # aiohttp speaks HTTP/1.1 only: on the TLS port it gets HTTP/1.1 by ALPN ("h1tls").
    lanes = ("h1", "h1tls")
    requires = ("aiohttp",)
    attempts: ClassVar[int] = 1

    @asynccontextmanager
    async def session(self) -> AsyncIterator[CallFn]:
        import aiohttp

        cfg = self.cfg
        own = (aiohttp.ClientError, asyncio.TimeoutError)
        connector = aiohttp.TCPConnector(ssl=cfg.context(["http/1.1"]))
        timeout = aiohttp.ClientTimeout(total=cfg.deadline)
        urls = {"h1": cfg.urls["h1"], "h1tls": cfg.urls["h2"]}
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

            async def send(call: Call, attempt: int) -> int:
                data = None if call.kind == GET else BODY
                async with session.request(
                    call.method, urls[call.proto] + PATH, headers=call.headers(attempt), data=data
                ) as response:
                    await response.read()
                    status: int = response.status
                    return status

            async def one(call: Call) -> CallRecord:
                return await judged(
                    call,
                    cfg,
                    send,
                    attempts=self.attempts,
                    retry_on=own,
                    sleep=asyncio.sleep,
                    own=own,
                )

            yield one


class AiohttpRetryPeer(AiohttpPeer):
    name = label = "aiohttp_retry"
    attempts = RETRY_ATTEMPTS


# --- niquests ----------------------------------------------------------------------------------


class NiquestsPeer(Peer):
    name = label = "niquests"
    runtime = "asyncio"
    lanes = ("h1", "h2")
    requires = ("niquests",)
    retry: ClassVar[bool] = False

    @asynccontextmanager
    async def session(self) -> AsyncIterator[CallFn]:
        import niquests

        cfg = self.cfg
        retries: Any = niquests.RetryConfiguration(total=3, backoff_factor=0.1) if self.retry else 0
        async with niquests.AsyncSession(
            retries=retries,
            timeout=cfg.deadline,
            disable_http3=True,
            pool_maxsize=cfg.concurrency,
        ) as session:

            async def one(call: Call) -> CallRecord:
                started = time.monotonic()
                data = None if call.kind == GET else BODY
                try:
                    response = await session.request(
                        call.method,
                        cfg.url(call),
                        headers=call.headers(),
                        data=data,
                        # per request: AsyncSession(verify=...) did not reach the TLS layer in
                        # niquests 3.21 (every HTTPS call failed verification)
                        verify=cfg.ca_file,
                    )
                except niquests.exceptions.RequestException as exc:
                    return record(call, cfg, started, "failed", exc=exc)
                except Exception as exc:
                    return record(call, cfg, started, "foreign", exc=exc)
                return record(call, cfg, started, "ok", status=response.status_code)

            yield one


class NiquestsRetryPeer(NiquestsPeer):
    name = label = "niquests_retry"
    retry = True


PEERS: dict[str, type[Peer]] = {
    peer.name: peer
    for peer in (
        TrioRetryPeer,
        TrioRetryReconcilePeer,
        TrioRetryKeysPeer,
        HttpxPeer,
        HttpxRetriesPeer,
        HttpxTenacityPeer,
        AiohttpPeer,
        AiohttpRetryPeer,
        NiquestsPeer,
        NiquestsRetryPeer,
    )
}


def _sockets() -> int:
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                count += 1
        except OSError:
            continue
    return count


def run_peer(config: dict[str, Any]) -> dict[str, Any]:
    cfg = Config(**config)
    peer = PEERS[cfg.client]
    out: dict[str, Any] = {"client": cfg.client, "protocols": list(peer.lanes)}
    missing = peer.missing_modules()
    if missing:
        return {**out, "available": False, "note": f"{missing[0]} is not installed", "calls": []}
    calls = plan(cfg.client, cfg.seed, cfg.calls, peer.lanes)

    async def main() -> list[CallRecord]:
        async with peer(cfg).session() as one:
            runner = run_trio if peer.runtime == "trio" else run_asyncio
            return await runner(
                calls, one, concurrency=cfg.concurrency, deadline=cfg.deadline, seconds=cfg.seconds
            )

    peer.check_available()  # imports them before the count: a module may open sockets
    before = _sockets()
    started = time.monotonic()
    records = trio.run(main) if peer.runtime == "trio" else asyncio.run(main())
    wall = time.monotonic() - started
    gc.collect()
    left = _sockets() - before
    return {
        **out,
        "available": True,
        "wall": round(wall, 3),
        "sockets_left": max(0, left),
        "calls": [r.to_json() for r in records],
    }


def main(argv: list[str]) -> int:
    return serve_config(argv, "benchmarks.exactly_once.peers", RESULT_TAG, run_peer)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
