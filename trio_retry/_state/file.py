"""The state file of ``Client(state=path)``: its format, reading it warily, writing it atomically.

One job: move a client's protocol knowledge (``memory.py``) to and from one file, so that
another process can start where this one stopped, without ever trusting the file blindly.

The format is JSON (never pickle: unpickling a file is running whatever it says)::

    {"format": "trio_retry/state", "version": 1, "setups": [
      {"trust": "<sha-256 of the trust settings, trust.py>",
       "entries": {"alt_svc": [...], "quic_tickets": [...], "quic_tokens": [...]}}]}

each entry ``{"host", "port", "expires", "learned", "value"}`` (wall-clock seconds; ``value``
is of its kind's shape, :data:`SCHEMAS`). Entries are grouped by the trust settings that
produced them: a client reads only its own group, and keeps the others' when it writes.

Reading (:func:`read`): a file that is missing is empty, silently. Anything else that is not
exactly this format is ignored whole, with a reason the client shows in one warning: larger
than :data:`MAX_FILE_BYTES`, not a regular file (a symbolic link is not followed), writable
by others or owned by another user (anyone could have planted its tickets), not JSON, of
another format, or any entry of the wrong shape. A file that does not start as ours does
(:data:`PREFIX`) is *foreign* (another program's file given by mistake), and so is a
symbolic link: it is never overwritten. Expired entries are dropped.

Writing (:func:`write`): under an exclusive ``flock`` of a lock file beside it (two clients
closing at once lose neither's entries), the file is read again, this client's changes are
merged in (an entry it took, forgot or learned replaces what the file says), expired entries
dropped, each kind kept to its :data:`MAX_ENTRIES` newest, at most :data:`MAX_SETUPS` trust
groups, and the whole to :data:`MAX_FILE_BYTES`; then written to a temporary file in the same
directory, created with mode 0600, and moved over the old one with ``os.replace``: a process
that dies at any point leaves the old file or the new one, never a mix. Rejected: writing in
place (a crash leaves half a file); ``rename`` without the lock (the last writer's file wins:
the others' new tickets are lost); and ``fsync`` of the file and its directory before and
after the rename, as a database would: a write took a median of 24 ms with them, 4 ms
without (30 writes, ext4, a loaded 2-core machine, 2026-12-06), at every exit: more than a
resumption saves with a near server, for a file that is a cache. What a power loss can leave
instead (an empty file, or one cut short) is read as empty or ignored with one warning, and
rewritten.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

__all__ = [
    "KINDS",
    "MAX_ENTRIES",
    "MAX_FILE_BYTES",
    "Entry",
    "Loaded",
    "StateFileWarning",
    "check_path",
    "read",
    "write",
]

FORMAT = "trio_retry/state"
VERSION = 1
#: How every file we write starts (``json.dumps`` keeps the order of the keys).
PREFIX = b'{"format": "trio_retry/state"'
#: The largest file read or written; a larger one is ignored (with a warning).
MAX_FILE_BYTES = 256 * 1024
#: Entries of one kind kept per trust group (the newest learned).
MAX_ENTRIES = 128
#: Trust groups kept in one file (this client's, then the most recently used).
MAX_SETUPS = 8
#: The longest base64 text of one field (a ticket, a token, a secret).
_MAX_B64 = 8192
_MAX_HOST = 255
_MAX_EXTENSIONS = 16

KINDS = ("alt_svc", "quic_tickets", "quic_tokens")


class StateFileWarning(UserWarning):
    """The state file given as ``Client(state=...)`` (``--state``) was ignored or could not
    be written; the message says why. Warned once per client; the client carries on without
    the file's knowledge (a full handshake, HTTP/3 rediscovered), never with part of it."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One thing learned about ``host:port``, until ``expires`` (wall-clock seconds)."""

    host: str
    port: int
    expires: float
    learned: float
    #: The kind's fields (:data:`SCHEMAS`), as JSON values; secrets among them. Not in repr.
    value: Mapping[str, Any] = field(repr=False)


#: kind -> {(host, port): Entry}
Entries: TypeAlias = dict[str, dict[tuple[str, int], Entry]]


@dataclass(frozen=True, slots=True)
class Loaded:
    """What :func:`read` found: the entries of each trust group (``setups``), and, when the
    file was ignored, why (``problem``) and whether it is another program's (``foreign``)."""

    setups: dict[str, Entries]
    problem: str | None = None
    foreign: bool = False


def _is_int(low: int, high: int) -> Callable[[object], bool]:
    return lambda v: type(v) is int and low <= v <= high


def _is_time(v: object) -> bool:
    return type(v) in (int, float) and math.isfinite(v)  # type: ignore[arg-type]


