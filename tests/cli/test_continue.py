"""``-C -`` / ``--continue-at -`` (curl's meaning, checked with If-Range): a partial ``-o FILE``
continued where it stopped when the server's file is the same, downloaded again whole when it
changed, and never continued blind (no recorded validator). On FaultServer's StaticFile."""

from __future__ import annotations

import hashlib
from pathlib import Path

import trio

from trio_retry.testing import FaultServer, StaticFile

from .support import cli

BODY = bytes(range(256)) * 1000  # 256,000 bytes


async def _partial(
    nursery: trio.Nursery, tmp_path: Path
) -> tuple[FaultServer, StaticFile, Path, str]:
    """A download cut after 100,000 bytes, not continued (--attempts 1): the partial file."""
    static = StaticFile(BODY)
    static.script(cut_after=100_000)
    server = FaultServer(http2=False)
    server.route("GET", "/file", static)
    url = await nursery.start(server.serve) + "/file"
    target = tmp_path / "file.bin"
    first = await cli("get", url, "-o", str(target), "--attempts", "1")
    assert first.code == 1, first.err_text
    assert target.read_bytes() == BODY[:100_000]
    assert (tmp_path / "file.bin.trio-retry").exists()
    assert url not in (tmp_path / "file.bin.trio-retry").read_text()  # a digest, not the URL
    return server, static, target, url


async def test_continue_appends_the_rest(nursery: trio.Nursery, tmp_path: Path) -> None:
    _, static, target, url = await _partial(nursery, tmp_path)
    done = await cli("get", url, "-o", str(target), "-C", "-")
    assert done.code == 0, done.err_text
    assert hashlib.sha256(target.read_bytes()).digest() == hashlib.sha256(BODY).digest()
    assert static.ranges == [None, "bytes=100000-"]
    assert not (tmp_path / "file.bin.trio-retry").exists()  # whole: nothing left to continue


async def test_a_changed_file_is_downloaded_again_whole(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    _, static, target, url = await _partial(nursery, tmp_path)
    changed = bytes(reversed(BODY))
    static.change(changed)
    done = await cli("get", url, "-o", str(target), "--continue-at", "-")
    assert done.code == 0, done.err_text
    assert target.read_bytes() == changed  # If-Range did not match: the new file, not a splice
    assert "changed" in done.err_text
    assert static.ranges == [None, "bytes=100000-"]


async def test_no_validator_no_continuation(nursery: trio.Nursery, tmp_path: Path) -> None:
    server, static, target, url = await _partial(nursery, tmp_path)
    (tmp_path / "file.bin.trio-retry").unlink()
    refused = await cli("get", url, "-o", str(target), "-C", "-")
    assert refused.code == 2
    assert "no validator was recorded" in refused.err_text
    assert static.ranges == [None]  # nothing sent
    assert target.read_bytes() == BODY[:100_000]
    other = await cli("get", url + "?v=2", "-o", str(target), "-C", "-")
    assert other.code == 2  # the sidecar is gone, and would name another URL anyway
    assert len(server.requests) == 1


async def test_only_a_dash_and_only_with_a_file(tmp_path: Path) -> None:
    offset = await cli("get", "http://127.0.0.1:9/x", "-o", str(tmp_path / "f"), "-C", "100")
    assert offset.code == 2
    assert "only '-' is accepted" in offset.err_text
    no_file = await cli("get", "http://127.0.0.1:9/x", "-C", "-")
    assert no_file.code == 2
    assert "give -o FILE" in no_file.err_text
