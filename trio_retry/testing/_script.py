"""Fault scripts: what the test server should do with each request, as plain data.

This module is pure: no sockets, no Trio, no clock. It holds

* the actions (`Respond`, `CloseBeforeRead`, ...), frozen values a test queues on a
  `FaultServer`;
* `Handler`, the action that asks a function of the test what to do;
* `RecordedRequest`, the server's record of one request;
* small helpers the wire code uses to turn an action into response headers and body chunks.

"Executed" is defined here, once, by `reads_body`: an action that reads the whole request
body runs the request's side effect at the moment the last body byte arrives, whatever it does
afterwards. Actions that act before the body is read never execute the request.
"""

from __future__ import annotations

import json
import math
import types
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias
from urllib.parse import parse_qsl

from ._frame_faults import ShutWindow, StopReading, StreamFrames
from ._replies import (
    HeadersInput,
    body_allowed,
    h2_response_headers,
    normalize_headers,
    paced_chunks,
    response_headers,
)

__all__ = [
    "Action",
    "AfterBody",
    "CloseAfterBody",
    "CloseAfterHead",
    "CloseBeforeRead",
    "EndlessBody",
    "GoAway",
    "H2_ONLY",
    "H3_TOO",
    "Handler",
    "HeaderPairs",
    "HeadersInput",
    "PartialBody",
    "Raw",
    "RecordedRequest",
    "RefuseStream",
    "RequestHandler",
    "Resolved",
    "Respond",
    "ScriptError",
    "ShutWindow",
    "Stall",
    "StopReading",
    "StreamEnd",
    "StreamFrames",
    "StreamedBody",
    "body_allowed",
    "check_action",
    "check_resolved",
    "h2_response_headers",
    "normalize_headers",
    "paced_chunks",
    "path_only",
    "reads_body",
    "response_headers",
]

HeaderPairs: TypeAlias = tuple[tuple[str, str], ...]
_NO_PARAMS: Mapping[str, str] = types.MappingProxyType({})


class ScriptError(Exception):
    """A script asked for something the connection cannot do.

    Raised out of `FaultServer.serve` (and so into the test's nursery) when, for example,
    `RefuseStream` or `GoAway` is applied to an HTTP/1.1 request. It is a bug in the test,
    not a fault of the client, so it is loud on purpose.
    """


def _unframed(kind: str, status: int, headers: HeadersInput) -> HeaderPairs:
    """The headers of a body without a length (`EndlessBody`, `StreamedBody`), checked with
    its status; the server sets the framing itself."""
    if not 200 <= status <= 599:
        raise ValueError(f"final status must be 200..599, got {status}")
    pairs = normalize_headers(headers)
    if any(name.lower() in ("content-length", "transfer-encoding") for name, _ in pairs):
        raise ValueError(
            f"{kind} sets the framing itself: no Content-Length or Transfer-Encoding in its headers"
        )
    return pairs


def _check_delay(name: str, value: float) -> None:
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


@dataclass(frozen=True, slots=True, init=False)
class Respond:
    """Answer the request after reading all of it. Executed.

    Order on the wire: wait `delay` seconds, send each status in `informational` (1xx, e.g.
    ``(103,)``), send the final head, then `body` (paced at `body_rate` bytes per second when
    given, in small chunks). `Content-Length` is added from `body` unless `headers` carry a
    `Content-Length` or `Transfer-Encoding`.

    `close_after=True` ends the connection right after the response. On HTTP/1.1 the response
    carries no ``Connection: close``, so the client's pool keeps a connection that is already
    closed (a stale keep-alive connection). On HTTP/2 the server sends ``GOAWAY(NO_ERROR)``
    with the highest stream id it has seen and closes once the streams it still serves finish.
    """

    status: int
    headers: HeaderPairs
    body: bytes
    delay: float
    informational: tuple[int, ...]
    body_rate: float | None
    close_after: bool

    def __init__(
        self,
        status: int = 200,
        headers: HeadersInput = (),
        body: bytes = b"",
        delay: float = 0.0,
        informational: Iterable[int] = (),
        body_rate: float | None = None,
        close_after: bool = False,
    ) -> None:
        if not 200 <= status <= 599:
            raise ValueError(f"final status must be 200..599, got {status}")
        infos = tuple(informational)
        for info in infos:
            # 101 switches protocols, which neither h11 nor h2 lets a server script.
            if not 100 <= info <= 199 or info == 101:
                raise ValueError(f"informational status must be 1xx other than 101, got {info}")
        _check_delay("delay", delay)
        if body_rate is not None and not (body_rate > 0 and math.isfinite(body_rate)):
            raise ValueError(f"body_rate must be > 0 bytes/second, got {body_rate!r}")
        object.__setattr__(self, "status", status)
        object.__setattr__(self, "headers", normalize_headers(headers))
        object.__setattr__(self, "body", bytes(body))
        object.__setattr__(self, "delay", float(delay))
        object.__setattr__(self, "informational", infos)
        object.__setattr__(self, "body_rate", body_rate)
        object.__setattr__(self, "close_after", close_after)


