"""One client's protocol knowledge in memory, read from and written back to its state file.

One job: hold what the client's connections learned (QUIC session tickets and address-
validation tokens, per ``(host, port)``; ``Alt-Svc`` answers, per origin) under the client's
trust fingerprint (``trust.py``), and remember what changed, so that writing the file
(``file.py``) changes only that and keeps what other clients wrote meanwhile.

A client without ``state=`` has one too, without a file: its connections take and keep
tickets the same way, and nothing is read or written.

What it holds is secret (a ticket's resumption secret is a key to the session): its repr
counts entries and shows no value, and nothing here logs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .file import KINDS, Changes, Entry, read, write

__all__ = ["ProtocolMemory"]


class ProtocolMemory:
    """Entries by kind (``file.KINDS``) and ``(host, port)``; see the module docstring."""

    __slots__ = ("_changes", "_entries", "_told", "path", "trust")

    def __init__(self, path: str | None, trust: str) -> None:
        #: The state file (``None``: memory only).
        self.path = path
        #: The fingerprint of the client's trust settings (``trust.py``).
        self.trust = trust
        self._entries: dict[str, dict[tuple[str, int], Entry]] = {kind: {} for kind in KINDS}
        self._changes: Changes = {}
        self._told = False  # the one warning about the file was given

    def load(self, now: float) -> str | None:
        """Read the file (blocking: run it in a thread). Returns the one warning to show, if
        the file was ignored; then nothing of it is used."""
        if self.path is None:
            return None
        loaded = read(self.path, now)
        if loaded.problem is not None:
            return self._tell(f"ignored: {loaded.problem}")
        mine = loaded.setups.get(self.trust)
        if mine is not None:  # (another trust group's entries are not used: trust.py)
            for kind in KINDS:
                known = mine.get(kind, {})
                self._entries[kind] = {w: e for w, e in known.items() if e.expires > now}
        return None

    def save(self, now: float) -> str | None:
        """Write what changed since :meth:`load` (blocking: run it in a thread). Returns the
        warning to show if it could not be written (and none was shown before)."""
        if self.path is None or not self._changes:
            return None
        problem = write(self.path, self.trust, self._changes, now)
        if problem is None:
            self._changes = {}
            return None
        return self._tell(problem)

    def _tell(self, problem: str) -> str | None:
        if self._told:
            return None
        self._told = True
        return f"state file {self.path!r}: {problem}; going on without it"

    def take(self, kind: str, where: tuple[str, int], now: float) -> Mapping[str, Any] | None:
        """The value kept for ``where``, removed (a ticket or a token is used once), if it
        has not expired at ``now``."""
        entry = self._entries[kind].pop(where, None)
        if entry is None:
            return None
        self._changes.setdefault(kind, {})[where] = None
        return entry.value if entry.expires > now else None

    def keep(self, kind: str, entry: Entry) -> None:
        """Remember ``entry`` (replacing what was kept for its ``(host, port)``)."""
        where = (entry.host, entry.port)
        self._entries[kind][where] = entry
        self._changes.setdefault(kind, {})[where] = entry

    def forget(self, kind: str, where: tuple[str, int]) -> None:
        """Drop what is kept for ``where`` (``Alt-Svc: clear``)."""
        self._entries[kind].pop(where, None)
        self._changes.setdefault(kind, {})[where] = None

    def recall(self, kind: str) -> list[Entry]:
        """Every entry of ``kind`` kept now (expired ones included: the reader checks)."""
        return list(self._entries[kind].values())

    def __repr__(self) -> str:
        counts = ", ".join(f"{len(self._entries[kind])} {kind}" for kind in KINDS)
        where = "memory only" if self.path is None else repr(self.path)
        return f"<ProtocolMemory {where}: {counts}>"
