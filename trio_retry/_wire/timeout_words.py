"""What a timeout says (the words only: which wait ran out and how it is changed, never when).

A timeout names the bound that fired as the caller sets it, with its value: ``no response head
within first_byte=30 s``, ``the call's deadline=60 s expired during AWAITING_RESPONSE``
(:func:`timeout_message`, :func:`deadline_message`), the same words for every protocol; a
default's (a :class:`Default`: ``Client()`` chose it) says it is one, and how to change it.
When a wait runs out is ``clock.py``'s, the one owner of time; this module only words it.
"""

from __future__ import annotations

__all__ = ["Default", "deadline_message", "seconds", "timeout_message"]


class Default(float):
    """A limit ``Client()`` chose, told apart (``isinstance``) from the same number given
    explicitly; a plain ``float`` in every other respect (``dataclasses.replace`` keeps it)."""

    __slots__ = ()


#: What each bounded wait is called in a timeout's message, ``{}`` where the bound (named as
#: the caller sets it) and its value go.
_WORDS = {
    "connect": "connecting took longer than connect={}",  # (DNS, TCP, the proxy)
    "tls": "the TLS handshake took longer than tls={}",
    # (its limit is tls=, or connect= for h2c: the bound that fired is named)
    "handshake": "the server sent no HTTP/2 SETTINGS within tls={}",
    "handshake_h2c": "the server sent no HTTP/2 SETTINGS within connect={}",
    # (a write: at most 256 KiB over HTTP/1.1, the frames queued since the last over HTTP/2;
    # its limit counts from its last progress: the server read nothing for that long)
    "write": "the server read none of the request within write={}",
    "first_byte": "no response head within first_byte={}",
    "read": "no body data within read={}",
    "ping": "the idle connection did not answer a PING within {}",
    # (the QUIC handshake's limit: min(tls, FIXED.quic_handshake); the attempt goes over TCP)
    "quic": "no answer within {} (the handshake's limit: the least of tls= and 3 s)",
    "pool": "no connection became free within pool_timeout={}",
}

#: The field whose default each wait's limit is, where that is not its own name.
_FIELD = {"handshake": "tls", "handshake_h2c": "connect"}
#: How a default's message says what changes it, where ``StageTimeouts`` does not. The
#: ``first_byte`` default fires only on a call without a deadline (a deadline lifts it).
_HINTS = {
    "first_byte": " (Client()'s default: a call with a deadline= waits for the head as long as "
    "its deadline allows; stage_timeouts=StageTimeouts(first_byte=...) sets it)",
    "pool": " (Client()'s default; Client(pool_timeout=...) sets it)",
}


def seconds(value: float) -> str:
    """``value`` seconds as a message shows them: ``30 s``, ``0.25 s``."""
    return f"{value:g} s"


def timeout_message(which: str, limit: float | None, about: str = "") -> str:
    """The words of a timeout of wait ``which``, the same for every protocol: the bound that
    fired, named as the caller sets it, and its value (for ``Client()``'s default, how to
    change it); ``about`` names what was waited for (a peer), when the words do not."""
    text = _WORDS[which].format(seconds(limit) if limit is not None else "no limit")
    if isinstance(limit, Default):
        field = _FIELD.get(which, which)
        text += _HINTS.get(
            field, f" (Client()'s default; stage_timeouts=StageTimeouts({field}=...) sets it)"
        )
    return text + (f": {about}" if about else "")


def deadline_message(limit: float, stage: object) -> str:
    """The words of a call deadline of ``limit`` seconds that ran out at ``stage``."""
    return f"the call's deadline={seconds(limit)} expired during {stage}"
