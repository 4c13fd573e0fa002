"""The state file (``trio_retry/_state/file.py``): its format read strictly, corrupt and
foreign files ignored (and a foreign one never overwritten), expiries, the size bounds, mode
0600, atomic replacement (a process killed mid-write leaves the old file) and concurrent
writers (processes) losing nothing; ``state=`` values checked."""

from __future__ import annotations

import base64
import json
import os
import stat
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import trio

from trio_retry._state.file import (
    MAX_ENTRIES,
    MAX_FILE_BYTES,
    PREFIX,
    Entry,
    check_path,
    read,
    write,
)

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_800_000_000.0
MINE = "a" * 64
THEIRS = "b" * 64


def token(host: str, port: int = 443, *, expires: float = NOW + 60, learned: float = NOW) -> Entry:
    value = {"token": base64.b64encode(host.encode()).decode()}
    return Entry(host, port, expires, learned, value)


def hosts(path: Path, trust: str = MINE, now: float = NOW) -> set[str]:
    loaded = read(str(path), now)
    assert loaded.problem is None
    return {host for host, _ in loaded.setups.get(trust, {}).get("quic_tokens", {})}


def test_round_trip_mode_and_merge(tmp_path: Path) -> None:
    path = tmp_path / "state"
    assert write(str(path), MINE, {"quic_tokens": {("a", 443): token("a")}}, NOW) is None
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "state.lock").stat().st_mode) == 0o600
    assert path.read_bytes().startswith(PREFIX)
    loaded = read(str(path), NOW)
    assert loaded.setups[MINE]["quic_tokens"] == {("a", 443): token("a")}
    # Another client's changes merge in; what this one did not touch stays; a None removes.
    write(str(path), MINE, {"quic_tokens": {("b", 443): token("b")}}, NOW)
    assert hosts(path) == {"a", "b"}
    write(str(path), MINE, {"quic_tokens": {("a", 443): None}}, NOW)
    assert hosts(path) == {"b"}
    # Another trust group is kept apart, and kept.
    write(str(path), THEIRS, {"quic_tokens": {("c", 443): token("c")}}, NOW)
    assert (hosts(path), hosts(path, THEIRS)) == ({"b"}, {"c"})
    # A file with a wider mode is replaced by one of 0600.
    path.chmod(0o644)
    write(str(path), MINE, {"quic_tokens": {("d", 443): token("d")}}, NOW)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def _valid(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    write(str(path), MINE, {"quic_tokens": {("a", 443): token("a")}}, NOW)
    return path


def _doc(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_bytes())
    return doc


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda raw: raw[: len(raw) // 2], "it is corrupt (Unterminated"),
        (lambda raw: raw.replace(b'"version": 1', b'"version": 7'), "format version 7"),
        (lambda raw: raw.replace(b'"token": "', b'"token": "!'), "'token' is malformed"),
        (lambda raw: raw.replace(b'"learned"', b'"Learned"'), "without exactly its five"),
        (lambda raw: raw.replace(b'"port": 443', b'"port": 0'), "host or port is malformed"),
        (lambda raw: raw.replace(b'"quic_tokens"', b'"cookies"'), "an entry of an unknown kind"),
        (lambda raw: raw.replace(b'"expires": ', b'"expires": "soon", "x": '), "five fields"),
    ],
)
def test_a_corrupt_file_is_ignored_whole_then_replaced(
    tmp_path: Path, damage: Any, why: str
) -> None:
    path = _valid(tmp_path)
    path.write_bytes(damage(path.read_bytes()))
    loaded = read(str(path), NOW)
    assert (loaded.setups, loaded.foreign) == ({}, False)
    assert loaded.problem is not None
    assert why in loaded.problem
    # A corrupt file of ours is overwritten with what this client knows.
    assert write(str(path), MINE, {"quic_tokens": {("z", 443): token("z")}}, NOW) is None
    assert hosts(path) == {"z"}


