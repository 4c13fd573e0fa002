"""The command line: ``demo``, and ``get|post|put|delete|patch|head|options URL`` with curl's
options and ``--explain``.

Exit codes (documented in docs/cli.md):

- 0: a response with status below 400;
- 1: the request failed (``RequestFailed``: the server did not run it, or it is known to
  have failed), or the output could not be written;
- 2: bad usage: an option, a value, a URL or a file named by an option (nothing was sent);
- 3: ambiguous (``HttpAmbiguousExecutionError``: the server may have run it);
- 4: a response with status 400 or above.

Only the public API of :mod:`trio_retry` is used, as any program would use it: one
:class:`Client` and one ``client.stream(...)`` call whose body is written as it arrives.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TextIO
from urllib.parse import unquote, urlsplit, urlunsplit

import trio

from .. import (
    URL,
    BasicAuth,
    Client,
    HttpAmbiguousExecutionError,
    InvalidRequest,
    RequestFailed,
    Response,
    RetryPolicy,
    StageTimeouts,
    TooManyRedirects,
    TrioRetryError,
    Upstream,
)
from .._call.client_options import DEFAULT_STAGE_TIMEOUTS
from .._core.replay import Body
from .._models import shown_url
from .._trail import Hop, attempt_table, execution_line, trail_json
from .args import PROG, Options, UsageError, parse
from .output import Sink, Streams, file_body, response_head, stdin_body
from .progress import ProgressBar
from .resume import Continued, forget, plan, reason, record, verdict

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_AMBIGUOUS, EXIT_HTTP_ERROR = 0, 1, 2, 3, 4
EXIT_INTERRUPTED = 130
INSECURE_WARNING = (
    "warning: -k/--insecure: the server's TLS certificate is not verified; anyone on the path "
    "can read or change this exchange"
)

__all__ = ["attempt_table", "run"]


@dataclass(slots=True, kw_only=True)
class _Prepared:
    """Everything the call needs, built (and checked) before anything is sent."""

    url: str
    headers: list[tuple[str, str]]
    content: Body | None = None
    auth: BasicAuth | None = None
    ssl_context: ssl.SSLContext | None = None
    proxy: str | None = None
    upload: list[ProgressBar] = field(default_factory=list)  # the upload bar, once drawn
    continued: Continued | None = None  # -C -: the part already in -o FILE


def _usage(opts: Options, option: str, message: str) -> UsageError:
    return UsageError(f"{PROG} {opts.command}: error: argument {option}: {message}")


def _read(opts: Options, option: str, path: str) -> bytes:
    """The bytes of ``path`` (``-`` is stdin); an OSError becomes a UsageError naming it."""
    if path == "-":
        return sys.stdin.buffer.read()
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError as exc:
        raise _usage(opts, option, f"cannot read {path!r}: {exc.strerror or exc}") from None


def _url_and_auth(opts: Options) -> tuple[str, BasicAuth | None]:
    """The URL without credentials, and the Basic credentials of ``-u`` (or of the URL's
    ``user:password@``, as curl takes them) -- so neither can appear in a trail or error."""
    url = opts.url
    user: str | None = None
    try:
        parts = urlsplit(url)
        if parts.username is not None or parts.password is not None:
            user = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
            url = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    except ValueError:
        pass  # URL() below reports it
    try:
        URL(url)
    except InvalidRequest as exc:
        raise UsageError(f"{PROG} {opts.command}: error: argument url: {exc}") from None
    if opts.user is not None:
        user = opts.user
    if user is None:
        return url, None
    name, sep, password = user.partition(":")
    if not sep:
        if not sys.stdin.isatty():
            raise _usage(opts, "-u/--user", f"no password for user {name!r}: give USER:PASSWORD")
        import getpass  # here: only a prompt needs it (termios), not every start

        password = getpass.getpass(f"password for user {name!r}: ")
    return url, BasicAuth(name, password)


def _tls(opts: Options, streams: Streams) -> ssl.SSLContext | None:
    """The TLS context of ``-k``, ``--cacert`` and ``--cert``/``--key`` (None: the client's
    default, which honours SSL_CERT_FILE and SSL_CERT_DIR)."""
    context: ssl.SSLContext | None = None
    if opts.insecure:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        if not opts.silent:
            print(INSECURE_WARNING, file=streams.err)
    elif opts.cacert is not None:
        try:
            context = ssl.create_default_context(cafile=opts.cacert)
        except ssl.SSLError as exc:  # an OSError too: caught first
            raise _usage(
                opts, "--cacert", f"{opts.cacert!r} holds no PEM certificate ({exc.reason})"
            ) from None
        except OSError as exc:
            raise _usage(
                opts, "--cacert", f"cannot read {opts.cacert!r}: {exc.strerror or exc}"
            ) from None
    if opts.cert is not None:
        if context is None:
            context = ssl.create_default_context()
        try:
            context.load_cert_chain(opts.cert, opts.key)
        except ssl.SSLError as exc:  # an OSError too: caught first
            raise _usage(
                opts, "--cert", f"{opts.cert!r} is not a PEM certificate and key ({exc.reason})"
            ) from None
        except OSError as exc:
            shown = opts.cert if opts.key is None else f"{opts.cert} / {opts.key}"
            raise _usage(opts, "--cert", f"cannot read {shown!r}: {exc.strerror or exc}") from None
    elif opts.key is not None:
        raise _usage(opts, "--key", f"{opts.key!r} given without --cert")
    if context is not None:
        # The client uses a context it is given as is: offer ALPN here, and match the host
        # name in subjectAltName only, never the subject's CN (RFC 9525 §6.3).
        context.hostname_checks_common_name = False
        context.set_alpn_protocols(["h2", "http/1.1"] if opts.http2 else ["http/1.1"])
    return context


def _has(headers: Sequence[tuple[str, str]], name: str) -> bool:
    return any(key.lower() == name for key, _ in headers)


def _body(opts: Options, streams: Streams, prepared: _Prepared) -> None:
    """The request body of ``-d``/``--data-raw``/``--data-binary``, ``--json`` or ``-T``, with
    curl's default Content-Type; a file that cannot be read is a UsageError naming it."""
    headers = prepared.headers
    show_bar = streams.err_tty and not opts.silent

    def streamed(option: str, path: str) -> Body:
        try:
            size = os.stat(path).st_size
            if not os.path.isfile(path):
                raise IsADirectoryError(21, "not a regular file")
        except OSError as exc:
            raise _usage(opts, option, f"cannot read {path!r}: {exc.strerror or exc}") from None
        if not show_bar:
            return file_body(path, size, None)

        def on_progress(done: int, finished: bool) -> None:
            if done == 0 and not finished:
                return
            bars = prepared.upload
            if not bars or bars[-1].done > done:  # a new attempt starts a new bar
                bars.append(streams.progress("upload", size))
            bar = bars[-1]
            bar.update(done, time.monotonic())
            if finished:
                bar.finish(time.monotonic())

        return file_body(path, size, on_progress)

    if opts.json_body is not None:
        text = opts.json_body
        if text.startswith("@"):
            text = _read(opts, "--json", text[1:]).decode("utf-8", errors="replace")
        try:
            json.loads(text, parse_constant=_not_json)  # strict, as the API's json= is
        except ValueError as exc:
            raise _usage(opts, "--json", f"not valid JSON: {exc}") from None
        prepared.content = text.encode("utf-8")
        for name, value in (("Content-Type", "application/json"), ("Accept", "application/json")):
            if not _has(headers, name.lower()):
                headers.append((name, value))
        return
    if opts.upload_file is not None:
        if opts.upload_file == "-":
            prepared.content = stdin_body()
        else:
            prepared.content = streamed("-T/--upload-file", opts.upload_file)
        return
    if not opts.data:
        return
    if len(opts.data) == 1 and opts.data[0][0] == "data-binary":
        value = opts.data[0][1]
        if value.startswith("@") and value != "@-":
            prepared.content = streamed("--data-binary", value[1:])
    if prepared.content is None:
        parts: list[bytes] = []
        for kind, value in opts.data:
            option = {"data": "-d/--data", "data-raw": "--data-raw"}.get(kind, "--" + kind)
            if kind != "data-raw" and value.startswith("@"):
                data = _read(opts, option, value[1:])
                if kind == "data":  # curl: -d @file drops carriage returns and newlines
                    data = data.replace(b"\r", b"").replace(b"\n", b"")
            else:
                data = value.encode("utf-8")
            parts.append(data)
        prepared.content = b"&".join(parts)
    if not _has(headers, "content-type"):
        headers.append(("Content-Type", "application/x-www-form-urlencoded"))


