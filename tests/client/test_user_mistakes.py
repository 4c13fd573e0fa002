"""Issue #38's "Done when": the mistakes a user coming from httpx, aiohttp, requests or curl
makes with the API, replayed (the command line's are in tests/cli/test_user_mistakes.py).

Each row is one mistake: what it does, the exception it must raise, the words naming what was
wrong and the words naming what is accepted. Every row is refused (none accepted), within a
bound of time (none hangs), and before anything is sent: the FaultServer the calls are aimed
at accepts no connection. A row holding a secret (``SECRET``) shows it nowhere in the error or
anything chained to it.

Rows that failed before the round-four acceptance (accepted, or refused in Python's words):
``on_attempt=5`` sent its request and then raised; ``RetryPolicy(max_attempts=1.5)``,
``RetryPolicy(backoff=0.5)``, ``Upstream(transient_500="yes")``, ``Reopenable(b"...")``,
``StreamFactory(replayability="yes")``, ``BearerAuth("Bearer ...")``, ``BearerAuth(b"...")``,
``BearerAuth("")``, ``StageTimeouts(5)``, ``auth=BasicAuth`` (the class) and an upstreams key
with a path or userinfo were accepted; ``mounts=`` was told "did you mean 'deadline'".
"""

from __future__ import annotations

import inspect
import math
import pathlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest
import trio
import trio.testing

import trio_retry
from trio_retry import (
    Backoff,
    BasicAuth,
    BearerAuth,
    ClientStateError,
    Evidence,
    InvalidRequest,
    Multipart,
    Reopenable,
    RequestFailed,
    RetryPolicy,
    StageTimeouts,
    StreamFactory,
    Upstream,
)
from trio_retry.testing import FaultServer

SECRET = "Zq5ecretZq"
ONE = RetryPolicy(max_attempts=1)

Make = Callable[[trio_retry.Client, str], object]


@dataclass(frozen=True)
class Mistake:
    id: str
    make: Make  # given an open client and the server's URL; may return an awaitable
    raises: type[Exception]
    wrong: str  # words of the message naming what was wrong
    accepted: str  # words of the message naming what is accepted


def client(**options: Any) -> Make:
    """``Client(**options)``."""
    return lambda _client, _url: trio_retry.Client(**options)


def value(build: Callable[[], object]) -> Make:
    """A public value built wrongly (``RetryPolicy(...)``, ``BearerAuth(...)``...)."""
    return lambda _client, _url: build()


_SERVER = object()


def call(verb: str = "get", target: object = _SERVER, **options: Any) -> Make:
    """``await client.<verb>(target, **options)``; ``target`` defaults to the server's
    ``/p``; any other is given as it is."""

    async def run(open_client: trio_retry.Client, url: str) -> None:
        where = url + "/p" if target is _SERVER else target
        await getattr(open_client, verb)(where, **options)

    return run


def method(name: object, **options: Any) -> Make:
    """``await client.request(name, url)``; ``"URL"`` stands for the server's URL."""

    async def run(open_client: trio_retry.Client, url: str) -> None:
        shown = f"http://u:{SECRET}@" + url.partition("://")[2] if name == "URL" else name
        await open_client.request(shown, url + "/p", **options)  # type: ignore[arg-type]

    return run


async def _body() -> AsyncIterator[bytes]:
    yield b"x"


async def _await_stream(open_client: trio_retry.Client, url: str) -> None:
    await open_client.stream("GET", url + "/p")  # type: ignore[misc]


async def _async_for_stream(open_client: trio_retry.Client, url: str) -> None:
    async for _ in open_client.stream("GET", url + "/p"):  # type: ignore[attr-defined]
        pass


async def _with_stream(open_client: trio_retry.Client, url: str) -> None:
    with open_client.stream("GET", url + "/p"):  # type: ignore[attr-defined]
        pass


async def _never_entered(_client: trio_retry.Client, url: str) -> None:
    await trio_retry.Client().get(url + "/p")


async def _stream_never_entered(_client: trio_retry.Client, url: str) -> None:
    async with trio_retry.Client().stream("GET", url + "/p"):
        pass


async def _after_exit(_client: trio_retry.Client, url: str) -> None:
    async with trio_retry.Client() as closed:
        pass
    await closed.get(url + "/p")