@dataclass(frozen=True, slots=True)
class CloseBeforeRead:
    """Drop the connection before reading the request. Never executed.

    HTTP/1.1: the server needs the request line and headers to pick a routed action, so it
    parses the head out of the bytes that have already arrived, then closes without reading
    further (the record's body is always ``b""``). HTTP/2: on the stream's HEADERS frame the
    whole connection is closed, without GOAWAY. `reset=True` sends a TCP RST instead of a FIN
    (no TLS close_notify).
    """

    reset: bool = False


@dataclass(frozen=True, slots=True)
class CloseAfterHead:
    """Read the request head, then drop the connection without reading the body. Never executed.

    The record's body holds whatever body bytes arrived together with the head (HTTP/1.1) or
    ``b""`` (HTTP/2, where the connection closes on the HEADERS frame, without GOAWAY).
    `reset=True` sends a TCP RST instead of a FIN.
    """

    reset: bool = False


@dataclass(frozen=True, slots=True)
class CloseAfterBody:
    """Read the whole request (executing it), then drop the connection without answering.

    The request **is** executed: this is the server that did the work and died before replying.
    On HTTP/2 the whole connection is dropped, without GOAWAY. `reset=True` sends a TCP RST.
    """

    reset: bool = False


@dataclass(frozen=True, slots=True)
class PartialBody:
    """Read the whole request (executed), send a head promising `declared_length` body bytes,
    send `body` (shorter), then break off.

    HTTP/1.1: close the connection (FIN) after the short body, or reset it (RST) when `reset`.
    HTTP/2: `reset=False` ends the stream with ``RST_STREAM(INTERNAL_ERROR)`` and keeps the
    connection; `reset=True` resets the whole TCP connection instead.
    """

    status: int
    headers: HeaderPairs
    declared_length: int
    body: bytes
    reset: bool

    def __init__(
        self,
        status: int = 200,
        headers: HeadersInput = (),
        declared_length: int = 1000,
        body: bytes = b"x" * 100,
        reset: bool = False,
    ) -> None:
        if not 200 <= status <= 599:
            raise ValueError(f"final status must be 200..599, got {status}")
        if not 0 <= len(body) < declared_length:
            raise ValueError(
                f"body ({len(body)} bytes) must be shorter than declared_length ({declared_length})"
            )
        object.__setattr__(self, "status", status)
        object.__setattr__(self, "headers", normalize_headers(headers))
        object.__setattr__(self, "declared_length", declared_length)
        object.__setattr__(self, "body", bytes(body))
        object.__setattr__(self, "reset", reset)


@dataclass(frozen=True, slots=True, init=False)
class Raw:
    """Read the whole request (executed), then write `data` verbatim instead of a response.

    For hostile-server tests: garbage instead of HTTP, an invalid ``Content-Length``, broken
    chunked encoding, an illegal HTTP/2 frame. Nothing checks the bytes.

    HTTP/1.1: `data` goes where the response would. HTTP/2: `data` is written into the
    connection's byte stream after the frames already queued, so the client parses it as
    frames (of any stream: the test knows the ids, the first request of a connection is stream
    1); the server's own h2 state never learns about them. `close=True` then closes the
    connection (FIN, after `data`); `close=False` sends nothing more: HTTP/1.1 keeps the
    connection open, discarding what arrives, until the client closes it or the idle timeout
    passes; HTTP/2 carries on serving the connection's other streams.
    """

    data: bytes
    close: bool

    def __init__(self, data: bytes, close: bool = True) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"Raw data must be bytes, got {type(data).__name__}")
        object.__setattr__(self, "data", bytes(data))
        object.__setattr__(self, "close", close)


