"""What the HTTP/2 and HTTP/3 connection handlers share for one request stream: its task's
state, reading its request head, waiting for its body, and writing a scripted response through
the protocol's own send functions (the connection-level consequences stay with each protocol).
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import trio

from ._common import Slot
from ._replies import body_allowed, h2_response_headers
from ._script import EndlessBody, Respond

__all__ = ["RequestHead", "RequestStream", "SendBody", "SendHeaders", "endless", "respond"]

HeaderPairs = Sequence[tuple[str, str]]


class SendHeaders(Protocol):
    """Queue a header block (``:status`` first) on the stream."""

    def __call__(self, headers: HeaderPairs, *, end_stream: bool) -> None: ...


class SendBody(Protocol):
    """Send body bytes on the stream, paced at `rate` bytes/s (None: at once)."""

    def __call__(self, body: bytes, rate: float | None, *, end_stream: bool) -> Awaitable[None]: ...


@dataclass(frozen=True, slots=True)
class RequestHead:
    """A request's header block, as the script and the record see it."""

    #: Names lowercased, pseudo-headers included, in order.
    headers: tuple[tuple[str, str], ...]
    method: str
    path: str
    #: ``expect: 100-continue``.
    expect_100: bool

    @classmethod
    def parse(cls, raw: Iterable[tuple[bytes | str, bytes | str]]) -> RequestHead:
        headers = tuple((_text(n).lower(), _text(v)) for n, v in raw)
        pseudo = {name: value for name, value in headers if name.startswith(":")}
        expect_100 = any(n == "expect" and v.lower() == "100-continue" for n, v in headers)
        return cls(headers, pseudo.get(":method", ""), pseudo.get(":path", ""), expect_100)


def _text(value: bytes | str) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


class RequestStream:
    """A request stream whose action runs in a task."""

    def __init__(self, stream_id: int, slot: Slot, expect_100: bool) -> None:
        self.stream_id = stream_id
        self.slot = slot
        self.expect_100 = expect_100
        self.sent_100 = False
        self.scope = trio.CancelScope()
        self.body_done = trio.Event()
        self.body_scope: trio.CancelScope | None = None
        self.abandoned = False

    def abandon(self) -> None:
        """Stop serving the stream (reset by the client, or beyond a GOAWAY)."""
        self.abandoned = True
        self.scope.cancel()

    async def wait_body(self, read_timeout: float, send_headers: SendHeaders) -> bool:
        """Wait for the end of the request body (sending ``100 Continue`` first when the
        client expects it); False if it stalled for `read_timeout`. The connection pushes
        `body_scope`'s deadline back each time body bytes arrive."""
        if self.expect_100 and not self.body_done.is_set():
            send_headers(((":status", "100"),), end_stream=False)
            self.sent_100 = True
        with trio.move_on_after(read_timeout) as scope:
            self.body_scope = scope
            await self.body_done.wait()
        self.body_scope = None
        return self.body_done.is_set()


async def respond(
    stream: RequestStream,
    action: Respond,
    method: str,
    send_headers: SendHeaders,
    send_body: SendBody,
) -> None:
    """`Respond` on a stream: its delay, its 1xx heads (a 100 already sent for
    ``expect: 100-continue`` is not sent twice), the final head and the paced body. What
    ``close_after`` means is the caller's."""
    if action.delay:
        await trio.sleep(action.delay)
    skip_100 = stream.sent_100
    for status in action.informational:
        if status == 100 and skip_100:
            skip_100 = False
            continue
        send_headers(((":status", str(status)),), end_stream=False)
    has_body = bool(action.body) and body_allowed(action.status, method)
    headers = h2_response_headers(action.status, action.headers, len(action.body))
    send_headers(headers, end_stream=not has_body)
    if has_body:
        await send_body(action.body, action.body_rate, end_stream=True)


async def endless(
    action: EndlessBody, method: str, send_headers: SendHeaders, send_body: SendBody
) -> bool:
    """`EndlessBody` on a stream: a head with no length, then its chunk over and over until
    ``action.seconds`` pass (or the stream's task is cancelled, or a send times out). False
    when the response may have no body (HEAD, 204, 304): the head ended the stream; True when
    the body was sent and the caller must break the stream or connection off."""
    has_body = body_allowed(action.status, method)
    headers = [
        (name, value)
        for name, value in h2_response_headers(action.status, action.headers, 0)
        if name != "content-length"  # no length: the body has no end
    ]
    send_headers(headers, end_stream=not has_body)
    if not has_body:
        return False
    pause = action.pause()
    with trio.move_on_after(action.seconds):
        while True:
            await send_body(action.chunk, None, end_stream=False)
            if pause:
                await trio.sleep(pause)
            else:
                await trio.lowlevel.checkpoint()
    return True
