"""The command line's arguments: a curl-like option set, parsed into a frozen :class:`Options`.

Every mistake becomes a :class:`UsageError` (exit status 2) whose message is one line naming
the option and the value; an unknown option or a missing URL also carries the subcommand's
usage. Nothing here does I/O: files named by options are opened later, by the command, which
names the file when that fails.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from .curl import curl_only

__all__ = ["PROG", "Options", "UsageError", "parse"]

PROG = "python -m trio_retry"
METHODS = ("get", "post", "put", "delete", "patch", "head", "options")
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: ``http//``, ``http:/``, ``https//``: a scheme missing its ":" or a "/" (no "://" follows).
_BROKEN_SCHEME = re.compile(r"https?(?::/|//)", re.IGNORECASE)


class UsageError(Exception):
    """Bad usage: ``message`` is one line; ``usage`` the subcommand's usage, when it helps."""

    def __init__(self, message: str, usage: str | None = None) -> None:
        super().__init__(message)
        self.usage = usage


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    """The parsed command line of one request (see docs/cli.md for each option)."""

    command: str
    method: str
    url: str
    headers: tuple[tuple[str, str], ...] = ()
    data: tuple[tuple[str, str], ...] = ()  # (kind, value) in order: data, data-raw, data-binary
    json_body: str | None = None
    upload_file: str | None = None
    output: str | None = None
    include: bool = False
    location: bool = False
    max_redirs: int = 20
    insecure: bool = False
    user: str | None = None
    proxy: str | None = None
    max_time: float | None = None
    connect_timeout: float | None = None
    attempts: int = 3
    http2: bool = False
    http2_prior_knowledge: bool = False
    http3: bool = False
    early_data: bool = False
    state: str | None = None
    cacert: str | None = None
    cert: str | None = None
    key: str | None = None
    idempotency_key: str | bool | None = None
    continue_at: bool = False  # -C -: continue -o FILE where it stopped
    explain: str | None = None  # None, "table" or "json"
    verbose: bool = False  # -v: --explain, and each response head on stderr
    silent: bool = False
    show_error: bool = False


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors raised as :class:`UsageError` instead of printed and exited."""

    def error(self, message: str) -> NoReturn:
        wants_usage = message.startswith(
            ("unrecognized arguments", "the following arguments are required", "argument COMMAND")
        )
        raise UsageError(
            f"{self.prog}: error: {message}", self.format_usage() if wants_usage else None
        )


def _whole(minimum: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(
                f"expected a whole number of at least {minimum}, got {text!r}"
            )
        return value

    return parse


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {text!r}")
    return value


#: Header names a malformed ``-H`` may be told it meant (``-H 'Authorization Bearer ...'``).
_KNOWN_HEADERS = frozenset(
    ("Authorization", "Proxy-Authorization", "Cookie", "Accept", "Content-Type", "User-Agent")
)


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not _TOKEN.fullmatch(name.strip()):
        # Never the text: it is often a credential. Only a well-known name is echoed.
        first = text.split(maxsplit=1)[0] if text.split() else ""
        known = next((h for h in _KNOWN_HEADERS if h.lower() == first.lower()), None)
        hint = f"; did you mean '{known}: ...'?" if known else ""
        what = "no ':' after the name" if not sep else "a name that is not a token"
        raise argparse.ArgumentTypeError(
            f"expected 'Name: value', got {what} (the header, {len(text)} characters, is not "
            f"shown){hint}"
        )
    return name.strip(), value.strip()


def _continue_at(text: str) -> bool:
    if text != "-":
        raise argparse.ArgumentTypeError(
            f"only '-' is accepted (continue at the file's size, checked with If-Range), got "
            f"{text!r}: an offset given by hand could splice two versions of the file"
        )
    return True


def _method(text: str) -> str:
    if not _TOKEN.fullmatch(text):
        raise argparse.ArgumentTypeError(f"expected a method name such as PURGE, got {text!r}")
    return text.upper()


class _DataAction(argparse.Action):
    """Collects -d, --data-raw and --data-binary in command-line order, as curl joins them."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        parts = list(getattr(namespace, self.dest) or [])
        parts.append((self.const, values))
        setattr(namespace, self.dest, parts)


_EXAMPLES = {
    "get": [
        "get example.org/users/1                  # http:// is assumed, as curl does",
        "get https://example.org/big.iso -o big.iso   # progress bar on a terminal",
        "get https://example.org/ -i -L --explain  # headers, redirects, the attempt trail",
        "get https://10.0.0.5/ -k                  # no TLS verification (warned)",
        "get https://api.example/ -u ada:secret --max-time 5",
    ],
    "post": [
        "post https://api.example/payments --json '{\"amount\": 10}' --idempotency-key",
        "post https://api.example/upload --data-binary @photo.jpg",
        "post https://api.example/form -d name=ada -d lang=en   # name=ada&lang=en",
        "post https://api.example/logs -d @- < events.txt        # read stdin",
        "post https://api.example/pay -d x --explain=json        # the trail for scripts",
    ],
}


