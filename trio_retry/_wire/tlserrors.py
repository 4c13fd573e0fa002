"""How OpenSSL's reports, over a socket it reads itself (``tlssock.py``), become the errors
``trio.SSLStream(..., https_compatible=True)`` raises for the same events."""

from __future__ import annotations

import errno
import os
import ssl

import trio

from .rawsock import _stream_error

__all__ = ["closed_error", "is_eof", "is_reset", "reset_error", "tls_error"]


def is_reset(exc: ssl.SSLError) -> bool:
    """Whether an end OpenSSL reported (:func:`is_eof`) was a failed system call: a reset.

    Python reads with ``SSL_read_ex`` and reports any failed system call of such a read as an
    end (``SSLEOFError``, "EOF occurred in violation of protocol"), a ``ECONNRESET``
    included: the kernel said "reset" once, to OpenSSL's ``recv``, and says "end" from then
    on. A true end is OpenSSL's own verdict (OpenSSL 3: the reason
    ``UNEXPECTED_EOF_WHILE_READING``, which ``tlschoice.supported`` requires); the failed call
    leaves no reason. (Reading the socket's TCP state instead fails: OpenSSL answers a true
    end with a fatal alert, and a peer that closed answers that with a reset.)"""
    return getattr(exc, "reason", None) is None


def reset_error() -> trio.BrokenResourceError | trio.ClosedResourceError:
    """What ``RawSocketStream`` raises for a reset, as ``trio.SSLStream`` lets it through."""
    return _stream_error(ConnectionResetError(errno.ECONNRESET, os.strerror(errno.ECONNRESET)))


def is_eof(exc: BaseException) -> bool:
    """A TCP end without close_notify (``SSLEOFError``; some Pythons report it as a plain
    ``SSLError`` naming it), between records or inside one."""
    return isinstance(exc, ssl.SSLEOFError) or "UNEXPECTED_EOF_WHILE_READING" in str(
        getattr(exc, "reason", "") or ""
    )


def tls_error(exc: BaseException) -> trio.BrokenResourceError:
    """A TLS error (an alert, a forged record, a failed handshake): broken, from ``exc``."""
    broken = trio.BrokenResourceError()
    broken.__cause__ = exc
    return broken


def closed_error() -> trio.ClosedResourceError:
    """The stream's socket was closed (by its owner, or under a wait)."""
    return trio.ClosedResourceError("this TLS stream's socket was closed")
