"""The body on the command line: bytes as they arrive, bounded memory, text only on a
terminal, and a progress bar when stderr is one."""

from __future__ import annotations

import gzip
import hashlib
import random
import re
from pathlib import Path

import trio

from trio_retry.testing import FaultServer, Respond

from .support import cli, cli_on_terminal, cli_peak_rss

BINARY = bytes(range(256)) * 391 + b"\r\n\x00\x1a"  # every byte value, 100,100 bytes
OCTETS = {"Content-Type": "application/octet-stream"}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def test_binary_round_trip_is_byte_identical(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = FaultServer(http2=False)
    url = await nursery.start(server.serve)
    server.route("GET", "/bin", Respond(200, headers=OCTETS, body=BINARY))
    server.route("GET", "/bin", Respond(200, headers=OCTETS, body=BINARY))
    server.route("POST", "/echo", Respond(200, body=b"ok"))

    to_stdout = await cli("get", url + "/bin")
    assert to_stdout.code == 0
    assert sha(to_stdout.out) == sha(BINARY)  # no newline added, nothing decoded as text

    target = tmp_path / "copy.bin"
    to_file = await cli("get", url + "/bin", "-o", str(target))
    assert (to_file.code, to_file.out, to_file.err) == (0, b"", b"")  # no bar: not a terminal
    assert sha(target.read_bytes()) == sha(BINARY)

    # And up: --data-binary @FILE sends the file byte for byte (with its length).
    source = tmp_path / "upload.bin"
    source.write_bytes(BINARY)
    up = await cli("post", url + "/echo", "--data-binary", f"@{source}")
    assert up.code == 0
    assert sha(server.requests[-1].body) == sha(BINARY)
    assert server.requests[-1].header("content-length") == str(len(BINARY))


async def test_content_encoding_is_decoded_and_nothing_else(nursery: trio.Nursery) -> None:
    server = FaultServer(http2=False)
    url = await nursery.start(server.serve)
    headers = {**OCTETS, "Content-Encoding": "gzip"}
    server.route("GET", "/gz", Respond(200, headers=headers, body=gzip.compress(BINARY)))
    ran = await cli("get", url + "/gz", "--compressed")  # curl's flag: accepted, a no-op
    assert ran.code == 0
    assert sha(ran.out) == sha(BINARY)
    assert "gzip" in (server.requests[-1].header("accept-encoding") or "")


async def test_a_50_mb_download_keeps_memory_bounded(nursery: trio.Nursery, tmp_path: Path) -> None:
    big = random.Random(5).randbytes(50 * 1024 * 1024)
    server = FaultServer(http2=False)
    url = await nursery.start(server.serve)
    server.route("GET", "/small", Respond(200, headers=OCTETS, body=big[:1024]))
    server.route("GET", "/big", Respond(200, headers=OCTETS, body=big))
    server.route("GET", "/big", Respond(200, headers=OCTETS, body=big))

    code, baseline, out = await cli_peak_rss("get", url + "/small", capture=True)
    assert (code, out) == (0, big[:1024])
    code, peak, _ = await cli_peak_rss("get", url + "/big")  # to stdout (/dev/null)
    assert code == 0
    target = tmp_path / "big.bin"
    code, peak_file, _ = await cli_peak_rss("get", url + "/big", "-o", str(target))
    assert code == 0
    assert target.stat().st_size == len(big)
    assert sha(target.read_bytes()) == sha(big)
    # A buffered body would cost 50 MiB at least (the old CLI peaked at 372 MB); streamed, the
    # peak stays within a few MiB of the same command fetching 1 KiB.
    print(f"peak RSS KiB: 1 KiB body {baseline}, 50 MiB to stdout {peak}, to -o {peak_file}")
    assert peak - baseline < 8 * 1024
    assert peak_file - baseline < 8 * 1024


async def test_progress_bar_on_a_terminal_only(nursery: trio.Nursery, tmp_path: Path) -> None:
    body = bytes(range(256)) * 4096  # 1 MiB
    server = FaultServer(http2=False)
    url = await nursery.start(server.serve)
    for _ in range(3):  # paced: about 0.4 s, so the bar redraws a few times on the way
        server.route("GET", "/file", Respond(200, headers=OCTETS, body=body, body_rate=2.5e6))

    target = tmp_path / "a.bin"
    drawn = await cli_on_terminal("get", url + "/file", "-o", str(target))
    assert drawn.code == 0
    assert target.read_bytes() == body
    frames = [f for f in drawn.err.split(b"\r") if f]
    assert frames[-1].endswith(b"\x1b[K\n")  # the final frame ends the line
    final = frames[-1].decode()
    assert re.match(r"download 100% \[#+\] 1\.0 MiB / 1\.0 MiB  [\d.]+ [KM]iB/s  in 0:0\d", final)
    assert len(final.rstrip("\n").replace("\x1b[K", "")) <= 99  # fits the 100-column terminal
    # Redraws are throttled (at most ~10 a second, plus the first and the last), far fewer
    # than the chunks written.
    assert 3 <= len(frames) <= 12
    assert any(b"ETA" in f for f in frames[:-1])  # the length was known: an ETA on the way

    silent = await cli_on_terminal("get", url + "/file", "-o", str(tmp_path / "b.bin"), "-s")
    assert (silent.code, silent.err) == (0, b"")
    to_stdout = await cli_on_terminal("get", url + "/file")  # stdout is a pipe: no bar
    assert (to_stdout.code, to_stdout.err, to_stdout.out) == (0, b"", body)


async def test_spinner_when_the_length_is_unknown(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = FaultServer(http2=False)
    url = await nursery.start(server.serve)
    headers = {**OCTETS, "Content-Encoding": "gzip"}  # the decoded length is unknown
    server.route("GET", "/gz", Respond(200, headers=headers, body=gzip.compress(BINARY)))
    target = tmp_path / "a.bin"
    drawn = await cli_on_terminal("get", url + "/gz", "-o", str(target))
    assert drawn.code == 0
    assert target.read_bytes() == BINARY
    final = drawn.err.split(b"\r")[-1].decode()
    assert re.match(r"download  [|/\\-]  97\.8 KiB  [\d.]+ [KM]iB/s", final)
    assert "%" not in final
    assert "ETA" not in final


async def test_upload_progress_bar(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = FaultServer(http2=False)
    url = await nursery.start(server.serve)
    server.route("PUT", "/up", Respond(201, body=b"stored"))
    source = tmp_path / "up.bin"
    source.write_bytes(BINARY * 3)
    drawn = await cli_on_terminal("put", url + "/up", "-T", str(source))
    assert drawn.code == 0
    assert drawn.out == b"stored"
    assert server.requests[0].body == BINARY * 3
    assert re.search(rb"upload 100% \[#+\] 293\.3 KiB / 293\.3 KiB", drawn.err)


async def test_text_is_text_only_on_a_terminal(nursery: trio.Nursery) -> None:
    server = FaultServer(http2=False)
    url = await nursery.start(server.serve)
    latin = {"Content-Type": "text/plain; charset=iso-8859-1"}
    server.route("GET", "/t", Respond(200, headers=latin, body="café".encode("latin-1")))
    server.route("GET", "/t", Respond(200, headers=latin, body="café".encode("latin-1")))
    server.route("GET", "/b", Respond(200, headers=OCTETS, body=BINARY))
    server.route("GET", "/b", Respond(200, headers=OCTETS, body=BINARY))

    shown = await cli_on_terminal("get", url + "/t", stdout_tty=True, stderr_tty=False)
    assert shown.code == 0
    assert shown.out == "café\n".encode()  # decoded by its charset, a newline for the prompt
    piped = await cli("get", url + "/t")
    assert piped.out == "café".encode("latin-1")  # a pipe gets the bytes as sent

    refused = await cli_on_terminal("get", url + "/b", stdout_tty=True, stderr_tty=False)
    assert refused.code == 0
    assert refused.out == b""  # binary never garbles a terminal...
    assert b"binary output (application/octet-stream) is not shown" in refused.err
    assert b"-o -" in refused.err
    forced = await cli_on_terminal("get", url + "/b", "-o", "-", stdout_tty=True, stderr_tty=False)
    assert forced.code == 0
    assert len(forced.out) >= len(BINARY)  # ...unless asked (the terminal rewrites \n)