@pytest.mark.parametrize(
    "content", [b"# my notes\nbuy milk\n", b'{"format": "other"}', b"\x00\xff" * 10]
)
def test_a_foreign_file_is_ignored_and_never_overwritten(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "notes"
    path.write_bytes(content)
    loaded = read(str(path), NOW)
    assert loaded.foreign
    assert loaded.problem == "it is not a trio_retry state file (left as it is)"
    problem = write(str(path), MINE, {"quic_tokens": {("a", 443): token("a")}}, NOW)
    assert problem == "it was not written: it is not a trio_retry state file (left as it is)"
    assert path.read_bytes() == content


def test_a_file_others_could_write_is_not_trusted(tmp_path: Path) -> None:
    path = _valid(tmp_path)
    path.chmod(0o620)
    assert read(str(path), NOW).problem == (
        "others could have written it (another owner, or group/other write)"
    )
    path.chmod(0o600)
    if os.geteuid() == 0:  # (root can give the file away; others cannot)
        os.chown(path, 4242, -1)
        assert read(str(path), NOW).problem is not None
        os.chown(path, 0, -1)
    assert read(str(path), NOW).problem is None


def test_a_missing_or_empty_file_is_empty_without_a_problem(tmp_path: Path) -> None:
    assert read(str(tmp_path / "none"), NOW).problem is None
    (tmp_path / "empty").write_bytes(b"")
    assert read(str(tmp_path / "empty"), NOW) == read(str(tmp_path / "none"), NOW)


def test_expired_entries_are_dropped_reading_and_writing(tmp_path: Path) -> None:
    path = tmp_path / "state"
    changes = {
        "quic_tokens": {
            ("old", 443): token("old", expires=NOW + 10),
            ("new", 443): token("new", expires=NOW + 100),
            ("dead", 443): token("dead", expires=NOW - 1),  # already expired: not written
        }
    }
    write(str(path), MINE, changes, NOW)
    assert b"dead" not in path.read_bytes()
    assert b"ZGVhZA" not in path.read_bytes()
    assert hosts(path, now=NOW) == {"old", "new"}
    assert hosts(path, now=NOW + 10) == {"new"}  # expires is exclusive
    assert hosts(path, now=NOW + 100) == set()
    # Writing later drops what expired meanwhile from the file itself.
    write(str(path), MINE, {"quic_tokens": {("x", 443): token("x", expires=NOW + 500)}}, NOW + 50)
    assert b'"old"' not in path.read_bytes()
    assert hosts(path, now=NOW + 50) == {"new", "x"}


def test_size_bounds(tmp_path: Path) -> None:
    path = tmp_path / "state"
    # Per kind, the newest MAX_ENTRIES are kept.
    many = {(f"h{i}", 443): token(f"h{i}", learned=NOW + i) for i in range(MAX_ENTRIES + 20)}
    write(str(path), MINE, {"quic_tokens": many}, NOW)
    kept = hosts(path)
    assert len(kept) == MAX_ENTRIES
    assert kept == {f"h{i}" for i in range(20, MAX_ENTRIES + 20)}
    # The whole file stays within MAX_FILE_BYTES, whatever the groups hold: the oldest go.
    big = base64.b64encode(b"x" * 6000).decode()
    for group in range(8):
        fat = {
            (f"g{group}-{i}", 443): Entry(
                f"g{group}-{i}", 443, NOW + 60, NOW + group * 100 + i, {"token": big}
            )
            for i in range(20)
        }
        write(str(path), f"{group}" * 64, {"quic_tokens": fat}, NOW)
    assert len(path.read_bytes()) <= MAX_FILE_BYTES
    assert read(str(path), NOW).problem is None
    assert len(hosts(path, "7" * 64)) == 20  # the last writer's group is whole
    # A file larger than the bound is not read at all.
    doc = _doc(path)
    doc["setups"][0]["entries"]["quic_tokens"][0]["value"]["token"] = "A" * (MAX_FILE_BYTES + 4)
    path.write_text(json.dumps(doc, separators=(", ", ": ")))
    assert read(str(path), NOW).problem == f"it is larger than {MAX_FILE_BYTES} bytes"


_CRASH = textwrap.dedent(
    """
    import os, sys
    from trio_retry._state import file
    from trio_retry._state.file import Entry

    real_write = os.write
    def half_then_die(fd, data):
        real_write(fd, bytes(data[: len(data) // 2]))
        os._exit(9)  # the process dies in the middle of writing the new file
    os.write = half_then_die
    value = {"token": "bmV3"}
    file.write(sys.argv[1], "a" * 64, {"quic_tokens": {("new", 443): Entry("new", 443,
        1_800_000_060.0, 1_800_000_000.0, value)}}, 1_800_000_000.0)
    """
)


async def test_a_crash_mid_write_leaves_the_old_file(tmp_path: Path) -> None:
    path = _valid(tmp_path)
    before = path.read_bytes()
    with trio.fail_after(30):
        done = await trio.run_process(
            [sys.executable, "-c", _CRASH, str(path)],
            check=False,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    assert done.returncode == 9
    assert path.read_bytes() == before
    assert hosts(path) == {"a"}
    # The half-written temporary file is a dot file beside it, never the state file.
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert len(leftovers) == 1
    assert leftovers[0].startswith(".state.")
    assert write(str(path), MINE, {"quic_tokens": {("b", 443): token("b")}}, NOW) is None
    assert hosts(path) == {"a", "b"}


_WRITER = textwrap.dedent(
    """
    import sys
    from trio_retry._state.file import Entry, write

    path, who = sys.argv[1], sys.argv[2]
    for i in range(12):
        host = f"{who}-{i}"
        value = {"token": "dG9r"}
        entry = Entry(host, 443, 1_800_000_060.0, 1_800_000_000.0 + i, value)
        assert write(path, "a" * 64, {"quic_tokens": {(host, 443): entry}}, 1_800_000_000.0) is None
    """
)


async def test_concurrent_processes_lose_no_entry(tmp_path: Path) -> None:
    path = tmp_path / "state"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    codes: list[int] = []

    async def writer(who: str) -> None:
        done = await trio.run_process(
            [sys.executable, "-c", _WRITER, str(path), who], check=False, env=env
        )
        codes.append(done.returncode)

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for who in "pqrstu":
                nursery.start_soon(writer, who)
    assert codes == [0] * 6
    assert hosts(path) == {f"{who}-{i}" for who in "pqrstu" for i in range(12)}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_state_values_are_checked(tmp_path: Path) -> None:
    assert check_path(tmp_path / "state") == str(tmp_path / "state")
    assert check_path(str(tmp_path / "state")) == str(tmp_path / "state")
    with pytest.raises(TypeError, match=r"^state must be the path of a file .* got int$"):
        check_path(7)
    with pytest.raises(TypeError, match=r"^state must be the path .* got bytes$"):
        check_path(b"/tmp/x")
    with pytest.raises(ValueError, match=r"^state must be the path of a file, got ''$"):
        check_path("")
    with pytest.raises(ValueError, match=r"^state: '.*' is a directory; give the path of a"):
        check_path(tmp_path)
    with pytest.raises(ValueError, match=r"^state: the directory '.*nowhere' of .* not exist$"):
        check_path(tmp_path / "nowhere" / "state")
    with pytest.raises(ValueError, match=r"^state: cannot create a file in '/proc' \("):
        check_path("/proc/trio_retry.state")
    assert os.listdir(tmp_path) == []  # the probe file was removed


def test_symbolic_links_are_not_followed(tmp_path: Path) -> None:
    target = _valid(tmp_path)
    before = target.read_bytes()
    link = tmp_path / "link"
    link.symlink_to(target)
    loaded = read(str(link), NOW)
    assert loaded.foreign
    assert loaded.problem is not None
    assert loaded.problem.startswith("it could not be opened (")
    assert write(str(link), MINE, {"quic_tokens": {("b", 443): token("b")}}, NOW) is not None
    assert target.read_bytes() == before
    assert link.is_symlink()
    # A lock file planted as a link to somewhere else is not followed either (nor created).
    elsewhere = tmp_path / "elsewhere"
    (tmp_path / "other.lock").symlink_to(elsewhere)
    problem = write(str(tmp_path / "other"), MINE, {"quic_tokens": {}}, NOW)
    assert problem is not None
    assert problem.startswith("it could not be written (")
    assert not elsewhere.exists()
