"""Faster construction of the frozen, slotted records built on every request.

A frozen dataclass's generated ``__init__`` sets each field with ``object.__setattr__`` (it must
bypass its own ``__setattr__``, which raises). Filling the slots through their descriptors
(``member_descriptor.__set__``) bypasses it too, but each such call goes through CPython's
generic call path (an argument tuple built and freed per field): about 850 instructions a
field under valgrind. The constructor here fills the fields of a writable twin of the class
instead (the same slots, in the same order, so the same memory layout; a plain attribute
store each, a few dozen instructions), then makes it an instance of the class itself
(``__class__`` assignment, which CPython allows between classes of one layout). Measured under
callgrind for the nine fields of ``AttemptResult`` (one per attempt), the call included: about
7,900 instructions through the descriptors, 3,500 through the twin (``AttemptResult`` has since
become a ``NamedTuple`` built in one C call: ``_call/result.py``).

The records stay exactly the class's own: same type, fields, equality, hash, immutability
(``tests/core/test_slots.py`` holds them equal to the class's constructor). Where the twin's
class cannot be assigned (an interpreter or a class layout that refuses it: probed once per
class, at import), the descriptors fill the slots as before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any, TypeVar, cast

__all__ = ["slot_constructor"]

_T = TypeVar("_T")


def _writable_twin(cls: type) -> type | None:
    """A class with ``cls``'s slots and none of its behaviour, whose instances may become
    ``cls`` instances by ``__class__`` assignment; ``None`` if that is refused (the probe)."""
    slots = cls.__dict__.get("__slots__")
    if slots is None or cls.__bases__ != (object,):
        return None
    twin = type(f"_{cls.__name__}Fields", (object,), {"__slots__": tuple(slots)})
    try:
        probe: Any = object.__new__(twin)
        probe.__class__ = cls
    except TypeError:
        return None
    return twin


def slot_constructor(cls: type[_T]) -> Callable[..., _T]:
    """A keyword-only constructor for the frozen, slotted dataclass ``cls``.

    Every field must be given (no defaults), and ``__post_init__`` is not run: for internal
    hot paths that pass every field. Raises ``TypeError`` like any call with a missing or
    unknown keyword.
    """
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    twin = _writable_twin(cls)
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls, "_twin": twin}
    if twin is not None:
        body = (
            "    obj = _new(_twin)\n"
            + "".join(f"    obj.{name} = {name}\n" for name in names)
            + "    obj.__class__ = _cls\n"
        )
    else:
        namespace.update({f"_set_{name}": getattr(cls, name).__set__ for name in names})
        body = "    obj = _new(_cls)\n" + "".join(
            f"    _set_{name}(obj, {name})\n" for name in names
        )
    source = f"def build(*, {', '.join(names)}):\n{body}    return obj\n"
    exec(source, namespace)  # the names are the dataclass's own field names
    return cast(Callable[..., _T], namespace["build"])
