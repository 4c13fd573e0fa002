"""What the HTTP/1.1, HTTP/2 and HTTP/3 connection handlers share: how a connection ends, the
timeouts, and the request book-keeping that turns into `RecordedRequest` values."""

from __future__ import annotations

import enum
import inspect
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

import h2.exceptions
import h11
import trio

from ._routes import Script
from ._script import Action, Handler, RecordedRequest, Resolved, ScriptError, check_resolved

__all__ = ["DISCONNECTS", "ConnContext", "Ending", "Recorder", "Slot", "Timeouts", "ending_for"]


class Ending(enum.Enum):
    """How a connection handler wants its connection ended."""

    #: Graceful: TLS close_notify, then FIN, then read and discard until the peer closes (so
    #: unread request bytes cannot turn the close into a RST), bounded by the linger time.
    CLOSE = "close"
    #: A real TCP RST: SO_LINGER (1, 0), then close. No TLS close_notify.
    RESET = "reset"
    #: The peer is gone or broke the protocol: close the socket without ceremony.
    ABORT = "abort"


def ending_for(reset: bool) -> Ending:
    """`Ending.RESET` for a script's ``reset=True``, else `Ending.CLOSE`."""
    return Ending.RESET if reset else Ending.CLOSE


#: Errors that mean "this connection is over" and never "the server is broken": the client
#: went away, reset, spoke bad HTTP or TLS, or was too slow. A handler that sees one drops its
#: connection and nothing else. (ssl.SSLError is an OSError; listed for the reader.)
DISCONNECTS: tuple[type[BaseException], ...] = (
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    trio.TooSlowError,
    ssl.SSLError,
    OSError,
    h11.ProtocolError,
    h2.exceptions.ProtocolError,
)


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Every wait of the server is bounded by one of these (seconds)."""

    #: No request in progress (before the first byte of a request; HTTP/2 with no open stream).
    idle: float = 30.0
    #: From a request's first byte to its complete head; and between two reads of a body.
    read: float = 10.0
    #: One write to the socket, or waiting for an HTTP/2 flow-control window.
    write: float = 10.0
    #: After a graceful close, how long to drain what the client still sends.
    linger: float = 2.0


@dataclass(slots=True)
class Slot:
    """The mutable, in-progress form of one `RecordedRequest`."""

    index: int
    method: str
    path: str
    headers: tuple[tuple[str, str], ...]
    connection_id: int
    http_version: str
    stream_id: int | None
    time: float
    action: Action
    params: Mapping[str, str]
    body: bytearray = field(default_factory=bytearray)
    executed: bool = False
    early_data: bool = False

    def snapshot(self) -> RecordedRequest:
        return RecordedRequest(
            method=self.method,
            path=self.path,
            headers=self.headers,
            body=bytes(self.body),
            connection_id=self.connection_id,
            http_version=self.http_version,
            stream_id=self.stream_id,
            time=self.time,
            executed=self.executed,
            action=self.action,
            params=self.params,
            early_data=self.early_data,
        )


class Recorder:
    """The script and the record of one server, shared by all its connections."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[RecordedRequest] = []

    def open(
        self,
        *,
        method: str,
        path: str,
        headers: tuple[tuple[str, str], ...],
        connection_id: int,
        http_version: str,
        stream_id: int | None,
        action: Action,
        params: Mapping[str, str],
        early_data: bool = False,
    ) -> Slot:
        """Record a request whose head just arrived (not executed yet); `early_data`: it
        arrived in QUIC 0-RTT."""
        slot = Slot(
            index=len(self.requests),
            method=method,
            path=path,
            headers=headers,
            connection_id=connection_id,
            http_version=http_version,
            stream_id=stream_id,
            time=trio.current_time(),
            action=action,
            params=params,
            early_data=early_data,
        )
        self.requests.append(slot.snapshot())
        return slot

    def commit(self, slot: Slot) -> None:
        """Publish the slot's current state (body so far, executed) in `requests`."""
        self.requests[slot.index] = slot.snapshot()

    async def resolve(self, slot: Slot, handler: Handler) -> Resolved:
        """Call `handler` with the request's record (its body complete) and return the action
        it chose, which becomes the record's action.

        A handler that raises, or returns something other than an action, is a bug in the
        test: `ScriptError` (with the handler's exception as its cause). Cancellation
        propagates unchanged.
        """
        self.commit(slot)
        where = f"{slot.method} {slot.path}"
        try:
            result = handler.handler(slot.snapshot())
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:
            raise ScriptError(f"handler {handler.name} failed on {where}: {exc!r}") from exc
        try:
            action = check_resolved(result)
        except TypeError:
            raise ScriptError(
                f"handler {handler.name} returned {result!r} for {where}: a handler must "
                "return an action (Respond(...), or any fault but another Handler)"
            ) from None
        slot.action = action
        self.commit(slot)
        return action


@dataclass(frozen=True, slots=True)
class ConnContext:
    """What a protocol handler gets: the byte stream and the server's shared state."""

    stream: trio.abc.Stream
    connection_id: int
    recorder: Recorder
    timeouts: Timeouts
    #: The ``Alt-Svc`` value every final response carries (None: no header).
    alt_svc: str | None = None
