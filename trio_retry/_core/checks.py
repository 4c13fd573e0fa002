"""The type checks of the core's public values (``RetryPolicy``, ``Backoff``, ``RetryBudget``,
``Upstream``, ``Reopenable``...): one wording for "this field wants that, got this".

A value of the wrong type is refused where it is written, with a ``TypeError`` naming the
field, instead of failing later in a comparison (``'<' not supported between 'str' and
'int'``), or being sent (``Upstream(transient_500="no")`` was true).
"""

from __future__ import annotations

__all__ = ["check_flag", "check_instance", "check_number", "check_whole", "described", "given"]


def given(value: object) -> str:
    """``value`` as a message shows it: its repr, shortened, and its type."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def check_number(value: object, field: str, accepted: str) -> None:
    """An ``int`` or ``float`` (never a ``bool``), else ``TypeError`` naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{field} must be {accepted}, got {given(value)}")


def check_whole(value: object, field: str, accepted: str, *, optional: bool = False) -> None:
    """An ``int`` (never a ``bool``), or ``None`` when ``optional``, else ``TypeError``."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{field} must be {accepted}, got {given(value)}")


def check_flag(value: object, field: str) -> None:
    """``True`` or ``False``, else ``TypeError`` naming ``field``."""
    if not isinstance(value, bool):
        raise TypeError(f"{field} must be True or False, got {given(value)}")


def check_instance(value: object, kind: type, field: str, accepted: str) -> None:
    """An instance of ``kind``, else ``TypeError`` naming ``field`` (a class given where its
    instance was meant is named as such)."""
    if isinstance(value, kind):
        return
    if isinstance(value, type):
        raise TypeError(
            f"{field} must be {accepted}, got the class {value.__name__} itself: call it "
            f"({value.__name__}(...))"
        )
    raise TypeError(f"{field} must be {accepted}, got {given(value)}")


def described(value: object) -> str:
    """What a refused value was, without a secret: the class itself (``auth=BasicAuth``,
    which a protocol check takes for an auth: it has the methods), a tuple's item types
    (``("user", None)``, ``("a.txt",)``), or the type."""
    if isinstance(value, type):
        return f"the class {value.__name__} itself (an instance is needed: {value.__name__}(...))"
    if isinstance(value, tuple):
        kinds = ", ".join(type(item).__name__ for item in value)
        return f"a tuple of {len(value)} ({kinds})"
    return type(value).__name__