def _not_json(constant: str) -> object:
    """``json.loads``' hook for ``NaN``, ``Infinity`` and ``-Infinity``, which Python reads
    and RFC 8259 does not have: a server's parser would refuse the body after it was sent."""
    raise ValueError(f"{constant} is not JSON (RFC 8259 has no NaN or infinities)")


def _prepare(opts: Options, streams: Streams) -> _Prepared:
    url, auth = _url_and_auth(opts)
    prepared = _Prepared(url=url, headers=list(opts.headers), auth=auth)
    if opts.output is not None and opts.output != "-":
        folder = os.path.dirname(os.path.abspath(opts.output))
        if not os.path.isdir(folder) or os.path.isdir(opts.output):
            what = "is a directory" if os.path.isdir(opts.output) else "its folder does not exist"
            raise _usage(opts, "-o/--output", f"cannot write {opts.output!r}: {what}")
    if opts.continue_at:
        assert opts.output is not None
        planned = plan(opts.output, url)
        if isinstance(planned, str):
            raise _usage(opts, "-C/--continue-at", planned)
        if planned is not None:
            prepared.continued = planned
            prepared.headers.extend(planned.headers())
    if opts.proxy is not None:
        prepared.proxy = opts.proxy if "://" in opts.proxy else "http://" + opts.proxy
    prepared.ssl_context = _tls(opts, streams)
    _body(opts, streams, prepared)
    return prepared


