"""Areas of the code for ``benchmarks.profile``'s cProfile breakdown: trio_retry's modules
grouped by what they do, then the libraries under it, the system calls and the harness."""

from __future__ import annotations

import importlib
import os

__all__ = ["AREA_ORDER", "Classifier", "area_rank"]

# trio_retry's modules by area (first matching prefix of the path inside the package).
TRIO_RETRY_AREAS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "_call/prepare",
        (
            "_client.py",
            "_call/prepare.py",
            "_call/options.py",
            "_call/config.py",
            "_body.py",
            "_auth.py",
            "_cookies.py",
            "_proxy.py",
        ),
    ),
    ("_call/loop+attempt", ("_call/", "_redirects.py")),
    ("_models (Headers/URL/Response)", ("_models.py", "_streams.py", "_decoding.py")),
    ("_core records", ("_core/", "_trail.py", "_errors.py", "_observe/")),
    (
        "_wire/http11 + progress",
        (
            "_wire/http11",  # http11.py, http11_reader.py, http11_rules.py
            "_wire/progress.py",
            "_wire/exchange.py",
            "_wire/fast11",
            "_wire/clock.py",
        ),
    ),
    ("_wire/pool", ("_wire/pool",)),
    ("_wire/tls (tlssock, tlsread)", ("_wire/tlssock", "_wire/tlsread")),
    (
        "_wire/transport",
        ("_wire/transport.py", "_wire/rawsock", "_wire/dialer.py", "_wire/socks.py", "_tls.py"),
    ),
    ("_wire/http2", ("_wire/http2/",)),
    ("trio_retry, other", ("",)),
)
# Other packages by area (their top-level module's directory).
PACKAGE_AREAS = (
    ("h11", ("h11",)),
    ("h2/hpack", ("h2", "hpack", "hyperframe")),
    ("trio", ("trio", "outcome", "sniffio")),
)
AREA_ORDER = (
    *(a for a, _ in TRIO_RETRY_AREAS),
    "h11",
    "h2/hpack",
    "trio",
    "epoll (trio's waits)",
    "ssl (and trio.SSLStream)",
    "socket syscalls",
    "harness (driver, bare loops)",
    "other",
)


class Classifier:
    """Maps a cProfile function key (file, line, name) to an area (or to its module)."""

    def __init__(self, trio_retry_dir: str, by_module: bool) -> None:
        self.by_module = by_module
        self.ours = trio_retry_dir.rstrip(os.sep) + os.sep
        self.harness = os.path.dirname(os.path.abspath(__file__)) + os.sep
        self.packages: list[tuple[str, str]] = []
        for area, modules in PACKAGE_AREAS:
            for module in modules:
                try:
                    mod = importlib.import_module(module)
                except ImportError:
                    continue
                if mod.__file__:
                    self.packages.append((os.path.dirname(mod.__file__) + os.sep, area))
        import ssl

        self.ssl_files = {ssl.__file__}
        try:  # trio.SSLStream's own Python: TLS, not trio's scheduling
            import trio._ssl as trio_ssl

            self.ssl_files.add(trio_ssl.__file__)
        except ImportError:
            pass
        self._cache: dict[tuple[str, str], str] = {}

    def __call__(self, filename: str, name: str) -> str:
        key = (filename, name)
        area = self._cache.get(key)
        if area is None:
            area = self._cache[key] = self._classify(filename, name)
        return area

    def _classify(self, filename: str, name: str) -> str:
        if filename == "~":  # a builtin: "<method 'recv' of '_socket.socket' objects>"
            if "_ssl." in name:
                return "ssl (and trio.SSLStream)"
            if "select.epoll" in name:
                return "epoll (trio's waits)"
            if "_socket.socket" in name:
                return "socket syscalls"
            return "other"
        if filename.startswith(self.ours):
            rel = filename[len(self.ours) :].replace(os.sep, "/")
            if self.by_module:
                return "trio_retry/" + rel
            for area, prefixes in TRIO_RETRY_AREAS:
                if any(rel.startswith(p) for p in prefixes):
                    return area
        if filename in self.ssl_files:
            return "ssl (and trio.SSLStream)"
        if filename.startswith(self.harness):
            return "harness (driver, bare loops)"
        for prefix, area in self.packages:
            if filename.startswith(prefix):
                return area
        return "other"


def area_rank(area: str) -> tuple[int, str]:
    """The sort key of an area: the order of :data:`AREA_ORDER` (modules by name first)."""
    return (AREA_ORDER.index(area) if area in AREA_ORDER else -1, area)