@dataclass(frozen=True, slots=True, init=False)
class EndlessBody:
    """Read the whole request (executed), send a head without a length, then `chunk` after
    `chunk`, without end.

    HTTP/1.1: chunked transfer coding (an HTTP/1.0 client gets a close-delimited body); HTTP/2:
    DATA frames within the client's flow-control windows. With `rate` (bytes per second) the
    server pauses ``len(chunk) / rate`` seconds after each chunk; without it, it sends as fast as
    the client reads. It stops when the client closes or resets the connection (or the stream),
    or stops reading for `write_timeout`; as a safety bound it gives up after `seconds` (then
    the connection is reset). Responses that carry no body (``HEAD``, 204, 304) end at once.
    """

    status: int
    headers: HeaderPairs
    chunk: bytes
    rate: float | None
    seconds: float

    def __init__(
        self,
        status: int = 200,
        headers: HeadersInput = (),
        chunk: bytes = b"x" * 16384,
        rate: float | None = None,
        seconds: float = 60.0,
    ) -> None:
        pairs = _unframed(type(self).__name__, status, headers)
        if not chunk:
            raise ValueError("EndlessBody needs a non-empty chunk")
        if rate is not None and not (rate > 0 and math.isfinite(rate)):
            raise ValueError(f"rate must be > 0 bytes/second, got {rate!r}")
        if not (seconds > 0 and math.isfinite(seconds)):
            raise ValueError(f"seconds must be a finite number > 0, got {seconds!r}")
        object.__setattr__(self, "status", status)
        object.__setattr__(self, "headers", pairs)
        object.__setattr__(self, "chunk", bytes(chunk))
        object.__setattr__(self, "rate", rate)
        object.__setattr__(self, "seconds", float(seconds))

    def pause(self) -> float:
        """Seconds to wait after each chunk (0 without a rate)."""
        return len(self.chunk) / self.rate if self.rate is not None else 0.0


def _part(part: object) -> bytes | float:
    if isinstance(part, (bytes, bytearray, memoryview)):
        return bytes(part)
    if not isinstance(part, (int, float)) or isinstance(part, bool):
        raise TypeError(f"StreamedBody parts are bytes or numbers (a pause), got {part!r}")
    _check_delay("a StreamedBody pause", part)
    return float(part)


#: How a `StreamedBody` ends once its parts are sent.
StreamEnd: TypeAlias = Literal["finish", "break", "reset", "hang"]
_STREAM_ENDS = ("finish", "break", "reset", "hang")


@dataclass(frozen=True, slots=True, init=False)
class StreamedBody:
    """Read the whole request (executed), send a head without a length, then `parts` in order
    (``bytes``: written at once; a number: a pause of that many seconds), then end as `end`
    says. A server-sent event stream, its heartbeats and its breaks are scripted with it.

    `end`: ``"finish"`` ends the body properly (HTTP/1.1: the last chunk; HTTP/2: END_STREAM;
    HTTP/3: FIN); ``"break"`` and ``"reset"`` break it off as `PartialBody` does with
    ``reset=False`` (HTTP/1.1: FIN mid-body; HTTP/2 and HTTP/3: the stream reset) and
    ``reset=True`` (the whole connection); ``"hang"`` sends nothing more and keeps the stream
    open until the client leaves. `seconds` bounds the whole body: when it passes, the body
    is broken off. A response that carries no body (``HEAD``, 204, 304) ends with its head; an
    HTTP/1.0 client's break looks like an end (close-delimited).
    """

    parts: tuple[bytes | float, ...]
    status: int
    headers: HeaderPairs
    end: StreamEnd
    seconds: float

    def __init__(
        self,
        parts: Iterable[bytes | float],
        *,
        status: int = 200,
        headers: HeadersInput = (),
        end: StreamEnd = "finish",
        seconds: float = 60.0,
    ) -> None:
        pairs = _unframed(type(self).__name__, status, headers)
        checked = tuple(_part(part) for part in parts)
        if end not in _STREAM_ENDS:
            raise ValueError(f"end must be one of {', '.join(_STREAM_ENDS)}, got {end!r}")
        if not (seconds > 0 and math.isfinite(seconds)):
            raise ValueError(f"seconds must be a finite number > 0, got {seconds!r}")
        object.__setattr__(self, "parts", checked)
        object.__setattr__(self, "status", status)
        object.__setattr__(self, "headers", pairs)
        object.__setattr__(self, "end", end)
        object.__setattr__(self, "seconds", float(seconds))


@dataclass(frozen=True, slots=True)
class Stall:
    """Read the whole request (executed), wait `seconds` before any response byte, then apply
    `then` (by default a plain ``Respond(200)``)."""

    seconds: float
    then: AfterBody = field(default_factory=Respond)

    def __post_init__(self) -> None:
        _check_delay("seconds", self.seconds)
        if not isinstance(self.then, _AFTER_BODY_TYPES):
            raise TypeError(f"Stall.then must act after the body, got {self.then!r}")


