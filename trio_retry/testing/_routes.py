"""`Script`: the action queues of one server, which request takes what, and what was left.

Pure (no Trio, no clock), like `_script`. A request takes, in order of preference:

1. the next entry of a route whose method matches (``"*"`` matches any) and whose path is
   the request's exact target (``/pay?id=1``);
2. ... whose path is the target without its query string (``/pay``);
3. ... whose pattern matches the target without its query string (``/users/{id}``);
4. the next entry of the global queue;
5. `Script.default`.

Within one tier the route registered first wins; a route whose queue is empty is passed
over. An action is used up when a request takes it. A `Handler` is not: it stays at the head
of its queue and answers every request that reaches it (or `Handler.times` of them), so an
entry queued behind an unlimited handler could never be reached and is refused.

"Unused" (`Script.unused`) is what a test scripted and no request exercised: every action
still queued, every handler never called, and a limited handler's remaining calls.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import unquote

from ._script import Action, Handler, Respond, check_action, path_only

__all__ = ["Pick", "Script"]

# {name} is one path segment; {name:path} is the rest of the path, slashes included.
_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(:path)?\}")


def _compile(pattern: str) -> re.Pattern[str] | None:
    """The regex of a route pattern, or None for a plain path. `ValueError` if malformed."""
    if "{" not in pattern and "}" not in pattern:
        return None
    if "?" in pattern:
        raise ValueError(f"a route pattern matches the path only, without a query: {pattern!r}")
    parts: list[str] = []
    names: set[str] = set()
    position = 0
    for match in _PARAM.finditer(pattern):
        literal = pattern[position : match.start()]
        if "{" in literal or "}" in literal:
            break
        name = match.group(1)
        if name in names:
            raise ValueError(f"route pattern {pattern!r} names {{{name}}} twice")
        names.add(name)
        parts.append(re.escape(literal))
        parts.append(f"(?P<{name}>.+)" if match.group(2) else f"(?P<{name}>[^/]+)")
        position = match.end()
    rest = pattern[position:]
    if "{" in rest or "}" in rest:
        raise ValueError(
            f"malformed route pattern {pattern!r}: parameters are {{name}} (one segment) or "
            "{name:path} (the rest of the path), names being identifiers"
        )
    parts.append(re.escape(rest))
    return re.compile("".join(parts))


class _Entry:
    """One queued action and how many more requests it answers (None: every one)."""

    __slots__ = ("action", "remaining", "used")

    def __init__(self, action: Action) -> None:
        self.action = action
        self.used = 0
        if isinstance(action, Handler):
            self.remaining: int | None = action.times
        else:
            self.remaining = 1

    def describe(self) -> str:
        if isinstance(self.action, Handler):
            if self.remaining is None:
                return f"handler {self.action.name} (never called)"
            return (
                f"handler {self.action.name} ({self.remaining} of {self.action.times} calls left)"
            )
        return repr(self.action)


class _Queue:
    """A FIFO of entries; unlimited handlers stay at its head."""

    __slots__ = ("entries",)

    def __init__(self) -> None:
        self.entries: deque[_Entry] = deque()

    def extend(self, actions: Iterable[Action], where: str) -> None:
        new = [_Entry(check_action(action)) for action in actions]
        tail = self.entries[-1] if self.entries else None
        for entry in new:
            if tail is not None and isinstance(tail.action, Handler) and tail.remaining is None:
                raise ValueError(
                    f"{where} ends with handler {tail.action.name}, which answers every "
                    f"later request: {entry.describe()} could never be used (use replace(), "
                    "or Handler(..., times=N))"
                )
            tail = entry
        self.entries.extend(new)

    def take(self) -> Action | None:
        if not self.entries:
            return None
        entry = self.entries[0]
        entry.used += 1
        if entry.remaining is not None:
            entry.remaining -= 1
            if entry.remaining == 0:
                self.entries.popleft()
        return entry.action

    def unused(self) -> list[_Entry]:
        return [e for e in self.entries if e.remaining is not None or e.used == 0]


@dataclass(frozen=True, slots=True)
class Pick:
    """What one request takes: the action, and the path parameters of its route."""

    action: Action
    params: Mapping[str, str]


class _Route:
    __slots__ = ("method", "path", "queue", "regex")

    def __init__(self, method: str, path: str) -> None:
        self.method = method
        self.path = path
        self.regex = _compile(path)
        self.queue = _Queue()

    def label(self) -> str:
        return f"{self.method} {self.path}"

    def tier(self, method: str, target: str, path: str) -> tuple[int, dict[str, str]] | None:
        """How well this route matches (0 best), with its parameters; None: no match."""
        if self.method not in ("*", method):
            return None
        if self.regex is None:
            if self.path == target:
                return 0, {}
            return (1, {}) if self.path == path else None
        match = self.regex.fullmatch(path)
        if match is None:
            return None
        return 2, {name: unquote(value) for name, value in match.groupdict().items()}


def _method(method: str) -> str:
    if not isinstance(method, str) or not method:
        raise TypeError(f"a route's method must be a non-empty str, got {method!r}")
    return method.upper()


def _route_path(path: str) -> str:
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError(f"a route's path must be a str starting with '/', got {path!r}")
    return path


class Script:
    """The action queues of one server (see the module docstring for who takes what)."""

    def __init__(self, default: Action | None = None) -> None:
        self._global = _Queue()
        self._routes: dict[tuple[str, str], _Route] = {}
        self.default: Action = Respond(200, body=b"ok") if default is None else default

    # -- queuing -----------------------------------------------------------------------------

    def extend(self, actions: Iterable[Action]) -> None:
        """Append `actions` to the global queue."""
        self._global.extend(actions, "the global queue")

    def _route(self, method: str, path: str) -> _Route:
        key = (_method(method), _route_path(path))
        route = self._routes.get(key)
        if route is None:
            route = self._routes[key] = _Route(*key)
        return route

    def extend_route(self, method: str, path: str, actions: Iterable[Action]) -> None:
        """Append `actions` to the queue of (`method`, `path`); `path` may be a pattern."""
        route = self._route(method, path)
        route.queue.extend(actions, f"route {route.label()}")

    def replace_route(self, method: str, path: str, actions: Iterable[Action]) -> None:
        """Make `actions` the whole queue of (`method`, `path`)."""
        route = self._route(method, path)
        fresh = _Queue()
        fresh.extend(actions, f"route {route.label()}")
        route.queue = fresh

    def clear(self, method: str | None = None, path: str | None = None) -> None:
        """Empty one route's queue (`method` and `path` given), or every queue, the global
        one included (neither given). The default is kept."""
        if method is None and path is None:
            self._global = _Queue()
            self._routes.clear()
            return
        if method is None or path is None:
            raise TypeError("clear() takes both method and path, or neither")
        self._routes.pop((_method(method), _route_path(path)), None)

    # -- taking ------------------------------------------------------------------------------

    def pick(self, method: str, target: str) -> Pick:
        """Take the action for one request, with its route's path parameters."""
        method = method.upper()
        path = path_only(target)
        best: tuple[int, dict[str, str], _Route] | None = None
        for route in self._routes.values():
            if not route.queue.entries:
                continue
            found = route.tier(method, target, path)
            if found is not None and (best is None or found[0] < best[0]):
                best = (found[0], found[1], route)
                if found[0] == 0:
                    break
        if best is not None:
            action = best[2].queue.take()
            assert action is not None
            return Pick(action, best[1])
        action = self._global.take()
        return Pick(self.default if action is None else action, {})

    def pop(self, method: str, target: str) -> Action:
        """Take the action for one request (`pick` without the parameters)."""
        return self.pick(method, target).action

    # -- what is left ------------------------------------------------------------------------

    def pending(self) -> int:
        """How many queued entries (actions and handlers) are still in a queue."""
        return len(self._global.entries) + sum(len(r.queue.entries) for r in self._routes.values())

    def queued(self) -> tuple[Action, ...]:
        """Every queued entry still in a queue: the global queue, then each route's."""
        out = [e.action for e in self._global.entries]
        for route in self._routes.values():
            out.extend(e.action for e in route.queue.entries)
        return tuple(out)

    def unused(self) -> list[tuple[str, str]]:
        """(queue, what) for everything scripted that no request used (see module docstring)."""
        out = [("global queue", e.describe()) for e in self._global.unused()]
        for route in self._routes.values():
            out.extend((route.label(), e.describe()) for e in route.queue.unused())
        return out

    def unused_report(self) -> str | None:
        """A message listing what was left unused, or None when everything was used."""
        left = self.unused()
        if not left:
            return None
        lines = [f"{len(left)} scripted action(s) were never used:"]
        lines.extend(f"  {where}: {what}" for where, what in left)
        return "\n".join(lines)
