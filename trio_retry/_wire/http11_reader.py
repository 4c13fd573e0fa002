"""What the bytes of an HTTP/1.1 response mean: the one reader an ``HTTP11Connection`` asks.

:class:`ResponseReader` turns the bytes it is fed into events, without I/O: ``NEED`` (feed
more), the final response head (checked), non-empty body data, ``END``. It reads with the fast
parser (``fast11.py``) while that parser has the exchange, and with h11 otherwise; it owns the
hand-over between them (:meth:`ResponseReader.handover`), so the connection sees one reader
and one sequence of events whichever parser made them.

The hand-over is safe because the fast parser defers *before* deciding anything about what it
does not accept (``fast11``'s module docstring); from the hand-over on, h11 sees exactly what it
would have seen had it parsed everything (tests/wire/test_fast11_differential.py).

What the server's bytes are refused for is decided here, where the parsers' state is: the
head size limit (both parsers), a head with both framings (h11's: the fast parser defers on
it), h11's refusals classified (an EOF inside the response, or bytes that are not HTTP/1.1;
words in ``http11_rules.py``). The not-HTTP sniff of the first bytes, the stages and the
transport's errors are the connection's: they are about reading, not about meaning.
"""

from __future__ import annotations

from typing import TypeAlias

import h11

from .._core.evidence import FailureCategory
from .._core.secrecy import raise_detached
from .exchange import WireRequest, content_length
from .fast11 import END, NEED, FastParser, ResponseHead, Signal, request_head
from .http11_rules import (
    END_OF_MESSAGE,
    check_head_size,
    eof_error,
    framing_conflict,
    protocol_message,
    request_event,
    unexpected,
)
from .progress import AttemptProgress, WireError

__all__ = ["END", "NEED", "Head", "ResponseReader"]

#: A final response head: status, reason (as received), raw header names and values, and, when
#: the fast parser read the head, the ``Content-Length`` the body is framed by (``None``: framed
#: otherwise) and whether it has a ``Content-Encoding`` field; h11 says neither (``None``, the
#: head's fields hold it: ``WireResponse.content_length``, ``WireResponse.encoded``).
Head: TypeAlias = tuple[int, bytes, list[tuple[bytes, bytes]], int | None, bool | None]
#: What :meth:`ResponseReader.next_event` answers.
Event: TypeAlias = Head | bytes | Signal


