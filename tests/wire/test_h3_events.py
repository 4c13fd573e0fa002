"""The one dispatch of aioquic's events (``_wire/http3/events.py``): a stream's data in
consecutive events is handled as one event, and nothing else changes. Differential: the same
scripted events, dispatched one by one and joined, give every stream the same bytes, the same
end, and leave every other event in its place."""

from __future__ import annotations

from aioquic.quic.events import PingAcknowledged, QuicEvent, StreamDataReceived

from trio_retry._wire.http3.events import _events


class Script:
    """A stand-in for the QUIC connection's event queue (``next_event`` only)."""

    def __init__(self, events: list[QuicEvent]) -> None:
        self._events = list(events)

    def next_event(self) -> QuicEvent | None:
        return self._events.pop(0) if self._events else None


def _dispatched(events: list[QuicEvent]) -> list[QuicEvent]:
    """What ``events.dispatch`` hands its handlers, in order."""
    return list(_events(Script(events)))  # type: ignore[arg-type]


def _per_stream(events: list[QuicEvent]) -> dict[int, tuple[bytes, bool]]:
    seen: dict[int, tuple[bytes, bool]] = {}
    for event in events:
        if isinstance(event, StreamDataReceived):
            data, ended = seen.get(event.stream_id, (b"", False))
            assert not ended, f"data after the end of stream {event.stream_id}"
            seen[event.stream_id] = (data + event.data, event.end_stream)
    return seen


def _data(stream_id: int, data: bytes, end: bool = False) -> StreamDataReceived:
    return StreamDataReceived(data=data, end_stream=end, stream_id=stream_id)


def test_a_streams_consecutive_data_is_one_event_and_the_rest_keeps_its_place() -> None:
    ping = PingAcknowledged(uid=7)
    script: list[QuicEvent] = [
        _data(0, b"a"),
        _data(0, b"b"),
        _data(0, b"c"),
        _data(4, b"x"),
        ping,
        _data(4, b"y"),
        _data(4, b"z", end=True),
        _data(3, b"control"),
        _data(0, b"d", end=True),
    ]
    out = _dispatched(script)
    assert out == [
        _data(0, b"abc"),
        _data(4, b"x"),
        ping,
        _data(4, b"yz", end=True),
        _data(3, b"control"),
        _data(0, b"d", end=True),
    ]
    assert _per_stream(out) == _per_stream(script)


def test_nothing_is_joined_across_a_streams_end() -> None:
    """An end is where a stream's data stops (what follows for the same id is the server's
    error, reported as such, not more of the body)."""
    script: list[QuicEvent] = [_data(0, b"body", end=True), _data(0, b"more"), _data(0, b"!")]
    assert _dispatched(script) == [_data(0, b"body", end=True), _data(0, b"more!")]


def test_a_download_round_is_one_event_per_stream() -> None:
    script: list[QuicEvent] = [_data(0, bytes([i]) * 1200) for i in range(200)]
    script.append(_data(0, b"last", end=True))
    out = _dispatched(script)
    assert len(out) == 1
    assert _per_stream(out) == _per_stream(script)