async def _entered_twice(_client: trio_retry.Client, _url: str) -> None:
    async with trio_retry.Client() as once, once:
        pass


HINT = "did you mean"
PAIRS = "a mapping or a sequence of (name, value) pairs"
SECONDS = "a positive number of seconds or None"
KINDS = "accepted kinds: bytes"
KEY = "non-empty string of visible ASCII"
SCHEMES = "http:// or https://"
ORIGIN = '"https://host:port" or "https://host"'

CLIENT_MISTAKES = [
    Mistake("timeout", client(timeout=5), TypeError, "'timeout'", f"{HINT} 'deadline'"),
    Mistake("limits", client(limits=None), TypeError, "'limits'", "'max_connections'"),
    Mistake("proxies", client(proxies={}), TypeError, "'proxies'", f"{HINT} 'proxy'"),
    Mistake("mounts", client(mounts={}), TypeError, "'mounts'", f"{HINT} 'upstreams'"),
    Mistake("app", client(app=None), TypeError, "'app'", f"{HINT} 'transport'"),
    Mistake("http1", client(http1=True), TypeError, "'http1'", f"{HINT} 'http2'"),
    Mistake("verify_ssl", client(verify_ssl=False), TypeError, "'verify_ssl'", "'verify'"),
    Mistake("retries", client(retries=3), TypeError, "'retries'", f"{HINT} 'retry'"),
    Mistake("follow_redirect", client(follow_redirect=1), TypeError, "'follow_redirect'",
            "'follow_redirects'"),
    Mistake("base_url bytes", client(base_url=f"http://u:{SECRET}@h/".encode()), TypeError,
            "bytes (", "absolute http(s) URL as str"),
    Mistake("base_url host:port", client(base_url="localhost:8000"), ValueError,
            "scheme 'localhost'", "'http://localhost:8000'"),
    Mistake("base_url query", client(base_url="http://h/?a=1"), ValueError,
            "must not have a query string", "params="),
    Mistake("proxy host:port", client(proxy="localhost:3128"), ValueError,
            "without a scheme", "http://, https://, socks5:// or socks5h://"),
    Mistake("proxy int", client(proxy=3128), TypeError, "3128 (int)", "'http://host:3128'"),
    Mistake("verify missing file", client(verify="/nonexistent/ca.pem"), ValueError,
            "no such file", "the path of a CA bundle"),
    Mistake("verify int", client(verify=1), TypeError, "got int", "a CA bundle path (str)"),
    Mistake("cert 1-tuple", client(cert=("client.pem",)), TypeError, "tuple (1 item",
            "(certfile, keyfile)"),
    Mistake("cert missing file", client(cert=("/nonexistent.pem", "/k.pem", SECRET)),
            ValueError, "no such file", "(certfile, keyfile, password)"),
    Mistake("cookies dict", client(cookies={"sid": SECRET}), TypeError, "got dict",
            "http.cookiejar.CookieJar"),
    Mistake("headers None", client(headers={"X-A": None}), ValueError, "got NoneType",
            "must be str or bytes"),
    Mistake("headers CRLF", client(headers={"X-A": "a\r\nX-B: 1"}), ValueError,
            "invalid value for header 'X-A'", "control characters (CR, LF, NUL, ...) are not"),
    Mistake("headers str", client(headers="X-A: 1"), ValueError, "got str", PAIRS),
    Mistake("auth str", client(auth=f"user:{SECRET}"), TypeError, "got str",
            "(user, password) tuple of str"),
    Mistake("auth class", client(auth=BasicAuth), TypeError, "the class BasicAuth itself",
            "BasicAuth(...)"),
    Mistake("deadline str", client(deadline="5"), TypeError, "'5' (str)", SECONDS),
    Mistake("deadline 0", client(deadline=0), ValueError, "got 0", SECONDS),
    Mistake("pool_timeout 0", client(pool_timeout=0), ValueError, "got 0", SECONDS),
    Mistake("keepalive -1", client(keepalive_expiry=-1), ValueError, "got -1", ">= 0 or None"),
    Mistake("max_connections str", client(max_connections="10"), TypeError, "'10' (str)",
            "must be an int"),
    Mistake("max_connections 0", client(max_connections=0), ValueError, "got 0", ">= 1"),
    Mistake("max_redirects None", client(max_redirects=None), TypeError, "None (NoneType)",
            "must be an int"),
    Mistake("http2 str", client(http2="yes"), TypeError, "'yes' (str)", "True or False"),
    Mistake("http3 str", client(http3="yes"), TypeError, "'yes' (str)", "True or False"),
    Mistake("retry int", client(retry=3), TypeError, "3 (int)", "a RetryPolicy"),
    Mistake("stage_timeouts dict", client(stage_timeouts={"connect": 1}), TypeError,
            "(dict)", "a StageTimeouts"),
    Mistake("ssl_context bool", client(ssl_context=True), TypeError, "True (bool)",
            "an ssl.SSLContext"),
    Mistake("uds int", client(uds=5), TypeError, "5 (int)", "the path of a Unix socket"),
    Mistake("upstreams host:port", client(upstreams={"localhost:8000": Upstream()}),
            ValueError, "'localhost:8000' is not an origin", ORIGIN),
    Mistake("upstreams path", client(upstreams={"https://api.example/v1": Upstream()}),
            ValueError, "it has a path", ORIGIN),
    Mistake("upstreams userinfo", client(upstreams={f"https://u:{SECRET}@h": Upstream()}),
            ValueError, "it has userinfo", ORIGIN),
    Mistake("upstreams list", client(upstreams=[("https://h", Upstream())]), TypeError,
            "got list", "a mapping of origin to Upstream"),
    Mistake("upstreams value", client(upstreams={"https://h": 3}), TypeError, "got 3 (int)",
            "must be an Upstream"),
    Mistake("on_attempt int", client(on_attempt=5), TypeError, "5 (int)",
            "a function (or async function) given each Attempt"),
    Mistake("json_dumps str", client(json_dumps="json"), TypeError, "'json' (str)",
            "(json.dumps)"),
    Mistake("clock float", client(clock=1.5), TypeError, "1.5 (float)", "(time.time)"),
    Mistake("event_hooks list", client(event_hooks=[print]), TypeError, "got list",
            "{'request': [hook, ...]"),
]  # fmt: skip

