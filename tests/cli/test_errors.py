"""Exit codes and usage errors: one line naming the option and the value, status 2, no
traceback, before anything is sent."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import trio

from trio_retry._cli import run
from trio_retry.testing import CloseAfterBody, FaultServer, Respond, refused_port

from .support import cli

UNUSED = f"http://127.0.0.1:{refused_port()}/x"  # nothing may be sent: nobody listens


def run_here(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(argv, out, err)
    return code, out.getvalue(), err.getvalue()


def usage_cases(tmp: Path) -> list[tuple[list[str], str, bool]]:
    """(argv, what the error line must say, whether the subcommand's usage comes first)."""
    not_pem = tmp / "not.pem"
    not_pem.write_text("hello")
    return [
        (["get", UNUSED, "--attempts", "0"], "argument --attempts: expected a whole number of "
         "at least 1, got '0'", False),
        (["get", UNUSED, "--max-time", "soon"], "argument -m/--max-time/--deadline: expected "
         "a number of seconds above 0, got 'soon'", False),
        (["get", UNUSED, "--max-redirs", "-1"], "argument --max-redirs", False),
        (["get", UNUSED, "--bogus"], "unrecognized arguments: --bogus", True),
        (["get"], "the following arguments are required: url", True),
        ([], "the following arguments are required: COMMAND", True),
        (["fetch", UNUSED], "argument COMMAND: invalid choice: 'fetch'", True),
        (["get", UNUSED, "--cacert", "/nonexistent.pem"], "argument --cacert: cannot read "
         "'/nonexistent.pem': No such file or directory", False),
        (["get", UNUSED, "--cacert", str(not_pem)], f"argument --cacert: '{not_pem}' holds no "
         "PEM certificate", False),
        (["get", UNUSED, "--cert", "/nonexistent.pem"], "argument --cert: cannot read "
         "'/nonexistent.pem'", False),
        (["get", UNUSED, "--key", "k.pem"], "argument --key: 'k.pem' given without --cert",
         False),
        (["post", UNUSED, "-d", "@/nonexistent.txt"], "argument -d/--data: cannot read "
         "'/nonexistent.txt'", False),
        (["post", UNUSED, "--data-binary", "@/nonexistent.bin"], "argument --data-binary: "
         "cannot read '/nonexistent.bin'", False),
        (["put", UNUSED, "-T", "/nonexistent.iso"], "argument -T/--upload-file: cannot read "
         "'/nonexistent.iso'", False),
        (["put", UNUSED, "-T", str(tmp)], f"argument -T/--upload-file: cannot read '{tmp}'",
         False),
        (["post", UNUSED, "--json", "{nope"], "argument --json: not valid JSON", False),
        (["post", UNUSED, "--json", "{}", "-d", "x"], "argument --json: not allowed with -d",
         False),
        (["get", UNUSED, "-o", "/nonexistent/dir/out.bin"], "argument -o/--output: cannot "
         "write '/nonexistent/dir/out.bin': its folder does not exist", False),
        (["get", UNUSED, "-o", str(tmp)], "argument -o/--output: cannot write", False),
        (["get", UNUSED, "-H", "no colon"], "argument -H/--header: expected 'Name: value', "
         "got no ':' after the name (the header, 8 characters, is not shown)", False),
        (["get", UNUSED, "-H", "X-Bad: a\x01b"], "header 'X-Bad'", False),
        (["get", UNUSED, "-X", "GET ME"], "argument -X/--request: expected a method name", False),
        (["get", UNUSED, "--explain=xml"], "argument --explain-format: invalid choice: 'xml'",
         False),
        (["get", UNUSED, "-u", "ada"], "argument -u/--user: no password for user 'ada'", False),
        (["get", "ftp://127.0.0.1/x"], "argument url: unsupported URL scheme 'ftp'", False),
        (["get", "http://"], "argument url: URL has no host", False),
        (["get", UNUSED, "--proxy", "socks9://p:1"], "argument --proxy", False),
    ]  # fmt: skip


def test_every_usage_error_is_one_line_and_exit_2(tmp_path: Path) -> None:
    for argv, expected, with_usage in usage_cases(tmp_path):
        code, out, err = run_here(argv)
        assert code == 2, (argv, err)
        assert out == ""
        lines = err.splitlines()
        assert "Traceback" not in err
        assert expected in lines[-1], (argv, err)
        assert lines[-1].startswith("python -m trio_retry")
        if with_usage:
            assert lines[0].startswith("usage: python -m trio_retry"), (argv, err)
            if argv and argv[0] == "get":
                assert lines[0].startswith("usage: python -m trio_retry get ")  # its own usage
        else:
            assert len(lines) == 1, (argv, err)


async def test_usage_errors_as_a_process(tmp_path: Path) -> None:
    zero = await cli("get", UNUSED, "--attempts", "0")
    assert (zero.code, zero.out) == (2, b"")
    assert zero.err_text == (
        "python -m trio_retry get: error: argument --attempts: expected a whole number of at "
        "least 1, got '0'\n"
    )
    missing = await cli("get", UNUSED, "--cacert", "/nonexistent.pem")
    assert missing.code == 2
    assert "'/nonexistent.pem'" in missing.err_text
    assert missing.err_text.count("\n") == 1


async def test_help_per_subcommand_with_examples() -> None:
    helped = await cli("post", "--help")
    assert helped.code == 0
    text = helped.out.decode()
    assert text.startswith("usage: python -m trio_retry post ")
    assert "examples:" in text
    assert "--data-binary @photo.jpg" in text
    assert "exit codes: 0 ok, 1 failed, 2 usage, 3 ambiguous" in text


async def test_every_exit_code(nursery: trio.Nursery) -> None:
    server = FaultServer(http2=False)
    url = await nursery.start(server.serve)
    server.route("GET", "/ok", Respond(200, body=b"hello"))
    server.route("GET", "/missing", Respond(404, body=b"nope"))
    server.route("POST", "/pay", CloseAfterBody())

    ok = await cli("get", url + "/ok", "-H", "Authorization: Bearer SECRET-1", "--explain")
    assert (ok.code, ok.out) == (0, b"hello")
    assert "SECRET-1" not in ok.err_text
    assert server.requests[0].header("authorization") == "Bearer SECRET-1"

    missing = await cli("get", url + "/missing")
    assert (missing.code, missing.out) == (4, b"nope")  # the body of an error is still output

    ambiguous = await cli("post", url + "/pay", "-d", "x")
    assert ambiguous.code == 3
    assert ambiguous.err_text.startswith("AMBIGUOUS: POST")
    assert server.executed_count("POST", "/pay") == 1  # run once, never repeated

    failed = await cli("post", UNUSED, "--json", '{"a": 1}', "--attempts", "2")
    assert failed.code == 1
    assert failed.err_text.startswith("FAILED (ConnectFailed, NOT_SENT)")

    usage = await cli("get", url + "/ok", "--attempts", "many")
    assert usage.code == 2
    assert len(server.requests) == 3  # a usage error sends nothing


@pytest.mark.parametrize("argv", [["--help"], ["demo", "--help"], ["get", "-h"]])
def test_help_exits_0(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert run_here(argv)[0] == 0
    assert "usage: python -m trio_retry" in capsys.readouterr().out


def test_help_says_an_options_request(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_here(["--help"])[0] == 0
    text = capsys.readouterr().out
    assert "send an OPTIONS request" in text
    assert "send a GET request" in text
    assert run_here(["options", "--help"])[0] == 0
    assert "Send an OPTIONS request;" in capsys.readouterr().out
