"""Retrying clients for the resilience suites (amplification, duplicates), all on Trio.

Each suite drives the same traffic through one *contestant* per benchmark client:

- ``trio_retry``: ``trio_retry.Client`` with its defaults (retry budget on: ``RetryBudget(
  ratio=0.2, min_per_second=10, window=10)``, full-jitter backoff from 0.1 s) and
  ``RetryPolicy(max_attempts=4)``, so every contestant has the same per-call cap of 4 attempts
  and only the retry *decisions* differ.
- ``httpx_trio``: ``httpx.AsyncClient`` inside a tenacity-style loop, written out here (no
  tenacity dependency): ``stop_after_attempt(4)``, ``wait_exponential(multiplier=0.1)``
  (0.1, 0.2, 0.4 s), retry on any ``httpx.TransportError`` (timeouts included) and on any
  status >= 500, whatever the method. After the last attempt the last response is returned or
  the last exception raised.
- ``h11_trio``: a urllib3-style loop over bare h11 (HTTP/1.1 only), written out here with the
  semantics of ``urllib3.Retry(total=3, backoff_factor=0.1, status_forcelist=(502, 503, 504))``:
  connect errors are retried for every method; read errors (anything after the connection is
  up: a reset, an early close, a read timeout) and the listed statuses only for the methods in
  ``Retry.DEFAULT_ALLOWED_METHODS`` (not POST or PATCH); backoff 0, 0.2, 0.4 s; a ``Retry-After``
  header is honoured; a pooled connection found readable (closed) before reuse is replaced, as
  urllib3's ``is_connection_dropped`` does; exhausted status retries raise (``raise_on_status``).

Every call ends in one :class:`Outcome`. The split that matters for side effects: ``AMBIGUOUS``
(the client says "may have been executed": trio_retry's ``HttpAmbiguousExecutionError``),
``FAILED_EXECUTED`` (a failure whose evidence proves the server acted: trio_retry's
``RequestFailed`` with ``PARTIAL_RESPONSE``/``RESPONSE_RECEIVED`` evidence; the status line
arrived) and ``FAILED`` (a plain failure: nothing in it says the server may have acted; every
exception of the naive loops is one).

:class:`ConnectCounter` counts TCP ``connect()`` calls per destination port for every Trio
client in the process (it is a ``trio.abc.SocketFactory``), so connection attempts to a port
where nothing listens can be counted without trusting any client's own bookkeeping.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib.util
import random
import select
import socket
import threading
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import h11
import trio

from benchmarks.runtime import HardTimeout
from benchmarks.scenarios import RunParams, Scenario

T = TypeVar("T")

MAX_ATTEMPTS = 4  # every contestant: 1 first attempt + 3 retries


class Outcome(enum.Enum):
    OK = "ok"  # a response below 400 with its whole body
    STATUS = "status"  # a final response >= 400 handed back after the loop gave up
    AMBIGUOUS = "ambiguous"  # "the server may have executed this": an explicit, honest answer
    FAILED_EXECUTED = "failed_executed"  # a failure whose evidence proves the server acted
    FAILED = "failed"  # a plain failure


@dataclass
class CallResult:
    outcome: Outcome
    attempts: int  # as the client itself reports them
    status: int | None = None
    budget_denied: bool = False  # trio_retry: a retry was refused by the retry budget
    error: str = ""


class ConnectCounter(trio.abc.SocketFactory):
    """Counts ``connect()`` calls by destination port. Install with
    ``trio.socket.set_custom_socket_factory(counter)`` inside ``trio.run``."""

    def __init__(self) -> None:
        self.by_port: Counter[int] = Counter()

    def socket(
        self,
        family: socket.AddressFamily | int = socket.AF_INET,
        type: socket.SocketKind | int = socket.SOCK_STREAM,
        proto: int = 0,
    ) -> trio.socket.SocketType:
        sock = trio.socket.from_stdlib_socket(socket.socket(family, type, proto))
        inner = sock.connect
        by_port = self.by_port

        async def connect(address: Any) -> None:
            if isinstance(address, tuple) and len(address) >= 2:
                by_port[int(address[1])] += 1
            await inner(address)

        sock.connect = connect  # type: ignore[method-assign]
        return sock


def run_virtual(main: Callable[[], Awaitable[T]], wall_limit: float) -> T:
    """``trio.run(main)`` on a ``MockClock(autojump_threshold=0)``: every sleep, backoff,
    timeout and server stall takes no real time (loopback I/O completes before the clock
    jumps). Virtual time cannot bound the run, so a watchdog thread cancels it after
    ``wall_limit`` real seconds (raising :class:`HardTimeout`)."""
    import trio.testing  # not at module level: it imports pytest when installed (slow)

    async def wrapper() -> T:
        token = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as scope:

            def expire() -> None:
                try:
                    trio.from_thread.run_sync(scope.cancel, trio_token=token)
                except trio.RunFinishedError:
                    pass

            timer = threading.Timer(wall_limit, expire)
            timer.daemon = True
            timer.start()
            try:
                return await main()
            finally:
                timer.cancel()
        raise HardTimeout(f"scenario exceeded its hard limit of {wall_limit:.0f}s (wall clock)")

    return trio.run(wrapper, clock=trio.testing.MockClock(autojump_threshold=0))


class Contestant:
    """One retrying client; ``async with c.open(): await c.call(...)``."""

    name: ClassVar[str]
    label: ClassVar[str]
    protocols: ClassVar[frozenset[str]] = frozenset({"http/1.1", "h2"})

    def __init__(
        self,
        base_url: str,
        *,
        http2: bool = False,
        timeout: float = 10.0,
        seed: int = 0,
        max_connections: int = 100,
        unlimited_budget: bool = False,
        budget_floor: float | None = None,
    ) -> None:
        self.base_url = base_url
        self.http2 = http2  # HTTP/2 with prior knowledge (h2c) when True
        self.timeout = timeout
        self.seed = seed
        self.max_connections = max_connections
        self.unlimited_budget = unlimited_budget
        self.budget_floor = budget_floor  # trio_retry: RetryBudget(min_per_second=...) if set

    def open(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    async def call(
        self, method: str, path: str, body: bytes | None = None
    ) -> CallResult:  # pragma: no cover - abstract
        raise NotImplementedError


# --------------------------------------------------------------------------------------------
# trio_retry
# --------------------------------------------------------------------------------------------


class TrioRetryContestant(Contestant):
    name = "trio_retry"
    label = "trio_retry"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[None]:
        import trio_retry as tr

        upstream = tr.Upstream()
        if self.unlimited_budget:
            upstream = tr.Upstream(budget=tr.RetryBudget(min_per_second=1e9))
        elif self.budget_floor is not None:
            upstream = tr.Upstream(budget=tr.RetryBudget(min_per_second=self.budget_floor))
        async with tr.Client(
            retry=tr.RetryPolicy(max_attempts=MAX_ATTEMPTS),
            default_upstream=upstream,
            rng=random.Random(self.seed),
            http2=False,
            http2_prior_knowledge=self.http2,
            deadline=self.timeout,
            max_connections=self.max_connections,
        ) as client:
            self._client: Any = client
            yield

    async def call(self, method: str, path: str, body: bytes | None = None) -> CallResult:
        import trio_retry as tr

        try:
            r = await self._client.request(method, self.base_url + path, content=body)
        except tr.HttpAmbiguousExecutionError as exc:
            return CallResult(Outcome.AMBIGUOUS, len(exc.attempts), error=type(exc).__name__)
        except tr.RequestFailed as exc:
            known = exc.evidence in (tr.Evidence.PARTIAL_RESPONSE, tr.Evidence.RESPONSE_RECEIVED)
            status = exc.attempts[-1].status if exc.attempts else None
            return CallResult(
                Outcome.FAILED_EXECUTED if known else Outcome.FAILED,
                len(exc.attempts),
                status=status,
                budget_denied=_budget_denied(exc.decision),
                error=f"{type(exc).__name__} ({exc.evidence})",
            )
        outcome = Outcome.OK if r.status < 400 else Outcome.STATUS
        denied = _budget_denied(r.retry_decision)
        return CallResult(outcome, len(r.attempts), status=r.status, budget_denied=denied)


def _budget_denied(decision: object) -> bool:
    import trio_retry as tr

    if not isinstance(decision, tr.RetryDenied):
        return False
    return decision.reason is tr.DenyReason.BUDGET_EXHAUSTED


# --------------------------------------------------------------------------------------------
# httpx + a tenacity-style loop
# --------------------------------------------------------------------------------------------


class HttpxLoopContestant(Contestant):
    name = "httpx_trio"
    label = "httpx + tenacity-style loop"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[None]:
        import httpx

        self._transport_error = httpx.TransportError
        async with httpx.AsyncClient(
            http1=not self.http2,
            http2=self.http2,
            timeout=httpx.Timeout(self.timeout),
            trust_env=False,
            limits=httpx.Limits(
                max_connections=self.max_connections,
                max_keepalive_connections=self.max_connections,
            ),
        ) as client:
            self._client: Any = client
            yield

    async def call(self, method: str, path: str, body: bytes | None = None) -> CallResult:
        url = self.base_url + path
        last: CallResult | None = None
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                r = await self._client.request(method, url, content=body)
            except self._transport_error as exc:
                last = CallResult(Outcome.FAILED, attempt, error=type(exc).__name__)
            else:
                if r.status_code < 500:
                    outcome = Outcome.OK if r.status_code < 400 else Outcome.STATUS
                    return CallResult(outcome, attempt, status=r.status_code)
                last = CallResult(Outcome.STATUS, attempt, status=r.status_code)
            if attempt < MAX_ATTEMPTS:
                await trio.sleep(0.1 * 2 ** (attempt - 1))  # wait_exponential(multiplier=0.1)
        assert last is not None
        return last


# --------------------------------------------------------------------------------------------
# urllib3-style Retry(total=3) over bare h11
# --------------------------------------------------------------------------------------------

URLLIB3_ALLOWED_METHODS = frozenset({"DELETE", "GET", "HEAD", "OPTIONS", "PUT", "TRACE"})
URLLIB3_STATUS_FORCELIST = frozenset({502, 503, 504})
URLLIB3_BACKOFF_FACTOR = 0.1


class _ConnectError(Exception):
    pass


class _ReadError(Exception):
    pass


class _Conn:
    __slots__ = ("conn", "stream")

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.conn = h11.Connection(h11.CLIENT)

    def dropped(self) -> bool:
        """urllib3's ``is_connection_dropped``: an idle connection that is readable is closed
        (EOF) or broken."""
        try:
            readable, _, _ = select.select([self.stream.socket.fileno()], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(readable)


class Urllib3StyleContestant(Contestant):
    name = "h11_trio"
    label = "urllib3-style Retry over bare h11"
    protocols = frozenset({"http/1.1"})

    @asynccontextmanager
    async def open(self) -> AsyncIterator[None]:
        if self.http2:
            raise RuntimeError("the bare h11 loop speaks HTTP/1.1 only")
        _, _, hostport = self.base_url.partition("://")
        host, _, port = hostport.partition(":")
        self._host, self._port = host, int(port)
        self._host_header = hostport.encode()
        self._idle: list[_Conn] = []
        try:
            yield
        finally:
            idle, self._idle = self._idle, []
            for c in idle:
                await trio.aclose_forcefully(c.stream)

    async def _get_conn(self) -> _Conn:
        while self._idle:
            c = self._idle.pop()
            if not c.dropped():
                return c
            await trio.aclose_forcefully(c.stream)
        try:
            with trio.fail_after(self.timeout):
                stream = await trio.open_tcp_stream(self._host, self._port)
        except (OSError, trio.TooSlowError) as exc:
            raise _ConnectError(f"{type(exc).__name__}: {exc}") from exc
        return _Conn(stream)

    async def _exchange(
        self, method: str, path: str, body: bytes | None
    ) -> tuple[int, list[tuple[bytes, bytes]]]:
        c = await self._get_conn()
        reusable = False
        try:
            headers = [(b"host", self._host_header), (b"user-agent", b"bench-urllib3-style")]
            if body is not None:
                headers.append((b"content-length", str(len(body)).encode()))
            out = c.conn.send(h11.Request(method=method, target=path, headers=headers)) or b""
            if body:
                out += c.conn.send(h11.Data(data=body)) or b""
            out += c.conn.send(h11.EndOfMessage()) or b""
            with trio.fail_after(self.timeout):
                await c.stream.send_all(out)
                status = 0
                resp_headers: list[tuple[bytes, bytes]] = []
                while True:
                    event = c.conn.next_event()
                    if event is h11.NEED_DATA:
                        c.conn.receive_data(await c.stream.receive_some(65536))
                    elif isinstance(event, h11.Response):
                        status = event.status_code
                        resp_headers = list(event.headers.raw_items())
                    elif isinstance(event, h11.EndOfMessage):
                        break
                    elif isinstance(event, h11.ConnectionClosed):
                        raise _ReadError("connection closed")
            if c.conn.our_state is h11.DONE and c.conn.their_state is h11.DONE:
                c.conn.start_next_cycle()
                reusable = True
            return status, resp_headers
        except (OSError, trio.BrokenResourceError, trio.TooSlowError, h11.ProtocolError) as exc:
            raise _ReadError(f"{type(exc).__name__}: {exc}") from exc
        finally:
            if reusable:
                self._idle.append(c)
            else:
                await trio.aclose_forcefully(c.stream)

    async def call(self, method: str, path: str, body: bytes | None = None) -> CallResult:
        method_ok = method.upper() in URLLIB3_ALLOWED_METHODS
        attempt = 0
        while True:
            attempt += 1
            retry_after: float | None = None
            try:
                status, headers = await self._exchange(method, path, body)
            except _ConnectError as exc:
                result = CallResult(Outcome.FAILED, attempt, error=f"connect: {exc}")
                retryable = True
            except _ReadError as exc:
                result = CallResult(Outcome.FAILED, attempt, error=f"read: {exc}")
                retryable = method_ok
            else:
                if not (method_ok and status in URLLIB3_STATUS_FORCELIST):
                    outcome = Outcome.OK if status < 400 else Outcome.STATUS
                    return CallResult(outcome, attempt, status=status)
                # raise_on_status: exhausting status retries raises MaxRetryError.
                result = CallResult(Outcome.FAILED, attempt, status=status, error="max retries")
                retryable = True
                for name, value in headers:
                    if name.lower() == b"retry-after":
                        try:
                            retry_after = max(0.0, float(value))
                        except ValueError:
                            pass
            if not retryable or attempt >= MAX_ATTEMPTS:
                return result
            # urllib3 2.x: no backoff before the first retry, then factor * 2 ** (n - 1).
            delay = 0.0 if attempt <= 1 else URLLIB3_BACKOFF_FACTOR * 2 ** (attempt - 1)
            await trio.sleep(retry_after if retry_after is not None else delay)


CONTESTANTS: dict[str, type[Contestant]] = {
    c.name: c for c in (TrioRetryContestant, HttpxLoopContestant, Urllib3StyleContestant)
}


class ResilienceScenario(Scenario):
    """Shared by the amplification and duplicates suites: counts, not timings.

    The scenario drives a :class:`Contestant` chosen by the benchmark client's name (the
    adapter itself is not used) against a server it starts itself in the worker process
    (``trio_retry.testing.FaultServer``), on a virtual clock. The ``endpoint`` field is unused.
    """

    cpu_sensitive: ClassVar[bool] = False
    max_repeats: ClassVar[int | None] = 1  # counts: repeating the same seeded run adds nothing
    client_labels: ClassVar[dict[str, str]] = {c.name: c.label for c in CONTESTANTS.values()}
    http2: bool

    def heading(self) -> str:
        return self.title

    def skip_reason(self, client: str) -> str | None:
        cls = CONTESTANTS.get(client)
        if cls is None:
            return "not in this suite (trio_retry against retry loops over httpx and bare h11)"
        if self.http2 and "h2" not in cls.protocols:
            return "HTTP/1.1-only loop"
        if importlib.util.find_spec("trio_retry") is None:
            return "needs trio_retry.testing.FaultServer (trio_retry not importable)"
        return None

    def params(
        self,
        *,
        smoke: bool,
        scale: float,
        min_time: float,
        server_pids: tuple[int, ...],
        server_cpu: int | None,
        client_cpu: int | None,
    ) -> RunParams:
        base = super().params(
            smoke=smoke,
            scale=scale,
            min_time=min_time,
            server_pids=server_pids,
            server_cpu=server_cpu,
            client_cpu=client_cpu,
        )
        # Wall-clock bounds: stop issuing calls after soft_limit, abort after hard_limit.
        if smoke:
            return dataclasses.replace(base, soft_limit=10.0, hard_limit=30.0)
        return dataclasses.replace(base, soft_limit=600.0, hard_limit=900.0)