VALUE_MISTAKES = [
    Mistake("RetryPolicy float", value(lambda: RetryPolicy(max_attempts=1.5)), TypeError,
            "1.5 (float)", "a whole number >= 1"),
    Mistake("RetryPolicy str", value(lambda: RetryPolicy(max_attempts="3")), TypeError,
            "'3' (str)", "a whole number >= 1"),
    Mistake("RetryPolicy 0", value(lambda: RetryPolicy(max_attempts=0)), ValueError,
            "got 0", ">= 1"),
    Mistake("RetryPolicy backoff", value(lambda: RetryPolicy(backoff=0.5)), TypeError,
            "0.5 (float)", "a Backoff"),
    Mistake("Backoff jitter", value(lambda: Backoff(jitter="random")), ValueError,
            "'random'", "('full', 'decorrelated', 'none')"),
    Mistake("Backoff str", value(lambda: Backoff(initial="1")), TypeError, "'1' (str)",
            "a number"),
    Mistake("Upstream flag", value(lambda: Upstream(transient_500="yes")), TypeError,
            "'yes' (str)", "True or False"),
    Mistake("Upstream budget", value(lambda: Upstream(budget=5)), TypeError, "5 (int)",
            "a RetryBudget"),
    Mistake("Upstream bulkhead", value(lambda: Upstream(max_concurrency=0)), ValueError,
            "got 0", "None or >= 1"),
    Mistake("StageTimeouts(5)", value(lambda: StageTimeouts(5)), TypeError,
            "1 positional argument", "by name (connect=, tls="),
    Mistake("StageTimeouts 0", value(lambda: StageTimeouts(connect=0)), ValueError,
            "got 0 (int)", "a positive finite number of seconds or None"),
    Mistake("StageTimeouts pool", value(lambda: StageTimeouts(pool=5)), TypeError,
            "'pool'", "Client(pool_timeout=...)"),
    Mistake("StageTimeouts total", value(lambda: StageTimeouts(total=5)), TypeError,
            "'total'", "deadline="),
    Mistake("BearerAuth scheme", value(lambda: BearerAuth(f"Bearer {SECRET}")), ValueError,
            "starting with 'Bearer '", "the token alone"),
    Mistake("BearerAuth bytes", value(lambda: BearerAuth(SECRET.encode())), TypeError,
            "bytes (", "the token alone, as str"),
    Mistake("BearerAuth empty", value(lambda: BearerAuth("")), ValueError, "an empty string",
            "the token alone"),
    Mistake("BearerAuth CRLF", value(lambda: BearerAuth(f"{SECRET}\r\nX: 1")), ValueError,
            "control or non-ASCII character at position", "visible ASCII without spaces"),
    Mistake("BasicAuth None", value(lambda: BasicAuth("user", None)), TypeError,
            "got NoneType", "must be str"),
    Mistake("Reopenable bytes", value(lambda: Reopenable(SECRET.encode())), TypeError,
            "got bytes (", "a function returning a fresh body"),
    Mistake("StreamFactory flag", value(lambda: StreamFactory(list, replayability="yes")),
            TypeError, "'yes' (str)", "a Replayability"),
    Mistake("Multipart dict", value(lambda: Multipart({"a": "b"})), TypeError, "part 0",
            "a (name, value) pair"),
]  # fmt: skip

