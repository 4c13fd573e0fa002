"""pytest fixtures over :mod:`tests.support.nginx`, :mod:`tests.support.caddy`,
:mod:`tests.support.hypercorn_server` and :mod:`tests.support.ngtcp2`; a conftest imports
what it needs::

from tests.support.fixtures import nginx as nginx
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Protocol, TypeVar

import pytest

from .caddy import SKIP_REASON, CaddyUnavailable, RunningCaddy, find_caddy, start_caddy
from .hypercorn_server import (
    HypercornUnavailable,
    RunningHypercorn,
    hypercorn_missing,
    start_hypercorn,
)
from .nginx import NginxConfig, NginxUnavailable, RunningNginx, find_nginx, start_nginx
from .ngtcp2 import Ngtcp2Options, Ngtcp2Unavailable, RunningNgtcp2, find_ngtcp2, start_ngtcp2

__all__ = ["StartNginx", "StartNgtcp2", "caddy", "hypercorn", "nginx", "ngtcp2", "one_server"]

StartNginx = Callable[..., RunningNginx]
StartNgtcp2 = Callable[..., RunningNgtcp2]


class _Stoppable(Protocol):
    def stop(self) -> None: ...


_Server = TypeVar("_Server", bound=_Stoppable)


def one_server(
    missing: str | None, start: Callable[[], _Server], unavailable: type[Exception]
) -> Iterator[_Server]:
    """The body of a fixture that starts one server: skip the test, saying why, when
    `missing` says the server cannot be had here; fail it when `start` raises `unavailable`;
    otherwise yield the server and stop it when the test ends."""
    if missing is not None:
        pytest.skip(missing)
    try:
        server = start()
    except unavailable as exc:
        pytest.fail(str(exc))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def nginx() -> Iterator[StartNginx]:
    """A factory: ``nginx(keepalive_requests=10)`` (or ``nginx(NginxConfig(...))``) starts a
    fresh nginx; every one started is stopped when the test ends. Skips the test, saying why,
    when nginx is not installed; fails it when nginx is installed but will not start."""
    if find_nginx() is None:
        from .nginx import SKIP_REASON

        pytest.skip(SKIP_REASON)
    started: list[RunningNginx] = []

    def start(config: NginxConfig | None = None, **options: object) -> RunningNginx:
        if config is None:
            config = NginxConfig(**options)  # type: ignore[arg-type]
        try:
            server = start_nginx(config)
        except NginxUnavailable as exc:
            pytest.fail(str(exc))
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()


@pytest.fixture
def caddy() -> Iterator[RunningCaddy]:
    """A started caddy (HTTP/1.1, HTTP/2 and HTTP/3 with 0-RTT on one port; see
    :mod:`tests.support.caddy`), stopped when the test ends. Skips the test, saying why, when
    caddy is not installed; fails it when caddy is installed but will not start."""
    missing = SKIP_REASON if find_caddy() is None else None
    yield from one_server(missing, start_caddy, CaddyUnavailable)


@pytest.fixture
def hypercorn() -> Iterator[RunningHypercorn]:
    """A started hypercorn serving HTTP/3 (see :mod:`tests.support.hypercorn_server`), stopped
    when the test ends. Skips when hypercorn or aioquic is missing; fails when it will not
    start."""
    yield from one_server(hypercorn_missing(), start_hypercorn, HypercornUnavailable)


@pytest.fixture
def ngtcp2() -> Iterator[StartNgtcp2]:
    """A factory: ``ngtcp2(files, Ngtcp2Options(retry=True))`` starts a fresh gtlsserver
    serving `files` over HTTP/3 (see :mod:`tests.support.ngtcp2`); every one started is
    stopped when the test ends. Skips the test, saying why, when gtlsserver is not installed;
    fails it when it is installed but will not start."""
    if find_ngtcp2() is None:
        from .ngtcp2 import SKIP_REASON as NGTCP2_SKIP

        pytest.skip(NGTCP2_SKIP)
    started: list[RunningNgtcp2] = []

    def start(
        files: Mapping[str, bytes] | None = None, options: Ngtcp2Options | None = None
    ) -> RunningNgtcp2:
        try:
            server = start_ngtcp2(files or {}, options or Ngtcp2Options())
        except Ngtcp2Unavailable as exc:
            pytest.fail(str(exc))
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()
