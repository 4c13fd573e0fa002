"""An async file as ``content=`` is read with ``read(chunk)``, not iterated (issue #38 row 2).

``trio.open_file`` (and anyio's ``AsyncFile``) gives an object that is both a file and an async
iterable of *lines*; the body was iterated, so a 10 MB text file went out line by line
(18.2 s on loopback for the issue's file). It is now read as the guide says, ``FILE_CHUNK``
(1 MiB) at a time. The tests count the reads the file saw and their sizes (behaviour, not
speed), and check what the server received: the FaultServer's record, and nginx's log.
"""

from __future__ import annotations

import io
import pathlib
from collections.abc import Callable
from typing import Any

import pytest
import trio

import trio_retry
from tests.conftest import FAST
from tests.support.fixtures import StartNginx
from tests.support.fixtures import nginx as nginx
from trio_retry._body import FILE_CHUNK
from trio_retry.testing import FaultServer

LIMIT = 30  # seconds: the bound of every test's network activity
#: 10 MB in lines of 1000 bytes: iterated, it goes in 10,000 pieces (lines as short as the
#: issue's make that ~350,000, too slow for a test that must fail, not hang, without the fix).
TEXT = b"".join(b"%09d " % i + b"x" * 989 + b"\n" for i in range(10_000))


class CountingReader(io.BufferedReader):
    """A binary file that counts how it is read: ``read(n)`` calls (with their sizes) and
    ``readline()`` calls (what iterating an async file wrapping it does)."""

    def __init__(self, path: pathlib.Path) -> None:
        super().__init__(io.FileIO(path, "rb"))
        self.reads: list[int] = []
        self.lines = 0

    def read(self, size: int | None = -1, /) -> bytes:
        data = super().read(size)
        self.reads.append(len(data))
        return data

    def readline(self, size: int | None = -1, /) -> bytes:
        self.lines += 1
        return super().readline(size)


def _wrap_trio(file: CountingReader) -> Any:
    return trio.wrap_file(file)  # what trio.open_file returns, around our counting file


def _wrap_anyio(file: CountingReader) -> Any:
    anyio = pytest.importorskip("anyio")
    return anyio.wrap_file(file)  # anyio's AsyncFile


WRAPPERS: dict[str, Callable[[CountingReader], Any]] = {"trio": _wrap_trio, "anyio": _wrap_anyio}


def _assert_read_in_large_chunks(file: CountingReader) -> None:
    assert file.lines == 0  # never iterated line by line
    data = [size for size in file.reads if size]
    assert sum(data) == len(TEXT)
    # FILE_CHUNK at a time: ten reads of 1 MiB, the last shorter, then the one that says EOF.
    assert data[:-1] == [FILE_CHUNK] * (len(TEXT) // FILE_CHUNK)
    assert 0 < data[-1] <= FILE_CHUNK
    assert len(file.reads) == len(data) + 1


@pytest.fixture
def upload(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "upload.txt"
    path.write_bytes(TEXT)
    return path


@pytest.mark.parametrize("kind", WRAPPERS)
async def test_async_file_is_read_in_large_chunks(
    server: FaultServer, upload: pathlib.Path, kind: str
) -> None:
    if kind == "anyio":  # before the file is opened: a skip would leave it open (a warning)
        pytest.importorskip("anyio")
    file = CountingReader(upload)
    body = WRAPPERS[kind](file)
    async with trio_retry.Client(retry=FAST) as client:
        with trio.fail_after(LIMIT):
            response = await client.post(server.url + "/up", content=body)
    assert response.status == 200
    (request,) = server.requests
    assert request.body == TEXT
    assert dict(request.headers)["transfer-encoding"] == "chunked"  # a file object: no length
    _assert_read_in_large_chunks(file)
    assert file.closed  # closed after the attempt, as a file body is


async def test_trio_open_file_sends_the_file(server: FaultServer, upload: pathlib.Path) -> None:
    """The object the issue used, unwrapped: the same bytes arrive."""
    async with trio_retry.Client(retry=FAST) as client:
        with trio.fail_after(LIMIT):
            async with await trio.open_file(upload, "rb") as file:
                response = await client.put(server.url + "/up", content=file)
    assert response.status == 200
    assert server.requests[0].body == TEXT


async def test_nginx_takes_an_async_file_read_in_large_chunks(
    nginx: StartNginx, upload: pathlib.Path
) -> None:
    server = nginx(client_max_body_size="20m")
    file = CountingReader(upload)
    async with trio_retry.Client(retry=FAST) as client:
        with trio.fail_after(LIMIT):
            response = await client.post(
                server.h1_url("/post"), content=trio.wrap_file(file), headers={"x-request-id": "f"}
            )
    assert (response.status, response.content) == (200, b"posted")
    (entry,) = server.log(expect=1).entries
    assert (entry.request_id, entry.status) == ("f", 200)  # nginx read the whole body once
    assert entry.request_length > len(TEXT)  # the body, its chunk framing and the head
    _assert_read_in_large_chunks(file)
