"""The fast constructor of the frozen, slotted records (``_core/slots.py``), against each
class's own constructor: the same type, fields, equality and immutability, whichever way it
fills the slots (the writable twin, or the descriptors where the twin is refused)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from trio_retry._core import slots
from trio_retry._core.attempt import Attempt
from trio_retry._core.decision import RetryAllowed
from trio_retry._core.engine import RetryContext
from trio_retry._core.evidence import Evidence, FailureCategory, Stage

EXAMPLES: list[tuple[type, dict[str, Any]]] = [
    (
        Attempt,
        {
            "number": 3,
            "stage": Stage.AWAITING_RESPONSE,
            "evidence": Evidence.SENT_NO_RESPONSE,
            "error": RuntimeError("reset"),
            "status": None,
            "http_version": "HTTP/2",
            "early_data": None,
            "connection_reused": True,
            "bytes_sent": 120,
            "bytes_received": 0,
            "category": FailureCategory.CONNECTION_BROKEN,
            "timings": {"total": 0.25},
            "decision": RetryAllowed(0.1),
            "range_start": None,
            "reconciled": None,
        },
    ),
    (RetryContext, dataclasses.asdict(RetryContext(attempt=2, max_attempts=3, status=503))),
]
IDS = [cls.__name__ for cls, _ in EXAMPLES]


@pytest.mark.parametrize(("cls", "given"), EXAMPLES, ids=IDS)
@pytest.mark.parametrize("twin", [True, False], ids=["twin", "descriptors"])
def test_the_fast_constructor_builds_the_class_own_record(
    cls: type, given: dict[str, Any], twin: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not twin:
        monkeypatch.setattr(slots, "_writable_twin", lambda cls: None)
    build = slots.slot_constructor(cls)
    built, expected = build(**given), cls(**given)
    assert type(built) is cls
    assert built == expected
    assert repr(built) == repr(expected)
    assert not hasattr(built, "__dict__")
    assert dataclasses.replace(built) == expected
    name = next(iter(given))
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(built, name, given[name])
    with pytest.raises(TypeError):
        build(**{k: v for k, v in given.items() if k != name})  # one missing
    with pytest.raises(TypeError):
        build(**given, extra=1)


@pytest.mark.parametrize(("cls", "given"), EXAMPLES, ids=IDS)
def test_the_twin_is_what_cpython_takes(cls: type, given: dict[str, Any]) -> None:
    """(The speed-up is real where it runs: each record here is built through its twin.)"""
    twin = slots._writable_twin(cls)
    assert twin is not None
    assert twin.__slots__ == cls.__slots__  # type: ignore[attr-defined]


def test_a_class_the_twin_cannot_stand_for_gets_the_descriptors() -> None:
    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class Base:
        a: int

    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class Derived(Base):
        b: int

    assert slots._writable_twin(Derived) is None  # not a direct subclass of object
    built = slots.slot_constructor(Derived)(a=1, b=2)
    assert built == Derived(a=1, b=2)
    assert type(built) is Derived
