"""A Python process in which a package cannot be imported, as if it were not installed.

For the errors that name a missing extra: in the test process itself the package (and the
modules that import it) are usually imported already, so a check that imports it too late
would still pass there. :func:`without` is a prelude for ``python -c``.
"""

from __future__ import annotations

__all__ = ["without"]

_PRELUDE = """
import sys

class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name == {package!r} or name.startswith({package!r} + "."):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, _NotInstalled())
"""


def without(package: str) -> str:
    """Source code that, run first, makes every import of ``package`` (and its submodules)
    raise ``ModuleNotFoundError`` as an uninstalled package's would. ``package`` may be a
    namespace package's portion (``opentelemetry.instrumentation``)."""
    return _PRELUDE.format(package=package)