class ResponseReader:
    """The response side of one HTTP/1.1 connection, one exchange at a time.

    Per exchange: :meth:`begin` (for a request whose body is in memory) says whether the fast
    parser reads the response; then :meth:`next_event` (handed each read's bytes) until
    ``END``, when :attr:`reusable` says whether the connection may go on. The events come in
    one order: any number of ``NEED``, one head (1xx heads are skipped), body data, ``END``.
    After an exception the reader (and the h11 state it shares with the connection's request
    writer) no longer matches the wire: the connection is closed, never reused.
    """

    __slots__ = ("_h11", "fast", "max_header_bytes", "parser", "request", "reusable")

    def __init__(self, max_header_bytes: int, *, fast: bool) -> None:
        #: h11's state machine, made by :meth:`machine` when first needed: a connection whose
        #: exchanges the fast path has whole never makes one (five objects each of thousands
        #: of connections would keep for their life, visited by every full pass of the garbage
        #: collector: issue #41). One made late is the one made early: the fast path leaves
        #: h11 where it started (``IDLE``), and only :meth:`handover` moves it, from there.
        self._h11: h11.Connection | None = None
        self.max_header_bytes = max_header_bytes
        #: The fast path's switch (``Client(http1_fast_path=...)``).
        self.fast = fast
        #: The fast parser and its request while it has the exchange (else ``None``).
        self.parser: FastParser | None = None
        self.request: WireRequest | None = None
        #: At ``END``: whether the connection may carry the next request.
        self.reusable = False

    def machine(self) -> h11.Connection:
        """h11's state machine for this connection (made now if it was not yet), shared with
        the connection, which writes with it the requests the fast path does not."""
        conn = self._h11
        if conn is None:
            conn = self._h11 = h11.Connection(
                h11.CLIENT, max_incomplete_event_size=self.max_header_bytes
            )
        return conn

    def begin(self, request: WireRequest) -> bytes | None:
        """The request head the fast path writes for ``request`` (its body in memory), the
        fast parser then reading the response; ``None`` when the fast path is off or the
        request does not qualify (``fast11.request_head``): h11 has the exchange."""
        if not self.fast:
            return None
        head = request.fast_head  # (built once per WireRequest, which a template reuses)
        if head is None:
            head = request.fast_head = request_head(
                request.method, request.target, request.headers, content_length(request)
            )
        if head is not None:  # the exact bytes h11 would write (fast11, tested against h11)
            self.parser = FastParser(self.max_header_bytes)
            self.request = request
        return head

    def next_event(
        self, progress: AttemptProgress, received: bytes | bytearray | None = None
    ) -> Event:
        """``NEED``, the final head, the next non-empty body data, or ``END``; first taking
        in ``received``, the bytes of a read (``b""``: the end of the stream, only inside a
        body: an EOF before the head is complete is the connection's to judge). At ``END``,
        :attr:`reusable` says whether the connection may carry the next request (the reader
        is then ready for it).

        Raises :class:`WireError` for what the server must not send: a head over
        ``max_header_bytes`` or with both framings, anything h11 refuses (an EOF inside the
        response is ``CONNECTION_BROKEN``, anything else ``REMOTE_PROTOCOL``)."""
        parser = self.parser
        if received is not None:
            if parser is None:
                self.machine().receive_data(bytes(received))
            elif received:
                parser.buf += received
            else:  # an EOF mid-body: h11 says what it means
                self.handover()
                self.machine().receive_data(b"")
                parser = None
        if parser is not None:
            event = parser.next_event()
            # (the commonest first: body data, then NEED; one isinstance per head only)
            if type(event) is bytes or event is NEED:
                return event
            if event is END:
                # h11 stayed IDLE: the fast path had the whole exchange. Bytes past the end
                # of the response, or a response that asked to close: not reusable.
                self.parser = self.request = None
                self.reusable = parser.keep_alive and not parser.buf
                return END
            if isinstance(event, ResponseHead):
                if progress.bytes_received > self.max_header_bytes:  # cheap bound first
                    check_head_size(progress, event.headers, self.max_header_bytes)
                length = event.length
                return (
                    event.status,
                    event.reason,
                    event.headers,
                    length if length >= 0 else None,
                    event.encoded,
                )
            self.handover()  # DEFER
        return self._h11_event(progress)

    def _h11_event(self, progress: AttemptProgress) -> Event:
        conn = self.machine()
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                raise_detached(self._refused(progress, exc))  # h11's text may quote a value
            # (h11's events are ABCs, so an isinstance costs a Python call; h11 makes exactly
            # these types)
            if type(event) is h11.Data:
                if event.data:
                    return bytes(event.data)
            elif event is h11.NEED_DATA:
                return NEED
            elif type(event) is h11.EndOfMessage:
                self.reusable = self._h11_next_cycle()
                return END
            elif type(event) is h11.Response:
                return self._h11_head(event, progress)
            elif type(event) is not h11.InformationalResponse:  # (1xx heads are skipped)
                raise unexpected(progress, event)

    def _h11_head(self, event: h11.Response, progress: AttemptProgress) -> Head:
        headers = event.headers.raw_items()
        if progress.bytes_received > self.max_header_bytes:  # cheap bound first
            check_head_size(progress, headers, self.max_header_bytes)
        framing = framing_conflict(headers)
        if framing is not None:
            raise WireError.at(progress, FailureCategory.REMOTE_PROTOCOL, framing)
        if event.http_version != b"1.1":  # an HTTP/1.0 server (the fast parser defers those)
            progress.http_version = "HTTP/" + event.http_version.decode("ascii")
        return (event.status_code, event.reason, headers, None, None)

    def _refused(self, progress: AttemptProgress, exc: h11.RemoteProtocolError) -> WireError:
        """What h11 refusing the server's bytes means: an EOF inside the response is
        ``CONNECTION_BROKEN``, anything else ``REMOTE_PROTOCOL``."""
        if self.machine().their_state is h11.ERROR and eof_error(exc):
            return WireError.at(
                progress,
                FailureCategory.CONNECTION_BROKEN,
                "the server closed the connection before the response was complete",
            )
        return WireError.at(progress, FailureCategory.REMOTE_PROTOCOL, protocol_message(exc))

    def handover(self) -> None:
        """The fast parser stopped: bring h11 to where it stands and let h11 go on.

        h11 is sent the request's events (their bytes were written already and are dropped),
        then fed what :meth:`FastParser.handover` says (nothing before a head; a synthetic
        head with the same framing and keep-alive inside a body), then the unconsumed bytes,
        and the synthetic events are consumed. From here h11 sees exactly what it would have
        seen had it parsed everything (tests/wire/test_fast11_differential.py)."""
        parser, request = self.parser, self.request
        assert parser is not None
        assert request is not None
        self.parser = self.request = None
        conn = self.machine()
        conn.send(request.h11_event or request_event(request, content_length(request)))
        assert isinstance(request.body, bytes)
        if request.body:
            conn.send(h11.Data(data=request.body))
        conn.send(END_OF_MESSAGE)
        prefix, synthetic = parser.handover()
        if prefix or parser.buf:
            conn.receive_data(prefix + parser.buf)
        for _ in range(synthetic):
            conn.next_event()

    def _h11_next_cycle(self) -> bool:
        """At h11's end of a response: whether the connection may carry the next request
        (then h11 is ready for it).

        Bytes already buffered past the end of this response were sent before the next
        request existed: they cannot be its response. Reusing the connection would hand them
        to the next request as if the server had answered it (a response desync), so it is
        closed instead. (Bytes arriving later are caught by the connection's
        ``peer_closed``.) Likewise when the response asked to close (keep-alive off)."""
        conn = self.machine()
        if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            if not conn.trailing_data[0]:
                conn.start_next_cycle()
                return True
        return False
