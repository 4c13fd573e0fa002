"""pytest fixtures over :mod:`tests.support.nginx`, :mod:`tests.support.caddy` and
:mod:`tests.support.hypercorn_server`; a conftest imports what it needs::

from tests.support.fixtures import nginx as nginx
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from .caddy import CaddyUnavailable, RunningCaddy, find_caddy, start_caddy
from .hypercorn_server import (
    HypercornUnavailable,
    RunningHypercorn,
    hypercorn_missing,
    start_hypercorn,
)
from .nginx import NginxConfig, NginxUnavailable, RunningNginx, find_nginx, start_nginx

__all__ = ["StartNginx", "caddy", "hypercorn", "nginx"]

StartNginx = Callable[..., RunningNginx]


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
    if find_caddy() is None:
        from .caddy import SKIP_REASON

        pytest.skip(SKIP_REASON)
    try:
        server = start_caddy()
    except CaddyUnavailable as exc:
        pytest.fail(str(exc))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def hypercorn() -> Iterator[RunningHypercorn]:
    """A started hypercorn serving HTTP/3 (see :mod:`tests.support.hypercorn_server`), stopped
    when the test ends. Skips when hypercorn or aioquic is missing; fails when it will not
    start."""
    missing = hypercorn_missing()
    if missing is not None:
        pytest.skip(missing)
    try:
        server = start_hypercorn()
    except HypercornUnavailable as exc:
        pytest.fail(str(exc))
    try:
        yield server
    finally:
        server.stop()