# --- the call ----------------------------------------------------------------------------


class _Report:
    """What goes to stderr: errors (unless silenced) and the ``--explain`` trail."""

    def __init__(self, opts: Options, streams: Streams) -> None:
        self.opts = opts
        self.err = streams.err
        self.errors_shown = (not opts.silent or opts.show_error) and opts.explain != "json"

    def error(self, text: str) -> None:
        if self.errors_shown:
            print(text, file=self.err)

    def head(self, response: Response) -> None:
        """``-v``: the response head on stderr, curl's way (``< `` before each line), unless
        stderr is for the JSON trail alone (``--explain=json``)."""
        if self.opts.verbose and self.opts.explain != "json":
            text = response_head(response, redact=True).decode("latin-1")
            for line in text.split("\r\n")[:-1]:
                print(f"< {line}".rstrip(), file=self.err)

    def trail(
        self,
        hops: list[Hop],
        *,
        outcome: str,
        execution: str,
        error: TrioRetryError | None = None,
        final: str | None = None,
    ) -> None:
        if self.opts.explain is None:
            return
        if self.opts.explain == "json":
            document = trail_json(
                hops,
                outcome=outcome,
                execution=execution,
                error=type(error).__name__ if error is not None else None,
            )
            if error is not None:
                document["message"] = str(error)
            print(json.dumps(document), file=self.err)
            return
        for number, hop in enumerate(hops, 1):
            if len(hops) > 1:
                got = f" -> {hop.status}" if hop.status is not None else ""
                print(f"hop {number}: {hop.method} {hop.url}{got}", file=self.err)
            print(attempt_table(hop.attempts), file=self.err)
        if final is not None:
            print(final, file=self.err)
        print(f"execution: {execution}", file=self.err)


def _hop(response: Response) -> Hop:
    return Hop(
        method=response.request_method,
        url=format(response.url),  # shown: no userinfo, no query value
        attempts=tuple(response.attempts),
        status=response.status,
    )


