"""The shape of a row of the RFC 9113 scenario table, and the pieces rows are built from.

A :class:`Row` names its clause and says, in one line, what the RFC requires; its ``play`` is
what the scripted server (``tests/support/h2_peer.py``) does once the client's request arrived
on stream 1 (a list of steps: bytes to write, or a frame of the client's to wait for), and its
:class:`Expect` is what the client must do about it, on the wire and to its caller:

- the one GOAWAY it sends before it closes (every row: the code of the connection error it
  detected, §5.4.1, or NO_ERROR when it closes a healthy connection, §6.8), with a
  last-stream-id of 0 (the server opened no stream) and nothing after it;
- the RST_STREAM frames it sends, stream and code (§5.4.2), and no other;
- its PING ACKs (§6.7) and SETTINGS ACKs (§6.5.3), exactly;
- what the caller gets: the response, or the exception's type, evidence and category.

``closes``: the client ends the connection of its own accord (a connection error): the test
waits for that before the client is closed. ``again``: a second call must then succeed on the
same connection (the error was the stream's, not the connection's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from h2.errors import ErrorCodes

from tests.support.h2_frames import (
    Frame,
    Kind,
    data_frame,
    header_block,
    headers_frame,
    ping_frame,
)
from tests.support.h2_peer import Peer
from trio_retry import ConnectionBroken, Evidence, FailureCategory, ProtocolFailed, TrioRetryError

__all__ = [
    "SID",
    "Expect",
    "Row",
    "Wait",
    "WaitData",
    "after_response",
    "broken_stream",
    "connection_error",
    "head",
    "ok",
    "ok_response",
    "play",
    "stream_error",
]

#: The stream of the client's first request on a fresh connection (RFC 9113 §5.1.1: odd, from 1).
SID = 1
#: A PING payload the rows send and expect back.
PAYLOAD = b"h2spec\x00\x00"


@dataclass(frozen=True)
class Wait:
    """A step of a play: wait for the client's frame of ``kind`` (on ``stream_id``, if given;
    with ``payload``, if given) before going on."""

    kind: int
    stream_id: int | None = None
    payload: bytes | None = None

    def matches(self, received: Frame) -> bool:
        return (
            received.kind == self.kind
            and (self.stream_id is None or received.stream_id == self.stream_id)
            and (self.payload is None or received.payload == self.payload)
        )


@dataclass(frozen=True)
class WaitData:
    """A step of a play: wait until the client sent ``octets`` of DATA on ``stream_id``."""

    stream_id: int
    octets: int

    def matches(self, peer: Peer) -> bool:
        return peer.data_sent(self.stream_id) >= self.octets


Step = bytes | Wait | WaitData


def play(*steps: Step) -> tuple[Step, ...]:
    """The steps of a play, in order: each ``bytes`` is one write."""
    return steps


async def run_play(steps: Sequence[Step], peer: Peer) -> None:
    for step in steps:
        if isinstance(step, Wait):
            await peer.seen(str(step), step.matches)
        elif isinstance(step, WaitData):
            await peer.seen(str(step), lambda _f, step=step: step.matches(peer))
        else:
            await peer.send(step)


@dataclass(frozen=True, kw_only=True)
class Expect:
    """What the client must do (see the module docstring)."""

    goaway: int = ErrorCodes.NO_ERROR
    resets: tuple[tuple[int, int], ...] = ()
    ping_acks: tuple[bytes, ...] = ()
    settings_acks: int = 1
    status: int | None = 200
    body: bytes | None = b"ok"
    error: type[TrioRetryError] | None = None
    evidence: Evidence | None = None
    category: FailureCategory | None = None
    #: Words the error's message must contain.
    message: str | None = None
    closes: bool = False
    again: bool = False
    #: The client's HEADERS frames (requests); ``None``: one per call made.
    requests: int | None = None
    #: Fields the response must carry (name, value).
    headers: tuple[tuple[str, str], ...] = ()
    #: The caller closes the client as soon as its call returns: whatever the client owed the
    #: server by then (acknowledgements, resets) must still go out before its GOAWAY.
    leaves_at_once: bool = False
    #: Frames the client must send besides, each as the start of its ``str()``
    #: (``"WINDOW_UPDATE[1]"``).
    sends: tuple[str, ...] = ()

    @property
    def window_kept(self) -> bool:
        """Whether the connection's receive window, as the client keeps it, must be the
        server's (every DATA octet the server sent counted against it, each WINDOW_UPDATE[0]
        the client sent added), with every octet counted credited back or owed in the next
        WINDOW_UPDATE (§6.9: no octet leaks from the server's window). The client credits back
        once half its window is due, so this is read from the client's connection, not the
        wire alone.

        Every row whose connection stays up checks it; not a row whose connection the client
        closes on a connection error (a GOAWAY with an error code), where the window is never
        used again. Derived, not switched on per row, so a new row is guarded without anyone
        remembering to ask."""
        return self.goaway == ErrorCodes.NO_ERROR


@dataclass(frozen=True, kw_only=True)
class Row:
    """One scenario: see the module docstring."""

    id: str
    clause: str
    says: str
    play: tuple[Step, ...]
    expect: Expect
    #: The server's first bytes (its connection preface); ``None``: an empty SETTINGS frame.
    first: bytes | None = None
    #: Whether the play waits for the client's request (a preface scenario may have none).
    request: bool = True
    #: The call's ``deadline=`` (seconds).
    deadline: float = 3.0
    #: A request body: the call is a POST carrying it (``None``: a GET).
    body: bytes | None = None


# --- frames the rows repeat -------------------------------------------------------------------


def head(
    *extra: tuple[str, str], status: str = "200", end_stream: bool = False, stream_id: int = SID
) -> bytes:
    """A response head on the request's stream."""
    return headers_frame(stream_id, [(":status", status), *extra], end_stream=end_stream)


def ok_response(stream_id: int = SID) -> bytes:
    """``200`` with the body ``ok``."""
    return head(("content-length", "2"), stream_id=stream_id) + data_frame(
        stream_id, b"ok", end_stream=True
    )


def block(status: str = "200", *extra: tuple[str, str]) -> bytes:
    return header_block([(":status", status), *extra])


PING = ping_frame(PAYLOAD)


# --- expectations the rows repeat -------------------------------------------------------------


def ok(**changes: object) -> Expect:
    """The call succeeds (``200 ok``) and the connection lives until the client closes it."""
    return Expect(**changes)  # type: ignore[arg-type]


def connection_error(
    code: int,
    *,
    evidence: Evidence = Evidence.SENT_NO_RESPONSE,
    error: type[TrioRetryError] = ProtocolFailed,
    category: FailureCategory = FailureCategory.REMOTE_PROTOCOL,
    message: str | None = None,
    **changes: object,
) -> Expect:
    """A connection error the client detects (§5.4.1): GOAWAY with ``code``, then close; the
    call fails with the evidence of the stage it reached."""
    fields: dict[str, object] = {
        "goaway": code,
        "status": None,
        "body": None,
        "error": error,
        "evidence": evidence,
        "category": category,
        "message": message,
        "closes": True,
    }
    return Expect(**(fields | changes))  # type: ignore[arg-type]


def after_response(code: int, **changes: object) -> Expect:
    """The response arrived whole, then the server broke the connection: the caller has its
    response, and the client sends GOAWAY with ``code`` and closes."""
    fields: dict[str, object] = {"goaway": code, "closes": True}
    return Expect(**(fields | changes))  # type: ignore[arg-type]


def stream_error(
    code: int,
    *,
    evidence: Evidence = Evidence.SENT_NO_RESPONSE,
    error: type[TrioRetryError] = ProtocolFailed,
    category: FailureCategory = FailureCategory.REMOTE_PROTOCOL,
    message: str | None = None,
    **changes: object,
) -> Expect:
    """A stream error the client detects (§5.4.2): RST_STREAM with ``code`` on that stream
    only; the connection carries on (a second call reuses it)."""
    fields: dict[str, object] = {
        "resets": ((SID, code),),
        "status": None,
        "body": None,
        "error": error,
        "evidence": evidence,
        "category": category,
        "message": message,
        "again": True,
    }
    return Expect(**(fields | changes))  # type: ignore[arg-type]


def broken_stream(
    evidence: Evidence,
    category: FailureCategory = FailureCategory.CONNECTION_BROKEN,
    error: type[TrioRetryError] = ConnectionBroken,
    **changes: object,
) -> Expect:
    """The server reset the stream (nothing for the client to send); the connection carries
    on."""
    fields: dict[str, object] = {
        "status": None,
        "body": None,
        "error": error,
        "evidence": evidence,
        "category": category,
        "again": True,
    }
    return Expect(**(fields | changes))  # type: ignore[arg-type]


__all__ += ["PAYLOAD", "PING", "Kind", "block", "run_play"]
