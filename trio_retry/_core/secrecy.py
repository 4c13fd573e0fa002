"""The one rule for an error about a value that may hold a secret: the option is named, the
secret never shown, in the message or in anything chained to it.

Secrets are what SPEC §17 lists (userinfo, credentials, cookies, query values, proxy
credentials) and what is sent beside them (an ``Idempotency-Key``, a certificate's password).
Two ways they used to leak, each closed here once:

- a message quoting the value (``got 'sid=...' (str)``): :func:`withheld` shows its type and
  size instead;
- the exception being replaced: ``raise ... from None`` inside ``except`` only hides it from a
  printed traceback. It stays in ``__context__``, where a debugger, an error reporter or a log
  formatter shows it, and urllib's ``ValueError`` quotes a URL's netloc (the password) while
  a ``UnicodeEncodeError`` holds the whole text it was given. :func:`raise_detached` raises
  with nothing chained. (The alternative, building every such message after the ``except``
  block, is used where the code reads as well that way; this is for the rest.)
"""

from __future__ import annotations

import re
from typing import NoReturn

__all__ = ["raise_detached", "unencodable_at", "withheld"]

_SURROGATE = re.compile(r"[\ud800-\udfff]")


def withheld(value: object) -> str:
    """``value`` as an error message may show it when it can hold a secret: its type and size,
    never its text (``str (12 characters, not shown)``). ``None``, booleans and numbers,
    which hold none, are shown as they are (``5 (int)``)."""
    kind = type(value).__name__
    if value is None or isinstance(value, (bool, int, float)):
        return f"{value!r} ({kind})"
    if isinstance(value, str):
        size = f"{len(value)} character{'s' * (len(value) != 1)}"
    elif isinstance(value, (bytes, bytearray, memoryview)):
        size = f"{len(value)} byte{'s' * (len(value) != 1)}"
    else:
        try:
            count = len(value)  # type: ignore[arg-type]
        except TypeError:
            return f"{kind} (not shown)"
        size = f"{count} item{'s' * (count != 1)}"
    return f"{kind} ({size}, not shown)"


def unencodable_at(text: str) -> int | None:
    """Where ``text`` holds a lone surrogate, which UTF-8 cannot encode, or ``None``: found
    without encoding it, since the encoder's error would hold the whole text (a password)."""
    found = _SURROGATE.search(text)
    return None if found is None else found.start()


def raise_detached(error: BaseException) -> NoReturn:
    """Raise ``error`` with no exception chained to it (``__cause__`` and ``__context__`` both
    ``None``), also inside an ``except`` block whose exception may quote a secret.

    Python sets ``__context__`` when ``raise`` runs; it is cleared as the exception leaves
    this function, and nothing sets it again on the way up.
    """
    try:
        raise error
    finally:
        error.__cause__ = None
        error.__context__ = None
