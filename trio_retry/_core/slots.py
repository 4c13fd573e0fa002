"""Faster construction of the frozen, slotted records built on every request.

A frozen dataclass's generated ``__init__`` sets each field with ``object.__setattr__`` (it must
bypass its own ``__setattr__``, which raises). Filling the slots through their descriptors does
the same job in about half the time; for :class:`~trio_retry.Attempt` (one per attempt) and
:class:`~trio_retry.RetryContext` (one per failed attempt) that is a measurable share of a small
request. The records stay exactly the class's own: same type, fields, equality, hash,
immutability (tests hold them equal to the class's constructor).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any, TypeVar, cast

__all__ = ["slot_constructor"]

_T = TypeVar("_T")


def slot_constructor(cls: type[_T]) -> Callable[..., _T]:
    """A keyword-only constructor for the frozen, slotted dataclass ``cls``.

    Every field must be given (no defaults), and ``__post_init__`` is not run: for internal
    hot paths that pass every field. Raises ``TypeError`` like any call with a missing or
    unknown keyword.
    """
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    namespace.update({f"_set_{name}": cls.__dict__[name].__set__ for name in names})
    source = (
        f"def build(*, {', '.join(names)}):\n    obj = _new(_cls)\n"
        + "".join(f"    _set_{name}(obj, {name})\n" for name in names)
        + "    return obj\n"
    )
    exec(source, namespace)  # the names are the dataclass's own field names
    return cast(Callable[..., _T], namespace["build"])
