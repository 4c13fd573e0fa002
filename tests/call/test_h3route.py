"""HTTP/3 routing: Alt-Svc, configured origins, the broken back-off (``_call/h3route.py``),
and the early-data rule (``_call/attempt._early_safe``); on the run's clock (MockClock)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from trio_retry import Idempotency, Upstream
from trio_retry._call.attempt import _early_safe
from trio_retry._call.h3route import (
    BROKEN_FIRST,
    BROKEN_MAX,
    DEFAULT_MAX_AGE,
    QuicRoutes,
    parse_alt_svc,
)
from trio_retry._call.upstream import UpstreamState
from trio_retry._models import Origin

ORIGIN = Origin.parse("https://example.com")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('h3=":443"', (443, DEFAULT_MAX_AGE)),
        ('h3=":8443"; ma=60', (8443, 60.0)),
        ('h3-29=":443", h3=":4433"; ma=3600; persist=1', (4433, 3600.0)),
        ('h2=":443", h3="example.com:444"', (444, 86400.0)),
        ('h3="EXAMPLE.com:444"', (444, 86400.0)),
        ('h3="other.example:443"', None),  # another host: not taken
        ('h3=":0"', None),
        ('h3=":99999"', None),
        ('h3=":abc"', None),
        ('h2=":443"', None),
        ("garbage", None),
        ("clear", False),
        (" Clear ", False),
    ],
)
def test_parse_alt_svc(value: str, expected: object) -> None:
    assert parse_alt_svc(value, "example.com") == expected


def _headers(value: str) -> list[tuple[bytes, bytes]]:
    return [(b"content-type", b"text/plain"), (b"Alt-Svc", value.encode())]


async def test_an_advertisement_routes_the_origin_for_its_max_age(
    autojump_clock: trio.testing.MockClock,
) -> None:
    routes = QuicRoutes(discover=True)
    assert routes.port_for(ORIGIN) is None
    routes.learn(ORIGIN, _headers('h3=":8443"; ma=100'))
    assert routes.port_for(ORIGIN) == 8443
    await trio.sleep(99.9)
    assert routes.port_for(ORIGIN) == 8443
    await trio.sleep(0.1)
    assert routes.port_for(ORIGIN) is None  # expired at exactly 100 s


async def test_clear_forgets_a_learned_route_but_not_a_configured_one() -> None:
    routes = QuicRoutes(discover=True, configured=[Origin.parse("https://conf.example")])
    routes.learn(ORIGIN, _headers('h3=":443"'))
    routes.learn(ORIGIN, _headers("clear"))
    assert routes.port_for(ORIGIN) is None
    configured = Origin.parse("https://conf.example")
    routes.learn(configured, _headers("clear"))
    routes.learn(configured, _headers('h3=":9999"'))  # nor replaced by an advertisement
    assert routes.port_for(configured) == 443


async def test_nothing_is_learned_without_discovery_or_over_cleartext() -> None:
    routes = QuicRoutes(discover=False)
    routes.learn(ORIGIN, _headers('h3=":443"'))
    assert routes.port_for(ORIGIN) is None
    routes = QuicRoutes(discover=True)
    cleartext = Origin.parse("http://example.com")
    routes.learn(cleartext, _headers('h3=":443"'))
    assert routes.port_for(cleartext) is None
    # a cleartext origin is never configured for HTTP/3 either
    assert QuicRoutes(discover=False, configured=[cleartext]).port_for(cleartext) is None


async def test_a_broken_origin_goes_over_tcp_for_a_doubling_back_off(
    autojump_clock: trio.testing.MockClock,
) -> None:
    routes = QuicRoutes(discover=False, configured=[ORIGIN])
    assert routes.mark_broken(ORIGIN) == BROKEN_FIRST
    assert routes.port_for(ORIGIN) is None
    await trio.sleep(BROKEN_FIRST - 0.01)
    assert routes.port_for(ORIGIN) is None
    await trio.sleep(0.01)
    assert routes.port_for(ORIGIN) == 443  # tried again after the back-off
    assert routes.mark_broken(ORIGIN) == 2 * BROKEN_FIRST
    assert routes.broken_until(ORIGIN) == trio.current_time() + 2 * BROKEN_FIRST
    for _ in range(10):
        backoff = routes.mark_broken(ORIGIN)
    assert backoff == BROKEN_MAX
    routes.mark_working(ORIGIN)
    assert routes.port_for(ORIGIN) == 443
    assert routes.mark_broken(ORIGIN) == BROKEN_FIRST  # the count starts again


class _Request:
    def __init__(self, idempotency: Idempotency, key: str | None) -> None:
        self.idempotency = idempotency
        self.idempotency_key = key


@pytest.mark.parametrize(
    ("idempotency", "key", "upstream_opts_in", "early"),
    [
        (Idempotency.SAFE, None, False, True),
        (Idempotency.SAFE, None, True, True),
        (Idempotency.IDEMPOTENT, None, True, False),  # PUT without a key
        (Idempotency.IDEMPOTENT, "k1", False, False),  # the upstream did not opt in
        (Idempotency.IDEMPOTENT, "k1", True, True),
        (Idempotency.NON_IDEMPOTENT, None, True, False),
        (Idempotency.NON_IDEMPOTENT, "k1", True, False),  # never, whatever else is set
    ],
)
def test_what_may_go_in_early_data(
    idempotency: Idempotency, key: str | None, upstream_opts_in: bool, early: bool
) -> None:
    state = UpstreamState(Upstream(early_data=upstream_opts_in))
    assert _early_safe(_Request(idempotency, key), state) is early  # type: ignore[arg-type]