@dataclass(frozen=True, slots=True)
class RefuseStream:
    """HTTP/2 and HTTP/3: answer the stream's HEADERS with ``RST_STREAM(REFUSED_STREAM)``
    (code 7; HTTP/3: RESET_STREAM and STOP_SENDING with ``H3_REQUEST_REJECTED``) before reading
    its body. Never executed; the connection stays usable.

    On an HTTP/1.1 request this is a `ScriptError`.
    """


@dataclass(frozen=True, slots=True)
class GoAway:
    """HTTP/2 and HTTP/3: when popped for stream S, send ``GOAWAY(last_stream_id, error_code)``
    (HTTP/3: GOAWAY with the next stream id above `last_stream_id`, no error code; see
    ``_h3_actions.py``).

    `last_stream_id=None` means S itself. Streams with an id at or below it carry on and are
    answered by their own actions (S by `then`, when S is at or below it). Streams above it
    (those already open and any that arrive later) are recorded as not executed and get no
    response at all, not even a RST_STREAM: the client must infer from the GOAWAY. The
    connection closes once the remaining streams finish. A stream above the last id that had
    already executed stays recorded as executed: the record is the truth, even when a script
    makes the GOAWAY lie.

    On an HTTP/1.1 request this is a `ScriptError`.
    """

    last_stream_id: int | None = None
    error_code: int = 0
    then: AfterBody = field(default_factory=Respond)

    def __post_init__(self) -> None:
        if self.last_stream_id is not None and not 0 <= self.last_stream_id < 2**31:
            raise ValueError(f"last_stream_id must be 0..2**31-1, got {self.last_stream_id}")
        if not 0 <= self.error_code < 2**32:
            raise ValueError(f"error_code must be 0..2**32-1, got {self.error_code}")
        if not isinstance(self.then, _AFTER_BODY_TYPES):
            raise TypeError(f"GoAway.then must act after the body, got {self.then!r}")


#: What `Handler` calls: the request's record in, an action (or an awaitable of one) out.
RequestHandler: TypeAlias = Callable[["RecordedRequest"], "Resolved | Awaitable[Resolved]"]


@dataclass(frozen=True, slots=True)
class Handler:
    """Read the whole request, call `handler` with its `RecordedRequest` (body complete, path
    parameters in ``params``), then apply the action it returns (a plain function or an
    ``async def``; `FaultServer.route` wraps a bare callable in one).

    Unlike the other actions a `Handler` is not used up: it stays at the head of its queue and
    answers every request that reaches it, or `times` requests when given. Whether the
    request is executed is decided by the returned action: `CloseBeforeRead`,
    `CloseAfterHead` and `RefuseStream` leave it not executed (the handler played a server
    that refused it, after reading it all); any other action executes it when the handler
    returns. A handler that raises, or returns something that is not an action (or another
    `Handler`), is a `ScriptError`.
    """

    handler: RequestHandler
    times: int | None = None

    def __post_init__(self) -> None:
        if not callable(self.handler):
            raise TypeError(f"Handler needs a callable, got {self.handler!r}")
        if self.times is not None and (isinstance(self.times, bool) or self.times < 1):
            raise ValueError(f"Handler times must be None or >= 1, got {self.times!r}")

    @property
    def name(self) -> str:
        """The handler's name, for messages (``handler get_user``)."""
        return getattr(self.handler, "__qualname__", None) or repr(self.handler)


#: What a `Handler` may return: any action but another `Handler`.
Resolved: TypeAlias = (
    Respond
    | CloseBeforeRead
    | CloseAfterHead
    | CloseAfterBody
    | Stall
    | PartialBody
    | RefuseStream
    | GoAway
    | Raw
    | EndlessBody
    | StreamedBody
    | StopReading
    | ShutWindow
    | StreamFrames
)
#: Anything a script may hold.
Action: TypeAlias = Resolved | Handler
#: Actions that run once the whole request has been read (allowed as `Stall.then`).
AfterBody: TypeAlias = (
    Respond | PartialBody | CloseAfterBody | Stall | Raw | EndlessBody | StreamedBody | StreamFrames
)