def _is_b64(v: object) -> bool:
    if type(v) is not str or len(v) > _MAX_B64:
        return False
    try:
        base64.b64decode(v, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _is_name(v: object) -> bool:
    return type(v) is str and 0 < len(v) <= _MAX_HOST and v.isprintable()


def _is_extensions(v: object) -> bool:
    return (
        type(v) is list
        and len(v) <= _MAX_EXTENSIONS
        and all(
            type(x) is list and len(x) == 2 and _is_int(0, 65535)(x[0]) and _is_b64(x[1]) for x in v
        )
    )


_U32 = _is_int(0, 2**32 - 1)

#: The fields of each kind's ``value`` and the check of each (every field required, no other).
SCHEMAS: dict[str, dict[str, Callable[[object], bool]]] = {
    "alt_svc": {"port": _is_int(1, 65535)},
    "quic_tokens": {"token": _is_b64},
    "quic_tickets": {
        "age_add": _U32,
        "cipher_suite": _is_int(0, 65535),
        "not_valid_before": _is_time,
        "not_valid_after": _is_time,
        "resumption_secret": _is_b64,
        "server_name": lambda v: type(v) is str and len(v) <= _MAX_HOST and v.isprintable(),
        "ticket": _is_b64,
        "max_early_data_size": lambda v: v is None or _U32(v),
        "other_extensions": _is_extensions,
    },
}


def check_path(value: object) -> str:
    """``state=`` as a path the client can write: ``TypeError`` for what is not a path,
    ``ValueError`` for a directory, a missing directory or one the process cannot create a
    file in (found by creating, then removing, a probe file there), each naming ``state``."""
    if isinstance(value, bytes) or not isinstance(value, (str, os.PathLike)):
        raise TypeError(
            f"state must be the path of a file (str or os.PathLike), got {type(value).__name__}"
        )
    path = os.fspath(value)
    if not isinstance(path, str):
        raise TypeError(f"state must be a str path, got a path of {type(path).__name__}")
    if not path:
        raise ValueError("state must be the path of a file, got ''")
    if os.path.isdir(path):
        raise ValueError(
            f"state: {path!r} is a directory; give the path of a file (e.g. "
            f"{os.path.join(path, 'trio_retry.state')!r})"
        )
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ValueError(f"state: the directory {directory!r} of {path!r} does not exist")
    probe = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.probe")
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.unlink(probe)
    except OSError as exc:
        raise ValueError(
            f"state: cannot create a file in {directory!r} ({exc.strerror}); give a path "
            "in a directory this process can write"
        ) from None
    return path


def read(path: str, now: float) -> Loaded:
    """The entries of the file at ``path`` not expired at ``now`` (see the module
    docstring). Never raises for what the file holds; an ``OSError`` opening it is a
    ``problem`` too."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return Loaded({})
    except OSError as exc:
        return Loaded({}, f"it could not be opened ({exc.strerror})", foreign=True)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return Loaded({}, "it is not a regular file", foreign=True)
        raw = _read_up_to(fd, MAX_FILE_BYTES + 1)
    except OSError as exc:
        return Loaded({}, f"it could not be read ({exc.strerror})", foreign=True)
    finally:
        os.close(fd)
    if not raw:
        return Loaded({})  # (an empty file, e.g. made by mktemp: ours to write)
    if not raw.startswith(PREFIX):
        return Loaded({}, "it is not a trio_retry state file (left as it is)", foreign=True)
    if hasattr(os, "geteuid") and (info.st_uid != os.geteuid() or info.st_mode & 0o022):
        return Loaded({}, "others could have written it (another owner, or group/other write)")
    if len(raw) > MAX_FILE_BYTES:
        return Loaded({}, f"it is larger than {MAX_FILE_BYTES} bytes")
    try:
        return Loaded(_decode(json.loads(raw), now))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        return Loaded({}, f"it is corrupt ({exc})")


def _read_up_to(fd: int, limit: int) -> bytes:
    """At most ``limit`` bytes of ``fd``, to its end."""
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = os.read(fd, limit - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _decode(doc: object, now: float) -> dict[str, Entries]:
    """The trust groups of a parsed file; ``ValueError`` saying what is wrong (never quoting
    a value: they are secrets)."""
    if type(doc) is not dict or doc.get("format") != FORMAT:
        raise ValueError("not of the trio_retry state format")
    if doc.get("version") != VERSION:
        raise ValueError(f"format version {doc.get('version')!r}, expected {VERSION}")
    groups = doc.get("setups")
    if type(groups) is not list or len(groups) > MAX_SETUPS:
        raise ValueError(f"'setups' is not a list of at most {MAX_SETUPS}")
    setups: dict[str, Entries] = {}
    for group in groups:
        if type(group) is not dict or set(group) != {"trust", "entries"}:
            raise ValueError("a setup without exactly 'trust' and 'entries'")
        trust, by_kind = group["trust"], group["entries"]
        if type(trust) is not str or len(trust) != 64 or type(by_kind) is not dict:
            raise ValueError("a setup's 'trust' or 'entries' is malformed")
        if not set(by_kind) <= set(KINDS):
            raise ValueError("an entry of an unknown kind")
        entries: Entries = {kind: {} for kind in KINDS}
        for kind, items in by_kind.items():
            if type(items) is not list or len(items) > MAX_ENTRIES:
                raise ValueError(f"{kind!r} is not a list of at most {MAX_ENTRIES}")
            for item in items:
                entry = _entry(kind, item)
                if entry.expires > now:
                    entries[kind][entry.host, entry.port] = entry
        setups[trust] = entries
    return setups


def _entry(kind: str, item: object) -> Entry:
    if type(item) is not dict or set(item) != {"host", "port", "expires", "learned", "value"}:
        raise ValueError(f"a {kind!r} entry without exactly its five fields")
    host, port, value = item["host"], item["port"], item["value"]
    if not _is_name(host) or not _is_int(1, 65535)(port):
        raise ValueError(f"a {kind!r} entry's host or port is malformed")
    if not (_is_time(item["expires"]) and _is_time(item["learned"])):
        raise ValueError(f"a {kind!r} entry's times are not numbers")
    schema = SCHEMAS[kind]
    if type(value) is not dict or set(value) != set(schema):
        raise ValueError(f"a {kind!r} entry's value has other fields than {sorted(schema)}")
    for name, check in schema.items():
        if not check(value[name]):
            raise ValueError(f"a {kind!r} entry's {name!r} is malformed")
    return Entry(host, port, float(item["expires"]), float(item["learned"]), value)


Changes: TypeAlias = dict[str, dict[tuple[str, int], Entry | None]]


def write(path: str, trust: str, changes: Changes, now: float) -> str | None:
    """Merge ``changes`` (per kind, ``(host, port)`` -> the new entry, or ``None``: taken or
    forgotten) into the ``trust`` group of the file at ``path``, atomically (see the module
    docstring). Returns why nothing was written, or ``None``. Never raises ``OSError``; on
    cancellation (a thread runs it) the write completes or leaves the old file."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        with _locked(path):
            loaded = read(path, now)
            if loaded.foreign:
                return f"it was not written: {loaded.problem}"
            setups = loaded.setups  # (a corrupt file: {} and replaced)
            mine = setups.pop(trust, None) or {kind: {} for kind in KINDS}
            for kind, changed in changes.items():
                for where, entry in changed.items():
                    if entry is None or entry.expires <= now:
                        mine[kind].pop(where, None)
                    else:
                        mine[kind][where] = entry
            data = _encode(trust, mine, setups)
            _replace(path, directory, data)
    except OSError as exc:
        return f"it could not be written ({exc.strerror or exc})"
    return None


class _locked:
    """An exclusive ``flock`` of ``<path>.lock`` (0600) while the block runs; where there is
    no ``fcntl`` (Windows), none: the write stays atomic, concurrent writers may lose
    entries."""

    def __init__(self, path: str) -> None:
        self._path = path + ".lock"
        self._fd = -1

    def __enter__(self) -> None:
        # (Not through a symbolic link: one planted there would have us create its target.)
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
        self._fd = os.open(self._path, flags, 0o600)
        try:
            import fcntl
        except ImportError:  # pragma: no cover (Windows)
            return
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        os.close(self._fd)  # (closing releases the lock)


def _encode(trust: str, mine: Entries, others: dict[str, Entries]) -> bytes:
    """The file's bytes: this client's group first, then the others most recently learned
    first; the oldest entries dropped until it fits :data:`MAX_FILE_BYTES`."""

    def newest(entries: Entries) -> float:
        return max((e.learned for kind in entries.values() for e in kind.values()), default=0.0)

    ordered = [(trust, mine), *sorted(others.items(), key=lambda kv: -newest(kv[1]))]
    groups = [
        (name, {kind: _newest(entries.get(kind, {})) for kind in KINDS})
        for name, entries in ordered[:MAX_SETUPS]
    ]
    while True:
        data = json.dumps(
            {
                "format": FORMAT,
                "version": VERSION,
                "setups": [
                    {"trust": name, "entries": {k: [_item(e) for e in v] for k, v in kinds.items()}}
                    for name, kinds in groups
                ],
            },
            separators=(", ", ": "),
        ).encode("ascii")
        if len(data) <= MAX_FILE_BYTES:
            return data
        # The oldest entry of the last group that has any goes first (others' before ours).
        for _, kinds in reversed(groups):
            candidates = [(e.learned, k, i) for k, v in kinds.items() for i, e in enumerate(v)]
            if candidates:
                _, kind, index = min(candidates)
                del kinds[kind][index]
                break


def _newest(entries: Mapping[tuple[str, int], Entry]) -> list[Entry]:
    return sorted(entries.values(), key=lambda e: -e.learned)[:MAX_ENTRIES]


def _item(entry: Entry) -> dict[str, Any]:
    return {
        "host": entry.host,
        "port": entry.port,
        "expires": entry.expires,
        "learned": entry.learned,
        "value": dict(entry.value),
    }


def _replace(path: str, directory: str, data: bytes) -> None:
    """``data`` as the file at ``path``: a temporary file (0600) beside it, renamed over it
    (no ``fsync``: see the module docstring)."""
    temporary = os.path.join(
        directory, f".{os.path.basename(path)}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    )
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(temporary, flags, 0o600)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
