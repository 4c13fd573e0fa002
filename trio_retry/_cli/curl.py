"""curl's options that the command line does not take, each with what to use instead.

One job: when a command line holds one of curl's own options (``--retry 3``, ``-fsSL``,
``-w '%{http_code}'``), the error is one line naming it and saying what does the same here, or
that nothing does. Without this, argparse answers with the whole usage and "unrecognized
arguments", or worse, takes ``--head`` for an abbreviation of ``--header`` and complains about
the header.

The command line is scanned before argparse sees it, by argparse's own rule for what is an
option: a token that starts with ``-`` and holds no space (argparse takes no other token
starting with ``-`` as a value, except a negative number, ``--opt=value`` and an attached
short value ``-ovalue``), so values are never mistaken for options. Short options written
together (``-fsSL``) are read one letter at a time, up to the first of ours that takes a value
(the rest of the cluster is that value). Digits are left out (curl's ``-0``..``-6`` select
protocol versions), so a negative number given as a value is never taken for one.

The hints never repeat what the option was given: its value may be a secret (``--oauth2-bearer``,
``-b`` cookies).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

__all__ = ["CURL_ONLY", "curl_only"]

_NO_RETRY = (
    "retries are on by default (3 attempts) where the evidence and idempotency allow them; "
    "set the count with --attempts N and the time with --max-time SECONDS"
)

#: (curl's names for the option, what to use here). Each name appears once.
CURL_ONLY: tuple[tuple[tuple[str, ...], str], ...] = (
    (
        ("--retry",),
        "use --attempts N, which counts the first try too (curl's --retry 2 is --attempts 3); "
        "retries are on by default, only where they are safe",
    ),
    (("--retry-max-time",), f"no equivalent: {_NO_RETRY}"),
    (("--retry-delay",), f"no equivalent (the backoff is the library's, Retry-After honoured): "
     f"{_NO_RETRY}"),
    (
        ("--retry-all-errors", "--retry-connrefused"),
        "no equivalent: a request that may have run is repeated only when it is idempotent "
        "(--idempotency-key makes a POST so); a refused connection is always retried",
    ),
    (
        ("-f", "--fail", "--fail-with-body"),
        "not needed: a status of 400 or above already exits with 4 (the body is still written; "
        "-o /dev/null drops it)",
    ),
    (("--fail-early",), "not needed: one URL per command"),
    (
        ("--timeout",),
        "use -m/--max-time SECONDS (the whole call) or --connect-timeout SECONDS",
    ),
    (("--max-filesize",), "no equivalent"),
    (
        ("-w", "--write-out"),
        "no equivalent; --explain=json writes the status, the timings and every attempt to "
        "stderr as JSON, and -i writes the response head before the body",
    ),
    (("--limit-rate", "-Y", "--speed-limit", "-y", "--speed-time"), "no equivalent"),
    (
        ("--data-urlencode",),
        "no equivalent: give -d the encoded text (name=a%20b), which is sent as it is",
    ),
    (("--data-ascii",), "use -d/--data, which is the same option"),
    (
        ("-F", "--form", "--form-string"),
        "no equivalent: the command line sends no multipart form (the library's files= does)",
    ),
    (("-I", "--head"), "use the head command: python -m trio_retry head URL"),
    (("-G", "--get"), "use the get command with the query in the URL"),
    (("-A", "--user-agent"), "use -H 'User-Agent: ...'"),
    (("-e", "--referer"), "use -H 'Referer: ...'"),
    (("-b", "--cookie"), "use -H 'Cookie: name=value'"),
    # curl's -j (--junk-session-cookies) is left out: -j is our --json.
    (("-c", "--cookie-jar", "--junk-session-cookies"), "no equivalent: no cookie jar"),
    (("-r", "--range"), "use -H 'Range: bytes=START-END'"),
    (("--oauth2-bearer",), "use -H 'Authorization: Bearer ...' (never shown)"),
    (
        ("--digest", "--ntlm", "--negotiate", "--anyauth", "--basic"),
        "no equivalent: -u/--user is HTTP Basic, the only scheme the command line sends",
    ),
    (("-n", "--netrc", "--netrc-file", "--netrc-optional"), "no equivalent: use -u/--user"),
    (("-O", "--remote-name", "-J", "--remote-header-name"), "use -o FILE"),
    (("--create-dirs",), "no equivalent: -o needs an existing folder"),
    (("-x",), "use --proxy URL"),
    (("--noproxy",), "use the NO_PROXY environment variable"),
    (("--capath",), "use the SSL_CERT_DIR environment variable, or --cacert PEM"),
    (("-E",), "use --cert PEM (and --key PEM)"),
    (("--pass", "--cert-type", "--key-type"), "no equivalent: --cert and --key take PEM files "
     "with an unencrypted key"),
    (
        ("--tlsv1", "--tlsv1.0", "--tlsv1.1", "--tlsv1.2", "--tlsv1.3", "--tls-max", "--ciphers"),
        "no equivalent: TLS 1.2 or later, with the system's defaults",
    ),
    (("--http1.0", "--http0.9"), "no equivalent: HTTP/1.1 is the oldest version sent"),
    (("--http3-only",), "use --http3, which falls back to TCP when QUIC fails"),
    (("--ipv4", "--ipv6"), "no equivalent: every address of the host is tried"),
    (("--resolve", "--connect-to"), "no equivalent: put the address in the URL and set -H "
     "'Host: ...'"),
    (("--interface", "--local-port", "--dns-servers"), "no equivalent"),
    (("-N", "--no-buffer"), "not needed: the body is written as it arrives"),
    (("-#", "--progress-bar"), "not needed: a bar is drawn when stderr is a terminal"),
    (("-D", "--dump-header"), "use -i (the head before the body) or -v (the head on stderr)"),
    (("--trace", "--trace-ascii", "--trace-time"), "use -v or --explain"),
    (("-Z", "--parallel", "--next"), "no equivalent: one request per command"),
    (("-K", "--config"), "no equivalent: options go on the command line"),
    (("-q", "--disable"), "not needed: no .curlrc is read"),
    (("--url",), "give the URL as the argument after the command"),
    (("-V",), "use --version"),
    (("--location-trusted",), "no equivalent: credentials never follow a redirect to another "
     "origin"),
    (("--path-as-is",), "no equivalent: the path is sent as given, dot segments removed"),
    (("--raw", "--tr-encoding"), "no equivalent: the body is decoded only for its "
     "Content-Encoding"),
    (("--expect100-timeout",), "no equivalent: no Expect: 100-continue is sent"),
    (("--keepalive-time", "--no-keepalive"), "no equivalent"),
)  # fmt: skip

_HINTS = {name: hint for names, hint in CURL_ONLY for name in names}
assert len(_HINTS) == sum(len(names) for names, _ in CURL_ONLY), "a name appears twice"


def curl_only(argv: Sequence[str], takes_value: Collection[str]) -> str | None:
    """The error text for the first of curl's options in ``argv`` that we do not take, or
    ``None`` when there is none. The text names the option as it was typed, never its value.

    ``takes_value``: our own option strings that take a value (``-o``, ``--header``...): in a
    cluster of short options, the letters after one of them are its value.
    """
    for arg in argv:
        if arg == "--":
            break  # what follows is not options
        if " " in arg:
            continue  # argparse takes it as a value (-d "-f x"), whatever it starts with
        if arg.startswith("--"):
            option: str | None = arg.partition("=")[0]
        elif arg.startswith("-") and len(arg) > 1:
            option = _in_cluster(arg, takes_value)
        else:
            continue
        if option in _HINTS:
            return f"argument {option}: a curl option this command does not take; {_HINTS[option]}"
    return None


def _in_cluster(arg: str, takes_value: Collection[str]) -> str | None:
    """curl's option among the short options written together in ``arg`` (``-fsSL``)."""
    for letter in arg[1:]:
        option = "-" + letter
        if option in _HINTS:
            return option
        if option in takes_value or not (letter.isalpha() or letter == "#"):
            return None  # the rest is a value (or not options at all: "-1", "-=")
    return None