CALL_MISTAKES = [
    Mistake("call timeout", call(timeout=5), TypeError, "'timeout'", f"{HINT} 'deadline'"),
    Mistake("allow_redirects", call(allow_redirects=True), TypeError, "'allow_redirects'",
            "'follow_redirects'"),
    Mistake("call verify", call(verify=False), TypeError, "'verify'", "Client(verify=...)"),
    Mistake("call ssl", call(ssl=False), TypeError, "'ssl'", "Client(verify=...)"),
    Mistake("call proxy", call(proxy="http://p:1"), TypeError, "'proxy'",
            "Client(proxy=...)"),
    Mistake("stream=True", call(stream=True), TypeError, "'stream'", "client.stream("),
    Mistake("raise_for_status", call(raise_for_status=True), TypeError,
            "'raise_for_status'", "response.raise_for_status()"),
    Mistake("data bytes", call("post", data=SECRET.encode()), InvalidRequest, "got bytes (",
            "content="),
    Mistake("content dict", call("post", content={"a": 1}), InvalidRequest, "type dict", KINDS),
    Mistake("content int", call("post", content=5), InvalidRequest, "type int", KINDS),
    Mistake("content list", call("post", content=[b"a"]), InvalidRequest, "type list",
            "an iterator or generator of bytes"),
    Mistake("content function", call("post", content=_body), InvalidRequest,
            "a function: pass what it returns", KINDS),
    Mistake("content and json", call("post", content=b"x", json={}), InvalidRequest,
            "content= or json=", "not both"),
    Mistake("json NaN", call("post", json={"x": math.nan}), InvalidRequest,
            "not JSON compliant", "no NaN or infinities"),
    Mistake("json set", call("post", json={1, 2}), InvalidRequest, "type set",
            "json= takes what JSON holds"),
    Mistake("files 1-tuple", call("post", files={"f": ("a.txt",)}), InvalidRequest,
            "a tuple of 1 (str)", "(filename, body, content_type)"),
    Mistake("files int", call("post", files={"f": 5}), InvalidRequest, "files['f']", KINDS),
    Mistake("files type int", call("post", files={"f": ("a", b"x", 5)}), InvalidRequest,
            "a tuple of 3 (str, bytes, int)", "a str filename and content type"),
    Mistake("header None", call(headers={"X-Trace": None}), InvalidRequest, "got NoneType",
            "must be str or bytes"),
    Mistake("header CRLF", call(headers={"X": "a\r\nY: b"}), InvalidRequest,
            "invalid value for header 'X'", "are not allowed in header values"),
    Mistake("header bytes LF", call(headers={"X": b"a\nb"}), InvalidRequest,
            "invalid value for header 'X'", "are not allowed in header values"),
    Mistake("header euro", call(headers={"X": "5 \u20ac"}), InvalidRequest,
            "invalid value for header 'X'", "only latin-1"),
    Mistake("header int", call(headers={"X": 1}), InvalidRequest, "got int", "str or bytes"),
    Mistake("header name space", call(headers={"X Y": "v"}), InvalidRequest,
            "invalid header name 'X Y'", "names are tokens"),
    Mistake("header 1-tuple", call(headers=[("X",)]), InvalidRequest, "length 1",
            "(name, value) pairs"),
    Mistake("Content-Length", call(headers={"Content-Length": "5"}), InvalidRequest,
            "does not match the body", "remove the header"),
    Mistake("Transfer-Encoding", call(headers={"Transfer-Encoding": "chunked"}), InvalidRequest,
            "Transfer-Encoding is set by the client", "remove the header"),
    Mistake("call auth str", call(auth=f"user:{SECRET}"), InvalidRequest, "got str",
            "(user, password) tuple of str"),
    Mistake("auth None password", call(auth=("user", None)), InvalidRequest,
            "a tuple of 2 (str, NoneType)", "(user, password) tuple of str"),
    Mistake("auth bytes password", call(auth=("user", SECRET.encode())), InvalidRequest,
            "a tuple of 2 (str, bytes)", "(user, password) tuple of str"),
    Mistake("call auth class", call(auth=BasicAuth), InvalidRequest, "the class BasicAuth itself",
            "BasicAuth(...)"),
    Mistake("auth callable", call(auth=lambda r: r), InvalidRequest, "got function",
            "a RefreshableAuth"),
    Mistake("call deadline str", call(deadline="5"), InvalidRequest, "'5' (str)", SECONDS),
    Mistake("deadline negative", call(deadline=-1), InvalidRequest, "got -1", SECONDS),
    Mistake("deadline NaN", call(deadline=math.nan), InvalidRequest, "got nan", SECONDS),
    Mistake("deadline stages", call(deadline=StageTimeouts(connect=1)), InvalidRequest,
            "(StageTimeouts)", SECONDS),
    Mistake("cookies str", call(cookies=f"sid={SECRET}"), InvalidRequest, "got str (",
            "a mapping of names to values"),
    Mistake("cookie int", call(cookies={"a": 1}), InvalidRequest, "got int", "must be str"),
    Mistake("cookie semicolon", call(cookies={"a": f"{SECRET};x"}), InvalidRequest,
            "invalid value for cookie 'a'", "no spaces, quotes, commas, semicolons"),
    Mistake("params str", call(params=f"key={SECRET}"), InvalidRequest, "got str (", PAIRS),
    Mistake("params dict", call(params={"a": {"b": 1}}), InvalidRequest, "params['a']",
            "str, int, float or bool"),
    Mistake("params NaN", call(params={"a": math.nan}), InvalidRequest, "params['a']",
            "str, int, float or bool"),
    Mistake("params 1-tuple", call(params=[("a",)]), InvalidRequest, "got an item tuple",
            PAIRS),
    Mistake("key empty", call("post", idempotency_key=""), InvalidRequest, "an empty string",
            KEY),
    Mistake("key bytes", call("post", idempotency_key=SECRET.encode()), InvalidRequest,
            "bytes (", KEY),
    Mistake("key space", call("post", idempotency_key=f"{SECRET} 17"), InvalidRequest,
            "a space at position", KEY),
    Mistake("key int", call("post", idempotency_key=17), InvalidRequest, "17 (int)", KEY),
    Mistake("key header", call("post", headers={"Idempotency-Key": f"{SECRET} x"}),
            InvalidRequest, "the Idempotency-Key header", KEY),
    Mistake("idempotency str", call("post", idempotency="IDEMPOTENT"), InvalidRequest,
            "'IDEMPOTENT' (str)", "Idempotency.IDEMPOTENT"),
    Mistake("call retry int", call(retry=3), InvalidRequest, "3 (int)", "a RetryPolicy"),
    Mistake("follow_redirects str", call(follow_redirects="yes"), InvalidRequest,
            "'yes' (str)", "True or False"),
    Mistake("hedging int", call(hedging=5), TypeError, "got 5", "a Hedging, False"),
]  # fmt: skip