def _epilog(command: str) -> str:
    examples = _EXAMPLES.get(command) or [
        f"{command} https://api.example/items/7 --explain",
        f"{command} https://api.example/items/7 -H 'X-Trace: abc' --max-time 2",
    ]
    lines = "\n".join(f"  {PROG} {line}" for line in examples)
    return (
        f"examples:\n{lines}\n\nexit codes: 0 ok, 1 failed, 2 usage, 3 ambiguous (may have "
        "executed: reconcile), 4 HTTP status >= 400"
    )


def _add_request_options(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("url", help="the URL; http:// is assumed when it has no scheme")
    add = cmd.add_argument
    body = cmd.add_argument_group("request body (curl's meanings)")
    body.add_argument(
        "-d",
        "--data",
        dest="data",
        action=_DataAction,
        const="data",
        metavar="DATA",
        help="body text; @FILE or @- (stdin) with CR/LF "
        "removed; repeated -d are joined with '&'; form Content-Type",
    )
    body.add_argument(
        "--data-raw",
        dest="data",
        action=_DataAction,
        const="data-raw",
        metavar="DATA",
        help="like -d, but @ is not special",
    )
    body.add_argument(
        "--data-binary",
        dest="data",
        action=_DataAction,
        const="data-binary",
        metavar="DATA",
        help="like -d, but @FILE is sent byte for byte",
    )
    body.add_argument(
        "-j",
        "--json",
        dest="json_body",
        metavar="JSON",
        help="body as JSON text (or @FILE, @-); sets Content-Type and Accept",
    )
    body.add_argument(
        "-T",
        "--upload-file",
        metavar="FILE",
        help="send FILE as the body, streamed (- reads stdin, sent once)",
    )
    add(
        "-H",
        "--header",
        action="append",
        default=[],
        type=_header,
        metavar="'NAME: VALUE'",
        help="a request header (repeatable)",
    )
    add(
        "-X",
        "--request",
        dest="method",
        type=_method,
        metavar="METHOD",
        help="send this method instead of the subcommand's",
    )
    add("-o", "--output", metavar="FILE", help="write the body to FILE (- for stdout)")
    add(
        "-C",
        "--continue-at",
        dest="continue_at",
        type=_continue_at,
        default=False,
        metavar="-",
        help="continue -o FILE where it stopped, if the server's file is the same (If-Range)",
    )
    add("-i", "--include", action="store_true", help="write the response head before the body")
    add("-L", "--location", action="store_true", help="follow redirects (each hop in --explain)")
    add("--max-redirs", type=_whole(0), default=20, metavar="N", help="with -L (default 20)")
    add("-u", "--user", metavar="USER:PASSWORD", help="HTTP Basic auth (never shown)")
    add("-k", "--insecure", action="store_true", help="do not verify TLS certificates (warned)")
    add("--cacert", metavar="PEM", help="trust the CA certificates in this PEM file")
    add("--cert", metavar="PEM", help="client certificate (PEM; with its key unless --key)")
    add("--key", metavar="PEM", help="the client certificate's private key (PEM)")
    add("--proxy", metavar="URL", help="proxy (http://, https://); default: HTTP(S)_PROXY")
    add(
        "-m",
        "--max-time",
        "--deadline",
        dest="max_time",
        type=_seconds,
        metavar="SECONDS",
        help="deadline for the whole call, all attempts, backoffs and body included",
    )
    add("--connect-timeout", type=_seconds, metavar="SECONDS", help="per connection attempt")
    add("--attempts", type=_whole(1), default=3, metavar="N", help="max attempts (default 3)")
    add(
        "--idempotency-key",
        nargs="?",
        const=True,
        default=None,
        metavar="KEY",
        help="send an Idempotency-Key (a UUID4 when no KEY is given): makes a POST retryable",
    )
    add(
        "--http1.1",
        dest="http2",
        action="store_false",
        default=False,
        help="HTTP/1.1 only (the default)",
    )
    add("--http2", action="store_true", help="offer HTTP/2 by ALPN on https:// URLs")
    add("--http2-prior-knowledge", action="store_true", help="HTTP/2 over cleartext (h2c)")
    add(
        "--http3",
        action="store_true",
        help="HTTP/3 (QUIC) on https:// URLs, over TCP if QUIC fails (extra http3)",
    )
    add(
        "--early-data",
        action="store_true",
        help="with --http3, a safe request (GET, HEAD, OPTIONS) goes in 0-RTT when resuming",
    )
    add(
        "--state",
        metavar="FILE",
        help="keep QUIC session tickets, tokens and Alt-Svc answers in FILE across runs",
    )
    add(
        "--compressed",
        action="store_true",
        help="accepted for curl compatibility: gzip and deflate are always asked for and decoded",
    )
    add(
        "--explain",
        action="store_true",
        help="print the attempt trail to stderr; --explain=json prints it as JSON",
    )
    add("--explain-format", choices=("table", "json"), default="table", help=argparse.SUPPRESS)
    add(
        "-v",
        "--verbose",
        action="store_true",
        help="--explain, and each response head on stderr as '< ' lines (curl's -v)",
    )
    add("-s", "--silent", action="store_true", help="no progress bar, no error messages")
    add("-S", "--show-error", action="store_true", help="with -s, still print errors")


def build_parser(
    command: str | None = None,
) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The top-level parser and the parser of each subcommand.

    With ``command`` (the one on the command line), only that subcommand gets its ~30 request
    options; the others keep their name and help line, all that the top-level usage and help
    show of them. Building every subcommand's options was most of the time ``--help`` (and
    every request) spent in argparse, for parsers never used. ``None``: all of them.
    """
    parser = _Parser(
        prog=PROG,
        allow_abbrev=False,  # curl takes no abbreviation: --max is not --max-time
        description="A Trio HTTP client that knows whether the server did it.",
        epilog="exit codes: 0 ok, 1 failed, 2 usage, 3 ambiguous, 4 HTTP status >= 400\n"
        f"'{PROG} COMMAND --help' shows each command's options and examples.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="store_true", help="print the versions and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser("demo", help="walk through the failures that matter, on loopback")
    demo.add_argument("--quick", action="store_true", help="skip the case that waits 1 s")
    commands: dict[str, argparse.ArgumentParser] = {"demo": demo}
    for name in METHODS:
        cmd = sub.add_parser(
            name,
            allow_abbrev=False,
            help=f"send {_article(name)} {name.upper()} request",
            description=f"Send {_article(name)} {name.upper()} request; the body goes to stdout"
            " (or -o FILE) as bytes, the trail and errors to stderr.",
            epilog=_epilog(name),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        if command is None or command == name:
            _add_request_options(cmd)
        commands[name] = cmd
    return parser, commands


def _article(method: str) -> str:
    """ "a" or "an" before the method's name, as it is read: "an OPTIONS request"."""
    return "an" if method[0] in "aeio" else "a"


