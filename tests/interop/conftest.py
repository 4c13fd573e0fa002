"""The interop suites run against real servers the test starts itself: nginx
(tests/support/nginx.py), and for HTTP/3 caddy (tests/support/caddy.py) and hypercorn
(tests/support/hypercorn_server.py)."""

from tests.support.fixtures import caddy as caddy
from tests.support.fixtures import hypercorn as hypercorn
from tests.support.fixtures import nginx as nginx

__all__ = ["caddy", "hypercorn", "nginx"]