URL_MISTAKES = [
    Mistake("relative", call(target="/x"), InvalidRequest, "is relative", "base_url="),
    Mistake("host:port", call(target="localhost:8000/x"), InvalidRequest,
            "scheme 'localhost'", "'http://localhost:8000/x'"),
    Mistake("htp", call(target="htp://127.0.0.1/"), InvalidRequest, "scheme 'htp'", SCHEMES),
    Mistake("ws", call(target="ws://127.0.0.1/"), InvalidRequest, "scheme 'ws'", SCHEMES),
    Mistake("file", call(target="file:///etc/passwd"), InvalidRequest, "scheme 'file'",
            SCHEMES),
    Mistake("http:/", call(target="http:/127.0.0.1/x"), InvalidRequest, "URL has no host",
            "http://host[:port]/path"),
    Mistake("no host", call(target="http://"), InvalidRequest, "URL has no host",
            "http://host[:port]/path"),
    Mistake("port", call(target="http://127.0.0.1:99999/"), InvalidRequest, "malformed URL",
            "a number from 1 to 65535"),
    Mistake("bracket", call(target="http://[::1/"), InvalidRequest, "malformed URL",
            "IPv6"),
    Mistake("space", call(target="http://127.0.0.1/a b"), InvalidRequest, "whitespace",
            "a space is %20"),
    Mistake("leading space", call(target=" http://127.0.0.1/"), InvalidRequest, "whitespace",
            "without spaces around it"),
    Mistake("bytes", call(target=b"http://127.0.0.1/"), InvalidRequest, "got bytes",
            "must be a str"),
    Mistake("None", call(target=None), InvalidRequest, "got NoneType", "must be a str"),
    Mistake("Path", call(target=pathlib.Path("/x")), InvalidRequest, "got PosixPath",
            "must be a str"),
    Mistake("NFKC host", call(target=f"http://u:{SECRET}@h\uff0fx.example/"), InvalidRequest,
            "malformed URL", "turns into '/', '?', '#', '@' or ':'"),
    Mistake("url as method", method("URL"), InvalidRequest, "a URL was given as the method",
            "client.request('GET', url)"),
    Mistake("method space", method("GE T"), InvalidRequest, "'GE T'", "letters such as 'GET'"),
    Mistake("method None", method(None), InvalidRequest, "None (NoneType)",
            "letters such as 'GET'"),
]  # fmt: skip

