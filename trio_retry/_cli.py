"""The command line: ``demo`` and ``get|post|put|delete URL`` with ``--explain``.

Exit codes (documented in docs/cli.md):

- 0: a response with status below 400;
- 1: the request failed (``RequestFailed``: the server did not run it, or it is known to
  have failed);
- 2: bad usage (argparse);
- 3: ambiguous (``HttpAmbiguousExecutionError``: the server may have run it);
- 4: a response with status 400 or above.
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
from collections.abc import Sequence
from typing import Any, TextIO

import trio

from ._client import Client
from ._errors import HttpAmbiguousExecutionError, RequestFailed, TrioRetryError
from ._models import Response
from ._trail import attempt_table as attempt_table

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_AMBIGUOUS, EXIT_HTTP_ERROR = 0, 1, 2, 3, 4


def _parse_header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"headers are 'Name: value', got {text!r}")
    return name.strip(), value.strip()


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m trio_retry",
        description="A Trio HTTP client that knows whether the server did it.",
        epilog="exit codes: 0 ok, 1 failed, 2 usage, 3 ambiguous, 4 HTTP status >= 400",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="walk through the failures that matter, on loopback")
    demo.add_argument("--quick", action="store_true", help="skip the slower cases")
    for method in ("get", "post", "put", "delete", "patch", "head"):
        cmd = sub.add_parser(method, help=f"send a {method.upper()} request")
        cmd.add_argument("url")
        body = cmd.add_mutually_exclusive_group()
        body.add_argument("--data", "-d", help="request body (text); @FILE reads a file")
        body.add_argument("--json", "-j", dest="json_body", help="request body as JSON text")
        cmd.add_argument(
            "--header", "-H", action="append", default=[], type=_parse_header,
            help="'Name: value' (repeatable)",
        )  # fmt: skip
        cmd.add_argument("--deadline", type=float, help="seconds for the whole call")
        cmd.add_argument("--attempts", type=int, default=3, help="max attempts (default 3)")
        cmd.add_argument("--http2", action="store_true", help="prefer HTTP/2 (TLS ALPN)")
        cmd.add_argument(
            "--http2-prior-knowledge", action="store_true", help="HTTP/2 over cleartext (h2c)"
        )
        cmd.add_argument("--cacert", help="PEM file of CA certificates to trust")
        cmd.add_argument(
            "--idempotency-key", nargs="?", const=True, default=None,
            help="send an Idempotency-Key (generated when no value is given)",
        )  # fmt: skip
        cmd.add_argument("--explain", action="store_true", help="print the attempt trail to stderr")
    return parser


async def _request(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ._core.policy import RetryPolicy

    context = ssl.create_default_context(cafile=args.cacert) if args.cacert else None
    content: Any = None
    if args.data is not None:
        if args.data.startswith("@"):
            content = await trio.Path(args.data[1:]).read_bytes()
        else:
            content = args.data
    json_body = json.loads(args.json_body) if args.json_body is not None else None
    key = args.idempotency_key
    async with Client(
        retry=RetryPolicy(max_attempts=args.attempts),
        ssl_context=context,
        http2=args.http2,
        http2_prior_knowledge=args.http2_prior_knowledge,
    ) as client:
        try:
            response = await client.request(
                args.command.upper(),
                args.url,
                headers=args.header,
                content=content,
                json=json_body,
                deadline=args.deadline,
                idempotency_key=key,
            )
        except HttpAmbiguousExecutionError as exc:
            if args.explain:
                print(attempt_table(exc.attempts), file=err)
            print(f"AMBIGUOUS: {exc}", file=err)
            return EXIT_AMBIGUOUS
        except RequestFailed as exc:
            if args.explain:
                print(attempt_table(exc.attempts), file=err)
            print(f"FAILED ({type(exc).__name__}, {exc.evidence}): {exc}", file=err)
            return EXIT_FAILED
    if args.explain:
        _explain(response, err)
    out.write(response.text)
    if response.text and not response.text.endswith("\n"):
        out.write("\n")
    return EXIT_OK if response.status < 400 else EXIT_HTTP_ERROR


def _explain(response: Response, err: TextIO) -> None:
    print(attempt_table(response.attempts), file=err)
    print(
        f"{response.http_version} {response.status} {response.reason}".rstrip()
        + (f"  [{response.retry_decision}]" if response.retry_decision else ""),
        file=err,
    )


def run(argv: Sequence[str], out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run the command line; return the exit code."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        args = _build_parser().parse_args(list(argv))
    except SystemExit as exc:  # argparse already printed the usage error (or --help)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if args.command == "demo":
        from ._demo import run_demo

        return trio.run(run_demo, out, args.quick)
    if args.json_body is not None:
        try:
            json.loads(args.json_body)
        except ValueError as exc:
            print(f"--json is not valid JSON: {exc}", file=err)
            return EXIT_USAGE
    try:
        return trio.run(_request, args, out, err)
    except TrioRetryError as exc:  # e.g. InvalidRequest raised before any attempt
        print(f"FAILED: {exc}", file=err)
        return EXIT_FAILED
    except OSError as exc:
        print(f"error: {exc}", file=err)
        return EXIT_USAGE


__all__ = ["attempt_table", "run"]
