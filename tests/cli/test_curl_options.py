"""curl's own options, typed out of habit: one line naming the option and what to use here
(or that nothing does), exit status 2, nothing sent."""

from __future__ import annotations

import io

import pytest
import trio

from trio_retry._cli import run
from trio_retry._cli.args import build_parser
from trio_retry._cli.curl import CURL_ONLY
from trio_retry.testing import FaultServer, Respond, refused_port

from .support import cli

UNUSED = f"http://127.0.0.1:{refused_port()}/x"  # nothing may be sent: nobody listens


def refused(*argv: str) -> str:
    """The one line of error for ``argv`` (exit status 2, nothing on stdout)."""
    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), out, err)
    assert (code, out.getvalue()) == (2, ""), err.getvalue()
    [line] = err.getvalue().splitlines()  # one line: no usage before it
    return line


@pytest.mark.parametrize(
    ("typed", "option", "hint"),
    [
        (["--retry", "3"], "--retry", "use --attempts N"),
        (["--retry=3"], "--retry", "curl's --retry 2 is --attempts 3"),
        (["-f"], "-f", "a status of 400 or above already exits with 4"),
        (["--fail"], "--fail", "already exits with 4"),
        (["-fsSL"], "-f", "already exits with 4"),  # written together, as curl users do
        (["-sSf"], "-f", "already exits with 4"),  # after flags of ours
        (["--timeout", "5"], "--timeout", "use -m/--max-time SECONDS"),
        (["-w", "%{http_code}"], "-w", "--explain=json writes the status"),
        (["--write-out", "%{http_code}"], "--write-out", "--explain=json"),
        (["--limit-rate", "100k"], "--limit-rate", "no equivalent"),
        (["--data-urlencode", "q=a b"], "--data-urlencode", "give -d the encoded text"),
        (["-F", "file=@a.txt"], "-F", "no multipart form"),
        (["-I"], "-I", "use the head command"),
        (["--head"], "--head", "use the head command"),  # not taken for --header's prefix
        (["-A", "bot/1"], "-A", "-H 'User-Agent: ...'"),
        (["-x", "http://proxy:3128"], "-x", "use --proxy URL"),
        (["-O"], "-O", "use -o FILE"),
        (["--oauth2-bearer", "SECRET-9"], "--oauth2-bearer", "-H 'Authorization: Bearer"),
        (["-b", "session=SECRET-9"], "-b", "-H 'Cookie: name=value'"),
    ],
)
def test_a_curl_option_gets_one_line_and_a_hint(typed: list[str], option: str, hint: str) -> None:
    line = refused("get", UNUSED, *typed)
    assert line.startswith(
        f"python -m trio_retry get: error: argument {option}: a curl option this command does "
        "not take; "
    ), line
    assert hint in line
    assert "SECRET" not in line  # the option's value is never repeated
    assert refused("post", *typed, UNUSED).startswith(
        f"python -m trio_retry post: error: argument {option}:"
    )


def test_our_own_options_and_values_are_not_taken_for_curls() -> None:
    # A negative number is a value, not curl's -1 .. -6; a cluster stops at an option of ours
    # that takes a value (-ofile: the file is "file").
    assert "expected a whole number of at least 0, got '-1'" in refused(
        "get", UNUSED, "--max-redirs", "-1"
    )
    assert "unrecognized arguments: --bogus" in run_with_usage("get", UNUSED, "--bogus")
    ours = {
        name for action in build_parser("get")[1]["get"]._actions for name in action.option_strings
    }
    assert not ours & {name for names, _ in CURL_ONLY for name in names}


def run_with_usage(*argv: str) -> str:
    err = io.StringIO()
    assert run(list(argv), io.StringIO(), err) == 2
    assert err.getvalue().startswith("usage: ")  # an unknown option that is not curl's
    return err.getvalue()


async def test_curl_looking_values_are_sent(nursery: trio.Nursery) -> None:
    server = FaultServer()
    url = await nursery.start(server.serve)
    server.route("POST", "/v", Respond(200, body=b"ok"))
    ran = await cli("post", url + "/v", "-H", "X-Flags: -f --retry", "-d", "-w x", "-sS")
    assert (ran.code, ran.out) == (0, b"ok"), ran.err_text
    [request] = server.requests
    assert (request.header("x-flags"), request.body) == ("-f --retry", b"-w x")


async def test_as_a_process_nothing_is_sent(nursery: trio.Nursery) -> None:
    server = FaultServer()
    url = await nursery.start(server.serve)
    ran = await cli("get", url + "/x", "-fsSL", "--retry", "5")
    assert (ran.code, ran.out) == (2, b"")
    assert ran.err_text.count("\n") == 1
    assert server.requests == []
