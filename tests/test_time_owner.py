"""Time has one owner: ``trio_retry/_wire/clock.py`` (STYLE habit 9; GUIDE "Standards"), and
the task it runs on, ``_wire/timekeeper.py`` (the only other deadline: that task's own sleep).

No other module of the client picks a cancel scope's deadline or a wait of its own: no
``trio.move_on_*``, ``fail_*``, ``sleep``, no ``CancelScope(deadline=...)``, no assignment to a
scope's ``deadline``, no ``trio.current_effective_deadline()`` (``clock.effective_deadline`` is
the one reading), no ``Bound(...)`` made but by ``clock.bound`` (the one way), and no fixed
limit (a module constant named as a wait) outside ``clock.FIXED``. Scopes without a deadline
(a shield, a scope only ever cancelled) are not time, and are allowed.

The pure core (``_core``) waits for nothing and cannot import the clock (no trio there): its
constants are decisions' inputs (``MAX_RETRY_AFTER``: the longest Retry-After honoured), not
limits of a wait, and are not looked at as such. Not held to any of it: ``trio_retry/testing``
(FaultServer and its scripts are the server side, with timeouts of their own, not the
client's waits) and ``trio_retry/_demo`` (a demo script's bound on its own run).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import trio_retry

PACKAGE = Path(trio_retry.__file__).parent
OWNERS = (PACKAGE / "_wire" / "clock.py", PACKAGE / "_wire" / "timekeeper.py")
NOT_THE_CLIENT = (PACKAGE / "testing", PACKAGE / "_demo")
#: trio's ways to wait or to pick a deadline.
TRIO_TIME = {
    "move_on_after",
    "move_on_at",
    "fail_after",
    "fail_at",
    "sleep",
    "sleep_until",
    "current_effective_deadline",
}
#: A module constant named as a wait is a fixed limit: ``clock.FIXED``'s.
WAIT_NAME = re.compile(r"(TIMEOUT|DELAY|STALL|IDLE|INTERVAL|GRACE|WAIT|LINGER|_AFTER|SECONDS)")


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def picks_time(source: str, name: str = "m.py", constants: bool = True) -> list[str]:
    """Where ``source`` picks a wait or a deadline of its own (see the module docstring);
    with ``constants``, also a module constant named as a wait."""
    found = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        where = f"{name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Call):
            called = _dotted(node.func)
            last = called.rsplit(".", 1)[-1]
            if called.startswith("trio.") and last in TRIO_TIME:
                found.append(f"{where} {called}()")
            elif last == "CancelScope" and any(k.arg == "deadline" for k in node.keywords):
                found.append(f"{where} CancelScope(deadline=...)")
            elif last == "Bound":
                found.append(f"{where} Bound(...) (clock.bound is the one way)")
        elif isinstance(node, ast.ImportFrom) and node.module == "trio":
            found += [
                f"{where} from trio import {a.name}" for a in node.names if a.name in TRIO_TIME
            ]
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if (
                    isinstance(target, ast.Attribute)
                    and target.attr == "deadline"
                    and _dotted(target.value) != "self"
                ):
                    found.append(f"{where} {_dotted(target)} = ...")
    for statement in tree.body if constants else ():
        if isinstance(statement, ast.Assign | ast.AnnAssign):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            value = statement.value
            for target in targets:
                if (
                    isinstance(target, ast.Name)
                    and WAIT_NAME.search(target.id)
                    and isinstance(value, ast.Constant)
                    and isinstance(value.value, float)
                ):
                    found.append(f"{name}:{statement.lineno} {target.id} (a fixed limit)")
    return found


def _client_modules() -> list[Path]:
    return [
        path
        for path in sorted(PACKAGE.rglob("*.py"))
        if path not in OWNERS and not any(path.is_relative_to(p) for p in NOT_THE_CLIENT)
    ]


def test_no_module_but_the_clock_picks_time() -> None:
    picked = [
        hit
        for path in _client_modules()
        for hit in picks_time(
            path.read_text(), str(path.relative_to(PACKAGE)), constants=path.parent.name != "_core"
        )
    ]
    assert picked == []


@pytest.mark.parametrize(
    "source",
    [
        "import trio\nasync def f():\n    with trio.move_on_after(1):\n        pass\n",
        "import trio\nasync def f():\n    await trio.sleep(1)\n",
        "from trio import fail_after\n",
        "import trio\nscope = trio.CancelScope(deadline=5)\n",
        "def f(scope):\n    scope.deadline = 3\n",
        "import trio\nx = min(1, trio.current_effective_deadline())\n",
        "from .clock import Bound\nb = Bound(None, 'read', 1.0)\n",
        "RETRY_DELAY = 0.5\n",
    ],
)
def test_the_check_catches_time_picked_outside_the_clock(source: str) -> None:
    assert picks_time(source) != []


@pytest.mark.parametrize(
    "source",
    [
        "import trio\nscope = trio.CancelScope(shield=True)\n",
        "import trio\nscope = trio.CancelScope()\n",
        "class A:\n    def f(self):\n        self.deadline = 3\n",
        "from .clock import bound, wait_for\n",
        "CHUNK = 65536\n",
        "async def f(nursery):\n    nursery.cancel_scope.cancel()\n",
    ],
)
def test_the_check_lets_what_is_not_time_through(source: str) -> None:
    assert picks_time(source) == []


def test_every_fixed_limit_is_in_the_table() -> None:
    """Each limit the brief of issue #40 named sits in ``clock.FIXED`` (a float, used)."""
    from trio_retry._wire.clock import FIXED

    for name in (
        "happy_eyeballs",
        "http2_stall",
        "quic_idle",
        "quic_handshake",
        "ping_after_idle",
        "ack_hold",
        "ack_coalesce",
    ):
        assert isinstance(getattr(FIXED, name), float)
        users = [
            path for path in _client_modules() if re.search(rf"FIXED\.{name}\b", path.read_text())
        ]
        assert users, f"FIXED.{name} is read by no module"