async def _receive(
    response: Response,
    opts: Options,
    streams: Streams,
    report: _Report,
    prepared: _Prepared,
) -> tuple[int, str]:
    """Write the head (``-i``) and the body as it arrives; the exit code and a summary.
    ``prepared.continued``: ``-C -`` asked for the rest of ``-o FILE`` (``_cli/resume.py``)."""
    continued = prepared.continued
    to_file = opts.output is not None and opts.output != "-"
    append = False
    try:
        if continued is not None:
            assert opts.output is not None
            how = verdict(continued, response.status, response.headers)
            if how is None:
                why = reason(continued, response.status, response.headers)
                raise _OutputError(f"error: -C -: {opts.output} not continued: {why}")
            append = how == "append"
            if not append:
                report.error(
                    f"note: -C -: the server's file changed: {opts.output} downloaded again whole"
                )
        if to_file and not append:
            assert opts.output is not None
            record(opts.output, prepared.url, response.status, response.headers)
        sink = Sink.for_response(response, streams, opts.output, append=append)
    except OSError as exc:
        raise _OutputError(f"error: -o {opts.output}: {exc.strerror or exc}") from None
    bar: ProgressBar | None = None
    started = time.monotonic()
    try:
        if opts.include:
            for hop in [*response.history, response]:
                sink.write_head(response_head(hop))
        if opts.verbose:
            for hop in [*response.history, response]:
                report.head(hop)
        if sink.refused:
            report.error(
                f"warning: binary output ({response.headers.get('content-type', 'no type')}) "
                "is not shown on a terminal: use -o FILE, or -o - to write it anyway"
            )
        else:
            if opts.output not in (None, "-") and streams.err_tty and not opts.silent:
                bar = streams.progress("download", _length(response))
            async for chunk in response.aiter_bytes():
                sink.write(chunk)
                if bar is not None:
                    bar.update(sink.written, time.monotonic())
            if to_file:
                assert opts.output is not None
                forget(opts.output)  # whole: nothing to continue
    except BrokenPipeError:
        raise
    except OSError as exc:  # the disk is full, the file vanished...
        where = opts.output if opts.output not in (None, "-") else "stdout"
        raise _OutputError(f"error: writing {where}: {exc.strerror or exc}") from None
    finally:
        if bar is not None:
            bar.finish(time.monotonic())
        try:
            sink.close()
        except OSError:
            pass
    seconds = time.monotonic() - started
    code = EXIT_OK if response.status < 400 else EXIT_HTTP_ERROR
    return code, f"body: {sink.written} bytes in {seconds:.3f} s"


class _OutputError(Exception):
    """The output (``-o FILE`` or stdout) could not be written: exit 1."""


def _length(response: Response) -> int | None:
    """The body's length for the progress bar: Content-Length, unless the body is encoded
    (then the decoded length is unknown) or there is none (HEAD)."""
    if response.request_method == "HEAD" or "content-encoding" in response.headers:
        return None
    try:
        value = int(response.headers.get("content-length", ""))
    except ValueError:
        return None
    return value if value >= 0 else None


def _client(opts: Options, prepared: _Prepared) -> Client:
    if opts.state is not None:
        from .._state.file import check_path

        try:
            check_path(opts.state)
        except ValueError as exc:
            raise _usage(opts, "--state", str(exc).removeprefix("state: ")) from None
    try:
        return Client(
            retry=RetryPolicy(max_attempts=opts.attempts),
            ssl_context=prepared.ssl_context,
            http2=opts.http2,
            http2_prior_knowledge=opts.http2_prior_knowledge,
            # --http3: every https:// origin over HTTP/3 (as curl --http3), TCP if QUIC fails.
            default_upstream=Upstream(http3=True) if opts.http3 else None,
            auth=prepared.auth,
            follow_redirects=opts.location,
            max_redirects=opts.max_redirs,
            proxy=prepared.proxy,
            trust_env=True,  # HTTP(S)_PROXY, ALL_PROXY, NO_PROXY, as curl honours them
            # Client()'s bounds (nothing waits forever), with --connect-timeout if given.
            stage_timeouts=_timeouts(opts),
            early_data=opts.early_data,
            state=opts.state,
        )
    except ImportError as exc:  # --http3 without the extra that provides QUIC
        raise _usage(opts, "--http3", str(exc)) from None
    except (InvalidRequest, ValueError) as exc:
        # The only option Client() can refuse here is the proxy URL; shown without userinfo.
        raise _usage(opts, "--proxy", str(exc)) from None


def _timeouts(opts: Options) -> StageTimeouts:
    """``Client()``'s default stage timeouts, the connect limit replaced by
    ``--connect-timeout`` when it is given."""
    if opts.connect_timeout is None:
        return DEFAULT_STAGE_TIMEOUTS
    return replace(DEFAULT_STAGE_TIMEOUTS, connect=opts.connect_timeout)