def _explain_forms(argv: Sequence[str]) -> list[str]:
    """``--explain=json`` -> ``--explain --explain-format json`` (argparse alone cannot tell
    ``--explain=json`` from ``--explain URL``)."""
    out: list[str] = []
    for arg in argv:
        if arg.startswith("--explain="):
            out += ["--explain", "--explain-format", arg.partition("=")[2]]
        else:
            out.append(arg)
    return out


def _takes_value(parser: argparse.ArgumentParser) -> frozenset[str]:
    """The option strings of ``parser`` that take a value (``-o``, ``--header``...)."""
    return frozenset(
        name for action in parser._actions if action.nargs != 0 for name in action.option_strings
    )


def _flags(parser: argparse.ArgumentParser) -> frozenset[str]:
    """The option strings of ``parser`` that take no value (``-i``, ``--http2``...)."""
    return frozenset(
        name for action in parser._actions if action.nargs == 0 for name in action.option_strings
    )


def _unrecognized(extra: Sequence[str], options: frozenset[str]) -> str:
    """argparse's "unrecognized arguments", saying what each long option may have meant, and
    showing option names only: the other words may be a mistyped option's value (``--usr
    ada:secret``), which argparse repeated, or a URL with its password.

    An abbreviation (``--max``) is refused as curl refuses it (the parser takes none), with
    the options it may have meant, in one line."""
    for word in extra:
        name = word.partition("=")[0]
        if name.startswith("--") and len(name) > 2:
            meant = sorted(option for option in options if option.startswith(name))
            if meant:
                return (
                    f"argument {name}: options are written in full, as curl takes them "
                    f"(no abbreviation); did you mean {' or '.join(meant)}?"
                )
    names = [word.partition("=")[0] for word in extra if word.startswith("-")]
    others = len(extra) - len(names)
    if others:
        plural = "s" if others != 1 else ""
        names.append(f"{others} other argument{plural} (not shown: it may hold a secret)")
    return f"unrecognized arguments: {', '.join(names)}"


def _word(word: str) -> str:
    """A word given where the command goes, as an error shows it: a short word as it is
    (``'fetch'``, ``'GET'``), anything else described, never quoted (a URL, a header)."""
    if re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]{0,19}", word):
        lower = f"; commands are lower case: '{word.lower()}'" if word.lower() in METHODS else ""
        return f"{word!r}{lower}"
    first = f"the command comes first: {PROG} get URL [options]"
    if "://" in word:
        return f"a URL (not shown: it may hold a password); {first}"
    return f"a word that is not a command (not shown: it may hold a secret); {first}"


