"""The QUIC library HTTP/3 runs on: qh3 where it is installed, else aioquic (the boundary).

Every name the client takes from a QUIC library comes from here: the connection class
(``shims_qh3.CheckedQuicConnection`` over qh3, ``shims.CheckedQuicConnection`` over aioquic,
the same methods), its configuration, its session tickets. HTTP/3 and QPACK are aioquic's
over either (``shims.py``: every rule of a response's frames is written against aioquic's
HTTP/3 layer), so aioquic is always needed and qh3 is the faster QUIC under it.

Why qh3 first: its packets, encryption and loss recovery are Rust where aioquic's are
Python. Under the same driver, measured with ``python -m benchmarks.http3`` against caddy on
loopback (docs/benchmarks.md), a 20 MB download cost less than half the client CPU per MB
over qh3, and a sequential request about two thirds of aioquic's CPU; nothing the client
proves is lost (``shims_qh3.py`` reads the same evidence from qh3).

``TRIO_RETRY_QUIC`` chooses one (``qh3`` or ``aioquic``; unset or empty: qh3 if installed),
read once, when the HTTP/3 package is first imported (a client with HTTP/3 configured); the
tests run the HTTP/3 suites over each this way.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..._core.errors import MissingExtra

__all__ = [
    "ENV",
    "MISSING_EXTRA",
    "NAME",
    "CheckedQuicConnection",
    "CipherSuite",
    "QuicConfiguration",
    "SessionTicket",
    "choose",
]

ENV = "TRIO_RETRY_QUIC"
MISSING_EXTRA = "the 'http3' extra installs both: pip install 'trio_retry[http3]'"
_LIBRARIES = ("qh3", "aioquic")


def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def choose(value: str, installed: Callable[[str], bool] = _installed) -> str:
    """The QUIC library named by ``value`` (``TRIO_RETRY_QUIC``'s), or the fastest installed
    when it is empty. Raises ``ValueError`` naming the variable for another value, and
    ``MissingExtra`` when the one named is not installed."""
    name = value.strip().lower()
    if name and name not in _LIBRARIES:
        raise ValueError(
            f"{ENV} must be qh3, aioquic or empty (the fastest installed), got {value!r}"
        )
    if not name:
        return "qh3" if installed("qh3") else "aioquic"
    if not installed(name):
        raise MissingExtra(f"{ENV}={name}, and {name} is not installed: {MISSING_EXTRA}")
    return name


#: The QUIC library this process runs HTTP/3 on.
NAME = choose(os.environ.get(ENV, ""))

if TYPE_CHECKING or NAME == "aioquic":
    from aioquic.quic.configuration import QuicConfiguration as QuicConfiguration
    from aioquic.tls import CipherSuite as CipherSuite
    from aioquic.tls import SessionTicket as SessionTicket

    from .shims import CheckedQuicConnection as CheckedQuicConnection
else:
    from qh3.quic.configuration import QuicConfiguration as QuicConfiguration
    from qh3.tls import CipherSuite as CipherSuite
    from qh3.tls import SessionTicket as SessionTicket

    from .shims_qh3 import CheckedQuicConnection as CheckedQuicConnection
