"""The attempt hands back a value (STYLE habit 20): ``AttemptRun.run()`` returns a read-only
:class:`AttemptResult`; the loop, a hedged round and the answer read it and never write into it,
nor into the runner, whose state is private to ``_call/attempt.py``.

Three locks, each of which a regression trips: writing into a result raises; the runner has
no public attribute to write (its slots are private, and it has no ``__dict__``); and the
source of the loop, the hedge and the answer assigns no attribute of either to anything but
their own objects (read from their syntax tree)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from trio_retry._call import answer, hedge, loop
from trio_retry._call.attempt import AttemptRun
from trio_retry._call.result import AttemptResult, cancelled_result, new_result
from trio_retry._core.evidence import Evidence, Stage
from trio_retry._wire.progress import AttemptProgress

#: The names a caller could write attempt state under: the result's fields and the runner's
#: slots without their underscore.
ATTEMPT_STATE = set(AttemptResult._fields) | {name.lstrip("_") for name in AttemptRun.__slots__}
READERS = (loop, hedge, answer)


def test_a_result_cannot_be_written_into() -> None:
    progress = AttemptProgress(0.0)
    progress.advance(Stage.AWAITING_RESPONSE)
    result = cancelled_result(2, progress, RuntimeError("lost the race"))
    assert (result.number, result.held, result.answered) == (2, None, False)
    assert result.observe(lambda: 0.0) == (Evidence.SENT_NO_RESPONSE, None, None)
    with pytest.raises(AttributeError):
        result.number = 1  # type: ignore[misc]
    with pytest.raises(AttributeError):
        result.error = None  # type: ignore[misc]
    with pytest.raises((AttributeError, TypeError)):  # slotted: no attribute of its own
        result.extra = 1  # type: ignore[attr-defined]
    assert not hasattr(result, "__dict__")


def test_the_runner_has_no_public_state_to_write() -> None:
    assert AttemptRun.__slots__
    public = [name for name in AttemptRun.__slots__ if not name.startswith("_")]
    assert public == []
    assert "__dict__" not in AttemptRun.__slots__
    assert AttemptRun.__dictoffset__ == 0  # no base gives it a __dict__ either


def attempt_state_writes(source: str) -> list[str]:
    """``name.attribute`` of each write of attempt state in ``source``: an assignment
    (plain, augmented, annotated, ``del``) to an attribute named in :data:`ATTEMPT_STATE` of
    anything but ``self``, or a ``setattr``/``object.__setattr__`` call naming one."""
    found: list[str] = []

    def check(target: ast.expr) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                check(element)
        elif isinstance(target, ast.Attribute) and target.attr.lstrip("_") in ATTEMPT_STATE:
            owner = target.value
            if not (isinstance(owner, ast.Name) and owner.id == "self"):
                found.append(f"{ast.unparse(owner)}.{target.attr}")

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                check(target)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            check(node.target)
        elif isinstance(node, ast.Delete):
            for target in node.targets:
                check(target)
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in (
            "setattr",
            "object.__setattr__",
        ):
            name = node.args[1] if len(node.args) > 1 else None
            if isinstance(name, ast.Constant) and str(name.value).lstrip("_") in ATTEMPT_STATE:
                found.append(f"{ast.unparse(node.args[0])}.{name.value}")
    return found


@pytest.mark.parametrize("module", READERS, ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_the_readers_never_write_attempt_state(module: object) -> None:
    path = Path(getattr(module, "__file__", ""))
    assert attempt_state_writes(path.read_text(encoding="utf-8")) == []


def test_the_check_catches_the_writes_it_is_for() -> None:
    """What the loop and the hedge wrote before the result was a value."""
    before = """
run.number = number
verdict, outcome.admission = outcome.admission, None
run.body = b""
outcome.error = HedgeCancelled("cancelled")
setattr(result, "held", None)
self.deadline = 1.0
response.history = history
"""
    assert attempt_state_writes(before) == [
        "run.number",
        "outcome.admission",
        "run.body",
        "outcome.error",
        "result.held",
    ]


def test_the_one_call_constructor_builds_the_class_own_result() -> None:
    """``new_result`` (the tuple made a result in one C call) against the class's own
    constructor: the same type, fields, equality and immutability."""
    progress = AttemptProgress(1.5)
    fields = (3, progress, None, b"ok", 2, None, [(b"host", b"example")], None, None, 100)
    built, expected = new_result(fields), AttemptResult(*fields)
    assert type(built) is AttemptResult
    assert built == expected
    assert repr(built) == repr(expected)
    assert (built.number, built.body, built.raw_length, built.range_start) == (3, b"ok", 2, 100)
    assert built.sent_headers == [(b"host", b"example")]
    assert not hasattr(built, "__dict__")
    assert built._replace(body=b"") == AttemptResult(*fields[:3], b"", *fields[4:])
    with pytest.raises(AttributeError):
        built.body = None  # type: ignore[misc]