USE_MISTAKES = [
    Mistake("await stream", _await_stream, TypeError, "cannot be awaited",
            "async with client.stream("),
    Mistake("async for stream", _async_for_stream, TypeError, "not iterable",
            "async with client.stream("),
    Mistake("with stream", _with_stream, TypeError, "not `with`", "async with client.stream("),
    Mistake("never entered", _never_entered, ClientStateError, "the Client is not open",
            "inside `async with trio_retry.Client() as client:`"),
    Mistake("stream never entered", _stream_never_entered, ClientStateError,
            "the Client is not open", "inside `async with"),
    Mistake("after exit", _after_exit, ClientStateError, "the Client is closed",
            "create a new one inside `async with`"),
    Mistake("entered twice", _entered_twice, ClientStateError, "entered only once",
            "create a new one"),
]  # fmt: skip

MISTAKES = [*CLIENT_MISTAKES, *VALUE_MISTAKES, *CALL_MISTAKES, *URL_MISTAKES, *USE_MISTAKES]


def _chain(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [error]
    while todo:
        current = todo.pop()
        if current is None or any(current is e for e in seen):
            continue
        seen.append(current)
        todo += [current.__cause__, current.__context__]
    return seen


def test_each_mistake_is_a_row_of_its_own() -> None:
    assert len({m.id for m in MISTAKES}) == len(MISTAKES)


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m.id for m in MISTAKES])
async def test_a_mistake_is_refused_clearly_before_anything_is_sent(
    server: FaultServer, mistake: Mistake
) -> None:
    with trio.fail_after(10):  # none hangs
        async with trio_retry.Client(retry=ONE) as open_client:
            with pytest.raises(Exception) as caught:  # noqa: PT011 (the type is checked below)
                await _made(mistake, open_client, server.url)
        await trio.testing.wait_all_tasks_blocked(0.01)
    error = caught.value
    assert type(error) is mistake.raises, repr(error)  # none accepted, none in other words
    message = str(error)
    assert mistake.wrong in message, message  # what was wrong
    assert mistake.accepted in message, message  # what is accepted
    if isinstance(error, RequestFailed):
        assert (error.evidence, error.attempts) == (Evidence.NOT_SENT, [])
    assert (server.connections_accepted, server.requests) == (0, [])  # nothing was sent
    for shown in _chain(error):  # nor chained
        assert SECRET not in str(shown) + repr(shown) + repr(shown.args), repr(shown)


async def _made(mistake: Mistake, open_client: trio_retry.Client, url: str) -> None:
    made = mistake.make(open_client, url)
    if inspect.isawaitable(made):
        await made