async def _call(opts: Options, prepared: _Prepared, streams: Streams) -> int:
    report = _Report(opts, streams)
    key = opts.idempotency_key is not None or _has(prepared.headers, "idempotency-key")
    client = _client(opts, prepared)
    try:
        async with (
            client,
            client.stream(
                opts.method,
                prepared.url,
                headers=prepared.headers,
                content=prepared.content,
                deadline=opts.max_time,
                idempotency_key=opts.idempotency_key,
            ) as response,
        ):
            code, summary = await _receive(response, opts, streams, report, prepared)
    except HttpAmbiguousExecutionError as exc:
        hops = [Hop(method=opts.method, url=shown_url(prepared.url), attempts=tuple(exc.attempts))]
        report.error(f"AMBIGUOUS: {exc}")
        words = execution_line(exc.attempts, ambiguous=True)
        report.trail(hops, outcome="ambiguous", execution=words, error=exc)
        return EXIT_AMBIGUOUS
    except RequestFailed as exc:
        if isinstance(exc, InvalidRequest) and not exc.attempts:
            raise UsageError(f"{PROG} {opts.command}: error: {exc}") from None
        hops = [Hop(method=opts.method, url=shown_url(prepared.url), attempts=tuple(exc.attempts))]
        report.error(f"FAILED ({type(exc).__name__}, {exc.evidence}): {exc}")
        words = execution_line(exc.attempts, idempotency_key=key)
        report.trail(hops, outcome="failed", execution=words, error=exc)
        return EXIT_FAILED
    except TooManyRedirects as exc:
        hops = [_hop(r) for r in exc.history]
        report.error(f"FAILED (TooManyRedirects): {exc}")
        report.trail(hops, outcome="failed", execution="the server answered every hop", error=exc)
        return EXIT_FAILED
    except TrioRetryError as exc:
        report.error(f"FAILED ({type(exc).__name__}): {exc}")
        return EXIT_FAILED
    except _OutputError as exc:
        report.error(str(exc))
        return EXIT_FAILED
    hops = [_hop(r) for r in [*response.history, response]]
    final = f"{response.http_version} {response.status} {response.reason}".rstrip()
    if response.retry_decision is not None:
        final += f"  [{response.retry_decision}]"
    words = execution_line(response.attempts, status=response.status, idempotency_key=key)
    report.trail(hops, outcome="response", execution=words, final=f"{final}\n{summary}")
    return code


def _show_state_warnings(opts: Options, streams: Streams) -> None:
    """Make ``warnings.showwarning`` print a ``StateFileWarning`` (``--state``'s file ignored
    or not written) as one ``warning:`` line on stderr, as ``-k``'s warning (none with
    ``-s``), and any other warning as before. The caller restores it (``catch_warnings``)."""
    from .._state.file import StateFileWarning

    shown = warnings.showwarning

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if not issubclass(category, StateFileWarning):
            shown(message, category, filename, lineno, file, line)
        elif not opts.silent or opts.show_error:
            print(f"warning: {message}", file=streams.err)

    warnings.showwarning = show


def _version() -> str:
    # importlib.metadata (zipfile, csv, email...) is imported here, for --version only: at the
    # top it cost every start of the command line (--help included) a few milliseconds.
    from importlib import metadata

    from .. import __version__

    found = []
    for name in ("trio", "h11", "h2"):
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:  # pragma: no cover
            found.append(f"{name} ?")
    python = ".".join(str(part) for part in sys.version_info[:3])
    return f"trio_retry {__version__} (Python {python}; {', '.join(found)})"


def run(argv: Sequence[str], out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run the command line; return the exit code. Never raises except for a bug."""
    streams = Streams(out or sys.stdout, err or sys.stderr)
    try:
        try:
            parsed = parse(argv)
        except SystemExit as exc:  # --help printed its text
            return exc.code if isinstance(exc.code, int) else EXIT_OK
        if not isinstance(parsed, Options):
            if parsed.version:
                print(_version(), file=streams.out)
                return EXIT_OK
            from .._demo import run_demo

            return trio.run(run_demo, streams.out, parsed.quick)
        prepared = _prepare(parsed, streams)
        with warnings.catch_warnings():  # (restores showwarning after)
            if parsed.state is not None:
                _show_state_warnings(parsed, streams)
            return trio.run(_call, parsed, prepared, streams)
    except UsageError as exc:
        if exc.usage:
            streams.err.write(exc.usage)
        print(exc, file=streams.err)
        return EXIT_USAGE
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, and keep Python from complaining
        # about the unflushable stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("interrupted", file=streams.err)
        return EXIT_INTERRUPTED
