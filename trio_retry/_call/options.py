"""The checks of every option, shared by ``Client(...)`` and by each call.

Each check returns the value to use or raises :class:`OptionError`, whose message names the
option, shows what was given and says what is accepted. Where the mistake surfaces decides the
exception: at a call it becomes ``InvalidRequest`` (``NOT_SENT``, ``INVALID_REQUEST``: nothing
was sent, see :mod:`.prepare`); in ``Client(...)`` it becomes ``TypeError`` (a value of the
wrong type) or ``ValueError`` (the right type, a wrong value; see :mod:`.config`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal

from .._core.idempotency import Idempotency
from .._core.policy import RetryPolicy
from .._core.secrecy import withheld

__all__ = [
    "MAX_IDEMPOTENCY_KEY",
    "OptionError",
    "check_bool",
    "check_deadline",
    "check_fields",
    "check_idempotency",
    "check_idempotency_key",
    "check_reconcile",
    "check_retry",
    "shown",
]

#: The longest ``idempotency_key`` accepted (a UUID is 36; keys in the wild stay well below).
MAX_IDEMPOTENCY_KEY = 255


class OptionError(Exception):
    """A wrong option: ``kind`` says whether its type or its value was wrong."""

    def __init__(self, message: str, kind: Literal["type", "value"]) -> None:
        super().__init__(message)
        self.kind = kind


def shown(value: object) -> str:
    """``value`` as an error message shows it: its repr (shortened) and its type."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def check_deadline(value: object, option: str = "deadline") -> float | None:
    """A positive number of seconds, or ``None``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise OptionError(
            f"{option} must be a positive number of seconds or None, got {shown(value)}", "type"
        )
    if not value > 0:  # NaN fails this too
        raise OptionError(
            f"{option} must be a positive number of seconds or None, got {value!r}", "value"
        )
    return float(value)


def check_idempotency(value: object) -> Idempotency | None:
    """An :class:`Idempotency`, or ``None``."""
    if value is None or isinstance(value, Idempotency):
        return value
    accepted = ", ".join(f"Idempotency.{member.name}" for member in Idempotency)
    raise OptionError(f"idempotency must be one of {accepted} or None, got {shown(value)}", "type")


def check_idempotency_key(value: object, option: str = "idempotency_key") -> str | bool | None:
    """``True`` (generate one), a non-empty string of visible ASCII, or ``None``/``False``.

    An empty or blank key would be sent as an empty header while the request is treated as
    idempotent — retried although no server can deduplicate on it; a ``bytes`` or ``int``
    key was once silently dropped. Both are refused.
    """
    if value is None or isinstance(value, bool):
        return value
    accepted = (
        f"True (generate a UUID4) or a non-empty string of visible ASCII characters (at most "
        f"{MAX_IDEMPOTENCY_KEY}, no spaces or control characters: it is sent as the "
        "Idempotency-Key header)"
    )
    # A key is sent beside the credentials and may stand for the payment it protects: a
    # message says what is wrong with it, never what it is (``_core/secrecy.py``).
    if not isinstance(value, str):
        raise OptionError(f"{option} must be {accepted}, got {withheld(value)}", "type")
    if not value:
        raise OptionError(f"{option} must be {accepted}, got an empty string", "value")
    if len(value) > MAX_IDEMPOTENCY_KEY:
        raise OptionError(
            f"{option} must be {accepted}, got a string of {len(value)} characters", "value"
        )
    where = _not_visible_ascii(value)
    if where is not None:
        raise OptionError(
            f"{option} must be {accepted}, got a string of {len(value)} characters with "
            f"{where} (the key is not shown)",
            "value",
        )
    return value


def _not_visible_ascii(text: str) -> str | None:
    """Where ``text`` stops being visible ASCII (``"a space at position 3"``), or None."""
    if text.isascii() and all("!" <= ch <= "~" for ch in text):
        return None
    position, ch = next((i, c) for i, c in enumerate(text) if not "!" <= c <= "~")
    kind = (
        "a space"
        if ch in " \t"
        else "a control character"
        if ch < " " or ch == "\x7f"
        else "a non-ASCII character"
    )
    return f"{kind} at position {position}"


def check_retry(value: object, option: str = "retry") -> RetryPolicy | None:
    """A :class:`RetryPolicy`, or ``None``."""
    if value is None or isinstance(value, RetryPolicy):
        return value
    raise OptionError(
        f"{option} must be a RetryPolicy (e.g. RetryPolicy(max_attempts=3)) or None, got "
        f"{shown(value)}",
        "type",
    )


def check_bool(value: object, option: str, *, optional: bool = False) -> bool | None:
    """``True`` or ``False`` (or ``None`` when ``optional``)."""
    if isinstance(value, bool) or (optional and value is None):
        return value
    accepted = "True, False or None" if optional else "True or False"
    raise OptionError(f"{option} must be {accepted}, got {shown(value)}", "type")


def check_reconcile(value: object) -> None:
    """``reconcile=``: a callable (an async function of the report, SPEC §19)."""
    if not callable(value):
        raise OptionError(
            "reconcile must be an async function (report) -> Reconciled, or None, "
            f"got {shown(value)}",
            "type",
        )


_SCALARS = (str, int, float)


def check_fields(value: object, option: str, *, none_allowed: bool) -> None:
    """Query ``params`` or form ``data``: a mapping (or, for params, a sequence of pairs) of
    ``str`` names to ``str``, ``int``, ``float`` or ``bool`` values, or lists/tuples of
    those; ``None`` values (dropped) only where ``none_allowed``."""
    accepted = "str, int, float or bool, or a list or tuple of those"
    if isinstance(value, Mapping):
        items = list(value.items())
    elif option == "params" and isinstance(value, (list, tuple)):
        items = []
        for pair in value:
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise OptionError(
                    f"params must be a mapping or a sequence of (name, value) pairs; got an "
                    f"item {withheld(pair)}",
                    "type",
                )
            items.append(pair)
    else:
        kinds = "a mapping or a sequence of (name, value) pairs" if option == "params" else (
            "a mapping of form fields (for raw bytes use content=)"
        )  # fmt: skip
        raise OptionError(f"{option} must be {kinds}, got {withheld(value)}", "type")
    for name, item in items:
        if not isinstance(name, str):
            raise OptionError(f"{option} names must be str, got {shown(name)}", "type")
        if item is None and none_allowed:
            continue
        values = item if isinstance(item, (list, tuple)) else (item,)
        for one in values:
            if not isinstance(one, _SCALARS) or (isinstance(one, float) and not math.isfinite(one)):
                raise OptionError(
                    f"{option}[{name!r}] must be {accepted}, got {withheld(one)}", "type"
                )