def parse(argv: Sequence[str]) -> Options | argparse.Namespace:
    """An :class:`Options` for a request; the raw namespace for ``demo`` and ``--version``.

    Raises :class:`UsageError`; ``--help`` exits (``SystemExit(0)``) after printing.
    """
    # The first word that is not an option names the command (the top level's own options,
    # -h and --version, take no value).
    command = next((arg for arg in argv if not arg.startswith("-")), "")
    parser, commands = build_parser(command if command in METHODS else "")
    where = commands.get(command, parser)
    curl_option = curl_only(argv, _takes_value(where))
    if curl_option is not None:
        # One line with what to use instead, not argparse's usage and "unrecognized" (or, for
        # curl's --head, a complaint about --header, of which argparse takes it for a prefix).
        where.error(curl_option)
    if command and command not in (*METHODS, "demo"):
        # argparse would quote the word, which is often the URL (with its password) or a
        # header's value (-H 'Authorization: ...' written before any command, as for curl).
        choices = ", ".join(repr(name) for name in ("demo", *METHODS))
        parser.error(f"argument COMMAND: invalid choice: {_word(command)} (choose from {choices})")
    args, extra = parser.parse_known_args(_explain_forms(argv))
    if extra:
        where = commands.get(args.command or "", parser)
        where.error(_unrecognized(extra, _takes_value(where) | _flags(where)))
    if args.version or args.command == "demo":
        return args
    if args.command is None:
        parser.error("the following arguments are required: COMMAND")
    url: str = args.url
    if not url:
        commands[args.command].error("argument url: expected a URL, got ''")
    if "://" not in url:  # curl's default scheme
        broken = _BROKEN_SCHEME.match(url)
        if broken:  # "http//host" would go to a host named "http" (curl's way): refused
            commands[args.command].error(
                f"argument url: a URL starting {broken.group()!r} (its scheme lacks ':' or "
                "'/'); write http:// or https://"
            )
        url = "http://" + url
    if args.http3 and url.partition("://")[0].lower() != "https":
        # HTTP/3 runs over QUIC, which is always TLS: an http:// URL would silently be sent
        # over HTTP/1.1, which is not what --http3 asked for. (The scheme alone is shown: the
        # URL may hold a password.)
        commands[args.command].error(
            f"argument --http3: HTTP/3 needs an https:// URL, got {url.partition('://')[0]}://"
        )
    if args.early_data and not args.http3:
        # Early data exists in HTTP/3 only (SPEC §16): without it the option would do nothing.
        commands[args.command].error("argument --early-data: needs --http3")
    if args.continue_at and (args.output is None or args.output == "-"):
        commands[args.command].error(
            "argument -C/--continue-at: continues a file: give -o FILE (the partial download)"
        )
    if args.continue_at and (args.method or args.command.upper()) != "GET":
        commands[args.command].error("argument -C/--continue-at: ranges are for GET only")
    if args.json_body is not None and (args.data or args.upload_file):
        commands[args.command].error("argument --json: not allowed with -d or -T")
    if args.data and args.upload_file:
        commands[args.command].error("argument -T/--upload-file: not allowed with -d")
    method = args.method or args.command.upper()
    if method == "HEAD" and (args.data or args.json_body is not None or args.upload_file):
        # A HEAD request's content has no meaning (RFC 9110 §9.3.2), and curl refuses -I -d.
        option = (
            "-d/--data"
            if args.data
            else "-j/--json"
            if args.json_body is not None
            else "-T/--upload-file"
        )
        commands[args.command].error(f"argument {option}: a HEAD request has no body")
    return Options(
        command=args.command,
        method=method,
        url=url,
        headers=tuple(args.header),
        data=tuple(args.data or ()),
        json_body=args.json_body,
        upload_file=args.upload_file,
        output=args.output,
        include=args.include or method == "HEAD",  # curl -I shows the head
        location=args.location,
        max_redirs=args.max_redirs,
        insecure=args.insecure,
        user=args.user,
        proxy=args.proxy,
        max_time=args.max_time,
        connect_timeout=args.connect_timeout,
        attempts=args.attempts,
        http2=args.http2,
        http2_prior_knowledge=args.http2_prior_knowledge,
        http3=args.http3,
        early_data=args.early_data,
        state=args.state,
        cacert=args.cacert,
        cert=args.cert,
        key=args.key,
        idempotency_key=args.idempotency_key,
        continue_at=args.continue_at,
        explain=args.explain_format if args.explain or args.verbose else None,
        verbose=args.verbose,
        silent=args.silent,
        show_error=args.show_error,
    )
