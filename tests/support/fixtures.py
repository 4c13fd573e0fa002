"""pytest fixtures over :mod:`tests.support.nginx`; a conftest imports what it needs::

from tests.support.fixtures import nginx as nginx
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from .nginx import NginxConfig, NginxUnavailable, RunningNginx, find_nginx, start_nginx

__all__ = ["StartNginx", "nginx"]

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
