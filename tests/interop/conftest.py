"""The interop suites run against real servers the test starts itself: nginx
(tests/support/nginx.py), and for HTTP/3 caddy (tests/support/caddy.py), hypercorn
(tests/support/hypercorn_server.py) and ngtcp2's gtlsserver (tests/support/ngtcp2.py)."""

from tests.support.fixtures import caddy as caddy
from tests.support.fixtures import hypercorn as hypercorn
from tests.support.fixtures import nginx as nginx
from tests.support.fixtures import ngtcp2 as ngtcp2

__all__ = ["caddy", "hypercorn", "nginx", "ngtcp2"]
