"""Loopback benchmarks for trio_retry and its peer HTTP clients.

Run ``python -m benchmarks`` (see ``docs/benchmarks.md``). This package is not part of the
installed distribution; it is run from a source checkout.
"""

SCHEMA_VERSION = 1
