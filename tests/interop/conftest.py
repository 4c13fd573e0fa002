"""The interop suites run against a real nginx the test starts itself (tests/support/nginx.py)."""

from tests.support.fixtures import nginx as nginx

__all__ = ["nginx"]
