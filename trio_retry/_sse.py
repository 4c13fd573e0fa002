"""Server-sent events: the ``text/event-stream`` format read as the WHATWG HTML standard
("Server-sent events", §9.2.5 parsing and §9.2.6 interpreting an event stream) says, and
nothing else. Pure: bytes in, :class:`SSEEvent` values out, no I/O and no clock.

The algorithm, in the standard's order:

- the bytes are UTF-8, decoded with replacement characters for invalid sequences; one byte
  order mark at the very start of a stream is dropped (a later one is data);
- a line ends at CR LF, a lone LF or a lone CR; a CR that ends one chunk and an LF that starts
  the next are one line end, not two (the line is acted on at the CR, at once: an event that
  ends in CR CR is dispatched without waiting for a byte that may never come);
- an empty line dispatches the event; a line starting with ``:`` is a comment; otherwise the
  field name is what precedes the first ``:`` (the whole line when there is none, with an empty
  value), and one space right after the colon is not part of the value;
- ``data`` appends its value and an LF to the data buffer; ``event`` sets the event type;
  ``id`` sets the last event ID buffer unless its value contains NUL; ``retry`` sets the
  reconnection time when its value is ASCII digits only; any other name is ignored;
- dispatching first makes the last event ID buffer the stream's last event ID (whether or not
  an event follows); an empty data buffer dispatches nothing; otherwise the final LF is
  removed and the event has the event type, ``"message"`` when none (or an empty one) was set;
  the data buffer and the event type are emptied either way, the last event ID is kept;
- at the end of a stream, a line or an event not yet ended by a blank line is discarded.

One choice the standard leaves to the reader: it gives each *stream* a last event ID buffer
that starts empty, so read literally, the first event of a reopened stream that carries no
``id`` would clear the ID the client reconnected with, and the reconnection after that would
send none (the server starting over). :meth:`SSEParser.restart` seeds the new stream's buffer
with the stream's last event ID instead, as Chromium's parser does: the ID stays what the
server last said.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

__all__ = ["SSEEvent", "SSEParser"]

#: CR LF, a lone CR or a lone LF (the standard's three line ends; ``str.splitlines`` would also
#: cut at VT, FF, NEL, U+2028 and others, which are data here).
_LINE_END = re.compile(r"\r\n?|\n")


@dataclass(frozen=True, slots=True, kw_only=True)
class SSEEvent:
    """One dispatched server-sent event.

    ``event`` is the event type (``"message"`` when the block set none, or set it empty);
    ``data`` the block's ``data`` lines joined with LF; ``id`` the stream's last event ID when
    the event was dispatched (kept from earlier events, and from before a reconnection, until
    the server sends another; ``None`` while it is empty); ``retry`` the reconnection time in
    milliseconds the server set since the previous event was dispatched (in this block or in
    blocks that carried no data), else ``None``.
    """

    event: str = "message"
    data: str = ""
    id: str | None = None
    retry: int | None = None


class SSEParser:
    """The event-stream interpretation of one event source, fed the bytes of its streams.

    :meth:`feed` takes bytes as they arrive, split anywhere (inside a UTF-8 sequence, the byte
    order mark, or a CR LF), and returns the events those bytes completed: however a stream is
    cut into chunks, the events are the same. :meth:`restart` ends a stream and starts the next
    (a reconnection); :attr:`last_event_id` and :attr:`retry` are what a reconnection needs.
    """

    __slots__ = (
        "_after_cr",
        "_data",
        "_decoder",
        "_event_type",
        "_id_buffer",
        "_last_event_id",
        "_partial",
        "_pending_retry",
        "_retry",
    )

    def __init__(self, last_event_id: str = "") -> None:
        """A parser at the start of a stream; ``last_event_id`` is the ID the stream was opened
        with (the ``Last-Event-ID`` sent), if any."""
        if "\0" in last_event_id or "\r" in last_event_id or "\n" in last_event_id:
            raise ValueError("last_event_id must not contain NUL, CR or LF")
        self._last_event_id = last_event_id
        self._retry: int | None = None
        self._pending_retry: int | None = None
        self._start()

    def _start(self) -> None:
        # utf-8-sig drops one BOM at the start only, and waits while the first bytes could
        # still be one; "replace" gives U+FFFD per maximal invalid subpart, as the WHATWG
        # UTF-8 decoder does.
        self._decoder = codecs.getincrementaldecoder("utf-8-sig")(errors="replace")
        self._after_cr = False  # the last character seen was a CR: an LF now ends no line
        self._partial: list[str] = []  # the current line, not yet ended
        self._data: list[str] = []  # the data buffer, one entry per data line
        self._event_type = ""
        self._id_buffer = self._last_event_id

    @property
    def last_event_id(self) -> str:
        """The stream's last event ID: set at each blank line from the last valid ``id``
        field, ``""`` when the server never sent one or cleared it. Send it as
        ``Last-Event-ID`` when reconnecting (if not empty)."""
        return self._last_event_id

    @property
    def retry(self) -> int | None:
        """The reconnection time the server last set, in milliseconds, or ``None`` when it has
        set none. Takes effect at the ``retry`` field, not at the end of its event."""
        return self._retry

    def feed(self, data: bytes) -> list[SSEEvent]:
        """The events completed by ``data``, the next bytes of the stream, in order."""
        text = self._decoder.decode(data)
        if not text:
            return []
        if self._after_cr and text[0] == "\n":
            text = text[1:]  # the LF of a CR LF whose CR ended the previous chunk
        self._after_cr = text.endswith("\r")
        events: list[SSEEvent] = []
        start = 0
        for match in _LINE_END.finditer(text):
            line = text[start : match.start()]
            if self._partial:
                self._partial.append(line)
                line = "".join(self._partial)
                self._partial.clear()
            start = match.end()
            self._process(line, events)
        if start < len(text):
            self._partial.append(text[start:])
        return events

    def restart(self) -> None:
        """End the current stream and start the next one (a reconnection): what the old
        stream left unfinished (a line, an event without its blank line, bytes of a UTF-8
        sequence) is discarded, as at the end of any stream; the last event ID and the
        reconnection time are kept."""
        self._start()

    def _process(self, line: str, events: list[SSEEvent]) -> None:
        if not line:
            self._dispatch(events)
            return
        if line[0] == ":":
            return  # a comment (servers send them as heartbeats)
        name, _, value = line.partition(":")  # no colon: the whole line, an empty value
        if value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event_type = value
        elif name == "id":
            if "\0" not in value:
                self._id_buffer = value
        elif name == "retry":
            if value and value.isascii() and value.isdigit():
                self._retry = self._pending_retry = int(value)
        # any other field name is ignored

    def _dispatch(self, events: list[SSEEvent]) -> None:
        self._last_event_id = self._id_buffer
        if self._data:
            events.append(
                SSEEvent(
                    event=self._event_type or "message",
                    data="\n".join(self._data),
                    id=self._last_event_id or None,
                    retry=self._pending_retry,
                )
            )
            self._pending_retry = None
            self._data = []
        self._event_type = ""
