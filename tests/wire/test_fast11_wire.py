"""The HTTP/1.1 fast path on the wire: the same evidence, stage and errors as h11 at every fault.

Each case runs through the real ``Client`` on loopback against a ``FaultServer``, once with
``http1_fast_path=True`` and once with ``False``; what the caller and ``on_attempt`` see (status,
body, headers, error type and message, every attempt's stage, evidence, category and byte
counts, and whether the next request reuses the connection) must be identical. Where the case is
canonical, the fast path must not have deferred to h11 (it really ran); where it is not, it
must have (h11 decided). Also: the option and the environment variable.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

import trio_retry
from trio_retry import RetryPolicy, StageTimeouts
from trio_retry._wire.exchange import WireRequest
from trio_retry._wire.http11_reader import ResponseReader
from trio_retry.testing import (
    Action,
    CloseAfterBody,
    CloseAfterHead,
    CloseBeforeRead,
    FaultServer,
    PartialBody,
    Raw,
    Respond,
    Stall,
)

ONE = RetryPolicy(max_attempts=1)
HEAD_OK = b"HTTP/1.1 200 OK\r\n"


def _chunked(*parts: bytes, tail: bytes = b"0\r\n\r\n") -> bytes:
    return (
        HEAD_OK
        + b"Transfer-Encoding: chunked\r\n\r\n"
        + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts)
        + tail
    )


#: (name, action, method, whether the fast path handles it without h11)
CASES: list[tuple[str, Action, str, bool]] = [
    ("ok", Respond(200, body=b"hello"), "GET", True),
    ("ok-post", Respond(201, body=b"made"), "POST", True),
    ("big-body", Respond(200, body=b"x" * 300_000), "GET", True),
    ("500", Respond(500, body=b"oops"), "GET", True),
    ("chunked", Raw(_chunked(b"hel", b"lo"), close=False), "GET", True),
    (
        "chunked-ext",
        Raw(_chunked(b"hel", tail=b"2;a=b\r\nlo\r\n0\r\n\r\n"), close=False),
        "GET",
        False,
    ),
    ("trailers", Raw(_chunked(b"hello", tail=b"0\r\nX-T: 1\r\n\r\n"), close=False), "GET", False),
    ("bad-chunk", Raw(HEAD_OK + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nhi\r\n"), "GET", False),
    (
        "bad-footer",
        Raw(HEAD_OK + b"Transfer-Encoding: chunked\r\n\r\n2\r\nhiXX0\r\n\r\n"),
        "GET",
        False,
    ),
    (  # the server keeps the socket open: only the header says "do not reuse"
        "conn-close",
        Raw(HEAD_OK + b"Connection: close\r\nContent-Length: 2\r\n\r\nhi", close=False),
        "GET",
        True,
    ),
    (
        "trailing-bytes",
        Raw(HEAD_OK + b"Content-Length: 2\r\n\r\nhiHTTP/1.1", close=False),
        "GET",
        True,
    ),
    (
        "te-and-cl",
        Raw(HEAD_OK + b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n"),
        "GET",
        False,
    ),
    ("dup-cl", Raw(HEAD_OK + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\nhi"), "GET", False),
    (
        "obs-fold",
        Raw(HEAD_OK + b"X: a\r\n b\r\nContent-Length: 0\r\n\r\n", close=False),
        "GET",
        False,
    ),
    ("close-delimited", Raw(HEAD_OK + b"X: y\r\n\r\nuntil close"), "GET", False),
    ("http10", Raw(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi"), "GET", False),
    ("garbage", Raw(b"SSH-2.0-OpenSSH\r\n"), "GET", False),
    (
        "huge-head",
        Raw(HEAD_OK + b"X: " + b"a" * 70_000 + b"\r\nContent-Length: 0\r\n\r\n"),
        "GET",
        False,
    ),
    ("1xx", Respond(200, body=b"late", informational=(103,)), "GET", False),
    ("204", Respond(204), "GET", False),
    ("head", Respond(200, headers={"content-length": "5"}), "HEAD", False),
    ("partial-body", PartialBody(declared_length=100, body=b"x" * 10), "GET", False),  # EOF: h11
    ("partial-chunked", Raw(HEAD_OK + b"Transfer-Encoding: chunked\r\n\r\n5\r\nab"), "GET", False),
    ("eof-in-head", Raw(HEAD_OK + b"Content-Le"), "GET", True),
    ("close-before-read", CloseBeforeRead(), "GET", True),
    ("close-after-head", CloseAfterHead(), "POST", True),
    ("close-after-body", CloseAfterBody(), "GET", True),
    ("reset-after-body", CloseAfterBody(reset=True), "GET", True),
    ("stall", Stall(5.0), "GET", True),
    ("stale-keepalive", Respond(200, body=b"ok", close_after=True), "GET", True),
]


def _attempt(a: trio_retry.Attempt) -> tuple[Any, ...]:
    return (
        a.number,
        a.stage,
        a.evidence,
        a.status,
        a.http_version,
        a.connection_reused,
        a.bytes_sent,
        a.bytes_received,
        a.category,
        type(a.error).__name__,
        sorted(a.timings),
    )


async def _run(action: Action, method: str, fast: bool, deferrals: list[int]) -> list[Any]:
    server = FaultServer(http2=False)
    server.script(action, Respond(200, body=b"second"))
    seen: list[Any] = []
    attempts: list[trio_retry.Attempt] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        before = deferrals[0]
        async with trio_retry.Client(
            retry=ONE,
            http1_fast_path=fast,
            stage_timeouts=StageTimeouts(first_byte=0.5),
            max_header_bytes=65536,
            on_attempt=attempts.append,
        ) as client:
            content = b"body!" if method == "POST" else None
            try:
                with trio.fail_after(10):
                    r = await client.request(method, server.url + "/x", content=content)
                seen.append(
                    ("ok", r.status, r.reason, r.http_version, r.content, list(r.headers.items()))
                )
            except trio_retry.TrioRetryError as exc:
                seen.append(("error", type(exc).__name__, str(exc).replace(server.url, "URL")))
            await trio.sleep(0.05)  # a server close after the response reaches the client
            try:
                with trio.fail_after(10):
                    second = await client.get(server.url + "/y")
                seen.append(("second", second.status, second.content))
            except trio_retry.TrioRetryError as exc:  # Raw(close=False) answers nothing more
                seen.append(("second", type(exc).__name__, str(exc).replace(server.url, "URL")))
        seen.append([_attempt(a) for a in attempts])
        seen.append(deferrals[0] - before)
        nursery.cancel_scope.cancel()
    return seen


@pytest.mark.parametrize(
    ("name", "action", "method", "canonical"), CASES, ids=[c[0] for c in CASES]
)
async def test_fast_path_on_and_off_are_indistinguishable(
    name: str, action: Action, method: str, canonical: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    deferrals = [0]
    real_handover = ResponseReader.handover

    def counting_handover(self: ResponseReader) -> None:
        deferrals[0] += 1
        real_handover(self)

    monkeypatch.setattr(ResponseReader, "handover", counting_handover)
    fast = await _run(action, method, True, deferrals)
    slow = await _run(action, method, False, deferrals)
    assert slow[-1] == 0  # the h11 path never defers
    if name in ("head", "1xx", "204") or not canonical:
        # HEAD never takes the fast path; a 1xx/204 and the rest are h11's to read
        assert fast[-1] <= 1
    else:
        assert fast[-1] == 0, "the fast path handed a canonical exchange to h11"
    if not canonical and name not in ("head", "garbage", "huge-head", "http10"):
        assert fast[-1] == 1, "h11 must have decided this one"
    assert fast[:-1] == slow[:-1]


async def test_fast_path_option_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(TypeError, match="http1_fast_path"):
        trio_retry.Client(http1_fast_path=1)  # type: ignore[arg-type]
    assert trio_retry.Client()._config.http1_fast_path is True
    assert trio_retry.Client(http1_fast_path=False)._config.http1_fast_path is False
    for off in ("0", "false", "OFF", " no "):
        monkeypatch.setenv("TRIO_RETRY_HTTP1_FAST_PATH", off)
        assert trio_retry.Client()._config.http1_fast_path is False
    for given in ("1", "true", "on", ""):
        monkeypatch.setenv("TRIO_RETRY_HTTP1_FAST_PATH", given)
        assert trio_retry.Client()._config.http1_fast_path is True
        assert trio_retry.Client(http1_fast_path=False)._config.http1_fast_path is False
    monkeypatch.setenv("TRIO_RETRY_HTTP1_FAST_PATH", "maybe")
    with pytest.raises(ValueError, match="TRIO_RETRY_HTTP1_FAST_PATH"):
        trio_retry.Client()


async def test_env_var_turns_the_fast_path_off_on_the_wire(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the variable set to 0 a canonical exchange goes through h11 (no fast parser)."""
    used: list[bool] = []
    real_begin = ResponseReader.begin

    def spy(self: ResponseReader, request: WireRequest) -> bytes | None:
        head = real_begin(self, request)
        used.append(self.parser is not None)
        return head

    monkeypatch.setattr(ResponseReader, "begin", spy)
    server = FaultServer(http2=False)
    server.script(Respond(200, body=b"a"), Respond(200, body=b"b"))
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        async with trio_retry.Client() as client:
            assert (await client.get(server.url)).content == b"a"
        monkeypatch.setenv("TRIO_RETRY_HTTP1_FAST_PATH", "0")
        async with trio_retry.Client() as client:
            assert (await client.get(server.url)).content == b"b"
        nursery.cancel_scope.cancel()
    assert used == [True, False]