_ACTION_TYPES = (
    Respond,
    CloseBeforeRead,
    CloseAfterHead,
    CloseAfterBody,
    Stall,
    PartialBody,
    RefuseStream,
    GoAway,
    Raw,
    EndlessBody,
    StreamedBody,
    StopReading,
    ShutWindow,
    StreamFrames,
    Handler,
)
_RESOLVED_TYPES = _ACTION_TYPES[:-1]
#: Actions only an HTTP/2 stream can carry out (a `ScriptError` on an HTTP/1.1 request).
H2_ONLY: tuple[type, ...] = (RefuseStream, GoAway, StopReading, ShutWindow, StreamFrames)
#: Those of `H2_ONLY` an HTTP/3 stream carries out too.
H3_TOO: tuple[type, ...] = (RefuseStream, GoAway, StreamFrames)
_AFTER_BODY_TYPES = (
    Respond, PartialBody, CloseAfterBody, Stall, Raw, EndlessBody, StreamedBody, StreamFrames
)  # fmt: skip


def reads_body(action: Action) -> bool:
    """True when `action` reads the whole request body, and so executes the request.

    Only `CloseBeforeRead`, `CloseAfterHead` and `RefuseStream` act before the body. `GoAway`
    reads the body of its own stream (and hands it to `then`) when that stream is at or below
    the last stream id.
    """
    return not isinstance(
        action, (CloseBeforeRead, CloseAfterHead, RefuseStream, StopReading, ShutWindow)
    )


def check_action(action: object) -> Action:
    """`action` itself, or `TypeError` when it is not an action."""
    if not isinstance(action, _ACTION_TYPES):
        raise TypeError(f"not a fault-server action: {action!r}")
    return action


def check_resolved(action: object) -> Resolved:
    """`action` itself when a `Handler` may return it, else `TypeError`."""
    if not isinstance(action, _RESOLVED_TYPES):
        raise TypeError(f"not a fault-server action (a Handler must return one): {action!r}")
    return action


def path_only(target: str) -> str:
    """`target` without its query string."""
    return target.split("?", 1)[0]


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """What the server received for one request, and what it did with it.

    `headers` are (lowercased name, value) pairs as received; for HTTP/2 the pseudo-headers
    (``:method``, ``:path``, ``:scheme``, ``:authority``) come first. `body` is every body byte
    received so far (complete when `executed`). `time` is ``trio.current_time()`` when the head
    arrived. `executed` is True once the request's side effect happened, that is once an action
    that reads the whole body has read it (see `reads_body`); a request whose body was not
    fully received is never executed. `action` is the action applied (for an HTTP/2 stream
    above a GOAWAY's last stream id, that `GoAway`; for a `Handler`, the action it returned,
    once it has returned). `params` holds the path parameters of the route pattern that
    matched (``{"id": "7"}`` for ``/users/{id}``), percent-decoded; empty otherwise.
    `http_version` is ``"HTTP/1.1"`` (or ``"HTTP/1.0"``), ``"HTTP/2"`` or ``"HTTP/3"``.
    `early_data` is True when the request's head arrived in QUIC 0-RTT early data, before the
    handshake completed (HTTP/3 only; always False otherwise).
    """

    method: str
    path: str
    headers: HeaderPairs
    body: bytes
    connection_id: int
    http_version: str
    stream_id: int | None
    time: float
    executed: bool
    action: Action
    params: Mapping[str, str] = field(default_factory=lambda: _NO_PARAMS, hash=False)
    early_data: bool = False

    @property
    def query(self) -> dict[str, str]:
        """The query string's parameters, decoded; the first value of a repeated name."""
        out: dict[str, str] = {}
        for name, value in self.query_items:
            out.setdefault(name, value)
        return out

    @property
    def query_items(self) -> tuple[tuple[str, str], ...]:
        """Every (name, value) pair of the query string, decoded, in order."""
        _, _, query = self.path.partition("?")
        return tuple(parse_qsl(query, keep_blank_values=True))

    @property
    def text(self) -> str:
        """The body decoded as UTF-8 (undecodable bytes replaced)."""
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body parsed as JSON (``json.JSONDecodeError``, a `ValueError`, when it is not)."""
        return json.loads(self.body)

    def header(self, name: str) -> str | None:
        """The first value of header `name` (case-insensitive), or None."""
        name = name.lower()
        for key, value in self.headers:
            if key == name:
                return value
        return None

    def matches(self, method: str | None = None, path: str | None = None) -> bool:
        """True when the request has `method` (any case) and `path` (exact, or equal to the
        path without its query string); None matches anything."""
        if method is not None and self.method.upper() != method.upper():
            return False
        return path is None or path in (self.path, path_only(self.path))
