"""Issue #38's "Done when", on the command line: the mistakes of a curl user, replayed (the
API's are in tests/client/test_user_mistakes.py).

Each row is a command line (``URL`` stands for a FaultServer's URL), the words naming what was
wrong and the words naming what is accepted. Every row is a usage error (exit status 2), none
hangs (each run is bounded), nothing reaches the server, and a secret planted in a row
(``SECRET``) is shown nowhere in what the command writes.

Rows that failed before the round-four acceptance: an abbreviated long option (``--max-t``,
``--hea``) was taken for the option it begins (curl takes none), and a mistyped option's value
was repeated by "unrecognized arguments" (``--usr user:SECRET``); ``http//host`` went to a host
named ``http``; ``--json '{"a": NaN}'`` was sent (Python reads NaN, JSON has none); a HEAD
request took a body; a URL or a header written where the command goes was quoted whole
(argparse's "invalid choice"), password and token included.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import pytest
import trio
import trio.testing

from trio_retry._cli import run
from trio_retry.testing import FaultServer

SECRET = "Zq5ecretZq"
KEY = "non-empty string of visible ASCII"


@dataclass(frozen=True)
class CliMistake:
    argv: tuple[str, ...]  # "URL" is replaced by the server's URL
    wrong: str
    accepted: str

    @property
    def id(self) -> str:
        return " ".join(self.argv).replace("URL", "U")[:60]


def row(*argv: str, wrong: str, accepted: str) -> CliMistake:
    return CliMistake(argv, wrong, accepted)


CLI_MISTAKES = [
    # curl takes no abbreviation of a long option, nor does this command line.
    row("get", "URL", "--max", "5", wrong="argument --max:", accepted="--max-redirs or --max-time"),
    row("get", "URL", "--max-t", "5", wrong="argument --max-t:", accepted="--max-time?"),
    row("get", "URL", "--hea", "X-A: 1", wrong="argument --hea:", accepted="--header?"),
    row("get", "URL", "--conn", "3", wrong="argument --conn:", accepted="--connect-timeout?"),
    row("get", "URL", "--http2-prior", wrong="argument --http2-prior:",
        accepted="--http2-prior-knowledge?"),
    row("--vers", wrong="argument --vers:", accepted="--version?"),
    row("get", "URL", "--usr", f"ada:{SECRET}", wrong="unrecognized arguments: --usr",
        accepted="usage: python -m trio_retry get"),
    row("get", "URL", "URL", wrong="unrecognized arguments: 1 other argument",
        accepted="usage: python -m trio_retry get"),
    # curl's own options: one line with what to use instead.
    row("get", "URL", "--retry", "3", wrong="argument --retry:", accepted="use --attempts N"),
    row("get", "URL", "-f", wrong="argument -f:", accepted="already exits with 4"),
    row("get", "URL", "-fsSL", wrong="argument -f:", accepted="already exits with 4"),
    row("get", "URL", "--timeout", "5", wrong="argument --timeout:",
        accepted="use -m/--max-time SECONDS"),
    row("get", "URL", "-w", "%{http_code}", wrong="argument -w:", accepted="--explain=json"),
    row("get", "URL", "--limit-rate", "1k", wrong="argument --limit-rate:",
        accepted="a curl option this command does not take; no equivalent"),
    row("post", "URL", "--data-urlencode", "a=b c", wrong="argument --data-urlencode:",
        accepted="give -d the encoded text"),
    row("get", "URL", "-x", "http://p:1", wrong="argument -x:", accepted="use --proxy URL"),
    row("get", "URL", "-b", f"sid={SECRET}", wrong="argument -b:",
        accepted="-H 'Cookie: name=value'"),
    row("get", "URL", "--oauth2-bearer", SECRET, wrong="argument --oauth2-bearer:",
        accepted="-H 'Authorization: Bearer ...'"),
    row("get", "URL", "-A", "curl/8", wrong="argument -A:", accepted="-H 'User-Agent: ...'"),
    row("get", "URL", "-I", wrong="argument -I:", accepted="use the head command"),
    row("get", "URL", "--head", wrong="argument --head:", accepted="use the head command"),
    row("post", "URL", "-F", "a=@f", wrong="argument -F:", accepted="files="),
    # Headers.
    row("get", "URL", "-H", "X-Bad", wrong="no ':' after the name", accepted="'Name: value'"),
    row("get", "URL", "-H", f"Authorization Bearer {SECRET}", wrong="no ':' after the name",
        accepted="did you mean 'Authorization: ...'?"),
    row("get", "URL", "-H", "X Y: v", wrong="a name that is not a token",
        accepted="'Name: value'"),
    row("get", "URL", "-H", "X-A: a\rb", wrong="invalid value for header 'X-A'",
        accepted="are not allowed in header values"),
    row("get", "URL", "-H", wrong="argument -H/--header:", accepted="expected one argument"),
    # URLs.
    row("get", "htp://127.0.0.1/", wrong="scheme 'htp'", accepted="http:// or https://"),
    row("get", "http//127.0.0.1/", wrong="starting 'http//'", accepted="write http://"),
    row("get", "http:/127.0.0.1/", wrong="starting 'http:/'", accepted="write http://"),
    row("get", "http://127.0.0.1:99999/", wrong="malformed URL",
        accepted="a number from 1 to 65535"),
    row("get", "http://", wrong="URL has no host", accepted="http://host[:port]/path"),
    row("get", "", wrong="got ''", accepted="expected a URL"),
    row("get", "http://127.0.0.1/a b", wrong="whitespace", accepted="a space is %20"),
    row("get", f"http://u:{SECRET}@h\uff0fx.example/", wrong="malformed URL",
        accepted="turns into '/', '?', '#', '@' or ':'"),
    row("get", "URL", "--http3", wrong="argument --http3: HTTP/3 needs an https:// URL",
        accepted="got http://"),
    row("GET", "URL", wrong="invalid choice: 'GET'", accepted="commands are lower case: 'get'"),
    row("fetch", "URL", wrong="invalid choice: 'fetch'", accepted="choose from 'demo', 'get'"),
    # curl's order, without a command: the URL, or a header's value, took the command's place
    # (argparse quoted it).
    row(f"http://u:{SECRET}@127.0.0.1/", wrong="invalid choice: a URL (not shown",
        accepted="the command comes first: python -m trio_retry get URL"),
    row("-H", f"Authorization: Bearer {SECRET}", "URL", wrong="a word that is not a command",
        accepted="the command comes first"),
    # Times and counts.
    row("get", "URL", "-m", "0", wrong="got '0'", accepted="a number of seconds above 0"),
    row("get", "URL", "-m", "soon", wrong="got 'soon'", accepted="a number of seconds above 0"),
    row("get", "URL", "--max-time", "nan", wrong="got 'nan'", accepted="seconds above 0"),
    row("get", "URL", "--connect-timeout", "-1", wrong="got '-1'", accepted="seconds above 0"),
    row("get", "URL", "--attempts", "0", wrong="got '0'", accepted="a whole number of at least 1"),
    row("get", "URL", "--attempts", "1.5", wrong="got '1.5'", accepted="a whole number"),
    row("get", "URL", "-L", "--max-redirs", "-5", wrong="got '-5'", accepted="at least 0"),
    # Options of the request.
    row("get", "URL", "-X", "G ET", wrong="got 'G ET'", accepted="a method name such as PURGE"),
    row("get", "URL", "-u", "ada", wrong="no password for user 'ada'", accepted="USER:PASSWORD"),
    row("get", "URL", "--proxy", f"http://u:{SECRET}@", wrong="got no host",
        accepted="http://, https://, socks5:// or socks5h://"),
    row("get", "URL", "--proxy", "socks9://p:1", wrong="argument --proxy",
        accepted="http://, https://, socks5:// or socks5h://"),
    row("post", "URL", "--idempotency-key", "", wrong="an empty string", accepted=KEY),
    row("post", "URL", "--idempotency-key", f"{SECRET} x", wrong="a space at position",
        accepted=KEY),
    row("post", "URL", "--json", '{"a": NaN}', wrong="NaN is not JSON",
        accepted="no NaN or infinities"),
    row("post", "URL", "--json", "{}", "-d", "x", wrong="argument --json",
        accepted="not allowed with -d"),
    row("post", "URL", "-T", "-", "-d", "x", wrong="argument -T/--upload-file",
        accepted="not allowed with -d"),
    row("head", "URL", "-d", "x", wrong="argument -d/--data",
        accepted="a HEAD request has no body"),
    row("get", "URL", "--explain=yaml", wrong="invalid choice: 'yaml'",
        accepted="choose from 'table', 'json'"),
    row("get", "URL", "--key", "k.pem", wrong="'k.pem' given without --cert",
        accepted="--cert"),
]  # fmt: skip


def test_the_table_holds_a_hundred_mistakes_with_the_api() -> None:
    from tests.client.test_user_mistakes import MISTAKES

    assert len({m.id for m in CLI_MISTAKES}) == len(CLI_MISTAKES)
    assert len(MISTAKES) + len(CLI_MISTAKES) >= 100


@pytest.mark.parametrize("mistake", CLI_MISTAKES, ids=[m.id for m in CLI_MISTAKES])
async def test_a_command_line_mistake_is_a_usage_error_before_anything_is_sent(
    nursery: trio.Nursery, mistake: CliMistake
) -> None:
    server = FaultServer(http2=False)
    url = await nursery.start(server.serve)
    argv = [url + "/p" if arg == "URL" else arg for arg in mistake.argv]
    out, err = io.StringIO(), io.StringIO()
    with trio.fail_after(20):  # none hangs (a whole process starts in ~0.2 s)
        code = await trio.to_thread.run_sync(run, argv, out, err)
    await trio.testing.wait_all_tasks_blocked(0.01)
    text = err.getvalue()
    assert code == 2, text  # a usage error: none accepted
    assert "Traceback" not in text
    last = text.splitlines()[-1]
    assert last.startswith("python -m trio_retry"), text  # one line says what was wrong
    assert mistake.wrong in last, text
    assert mistake.accepted in text, text  # and what is accepted (or the usage)
    assert SECRET not in text + out.getvalue()
    assert (server.connections_accepted, server.requests) == (0, [])  # nothing was sent
