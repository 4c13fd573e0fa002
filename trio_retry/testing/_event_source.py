"""`EventSource`: a scripted server-sent events endpoint (``text/event-stream``) for a
`FaultServer` route, that resumes after the client's ``Last-Event-ID`` and drops, ends or
stalls its streams where the test says. Pure: each request's record in, a `StreamedBody` (or a
`Respond`) out; the server carries it out on HTTP/1.1, HTTP/2 and HTTP/3 alike."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from .._sse import SSEEvent
from ._replies import HeadersInput, normalize_headers
from ._script import RecordedRequest, Respond, StreamedBody, StreamEnd

__all__ = ["EventSource"]

_HEARTBEAT = b": heartbeat\n\n"


def _one_line(name: str, value: str) -> None:
    if "\r" in value or "\n" in value:
        raise ValueError(f"an event's {name} is sent on one line: {value!r} holds CR or LF")


class EventSource:
    """A scripted event stream: give it to `FaultServer.route` (``server.route("GET",
    "/events", source)``); it answers every request of the route.

    Each request resumes after the event whose ``id`` equals its ``Last-Event-ID`` header
    (from the first event when it sent none, or an ID no event has), and its response sends
    the events that follow, each encoded by `encode`: `per_connection` of them (an int: that
    many each time; a sequence: the k-th response sends the k-th count, later ones all that
    remain; None: all that remain), `interval` seconds apart. A response that leaves events
    unsent then ends as `end` says (``"break"``: broken off mid-body; ``"finish"``: the body
    ends properly; ``"reset"``: the connection reset; ``"hang"``: silence until the client
    leaves); with `torn` it first sends the first half of the next event, which the client
    must discard. A response that sent the last event finishes properly, and a request whose
    ``Last-Event-ID`` is the last event's ID is answered `done_status` (204: "no more", the
    standard's way to stop a client reconnecting).

    Every response starts with a ``retry:`` field when `retry` is given (milliseconds), and
    sends a ``: heartbeat`` comment every `heartbeat` seconds while it waits between events
    (never while it hangs). `content_type` and `status` may be set wrong on purpose.

    `last_event_ids` records each request's ``Last-Event-ID`` (None: the header was absent),
    in arrival order.
    """

    def __init__(
        self,
        events: Iterable[SSEEvent],
        *,
        per_connection: int | Sequence[int] | None = None,
        end: StreamEnd = "break",
        torn: bool = False,
        interval: float = 0.0,
        heartbeat: float | None = None,
        retry: int | None = None,
        status: int = 200,
        content_type: str = "text/event-stream",
        headers: HeadersInput = (),
        done_status: int = 204,
        seconds: float = 60.0,
    ) -> None:
        self.events = tuple(events)
        for event in self.events:
            if not isinstance(event, SSEEvent):
                raise TypeError(f"EventSource events are SSEEvent values, got {event!r}")
            self.encode(event)  # refuses what cannot be sent
        counts = [per_connection] if isinstance(per_connection, int) else per_connection
        if counts is not None and any(isinstance(n, bool) or n < 0 for n in counts):
            raise ValueError(f"per_connection counts must be >= 0, got {per_connection!r}")
        if not (interval >= 0 and math.isfinite(interval)):
            raise ValueError(f"interval must be a finite number >= 0, got {interval!r}")
        if heartbeat is not None and not (heartbeat > 0 and math.isfinite(heartbeat)):
            raise ValueError(f"heartbeat must be a finite number > 0 or None, got {heartbeat!r}")
        if retry is not None and (isinstance(retry, bool) or retry < 0):
            raise ValueError(f"retry must be milliseconds >= 0 or None, got {retry!r}")
        self.per_connection = per_connection
        self.end: StreamEnd = end
        self.torn = torn
        self.interval = float(interval)
        self.heartbeat = heartbeat
        self.retry = retry
        self.done_status = done_status
        self.headers = normalize_headers([("Content-Type", content_type), *_pairs(headers)])
        self.status = status
        self.seconds = seconds
        StreamedBody((), status=status, headers=self.headers, end=end, seconds=seconds)
        Respond(done_status)  # a bad status fails here, not in the server
        #: Each request's ``Last-Event-ID`` (None: absent), in arrival order.
        self.last_event_ids: list[str | None] = []

    @staticmethod
    def encode(event: SSEEvent) -> bytes:
        """`event` as the ``text/event-stream`` bytes a server sends: ``event:`` (unless it is
        ``"message"``), ``id:`` and ``retry:`` when set, one ``data:`` line per line of
        ``data``, then the blank line that dispatches it. `ValueError` for what no stream can
        carry (CR or LF in the type or the ID, NUL in the ID, CR in the data)."""
        lines: list[str] = []
        if event.event != "message":
            _one_line("event type", event.event)
            lines.append(f"event: {event.event}")
        if event.id is not None:
            _one_line("id", event.id)
            if "\0" in event.id:
                raise ValueError(f"an event's id with NUL is ignored by clients: {event.id!r}")
            lines.append(f"id: {event.id}")
        if event.retry is not None:
            lines.append(f"retry: {int(event.retry)}")
        if "\r" in event.data:
            raise ValueError(f"an event's data cannot hold CR (a line end): {event.data!r}")
        lines.extend(f"data: {line}" for line in event.data.split("\n"))
        return ("\n".join(lines) + "\n\n").encode("utf-8")

    def _start(self, last_event_id: str | None) -> int:
        """The index of the first event to send after `last_event_id`."""
        if last_event_id:
            for index in range(len(self.events) - 1, -1, -1):
                if self.events[index].id == last_event_id:
                    return index + 1
        return 0

    def _count(self, connection: int) -> int | None:
        if self.per_connection is None or isinstance(self.per_connection, int):
            return self.per_connection
        if connection < len(self.per_connection):
            return self.per_connection[connection]
        return None

    def _pause(self) -> list[bytes | float]:
        if not self.interval:
            return []
        if self.heartbeat is None:
            return [self.interval]
        parts: list[bytes | float] = []
        left = self.interval
        while left > self.heartbeat:
            parts += [self.heartbeat, _HEARTBEAT]
            left -= self.heartbeat
        return [*parts, left]

    def __call__(self, request: RecordedRequest) -> StreamedBody | Respond:
        """The response to `request` (see the class)."""
        last_event_id = request.header("last-event-id")
        connection = len(self.last_event_ids)
        self.last_event_ids.append(last_event_id)
        start = self._start(last_event_id)
        if start == len(self.events) and self.events:
            return Respond(self.done_status)
        count = self._count(connection)
        stop = len(self.events) if count is None else min(len(self.events), start + count)
        parts: list[bytes | float] = []
        if self.retry is not None:
            parts.append(f"retry: {self.retry}\n\n".encode())
        for index in range(start, stop):
            if index > start:
                parts += self._pause()
            parts.append(self.encode(self.events[index]))
        if stop == len(self.events):
            end: StreamEnd = "finish"
        else:
            end = self.end
            if self.torn:
                following = self.encode(self.events[stop])
                parts += [*self._pause(), following[: max(1, len(following) // 2)]]
        return StreamedBody(
            parts, status=self.status, headers=self.headers, end=end, seconds=self.seconds
        )


def _pairs(headers: HeadersInput) -> list[tuple[str, str]]:
    return list(normalize_headers(headers))
